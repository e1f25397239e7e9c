"""Overload with the bounds on: when requests would wait for the embedder longer than
``cache.semantic.max_wait_ms``, or while the gateway's event loop runs late and requests wait
at its door (``server.admission_max_lag_ms``), they skip the semantic tier and go straight to
the model, are answered right, stored for exact hits, and counted in
``cachegate_semantic_skipped_total{reason="overload"}``. (The 200-connection target is a
benchmark: bench/overload.py; a test asserts the path, not timings.)"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import openai
import pytest

from gateway.cli import main as cli
from tests.conftest import Gateway
from tests.fake_upstream import FakeUpstream
from tests.gateway.test_admission import blocking


def test_an_overloaded_embedder_is_skipped_and_counted(
    make_gateway: Callable[..., Gateway], upstream: FakeUpstream
) -> None:
    gw = make_gateway("cache: {semantic: {enabled: true, max_wait_ms: 1}}", semantic=True)
    questions = [f"What is the overload answer number {i}?" for i in range(48)]

    async def burst() -> list[Any]:
        client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="sk", max_retries=0)
        async with client:
            return await asyncio.gather(*(
                client.chat.completions.with_raw_response.create(
                    model="fake-model", messages=[{"role": "user", "content": q}])
                for q in questions
            ))  # fmt: skip

    replies = asyncio.run(burst())
    for question, raw in zip(questions, replies, strict=True):
        assert raw.headers["x-cache"] == "miss"
        assert f" to: {question} [" in raw.parse().choices[0].message.content  # the right one
    assert upstream.stats["chat"] == len(questions)
    stats = gw.http.get("/admin/stats").json()["cache"]
    skipped = stats["semantic_skipped"]["overload"]
    assert skipped >= 1
    # a request that skipped the lookup stores its answer without waiting for the embedder again
    assert stats["semantic_skipped"]["overload_store"] >= skipped
    metrics = gw.http.get("/metrics").text
    found = re.search(r'cachegate_semantic_skipped_total\{reason="overload"\} (\S+)', metrics)
    assert found and float(found.group(1)) == skipped
    assert "cachegate_cache_embedder_wait_seconds_total" in metrics
    for question in questions:  # every answer was stored (for exact hits at least)
        assert gw.chat(question).headers["x-cache"] == "exact"
    assert upstream.stats["chat"] == len(questions)


def _in_parallel(calls: list[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:  # (reported by the assertion on results)
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_an_overloaded_gateway_queues_at_the_door_and_skips_the_semantic_tier(
    make_gateway: Callable[..., Gateway], capsys: pytest.CaptureFixture[str]
) -> None:
    """Through HTTP with the official SDK: while the gateway's loop runs late, requests wait
    at the door (all answered, none refused), lookups skip the semantic tier, and /metrics and
    /admin/stats say so."""
    gw = make_gateway("server: {admission_max_lag_ms: 5}", semantic=True)
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-test", max_retries=0)

    def ask(question: str) -> Callable[[], Any]:
        return lambda: client.chat.completions.with_raw_response.create(
            model="fake-model", messages=[{"role": "user", "content": question}]
        )

    ask("warm up")()  # the door's probe starts, and knows the gateway's loop
    admission = gw.runtime.admission
    assert admission is not None and admission.loop is not None
    admission.cpu_clock = time.monotonic  # (busy, whatever CPU share a loaded machine gives)
    blocking(admission.loop, 2.0)
    time.sleep(0.3)
    answers = _in_parallel([ask(f"distinct question number {i}") for i in range(12)])
    assert all(not isinstance(a, Exception) for a in answers), answers
    assert [a.headers["x-cache"] for a in answers] == ["miss"] * 12
    assert all(a.parse().choices[0].message.content for a in answers)

    stats = gw.http.get("/admin/stats").json()
    assert stats["admission"]["waited"] >= 1
    assert stats["admission"]["admitted"] == 13
    assert stats["cache"]["semantic_skipped"]["overload"] >= 1
    metrics = gw.http.get("/metrics").text
    waited = re.search(r"^cachegate_admission_wait_seconds_count (\S+)$", metrics, re.M)
    assert waited is not None and float(waited.group(1)) >= 1
    assert re.search(r"^cachegate_admission_admitted_total 13(\.0)?$", metrics, re.M)
    assert "cachegate_admission_loop_lag_seconds" in metrics
    assert cli(["stats", "--url", gw.url]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("admission:"))
    assert re.search(rf"; {stats['admission']['waited']} of 13 requests waited", line), line
