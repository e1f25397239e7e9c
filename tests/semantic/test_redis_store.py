"""The Redis entry store against a real redis-server."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest

from semantic import redis_store
from semantic.keys import entry_id
from semantic.redis_store import RedisStore
from semantic.store import Entry, StoreUnavailable
from tests.conftest import RedisServer


def entry(
    n: int, *, namespace: str = "", ttl: float | None = None, vector: bytes | None = None
) -> Entry:
    exact = hashlib.sha256(str(n).encode()).hexdigest()
    now = time.time()
    return Entry(id=entry_id(exact), exact=exact, scope=f"scope{n % 2}", question=f"q{n}", model="m",
                 tenant="t", namespace=namespace, response={"n": n}, created=now,
                 expires=None if ttl is None else now + ttl, vector=vector)  # fmt: skip


class Recorder:
    def __init__(self) -> None:
        self.puts: list[tuple[int, str, bytes | None]] = []
        self.deletes: list[int] = []
        self.resets = 0

    def on_put(
        self, entry_id: int, scope: str, vector: bytes | None, vector_model: str = ""
    ) -> None:
        self.puts.append((entry_id, scope, vector))

    def on_delete(self, ids: list[int]) -> None:
        self.deletes += ids

    async def on_reset(self) -> None:
        self.resets += 1


async def wait_for(condition, timeout: float = 3.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def following(url: str) -> AsyncIterator[tuple[RedisStore, Recorder]]:
    """A store whose follower feeds a Recorder, once its first load is done."""
    store = RedisStore(url, max_entries=100)
    recorder = Recorder()
    task = asyncio.create_task(store.follow(recorder))
    try:
        await wait_for(lambda: recorder.resets == 1)
        yield store, recorder
    finally:
        task.cancel()
        await store.close()


async def test_put_get_hits_and_two_replicas(redis_server: RedisServer) -> None:
    a = RedisStore(redis_server.url, max_entries=10)
    b = RedisStore(redis_server.url, max_entries=10)
    e = entry(1)
    assert await a.put(e) == []
    got = await b.get(e.id)
    assert got is not None and got.response == {"n": 1}
    await b.record_hit(e.id)
    again = await a.get(e.id)
    assert again is not None and again.hits == 1
    assert [x.id async for x in b.entries()] == [e.id]
    await a.close()
    await b.close()


async def test_lru_eviction_across_replicas(redis_server: RedisServer) -> None:
    a = RedisStore(redis_server.url, max_entries=3)
    b = RedisStore(redis_server.url, max_entries=3)
    entries = [entry(i) for i in range(3)]
    for e in entries:
        await a.put(e)
        time.sleep(0.01)
    await b.record_hit(entries[0].id)
    evicted = await b.put(entry(3))
    assert evicted == [entries[1].id]
    assert await a.get(entries[1].id) is None and await a.get(entries[0].id) is not None
    await a.close()
    await b.close()


async def test_follow_sees_puts_deletes_and_expiry(redis_server: RedisServer) -> None:
    writer = RedisStore(redis_server.url, max_entries=100)
    async with following(redis_server.url) as (reader, recorder):
        vector = np.ones(4, dtype=np.float32).tobytes()
        kept, short = entry(1, vector=vector), entry(2, ttl=0.2)
        await writer.put(kept)
        await writer.put(short)
        await wait_for(lambda: len(recorder.puts) == 2)
        assert recorder.puts[0] == (kept.id, kept.scope, vector)
        await writer.delete([kept.id])
        await wait_for(lambda: kept.id in recorder.deletes)
        await asyncio.sleep(0.3)
        assert await reader.get(short.id) is None  # Redis expired the key itself
        assert await writer.sweep() == [short.id]
        assert await reader.sweep() == []  # announced once
        await wait_for(lambda: short.id in recorder.deletes)
    await writer.close()


async def test_flush_namespace(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, max_entries=100)
    a, b = entry(1, namespace="a"), entry(2, namespace="b")
    await store.put(a)
    await store.put(b)
    assert await store.flush("a") == [a.id]
    assert await store.get(a.id) is None and await store.get(b.id) is not None
    assert await store.flush() == [b.id]
    await store.close()


async def test_redis_down_degrades_fast_and_recovers(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, max_entries=100, retry_after=0.2)
    recorder = Recorder()
    task = asyncio.create_task(store.follow(recorder))
    await wait_for(lambda: recorder.resets == 1)
    e = entry(1)
    await store.put(e)
    redis_server.stop()
    started = time.perf_counter()
    assert await store.get(e.id) is None  # a miss, not an exception
    assert await store.put(entry(2)) == []
    assert await store.get(e.id) is None
    assert time.perf_counter() - started < 1.0
    assert not store.available
    redis_server.start()  # comes back empty (no persistence)
    await asyncio.sleep(0.3)
    await store.put(entry(3))
    assert await store.get(entry(3).id) is not None
    await wait_for(lambda: recorder.resets >= 2)  # the follower reloaded after the outage
    task.cancel()
    await store.close()


async def test_listing_that_fails_part_way_raises_instead_of_passing_for_everything(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisStore(redis_server.url, max_entries=100, retry_after=0.2)
    for n in range(6):
        await store.put(entry(n))
    monkeypatch.setattr(redis_store, "_BATCH", 2)
    real_mget, calls = store._redis.mget, []

    async def flaky_mget(keys: list[str]) -> list[bytes | None]:
        calls.append(keys)
        if len(calls) == 2:
            raise ConnectionError("blip")
        return await real_mget(keys)

    monkeypatch.setattr(store._redis, "mget", flaky_mget)
    with pytest.raises(StoreUnavailable):
        _ = [e async for e in store.entries()]
    await asyncio.sleep(0.25)
    assert len([e async for e in store.entries()]) == 6  # once Redis answers again
    await store.close()


async def test_flush_that_fails_part_way_says_so_and_keeps_the_rest(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisStore(redis_server.url, max_entries=100, retry_after=0.2)
    entries = [entry(n) for n in range(6)]
    for e in entries:
        await store.put(e)
    monkeypatch.setattr(redis_store, "_BATCH", 2)
    real_remove, calls = store._remove, []

    async def flaky_remove(ids: list[int], **options: bool) -> None:
        calls.append(ids)
        if len(calls) == 2:
            raise ConnectionError("blip")
        await real_remove(ids, **options)

    monkeypatch.setattr(store, "_remove", flaky_remove)
    with pytest.raises(StoreUnavailable) as failed:
        await store.flush()
    assert len(failed.value.removed) == 2
    await asyncio.sleep(0.25)  # the failure marked Redis down for retry_after
    kept = [e for e in entries if await store.get(e.id) is not None]
    assert sorted(e.id for e in kept) == sorted(set(await store.ids()))
    assert {e.id for e in entries} - {e.id for e in kept} == set(failed.value.removed)
    await store.close()


async def test_follower_survives_an_event_it_cannot_apply(redis_server: RedisServer) -> None:
    other = RedisStore(redis_server.url, max_entries=100)
    async with following(redis_server.url) as (store, recorder):
        await store._redis.xadd("cachegate:events", {b"op": b"put", b"id": b"not a number"})
        e = entry(1)
        await other.put(e)
        await wait_for(lambda: [p[0] for p in recorder.puts] == [e.id])
    await other.close()
