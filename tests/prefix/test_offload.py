"""Unit tests for prefix.offload.DiskTier with fake spans (no model, no torch).

The fake codec writes each token's id into its row, so what a read returns can be checked
token by token: a row read back for position i must hold the id of the prompt's token i.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from prefix import Evicted, KVSpan, RadixCache, RadixKey
from prefix.offload import DiskTier, FileRegion, OnDisk
from tests.prefix.prefix_fakes import FakeSpan, span

NS = "m|tenant:a"
BPT = 16  # bytes per token on disk: the token id (int64) twice


class Codec:
    """Rows of FakeSpans: ``[token id, token id]`` as int64 each."""

    bytes_per_token = BPT

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()

    def encode(self, spans: Sequence[KVSpan], start: int, stop: int) -> np.ndarray:
        self.gate.wait()  # tests close it to stall the writer
        # (rows by position: a span without KV, e.g. OnDisk, stands for its tokens)
        rows = [t for s in spans for t in (s.tokens if isinstance(s, FakeSpan) else [-1] * len(s))]
        tokens = rows[start:stop]
        assert -1 not in tokens, "asked for rows of a span that carries none"
        ids = np.array(tokens, dtype=np.int64)
        return np.stack([ids, ids], axis=1).view(np.uint8)  # [n, 16]


def tokens_of(rows: np.ndarray) -> list[int]:
    return rows.view(np.int64)[:, 0].tolist()


def evicted(tokens: Sequence[int], start: int = 0, ns: str = NS) -> Evicted:
    """A node holding ``tokens[start:]``, its ancestors (one span) holding the rest."""
    t = tuple(tokens)
    prefix = (span(t[:start]),) if start else ()
    return Evicted(ns, t, start, span(t[start:]), prefix)


@pytest.fixture
def codec() -> Codec:
    return Codec()


@pytest.fixture
def tier(tmp_path: Path, codec: Codec) -> Iterator[DiskTier]:
    tier = DiskTier(tmp_path, max_bytes=1000 * BPT, codec=codec)
    yield tier
    tier.close()


def store(tier: DiskTier, *records: Evicted) -> None:
    for record in records:
        assert tier.offer(record)
    tier.drain()


def files_on_disk(tier: DiskTier) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in tier.directory.iterdir()}


def check_accounting(tier: DiskTier) -> None:
    stats, files = tier.stats, files_on_disk(tier)
    assert stats.files == len(files)
    assert stats.file_bytes == sum(files.values()) <= stats.max_bytes
    assert stats.bytes == stats.tokens * BPT <= stats.file_bytes


# -- store and read ---------------------------------------------------------------------


def test_evicted_node_is_read_back_with_its_whole_prefix(tier: DiskTier) -> None:
    store(tier, evicted([1, 2, 3, 4, 5, 6], start=4))  # ancestors [1..4] still in memory
    got = tier.read(RadixKey(NS, [1, 2, 3, 4, 5, 6, 7]), start=2)
    assert got is not None and (got.start, got.stop) == (2, 6)
    assert tokens_of(got.rows) == [3, 4, 5, 6]  # written with the ancestors: no hole
    assert tier.stats.written_tokens == 6 and tier.stats.hit_tokens == 4
    check_accounting(tier)


def test_read_serves_at_most_n_minus_1_and_respects_min_tokens(tier: DiskTier) -> None:
    store(tier, evicted([1, 2, 3, 4]))
    got = tier.read(RadixKey(NS, [1, 2, 3, 4]), start=0)
    assert got is not None and got.stop == 3  # NOTE: the last prompt token is recomputed
    assert tier.read(RadixKey(NS, [1, 2, 3, 4]), start=1, min_tokens=3) is None
    assert tier.read(RadixKey(NS, [1, 2, 3, 4]), start=3) is None
    assert tier.read(RadixKey(NS, [9, 9]), start=0) is None
    assert (tier.stats.queries, tier.stats.hits) == (4, 1)


def test_only_missing_tokens_are_written(tier: DiskTier) -> None:
    store(tier, evicted([1, 2, 3, 4, 5], start=3))
    store(tier, evicted([1, 2, 3], start=0))  # the parent, evicted later: already on disk
    store(tier, evicted([1, 2, 3, 7, 8], start=3))  # a sibling: only [7, 8] is new
    assert tier.stats.written_tokens == 5 + 2
    assert tier.stats.files_written == 2
    got = tier.read(RadixKey(NS, [1, 2, 3, 7, 8, 0]), start=0)
    assert got is not None and tokens_of(got.rows) == [1, 2, 3, 7, 8]  # from two files
    check_accounting(tier)


def test_a_prefix_the_files_hold_goes_as_its_length_and_a_lost_one_drops_the_record(
    tier: DiskTier,
) -> None:
    store(tier, evicted([1, 2, 3], start=0))
    assert tier.held(NS, [1, 2, 3, 4]) == 3 and tier.held(NS, [1, 2]) == 2
    assert tier.held("other", [1, 2, 3]) == 0
    assert (tier.stats.queries, tier.stats.hits) == (0, 0)  # a look, not a read
    on_disk = Evicted(NS, (1, 2, 3, 4, 5), 3, span([4, 5]), (OnDisk(3),))
    store(tier, on_disk)  # no KV for [1, 2, 3]: the files have it
    got = tier.read(RadixKey(NS, [1, 2, 3, 4, 5, 0]), start=0)
    assert got is not None and tokens_of(got.rows) == [1, 2, 3, 4, 5]
    tier.flush()  # the files lose the prefix before the next record is written
    dropped = tier.stats.dropped
    store(tier, Evicted(NS, (1, 2, 3, 6), 3, span([6]), (OnDisk(3),)))
    assert tier.stats.dropped == dropped + 1 and tier.stats.write_errors == 0
    assert tier.read(RadixKey(NS, [1, 2, 3, 6, 0]), start=0) is None
    check_accounting(tier)


def test_memory_tree_hook_offloads_budget_evictions_only(tmp_path: Path, codec: Codec) -> None:
    tier = DiskTier(tmp_path, max_bytes=1000 * BPT, codec=codec)
    memory = RadixCache(6 * 4, on_evict=tier.offer)  # 6 tokens of 4-byte FakeSpans
    try:
        memory.insert(RadixKey(NS, [1, 2, 3, 4]), span([1, 2, 3, 4]))
        memory.insert(RadixKey(NS, [5, 6, 7, 8]), span([5, 6, 7, 8]))  # evicts [1..4]
        memory.flush()  # a flush is not offloaded
        tier.drain()
        assert tier.stats.offered == 1
        assert tier.read(RadixKey(NS, [1, 2, 3, 4, 9]), start=0) is not None
        assert tier.read(RadixKey(NS, [5, 6, 7, 8, 9]), start=0) is None
    finally:
        tier.close()


def test_namespaces_stay_apart_on_disk(tier: DiskTier) -> None:
    store(tier, evicted([1, 2, 3], ns="m|tenant:a"))
    assert tier.read(RadixKey("m|tenant:b", [1, 2, 3, 4]), start=0) is None
    assert tier.read(RadixKey("m|tenant:a", [1, 2, 3, 4]), start=0) is not None


def test_ttl_drops_unused_prefixes_and_their_files(tmp_path: Path, codec: Codec) -> None:
    tier = DiskTier(tmp_path, max_bytes=1000 * BPT, codec=codec, ttl_s=0.05)
    try:
        store(tier, evicted([1, 2, 3]))
        assert tier.stats.files == 1
        time.sleep(0.1)
        assert tier.read(RadixKey(NS, [1, 2, 3, 4]), start=0) is None  # expired on lookup
        assert files_on_disk(tier) == {} and tier.stats.file_bytes == 0
    finally:
        tier.close()


def test_file_region_slices_without_copying(tier: DiskTier) -> None:
    store(tier, evicted([1, 2, 3, 4, 5, 6]))
    (name,) = files_on_disk(tier)
    store(tier, evicted([1, 2, 3, 9, 9], start=3))  # the index splits the region at 3
    match = tier._index.match(RadixKey(NS, [1, 2, 3, 4, 5, 6, 0]))
    regions = [s for s in match.spans if isinstance(s, FileRegion)]
    assert [(r.file.path.name, r.offset, len(r), r.nbytes) for r in regions] == [
        (name, 0, 3, 3 * BPT),
        (name, 3, 3, 3 * BPT),
    ]


# -- budget and file lifetime -----------------------------------------------------------


def test_budget_evicts_least_recently_used_files(tmp_path: Path, codec: Codec) -> None:
    tier = DiskTier(tmp_path, max_bytes=20 * BPT + 128, codec=codec)  # 20 rows + 2 headers
    try:
        store(tier, evicted(range(100, 110)), evicted(range(200, 210)))
        assert len(files_on_disk(tier)) == 2
        assert tier.read(RadixKey(NS, [*range(100, 110), 0]), start=0) is not None  # touch
        store(tier, evicted(range(300, 310)))  # the LRU file (200…) goes
        assert tier.read(RadixKey(NS, [*range(200, 210), 0]), start=0) is None
        assert tier.read(RadixKey(NS, [*range(100, 110), 0]), start=0) is not None
        assert tier.stats.evicted_tokens == 10 and len(files_on_disk(tier)) == 2
        check_accounting(tier)
        tier.flush()
        assert files_on_disk(tier) == {} and tier.stats.file_bytes == 0
    finally:
        tier.close()


def test_a_file_lives_until_its_last_region_goes(tier: DiskTier) -> None:
    store(tier, evicted([1, 2, 3, 4, 5, 6]))
    store(tier, evicted([1, 2, 3, 9, 9], start=3))  # splits the first file's region
    assert len(files_on_disk(tier)) == 2
    tier._index.evict(3 * BPT)  # the LRU leaf: [4, 5, 6], the lower half of file 1
    assert len(files_on_disk(tier)) == 2  # file 1 still holds [1, 2, 3] for [9, 9]
    check_accounting(tier)
    tier._index.evict(2 * BPT + 3 * BPT)
    assert files_on_disk(tier) == {} and tier.stats.files == 0


def test_a_record_larger_than_the_budget_stores_what_fits(tmp_path: Path, codec: Codec) -> None:
    tier = DiskTier(tmp_path, max_bytes=64 + 5 * BPT, codec=codec)
    try:
        store(tier, evicted(range(1, 9)))  # 8 tokens, room for 5
        assert tier.stats.tokens == 5
        assert list(files_on_disk(tier).values()) == [64 + 5 * BPT]  # truncated to fit
        got = tier.read(RadixKey(NS, range(1, 9)), start=0)
        assert got is not None and tokens_of(got.rows) == [1, 2, 3, 4, 5]
        check_accounting(tier)
    finally:
        tier.close()


def test_a_full_queue_drops_writes_and_counts_them(tmp_path: Path, codec: Codec) -> None:
    tier = DiskTier(tmp_path, max_bytes=1000 * BPT, codec=codec, queue_size=2)
    try:
        codec.gate.clear()  # the writer blocks on its first record
        accepted = [tier.offer(evicted([i, i + 1])) for i in range(0, 20, 2)]
        assert accepted.count(True) in (2, 3)  # the queue, plus one the writer took
        assert tier.stats.dropped == accepted.count(False)
        codec.gate.set()
        tier.drain()
        assert tier.stats.written_tokens == 2 * accepted.count(True)
        assert tier.read(RadixKey(NS, [0, 1, 2]), start=0) is not None
        check_accounting(tier)
    finally:
        codec.gate.set()
        tier.close()


def test_pending_bytes_bound_drops_too(tmp_path: Path, codec: Codec) -> None:
    tier = DiskTier(tmp_path, max_bytes=1000 * BPT, codec=codec, max_pending_bytes=40)
    try:
        codec.gate.clear()
        assert tier.offer(evicted(range(10)))  # 40 bytes of FakeSpan
        assert not tier.offer(evicted([1]))
        assert tier.stats.dropped == 1
    finally:
        codec.gate.set()
        tier.close()


def test_a_record_over_the_pending_bound_is_taken_when_nothing_waits(
    tmp_path: Path, codec: Codec
) -> None:
    """A long prompt's prefix is one node: it must reach the disk even past the bound."""
    tier = DiskTier(tmp_path, max_bytes=1000 * BPT, codec=codec, max_pending_bytes=40)
    try:
        codec.gate.clear()
        assert tier.offer(evicted(range(100)))  # 400 bytes of FakeSpan, nothing pending
        assert not tier.offer(evicted([7]))  # but nothing more while it waits
        codec.gate.set()
        tier.drain()
        assert tier.stats.written_tokens == 100
        read = tier.read(RadixKey(NS, [*range(100), 0]), start=0)
        assert read is not None and tokens_of(read.rows) == list(range(100))
    finally:
        codec.gate.set()
        tier.close()


@pytest.mark.parametrize("namespace", [None, NS])
def test_flush_drops_records_still_queued(
    tier: DiskTier, codec: Codec, namespace: str | None
) -> None:
    other = "m|tenant:b"
    codec.gate.clear()  # the writer holds the first record, the rest wait in the queue
    assert tier.offer(evicted([1, 2, 3]))
    assert tier.offer(evicted([4, 5, 6]))
    assert tier.offer(evicted([7, 8, 9], ns=other))
    flushing = threading.Thread(target=tier.flush, args=(namespace,))
    flushing.start()  # waits for the record being written
    codec.gate.set()
    flushing.join(timeout=10)
    tier.drain()
    assert tier.read(RadixKey(NS, [1, 2, 3, 0]), start=0) is None
    assert tier.read(RadixKey(NS, [4, 5, 6, 0]), start=0) is None
    kept = tier.read(RadixKey(other, [7, 8, 9, 0]), start=0)
    assert (kept is None) == (namespace is None)  # another namespace's flush leaves it
    check_accounting(tier)


def test_reads_during_writes_and_evictions_return_the_right_rows(
    tmp_path: Path, codec: Codec
) -> None:
    tier = DiskTier(tmp_path, max_bytes=40 * BPT, codec=codec, queue_size=1000)
    prompts = [(7, i, *range(100 * i, 100 * i + 8)) for i in range(60)]  # share [7], then not
    try:
        done = threading.Event()

        def offer_all() -> None:
            for p in prompts:
                tier.offer(evicted(p, start=1))
            done.set()

        writer = threading.Thread(target=offer_all)
        writer.start()
        while not done.is_set() or tier.stats.pending:
            for p in prompts[::7]:
                got = tier.read(RadixKey(NS, (*p, 0)), start=0)
                if got is not None:  # whatever is served must be the prompt's own tokens
                    assert tokens_of(got.rows) == list(p[: got.stop])
        writer.join()
        tier.drain()
        assert tier.read(RadixKey(NS, (*prompts[-1], 0)), start=0) is not None  # the newest
        assert tier.stats.read_errors == 0 and tier.stats.evicted_tokens > 0
        check_accounting(tier)
    finally:
        tier.close()


# -- failures ---------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncate", "header", "missing"])
def test_a_corrupt_or_missing_file_is_a_miss(tier: DiskTier, damage: str) -> None:
    store(tier, evicted([1, 2, 3, 4, 5]), evicted([7, 8, 9]))
    victim = next(p for p in tier.directory.iterdir() if p.stat().st_size == 64 + 5 * BPT)
    if damage == "truncate":
        os.truncate(victim, 64 + 2 * BPT)
    elif damage == "header":
        victim.write_bytes(b"garbage!" + victim.read_bytes()[8:])
    else:
        victim.unlink()
    assert tier.read(RadixKey(NS, [1, 2, 3, 4, 5, 6]), start=0) is None
    assert tier.stats.read_errors == 1
    assert tier.stats.tokens == 0  # the namespace was dropped, files included
    assert files_on_disk(tier) == {} and tier.stats.file_bytes == 0
    store(tier, evicted([1, 2, 3, 4, 5]))  # and can be stored again
    assert tier.read(RadixKey(NS, [1, 2, 3, 4, 5, 6]), start=0) is not None


def test_a_codec_error_is_counted_and_leaves_no_file(tier: DiskTier) -> None:
    assert tier.offer(Evicted(NS, (1, 2), 0, span([1, 2]), ()))
    assert tier.offer(Evicted(NS, (1, 2, 3), 1, span([2, 3]), ()))  # prefix spans missing
    tier.drain()
    assert tier.stats.write_errors == 1
    check_accounting(tier)


def test_a_run_of_write_failures_is_logged_once(
    tier: DiskTier, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory removed under the tier fails every eviction's write: one traceback for
    the run of them (was one each), the rest counted; a write that succeeds says so."""
    import logging
    import shutil

    caplog.set_level(logging.INFO, logger="prefix.offload")
    shutil.rmtree(tier.directory)
    for n in range(3):
        assert tier.offer(evicted([10 * n + 1, 10 * n + 2]))
    tier.drain()
    assert tier.stats.write_errors == 3
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None
    tier.directory.mkdir()
    store(tier, evicted([7, 8, 9]))
    assert tier.stats.write_errors == 3
    assert any("takes writes again" in r.getMessage() for r in caplog.records)
    assert tier.read(RadixKey(NS, [7, 8, 9, 1]), start=0) is not None


# -- run directories --------------------------------------------------------------------


def test_runs_share_a_directory_and_dead_runs_are_removed(tmp_path: Path, codec: Codec) -> None:
    dead = tmp_path / "kv-dead"
    (dead / "x.kv").parent.mkdir()
    (dead / "x.kv").write_bytes(b"orphan")
    (tmp_path / "kv-dead.lock").touch()
    unrelated = tmp_path / "keep.txt"
    unrelated.write_text("not ours")
    first = DiskTier(tmp_path, max_bytes=1000, codec=codec)
    second = DiskTier(tmp_path, max_bytes=1000, codec=codec)  # does not remove `first`
    try:
        assert not dead.exists() and unrelated.exists()
        assert first.directory.is_dir() and second.directory.is_dir()
        assert first.directory != second.directory
    finally:
        first.close()
        second.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".claim", "keep.txt"]


def test_scratch_reads_through_the_read_path(tier: DiskTier) -> None:
    rows = np.arange(8 * BPT, dtype=np.uint8).reshape(8, BPT)
    with tier.scratch(rows) as read:
        got = read(5)
        assert got is not None and (got == rows[:5]).all()
        assert tier.stats.files == 1
    assert files_on_disk(tier) == {} and tier.stats.file_bytes == 0
