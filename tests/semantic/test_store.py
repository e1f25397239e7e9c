"""The embedded entry store: persistence, LRU eviction, expiry, namespaces."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import msgspec
import pytest

from semantic.keys import entry_id
from semantic.store import DiskStore, Entry, StoreOpenError, StoreUnavailable


def entry(n: int, *, namespace: str = "", expires: float | None = None) -> Entry:
    exact = hashlib.sha256(str(n).encode()).hexdigest()
    return Entry(id=entry_id(exact), exact=exact, scope="s", question=f"q{n}", model="m", tenant="t",
                 namespace=namespace, response={"n": n}, created=time.time() + n * 1e-3, expires=expires)  # fmt: skip


async def test_put_get_and_restart(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, max_entries=10)
    e = entry(1)
    assert await store.put(e) == []
    got = await store.get(e.id)
    assert got is not None and got.response == {"n": 1}
    await store.record_hit(e.id)
    await store.record_hit(e.id)
    await store.close()
    reopened = DiskStore(tmp_path, max_entries=10)
    again = await reopened.get(e.id)
    assert again is not None and again.hits == 2
    assert [x.id async for x in reopened.entries()] == [e.id]
    await reopened.close()


async def test_an_unreadable_record_is_dropped_at_start_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A damaged record (or one of an incompatible version) was dropped without a word: the
    store only looked smaller (an operator review truncated one)."""
    store = DiskStore(tmp_path, max_entries=10)
    for n in range(3):
        await store.put(entry(n))
    store._cache.set(entry(1).id, b"\x93 not a record")  # (written as the store writes)
    await store.close()
    reopened = DiskStore(tmp_path, max_entries=10)
    assert len(reopened) == 2 and await reopened.get(entry(1).id) is None
    assert "1 stored answers could not be read" in caplog.text
    await reopened.close()


async def test_lru_eviction_reports_evicted_ids(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, max_entries=3)
    entries = [entry(i) for i in range(3)]
    for e in entries:
        await store.put(e)
    await store.record_hit(entries[0].id)  # 0 is now the most recently used
    evicted = await store.put(entry(3))
    assert evicted == [entries[1].id]
    assert await store.get(entries[1].id) is None
    assert await store.get(entries[0].id) is not None
    assert len(store) == 3
    await store.close()


async def test_expiry_and_sweep(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, max_entries=10)
    short = entry(1, expires=time.time() + 0.2)
    keep = entry(2)
    await store.put(short)
    await store.put(keep)
    time.sleep(0.3)
    assert await store.get(short.id) is None
    assert await store.sweep() == [short.id]  # (the read left it to the sweep to announce)
    assert len(store) == 1
    await store.close()


async def test_flush_all_or_one_namespace(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, max_entries=10)
    a, b, c = entry(1, namespace="a"), entry(2, namespace="b"), entry(3, namespace="a")
    for e in (a, b, c):
        await store.put(e)
    assert sorted(await store.flush("a")) == sorted([a.id, c.id])
    assert await store.get(b.id) is not None and await store.get(a.id) is None
    assert await store.flush() == [b.id]
    assert len(store) == 0
    await store.close()


async def test_one_process_per_directory(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, max_entries=10)
    with pytest.raises(StoreOpenError, match="in use by another cachegate process"):
        DiskStore(tmp_path, max_entries=10)
    await store.close()
    again = DiskStore(tmp_path, max_entries=10)  # the lock went with close()
    await again.close()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(StoreOpenError, match="cannot use it"):
        DiskStore(blocker / "cache", max_entries=10)


async def test_lru_order_survives_a_restart(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, max_entries=2)
    hot, cold = entry(1), entry(2)  # the hot one stored first...
    await store.put(hot)
    await store.put(cold)
    time.sleep(0.01)  # (entry() dates its entries a few ms ahead)
    await store.record_hit(hot.id)  # ...and used last
    await store.close()
    reopened = DiskStore(tmp_path, max_entries=2)
    assert await reopened.put(entry(3)) == [cold.id]  # was: the hot one (ordered by creation)
    assert await reopened.get(hot.id) is not None
    await reopened.close()


async def test_expired_entries_are_evicted_before_live_ones(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, max_entries=2)
    live, short = entry(1), entry(2, expires=time.time() + 0.2)
    await store.put(live)
    await store.put(short)
    await store.record_hit(short.id)  # the expiring one is the most recently used
    time.sleep(0.3)
    assert await store.put(entry(3)) == [short.id]  # was: the live one
    assert await store.get(live.id) is not None
    await store.close()


async def test_bulk_sweeps_and_flushes_let_requests_run_between_batches(tmp_path: Path) -> None:
    """A sweep or flush of thousands of entries must not hold the event loop to the end."""
    import asyncio

    store = DiskStore(tmp_path, max_entries=10_000)
    soon = time.time() + 0.3
    entries = [entry(i, expires=soon) for i in range(2000)]
    for e in entries:
        await store.put(e)
    await asyncio.sleep(0.35)  # all expired
    sweeping = asyncio.create_task(store.sweep())
    await asyncio.sleep(0)  # the sweep starts and does its first batch only
    assert not sweeping.done() and 0 < len(store) < 2000
    late = entries[-1]
    fresh = entry(1999, expires=time.time() + 3600)  # the same question, stored anew meanwhile
    await store.put(fresh)
    first = entries[0]  # swept by the first batch, then stored again
    assert await store.get(first.id) is None
    await store.put(entry(0, expires=time.time() + 3600))
    gone = await sweeping
    assert late.id not in gone and await store.get(late.id) is not None  # the new one stays
    assert first.id not in gone and await store.get(first.id) is not None
    assert len(gone) == 1998 and len(store) == 2
    for i in range(2000, 4000):
        await store.put(entry(i))
    flushing = asyncio.create_task(store.flush())
    await asyncio.sleep(0)
    assert not flushing.done() and 0 < len(store) < 2001
    early = entry(2000)  # deleted by the first batch, then stored again while the flush runs
    assert await store.get(early.id) is None
    await store.put(early)
    flushed = await flushing
    assert early.id not in flushed  # (so its vector stays in the index: it is live)
    assert len(flushed) == 2001 and len(store) == 1
    assert await store.get(early.id) is not None
    await store.flush()
    await store.close()
    reopened = DiskStore(tmp_path, max_entries=10_000)  # nothing came back
    assert len(reopened) == 0
    await reopened.close()


async def test_put_many_writes_in_batches_and_evicts_as_put_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An embeddings batch's 2,048 answers: a transaction per 256, not a commit each (the
    event loop was held ~0.1 ms an answer: 200 ms for one request), requests between two."""
    import asyncio

    store = DiskStore(tmp_path, max_entries=600)
    old = [entry(i) for i in range(100)]
    for e in old:
        await store.put(e)
    await store.record_hit(old[0].id)  # the most recently used of them: evicted last
    batch = [entry(i) for i in range(1000, 1600)]
    transactions = []
    real = store._cache.transact

    def counted(*args: object, **kwargs: object) -> object:
        transactions.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(store._cache, "transact", counted)
    putting = asyncio.create_task(store.put_many(batch))
    await asyncio.sleep(0)  # the first batch only
    assert not putting.done() and len(store) == 356
    evicted = await putting
    # 256 + 256 + 88 written; 12 then 88 evicted, each batch's in one transaction
    assert len(transactions) == 3 + 2
    assert evicted == [e.id for e in (*old[1:], old[0])]  # the least recently used first
    assert len(store) == 600 and all([await store.get(e.id) for e in batch])
    await store.close()
    reopened = DiskStore(tmp_path, max_entries=600)
    assert len(reopened) == 600 and await reopened.get(batch[-1].id) is not None
    await reopened.close()


async def test_put_many_a_full_disk_refuses_says_how_many_were_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DiskStore(tmp_path, max_entries=1000)
    calls = []
    real = store._cache.set

    def fills_up(key: int, value: bytes, **kwargs: object) -> object:
        calls.append(key)
        if len(calls) > 300:  # in the second batch
            raise sqlite3.OperationalError("database or disk is full")
        return real(key, value, **kwargs)

    monkeypatch.setattr(store._cache, "set", fills_up)
    batch = [entry(i) for i in range(600)]
    with pytest.raises(StoreUnavailable) as refused:
        await store.put_many(batch)
    assert refused.value.stored == 256  # the first transaction; the second rolled back
    assert len(store) == 256 and await store.get(batch[255].id) is not None
    assert await store.get(batch[256].id) is None and await store.get(batch[299].id) is None
    await store.close()


async def test_a_delete_of_an_entry_read_keeps_one_stored_again_since(tmp_path: Path) -> None:
    """``delete_if_unchanged``: an entry read (a hit that could not serve it back), a fresh
    answer stored under its id since: the delete keeps the fresh one (on disk too); the entry
    read, still stored, goes."""
    store = DiskStore(tmp_path, max_entries=10)
    await store.put(entry(1))
    read = await store.get(entry(1).id)
    assert read is not None
    fresh = msgspec.structs.replace(read, response={"n": "fresh"}, created=read.created + 1)
    await store.put(fresh)
    assert await store.delete_if_unchanged(read) is False
    kept = await store.get(read.id)
    assert kept is not None and kept.response == {"n": "fresh"} and len(store) == 1
    await store.close()
    store = DiskStore(tmp_path, max_entries=10)  # (kept on disk, not only in memory)
    kept = await store.get(read.id)
    assert kept is not None and kept.response == {"n": "fresh"}
    assert await store.delete_if_unchanged(kept) is True
    assert await store.get(read.id) is None and len(store) == 0
    assert await store.delete_if_unchanged(kept) is False  # (already gone)
    await store.close()
    store = DiskStore(tmp_path, max_entries=10)
    assert await store.get(read.id) is None and len(store) == 0
    await store.close()


async def test_a_damaged_database_is_a_clear_open_error(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, max_entries=5000)
    for n in range(2000):
        await store.put(entry(n))
    await store.close()
    db = tmp_path / "cache.db"
    with db.open("r+b") as f:  # pages past the header overwritten (was: a traceback at start)
        f.seek(db.stat().st_size // 2)
        f.write(b"\xa5" * 40960)
    with pytest.raises(StoreOpenError, match="cannot read the cache there"):
        DiskStore(tmp_path, max_entries=5000)
    with pytest.raises(StoreOpenError, match="cannot read the cache there"):
        DiskStore(tmp_path, max_entries=5000)  # (the failed open released its lock)


async def test_a_lowered_max_entries_applies_at_start(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, max_entries=10)
    entries = [entry(n) for n in range(10)]
    for e in entries:
        await store.put(e)
    await store.close()
    reopened = DiskStore(tmp_path, max_entries=3)
    assert len(reopened) == 3  # was: 10 until the next store evicted 8 at once
    assert [x.id async for x in reopened.entries()] == [e.id for e in entries[-3:]]
    assert await reopened.get(entries[0].id) is None
    await reopened.close()
    again = DiskStore(tmp_path, max_entries=10)  # the excess left the disk too
    assert len(again) == 3
    await again.close()


async def test_a_flush_the_disk_refuses_leaves_the_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DiskStore(tmp_path, max_entries=10)
    entries = [entry(n) for n in range(3)]
    for e in entries:
        await store.put(e)

    def full(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store._cache, "delete", full)  # (the transaction is rolled back)
    with pytest.raises(StoreUnavailable, match="disk is full"):  # admin: 503, not a 500
        await store.flush()
    # was: 0 entries here, and all 3 back (servable) after the next start
    assert len(store) == 3 and await store.get(entries[0].id) is not None
    monkeypatch.undo()
    await store.close()
    reopened = DiskStore(tmp_path, max_entries=10)
    assert len(reopened) == 3
    assert sorted(await reopened.flush()) == sorted(e.id for e in entries)
    await reopened.close()


async def test_hit_counts_a_full_disk_refuses_wait_for_a_later_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = DiskStore(tmp_path, max_entries=10)
    stored = entry(1)
    await store.put(stored)
    await store.record_hit(stored.id)

    def full(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store._cache, "set", full)
    await store.sync()  # was: sqlite3.OperationalError (at shutdown: "shutdown failed")
    await store.sync()
    assert len([r for r in caplog.records if "refuses writes" in r.getMessage()]) == 1
    monkeypatch.undo()
    await store.close()  # the count that waited is written now
    reopened = DiskStore(tmp_path, max_entries=10)
    got = await reopened.get(stored.id)
    assert got is not None and got.hits == 1
    monkeypatch.setattr(reopened._cache, "set", full)
    await reopened.record_hit(stored.id)
    await reopened.close()  # closes (and unlocks) all the same
    again = DiskStore(tmp_path, max_entries=10)
    assert len(again) == 1
    await again.close()
