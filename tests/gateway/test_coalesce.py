"""Identical misses in flight at once make one model call (``cache.coalesce``).

Driven by the official ``openai`` SDK (async client, many requests at once) against a gateway
whose model is the fake upstream; ``fake.delay`` keeps the first request in flight long
enough for the others to arrive while it runs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from gateway import pipeline
from gateway.admission import Admission
from tests.conftest import Gateway
from tests.fake_upstream import FakeUpstream

QUESTION = [{"role": "user", "content": "Name three prime numbers."}]
STORED = "How do I reset my password?"
PARAPHRASE = "How can I reset my password?"  # a semantic hit of STORED (test_semantic_api)


def client(gw: Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="sk-client", max_retries=0)


async def ask(gw: Gateway, n: int, fake: dict[str, Any], **kwargs: Any) -> list[Any]:
    """``n`` identical chat requests at once; the raw responses (headers and parsed body)."""
    async with client(gw) as sdk:

        async def one() -> Any:
            return await sdk.chat.completions.with_raw_response.create(
                model="fake-model", messages=QUESTION, extra_body={"fake": fake}, **kwargs
            )

        return list(await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True))


async def ask_streams(gw: Gateway, n: int, fake: dict[str, Any]) -> list[tuple[str, str]]:
    """``n`` identical streaming requests at once: (x-cache, streamed text) of each."""
    async with client(gw) as sdk:

        async def one() -> tuple[str, str]:
            raw = await sdk.chat.completions.with_raw_response.create(
                model="fake-model", messages=QUESTION, stream=True, extra_body={"fake": fake}
            )
            text = ""
            async for chunk in raw.parse():
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
            return raw.headers["x-cache"], text

        return list(await asyncio.gather(*(one() for _ in range(n))))


def coalesced_metric(gw: Gateway) -> float:
    for line in gw.http.get("/metrics").text.splitlines():
        if line.startswith('cachegate_coalesced_requests_total{model="fake-model"}'):
            return float(line.split()[-1])
    return 0.0


def test_identical_misses_in_flight_make_one_upstream_call(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    replies = asyncio.run(ask(gw, 8, {"delay": 1.0}))  # (all 8 arrive meanwhile)
    assert upstream.stats["chat"] == 1
    caches = sorted(r.headers["x-cache"] for r in replies)
    assert caches == ["exact"] * 7 + ["miss"]
    answers = {r.parse().choices[0].message.content for r in replies}
    assert len(answers) == 1
    assert len({r.parse().id for r in replies}) == 8  # each reply is its own response
    followers = [r for r in replies if r.headers["x-cache"] == "exact"]
    assert all(r.headers["x-cache-coalesced"] == "true" for r in followers)
    assert (
        "x-cache-coalesced"
        not in next(r for r in replies if r.headers["x-cache"] == "miss").headers
    )
    assert coalesced_metric(gw) == 7
    stats = gw.http.get("/admin/stats").json()["cache"]
    assert stats["lookups"] == 8 and stats["hits"]["exact"] == 7  # one lookup per request

    # different questions at once are not coalesced
    async def different() -> None:
        async with client(gw) as sdk:
            await asyncio.gather(
                *(
                    sdk.chat.completions.create(
                        model="fake-model",
                        messages=[{"role": "user", "content": f"question {i}"}],
                        extra_body={"fake": {"delay": 0.3}},
                    )
                    for i in range(4)
                )
            )

    asyncio.run(different())
    assert upstream.stats["chat"] == 5


def test_an_identical_request_whose_lookup_outlasts_the_others_flight_makes_no_call(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two identical requests at once; the second's lookup (its embedding, say) lasts until
    the first has called the model, stored its answer and landed its flight: it saw neither
    the answer nor a flight, and called the model again (a review: eight at once made two
    calls in five bursts of eight, against a fast upstream). Now it looks again: a hit."""
    gw = make_gateway()
    cache = gw.runtime.pipeline.cache
    assert cache is not None
    lookup = cache.lookup
    began: list[asyncio.Event] = []

    async def slow_second(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("again") is None:  # (a first lookup: the two requests')
            began.append(asyncio.Event())
            if len(began) == 1:  # the first waits until the second has begun its own
                await asyncio.wait_for(began[0].wait(), 5)
            else:
                began[0].set()
                found = await lookup(*args, **kwargs)  # (a miss: nothing stored yet)
                await asyncio.sleep(0.5)  # ... meanwhile the first's flight lands
                return found
        return await lookup(*args, **kwargs)

    monkeypatch.setattr(cache, "lookup", slow_second)
    replies = asyncio.run(ask(gw, 2, {}))
    assert upstream.stats["chat"] == 1
    assert sorted(r.headers["x-cache"] for r in replies) == ["exact", "miss"]
    second = next(r for r in replies if r.headers["x-cache"] == "exact")
    assert second.headers["x-cache-coalesced"] == "true"
    assert len({r.parse().choices[0].message.content for r in replies}) == 1
    assert not len(gw.runtime.pipeline.flights)


def test_a_failed_first_request_hands_the_call_to_one_of_the_others(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """The first call fails (a 500, not retried here): one waiting request calls again, the
    others wait for it and are served its answer; no herd of calls to a failing model."""
    gw = make_gateway(model_yaml="max_retries: 0")
    replies = asyncio.run(ask(gw, 6, {"delay": 0.4, "status": 500, "fail_times": 1}))
    failed = [r for r in replies if isinstance(r, openai.InternalServerError)]
    answered = [r for r in replies if not isinstance(r, Exception)]
    assert len(failed) == 1 and failed[0].status_code == 502  # the first one's own failure
    assert upstream.stats["chat"] == 2
    assert sorted(r.headers["x-cache"] for r in answered) == ["exact"] * 4 + ["miss"]
    assert len({r.parse().choices[0].message.content for r in answered}) == 1
    assert coalesced_metric(gw) == 4
    assert not len(gw.runtime.pipeline.flights)


def test_a_model_that_fails_twice_fails_the_others_without_calling_it(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """The first call and the one a waiting request made after it both fail: the others get
    that error (marked coalesced) instead of each calling the failing model again."""
    gw = make_gateway(model_yaml="max_retries: 0")
    replies = asyncio.run(ask(gw, 6, {"delay": 0.4, "status": 500}))
    assert all(isinstance(r, openai.InternalServerError) for r in replies), replies
    assert upstream.stats["chat"] == 2
    shared = [r for r in replies if r.response.headers.get("x-cache-coalesced") == "true"]
    assert len(shared) == 4
    assert all("HTTP 500" in r.message for r in replies)
    assert not len(gw.runtime.pipeline.flights)


def test_a_request_error_of_the_first_is_shared_with_the_others(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """A 400 about the request itself would fail every identical request: the others get it
    at once, and nothing of it is cached."""
    gw = make_gateway()
    fake = {"delay": 0.4, "status": 400, "fail_times": 1}
    replies = asyncio.run(ask(gw, 5, fake))
    assert all(isinstance(r, openai.BadRequestError) for r in replies), replies
    assert upstream.stats["chat"] == 1
    coalesced = [r.response.headers.get("x-cache-coalesced") for r in replies]
    assert sorted(coalesced, key=str) == [None] + ["true"] * 4
    assert all("fake failure 400" in r.message for r in replies)
    # the same body again, alone (the fake fails it only once): a fresh answer, then a hit
    assert gw.chat("Name three prime numbers.", fake=fake).headers["x-cache"] == "miss"
    assert gw.chat("Name three prime numbers.", fake=fake).headers["x-cache"] == "exact"


def test_a_request_error_of_a_stream_is_not_shared_with_plain_requests(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """The first request streams and is refused (400: the upstream will not stream this model
    to this account); the plain requests waiting for it are not refused with it: one of them
    calls the model, the others are served its answer."""
    gw = make_gateway()
    fake = {"delay": 0.4, "stream_status": 400}

    async def run() -> tuple[Exception, list[Any]]:
        async with client(gw) as sdk:
            stream = asyncio.create_task(
                sdk.chat.completions.create(
                    model="fake-model", messages=QUESTION, stream=True, extra_body={"fake": fake}
                )
            )
            await until_upstream_called(upstream, 1)  # the stream leads
            plain = await ask(gw, 4, fake)
            return (await asyncio.gather(stream, return_exceptions=True))[0], plain

    refused, plain = asyncio.run(run())
    assert isinstance(refused, openai.BadRequestError)
    assert all(not isinstance(r, Exception) for r in plain), plain
    assert sorted(r.headers["x-cache"] for r in plain) == ["exact"] * 3 + ["miss"]
    assert upstream.stats["chat"] == 2
    assert not len(gw.runtime.pipeline.flights)


def test_a_request_error_is_not_shared_with_requests_that_differ_outside_the_key(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """``user`` is outside the cache key, but it is sent upstream: the first request is
    refused for its own ``user`` (400); those waiting for it with another ``user`` are not
    refused with it (one of them calls, the others are served its answer), while one that
    sent the very same body gets it at once."""
    gw = make_gateway()
    fake = {"delay": 0.4, "refuse_user": "x" * 600}

    async def run() -> tuple[Any, Any, list[Any]]:
        async with client(gw) as sdk:

            def one(user: str) -> Any:
                return sdk.chat.completions.with_raw_response.create(
                    model="fake-model", messages=QUESTION, user=user, extra_body={"fake": fake}
                )

            first = asyncio.create_task(one("x" * 600))
            await until_upstream_called(upstream, 1)  # the refused one leads
            same = asyncio.create_task(one("x" * 600))
            others = await asyncio.gather(*(one(f"user-{i}") for i in range(4)),
                                          return_exceptions=True)  # fmt: skip
            refused = await asyncio.gather(first, same, return_exceptions=True)
            return refused[0], refused[1], others

    first, same, others = asyncio.run(run())
    assert isinstance(first, openai.BadRequestError) and isinstance(same, openai.BadRequestError)
    assert same.response.headers["x-cache-coalesced"] == "true"
    assert all(not isinstance(r, Exception) for r in others), others  # were: the first's 400
    assert sorted(r.headers["x-cache"] for r in others) == ["exact"] * 3 + ["miss"]
    assert upstream.stats["chat"] == 2
    assert not len(gw.runtime.pipeline.flights)


def test_waiting_on_after_a_failure_is_still_bounded_by_max_wait(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """The first call fails and the one that calls again hangs: the others stop waiting
    ``max_wait`` after they began, and call the model themselves."""
    gw = make_gateway("cache: {coalesce: {max_wait: 1.0}}", "max_retries: 0")
    fake = {"contents": [{"status": 500, "delay": 0.3}, {"delay": 5.0}, "third", "fourth"]}

    async def run() -> list[tuple[float, Any]]:
        started = time.perf_counter()

        async def timed() -> tuple[float, Any]:
            reply = (await ask(gw, 1, fake))[0]
            return time.perf_counter() - started, reply

        first = asyncio.create_task(timed())
        await until_upstream_called(upstream, 1)  # the first one leads
        others = [asyncio.create_task(timed()) for _ in range(3)]
        return [await first, *[await task for task in others]]

    (_, first), *others = asyncio.run(run())
    assert isinstance(first, openai.InternalServerError)
    done = sorted(others, key=lambda pair: pair[0])
    assert [r.parse().choices[0].message.content for _, r in done[:2]] in (
        ["third", "fourth"], ["fourth", "third"])  # fmt: skip
    assert done[1][0] < 4.0  # they waited ~1 s, not for the hanging call (5 s)
    assert done[2][0] >= 5.0 and done[2][1].headers["x-cache"] == "miss"
    assert upstream.stats["chat"] == 4


def test_waiting_is_bounded_by_max_wait(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway("cache: {coalesce: {max_wait: 0.3}}")
    started = time.perf_counter()
    replies = asyncio.run(ask(gw, 3, {"delay": 3.0}))
    # the waiting ones did not queue behind it: ~3.3 s (0.3 + 3), queued it would be 6 s
    assert time.perf_counter() - started < 5.5
    assert upstream.stats["chat"] == 3
    assert all(r.headers["x-cache"] == "miss" for r in replies)


def test_a_request_that_joined_a_flight_late_waits_its_own_max_wait(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """A flight older than ``max_wait`` is given up on by the next request (it leads its own
    call), but a request that joined the old flight shortly before still waits for it, up to
    its own ``max_wait``: it used to be woken then, find nothing stored and call the model
    itself, after waiting a fraction of its ``max_wait``."""
    gw = make_gateway("cache: {coalesce: {max_wait: 3.0}}")
    fake = {"delay": 4.0}

    async def run() -> list[Any]:
        first = asyncio.create_task(ask(gw, 1, fake))
        await until_upstream_called(upstream, 1)  # the first one leads (its flight: t=0)
        await asyncio.sleep(2.0)
        joined = asyncio.create_task(ask(gw, 1, fake))  # follows; waits until t=5 at most
        await asyncio.sleep(1.4)
        late = asyncio.create_task(ask(gw, 1, fake))  # t=3.4: the old flight is given up
        return [(await task)[0] for task in (first, joined, late)]

    first, joined, late = asyncio.run(run())
    assert first.headers["x-cache"] == "miss" and late.headers["x-cache"] == "miss"
    assert joined.headers["x-cache"] == "exact"  # the first one's answer, at t=4
    assert joined.headers["x-cache-coalesced"] == "true"
    assert upstream.stats["chat"] == 2  # (were 3: the one that joined called it too)


def test_coalescing_can_be_switched_off(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway("cache: {coalesce: {enabled: false}}")
    replies = asyncio.run(ask(gw, 4, {"delay": 0.4}))
    assert upstream.stats["chat"] == 4
    assert all(r.headers["x-cache"] == "miss" for r in replies)


def test_requests_that_skip_the_cache_are_not_coalesced(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    # (max-age=0 takes no stored answer: waiting for one would only delay it)
    for header in ("no-store", "no-cache", "max-age=0"):
        before = upstream.stats["chat"]
        replies = asyncio.run(
            ask(gw, 3, {"delay": 0.3, "tag": header}, extra_headers={"cache-control": header})
        )
        assert upstream.stats["chat"] - before == 3, header
        assert all(r.headers["x-cache"] in ("miss", "refresh") for r in replies)


async def until_upstream_called(upstream: FakeUpstream, n: int, timeout: float = 5.0) -> None:
    """Until the upstream has had ``n`` chat calls (a leader registers its flight first)."""
    deadline = time.monotonic() + timeout
    while upstream.stats["chat"] < n:
        assert time.monotonic() < deadline, f"{upstream.stats['chat']} upstream calls, not {n}"
        await asyncio.sleep(0.02)


def test_streams_do_not_wait_by_default_but_may_lead(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    fake = {"delay": 1.2}
    streams = asyncio.run(ask_streams(gw, 3, fake))
    assert upstream.stats["chat"] == 3  # first tokens as soon as each stream can give them
    assert all(cache == "miss" for cache, _ in streams)
    assert len({text for _, text in streams}) == 3  # the fake numbers its answers

    # a stream in flight is a first request that plain requests wait for
    before = upstream.stats["chat"]

    async def mixed() -> tuple[tuple[str, str], list[Any]]:
        stream = asyncio.create_task(ask_streams(gw, 1, {**fake, "tag": "mixed"}))
        await until_upstream_called(upstream, before + 1)  # the stream is in flight
        plain = await ask(gw, 3, {**fake, "tag": "mixed"})
        return (await stream)[0], plain

    (cache, text), plain = asyncio.run(mixed())
    assert upstream.stats["chat"] - before == 1
    assert cache == "miss"
    assert [r.headers["x-cache"] for r in plain] == ["exact"] * 3
    assert {r.parse().choices[0].message.content for r in plain} == {text}


def test_streams_wait_when_configured(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway("cache: {coalesce: {streams: true}}")
    streams = asyncio.run(ask_streams(gw, 4, {"delay": 0.4}))
    assert upstream.stats["chat"] == 1
    assert sorted(cache for cache, _ in streams) == ["exact"] * 3 + ["miss"]
    assert len({text for _, text in streams}) == 1 and streams[0][1]


@pytest.mark.parametrize("stream", [False, True])
def test_first_request_cancelled_by_its_client_releases_the_others(
    make_gateway: Any, upstream: FakeUpstream, stream: bool
) -> None:
    """The first client hangs up: one waiting request calls the model, the others wait for it."""
    gw = make_gateway("cache: {coalesce: {streams: true}}")
    body = {"model": "fake-model", "messages": QUESTION, "stream": stream}
    body["fake"] = {"delay": 4.0} if not stream else {"chunk_delay": 0.6}

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=gw.url, timeout=30) as http:
            first = asyncio.create_task(http.post("/v1/chat/completions", json=body))
            await until_upstream_called(upstream, 1)  # the first one is in flight
            others = [
                asyncio.create_task(http.post("/v1/chat/completions", json=body)) for _ in range(3)
            ]
            await asyncio.sleep(1.0)  # the others wait for it (nothing to watch: a pause)
            first.cancel()  # closes the first connection: the gateway cancels its upstream call
            return list(await asyncio.gather(*others))

    started = time.perf_counter()
    others = asyncio.run(run())
    assert time.perf_counter() - started < 20  # nobody waited out max_wait (60 s)
    assert all(r.status_code == 200 for r in others)
    assert sorted(r.headers["x-cache"] for r in others) == ["exact", "exact", "miss"]
    assert upstream.stats["chat"] == 2
    # no flight is left behind: a later identical request is a plain hit, at once
    again = gw.http.post("/v1/chat/completions", json=body)
    assert again.headers["x-cache"] == "exact"
    assert not len(gw.runtime.pipeline.flights)


class _HeldStore:
    """Wraps the gateway's cache write so that it waits for ``release`` (the test's thread):
    what happens while a fresh answer is not stored yet."""

    def __init__(self, gw: Gateway) -> None:
        self.release, self.stored = threading.Event(), threading.Event()
        cache = gw.runtime.cache
        store = cache.store

        async def held(*args: Any, **kwargs: Any) -> Any:
            await asyncio.to_thread(self.release.wait, 20)
            try:
                return await store(*args, **kwargs)
            finally:
                self.stored.set()

        cache.store = held


def test_a_fresh_answer_is_stored_off_its_response_path_and_found_by_the_next_request(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client has its answer while the cache write still waits; its next request (same
    scope, here the same question) waits for that write at its lookup and is an exact hit."""
    gw = make_gateway()
    # (the wait for the write is bounded at 1 s; this test holds the write for 0.3 s, and a
    # loaded machine could take the rest: here the bound is not what is tested)
    monkeypatch.setattr(pipeline, "_WRITTEN_WAIT_S", 10.0)
    held = _HeldStore(gw)
    sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-client", max_retries=0, timeout=10)

    def ask_once() -> Any:
        return sdk.chat.completions.with_raw_response.create(model="fake-model", messages=QUESTION)

    first = ask_once()  # (a write on the response's path would hold it for 20 s: timeout)
    assert first.headers["x-cache"] == "miss" and not held.stored.is_set()
    with ThreadPoolExecutor(1) as pool:
        second = pool.submit(ask_once)
        time.sleep(0.3)
        assert not second.done()  # it waits for the write (a miss would have been answered)
        held.release.set()
        reply = second.result(timeout=10)
    assert reply.headers["x-cache"] == "exact" and "x-cache-coalesced" not in reply.headers
    assert reply.parse().choices[0].message.content == first.parse().choices[0].message.content
    assert held.stored.is_set() and upstream.stats["chat"] == 1


def test_a_streamed_answer_is_stored_without_holding_its_last_event(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    held = _HeldStore(gw)
    sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-client", max_retries=0, timeout=10)
    stream = sdk.chat.completions.create(model="fake-model", messages=QUESTION, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)  # to [DONE]
    assert text and not held.stored.is_set()
    held.release.set()
    again = sdk.chat.completions.with_raw_response.create(model="fake-model", messages=QUESTION)
    assert again.headers["x-cache"] == "exact"
    assert again.parse().choices[0].message.content == text
    assert held.stored.is_set() and upstream.stats["chat"] == 1


def test_a_write_that_hangs_holds_other_lookups_in_its_scope_only_briefly(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """A lookup waits for the writes in progress in its scope for a bounded time: an answer
    stored earlier is served while another question's write hangs (an embedder busy or still
    loading), not after it."""
    gw = make_gateway()
    sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-client", max_retries=0, timeout=8)
    other = [{"role": "user", "content": "Name three even numbers."}]
    first = sdk.chat.completions.with_raw_response.create(model="fake-model", messages=other)
    held = _HeldStore(gw)  # from here on every write waits for 20 s
    try:
        sdk.chat.completions.create(model="fake-model", messages=QUESTION)  # a held write
        again = sdk.chat.completions.with_raw_response.create(model="fake-model", messages=other)
        assert again.headers["x-cache"] == "exact"  # (waiting out the write: a timeout)
        content = first.parse().choices[0].message.content
        assert again.parse().choices[0].message.content == content
        assert not held.stored.is_set()
    finally:
        held.release.set()


def test_shutdown_waits_for_a_hanging_write_for_a_bounded_time(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write still waiting at shutdown is given ``_DRAIN_S``, then cancelled: the gateway
    stops (it used to wait for the write however long it took)."""

    monkeypatch.setattr(pipeline, "_DRAIN_S", 0.5)
    gw = make_gateway()
    cancelled = threading.Event()

    async def hanging(*args: Any, **kwargs: Any) -> Any:
        try:
            await asyncio.sleep(60)  # e.g. an embedder that is still loading
        except asyncio.CancelledError:
            cancelled.set()
            raise

    gw.runtime.cache.store = hanging
    assert gw.chat("Name three prime numbers.").headers["x-cache"] == "miss"
    writes = gw.runtime.pipeline._writes
    assert sum(len(w) for w in writes.values()) == 1  # the write is waiting
    started = time.perf_counter()
    gw.stop()
    assert time.perf_counter() - started < 30  # not the write's 60 s
    assert cancelled.is_set() and not writes  # cancelled, and forgotten
    assert not gw.runtime.pipeline.flights  # its flight landed


def test_a_flush_drops_an_answer_whose_write_was_in_progress(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """The flush waits for the writes in progress, so an answer a client got just before it
    is not written after it (and served once the flush said the cache was empty)."""
    gw = make_gateway()
    held = _HeldStore(gw)
    assert gw.chat("Name three prime numbers.").headers["x-cache"] == "miss"
    with ThreadPoolExecutor(1) as pool:
        flush = pool.submit(gw.http.post, "/admin/cache/flush", json={})
        time.sleep(0.3)
        assert not flush.done()  # it waits for the write
        held.release.set()
        assert flush.result(timeout=10).json()["flushed"] == 1
    assert held.stored.is_set()
    assert gw.chat("Name three prime numbers.").headers["x-cache"] == "miss"  # gone


def test_a_flush_drops_the_answer_of_a_request_still_at_the_model(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """An answer asked for before a flush (say, after a model change) and made after it is
    not stored: it used to be, and was served as an exact hit from the flushed cache."""
    gw = make_gateway()
    slow = {"fake": {"delay": 1.0}}
    with ThreadPoolExecutor(1) as pool:
        before = pool.submit(gw.chat, "Name three prime numbers.", **slow)
        deadline = time.monotonic() + 5
        while upstream.stats["chat"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert upstream.stats["chat"] == 1  # the request waits for the model
        assert gw.http.post("/admin/cache/flush", json={}).json()["flushed"] == 0
        assert before.result().headers["x-cache"] == "miss"
    assert gw.chat("Name three prime numbers.", **slow).headers["x-cache"] == "miss"
    assert gw.chat("Name three prime numbers.", **slow).headers["x-cache"] == "exact"


def test_a_flush_cancels_a_write_still_stuck_after_the_bound(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write still waiting when the flush's wait runs out is cancelled, not left to land
    after the flush said the cache was empty."""
    monkeypatch.setattr(pipeline, "_DRAIN_S", 0.3)
    gw = make_gateway()
    held = _HeldStore(gw)
    try:
        assert gw.chat("Name three prime numbers.").headers["x-cache"] == "miss"
        flushed = gw.http.post("/admin/cache/flush", json={}).json()
    finally:
        held.release.set()
    time.sleep(0.3)  # (had the write gone on, it would land now)
    assert not held.stored.is_set()
    assert gw.chat("Name three prime numbers.").headers["x-cache"] == "miss"
    assert flushed.get("abandoned_writes") == 1


def asked(question: str, fake: dict[str, Any]) -> dict[str, Any]:
    """A chat request body of one user ``question``."""
    return {"model": "fake-model", "messages": [{"role": "user", "content": question}],
            "fake": fake}  # fmt: skip


async def led_and_followed(
    gw: Gateway,
    upstream: FakeUpstream,
    body: dict[str, Any],
    meanwhile: Callable[[httpx.AsyncClient], Awaitable[Any]] | None = None,
) -> list[Any]:
    """Two identical requests: the first leads (once the upstream has had one more call), the
    second follows it; ``meanwhile`` runs while they are both in flight. Their responses, and
    what ``meanwhile`` returned."""
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as http:
        called = upstream.stats["chat"]
        first = asyncio.create_task(http.post("/v1/chat/completions", json=body))
        await until_upstream_called(upstream, called + 1)  # the first one is in flight
        follower = asyncio.create_task(http.post("/v1/chat/completions", json=body))
        more = await meanwhile(http) if meanwhile is not None else None
        return [*await asyncio.gather(first, follower), more]


def test_a_follower_looks_again_without_the_semantic_tier_while_admission_holds_requests(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While requests wait at the door, every lookup skips the semantic tier, a follower's
    second one too: the first one's answer could not be stored (``content_filter``), and the
    follower found a paraphrase's answer by similarity (were: served ``semantic``, not
    counted as skipped), where it should call the model itself. The follower's two lookups
    count one skip: the counter counts requests (were: two, more skips than lookups)."""
    holding = threading.Event()  # admission holds requests at its door
    monkeypatch.setattr(Admission, "limiting", lambda self: holding.is_set())
    gw = make_gateway("server: {admission_max_lag_ms: 1000}", semantic=True)
    fake = {"contents": ["stored", {"delay": 3.0, "finish_reason": "content_filter"}, "own"]}
    stored = gw.http.post("/v1/chat/completions", json=asked(STORED, fake))
    assert stored.headers["x-cache"] == "miss"
    holding.set()

    body = asked(PARAPHRASE, fake)
    first, follower, _ = asyncio.run(led_and_followed(gw, upstream, body))
    assert first.json()["choices"][0]["finish_reason"] == "content_filter"
    assert follower.headers["x-cache"] == "miss"
    assert follower.json()["choices"][0]["message"]["content"] == "own"
    assert upstream.stats["chat"] == 3
    stats = gw.http.get("/admin/stats").json()["cache"]
    assert stats["lookups"] == 3  # the stored one, the first, the follower (once)
    assert stats["semantic_skipped"]["overload"] == 2  # the first, the follower (once)
    assert stats["hits"]["semantic"] == 0
    metrics = gw.http.get("/metrics").text
    assert 'cachegate_semantic_skipped_total{reason="overload"} 2' in metrics


def test_a_follower_served_a_semantic_hit_is_audited_as_any_semantic_hit(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """The first request's answer could not be stored (``content_filter``); meanwhile a
    paraphrase's was, and the request waiting for the first one is served it by similarity:
    a semantic hit like any other, sampled for the audit (were: never audited)."""
    # (no controls: the audit is one call, the third of ``contents``)
    gw = make_gateway("cache: {semantic: {audit_rate: 1.0, audit_controls: false}}", semantic=True)
    fake = {"contents": [{"delay": 6.0, "finish_reason": "content_filter"}, "stored", "audit"]}

    async def paraphrase(http: httpx.AsyncClient) -> httpx.Response:
        while (await http.get("/admin/stats")).json()["cache"]["lookups"] < 2:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)  # (the follower's semantic lookup found nothing: it waits)
        return await http.post("/v1/chat/completions", json=asked(STORED, fake))

    body = asked(PARAPHRASE, fake)
    first, follower, para = asyncio.run(led_and_followed(gw, upstream, body, paraphrase))
    assert para.headers["x-cache"] == "miss"
    assert first.json()["choices"][0]["finish_reason"] == "content_filter"
    assert follower.headers["x-cache"] == "semantic"
    assert follower.headers["x-cache-coalesced"] == "true"
    assert follower.json()["choices"][0]["message"]["content"] == "stored"

    def audited() -> list[dict[str, Any]]:
        return list(gw.http.get("/admin/stats").json()["cache"]["audit"]["estimates"])

    deadline = time.monotonic() + 60
    while not audited() and time.monotonic() < deadline:
        time.sleep(0.05)
    rows = audited()
    assert len(rows) == 1 and rows[0]["audits"] + rows[0]["errors"] == 1, rows
    assert upstream.stats["chat"] == 3  # the first, the paraphrase, the audit
    assert upstream.last_body["messages"][0]["content"] == PARAPHRASE
