"""Gateway overhead: the fake upstream called directly vs through `cachegate serve`.

    python -m bench.overhead            # writes bench/results/overhead.json, updates docs/benchmarks.md
    python -m bench.overhead --baseline ../other-checkout   # also that tree's gateway, side by side

Three processes on 127.0.0.1: the fake upstream (tests/fake_upstream.py), the gateway, and this
load generator. For each scenario, requests go directly to the upstream and through the gateway
with the cache bypassed (``cache-control: no-cache, no-store``), in alternating rounds, so both
sides see the same machine load; then exact-hit latency is measured through HTTP. The load
generator's own cost is in both sides and cancels out of the "added" column. Chat Completions,
the Responses API (``/v1/responses``) and Anthropic Messages (``/v1/messages``, against the fake
Anthropic API of tests/fake_anthropic.py, through a ``backend: anthropic`` model) are measured
the same way, in the same run.

``--baseline TREE`` starts a second gateway from another source tree (``python -m gateway`` run
there, e.g. a worktree of an earlier commit) and adds it to the rounds: a change's effect on
the overhead, measured side by side rather than across runs (for each API that tree serves).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.report import (
    CACHEGATE,
    command,
    free_port,
    percentile,
    publish,
    run_header,
    running,
    table,
)

ROOT = Path(__file__).resolve().parents[1]
BYPASS = {"cache-control": "no-cache, no-store"}
PASS_HEADER = ["request", "concurrency", "requests", "direct p50", "gateway p50", "added p50",
               "added TTFB p50", "direct p99", "gateway p99"]  # fmt: skip
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
#: Sent with every Messages request, direct and through the gateway alike.
ANTHROPIC = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}


@dataclass(frozen=True)
class Servers:
    """Base URLs: the fake OpenAI and Anthropic upstreams, the gateway and the baseline's."""

    upstream: str
    anthropic: str
    gateway: str
    baseline: str | None
    #: The APIs the baseline serves (an older tree may predate some).
    baseline_apis: frozenset[str] = frozenset()

    def direct(self, api: str) -> str:
        return self.anthropic if api == "messages" else self.upstream


@contextlib.contextmanager
def servers(baseline: Path | None = None) -> Iterator[Servers]:
    """Start the fake upstreams, the gateway (and the baseline's); yield their base URLs."""
    up_port, an_port, gw_port, base_port = free_port(), free_port(), free_port(), free_port()
    up, an = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{an_port}"
    gw, base = f"http://127.0.0.1:{gw_port}", f"http://127.0.0.1:{base_port}"
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench.yaml"
        config.write_text(_config(f"{tmp}/data", up, an))
        processes = [
            ([sys.executable, "-m", "tests.fake_upstream", "--port", str(up_port)], f"{up}/_stats"),
            # (the fake Anthropic API answers 404 to GET /: up, all the same)
            ([sys.executable, "-m", "tests.fake_anthropic", "--port", str(an_port)], an),
            ([CACHEGATE, "serve", "--config", str(config), "--port", str(gw_port)], f"{gw}/readyz"),
        ]  # fmt: skip
        apis: frozenset[str] = frozenset()
        if baseline is not None:
            # `python -m gateway` from the baseline's directory imports that tree's code
            launcher = (
                f"import os, runpy, sys; os.chdir({str(baseline)!r}); sys.path.insert(0, '');"
                " runpy.run_module('gateway', run_name='__main__')"
            )
            apis = _apis_of(baseline)
            base_config = Path(tmp) / "baseline.yaml"  # (its own data_dir: one process each)
            base_config.write_text(
                _config(f"{tmp}/baseline", up, an if "messages" in apis else None)
            )
            argv = [sys.executable, "-c", launcher, "serve", "--config", str(base_config),
                    "--port", str(base_port)]  # fmt: skip
            processes.append((argv, f"{base}/readyz"))
        with running(processes, stop_timeout=20):
            yield Servers(up, an, gw, base if baseline is not None else None, apis)


def _config(data_dir: str, upstream: str, anthropic: str | None) -> str:
    models = f"  fake-model: {{backend: openai, base_url: '{upstream}/v1', api_key: sk}}\n"
    if anthropic is not None:
        models += (f"  fake-claude: {{backend: anthropic, base_url: '{anthropic}',"
                   f" api_key: {ANTHROPIC['x-api-key']}}}\n")  # fmt: skip
    return (f"data_dir: {data_dir}\nserver: {{log_level: warning}}\n"
            f"cache: {{semantic: {{enabled: false}}}}\nmodels:\n{models}")  # fmt: skip


def _apis_of(tree: Path) -> frozenset[str]:
    """The APIs a source tree's gateway serves (an older tree may predate some)."""
    gateway = tree / "gateway"
    found = {"chat"}
    if (gateway / "responses.py").exists():
        found.add("responses")
    if (gateway / "anthropic.py").exists():
        found.add("messages")
    return frozenset(found)


@dataclass(frozen=True)
class Scenario:
    name: str
    stream: bool
    concurrency: int
    requests: int
    #: What the fake upstream is asked to simulate (model latency), sent as the body's "fake".
    fake: dict[str, Any]
    api: str = "chat"  # "chat", "responses" or "messages" (see PATHS)


def scenarios(scale: float) -> list[Scenario]:
    """Pure overhead at concurrency 1 (an instant upstream); at 50 concurrent requests, an
    upstream that takes ~0.5 s like a model does, so the load stays what 50 open LLM calls
    produce rather than a flood that saturates the 2 cores (the load generator included)."""
    n1, n50 = int(300 * scale), int(500 * scale)
    slow_json = {"delay": 0.5}
    slow_stream = {"delay": 0.05, "chunk_delay": 0.03, "chunks": 16}
    return [
        Scenario("json", False, 1, n1, {}),
        Scenario("stream", True, 1, n1, {}),
        Scenario("responses json", False, 1, n1, {}, "responses"),
        Scenario("responses stream", True, 1, n1, {}, "responses"),
        Scenario("messages json", False, 1, n1, {}, "messages"),
        Scenario("messages stream", True, 1, n1, {}, "messages"),
        Scenario("json, 0.5 s model", False, 50, n50, slow_json),
        Scenario("stream, 0.5 s model", True, 50, n50, slow_stream),
    ]


async def _load(
    base: str, scenario: Scenario, *, headers: dict[str, str], vary: bool = True
) -> tuple[list[float], list[float]]:
    """(time to first byte, time to the last byte) of each request, in seconds."""
    first_bytes: list[float] = []
    totals: list[float] = []
    limits = httpx.Limits(
        max_connections=scenario.concurrency, max_keepalive_connections=scenario.concurrency
    )
    sent = {**headers, **(ANTHROPIC if scenario.api == "messages" else {})}
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
        counter = iter(range(scenario.requests))

        async def worker() -> None:
            for i in counter:
                body = _body(scenario, f"benchmark question {i if vary else 0}")
                for attempt in range(2):
                    try:
                        first, total = await _one(client, PATHS[scenario.api], body, sent)
                        break
                    except (httpx.ReadError, httpx.RemoteProtocolError):
                        # NOTE: a kept-alive connection the server closed while this process
                        # was starved of CPU (uvicorn closes idle ones after 5 s); not timed
                        if attempt:
                            raise
                        STALE_RETRIES[0] += 1
                totals.append(total)
                first_bytes.append(first)

        await asyncio.gather(*(worker() for _ in range(scenario.concurrency)))
    return first_bytes, totals


#: Requests sent again after a stale kept-alive connection (reported with the results).
STALE_RETRIES = [0]


def _body(scenario: Scenario, text: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "fake-model", "stream": scenario.stream}
    if scenario.api == "responses":
        body["input"] = text
    elif scenario.api == "messages":
        body |= {"model": "fake-claude", "max_tokens": 64}
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["messages"] = [{"role": "user", "content": text}]
    if scenario.fake:
        body["fake"] = scenario.fake
    return body


async def _one(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[float, float]:
    """(time to first byte, time to the last byte) of one request."""
    started = time.perf_counter()
    first: float | None = None
    async with client.stream("POST", path, json=body, headers=headers) as r:
        async for _ in r.aiter_raw():
            if first is None:
                first = time.perf_counter() - started
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}")
    total = time.perf_counter() - started
    return (first if first is not None else total), total


def _pass_through(every: list[Scenario], rounds: int, at: Servers) -> list[dict[str, Any]]:
    """Each scenario direct, through the gateway (and the baseline's), in rounds.

    NOTE: a round runs every side of every scenario, so all rows sample the same stretches of
    the machine's (shared, drifting) load: compared across rows, not only within one. (Rows
    of 50 concurrent requests run apart: the connections they leave idle are closed seconds
    later, which would land in the next rows' rounds.)
    """
    sides = [_sides(scenario, at) for scenario in every]
    measured: list[dict[str, tuple[list[float], list[float]]]] = [
        {k: ([], []) for k in these} for these in sides
    ]
    for _ in range(rounds):
        for scenario, these, into in zip(every, sides, measured, strict=True):
            for name, (url, headers) in these.items():
                print(
                    f"overhead: {scenario.name} @ {scenario.concurrency}: {name}", file=sys.stderr
                )
                first, total = asyncio.run(_load(url, scenario, headers=headers))
                into[name][0].extend(first)
                into[name][1].extend(total)
    return [_row(scenario, into) for scenario, into in zip(every, measured, strict=True)]


def _sides(scenario: Scenario, at: Servers) -> dict[str, tuple[str, dict[str, str]]]:
    sides = {"direct": (at.direct(scenario.api), {}), "gateway": (at.gateway, BYPASS)}
    if at.baseline is not None and scenario.api in at.baseline_apis:
        sides["baseline"] = (at.baseline, BYPASS)
    return sides


def _row(
    scenario: Scenario, measured: dict[str, tuple[list[float], list[float]]]
) -> dict[str, Any]:
    row: dict[str, Any] = {"name": scenario.name, "concurrency": scenario.concurrency,
                           "requests": len(measured["direct"][1])}  # fmt: skip
    for name, (first, total) in measured.items():
        row |= {f"{name}_p50": percentile(total, 50), f"{name}_p99": percentile(total, 99),
                f"{name}_ttfb_p50": percentile(first, 50)}  # fmt: skip
    return row


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def run(rounds: int, scale: float, baseline: Path | None = None) -> dict[str, Any]:
    results: dict[str, Any] = {**run_header(), "scenarios": []}
    with servers(baseline) as at:
        gateway = at.gateway
        for api in PATHS:
            warm = Scenario("warm-up", False, 4, 200, {}, api)
            asyncio.run(_load(at.direct(api), warm, headers={}))
            for url in (gateway, at.baseline):
                if url is not None and (url == gateway or api in at.baseline_apis):
                    asyncio.run(_load(url, warm, headers=BYPASS))
        every = scenarios(scale)
        for concurrency in sorted({s.concurrency for s in every}):  # (50's leftovers apart)
            group = [s for s in every if s.concurrency == concurrency]
            results["scenarios"] += _pass_through(group, rounds, at)
        # exact hits: one stored answer asked again and again
        hit = Scenario("hit", False, 1, 1, {})
        asyncio.run(_load(gateway, hit, headers={}, vary=False))
        hits: dict[str, Any] = {}
        for concurrency, n in ((1, int(500 * scale)), (50, int(2000 * scale))):
            for stream in (False, True):
                scenario = Scenario("hit", stream, concurrency, n, {})
                _, lat = asyncio.run(_load(gateway, scenario, headers={}, vary=False))
                hits[f"{'stream' if stream else 'json'}@{concurrency}"] = {
                    "p50": percentile(lat, 50), "p99": percentile(lat, 99), "requests": len(lat)}  # fmt: skip
        results["exact_hits"] = hits
    results["loadavg_end"] = os.getloadavg()
    results["stale_retries"] = STALE_RETRIES[0]
    return results


def markdown(results: dict[str, Any], command: str) -> str:
    rows = []
    for s in results["scenarios"]:
        added = s["gateway_p50"] - s["direct_p50"]
        added_ttfb = s["gateway_ttfb_p50"] - s["direct_ttfb_p50"]
        rows.append([s["name"], s["concurrency"], s["requests"], _ms(s["direct_p50"]), _ms(s["gateway_p50"]),
                     f"**{_ms(added)}**", f"{_ms(added_ttfb)}", _ms(s["direct_p99"]), _ms(s["gateway_p99"])])  # fmt: skip
    base_rows = [[s["name"], s["concurrency"], _ms(s["baseline_p50"] - s["direct_p50"]),
                  f"**{_ms(s['gateway_p50'] - s['direct_p50'])}**",
                  _ms(s["baseline_p99"]), _ms(s["gateway_p99"])]
                 for s in results["scenarios"] if "baseline_p50" in s]  # fmt: skip
    compared = [
        "",
        f"The same rounds through a gateway of `{results.get('baseline')}` (baseline) and of",
        "this code, side by side (added = gateway p50 − direct p50):",
        "",
        table(["request", "concurrency", "baseline added p50", "this code added p50",
               "baseline p99", "this code p99"], base_rows),
    ] if base_rows else []  # fmt: skip
    hit_rows = [[k.split("@")[0], k.split("@")[1], v["requests"], f"**{_ms(v['p50'])}**", _ms(v["p99"])]
                for k, v in results["exact_hits"].items()]  # fmt: skip
    return "\n".join(
        [
            "## Gateway overhead (`bench/overhead.py`)",
            "",
            f"Command: `{command}` — {results['machine']}; code {results['code']}; load average "
            f"{results['loadavg_start'][0]:.1f} at start, {results['loadavg_end'][0]:.1f} at end; "
            f"{results.get('stale_retries', 0)} requests sent again after a stale connection.",
            "Fake upstream (tests/fake_upstream.py), `cachegate serve` and this load generator (httpx) run",
            "as three processes on the same 2 cores; latencies are full responses (streams: until",
            "`[DONE]`, `response.completed` or `message_stop`), in ms. At concurrency 1 the upstream answers at once (pure overhead); at 50 it",
            "takes ~0.5 s, as a model does (streams: 16 chunks 30 ms apart).",
            "",
            "Pass-through with the cache bypassed (`cache-control: no-cache, no-store`), direct vs",
            "through the gateway, in alternating rounds (each round runs every row of its concurrency,",
            "so those rows share the machine's load too). Target: added p50 ≤ 2 ms.",
            "",
            table(PASS_HEADER, rows),
            *compared,
            "",
            "Exact cache hits through HTTP (the upstream is not called). Target: p50 ≤ 2 ms. At 50 in",
            "flight the load generator itself saturates a core: those rows measure queueing on 2 cores.",
            "",
            table(["request", "concurrency", "requests", "p50", "p99"], hit_rows),
        ]
    )


def _describe(tree: Path) -> str:
    """The baseline tree's commit (short hash and subject) when it is a git checkout."""
    import subprocess

    done = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h %s"],
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip() or str(tree)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply request counts")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--baseline", type=Path, help="also a gateway from this source tree")
    args = parser.parse_args(argv)
    results = run(args.rounds, args.scale, args.baseline)
    if args.baseline is not None:
        results["baseline"] = _describe(args.baseline)
    return publish(
        "overhead", results, markdown(results, command("overhead", argv)), not args.no_doc
    )


if __name__ == "__main__":
    main(sys.argv[1:])
