"""The Redis entry store against a real redis-server."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from semantic import redis_store
from semantic.keys import entry_id
from semantic.redis_store import RedisStore
from semantic.store import Entry, StoreUnavailable, TenantEntries
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
async def following(url: str, **options: Any) -> AsyncIterator[tuple[RedisStore, Recorder]]:
    """A store whose follower feeds a Recorder, once its first load is done."""
    store = RedisStore(url, max_entries=100, **options)
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


async def test_a_hit_on_an_entry_already_gone_leaves_nothing_behind(
    redis_server: RedisServer,
) -> None:
    """A hit recorded after another replica deleted or evicted the entry (a lookup read it
    just before) writes no hit count and no LRU member: they would never be removed."""
    import redis.asyncio as aioredis

    a = RedisStore(redis_server.url, max_entries=10, key_prefix="gone:")
    b = RedisStore(redis_server.url, max_entries=10, key_prefix="gone:")
    kept, gone = entry(1), entry(2)
    await a.put(kept)
    await a.put(gone)
    await a.delete([gone.id])
    await b.record_hit(gone.id)
    await b.record_hit(kept.id)
    raw = aioredis.Redis.from_url(redis_server.url)
    assert await raw.hkeys("gone:hits") == [str(kept.id).encode()]
    assert await raw.zrange("gone:lru", 0, -1) == [str(kept.id).encode()]
    assert (await b.get(kept.id)).hits == 1  # type: ignore[union-attr]
    await raw.aclose()
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


async def test_a_delete_of_an_entry_read_keeps_one_stored_again_since(
    redis_server: RedisServer,
) -> None:
    """``delete_if_unchanged``: a replica read an entry (a hit it could not serve back), and
    another replica stored a fresh answer under the same id since: the delete keeps the fresh
    one, and announces nothing (its vector stays on every replica); the entry read, still
    stored, goes and is announced."""
    writer = RedisStore(redis_server.url, max_entries=100)
    async with following(redis_server.url) as (other, recorder):
        stale = entry(1)
        await writer.put(stale)
        read = await writer.get(stale.id)
        assert read is not None
        fresh = msgspec.structs.replace(stale, response={"n": "fresh"}, created=stale.created + 1)
        await other.put(fresh)
        assert await writer.delete_if_unchanged(read) is False
        kept = await writer.get(stale.id)
        assert kept is not None and kept.response == {"n": "fresh"}
        await other.put(entry(2))  # (returns once its follower applied every event before it)
        assert recorder.deletes == [] and len(other) == 2
        assert await writer.delete_if_unchanged(kept) is True
        assert await writer.get(stale.id) is None and len(writer) == 1
        await wait_for(lambda: recorder.deletes == [stale.id])
        assert await writer.delete_if_unchanged(kept) is False  # (already gone)
    await writer.close()


async def test_a_put_returns_once_its_own_follower_has_applied_it(
    redis_server: RedisServer,
) -> None:
    """The follower is the only writer of a shared store's index: a put waits for it, so the
    next lookup on the replica that stored an answer finds it."""
    async with following(redis_server.url) as (store, recorder):
        for n in range(3):
            e = entry(n)
            await store.put(e)
            assert recorder.puts[-1] == (e.id, e.scope, None)  # (no wait_for: already applied)


async def test_a_put_waits_for_a_stuck_follower_only_so_long(redis_server: RedisServer) -> None:
    release, stuck = asyncio.Event(), asyncio.Event()
    async with following(redis_server.url) as (store, recorder):
        await store.get(1)  # (connected within the default timeout, as a busy CI machine needs)
        store._timeout = 0.2  # the put waits at most 2 x 0.2 s for the follower
        real_xread = store._follower.xread

        async def xread_stuck_until_released(*args: object, **kwargs: object) -> object:
            stuck.set()
            await release.wait()
            return await real_xread(*args, **kwargs)

        store._follower.xread = xread_stuck_until_released
        await asyncio.wait_for(stuck.wait(), 3)  # (once the read in progress has timed out)
        started = time.monotonic()
        await asyncio.wait_for(store.put(e := entry(1)), 3)
        assert time.monotonic() - started >= 0.35  # it did wait for the follower...
        assert recorder.puts == []  # ...which has not applied it
        release.set()
        await wait_for(lambda: recorder.puts == [(e.id, e.scope, None)])


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
    with pytest.raises(StoreUnavailable):  # not stored: never counted as stored
        await store.put(entry(2))
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


async def test_an_answer_redis_could_not_take_is_not_counted_as_stored(
    redis_server: RedisServer,
) -> None:
    from semantic.cache import CacheSettings, ResponseCache
    from semantic.keys import chat_key

    cache = ResponseCache(RedisStore(redis_server.url, max_entries=100), CacheSettings(), None)
    key = chat_key("t", "", "m", {"messages": [{"role": "user", "content": "hi"}]})
    stored = {"model": "m", "tenant": "t", "namespace": ""}
    assert await cache.store(key, {"a": 1}, **stored) is not None
    redis_server.stop()
    assert await cache.store(key, {"a": 2}, **stored) is None
    stats = cache.stats()
    assert stats["stores"] == 1 and stats["store_failures"] == 1
    await cache.close()


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
    assert store.available  # a background listing does not turn live requests away
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


async def test_a_follower_whose_reads_redis_refuses_waits_before_it_reloads_again(
    redis_server: RedisServer,
) -> None:
    store = RedisStore(redis_server.url, max_entries=100)
    await store._redis.set("cachegate:events", b"not a stream")  # every XREAD: WRONGTYPE
    recorder = Recorder()
    task = asyncio.create_task(store.follow(recorder))
    await asyncio.sleep(1.5)
    assert 1 <= recorder.resets <= 3  # a reload a second, not one per refused read
    await store._redis.delete("cachegate:events")  # fixed: it follows again, reloads no more
    await asyncio.sleep(1.5)
    resets, e, other = recorder.resets, entry(1), RedisStore(redis_server.url, max_entries=100)
    await other.put(e)
    await wait_for(lambda: [p[0] for p in recorder.puts] == [e.id])
    assert recorder.resets == resets
    await other.close()
    task.cancel()
    await store.close()


async def test_listings_of_a_large_cache_are_paged_within_the_timeout(
    redis_server: RedisServer,
) -> None:
    # One ZRANGE of 100k members takes ~0.5 s, past the command timeout: every listing reads
    # short ZSCAN pages instead. NOTE: counted, not timed against a short timeout (0.25 s
    # was, and a starved loop on a busy CI machine passed it on one page or another).
    store = RedisStore(redis_server.url, max_entries=10**6, timeout=3.0)
    stored = [entry(n) for n in range(3)]
    for e in stored:
        await store.put(e)
    bare = [10**12 + i for i in range(100_000)]  # LRU ranks only: enough to make a long listing
    for start in range(0, len(bare), 10_000):
        await store._redis.zadd("cachegate:lru", {i: 1.0 for i in bare[start : start + 10_000]})
    pages: list[int] = []
    scan = store._redis.zscan

    async def counted(*args: object, **kwargs: object) -> object:
        cursor, page = await scan(*args, **kwargs)
        pages.append(len(page))
        return cursor, page

    store._redis.zscan = counted
    assert await store.ids() == set(bare) | {e.id for e in stored}
    assert len(pages) >= 100 and max(pages) <= 4 * redis_store._BATCH  # (COUNT is a hint)
    assert sorted([e.id async for e in store.entries()]) == sorted(e.id for e in stored)
    assert store.available
    assert len(await store.flush()) == len(bare) + 3
    assert store.available and len(store) == 0
    assert await store._redis.zcard("cachegate:lru") == 0
    await store.close()


async def test_an_eviction_cannot_be_cut_in_half(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisStore(redis_server.url, max_entries=1, retry_after=0.1)
    first, second = entry(1), entry(2)
    await store.put(first)

    async def failing_remove(ids: list[int], **options: bool) -> None:
        raise TimeoutError("injected")

    monkeypatch.setattr(store, "_remove", failing_remove)  # whatever a second round trip is
    await store.put(second)
    monkeypatch.undo()
    await asyncio.sleep(0.15)
    await store.flush()
    assert await store.get(first.id) is None  # no orphan entry outlives its LRU rank
    assert await store._redis.keys("cachegate:e:*") == []
    await store.close()


async def test_replicas_evicting_at_once_evict_only_the_overflow(redis_server: RedisServer) -> None:
    a = RedisStore(redis_server.url, max_entries=3)
    b = RedisStore(redis_server.url, max_entries=3)
    for n in range(3):
        await a.put(entry(n))
    evicted = await asyncio.gather(a.put(entry(10)), b.put(entry(11)))
    assert sum(len(ids) for ids in evicted) == 2
    assert await a._redis.zcard("cachegate:lru") == 3 and len(a) == len(b) == 3
    await a.close()
    await b.close()


async def test_expired_entries_are_evicted_before_live_ones(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, max_entries=2)
    live, short = entry(1), entry(2, ttl=0.2)
    await store.put(live)
    await store.put(short)
    await store.record_hit(short.id)  # the expiring one is the most recently used
    await asyncio.sleep(0.3)
    assert await store.put(entry(3)) == [short.id]
    assert await store.get(live.id) is not None
    await store.close()


async def test_sweep_keeps_an_entry_stored_again_after_it_expired(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweeper = RedisStore(redis_server.url, max_entries=100)
    other = RedisStore(redis_server.url, max_entries=100)
    await other.put(entry(1, ttl=0.05))
    await asyncio.sleep(0.1)
    fresh = entry(1, ttl=3600)
    real, calls = sweeper._redis.execute_command, []

    async def then_store_again(*args: object, **options: object) -> object:
        reply = await real(*args, **options)
        calls.append(args[0])
        if len(calls) == 1:  # right after the sweep's first command, another replica re-stores
            await other.put(fresh)
        return reply

    monkeypatch.setattr(sweeper._redis, "execute_command", then_store_again)
    await sweeper.sweep()
    monkeypatch.undo()
    got = await other.get(fresh.id)
    assert got is not None and got.expires == fresh.expires
    await sweeper.close()
    await other.close()


async def test_sweep_announces_what_it_removed_in_one_event(redis_server: RedisServer) -> None:
    writer = RedisStore(redis_server.url, max_entries=100)
    async with following(redis_server.url) as (_reader, recorder):
        short = [entry(n, ttl=0.05) for n in range(3)]
        for e in short:
            await writer.put(e)
        await asyncio.sleep(0.1)
        assert sorted(await writer.sweep()) == sorted(e.id for e in short)
        await wait_for(lambda: sorted(recorder.deletes) == sorted(e.id for e in short))
        assert len(writer) == 0
    await writer.close()


async def test_a_huge_or_infinite_ttl_is_stored_and_breaks_nothing(
    redis_server: RedisServer,
) -> None:
    store = RedisStore(redis_server.url, max_entries=100)
    forever, huge = entry(1, ttl=float("inf")), entry(2, ttl=1e16)
    assert await store.put(forever) == [] and await store.put(huge) == []
    assert store.available
    assert await store.get(forever.id) is not None and await store.get(huge.id) is not None
    assert len(await store._redis.keys("cachegate:e:*")) == await store._redis.zcard(
        "cachegate:lru"
    )
    await store.close()


@pytest.mark.parametrize("stream_existed", [False, True])
async def test_a_follower_behind_a_trimmed_stream_reloads(
    redis_server: RedisServer, stream_existed: bool
) -> None:
    class SlowFirstLoad(Recorder):
        async def on_reset(self) -> None:
            self.resets += 1
            if self.resets == 1:
                await asyncio.sleep(0.5)  # other replicas write (and the stream is trimmed)

    store, recorder = RedisStore(redis_server.url, max_entries=100), SlowFirstLoad()
    if stream_existed:
        await store._redis.xadd("cachegate:events", {b"op": b"none"})
    task = asyncio.create_task(store.follow(recorder))
    await wait_for(lambda: recorder.resets == 1)
    for n in range(50):
        await store._redis.xadd("cachegate:events", {b"op": b"put", b"id": str(n), b"scope": b"s"})
    await store._redis.xtrim(
        "cachegate:events", maxlen=10, approximate=False
    )  # 40 unread events are lost
    await wait_for(lambda: recorder.resets == 2)
    task.cancel()
    await store.close()


async def test_entry_count_follows_flush_eviction_and_reload(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, max_entries=3)
    for n in range(5):
        await store.put(entry(n))
    assert len(store) == 3
    await store.flush()
    assert len(store) == 0
    for n in range(2):
        await store.put(entry(n))
    async with following(redis_server.url) as (fresh_replica, _recorder):
        assert len(fresh_replica) == 2
    await store.close()


async def test_follower_reads_del_events_in_both_forms(redis_server: RedisServer) -> None:
    async with following(redis_server.url) as (store, recorder):
        packed = np.asarray([2**62 + 1, -5], dtype="<i8").tobytes()
        await store._redis.xadd("cachegate:events", {b"op": b"del", b"ids": packed})
        await store._redis.xadd(
            "cachegate:events", {b"op": b"del", b"idlist": b"9223372036854775807,-7"}
        )
        await wait_for(lambda: len(recorder.deletes) == 4)
        assert recorder.deletes == [2**62 + 1, -5, 2**63 - 1, -7]


async def test_lowering_max_entries_by_thousands_evicts_them_all(redis_server: RedisServer) -> None:
    """One put may evict more entries than Lua's unpack() takes (~8000): none may leak."""
    big = RedisStore(redis_server.url, max_entries=10**6)
    for n in range(8200):
        await big.put(entry(n, ttl=3600 if n % 2 else None))
    await big.close()
    # (restarted with max 100; its one put evicts 8,101 entries in one script, and the
    # follower then applies them: a loaded CI machine took longer than the default 0.5 s)
    async with following(redis_server.url, timeout=5.0) as (store, recorder):
        evicted = await store.put(entry(10**6))
        assert len(evicted) == 8101 and store.available and len(store) == 100
        assert len(await store._redis.keys("cachegate:e:*")) == 100  # no entry left behind
        assert await store._redis.zcard("cachegate:exp") <= 100
        await wait_for(lambda: len(recorder.deletes) == 8101)  # announced, in chunks
        assert set(recorder.deletes) == set(evicted)


async def test_a_burst_of_commands_waits_for_connections_not_marks_redis_down(
    redis_server: RedisServer,
) -> None:
    """300 lookups at once (a burst of requests) exceed the connection pool: they queue."""
    store = RedisStore(redis_server.url, max_entries=1000)
    e = entry(1)
    await store.put(e)
    got = await asyncio.gather(*(store.get(e.id) for _ in range(300)))
    assert store.available  # was: MaxConnectionsError read as "Redis is down" for a second
    # and then: the queue's wait counted against each command's deadline, and a cold pool's
    # 64 connects on a busy 2-core machine took longer than that (a CI failure)
    assert store.skipped_turns == 0
    # and then: one lookup among the first 64 (each opening its connection, on a loaded CI
    # machine) passed 0.5 s while the others came back, and that marked Redis down. Such a
    # lookup may miss, but the cache stays on and every other lookup is a hit.
    # NOTE: "< 10" failed on CI: only the first wave (each command opening its connection) can
    # be slow, so at most 64; the ~236 queued lookups behind it never are (they all missed).
    misses = sum(g is None for g in got)
    assert misses == store.slow_commands and misses <= 64
    assert all(g.id == e.id for g in got if g is not None)
    again = await store.get(e.id)  # the cache stayed on and the pool is warm
    assert again is not None and again.id == e.id
    await store.close()


async def test_a_slow_command_while_redis_answers_others_does_not_mark_redis_down(
    redis_server: RedisServer,
) -> None:
    """One command stuck past the timeout is that command's problem, not Redis being down."""
    store = RedisStore(redis_server.url, max_entries=1000, timeout=1.0)
    e = entry(1)
    await store.put(e)
    # BLPOP on an empty list: Redis holds this one command for 5 s and answers the others
    stuck = asyncio.create_task(store._call(lambda: store._redis.blpop(["nothing"], timeout=5)))
    for _ in range(8):
        got = await store.get(e.id)
        assert got is not None and got.id == e.id
        await asyncio.sleep(0.15)
    assert await stuck is None  # given up after 1 s
    assert store.slow_commands == 1 and store.available
    await store.close()


async def test_a_command_timed_out_by_a_starved_loop_does_not_mark_redis_down(
    redis_server: RedisServer,
) -> None:
    """Every command in flight can pass its deadline together when this process's loop is
    starved (a burst's connects on a busy 2-core machine: a CI failure), with no answer from
    Redis meanwhile. A probe of its own then finds Redis answering: the cache stays on."""
    store = RedisStore(redis_server.url, max_entries=1000)
    e = entry(1)
    await store.put(e)  # (connected, scripts loaded: within the default timeout)
    await store._prober.ping()  # (the probe's connection too)
    store._timeout = 0.2

    async def starved() -> bytes | None:  # its answer is not read within the timeout, nor any other
        await asyncio.sleep(0.4)
        return await store._redis.get("anything")

    assert await store._call(starved) is None  # given up
    assert store.slow_commands == 1 and store.available
    got = await store.get(e.id)
    assert got is not None and got.id == e.id
    await store.close()


async def test_a_refusal_is_redis_answering_too(redis_server: RedisServer) -> None:
    """A command Redis refused (WRONGTYPE here) while another was stuck shows Redis is up."""
    store = RedisStore(redis_server.url, max_entries=1000, timeout=1.0)
    await store.put(entry(1))
    await store._redis.set("plain", b"x")
    stuck = asyncio.create_task(store._call(lambda: store._redis.blpop(["nothing"], timeout=5)))
    await asyncio.sleep(0.2)
    assert await store._call(lambda: store._redis.lpush("plain", b"y")) is None  # refused
    assert await stuck is None
    assert store.slow_commands == 1 and store.available
    await store.close()


async def test_a_redis_that_stops_answering_is_marked_down_within_two_timeouts(
    redis_server: RedisServer,
) -> None:
    """A hung Redis (SIGSTOP) answers nobody: the cache switches it off, not only skips."""
    store = RedisStore(redis_server.url, max_entries=1000)
    e = entry(1)
    await store.put(e)  # (connected, scripts loaded: within the default timeout)
    await store.get(e.id)  # (a second connection, for the second lookup below)
    store._timeout = 0.2
    assert redis_server.process is not None
    redis_server.process.send_signal(signal.SIGSTOP)
    try:
        started = time.perf_counter()
        first = asyncio.create_task(store.get(e.id))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(store.get(e.id))
        assert await first is None and await second is None
        assert not store.available and store.slow_commands == 0
        # two timeouts are 0.4 s; a retry_after or a hang would be seconds more
        assert time.perf_counter() - started < 2.0  # (a loaded CI machine fires timers late)
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
    await store.close()


async def test_a_command_that_cannot_get_a_connection_in_time_is_skipped_redis_stays_up(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This replica's own congestion is not Redis failing: skip the command, keep the cache on."""
    # NOTE: a short wait for a turn, not a short command timeout: the commands that must
    # succeed here (a cold connect, script loads) may take longer than 0.05 s on a busy machine
    monkeypatch.setattr(redis_store, "_TURN_WAIT", 0.1)
    store = RedisStore(redis_server.url, max_entries=1000)
    e = entry(1)
    await store.put(e)
    for _ in range(64):  # every connection busy with other requests' commands
        await store._turns.acquire()
    assert await store.get(e.id) is None  # waited 0.1 x 0.5 s for a turn, then gave up
    assert store.skipped_turns == 1 and store.available
    with pytest.raises(StoreUnavailable):  # strict: "could not read" is not "no entry"
        await store.get(e.id, strict=True)
    for _ in range(64):
        store._turns.release()
    got = await store.get(e.id)
    assert got is not None and got.id == e.id  # the turns came back
    await store.close()


async def test_a_delete_redis_did_not_make_raises(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, max_entries=100, retry_after=0.2)
    e = entry(1)
    await store.put(e)
    redis_server.stop()
    with pytest.raises(StoreUnavailable):
        await store.delete([e.id])
    with pytest.raises(StoreUnavailable):  # and while it is marked down, reads say so
        await store.get(e.id, strict=True)
    assert await store.get(e.id) is None  # (a lookup's read: a miss)
    redis_server.start()
    await store.close()


async def test_an_entry_this_version_cannot_read_is_a_miss_and_the_follower_goes_on(
    redis_server: RedisServer,
) -> None:
    """A value under the prefix that does not decode (another version or deployment wrote
    it): a miss for get, skipped by the listing, and the follower keeps following."""
    store = RedisStore(redis_server.url, max_entries=100)
    good, bad = entry(1), entry(2)
    await store.put(good)
    await store.put(bad)
    await store._redis.set(store._key(bad.id), b"\x00not msgpack or json")
    assert await store.get(bad.id) is None
    assert [e.id async for e in store.entries()] == [good.id]

    class Failing(Recorder):  # a listener whose first reload fails (any exception)
        async def on_reset(self) -> None:
            await super().on_reset()
            if self.resets == 1:
                raise RuntimeError("a listener bug")

    recorder = Failing()
    task = asyncio.create_task(store.follow(recorder))
    await wait_for(lambda: recorder.resets == 2)  # it reloaded again instead of stopping
    await store.put(entry(3))
    await wait_for(lambda: entry(3).id in [put[0] for put in recorder.puts])  # following
    assert not task.done()
    task.cancel()
    await store.close()


async def test_close_closes_every_connection(redis_server: RedisServer) -> None:
    import redis.asyncio as aioredis

    observer = aioredis.Redis.from_url(redis_server.url)
    before = len(await observer.client_list())
    store = RedisStore(redis_server.url, max_entries=100)
    e = entry(1)
    await store.put(e)
    await asyncio.gather(*(store.get(e.id) for _ in range(50)))  # opens many pooled connections
    assert len(await observer.client_list()) > before
    await store.close()
    for _ in range(100):  # (Redis drops the closed connections as it reads their EOFs)
        if len(await observer.client_list()) == before:
            break
        await asyncio.sleep(0.05)
    assert len(await observer.client_list()) == before
    await observer.aclose()


async def test_a_redis_restart_costs_no_command_after_it(tmp_path: Path) -> None:
    """Every pooled connection dies with the restart; each is replaced on its next use, so
    no lookup misses and no store is skipped once Redis answers (issue 16)."""
    server = RedisServer(tmp_path, appendonly=True).start()
    # NOTE: what is tested is that dead connections are replaced, not how fast: at the default
    # 0.5 s one reconnect of the 40 timed out in a CI run on a loaded 2-core machine, and that
    # one timeout rightly switches the cache off for every other lookup (retry_after).
    store = RedisStore(server.url, max_entries=1000, timeout=3.0)
    recorder = Recorder()
    task = asyncio.create_task(store.follow(recorder))
    try:
        await wait_for(lambda: recorder.resets == 1)
        stored = [entry(n) for n in range(40)]
        await asyncio.gather(*(store.put(e) for e in stored))  # opens many pooled connections
        server.stop()
        server.start()  # the same port, its data back from the AOF
        found = await asyncio.gather(*(store.get(e.id) for e in stored))
        assert [f.id if f else None for f in found] == [e.id for e in stored]
        assert store.available
        later = [entry(n) for n in range(40, 80)]
        await asyncio.gather(*(store.put(e) for e in later))
        assert all([await store.get(e.id) for e in later])
        await wait_for(lambda: recorder.resets == 2)  # the follower reloaded once it was back
        assert store.available
    finally:
        task.cancel()
        await store.close()
        server.stop()


async def test_a_replica_that_only_reads_counts_the_others_entries(
    redis_server: RedisServer,
) -> None:
    writer = RedisStore(redis_server.url, max_entries=3)
    async with following(redis_server.url) as (reader, _recorder):
        for n in range(5):
            await writer.put(entry(n))
        await wait_for(lambda: len(reader) == 3)  # 5 stored, 2 evicted
        await writer.flush()
        await wait_for(lambda: len(reader) == 0)
    await writer.close()


async def test_a_cancelled_follower_stops_even_when_its_read_turns_the_cancel_into_a_timeout(
    redis_server: RedisServer,
) -> None:
    """A cancellation that reaches the follower as its XREAD's timeout (a socket timeout
    racing the cancel) stops it, instead of being taken for a lost stream and retried."""
    store = RedisStore(redis_server.url, max_entries=100)
    recorder = Recorder()
    reads = 0

    async def xread(*args: object, **kwargs: object) -> list[object]:
        nonlocal reads
        reads += 1
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            raise TimeoutError("Timeout reading from the follower's socket") from None
        return []

    store._follower.xread = xread
    task = asyncio.create_task(store.follow(recorder))
    await wait_for(lambda: reads == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 3)
    assert reads == 1
    await store.close()


async def counted(store: RedisStore) -> dict[str, int]:
    """Each tenant's entries as Redis counts them (``P by-tenant``)."""
    counts = await store._redis.zrange("cachegate:by-tenant", 0, -1, withscores=True)
    return {tenant.decode(): int(n) for tenant, n in counts}


def of(tenant: str, n: int, **options: float) -> Entry:
    """``entry(n)`` stored for ``tenant``."""
    return msgspec.structs.replace(entry(n, **options), tenant=tenant)  # type: ignore[arg-type]


async def test_a_tenant_past_its_share_gives_up_its_expired_then_least_recently_used(
    redis_server: RedisServer,
) -> None:
    async with following(redis_server.url) as (_, recorder):
        store = RedisStore(redis_server.url, max_entries=100, max_entries_per_tenant=3)
        for n in range(3):
            await store.put(of("a", n))
        used, short = of("b", 10), of("b", 11, ttl=0.2)
        for e in (used, short, of("b", 12)):
            await store.put(e)
        await store.record_hit(short.id)  # the expiring one is the most recently used
        await store.record_hit(used.id)  # and this one was used after the third
        await asyncio.sleep(0.3)
        assert await store.put(of("b", 13)) == [short.id]  # expired first
        assert await store.put(of("b", 14)) == [of("b", 12).id]  # then the least recently used
        assert await store.get(used.id) is not None
        assert all([await store.get(of("a", n).id) for n in range(3)])  # a's all stay
        await wait_for(lambda: {short.id, of("b", 12).id} <= set(recorder.deletes))
        assert await counted(store) == {"a": 3, "b": 3}
        await store.close()


async def test_every_removal_takes_an_entry_out_of_its_tenants_share(
    redis_server: RedisServer,
) -> None:
    """Deletes, sweeps, entries Redis dropped by itself and flushes keep the sets in step:
    a share never counts an entry that is gone."""
    async with following(redis_server.url, max_entries_per_tenant=10) as (store, _):
        entries = [of("a", 1), of("a", 2, ttl=0.1), of("a", 3), of("b", 4)]
        for e in entries:
            await store.put(e)
        await store.delete([entries[0].id])
        await asyncio.sleep(0.2)
        assert await store.sweep() == [entries[1].id]
        await store._redis.delete(f"cachegate:e:{entries[2].id}")  # (maxmemory, or by hand)
        assert await store.get(entries[2].id) is None
        await wait_for(lambda: store.tenant_entries() == TenantEntries({"b": 1}, 1, 1))
        assert await store._redis.zrange("cachegate:t:a", 0, -1) == []
        await store.flush()
        assert await store._redis.keys("cachegate:t*") == []
        assert await store._redis.keys("cachegate:x:*") == []


async def test_entries_of_a_version_before_shares_are_not_counted(
    redis_server: RedisServer,
) -> None:
    """An entry stored without its tenant (before the upgrade) is in no share until a reload
    adopts it (below); one its version dropped without leaving the share leaves it at the next
    put, not as an eviction."""
    store = RedisStore(redis_server.url, max_entries=100, max_entries_per_tenant=2)
    old, gone = of("a", 1), of("a", 2)
    for e in (old, gone):
        await store.put(e)
    await store._redis.hdel("cachegate:tenant", str(old.id))  # as an older version stored it
    await store._redis.zrem("cachegate:t:a", str(old.id))
    await store._redis.zrem("cachegate:lru", str(gone.id))  # as an older version evicted it
    await store._redis.delete(f"cachegate:e:{gone.id}")
    assert await store.put(of("a", 3)) == []  # (a's share: gone and 3)
    assert await store.put(of("a", 4)) == []  # gone leaves the share: 3 and 4 are a's
    assert await store.get(old.id) is not None
    assert await counted(store) == {"a": 2}
    await store.close()


async def test_thousands_of_tenants_are_counted_by_a_few_short_commands(
    redis_server: RedisServer,
) -> None:
    """/admin/stats names the tenants holding the most entries and totals the rest: Redis keeps
    the counts sorted, so a refresh reads those few, not a count per tenant (as an HGETALL did)."""
    writer = RedisStore(redis_server.url, max_entries=10_000, max_entries_per_tenant=10, timeout=5)
    few = [of(f"t{n}", n) for n in range(2000)]  # 2,000 tenants of one entry
    many = [of(f"big{k}", 10_000 + 10 * k + i) for k in range(5) for i in range(k + 2)]
    await writer.put_many(few + many)
    await writer.delete([few[0].id])
    async with following(redis_server.url, max_entries_per_tenant=10) as (store, _):
        await wait_for(lambda: store.tenant_entries().tenants == 2004)
        counts = store.tenant_entries()
        assert len(counts.top) == 100
        assert {f"big{k}": k + 2 for k in range(5)}.items() <= counts.top.items()
        assert set(counts.top.values()) == {1, 2, 3, 4, 5, 6}
        assert counts.entries == 1999 + sum(k + 2 for k in range(5))
        await store._redis.config_resetstat()  # (the reload's passes read everything, once)
        for _ in range(100):  # two refreshes (about one a second), reading only the top
            stats = await store._redis.info("commandstats")
            assert not {"cmdstat_hgetall", "cmdstat_hscan", "cmdstat_zrange"} & stats.keys()
            if stats.get("cmdstat_zrevrange", {}).get("calls", 0) >= 2:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the follower did not refresh the counts twice")
    await writer.close()


async def test_counts_kept_in_a_hash_by_the_version_before_move_to_the_sorted_set(
    redis_server: RedisServer,
) -> None:
    """A store whose counts are a hash (``P tenants``, HINCRBY'd) is read right from the first
    refresh: the reload moves them, each recounted from its tenant's own set, and drops the hash.
    """
    writer = RedisStore(redis_server.url, max_entries=1000, max_entries_per_tenant=10, timeout=5)
    others = {f"c{n}": 1 for n in range(4, 204)}  # (past a listpack: HSCAN pages by COUNT)
    await writer.put_many(
        [of("a", 1), of("a", 2), of("b", 3)] + [of(f"c{n}", n) for n in range(4, 204)]
    )
    await writer._redis.delete("cachegate:by-tenant")  # as that version left it:
    old = {"a": 2, "b": 5} | others  # (b's count wrong: a replica's mistake)
    await writer._redis.hset("cachegate:tenants", mapping=old)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redis_store, "_BATCH", 7)
        async with following(redis_server.url, max_entries_per_tenant=10) as (store, _):
            await wait_for(lambda: store.tenant_entries().tenants == 202)
            counts = store.tenant_entries()
            assert (counts.tenants, counts.entries) == (202, 203)
            assert counts.top["a"] == 2 and await counted(store) == {"a": 2, "b": 1} | others
            assert await store._redis.exists("cachegate:tenants") == 0
            assert await writer.put(of("a", 300)) == []
            assert await counted(store) == {"a": 3, "b": 1} | others
    await writer.close()


async def test_a_reload_adopts_what_a_version_before_shares_stored_and_forgets_what_it_dropped(
    redis_server: RedisServer,
) -> None:
    """A version before tenant shares stores entries with no tenant record (in no share, not in
    /admin/stats), and drops entries leaving their records (counted for good, never swept): a
    replica's reload brings the records in step with the entries."""
    writer = RedisStore(redis_server.url, max_entries=100, max_entries_per_tenant=2)
    r = writer._redis
    kept, dropped = of("a", 1), of("b", 2)
    await writer.put_many([kept, dropped])
    old = [of("a", 3), of("c", 4, ttl=60)]  # as that version stored them: entry, lru, exp
    for e in old:
        await r.set(f"cachegate:e:{e.id}", msgspec.msgpack.encode(e))
        await r.zadd("cachegate:lru", {str(e.id): time.time() - 100})
    await r.zadd("cachegate:exp", {str(old[1].id): old[1].expires})
    await r.zrem("cachegate:lru", str(dropped.id))  # as that version dropped it (its _DROP)
    await r.delete(f"cachegate:e:{dropped.id}")
    async with following(redis_server.url, max_entries_per_tenant=2) as (store, _):
        await wait_for(lambda: store.tenant_entries().entries == 3)
        assert store.tenant_entries() == TenantEntries({"a": 2, "c": 1}, 2, 3)
        owners = {kept.id: b"a", old[0].id: b"a", old[1].id: b"c"}
        assert await r.hgetall("cachegate:tenant") == {
            str(i).encode(): t for i, t in owners.items()
        }
        assert await r.zrange("cachegate:x:c", 0, -1, withscores=True) == [
            (str(old[1].id).encode(), old[1].expires)
        ]
        assert await r.exists("cachegate:t:b", "cachegate:x:b") == 0
        assert await writer.put(of("a", 5)) == [old[0].id]  # a's share counts it: its oldest
        assert await counted(store) == {"a": 2, "c": 1}
    await writer.close()


async def test_tenant_records_redis_refuses_to_tidy_do_not_stop_the_follower(
    redis_server: RedisServer,
) -> None:
    """A reload whose tidying Redis refuses (another deployment's key under the prefix: a
    WRONGTYPE every time) still loads the index and follows: it was never retried in a loop."""
    writer = RedisStore(redis_server.url, max_entries=100)
    await writer._redis.set("cachegate:tenant", "not a hash")
    async with following(redis_server.url) as (_, recorder):
        await writer._redis.delete("cachegate:tenant")
        await writer.put(e := entry(1))
        await wait_for(lambda: [p[0] for p in recorder.puts] == [e.id])
        assert recorder.resets == 1
    await writer.close()


async def test_what_a_replica_of_a_version_before_shares_does_meanwhile_is_tidied_as_it_comes(
    redis_server: RedisServer,
) -> None:
    """During a rolling upgrade a replica of a version before tenant shares still stores (no
    tenant record) and drops (leaving the records): its events, without ``tenanted``, have the
    upgraded replicas tidy those entries' records at once, not at their next reload."""
    async with following(redis_server.url, max_entries_per_tenant=5) as (store, recorder):
        r = store._redis
        dropped = of("b", 2)
        await store.put(dropped)
        await store.put(mine := of("b", 3))
        await store.delete([mine.id])  # (this version's put and del events: nothing to tidy)
        await wait_for(lambda: store.tenant_entries().top == {"b": 1})
        assert redis_store._untenanted([(b"", await r.xrange("cachegate:events"))]) == ([], [])
        stored = of("a", 1)  # the older replica's put: its _PUT's writes and event
        await r.set(f"cachegate:e:{stored.id}", msgspec.msgpack.encode(stored))
        await r.zadd("cachegate:lru", {str(stored.id): time.time()})
        await r.xadd("cachegate:events", {"op": "put", "id": stored.id, "scope": "s0"})
        await r.zrem("cachegate:lru", str(dropped.id))  # and its eviction of b's entry
        await r.delete(f"cachegate:e:{dropped.id}")
        await r.xadd("cachegate:events", {"op": "del", "idlist": str(dropped.id)})
        await wait_for(lambda: store.tenant_entries() == TenantEntries({"a": 1}, 1, 1))
        assert recorder.resets == 1  # (no reload: the events did it)
        assert await r.hgetall("cachegate:tenant") == {str(stored.id).encode(): b"a"}
        assert await r.exists("cachegate:t:b") == 0


async def test_what_a_replica_counting_in_the_old_hash_does_meanwhile_reaches_the_counts(
    redis_server: RedisServer,
) -> None:
    """A replica of the version that kept each tenant's count in the hash ``P tenants`` still
    stores and drops entries with their tenant records during a rolling upgrade, but counts
    them in that hash only (its events, without ``tenanted``, name no tenant): the upgraded
    replicas recount the tenant of each store as it comes, and a reload recounts every tenant,
    so ``/admin/stats`` never keeps a tenant whose entries are all gone."""
    async with following(redis_server.url, max_entries_per_tenant=5) as (store, _):
        r = store._redis
        await store.put(dropped := of("b", 2))
        await wait_for(lambda: store.tenant_entries() == TenantEntries({"b": 1}, 1, 1))
        stored = of("a", 1)  # that version's put: the entry with its records, the hash's count
        await r.set(f"cachegate:e:{stored.id}", msgspec.msgpack.encode(stored))
        await r.zadd("cachegate:lru", {str(stored.id): time.time()})
        await r.hset("cachegate:tenant", str(stored.id), "a")
        await r.zadd("cachegate:t:a", {str(stored.id): time.time()})
        await r.hincrby("cachegate:tenants", "a", 1)
        await r.xadd("cachegate:events", {"op": "put", "id": stored.id, "scope": "s1"})
        # (before: {"b": 1}: a's entry in the totals, not in its count)
        await wait_for(lambda: store.tenant_entries() == TenantEntries({"a": 1, "b": 1}, 2, 2))
        # its eviction of b's entry: with its records (the hash's count of b, -1, is deleted)
        await r.zrem("cachegate:lru", str(dropped.id))
        await r.delete(f"cachegate:e:{dropped.id}")
        await r.hdel("cachegate:tenant", str(dropped.id))
        await r.zrem("cachegate:t:b", str(dropped.id))
        await r.xadd("cachegate:events", {"op": "del", "idlist": str(dropped.id)})
        await wait_for(lambda: store.tenant_entries().entries == 1)
    async with following(redis_server.url, max_entries_per_tenant=5) as (store, _):  # a reload
        # (before: b counted 1 for good, in the top and the tenants)
        await wait_for(lambda: store.tenant_entries() == TenantEntries({"a": 1}, 1, 1))
        assert await counted(store) == {"a": 1}


async def test_an_entry_stored_again_while_it_is_adopted_keeps_its_new_expiry(
    redis_server: RedisServer,
) -> None:
    """A replica of a version before tenant shares that stores an entry again (a longer TTL)
    between the follower reading the entry to adopt it and the adoption: the tenant's expiry
    set keeps the new expiry, as ``exp`` does (an older one had the tenant's shed take a live
    entry as expired)."""
    async with following(redis_server.url, max_entries_per_tenant=5) as (store, _):
        r = store._redis
        first, again = of("a", 1, ttl=60), of("a", 1, ttl=3600)  # (one id)

        async def stored_by_that_version(e: Entry) -> None:
            await r.set(f"cachegate:e:{e.id}", msgspec.msgpack.encode(e))
            await r.zadd("cachegate:lru", {str(e.id): time.time()})
            await r.zadd("cachegate:exp", {str(e.id): e.expires})
            await r.xadd("cachegate:events", {"op": "put", "id": e.id, "scope": "s1"})

        read, raced = store._follower.mget, []

        async def racing(keys: list[str]) -> Any:
            blobs = await read(keys)
            if not raced:  # (the first adoption's read: stored again right after it)
                raced.append(await stored_by_that_version(again))
            return blobs

        store._follower.mget = racing
        await stored_by_that_version(first)
        await wait_for(lambda: store.tenant_entries() == TenantEntries({"a": 1}, 1, 1))
        assert raced
        assert await r.zscore("cachegate:x:a", str(first.id)) == again.expires  # was first's
