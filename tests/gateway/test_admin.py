"""Admin access with tenants, cache inspection (HTTP and CLI), debugging headers, history."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import diskcache
import openai
import pytest
import redis

from gateway import ledger, pipeline
from gateway.cli import main
from gateway.config import load_config_text
from tests.conftest import Gateway, wait_for
from tests.fake_upstream import FakeUpstream

KEY_B_DIGEST = hashlib.sha256(b"key-b").hexdigest()
TENANTS = f"""
auth:
  keys:
    - {{key: key-a, tenant: a}}
    - {{key_sha256: {KEY_B_DIGEST}, tenant: b}}
"""


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_tenant_keys_never_open_admin_routes(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway(TENANTS)
    assert gw.chat("hi", headers=bearer("key-b")).status_code == 200  # a key given as digest
    assert gw.chat("hi", headers=bearer(hashlib.sha256(b"key-b").hexdigest())).status_code == 401
    for key in ("key-a", "key-b", ""):
        for method, path in (("GET", "/admin/stats"), ("POST", "/admin/cache/flush"),
                             ("GET", "/metrics"), ("GET", "/admin/cache/entries"),
                             ("POST", "/admin/cache/tightening/reset")):  # fmt: skip
            response = gw.http.request(method, path, headers=bearer(key) if key else None)
            assert response.status_code == 403, (key, path)
            assert response.json()["error"]["code"] == "admin_closed"
    assert gw.http.get("/dashboard?key=key-a").status_code == 403


def test_cli_says_closed_admin_routes_need_the_gateways_admin_key(
    make_gateway: Any, upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    # was: "refused the admin key (403: ...); pass --key or set CACHEGATE_ADMIN_KEY", though
    # no key the operator can pass opens them: only admin.api_key in the gateway's config
    gw = make_gateway(TENANTS)
    for key in ("key-a", "anything"):
        assert main(["stats", "--url", gw.url, "--key", key]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "admin routes are closed (403" in err
        assert "Set admin.api_key" in err and "pass --key" not in err


def test_cache_commands_without_a_response_cache_say_why(
    make_gateway: Any, upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gateway with the cache off, or a worker (which has none whatever its config says:
    the message named only cache.enabled)."""
    gw = make_gateway("cache: {enabled: false}")
    assert main(["cache", "ls", "--url", gw.url]) == 1
    err = capsys.readouterr().err
    assert "response cache is off" in err and "cachegate worker" in err


def test_admin_routes_refuse_a_web_page_of_another_origin(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """With no keys the admin routes are open to whoever reaches the port, and a gateway on
    127.0.0.1 is reached by its operator's browser too: any web page it opened flushed the
    cache with a cross-site POST (a text/plain body asks no CORS preflight)."""
    gw = make_gateway()
    gw.chat("What is the capital of Peru?")
    page = {"origin": "https://evil.example", "content-type": "text/plain;charset=UTF-8"}
    for origin in ("https://evil.example", "null", f"{gw.url}.evil.example", "http://[::1"):
        refused = gw.http.post(
            "/admin/cache/flush", content=b"{}", headers={**page, "origin": origin}
        )
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "cross_origin"
    for path in ("/admin/stats", "/admin/cache/entries", "/metrics", "/dashboard"):
        assert gw.http.get(path, headers=page).status_code == 403
    assert gw.chat("What is the capital of Peru?").headers["x-cache"] == "exact"  # not flushed
    # the gateway's own page (its origin), and a client that is no web page (no Origin), do
    assert gw.http.get("/admin/stats", headers={"origin": gw.url}).status_code == 200
    assert gw.http.post("/admin/cache/flush", json={}).json()["flushed"] == 1


def test_a_flush_that_would_drop_nothing_is_refused(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """``{"answers": false}`` without ``"prefix": true``, and a namespace no request can name,
    were a 200 ``flushed: 0``: an operator's typo read as an empty cache (found by a review)."""
    gw = make_gateway()
    gw.chat("What is the capital of Chile?")
    for body, param in (({"answers": False}, "answers"),
                        ({"answers": False, "prefix": False}, "answers"),
                        ({"namespace": "bad ns!"}, "namespace"),
                        ({"namespace": "x" * 129}, "namespace")):  # fmt: skip
        refused = gw.http.post("/admin/cache/flush", json=body)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param, body
    assert gw.chat("What is the capital of Chile?").headers["x-cache"] == "exact"  # not flushed
    flushed = gw.http.post("/admin/cache/flush", json={"namespace": "a-b_c.d:e"}).json()
    assert flushed["flushed"] == 0 and flushed["namespace"] == "a-b_c.d:e"
    assert gw.http.post("/admin/cache/flush", json={"namespace": ""}).json()["flushed"] == 1


def test_admin_routes_answer_their_own_origin_behind_a_proxy_naming_the_default_port(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """Browsers leave a scheme's default port out of ``Origin`` (and out of ``Host``), but a
    reverse proxy may pass ``Host`` with it (nginx: ``$host:$server_port``): the gateway's own
    page was refused. A port other than the origin's own still is, and so is another host.
    (The proxy's names are listed in server.allowed_hosts: refused as rebinding otherwise.)"""
    gw = make_gateway("server: {allowed_hosts: [gw.example, '::1']}")
    same = [
        ("https://gw.example", "gw.example:443"),
        ("http://gw.example", "gw.example:80"),
        ("https://gw.example", "gw.example"),
        ("http://[::1]:8080", "[::1]:8080"),
        ("http://GW.example:8080", "gw.EXAMPLE:8080"),
    ]
    other = [
        ("https://gw.example", "gw.example:80"),
        ("http://gw.example", "gw.example:443"),
        ("http://gw.example:8443", "gw.example"),
        ("http://gw.example", "gw.example:8080"),
        ("http://[::1]", "[::2]:80"),
        ("https://evil.example", "gw.example:443"),
        ("https://gw.example", "gw.example:x"),
    ]
    for origin, host in same + other:
        got = gw.http.get("/admin/stats", headers={"origin": origin, "host": host})
        assert got.status_code == (200 if (origin, host) in same else 403), (origin, host)


def test_admin_key_as_digest(make_gateway: Any, upstream: FakeUpstream) -> None:
    digest = hashlib.sha256(b"the-admin").hexdigest()
    gw = make_gateway(TENANTS + f"admin: {{api_key_sha256: {digest}}}\n")
    assert gw.http.get("/admin/stats", headers=bearer("key-a")).status_code == 401
    assert gw.http.get("/admin/stats", headers=bearer(digest)).status_code == 401
    assert gw.http.get("/admin/stats", headers=bearer("the-admin")).status_code == 200
    assert gw.http.get("/dashboard?key=the-admin").status_code == 200


def test_key_new_prints_a_key_and_its_digest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["key", "new", "--tenant", "team-a"]) == 0
    out = capsys.readouterr().out
    key = out.split("key:", 1)[1].split()[0]
    digest = out.split("sha256:", 1)[1].split()[0]
    assert hashlib.sha256(key.encode()).hexdigest() == digest and len(key) > 40
    assert f'key_sha256: "{digest}"' in out and 'tenant: "team-a"' in out
    assert main(["key", "new", "--admin"]) == 0
    assert "api_key_sha256:" in capsys.readouterr().out
    for tenant in ("2024", "no", "#ops", "team: a"):  # what YAML would read as another thing
        assert main(["key", "new", "--tenant", tenant]) == 0
        printed = capsys.readouterr().out.split("(the file then holds no secret):\n", 1)[1]
        keys = load_config_text(printed).auth.keys
        assert [k.tenant for k in keys] == [tenant]
    for tenant in ("", "a\tb"):  # was: printed 'tenant: "TENANT"' / YAML that fails to load
        with pytest.raises(SystemExit) as exited:
            main(["key", "new", "--tenant", tenant])
        assert exited.value.code == 2
        assert "a tenant name is not empty and has no control characters" in capsys.readouterr().err


def test_key_new_prints_yaml_that_keeps_a_digest_of_digits_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A digest of decimal digits alone (about 1 in 10^13) printed bare is a YAML integer,
    which the config refuses: the printed YAML quotes it, so it loads as the digest."""
    import gateway.admin_cli as admin_cli

    monkeypatch.setattr(admin_cli, "digest", lambda key: "1" * 64)
    for who, read in (
        (["--admin"], lambda config: config.admin.api_key_sha256),
        (["--tenant", "a"], lambda config: config.auth.keys[0].key_sha256),
    ):
        assert main(["key", "new", *who]) == 0
        printed = capsys.readouterr().out.split("(the file then holds no secret):\n", 1)[1]
        assert read(load_config_text(printed)) == "1" * 64


def test_a_command_without_its_action_shows_its_own_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `cachegate cache` printed cachegate's top-level help (which names no cache action)
    for command in ("cache", "config", "key"):
        with pytest.raises(SystemExit) as exited:
            main([command])
        assert exited.value.code == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith(f"usage: cachegate {command} [-h] ACTION ...")
        assert f"cachegate {command}: error: the following arguments are required: ACTION" in err


def test_serve_says_who_can_open_the_admin_routes(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    model = "{backend: openai, base_url: 'http://127.0.0.1:9/v1'}"
    config.write_text(
        f"data_dir: {tmp_path}\ncache: {{enabled: false}}\nmodels: {{m: {model}}}\n" + TENANTS
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        lines = [process.stderr.readline() for _ in range(2)]
    finally:
        process.terminate()
        process.wait(timeout=30)
    said = " ".join(lines)
    assert "admin routes" in said and "CLOSED" in said and "admin.api_key" in said


def _startup_lines(config: Path, host: str) -> str:
    """What ``cachegate serve --host HOST`` logs until it says where it serves."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--host", host,
         "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    hung = threading.Timer(120, process.kill)  # (a start that never says where it serves)
    hung.start()
    try:
        assert process.stderr is not None
        lines: list[str] = []
        while not lines or (" serving " not in lines[-1] and lines[-1]):  # ("": it ended)
            lines.append(process.stderr.readline())
    finally:
        hung.cancel()
        process.terminate()
        process.wait(timeout=30)
    return "".join(lines)


def test_serve_on_every_interface_without_keys_says_rebinding_protection_is_off(
    tmp_path: Path,
) -> None:
    """On 0.0.0.0, server.allowed_hosts left out answers any Host (gateway.auth.AllowedHosts):
    with no keys a rebinding page can use the API and the admin routes. On 127.0.0.1 it
    answers the gateway's own names only: nothing to say."""
    config = tmp_path / "c.yaml"
    model = "{backend: openai, base_url: 'http://127.0.0.1:9/v1'}"
    config.write_text(f"data_dir: {tmp_path}\ncache: {{enabled: false}}\nmodels: {{m: {model}}}\n")
    said = _startup_lines(config, "0.0.0.0")
    assert " serving m on " in said  # (it got to the end of its start)
    warned = [line for line in said.splitlines() if "DNS-rebinding protection is off" in line]
    assert len(warned) == 1 and "WARNING" in warned[0], said
    assert "server.allowed_hosts: [" in warned[0] and "0.0.0.0" in warned[0]
    assert "/v1/* and the admin routes" in warned[0]
    local = _startup_lines(config, "127.0.0.1")
    assert " serving m on " in local and "rebinding" not in local


@pytest.mark.parametrize(
    ("server", "settings", "routes"),
    [
        ("{host: 0.0.0.0}", "", "/v1/* and the admin routes"),
        ("{host: 0.0.0.0}", "admin: {api_key: adm}", "/v1/*"),  # (a page cannot send it)
        ("{host: 0.0.0.0}", TENANTS, None),  # (nor a gateway key)
        ("{host: 0.0.0.0, allowed_hosts: [gw.example]}", "", None),
        ("{host: 0.0.0.0, allowed_hosts: ['*']}", "", None),  # (any host: the operator's choice)
        ("{host: 127.0.0.2}", "", None),  # (loopback: its own names only)
    ],
)
def test_the_rebinding_warning_names_the_routes_a_page_can_use(
    server: str, settings: str, routes: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    from gateway.cli import _log_admin_access

    models = "models: {m: {backend: openai, base_url: 'http://127.0.0.1:9/v1'}}\n"
    config = load_config_text(f"server: {server}\n{models}{settings}")
    with caplog.at_level(logging.INFO, logger="cachegate"):
        _log_admin_access(config)
    warned = [r for r in caplog.records if "DNS-rebinding" in r.getMessage()]
    if routes is None:
        assert warned == []
    else:
        assert len(warned) == 1 and warned[0].levelno == logging.WARNING
        assert f"and {routes} ask no key" in warned[0].getMessage()


def test_hidden_texts_show_a_digest_keyed_by_the_data_dirs_secret(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """An unsalted SHA-256 prefix of a short question was found by hashing common questions.
    The digest is keyed with a secret of the data directory: the same there (two entries,
    a restart), another in another data directory, and the plain hash nowhere."""
    question = "What is the capital of Peru?"

    def listed(gw: Gateway) -> list[dict[str, Any]]:
        page = gw.http.get("/admin/cache/entries")
        assert page.status_code == 200, page.text
        return list(page.json()["data"])

    one = make_gateway(f"data_dir: '{tmp_path / 'one'}'")
    one.chat(question)
    one.chat(question, headers={"x-cache-namespace": "other"})  # (a second entry, same text)
    first, second = listed(one)
    shown = first["question"]
    assert re.fullmatch(r"hmac:[0-9a-f]{12} \(28 chars\)", shown), shown
    assert second["question"] == shown  # (still comparable: the same text, the same digest)
    assert first["answer"].startswith("hmac:")  # (the answers differ: the fake numbers them)
    bodies = [one.http.get(path).text for path in ("/admin/cache/entries",
              f"/admin/cache/entries/{first['id']}", "/admin/stats", "/admin/history")]  # fmt: skip
    unsalted = hashlib.sha256(question.encode()).hexdigest()[:12]
    assert not any(unsalted in body for body in bodies)
    secret = (tmp_path / "one" / "text-digest.key").read_text().strip()
    assert len(secret) == 64 and not any(secret in body for body in bodies)
    assert (tmp_path / "one" / "text-digest.key").stat().st_mode & 0o077 == 0  # (owner only)
    two = make_gateway(f"data_dir: '{tmp_path / 'two'}'")
    two.chat(question)
    assert listed(two)[0]["question"] != shown
    one.stop()
    again = make_gateway(f"data_dir: '{tmp_path / 'one'}'")  # (a restart: the entries kept)
    assert [e["question"] for e in listed(again)] == [shown, shown]


def test_hidden_texts_compare_across_the_dashboards_hits_and_the_listing(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """The dashboard's recent hits and the entries listing show one text with one digest:
    the stored question a hit matched is found in the listing by it."""
    gw = make_gateway(semantic=True)
    stored, asked = "How do I reset my password?", "How can I reset my password?"
    assert gw.chat(stored).headers["x-cache"] == "miss"
    assert gw.chat(asked).headers["x-cache"] == "semantic"
    hit = gw.http.get("/admin/history").json()["recent_hits"][0]
    entry = gw.http.get("/admin/cache/entries").json()["data"][0]
    assert hit["stored_question"] == entry["question"] != hit["question"]
    assert hit["question"].startswith("hmac:") and hit["question"].endswith(" (28 chars)")
    for text in (stored, asked):
        assert hashlib.sha256(text.encode()).hexdigest()[:12] not in json.dumps(hit)


def test_debug_headers(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    first = gw.chat("what is the key?")
    assert first.headers["x-cache"] == "miss" and first.headers["x-request-id"].startswith("req_")
    again = gw.chat("what is the key?", headers={"x-request-id": "client-42"})
    assert again.headers["x-cache"] == "exact" and again.headers["x-request-id"] == "client-42"
    assert again.headers["x-cache-key"] == first.headers["x-cache-key"]
    assert len(first.headers["x-cache-key"]) == 16
    assert gw.chat("another question").headers["x-cache-key"] != first.headers["x-cache-key"]
    entry = gw.http.get(f"/admin/cache/entries/{again.headers['x-cache-entry']}").json()
    assert entry["hits"] == 1 and entry["model"] == "fake-model"
    error = gw.chat("x", model="no-such-model", headers={"x-request-id": "bad id with spaces"})
    assert error.status_code == 404 and error.headers["x-request-id"].startswith("req_")
    streamed = gw.chat("what is the key?", stream=True)
    assert streamed.headers["x-cache"] == "exact" and streamed.headers["x-request-id"]


def test_request_ids_are_logged_and_the_upstreams_is_kept(
    make_gateway: Any, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    gw = make_gateway()
    caplog.set_level(logging.INFO, logger="cachegate.requests")
    miss = gw.chat("whose id is it?", headers={"x-request-id": "mine-1"})
    # a fresh upstream answer keeps the provider's id; the gateway's is next to it
    assert miss.headers["x-request-id"].startswith("req_chatcmpl")
    assert miss.headers["x-cachegate-request-id"] == "mine-1"
    hit = gw.chat("whose id is it?", headers={"x-request-id": "mine-2"})
    assert hit.headers["x-request-id"] == "mine-2" and "x-cachegate-request-id" not in hit.headers
    logged = [r.getMessage() for r in caplog.records if r.name == "cachegate.requests"]
    assert any(m.startswith("mine-1 /v1/chat/completions") and "cache=miss" in m
               and f"upstream_request_id={miss.headers['x-request-id']}" in m for m in logged)  # fmt: skip
    assert any(m.startswith("mine-2 ") and "cache=exact" in m for m in logged)


def test_errors_no_handler_wrote_have_a_request_id(make_gateway: Any) -> None:
    # (a GET of a POST route, an unknown route: "x-request-id: always, errors too")
    gw = make_gateway()
    wrong_method = gw.http.get("/v1/chat/completions", headers={"x-request-id": "mine-3"})
    assert wrong_method.status_code == 405 and wrong_method.headers["x-request-id"] == "mine-3"
    unknown = gw.http.post("/v1/chat/completion", json={})
    assert unknown.status_code == 404 and unknown.headers["x-request-id"].startswith("req_")


def test_every_answer_has_a_request_id(make_gateway: Any, upstream: FakeUpstream) -> None:
    # ("x-request-id: always, errors too") GET /v1/models, the token counts, the stored
    # responses, the health checks and the admin routes answered without one
    gw = make_gateway()
    count = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
    for method, path, body in (
        ("GET", "/v1/models", None),
        ("GET", "/v1/models/fake-model", None),
        ("GET", "/v1/models/no-such-model", None),
        ("POST", "/v1/messages/count_tokens", count),
        ("POST", "/v1/responses/input_tokens", {"model": "fake-model", "input": "hi"}),
        ("GET", "/v1/responses/resp_unknown", None),
        ("DELETE", "/v1/responses/resp_unknown", None),
        ("GET", "/healthz", None),
        ("GET", "/readyz", None),
        ("GET", "/metrics", None),
        ("GET", "/admin/stats", None),
    ):
        mine = gw.http.request(method, path, json=body, headers={"x-request-id": "mine-4"})
        fresh = gw.http.request(method, path, json=body)
        if path == "/v1/responses/input_tokens":  # counted upstream: the provider's id kept
            assert mine.headers["x-request-id"].startswith("req_count_"), mine.headers
            assert mine.headers.get("x-cachegate-request-id") == "mine-4"
            assert fresh.headers.get("x-cachegate-request-id", "").startswith("req_"), path
            continue
        assert mine.headers.get("x-request-id") == "mine-4", (path, mine.status_code)
        assert fresh.headers.get("x-request-id", "").startswith("req_"), path
    # the SDK sees it too (its `_request_id`)
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
    assert client.models.with_raw_response.list().headers["x-request-id"].startswith("req_")


def test_entries_are_listed_shown_and_removed(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    for i in range(3):
        gw.chat(f"question {i}", headers={"x-cache-namespace": "ns1" if i else ""})
    page = gw.http.get("/admin/cache/entries", params={"limit": 2}).json()
    assert page["total"] == 3 and len(page["data"]) == 2 and page["has_more"]
    newest = page["data"][0]
    # texts hidden by default: a keyed digest and a length
    assert newest["question"].startswith("hmac:") and "(10 chars)" in newest["question"]
    assert newest["kind"] == "exact" and newest["model"] == "fake-model"
    assert gw.http.get("/admin/cache/entries", params={"namespace": "ns1"}).json()["total"] == 2
    assert gw.http.get("/admin/cache/entries", params={"namespace": ""}).json()["total"] == 1
    assert gw.http.get("/admin/cache/entries", params={"model": "other"}).json()["total"] == 0
    assert gw.http.get("/admin/cache/entries", params={"q": "question"}).status_code == 403
    assert gw.http.get("/admin/cache/entries", params={"limit": 0}).status_code == 400
    assert gw.http.get("/admin/cache/entries", params={"kind": "odd"}).status_code == 400
    shown = gw.http.get(f"/admin/cache/entries/{newest['id']}").json()
    assert shown["id"] == newest["id"] and shown["response"] is None  # (text hidden)
    assert gw.http.delete(f"/admin/cache/entries/{newest['id']}").json()["deleted"] is True
    assert gw.http.get(f"/admin/cache/entries/{newest['id']}").status_code == 404
    assert gw.http.delete(f"/admin/cache/entries/{newest['id']}").status_code == 404
    assert gw.http.get("/admin/cache/entries/not-a-number").status_code == 404
    assert gw.chat("question 2", headers={"x-cache-namespace": "ns1"}).headers["x-cache"] == "miss"


def test_an_entry_is_found_only_by_the_id_the_gateway_gave(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    gw.chat("kept")
    entry = gw.chat("kept").headers["x-cache-entry"]
    digits = entry.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))  # Arabic-Indic
    for other in (f"+{entry}", f"0{entry}", f"%20{entry}", f"{entry[:3]}_{entry[3:]}", digits):
        # each was read as the entry's id: shown, and deleted
        assert gw.http.get(f"/admin/cache/entries/{other}").status_code == 404, other
        assert gw.http.delete(f"/admin/cache/entries/{other}").status_code == 404, other
    assert gw.http.get(f"/admin/cache/entries/{entry}").json()["id"] == entry
    assert gw.chat("kept").headers["x-cache"] == "exact"


def test_entries_show_text_when_configured(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway("admin: {show_text: true}")
    gw.chat("Where is the Eiffel tower?")
    gw.chat("Who painted the Mona Lisa?")
    found = gw.http.get("/admin/cache/entries", params={"q": "eiffel"}).json()
    assert found["total"] == 1 and found["data"][0]["question"] == "Where is the Eiffel tower?"
    shown = gw.http.get(f"/admin/cache/entries/{found['data'][0]['id']}").json()
    assert "Eiffel" in shown["answer"] and shown["response"]["choices"]


def test_entries_of_every_api_show_their_answer(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway("admin: {show_text: true}")
    asked = {
        "/v1/responses": {"input": "Responses: where is Rome?"},
        "/v1/messages": {"max_tokens": 20, "messages": [{"role": "user", "content": "Messages: where is Oslo?"}]},
        "/v1/embeddings": {"input": "Embed me"},
    }  # fmt: skip
    for path, body in asked.items():
        assert gw.http.post(path, json={"model": "fake-model", **body}).status_code == 200
    b64 = {"model": "fake-model", "input": "Embed me as base64", "encoding_format": "base64"}
    assert gw.http.post("/v1/embeddings", json=b64).status_code == 200
    floats = gw.http.post("/v1/embeddings", json={"model": "fake-model", "input": "Embed me"})
    size = len(floats.json()["data"][0]["embedding"])
    shown = {e["question"]: e for e in gw.http.get("/admin/cache/entries").json()["data"]}
    rome, oslo = shown["Responses: where is Rome?"], shown["Messages: where is Oslo?"]
    assert "where is Rome?" in rome["answer"] and rome["finish_reason"] == "completed"
    assert "where is Oslo?" in oslo["answer"] and oslo["finish_reason"] == "end_turn"
    assert shown["Embed me"]["answer"] == f"(an embedding, {size} numbers)"
    assert shown["Embed me as base64"]["answer"] == f"(an embedding, {size} numbers)"


def test_cli_against_a_running_gateway(
    make_gateway: Any, upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    gw = make_gateway("admin: {api_key: adm, show_text: true}")
    gw.chat("How tall is Mont Blanc?")
    gw.chat("How tall is Mont Blanc?")
    url = ["--url", gw.url, "--key", "adm"]
    assert main(["stats", *url]) == 0
    out = capsys.readouterr().out
    assert "hit rate 50.0% of lookups" in out and "fake-model" in out and "CALLS SAVED" in out
    assert main(["cache", "ls", *url]) == 0
    out = capsys.readouterr().out
    assert "How tall is Mont Blanc?" in out and "1 of 1 matching" in out
    entry_id = out.splitlines()[1].split()[0]
    assert main(["cache", "show", entry_id, *url]) == 0
    out = capsys.readouterr().out
    assert "question:      How tall is Mont Blanc?" in out
    assert '\nnamespace:     ""\n' in out  # (as `ls` shows the default one; was blank)
    assert main(["cache", "rm", entry_id, *url]) == 0
    assert main(["cache", "rm", entry_id, *url]) == 1
    assert "No cached answer" in capsys.readouterr().err
    gw.chat("Another one")
    assert main(["cache", "flush", *url]) == 0
    assert "flushed 1 answers" in capsys.readouterr().out
    # a wrong key, and a gateway that is not there: one line each
    assert main(["stats", "--url", gw.url, "--key", "wrong"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused the admin key (401" in err
    assert main(["stats", "--url", "http://127.0.0.1:9", "--key", "adm"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach the gateway" in err
    assert main(["stats", "--url", "http://[::1", "--key", "adm"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--url http://[::1" in err
    # the SDK's URL (with /v1) for the admin one: was "404: Unknown route: GET /v1/admin/stats"
    assert main(["stats", "--url", gw.url + "/v1", "--key", "adm"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "give --url the gateway's admin port" in err
    # an id that is none (was: a KeyError traceback, '?x' asked the listing route)
    for wrong in ("?x", "#", "12a"):
        with pytest.raises(SystemExit) as exited:
            main(["cache", "show", wrong, *url])
        assert exited.value.code == 2
        assert "an entry id is the number 'cache ls' shows" in capsys.readouterr().err


def test_cli_sends_an_admin_key_as_the_gateway_reads_it(
    make_gateway: Any,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A key from a secret file keeps its newline: the HTTP client refused the header and the
    # CLI said "cannot reach the gateway (Illegal header value ...)"; a non-ASCII key ended
    # with a UnicodeEncodeError traceback. The gateway strips the token. (The config refuses a
    # key beyond printable ASCII: test_config's test_errors_name_file_key_and_problem.)
    gw = make_gateway("admin: {api_key: cle-adm}")
    monkeypatch.setenv("CACHEGATE_ADMIN_KEY", "cle-adm\n")
    assert main(["stats", "--url", gw.url]) == 0, capsys.readouterr().err
    assert "response cache:" in capsys.readouterr().out
    for key, says in (("adm€", "that an HTTP header cannot carry"), ("a\x1bb", "control")):
        assert main(["cache", "ls", "--url", gw.url, "--key", key]) == 1
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1, err
        assert err.startswith("error: --key (or CACHEGATE_ADMIN_KEY) holds ") and says in err


def test_cli_flush_waits_for_the_gateways_drain(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A flush first waits up to 10 s for a cache write in progress, then drops the answers (a
    big cache takes a while): the CLI gave up at 10 s and said "cannot reach the gateway (timed
    out)", exit 1, while the gateway went on and flushed. (The flush's work after the wait is
    a second here.)"""
    monkeypatch.setattr(pipeline, "_DRAIN_S", 11.0)
    gw = make_gateway()
    assert gw.chat("flushed while a write hangs").status_code == 200
    wait_for(lambda: gw.http.get("/admin/stats").json()["cache"]["entries"] == 1)

    async def hanging(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(60)  # e.g. an embedder that is still loading

    gw.runtime.cache.store = hanging
    assert gw.chat("a write that hangs").headers["x-cache"] == "miss"
    assert main(["cache", "flush", "--url", gw.url]) == 0
    out, err = capsys.readouterr()
    assert "flushed 1 answers (all namespaces)" in out and not err


def test_cli_flush_says_when_there_is_no_response_cache(
    make_gateway: Any, upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    """A `cachegate worker` and a gateway with cache.enabled: false keep no answers: the flush
    printed "flushed 0 answers" and exit status 0 there, as if it had dropped them."""
    gw = make_gateway("cache: {enabled: false}")
    assert gw.chat("not cached").headers["x-cache"] == "bypass"
    for namespace in ([], ["--namespace", "ns1"]):
        assert main(["cache", "flush", *namespace, "--url", gw.url]) == 1
        out, err = capsys.readouterr()
        assert not out and err.count("\n") == 1
        assert "has no response cache" in err and "--prefix flushes its prefix KV" in err
    # its prefix KV caches are still flushed on request (a worker's local models)
    assert main(["cache", "flush", "--prefix", "--url", gw.url]) == 0
    out, err = capsys.readouterr()
    assert out == "no response cache; prefix KV freed: 0 B\n" and not err


def test_cli_shows_control_characters_in_client_text_as_escapes(
    make_gateway: Any, upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    # A client's question (and the answer echoing it) reached the operator's terminal raw:
    # ESC sequences recoloured it or set its title, a CR rewrote the line it was printed on.
    gw = make_gateway("admin: {api_key: adm, show_text: true}")
    gw.chat("What\x1b]0;owned\x07 is \x1b[8mhidden\x1b[0m?\rFine.\nSecond line")
    url = ["--url", gw.url, "--key", "adm"]
    assert main(["cache", "ls", *url]) == 0
    out = capsys.readouterr().out
    assert "What\\x1b]0;owned\\x07 is \\x1b[8mhidden" in out
    entry_id = out.splitlines()[1].split()[0]
    assert main(["cache", "show", entry_id, *url]) == 0
    out = capsys.readouterr().out
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", out)
    assert (
        "question:      What\\x1b]0;owned\\x07 is \\x1b[8mhidden\\x1b[0m?\\rFine.\nSecond line"
        in out
    )


def test_cli_tables_show_a_front_gateways_partition_as_an_escape(
    make_gateway: Any, upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    # Behind a front gateway (a cachegate worker, an inner gateway) each tenant is joined to
    # its x-cachegate-partition by \x1f: printed raw, that byte vanished on the terminal and
    # shifted every column after it in `cachegate stats` and `cache ls`.
    gw = make_gateway("admin: {api_key: adm}")
    assert gw.chat("hello", headers={"x-cachegate-partition": "abc123"}).status_code == 200
    url = ["--url", gw.url, "--key", "adm"]
    for command in (["stats"], ["cache", "ls"]):
        assert main([*command, *url]) == 0
        out = capsys.readouterr().out
        assert "default\\x1fabc123" in out and "\x1f" not in out
        head, row = out.splitlines()[-2:] if command == ["stats"] else out.splitlines()[:2]
        assert head.index("MODEL") == row.index("fake-model")  # the columns line up
    # the tenant's filter finds its partitions' answers (it found none: an exact name only)
    gw.chat("hello")  # (the tenant's own)
    listed = gw.http.get(
        "/admin/cache/entries?tenant=default", headers={"authorization": "Bearer adm"}
    )
    assert sorted(e["tenant"] for e in listed.json()["data"]) == ["default", "default\x1fabc123"]
    exact = gw.http.get(
        "/admin/cache/entries", params={"tenant": "default\x1fabc123"},
        headers={"authorization": "Bearer adm"},
    )  # fmt: skip
    assert [e["tenant"] for e in exact.json()["data"]] == ["default\x1fabc123"]


def test_cli_passes_on_a_403_that_is_not_about_the_key(
    make_gateway: Any, upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    gw = make_gateway("admin: {api_key: adm}")  # show_text: false
    assert main(["cache", "ls", "--search", "hello", "--url", gw.url, "--key", "adm"]) == 1
    err = capsys.readouterr().err
    assert "Text search needs admin.show_text: true." in err and "admin key" not in err


def test_cli_says_an_error_page_that_is_not_the_gateways_on_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A proxy in front of the gateway (its 502 page) was printed as it was: several lines,
    and its control characters run by the terminal (this one retitles it)."""
    import http.server
    import threading

    page = b"<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\x1b]0;x\x07</body>\n"

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(502)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert main(["stats", "--url", url, "--key", "adm"]) == 1
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\x07" not in err
    assert err.startswith("error: 502: <html> <head><title>502 Bad Gateway</title>")
    assert "\\x1b]0;x\\x07" in err  # (as an escape)


def test_history_counts_tiers_and_latency(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    gw.chat("history one")
    gw.chat("history one")
    gw.chat("history one", stream=True)
    gw.chat("bypassed", headers={"cache-control": "no-cache, no-store"})
    # a client's mistake (an unknown model, a malformed body) is an error, in no tier: as a
    # "bypass" it lowered the dashboard's hit rate (hits / answers of every tier)
    assert gw.chat("x", model="missing").status_code == 404
    assert gw.chat("x", temperature="hot").status_code == 400
    # an upstream's rate limit is its failure, a bypass as /metrics counts it (was in no tier)
    assert gw.chat("limited", fake={"status": 429, "retry_after": 30}).status_code == 429
    history = gw.http.get("/admin/history").json()
    tiers: dict[str, int] = {}
    for point in history["points"]:
        for tier, n in point["tiers"].items():
            tiers[tier] = tiers.get(tier, 0) + n
    assert tiers == {"miss": 1, "exact": 2, "bypass": 2}
    # (summed over the points: the requests may straddle a point's boundary)
    points = history["points"]
    by_model: dict[str, int] = {}
    for point in points:
        for tier, n in point["by_model"].get("fake-model", {}).items():
            by_model[tier] = by_model.get(tier, 0) + n
    assert by_model == {"miss": 1, "exact": 2, "bypass": 2}
    assert sum(p["errors"] for p in points) == 3
    hits = [p["latency"]["hit"] for p in points if "hit" in p["latency"]]
    assert sum(h["count"] for h in hits) == 2 and all(h["p50"] > 0 for h in hits)
    assert sum(p["latency"]["ttft"]["count"] for p in points if "ttft" in p["latency"]) == 1
    assert history["interval_s"] == 10
    later = gw.http.get("/admin/history", params={"since": time.time() + 60}).json()
    assert later["points"] == []
    # a NaN (a script's `since` from a missing point) matched no point, silently and for good
    for wrong in ("NaN", "inf", "-inf", "yesterday"):
        reply = gw.http.get("/admin/history", params={"since": wrong})
        assert reply.status_code == 400, wrong
        assert reply.json()["error"]["param"] == "since"


def test_history_latency_leaves_errors_out(make_gateway: Any, upstream: FakeUpstream) -> None:
    """Requests refused in a fraction of a millisecond (a wrong key, an unknown model, a
    malformed body) are errors, counted apart: they never pull the misses' latency down."""
    gw = make_gateway(TENANTS + "admin: {api_key: adm}\n")
    for i in range(3):
        miss = gw.chat(f"slow {i}", fake={"delay": 0.2}, headers=bearer("key-a"))
        assert miss.headers["x-cache"] == "miss"
    for _ in range(4):
        assert gw.chat("no key").status_code == 401
        assert gw.chat("x", model="missing", headers=bearer("key-a")).status_code == 404
    history = gw.http.get("/admin/history", headers=bearer("adm")).json()
    misses = [p["latency"]["miss"] for p in history["points"] if "miss" in p["latency"]]
    assert sum(m["count"] for m in misses) == 3
    assert all(m["p50"] >= 0.2 for m in misses)
    assert sum(p["errors"] for p in history["points"]) == 8


def answer_body(content: str, usage: dict[str, Any] | None = None) -> str:
    """A chat completion's JSON as an upstream sends it: ``content``, and ``usage`` if given."""
    answer = {"id": "c1", "object": "chat.completion", "created": 1, "model": "fake-model",
              **({} if usage is None else {"usage": usage}),
              "choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": content}}]}  # fmt: skip
    return json.dumps(answer)


def test_ledger_prices_tokens_saved(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway("prices: {fake-model: {input: 2.0, cached_input: 0.5, output: 8.0}}")
    usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100,
             "prompt_tokens_details": {"cached_tokens": 800}}  # fmt: skip
    raw = {"raw": {"body": answer_body("cached upstream", usage)}}
    assert gw.chat("priced", fake=raw).headers["x-cache"] == "miss"
    assert gw.chat("priced", fake=raw).headers["x-cache"] == "exact"
    row = gw.http.get("/admin/stats").json()["ledger"]["default"]["fake-model"]
    assert row["model_calls"] == 1 and row["calls_avoided"] == 1
    assert row["provider_cached_tokens"] == 800
    assert row["saved_provider_cache_usd"] == pytest.approx(800 * 1.5 / 1e6)
    paid = (200 * 2 + 800 * 0.5 + 100 * 8) / 1e6
    assert row["spent_usd"] == pytest.approx(paid)
    assert row["saved_response_cache_usd"] == pytest.approx(paid)  # what the avoided call cost
    metrics = gw.http.get("/metrics").text
    line = 'cachegate_ledger_calls_avoided_total{model="fake-model",tenant="default"} 1.0'
    assert line in metrics
    assert sum(p["saved"].get("usd_saved", 0) for p in gw.http.get("/admin/history").json()[
        "points"]) == pytest.approx(row["saved_usd"])  # fmt: skip


def test_an_absurd_usage_count_leaves_metrics_readable(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """An upstream that reports a token count no model has (a 401-digit number) is not believed:
    summed into the ledger it made every later /metrics scrape fail with 500, and the account
    was left half-booked (its tokens added, its cost not)."""
    gw = make_gateway("prices: {fake-model: {input: 2.0, output: 8.0}}")
    answer = answer_body("absurd", {"prompt_tokens": -1, "completion_tokens": 100})
    body = answer.replace("-1", "1" + "0" * 400)  # (JSON has no limit; Python neither)
    assert gw.chat("absurd", fake={"raw": {"body": body}}).status_code == 200
    row = ledger_row(gw)
    assert (row["model_calls"], row["input_tokens"], row["output_tokens"]) == (1, 0, 100)
    assert row["spent_usd"] == pytest.approx(100 * 8.0 / 1e6)
    metrics = gw.http.get("/metrics")
    assert metrics.status_code == 200
    assert 'cachegate_ledger_input_tokens_total{model="fake-model",tenant="default"} 0.0' in (
        metrics.text
    )


def test_cached_tokens_above_the_prompt_are_booked_as_the_prompt(
    make_gateway: Any, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """An upstream that reports more cached tokens than prompt tokens (a broken one): the
    ledger booked them all, more cached input than input, and a saving on tokens never sent."""
    gw = make_gateway("prices: {fake-model: {input: 2.0, cached_input: 0.5, output: 8.0}}")
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
             "prompt_tokens_details": {"cached_tokens": 5000}}  # fmt: skip
    raw = {"raw": {"body": answer_body("over-cached", usage)}}
    caplog.set_level(logging.WARNING, logger="gateway.ledger")
    ledger._cached_above_prompt.cache_clear()  # (said once a process: maybe by another test)
    for question in ("over-cached", "over-cached again"):
        assert gw.chat(question, fake=raw).headers["x-cache"] == "miss"
    row = ledger_row(gw)
    assert (row["input_tokens"], row["provider_cached_tokens"]) == (200, 200)
    assert row["saved_provider_cache_usd"] == pytest.approx(200 * 1.5 / 1e6)
    assert row["spent_usd"] == pytest.approx((200 * 0.5 + 20 * 8) / 1e6)
    said = [r for r in caplog.records if "more cached_tokens than prompt_tokens" in r.getMessage()]
    assert len(said) == 1  # (once)


def test_answers_without_usage_are_still_counted(make_gateway: Any, upstream: FakeUpstream) -> None:
    """An upstream that reports no usage (some OpenAI-compatible servers): its answers were
    left out of the ledger altogether, so a cache hit on them was no call avoided and the
    model calls were not there; they count, with their tokens unknown (0)."""
    gw = make_gateway("prices: {fake-model: {input: 2.0, output: 8.0}}")
    raw = {"raw": {"body": answer_body("no usage")}}
    assert gw.chat("unmetered", fake=raw).headers["x-cache"] == "miss"
    assert gw.chat("unmetered", fake=raw).headers["x-cache"] == "exact"
    chunk = {"id": "c2", "object": "chat.completion.chunk", "created": 1, "model": "fake-model",
             "choices": [{"index": 0, "delta": {"content": "no usage"}, "finish_reason": "stop"}]}  # fmt: skip
    sse = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
    streamed = {"raw": {"content_type": "text/event-stream", "body": sse}}
    assert "[DONE]" in gw.chat("unmetered stream", stream=True, fake=streamed).text
    wait_for(lambda: ledger_row(gw).get("requests") == 3)
    row = ledger_row(gw)
    assert (row["model_calls"], row["calls_avoided"], row["ended_early"]) == (2, 1, 0)
    assert row["input_tokens"] == row["output_tokens"] == row["avoided_input_tokens"] == 0
    assert row["spent_usd"] == row["saved_usd"] == 0


def ledger_row(gw: Gateway) -> dict[str, Any]:
    row: dict[str, Any] = gw.http.get("/admin/stats").json()["ledger"].get("default", {})
    return row.get("fake-model", {})


@pytest.mark.parametrize("fault", ["break_after", "error_event"])
def test_a_stream_that_ends_early_is_booked_with_what_it_streamed(
    make_gateway: Any, upstream: FakeUpstream, fault: str
) -> None:
    """The upstream cuts its stream, or sends an error event, after two pieces of text: it
    reported no usage, yet it generated (and bills) them. The ledger books the call, its
    output estimated from the text streamed (4 characters a token), marked ended early; the
    partial answer is not cached."""
    gw = make_gateway("prices: {fake-model: {input: 2.0, output: 8.0}}")
    sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-client", max_retries=0)
    fake = {"content": "abcd" * 50, "chunks": 4, fault: 3}  # the role chunk, 2 × 50 characters
    text = ""
    with pytest.raises(openai.APIError):  # the error event the stream ends with
        for chunk in sdk.chat.completions.create(model="fake-model", messages=[{"role": "user",
                "content": "cut"}], stream=True, extra_body={"fake": fake}):  # fmt: skip
            text += chunk.choices[0].delta.content or ""
    assert text == "abcd" * 25
    wait_for(lambda: ledger_row(gw).get("requests") == 1)  # (booked once the stream has ended)
    row = ledger_row(gw)
    assert (row["model_calls"], row["ended_early"]) == (1, 1)
    assert (row["input_tokens"], row["output_tokens"]) == (0, 25)  # the prompt: unknown
    assert row["spent_usd"] == pytest.approx(25 * 8.0 / 1e6)
    metrics = gw.http.get("/metrics").text
    assert 'cachegate_ledger_ended_early_total{model="fake-model",tenant="default"} 1.0' in metrics
    assert gw.chat("cut", stream=True, fake=fake).headers["x-cache"] == "miss"
    assert upstream.stats["chat"] == 2
    complete = gw.chat("whole", stream=True, stream_options={"include_usage": True})
    assert complete.status_code == 200 and "[DONE]" in complete.text
    wait_for(lambda: ledger_row(gw).get("requests") == 3)
    assert ledger_row(gw)["ended_early"] == 2  # a stream that finished is not


def test_a_stream_whose_client_left_is_booked_with_what_it_was_sent(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-client", max_retries=0)
    fake = {"content": "abcd" * 50, "chunks": 20, "chunk_delay": 0.3}  # 20 × 10 characters
    with sdk.chat.completions.create(model="fake-model", messages=[{"role": "user",
            "content": "leave"}], stream=True, extra_body={"fake": fake}) as stream:  # fmt: skip
        text = ""
        for chunk in stream:
            text += chunk.choices[0].delta.content or ""
            if len(text) >= 20:
                break  # and hang up
    wait_for(lambda: ledger_row(gw).get("ended_early") == 1)
    row = ledger_row(gw)
    assert (row["requests"], row["model_calls"]) == (1, 1)
    # what the client read, at least (the gateway may have taken a piece more)
    assert 5 <= row["output_tokens"] < 50
    assert gw.chat("leave", fake=fake).headers["x-cache"] == "miss"  # nothing was stored


def test_entries_of_a_redis_cache(
    make_gateway: Any, upstream: FakeUpstream, redis_server: Any
) -> None:
    gw = make_gateway(f"cache: {{backend: redis, redis: {{url: '{redis_server.url}'}}}}")
    for question in ("red one", "red two"):
        gw.chat(question)
    page = gw.http.get("/admin/cache/entries").json()
    assert page["total"] == 2 and {e["kind"] for e in page["data"]} == {"exact"}
    gone = page["data"][1]["id"]
    assert gw.http.delete(f"/admin/cache/entries/{gone}").status_code == 200
    assert gw.http.get(f"/admin/cache/entries/{gone}").status_code == 404
    assert gw.http.get("/admin/cache/entries").json()["total"] == 1
    # with Redis down an entry is neither "not found" nor "deleted": the cache cannot say
    kept = page["data"][0]["id"]
    redis_server.stop()
    try:
        for method in ("GET", "DELETE"):
            reply = gw.http.request(method, f"/admin/cache/entries/{kept}")
            assert reply.status_code == 503, (method, reply.text)
            assert reply.json()["error"]["code"] == "cache_unavailable"
    finally:
        redis_server.start()


def test_entries_of_a_cache_directory_that_cannot_be_read(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    # A damaged database (or an I/O error): showing one entry said 503 cache_unavailable, but
    # the listing (and so `cachegate cache ls`) was a 500 "internal error"
    gw = make_gateway("admin: {api_key: adm}")
    assert gw.chat("on a damaged disk").status_code == 200
    wait_for(lambda: gw.http.get("/admin/cache/entries", headers=bearer("adm")).json()["total"])

    def unreadable(*args: object, **kwargs: object) -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(diskcache.Cache, "get", unreadable)
    reply = gw.http.get("/admin/cache/entries", headers=bearer("adm"))
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["code"] == "cache_unavailable"
    assert "malformed" in reply.json()["error"]["message"]
    assert main(["cache", "ls", "--url", gw.url, "--key", "adm"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "503: cannot read the cached answers" in err


def test_an_entry_redis_dropped_by_itself_leaves_every_replica(
    make_gateway: Any, upstream: FakeUpstream, redis_server: Any
) -> None:
    # Redis drops an entry's key by itself under `maxmemory-policy volatile-lru` (what
    # docs/deployment.md allows), or a DEL by hand; no event says so. Every replica kept its
    # vector and counted it: /admin/stats said 3 entries (87 after a real eviction storm)
    # while /admin/cache/entries listed 2, and the ghost stayed the nearest neighbour.
    config = f"cache: {{backend: redis, redis: {{url: '{redis_server.url}'}}}}"
    a, b = make_gateway(config, semantic=True), make_gateway(config, semantic=True)
    for question in (
        "How do I reset my router password?",
        "Who wrote Hamlet?",
        "Why is the sky blue?",
    ):
        assert a.chat(question).headers["x-cache"] == "miss"
    oldest = a.http.get("/admin/cache/entries").json()["data"][-1]["id"]  # (the router)
    client = redis.Redis.from_url(redis_server.url)
    assert client.delete(f"cachegate:e:{oldest}") == 1  # as a maxmemory eviction does
    client.close()
    no_store = {"cache-control": "no-store"}
    paraphrase = b.chat("How can I reset my router password?", headers=no_store)
    assert paraphrase.headers["x-cache"] == "miss"  # (never served: its entry is gone)

    def agree(gw: Any) -> bool:
        stats = gw.http.get("/admin/stats").json()["cache"]
        listed = gw.http.get("/admin/cache/entries").json()["total"]
        return bool(stats["entries"] == stats["index"]["entries"] == listed == 2)

    wait_for(lambda: agree(a) and agree(b), timeout=5)  # fmt: skip


def test_ledger_counts_embeddings_inputs_answered_from_the_cache(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway("prices: {fake-model: {input: 2.0}}")

    def embed(*inputs: str) -> dict[str, Any]:
        body = {"model": "fake-model", "input": list(inputs)}
        assert gw.http.post("/v1/embeddings", json=body).status_code == 200
        row: dict[str, Any] = gw.http.get("/admin/stats").json()["ledger"]["default"]["fake-model"]
        return row

    assert embed("one two three four")["input_tokens"] == 4  # (the fake counts words)
    hit = embed("one two three four")  # every input cached: a call avoided, its 4 tokens
    assert (hit["calls_avoided"], hit["avoided_input_tokens"], hit["model_calls"]) == (1, 4, 1)
    assert hit["saved_response_cache_usd"] == pytest.approx(4 * 2.0 / 1e6)
    part = embed("one two three four", "five six")  # one cached beside a call for the other
    assert (part["calls_avoided"], part["avoided_input_tokens"], part["model_calls"]) == (1, 8, 2)
    assert part["input_tokens"] == 6 and part["saved_usd"] == pytest.approx(8 * 2.0 / 1e6)
    twice = embed("seven eight nine", "seven eight nine")  # sent upstream once: 3 tokens saved
    assert (twice["model_calls"], twice["input_tokens"]) == (3, 9)
    assert twice["avoided_input_tokens"] == 11
    assert twice["saved_usd"] == pytest.approx(11 * 2.0 / 1e6)


def test_every_input_of_a_batch_is_booked_at_least_one_token(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """A batch's usage is shared among its inputs by length, but every input costs a token:
    ``"hi"`` beside ``"there"`` (2 tokens in all) was stored as 0 tokens, so its later hit was
    booked as a call avoided that saved nothing, and the hit on ``"there"`` as 2 tokens."""
    gw = make_gateway("prices: {fake-model: {input: 2.0}}")

    def embed(inputs: Any) -> dict[str, Any]:
        body = {"model": "fake-model", "input": inputs}
        assert gw.http.post("/v1/embeddings", json=body).status_code == 200
        row: dict[str, Any] = gw.http.get("/admin/stats").json()["ledger"]["default"]["fake-model"]
        return row

    assert embed(["hi", "there"])["input_tokens"] == 2  # (the fake counts words)
    hit = embed("hi")
    assert (hit["calls_avoided"], hit["avoided_input_tokens"]) == (1, 1)
    assert hit["saved_response_cache_usd"] == pytest.approx(1 * 2.0 / 1e6)
    assert embed("there")["avoided_input_tokens"] == 2  # (1 each: not 0 and 2)
    listed = gw.http.get("/admin/cache/entries").json()["data"]
    assert sorted(e["usage"]["prompt_tokens"] for e in listed) == [1, 1]


def test_cli_help_names_the_options_as_docs_observability_does() -> None:
    # docs/observability.md gave `cache ls [--namespace NS] ... [--search TEXT] [--limit N]`;
    # --help said `--namespace NAMESPACE`, `--search SEARCH`, and `--limit LIMIT` with no text.
    docs = (Path(__file__).parents[2] / "docs" / "observability.md").read_text()
    rows = re.findall(r"^\| `cachegate (cache \w+|key new|stats)([^`]*)` \|", docs, re.M)
    assert len(rows) >= 5, rows
    for command, synopsis in rows:
        usage = " ".join(
            subprocess.run(
                [sys.executable, "-m", "gateway", *command.split(), "--help"],
                capture_output=True, text=True, timeout=60, check=True,
            ).stdout.split()
        )  # fmt: skip
        for option in re.findall(r"--[a-z]+(?: [A-Z]+)?", synopsis):
            assert f"[{option}]" in usage or f"{option} " in usage, (command, option, usage)
        if command == "cache ls":
            assert "--limit N answers shown, 1 to 500 (default 20)" in usage
