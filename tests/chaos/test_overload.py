"""Overload with the bound on: when requests would wait for the embedder longer than
``cache.semantic.max_wait_ms``, they skip the semantic tier and go straight to the model, are
answered right, stored for exact hits, and counted in
``cachegate_semantic_skipped_total{reason="overload"}``. (The 200-connection target is a
benchmark: bench/overload.py; a test asserts the path, not timings.)"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import openai

from tests.conftest import Gateway
from tests.fake_upstream import FakeUpstream


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
