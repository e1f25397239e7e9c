"""The operator's commands of the ``cachegate`` CLI: keys, and a running gateway's admin API.

    cachegate key new [--tenant NAME | --admin]    a fresh key, its SHA-256 and the YAML to use
    cachegate stats [--url URL] [--key KEY]         a terminal summary of a running gateway
    cachegate cache ls [--namespace NS] [--model M] [--kind exact|semantic] [--search TEXT]
    cachegate cache show ID | rm ID | flush [--namespace NS] [--prefix]

``--url`` defaults to ``$CACHEGATE_URL`` or http://127.0.0.1:8080 (the admin port, when the
gateway has one), ``--key`` to ``$CACHEGATE_ADMIN_KEY``. A gateway that cannot be reached or
refuses the key is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import httpx
import msgspec

from .auth import digest, new_key
from .config import TenantName

__all__ = ["add_commands"]

_DEFAULT_URL = "http://127.0.0.1:8080"
_TIMEOUT_S = 10.0
#: ``cache ls`` and ``cache flush`` read the whole store, and a flush first waits up to 10 s for
#: the cache writes in progress: cut at 10 s, a flush that went on regardless was reported as
#: "cannot reach the gateway (timed out)"
_SLOW = httpx.Timeout(_TIMEOUT_S, read=300.0)


class _Failed(Exception):
    """One line for stderr: what went wrong talking to the gateway."""


def add_commands(commands: Any) -> None:
    """Add ``key``, ``stats`` and ``cache`` to the CLI's subparsers."""
    key = commands.add_parser("key", help="make gateway or admin keys (printed with their digest)")
    key_commands = key.add_subparsers(title="key commands", metavar="ACTION", required=True)
    new = key_commands.add_parser(
        "new", help="print a fresh random key, its SHA-256 digest and the YAML that uses it"
    )
    who = new.add_mutually_exclusive_group()
    who.add_argument(
        "--tenant", type=_tenant, metavar="NAME", help="the tenant the key belongs to (auth.keys)"
    )
    who.add_argument("--admin", action="store_true", help="an admin key (admin.api_key_sha256)")
    new.set_defaults(func=_key_new)

    stats = commands.add_parser("stats", help="a summary of a running gateway (/admin/stats)")
    _client_options(stats)
    stats.set_defaults(func=_run(_stats))

    cache = commands.add_parser("cache", help="list, show, remove or flush cached answers")
    cache_commands = cache.add_subparsers(title="cache commands", metavar="ACTION", required=True)
    ls = cache_commands.add_parser("ls", help="list cached answers, newest first")
    _client_options(ls)
    ls.add_argument("--namespace", metavar="NS", help='only this namespace ("" is the default one)')
    ls.add_argument("--model", metavar="M", help="only this model")
    ls.add_argument("--tenant", metavar="T", help="only this tenant")
    ls.add_argument("--kind", choices=("exact", "semantic"), help="exact-only or searchable")
    ls.add_argument("--search", metavar="TEXT", help="question text contains (admin.show_text)")
    ls.add_argument("--limit", type=int, default=20, metavar="N", help="answers shown, 1 to 500 "
                    "(default 20)")  # fmt: skip
    ls.add_argument("--offset", type=int, default=0, metavar="N", help="skip the first N (the "
                    "next page: --offset 20)")  # fmt: skip
    ls.set_defaults(func=_run(_ls))
    show = cache_commands.add_parser("show", help="one cached answer in full")
    _client_options(show)
    show.add_argument("id", type=_entry_id)
    show.set_defaults(func=_run(_show))
    rm = cache_commands.add_parser("rm", help="remove one cached answer")
    _client_options(rm)
    rm.add_argument("id", type=_entry_id)
    rm.set_defaults(func=_run(_rm))
    flush = cache_commands.add_parser("flush", help="drop all cached answers (or a namespace)")
    _client_options(flush)
    flush.add_argument(
        "--namespace", metavar="NS", help='only this namespace ("" is the default one)'
    )
    flush.add_argument("--prefix", action="store_true", help="also the prefix KV caches")
    flush.set_defaults(func=_run(_flush))


# ---------------------------------------------------------------------------------------------
# commands


def _entry_id(value: str) -> str:
    """An entry's id as ``cache ls`` prints it (digits: '?x' would ask another route)."""
    if not (value.isascii() and value.isdigit()):
        raise argparse.ArgumentTypeError(f"{value!r}: an entry id is the number 'cache ls' shows")
    return value


def _tenant(name: str) -> str:
    """A tenant name as ``auth.keys`` takes it (its rule: the YAML printed must load)."""
    try:
        return msgspec.convert(name, TenantName)
    except msgspec.ValidationError:
        raise argparse.ArgumentTypeError(
            f"{name!r}: a tenant name is not empty and has no control characters"
        ) from None


def _key_new(args: argparse.Namespace) -> int:
    key = new_key()
    print(f"key:    {key}")
    print(f"sha256: {digest(key)}")
    print("\n# in cachegate.yaml (the file then holds no secret):")
    # (both quoted: a tenant "2024", "no" or "#ops", and a digest of digits alone, stay text)
    sha = json.dumps(digest(key))
    if args.admin:
        print(f"admin:\n  api_key_sha256: {sha}")
    else:
        tenant = json.dumps(args.tenant or "TENANT")
        print(f"auth:\n  keys:\n    - tenant: {tenant}\n      key_sha256: {sha}")
    return 0


def _stats(client: httpx.Client, args: argparse.Namespace) -> None:
    stats = _get(client, "/admin/stats")
    cache = stats.get("cache") or {}
    hits = cache.get("hits") or {}
    lookups = cache.get("lookups") or 0
    served = (hits.get("exact") or 0) + (hits.get("semantic") or 0)
    print(f"gateway {args.url}  up {_duration(stats.get('uptime_s') or 0)}  "
          f"models: {', '.join(stats.get('models') or [])}")  # fmt: skip
    if stats.get("cache") is None:
        print("response cache: off")
    else:
        rate = f"{100 * served / lookups:.1f}%" if lookups else "-"
        # (of lookups since start: the dashboard's card is of the kept history's answers)
        print(f"response cache: {cache.get('entries', 0)} answers, {lookups} lookups, hit rate "
              f"{rate} of lookups (exact {hits.get('exact', 0)}, semantic {hits.get('semantic', 0)}), "
              f"guard rejections {cache.get('guard_rejections', 0)}, "
              f"semantic tier {cache.get('semantic')}")  # fmt: skip
    _audit(cache.get("audit"))
    _admission(stats.get("admission"))
    for name, backend in (stats.get("backends") or {}).items():
        prefix = backend.get("prefix_cache")
        if prefix:
            print(f"prefix KV cache of {name}: {_bytes(prefix['bytes'])} of "
                  f"{_bytes(prefix['max_bytes'])}, hit {prefix['hit_tokens']} of "
                  f"{prefix['queried_tokens']} tokens, {prefix['evictions']} evictions")  # fmt: skip
    _ledger(stats.get("ledger") or {}, stats.get("priced"))


def _ledger(ledger: dict[str, Any], priced: list[str] | None) -> None:
    """The usage ledger as a table; the money of a model without a price (counted at $0) is
    "unknown", not free. (``priced``: None from a gateway older than the list: all are.)"""

    def usd(model: str, value: float) -> str:
        return _usd(value) if priced is None or model in priced else "unknown"

    rows = [
        [tenant, model, row["requests"], row["calls_avoided"],
         row["avoided_input_tokens"] + row["avoided_output_tokens"],
         row["prefix_cached_tokens"] + row["provider_cached_tokens"],
         row["unread_write_tokens"], f"{row['audit_calls']} ({usd(model, row['audit_usd'])})",
         usd(model, row["saved_usd"])]
        for tenant, models in ledger.items()
        for model, row in models.items()
    ]  # fmt: skip
    if rows:
        unknown = any("unknown" in row[-1] for row in rows)
        note = "; unknown: no price set for the model (prices: in the config)" if unknown else ""
        print(f"\nsavings (usage ledger{note}):")
        head = ["TENANT", "MODEL", "REQUESTS", "CALLS SAVED", "TOKENS SAVED", "CACHED INPUT",
                "UNREAD WRITES", "AUDITS (SPENT)", "USD SAVED"]  # fmt: skip
        _table(head, rows)


def _usd(value: float) -> str:
    """``$0.0012``; a loss is ``-$0.0012`` (not ``$-0.0012``); an amount under half a
    hundredth of a cent ``<$0.0001`` (``$0.0000`` read as free)."""
    text = f"${abs(value):.4f}"
    if value and text == "$0.0000":
        text = "<$0.0001"
    return f"-{text}" if value < 0 and text != "$0.0000" else text


def _rate(estimate: dict[str, Any]) -> str:
    """An audit scope's estimated wrong-hit rate; ``unknown`` when every control was judged
    wrong (the comparison tells nothing: the rate was shown as a figure, often 100%)."""
    if estimate.get("controls") and estimate["control_wrong"] == estimate["controls"]:
        return "unknown"
    return f"{100 * estimate['false_hit_rate']:.2f}%" if estimate["audits"] else "-"


def _admission(door: dict[str, Any] | None) -> None:
    """Admission by event-loop lag (``admission``), when it is on."""
    if door is None:
        return
    limit = f"{door['rate']:.0f} requests/s let in" if door["rate"] else "open"
    print(f"admission: event loop {1000 * door['loop_lag_seconds']:.1f} ms late, {limit}, "
          f"{door['queued']} waiting; {door['waited']} of {door['admitted']} requests waited "
          f"({door['wait_seconds']:.1f} s in all)")  # fmt: skip


def _audit(audit: dict[str, Any] | None) -> None:
    """The semantic audit's estimates (``cache.audit``), when it runs."""
    if not audit:
        return
    controls = audit.get("controls", False)
    print(f"semantic audit: {100 * audit['rate']:g}% of semantic hits re-asked, answers "
          f"compared by {audit['comparison']}, "
          f"{'net of controls' if controls else 'no controls'}, {audit['running']} running")  # fmt: skip
    rows = [
        [a["tenant"], a["model"], a["namespace"] or '""', a["audits"], a["wrong"],
         *([f"{a['control_wrong']} of {a['controls']}"] if controls else []),
         _rate(a),
         "{:.2f}% - {:.2f}%".format(*(100 * v for v in a["interval95"])) if a["audits"] else "-",
         a["errors"], a["dropped"]]
        for a in audit["estimates"]
    ]  # fmt: skip
    head = ["TENANT", "MODEL", "NAMESPACE", "AUDITED", "WRONG",
            *(["CONTROLS WRONG"] if controls else []), "WRONG-HIT RATE", "95% INTERVAL",
            "ERRORS", "DROPPED"]  # fmt: skip
    if tighten := audit.get("auto_tighten"):
        print(f"auto-tighten: above {100 * tighten['bound']:g}% wrong, "
              f"judged in windows of {tighten['window']} audits")  # fmt: skip
        head.append("THRESHOLD (STEPS)")
        for row, a in zip(rows, audit["estimates"], strict=True):
            t = a["tightened"]
            row.append(f"{t['score_threshold']:.4f} ({t['steps']})" if t["steps"] else "configured")
    if rows:
        _table(head, rows)


def _ls(client: httpx.Client, args: argparse.Namespace) -> None:
    params: dict[str, Any] = {"limit": args.limit, "offset": args.offset}
    for name, param in (("namespace", "namespace"), ("model", "model"), ("tenant", "tenant"),
                        ("kind", "kind"), ("search", "q")):  # fmt: skip
        if getattr(args, name) is not None:
            params[param] = getattr(args, name)
    page = _get(client, "/admin/cache/entries", params, timeout=_SLOW)
    rows = [
        [e["id"], e["kind"], e["model"], e["tenant"], e["namespace"] or '""',
         _duration(e["age_s"]), e["hits"], _cut(e["question"], 50)]
        for e in page["data"]
    ]  # fmt: skip
    _table(["ID", "KIND", "MODEL", "TENANT", "NAMESPACE", "AGE", "HITS", "QUESTION"], rows)
    shown = f"{page['offset'] + 1}-{page['offset'] + len(rows)}" if rows else "none"
    print(f"\n{shown} of {page['total']} matching answers")


def _show(client: httpx.Client, args: argparse.Namespace) -> None:
    entry = _get(client, f"/admin/cache/entries/{args.id}")
    for name in ("id", "kind", "model", "tenant", "namespace", "hits", "finish_reason"):
        value = '""' if name == "namespace" and entry[name] == "" else str(entry[name])
        print(f"{name + ':':15}{_printable(value)}")  # (the default namespace as `ls` shows it)
    created = datetime.datetime.fromtimestamp(entry["created"], datetime.UTC)
    print(f"{'stored:':15}{created:%Y-%m-%d %H:%M:%S} UTC ({_duration(entry['age_s'])} ago)")
    expires = entry.get("expires")
    print(
        f"{'expires:':15}{'never' if expires is None else _duration(expires - entry['created']) + ' after'}"
    )
    print(f"{'usage:':15}{entry.get('usage')}")
    print(f"{'question:':15}{_printable(entry['question'])}")
    print(f"{'answer:':15}{_printable(entry['answer'])}")


def _rm(client: httpx.Client, args: argparse.Namespace) -> None:
    _call(client, "DELETE", f"/admin/cache/entries/{args.id}")
    print(f"removed {args.id}")


def _flush(client: httpx.Client, args: argparse.Namespace) -> None:
    # NOTE: a gateway without a response cache (a `cachegate worker`, cache.enabled: false)
    # answers a flush with "flushed": 0 all the same: that read as success, nothing dropped
    answers = _get(client, "/admin/stats").get("cache") is not None
    if not answers and not args.prefix:
        raise _Failed(f"{client.base_url} has no response cache (a `cachegate worker`, or "
                      "cache.enabled: false): no answers to flush; --prefix flushes its "
                      "prefix KV caches")  # fmt: skip
    body: dict[str, Any] = {"prefix": args.prefix, "answers": answers}
    if args.namespace is not None:
        body["namespace"] = args.namespace
    result = _call(client, "POST", "/admin/cache/flush", json=body, timeout=_SLOW)
    where = "all namespaces" if args.namespace is None else f"namespace {args.namespace!r}"
    done = f"flushed {result['flushed']} answers ({where})" if answers else "no response cache"
    print(f"{done}; prefix KV freed: {_bytes(result['prefix_bytes_freed'])}")


# ---------------------------------------------------------------------------------------------
# helpers


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=os.environ.get("CACHEGATE_URL", _DEFAULT_URL),
        help=f"the gateway (or its admin port); default $CACHEGATE_URL or {_DEFAULT_URL}",
    )
    parser.add_argument(
        "--key",
        default=os.environ.get("CACHEGATE_ADMIN_KEY"),
        help="admin key (admin.api_key); default $CACHEGATE_ADMIN_KEY",
    )


def _run(command: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        url = args.url.rstrip("/")
        try:
            headers = _auth_headers(args.key)
            try:
                client = httpx.Client(base_url=url, headers=headers, timeout=_TIMEOUT_S)
            except httpx.InvalidURL as exc:
                raise _Failed(f"--url {args.url}: {exc}") from None
            with client:
                command(client, args)
        except _Failed as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0

    return run


def _auth_headers(key: str | None) -> dict[bytes, bytes]:
    """The admin key as a bearer token, as the gateway reads it (latin-1, spaces stripped).

    NOTE: a key read from a file or secret with its newline was refused by the HTTP client
    ("cannot reach the gateway (Illegal header value ...)"), a non-ASCII one with a traceback.
    """
    key = (key or "").strip()
    if not key:
        return {}
    if _CONTROL.search(key):
        raise _Failed("--key (or CACHEGATE_ADMIN_KEY) holds a control character or line break")
    try:
        return {b"authorization": f"Bearer {key}".encode("latin-1")}
    except UnicodeEncodeError:
        raise _Failed("--key (or CACHEGATE_ADMIN_KEY) holds characters that an HTTP header "
                      "cannot carry") from None  # fmt: skip


def _get(
    client: httpx.Client, path: str, params: dict[str, Any] | None = None, **options: Any
) -> Any:
    return _call(client, "GET", path, params=params, **options)


def _call(client: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
    try:
        response = client.request(method, path, **kwargs)
    except httpx.ReadTimeout:  # (reached: it may still be doing it)
        seconds = (kwargs.get("timeout") or client.timeout).read
        raise _Failed(f"the gateway at {client.base_url} did not answer {method} {path} within "
                      f"{seconds:g} s (it may still be doing it)") from None  # fmt: skip
    except httpx.HTTPError as exc:
        raise _Failed(f"cannot reach the gateway at {client.base_url} ({_reason(exc)})") from None
    if _code(response) == "admin_closed":  # (no key opens them: the gateway's config must)
        raise _Failed(f"the gateway's admin routes are closed ({response.status_code}: "
                      f"{_message(response)})")  # fmt: skip
    if response.status_code == 401:
        raise _Failed(f"the gateway refused the admin key ({response.status_code}: "
                      f"{_message(response)}); pass --key or set CACHEGATE_ADMIN_KEY")  # fmt: skip
    if response.status_code == 404 and _code(response) == "not_found":
        # (not the gateway's admin routes: a data port with admin_port set, or a URL with /v1)
        raise _Failed(f"{client.base_url} has no {path}: give --url the gateway's admin port "
                      "(server.admin_port, when set), without /v1")  # fmt: skip
    if response.status_code >= 400:
        raise _Failed(f"{response.status_code}: {_message(response)}")
    try:
        return response.json()
    except ValueError:
        raise _Failed(f"{client.base_url} did not answer JSON: is it a cachegate?") from None


def _code(response: httpx.Response) -> str | None:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None


def _message(response: httpx.Response) -> str:
    """The error's message, on one line and with its control characters as escapes.

    NOTE: an answer that is not the gateway's (a proxy's 502 page in front of it) was printed
    as it was: several lines, and control characters the terminal ran.
    """
    try:
        text = str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        text = response.text[:200]
    return _one_line(text)


def _reason(exc: httpx.HTTPError) -> str:
    text = str(exc) or type(exc).__name__
    return "connection refused" if "refused" in text.lower() else text


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    # (printable: a tenant behind a front gateway holds the partition's \x1f separator)
    cells = [[_printable(str(c)) for c in row] for row in [head, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


#: C0 and C1 control characters but tab and newline: a client's text (its question, the answer)
#: holding ESC or CR could otherwise move the cursor, rewrite lines or retitle the terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    """``text`` with its control characters written as escapes (``\\x1b``), never run."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _one_line(text: str) -> str:
    """``text`` on one line (its runs of whitespace one space), its control characters escaped."""
    return _printable(" ".join(text.split()))


def _cut(text: str, width: int) -> str:
    text = _one_line(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _duration(seconds: float) -> str:
    seconds = max(float(seconds), 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
