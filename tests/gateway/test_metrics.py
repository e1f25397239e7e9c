"""What ``/metrics`` says about requests, streams and the cache, over real HTTP."""

from __future__ import annotations

import concurrent.futures
import json
import logging
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import diskcache
import httpx
import pytest

from tests.conftest import wait_for
from tests.fake_upstream import FakeUpstream

ROUTE = "/v1/chat/completions"


def sample(metrics: str, name: str, **labels: str) -> float:
    """The value of one series; 0 when it is absent."""
    for line in metrics.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_stream_latency_is_measured_to_the_first_event(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "slow start"}]}
    response = gw.http.post(ROUTE, json={**body, "stream": True, "fake": {"first_delay": 1.0}})
    assert response.status_code == 200 and "[DONE]" in response.text
    metrics = gw.http.get("/metrics").text
    latency = "cachegate_request_duration_seconds_sum"
    # the upstream sent its headers at once and its first event 1 s later
    assert sample(metrics, latency, route=ROUTE, cache="miss") >= 0.95
    assert sample(metrics, "cachegate_requests_total", cache="miss", status="200") == 1
    # a replayed stream is timed too
    gw.http.post(ROUTE, json={**body, "stream": True, "fake": {"first_delay": 1.0}})
    metrics = gw.http.get("/metrics").text
    assert sample(metrics, "cachegate_request_duration_seconds_count", cache="exact") == 1
    assert sample(metrics, latency, cache="exact") < 0.9  # not the upstream's 1 s again


def test_streams_that_end_badly_are_counted(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()

    def stream(fake: dict[str, Any]) -> str:
        body = {
            "model": "fake-model",
            "messages": [{"role": "user", "content": f"q {fake}"}],
            "stream": True,
            "fake": fake,
        }
        return gw.http.post(ROUTE, json=body).text

    assert '"error"' in stream({"error_event": 2})
    assert '"error"' in stream({"break_after": 1})
    assert '"error"' in stream({"bad_chunk": 1})
    assert "[DONE]" in stream({})  # a good stream counts nothing
    with httpx.Client(base_url=gw.url, timeout=10) as http:  # a client that hangs up
        body = {
            "model": "fake-model",
            "messages": [{"role": "user", "content": "long"}],
            "stream": True,
            "fake": {"chunk_delay": 0.3, "chunks": 20},
        }
        with http.stream("POST", ROUTE, json=body) as response:
            next(response.iter_raw())
    deadline = time.time() + 5
    while True:
        metrics = gw.http.get("/metrics").text
        errors = {
            code: sample(metrics, "cachegate_stream_errors_total", route=ROUTE, code=code)
            for code in ("upstream_error", "internal_error", "client_disconnected")
        }
        if errors["client_disconnected"] or time.time() > deadline:
            break
        time.sleep(0.05)
    # the upstream's error event, its cut stream and the chunk the gateway could not read (the
    # upstream's fault too, not the gateway's internal_error)
    assert errors == {"upstream_error": 3, "internal_error": 0, "client_disconnected": 1}
    series = [line for line in metrics.splitlines() if line.startswith("cachegate_stream_errors")]
    assert len(series) == 2, series


def test_a_client_that_leaves_after_done_got_its_whole_stream(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """A client that closes its connection once it has read ``[DONE]`` (as many do) while the
    gateway still reads the end of the upstream's body (a worker cleaning up): its answer was
    whole and stored, and was counted as a ``client_disconnected`` stream, logged 499."""
    gw = make_gateway()
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "whole"}],
            "stream": True, "fake": {"done_delay": 0.5}}  # fmt: skip
    for _ in range(3):
        with (
            httpx.Client(base_url=gw.url, timeout=10) as http,
            http.stream(
                "POST", ROUTE, json=body, headers={"cache-control": "no-cache"}
            ) as response,
        ):
            assert next(line for line in response.iter_lines() if "[DONE]" in line)
    time.sleep(1.0)  # (each gateway-side drain is over)
    metrics = gw.http.get("/metrics").text
    assert "cachegate_stream_errors_total{" not in metrics
    assert sample(metrics, "cachegate_requests_total", route=ROUTE, status="200") == 3
    assert gw.http.post(ROUTE, json={**body, "stream": False}).headers["x-cache"] == "exact"


def test_monotonic_statistics_are_counters(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    gw.chat("one")
    gw.chat("one")
    response = gw.http.get("/metrics")
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    metrics = response.text
    assert "# TYPE cachegate_cache_lookups_total counter" in metrics
    assert sample(metrics, "cachegate_cache_lookups_total") == 2
    assert sample(metrics, "cachegate_cache_hits_exact_total") == 1
    assert sample(metrics, "cachegate_cache_stores_total") == 1
    assert "# TYPE cachegate_cache_entries gauge" in metrics  # a level, not a count
    assert 'cachegate_semantic_skipped_total{reason="overload"}' in metrics
    assert "cachegate_cache_semantic_skipped" not in metrics  # (not twice under two names)
    assert sample(metrics, "cachegate_cache_entries") == 1
    # every model's series from the start, at 0 (appearing at 1, its first went uncounted)
    models = re.findall(r'cachegate_coalesced_requests_total\{model="([^"]+)"\} 0\.0', metrics)
    assert sorted(models) == sorted(gw.http.get("/admin/stats").json()["models"])
    page = gw.http.get("/dashboard")
    assert page.headers["content-type"] == "text/html; charset=utf-8"


def test_a_malformed_request_is_counted_under_the_model_it_names(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    assert gw.chat("x", temperature="hot").status_code == 400
    assert gw.chat("x", model="no-such-model", temperature="hot").status_code == 400
    assert gw.http.post(ROUTE, content=b"{not json").status_code == 400
    metrics = gw.http.get("/metrics").text
    # a configured model's label, as for an error its upstream answered; "" for any other
    assert sample(metrics, "cachegate_requests_total", model="fake-model", status="400") == 1
    assert sample(metrics, "cachegate_requests_total", model="", status="400") == 2


def test_unknown_routes_and_wrong_methods_are_counted_and_logged(
    make_gateway: Any, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    # a 404 (no such route) or a 405 (a wrong method) was in neither /metrics nor the log: a
    # client calling a misspelt URL was invisible to the operator
    gw = make_gateway()
    caplog.set_level(logging.INFO, logger="cachegate.requests")
    assert gw.http.get(ROUTE, headers={"x-request-id": "mine-5"}).status_code == 405
    for i in range(2):
        assert gw.http.post(f"/v1/chat/completion/made-up-{i}", json={}).status_code == 404
    metrics = gw.http.get("/metrics").text
    counted = {"route": "unknown", "model": "", "cache": "bypass"}
    assert sample(metrics, "cachegate_requests_total", **counted, status="405") == 1
    assert sample(metrics, "cachegate_requests_total", **counted, status="404") == 2
    assert "made-up" not in metrics  # (a label the client makes up: a new series each time)
    logged = [r.getMessage() for r in caplog.records if r.name == "cachegate.requests"]
    assert any(m.startswith("mine-5 unknown ") and "status=405" in m for m in logged)
    assert sum("unknown" in m and "status=404" in m for m in logged) == 2


def test_side_routes_are_counted_by_their_route_template(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    # only the generation routes and unrouted requests were counted: GET /v1/models, the
    # stored responses' routes, the token counts and the admin routes were in no series
    gw = make_gateway()
    assert gw.http.get("/v1/models").status_code == 200
    assert gw.http.get("/v1/models/fake-model").status_code == 200
    for i in range(2):
        assert gw.http.get(f"/v1/responses/resp_made_up_{i}").status_code == 404
    assert gw.http.delete("/v1/responses/resp_made_up_2").status_code == 404
    assert gw.http.get("/v1/responses/resp_made_up_3/input_items").status_code == 404
    assert gw.http.get("/admin/stats").status_code == 200
    assert gw.chat("counted once").status_code == 200
    metrics = gw.http.get("/metrics").text
    side = {"model": "", "cache": "bypass"}
    count = "cachegate_requests_total"
    assert sample(metrics, count, **side, route="/v1/models", status="200") == 1
    assert sample(metrics, count, **side, route="/v1/models/{model_id}", status="200") == 1
    assert sample(metrics, count, **side, route="/v1/responses/{response_id}", status="404") == 3
    input_items = "/v1/responses/{response_id}/input_items"
    assert sample(metrics, count, **side, route=input_items, status="404") == 1
    assert sample(metrics, count, **side, route="/admin/stats", status="200") == 1
    assert "made_up" not in metrics  # (never the path: an id would make a series per request)
    # the API routes count themselves, with their model and cache outcome, once
    assert sample(metrics, count, route=ROUTE, model="fake-model", cache="miss") == 1
    assert sample(metrics, count, route=ROUTE, model="", cache="bypass") == 0
    assert sample(metrics, count, route="unknown") == 0
    assert sample(gw.http.get("/metrics").text, count, route="/metrics", status="200") == 1


def test_a_cache_directory_that_cannot_be_read_answers_misses(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """A damaged database or an I/O error on a read: the model answers (was a 500)."""
    gw = make_gateway()
    assert gw.chat("unreadable").status_code == 200  # stored: the next one reads it
    wait_for(lambda: gw.chat("unreadable").headers["x-cache"] == "exact")

    def unreadable(*args: object, **kwargs: object) -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(diskcache.Cache, "get", unreadable)
    caplog.set_level(logging.INFO)
    for _ in range(2):
        response = gw.chat("unreadable")
        assert response.status_code == 200 and response.headers["x-cache"] == "miss"
    warnings = [r for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING  # once per outage
    monkeypatch.undo()
    wait_for(lambda: gw.chat("unreadable").headers["x-cache"] == "exact")
    assert any("can be read again" in r.getMessage() for r in caplog.records)


def test_answers_a_full_disk_refuses_are_served_and_counted(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    gw = make_gateway()

    def full(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(diskcache.Cache, "set", full)
    caplog.set_level(logging.INFO)
    for n in range(3):
        assert gw.chat(f"question {n}").status_code == 200  # served all the same

    def failures() -> float:
        return sample(gw.http.get("/metrics").text, "cachegate_cache_store_failures_total")

    wait_for(lambda: failures() == 3)  # was 0: a traceback per answer instead
    refusals = [r for r in caplog.records if "refuses writes" in r.getMessage()]
    assert len(refusals) == 1 and refusals[0].levelno == logging.WARNING  # once per outage
    assert not [r for r in caplog.records if r.exc_info]
    assert gw.chat("question 0").headers["x-cache"] == "miss"  # nothing half-stored
    monkeypatch.undo()  # the disk has room again
    wait_for(lambda: failures() == 4)
    assert gw.chat("question 0").status_code == 200
    wait_for(lambda: gw.chat("question 0").headers["x-cache"] == "exact")
    assert any("takes writes again" in r.getMessage() for r in caplog.records)


def test_an_answer_the_store_cannot_encode_is_served_and_counted(
    make_gateway: Any, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    gw = make_gateway()
    answer = {
        "id": "chatcmpl-big", "object": "chat.completion", "created": 1, "model": "fake-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "big"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        "system_fingerprint": 2**70,  # msgpack holds integers of 64 bits at most
    }  # fmt: skip
    response = gw.chat("big", fake={"raw": {"body": json.dumps(answer)}})
    assert response.status_code == 200 and response.json()["system_fingerprint"] == 2**70

    def failures() -> float:
        return sample(gw.http.get("/metrics").text, "cachegate_cache_store_failures_total")

    wait_for(lambda: failures() == 1)  # was 0, and a traceback in the log
    assert not [r for r in caplog.records if r.exc_info]
    assert gw.chat("big", fake={"raw": {"body": json.dumps(answer)}}).headers["x-cache"] == "miss"


def test_answers_superseded_by_a_flush_are_counted(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """An answer whose request began before a flush is not stored (made before the flush):
    it was counted nowhere, neither a store nor a store failure."""
    gw = make_gateway()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        before = pool.submit(gw.chat, "Name three prime numbers.", fake={"delay": 1.0})
        wait_for(lambda: upstream.stats["chat"] == 1)  # the request waits for the model
        assert gw.http.post("/admin/cache/flush", json={}).status_code == 200
        assert before.result().headers["x-cache"] == "miss"

    def superseded() -> float:
        return sample(gw.http.get("/metrics").text, "cachegate_cache_stores_superseded_total")

    wait_for(lambda: superseded() == 1)  # was absent
    assert sample(gw.http.get("/metrics").text, "cachegate_cache_stores_total") == 0
    assert gw.http.get("/admin/stats").json()["cache"]["stores_superseded"] == 1


def _documented_metrics() -> list[tuple[str, list[str]]]:
    """The metric tables of docs/observability.md and docs/deployment.md: (name, the names it
    may stand for) per entry.

    A shorthand ``_suffix`` after a full name replaces that name's last words; names with a
    placeholder (``<reason>``, ``*``) and the local model's ``cachegate_backend_*`` are left out.
    """
    docs = Path(__file__).parents[2] / "docs"
    tables = [
        (docs / "observability.md").read_text().split("## Metrics (`GET /metrics`)", 1)[1],
        (docs / "deployment.md").read_text().split("## Monitoring", 1)[1],
    ]
    out = []
    for line in "\n".join(tables).splitlines():
        if not line.startswith("| `cachegate_"):
            continue
        names = re.findall(r"`(_?[a-z_]+[a-z<>*_]*)`", line.split("|")[1])
        first = names[0].split("_")
        for name in names:
            if name.startswith("_"):
                stems = ["_".join(first[:i]) for i in range(2, len(first))]
                out.append((name, [stem + name for stem in stems]))
            else:
                out.append((name, [name]))
    return [(n, c) for n, c in out if not re.search(r"[<>*]|^cachegate_backend_", c[0])]


def test_every_documented_metric_is_exported(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway(
        "server: {admission_max_lag_ms: 10}\n"
        "cache: {semantic: {audit_rate: 1.0, auto_tighten: true, max_wrong_rate: 0.05}}",
        semantic=True,
    )
    gw.chat("what is the capital of France?")
    gw.chat("what is the capital of France?")  # an exact hit
    gw.chat("retried", fake={"status": 503, "fail_times": 1})
    gw.chat("cut short", stream=True, fake={"break_after": 1})
    together = {"delay": 1}  # two at once: one is coalesced
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda _: gw.chat("together", fake=together), range(2)))
    exported = {
        re.sub(r"_(bucket|count|sum)$", "", line.split("{")[0].split(" ")[0])
        for line in gw.http.get("/metrics").text.splitlines()
        if line and not line.startswith("#")
    }
    documented = _documented_metrics()
    assert len(documented) > 60
    missing = [name for name, candidates in documented if not exported & set(candidates)]
    assert missing == []
    known = {name for _, candidates in documented for name in candidates}
    undocumented = {
        name
        for name in exported - known
        if not re.match(r"cachegate_backend_|cachegate_cache_guard_rejections_by_reason_", name)
    }
    assert undocumented == set()


def test_made_up_partitions_past_the_first_hundred_share_their_tenants_series(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """Any client with a tenant key could send a new ``x-cachegate-partition`` with each
    request: each opened 23 ``cachegate_ledger_*`` series, up to 10,000 accounts (a 20 MB
    scrape). Now the first 100 partitions keep series of their own, later ones count with
    their tenant's, and every series still only grows."""
    gw = make_gateway("auth: {keys: [{key: key-a, tenant: a}]}\nadmin: {api_key: adm}")
    client = httpx.Client(base_url=gw.url, headers={"authorization": "Bearer key-a"})
    admin = {"authorization": "Bearer adm"}

    def ask(partition: str) -> None:
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "q"}]}
        headers = {"x-cachegate-partition": partition}
        assert client.post(ROUTE, json=body, headers=headers).status_code == 200

    def requests_of(tenant: str) -> float:
        metrics = gw.http.get("/metrics", headers=admin).text
        return sample(metrics, "cachegate_ledger_requests_total", tenant=tenant)

    for n in range(103):
        ask(f"made-up-{n}")
    wait_for(lambda: requests_of("a") == 3)  # made-up-100 to -102
    metrics = gw.http.get("/metrics", headers=admin).text
    labelled = set(re.findall(r'tenant="a\x1f(made-up-\d+)"', metrics))
    assert labelled == {f"made-up-{n}" for n in range(100)}
    ask("made-up-0")  # a partition with series of its own keeps them
    wait_for(lambda: requests_of("a\x1fmade-up-0") == 2)
    ask("made-up-101")
    wait_for(lambda: requests_of("a") == 4)
    ledger = gw.http.get("/admin/stats", headers=admin).json()["ledger"]
    assert ledger["a\x1fmade-up-101"]["fake-model"]["requests"] == 2  # (every account there)
    client.close()


def test_a_request_visits_one_account_of_a_thousand(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """A request re-checks the cache writes of the account it charged, not of every account a
    tenant key made up; /admin/stats and /metrics count the same as before."""
    from gateway.ledger import Usage
    from gateway.requests import partitioned

    gw = make_gateway("admin: {api_key: adm}")
    ledger, admin = gw.runtime.ledger, {"authorization": "Bearer adm"}
    for n in range(1000):
        ledger.record(partitioned("x", f"p{n}"), "fake-model", Usage(10, 1, 0, 4),
                      source="upstream", hit=False)  # fmt: skip
    visited: list[object] = []
    expire = ledger._expire
    ledger._expire = lambda account, *args: visited.append(account) or expire(account, *args)
    assert gw.chat("one account").status_code == 200
    wait_for(lambda: visited)
    assert len(visited) == 1
    stats = gw.http.get("/admin/stats", headers=admin).json()["ledger"]
    assert sum(row["fake-model"]["requests"] for row in stats.values()) == 1001
    assert sum(row["fake-model"]["cache_write_tokens"] for row in stats.values()) == 4000
    metrics = gw.http.get("/metrics", headers=admin).text
    requests = re.findall(r"^cachegate_ledger_requests_total\{[^}]*\} (\S+)$", metrics, re.M)
    assert sum(float(value) for value in requests) == 1001
