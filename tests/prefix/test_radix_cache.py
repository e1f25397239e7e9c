"""Unit tests for prefix.RadixCache: match, insert, split, lock, eviction, TTL, flush."""

from __future__ import annotations

import random
import threading

import pytest

from prefix import Evicted, KVSpan, Match, RadixCache, RadixKey, RadixStats
from tests.prefix.prefix_fakes import FakeSpan, covered, served, span

NS = "m|tenant:a"
BPT = 4  # bytes per token of the default fake span


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def key(tokens: list[int] | tuple[int, ...], ns: str = NS) -> RadixKey:
    return RadixKey(ns, tokens)


def put(cache: RadixCache, tokens: list[int], ns: str = NS, **span_kw: int) -> int:
    return cache.insert(key(tokens, ns), span(tokens, **span_kw))


def check(cache: RadixCache) -> RadixStats:
    cache._check_invariants()
    stats = cache.stats
    assert stats.bytes <= stats.max_bytes
    assert stats.tokens == stats.inserted_tokens - stats.evicted_tokens - stats.flushed_tokens
    return stats


# -- match / insert / split -------------------------------------------------------------


def test_fake_span_satisfies_the_protocol() -> None:
    assert isinstance(span([1, 2]), KVSpan)


def test_empty_cache_misses() -> None:
    cache = RadixCache(1000)
    m = cache.match(key([1, 2, 3]))
    assert m == Match(0, ())
    assert cache.stats.queried_tokens == 3 and cache.stats.hit_tokens == 0
    cache.lock(m)  # locking a miss is a no-op
    cache.unlock(m)


def test_match_serves_at_most_n_minus_1_tokens() -> None:
    cache = RadixCache(1000)
    assert put(cache, [1, 2, 3, 4]) == 4
    m = cache.match(key([1, 2, 3, 4]))
    assert m.n_cached == 3
    assert covered(m) == (1, 2, 3, 4)  # the whole node comes back; the caller uses 3
    assert served(m) == (1, 2, 3)
    assert cache.match(key([1])).n_cached == 0
    assert cache.match(key([])).n_cached == 0
    assert cache.match(key([1, 2, 3, 4, 5, 6])).n_cached == 4


def test_match_ending_inside_a_node_returns_the_node() -> None:
    cache = RadixCache(1000)
    put(cache, [1, 2, 3, 4, 5])
    m = cache.match(key([1, 2, 3, 9, 9]))
    assert m.n_cached == 3 and covered(m) == (1, 2, 3, 4, 5)
    assert cache.stats.nodes == 1  # matching never splits


def test_insert_stores_only_new_tokens_and_extends_a_leaf() -> None:
    cache = RadixCache(1000)
    assert put(cache, [1, 2, 3]) == 3
    assert put(cache, [1, 2, 3, 4, 5]) == 2
    m = cache.match(key([1, 2, 3, 4, 5, 6]))
    assert m.n_cached == 5
    assert [s.tokens for s in m.spans if isinstance(s, FakeSpan)] == [(1, 2, 3), (4, 5)]
    stats = check(cache)
    assert (stats.nodes, stats.tokens, stats.bytes, stats.inserted_tokens) == (2, 5, 5 * BPT, 5)


def test_inserting_a_cached_prefix_stores_nothing_and_does_not_split() -> None:
    cache = RadixCache(1000)
    put(cache, [1, 2, 3, 4])
    assert put(cache, [1, 2]) == 0
    assert put(cache, [1, 2, 3, 4]) == 0
    assert check(cache).nodes == 1


def test_divergence_splits_the_node_via_slice() -> None:
    cache = RadixCache(1000)
    put(cache, [1, 2, 3, 4])
    assert put(cache, [1, 2, 9]) == 1
    stats = check(cache)
    assert (stats.nodes, stats.tokens, stats.bytes) == (3, 5, 5 * BPT)
    m = cache.match(key([1, 2, 3, 4, 7]))
    assert m.n_cached == 4 and [len(s) for s in m.spans] == [2, 2]
    assert served(m) == (1, 2, 3, 4)
    m = cache.match(key([1, 2, 9, 9]))
    assert m.n_cached == 3 and served(m) == (1, 2, 9)
    m = cache.match(key([1, 5]))
    assert m.n_cached == 1 and covered(m) == (1, 2)


def test_split_with_per_span_overhead_is_accounted() -> None:
    cache = RadixCache(1000)
    put(cache, [1, 2, 3, 4], overhead=10)
    put(cache, [1, 2, 9], overhead=10)  # the split adds one span's overhead
    assert check(cache).bytes == 5 * BPT + 3 * 10


def test_stored_values_are_copies_made_by_slice() -> None:
    cache = RadixCache(1000)
    kv = span([1, 2, 3])
    cache.insert(key([1, 2, 3]), kv)
    (stored,) = cache.match(key([1, 2, 3, 4])).spans
    assert stored is not kv and stored == kv


def test_namespaces_never_share_nodes() -> None:
    cache = RadixCache(1000)
    put(cache, [1, 2, 3], ns="a")
    assert cache.match(key([1, 2, 3, 4], ns="b")).n_cached == 0
    assert put(cache, [1, 2, 3], ns="b") == 3
    assert cache.tokens_by_namespace() == {"a": 3, "b": 3}
    assert check(cache).namespaces == 2


def test_key_copies_tokens() -> None:
    tokens = [1, 2, 3]
    k = RadixKey(NS, tokens)
    tokens.append(4)
    assert k.tokens == (1, 2, 3)


def test_key_accepts_arrays() -> None:
    import numpy as np

    k = RadixKey(NS, np.array([1, 2, 3], dtype=np.int64))
    assert k.tokens == (1, 2, 3) and all(type(t) is int for t in k.tokens)
    cache = RadixCache(1000)
    cache.insert(k, span([1, 2, 3]))
    assert cache.match(key([1, 2, 3, 4])).n_cached == 3


def test_insert_rejects_kv_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="covers 2 tokens"):
        RadixCache(1000).insert(key([1, 2, 3]), span([1, 2]))


def test_bad_config_is_rejected() -> None:
    with pytest.raises(ValueError):
        RadixCache(-1)
    with pytest.raises(ValueError):
        RadixCache(10, ttl_s=0)


# -- eviction ---------------------------------------------------------------------------


def test_eviction_is_lru_over_leaves() -> None:
    clock = Clock()
    cache = RadixCache(8 * BPT, clock=clock)
    put(cache, [1, 1, 1, 1])
    clock.now = 1
    put(cache, [2, 2, 2, 2])
    clock.now = 2
    cache.match(key([1, 1, 1, 1]))  # [1...] is now the most recent
    clock.now = 3
    assert put(cache, [3, 3, 3, 3]) == 4
    assert cache.match(key([2, 2, 2, 2, 2])).n_cached == 0
    assert cache.match(key([1, 1, 1, 1, 1])).n_cached == 4
    stats = check(cache)
    assert (stats.evictions, stats.evicted_tokens) == (1, 4)


def test_eviction_takes_children_before_their_parent() -> None:
    clock = Clock()
    cache = RadixCache(1000, clock=clock)
    put(cache, [1, 2])
    clock.now = 1
    put(cache, [1, 2, 3])
    clock.now = 2
    put(cache, [5])
    # the parent [1, 2] is as old as its child [3]; the child goes first
    assert cache.evict(1) == BPT
    assert cache.match(key([1, 2, 3, 4])).n_cached == 2
    clock.now = 3
    assert cache.evict(BPT) == BPT  # [5] is now the LRU leaf
    assert cache.match(key([5, 5])).n_cached == 0
    assert cache.evict(10**6) == 2 * BPT
    assert check(cache).nodes == 0


def test_evict_keeps_what_keep_says_and_cuts_a_node_to_evict_its_tail() -> None:
    """``keep(span)``: leading tokens to keep. [1 2 3 4 5 6] keeps 4 (its tail [5 6] goes,
    recorded with the kept half as its prefix); [7 7] keeps all, so it and its parent stay;
    the rest goes whole."""
    clock = Clock()
    seen: list[Evicted] = []
    cache = RadixCache(1000, ttl_s=100, clock=clock, on_evict=seen.append)
    put(cache, [1, 2, 3, 4, 5, 6])
    clock.now = 1
    put(cache, [8, 7, 7])
    put(cache, [8, 9])
    kept = {(1, 2, 3, 4, 5, 6): 4, (7, 7): 2}

    def keep(s: KVSpan) -> int:
        assert isinstance(s, FakeSpan)
        return kept.get(s.tokens, 0)

    assert cache.evict(10**6, keep=keep) == 3 * BPT  # [9], [5 6]
    assert [(r.tokens, r.start, r.span) for r in seen] == [  # whole victims first, then cuts
        ((8, 9), 1, span([9])),
        ((1, 2, 3, 4, 5, 6), 4, span([5, 6])),
    ]
    assert seen[1].prefix_spans == (span([1, 2, 3, 4]),)
    assert served(cache.match(key([1, 2, 3, 4, 5, 6]))) == (1, 2, 3, 4)
    assert served(cache.match(key([8, 7, 7, 1]))) == (8, 7, 7)
    assert check(cache).tokens == 7
    clock.now = 200  # the kept half ages like the rest: the TTL drops it
    cache.evict_expired()
    assert check(cache).tokens == 0


def test_insert_that_cannot_fit_stores_the_prefix_that_fits() -> None:
    cache = RadixCache(5 * BPT)
    assert put(cache, [1, 2, 3, 4, 5, 6, 7]) == 5
    assert served(cache.match(key([1, 2, 3, 4, 5, 6, 7]))) == (1, 2, 3, 4, 5)
    assert check(cache).bytes == 5 * BPT


def test_insert_that_cannot_fit_with_overhead_stores_the_longest_prefix() -> None:
    cache = RadixCache(5 * BPT + 3)
    assert put(cache, [1, 2, 3, 4, 5, 6, 7], overhead=3) == 5
    cache.flush()
    assert put(cache, [1, 2, 3, 4, 5, 6, 7], overhead=10) == 3


def test_zero_budget_stores_nothing() -> None:
    cache = RadixCache(0)
    assert put(cache, [1, 2, 3]) == 0
    stats = check(cache)
    assert (stats.nodes, stats.bytes, stats.namespaces) == (0, 0, 0)


def test_insert_does_not_evict_its_own_path() -> None:
    cache = RadixCache(6 * BPT)
    put(cache, [1, 2, 3, 4])
    assert put(cache, [1, 2, 3, 4, 5, 6, 7, 8]) == 2  # room for 2 of 4; [1..4] stays
    assert served(cache.match(key([1, 2, 3, 4, 5, 6, 7]))) == (1, 2, 3, 4, 5, 6)


def test_split_that_would_overflow_the_budget_is_undone() -> None:
    cache = RadixCache(4 * BPT + 10 + 3)
    put(cache, [1, 2, 3, 4], overhead=10)  # 26 of 29 bytes
    m = cache.match(key([1, 2, 3, 4, 5]))
    with cache.hold(m):  # pins both halves of the split
        # splitting costs another 10 bytes of overhead, which cannot be freed: nothing
        # stored, and the node is whole again
        assert put(cache, [1, 2, 9], overhead=10) == 0
        stats = check(cache)
        assert (stats.nodes, stats.bytes, stats.locked_bytes, stats.evictions) == (1, 26, 26, 0)
    assert served(m) == (1, 2, 3, 4)
    assert [
        s.tokens for s in cache.match(key([1, 2, 3, 4, 5])).spans if isinstance(s, FakeSpan)
    ] == [(1, 2, 3, 4)]


def test_split_whose_sibling_is_evicted_in_vain_keeps_the_upper_half() -> None:
    cache = RadixCache(4 * BPT + 10 + 3)
    put(cache, [1, 2, 3, 4], overhead=10)  # 26 of 29 bytes
    # [3 4] is an unlocked leaf once split off, so LRU eviction takes it; [1 2] (18) and
    # [9] (14) still do not fit in 29: nothing stored, [1 2] stays as a leaf
    assert put(cache, [1, 2, 9], overhead=10) == 0
    stats = check(cache)
    assert (stats.nodes, stats.bytes, stats.evicted_tokens) == (1, 18, 2)
    assert served(cache.match(key([1, 2, 3]))) == (1, 2)


def test_insert_whose_copy_fails_leaves_the_tree_whole() -> None:
    class FailingCopy(FakeSpan):  # a CUDA out-of-memory while copying the new span out
        def slice(self, start: int, stop: int) -> FakeSpan:
            raise MemoryError("simulated out of memory")

    clock = Clock()
    cache = RadixCache(20 * BPT, clock=clock)
    for tokens in ([1, 2, 3, 4, 5, 6], [1, 2, 8, 8], [9, 9, 9]):
        clock.now += 1
        put(cache, tokens)
    clock.now += 1
    with pytest.raises(MemoryError):  # splits [3 4 5 6] first, then the copy fails
        cache.insert(key([1, 2, 3, 7, 7]), FailingCopy((1, 2, 3, 7, 7)))
    stats = check(cache)
    assert (stats.nodes, stats.tokens) == (4, 11)  # the split was undone
    assert served(cache.match(key([1, 2, 3, 4, 5, 6, 0]))) == (1, 2, 3, 4, 5, 6)
    assert cache.evict(12 * BPT) >= 11 * BPT  # used to fail an assertion on the parent
    assert check(cache).tokens == 0


def test_split_off_sibling_is_evicted_to_make_room() -> None:
    # Reported: the insert locked the whole node it splits, so the lower half -- a sibling
    # branch, not on the new path -- could not be evicted and the new tail was cut short.
    cache = RadixCache(40)
    first = [0, 1, 2, *range(100, 122)]  # 25 tokens
    second = [0, 1, 2, *range(200, 220)]  # shares 3, 20 new
    assert put(cache, first, bytes_per_token=1) == 25
    assert put(cache, second, bytes_per_token=1) == 20
    stats = check(cache)
    assert (stats.evictions, stats.evicted_tokens, stats.tokens, stats.bytes) == (1, 22, 23, 23)
    m = cache.match(key([*second, 7]))
    assert m.n_cached == 23 and served(m) == tuple(second)
    assert [len(s) for s in m.spans] == [3, 20]
    assert cache.match(key(first)).n_cached == 3


def test_split_off_sibling_stays_while_locked() -> None:
    cache = RadixCache(40)
    first = [0, 1, 2, *range(100, 122)]
    put(cache, first, bytes_per_token=1)
    with cache.hold(cache.match(key([*first, 7]))):  # another request uses the first path
        assert put(cache, [0, 1, 2, *range(200, 220)], bytes_per_token=1) == 15
        stats = check(cache)
        assert (stats.evictions, stats.bytes, stats.locked_bytes) == (0, 40, 25)
    assert cache.match(key([*first, 7])).n_cached == 25


class CopyCounter:
    """Counts the copies `slice` makes, and their bytes."""

    def __init__(self) -> None:
        self.slices = 0
        self.bytes = 0


class CountingSpan:
    """`n` tokens at `bytes_per_token` (+ `overhead`); every `slice` is counted."""

    def __init__(
        self, n: int, counter: CopyCounter, bytes_per_token: int = BPT, overhead: int = 0
    ) -> None:
        self.n, self.counter = n, counter
        self.bytes_per_token, self.overhead = bytes_per_token, overhead

    def __len__(self) -> int:
        return self.n

    @property
    def nbytes(self) -> int:
        return self.n * self.bytes_per_token + self.overhead

    def slice(self, start: int, stop: int) -> CountingSpan:
        part = CountingSpan(stop - start, self.counter, self.bytes_per_token, self.overhead)
        self.counter.slices += 1
        self.counter.bytes += part.nbytes
        return part


def test_no_copy_when_nothing_fits() -> None:
    copies = CopyCounter()
    assert RadixCache(0).insert(key(list(range(10))), CountingSpan(10, copies)) == 0
    assert RadixCache(BPT - 1).insert(key(list(range(10))), CountingSpan(10, copies)) == 0
    assert (copies.slices, copies.bytes) == (0, 0)


def test_only_what_is_stored_is_copied() -> None:
    copies = CopyCounter()
    cache = RadixCache(12 * BPT)
    assert cache.insert(key(list(range(10))), CountingSpan(10, copies)) == 10
    assert (copies.slices, copies.bytes) == (1, 10 * BPT)
    copies.slices = copies.bytes = 0
    # extends the path: 8 new tokens, room for 2 (the path is locked)
    assert cache.insert(key(list(range(18))), CountingSpan(18, copies)) == 2
    assert (copies.slices, copies.bytes) == (1, 2 * BPT)
    copies.slices = copies.bytes = 0
    # the cache is full and pinned: no room, no copy
    with cache.hold(cache.match(key(list(range(13))))):
        assert cache.insert(key([5, 5, 5]), CountingSpan(3, copies)) == 0
    assert (copies.slices, copies.bytes) == (0, 0)
    check(cache)


def test_overhead_spans_copy_little_more_than_they_store() -> None:
    copies = CopyCounter()
    cache = RadixCache(5 * BPT + 10)
    # the estimate from kv's bytes per token is low with an overhead: the real size of the
    # copy decides, and the copies shrink towards what fits (never the whole 20 tokens)
    assert cache.insert(key(list(range(20))), CountingSpan(20, copies, overhead=10)) == 5
    assert copies.slices <= 2 and copies.bytes < 20 * BPT + 10
    check(cache)


# -- locks ------------------------------------------------------------------------------


def test_locked_paths_are_not_evicted_or_flushed() -> None:
    cache = RadixCache(8 * BPT)
    put(cache, [1, 1, 1, 1])
    put(cache, [1, 1, 2, 2])  # splits: [1 1] -> [1 1], [2 2]
    m = cache.match(key([1, 1, 1, 1, 1]))
    with cache.hold(m) as held:
        assert held is m
        assert check(cache).locked_bytes == 4 * BPT
        assert cache.evict(10**6) == 2 * BPT  # only [2 2] could go
        assert cache.flush() == 0
        assert put(cache, [3, 3, 3, 3, 3]) == 4  # fills the budget, evicts nothing locked
        assert served(cache.match(key([1, 1, 1, 1, 1]))) == (1, 1, 1, 1)
    assert check(cache).locked_bytes == 0
    assert cache.flush() == 8 * BPT


def test_locks_are_counted() -> None:
    cache = RadixCache(1000)
    put(cache, [1, 2, 3])
    m1 = cache.match(key([1, 2, 3, 4]))
    m2 = cache.match(key([1, 2, 5]))
    cache.lock(m1)
    cache.lock(m2)
    cache.unlock(m1)
    assert cache.flush() == 0
    cache.unlock(m2)
    with pytest.raises(RuntimeError, match="without a matching lock"):
        cache.unlock(m2)
    assert cache.flush() == 3 * BPT


def test_splitting_a_locked_node_keeps_both_halves_locked() -> None:
    cache = RadixCache(1000)
    put(cache, [1, 2, 3, 4])
    m = cache.match(key([1, 2, 3, 4, 5]))
    cache.lock(m)
    put(cache, [1, 2, 9])
    assert check(cache).locked_bytes == 4 * BPT
    assert cache.evict(10**6) == BPT  # only the new leaf [9]
    cache.unlock(m)
    assert check(cache).locked_bytes == 0
    assert cache.evict(10**6) == 4 * BPT


def test_locking_an_evicted_match_is_harmless() -> None:
    cache = RadixCache(1000)
    put(cache, [1, 2])
    put(cache, [1, 2, 3, 4])
    m = cache.match(key([1, 2, 3, 4, 5]))
    cache.evict(2 * BPT)  # the leaf [3 4] goes; m still owns its spans
    assert served(m) == (1, 2, 3, 4)
    put(cache, [1, 2, 3, 4])  # a new [3 4] node, not the one m refers to
    with cache.hold(m):  # pins what is left of m's path: [1 2]
        assert check(cache).locked_bytes == 2 * BPT
    assert check(cache).locked_bytes == 0


# -- TTL --------------------------------------------------------------------------------


def test_ttl_expires_unused_nodes_leaf_first() -> None:
    clock = Clock()
    cache = RadixCache(1000, ttl_s=10, clock=clock)
    put(cache, [1, 2])
    clock.now = 5
    put(cache, [1, 2, 3])  # refreshes [1 2] too
    put(cache, [7, 7])
    clock.now = 12
    cache.match(key([7, 7, 7]))
    clock.now = 15
    assert cache.evict_expired() == 3 * BPT
    stats = check(cache)
    assert (stats.tokens, stats.expired_tokens, stats.evictions) == (2, 3, 2)
    clock.now = 22
    assert cache.match(key([7, 7, 7])).n_cached == 0  # expired lazily
    assert check(cache).nodes == 0


def test_ttl_spares_locked_nodes() -> None:
    clock = Clock()
    cache = RadixCache(1000, ttl_s=10, clock=clock)
    put(cache, [1, 2, 3])
    m = cache.match(key([1, 2, 3, 4]))
    cache.lock(m)
    clock.now = 100
    assert cache.evict_expired() == 0
    cache.unlock(m)
    assert cache.evict_expired() == 3 * BPT


# -- on_evict ---------------------------------------------------------------------------


def test_on_evict_sees_budget_evictions_with_their_whole_path() -> None:
    clock = Clock()
    seen: list[Evicted] = []
    cache = RadixCache(8 * BPT, ttl_s=100, clock=clock, on_evict=seen.append)
    put(cache, [1, 2, 3])
    put(cache, [1, 2, 3, 4, 5])
    put(cache, [1, 2, 3, 6])  # splits nothing: [4 5] and [6] hang below [1 2 3]
    put(cache, [7, 7, 7])  # 9 tokens > 8: the LRU leaf [4 5] goes
    assert [(r.namespace, r.tokens, r.start) for r in seen] == [(NS, (1, 2, 3, 4, 5), 3)]
    (record,) = seen
    assert record.span == span([4, 5]) and record.prefix_spans == (span([1, 2, 3]),)
    cache.evict(100)  # LRU order, a child before its parent: [6], [1 2 3], [7 7 7]
    assert [r.tokens for r in seen[1:]] == [(1, 2, 3, 6), (1, 2, 3), (7, 7, 7)]
    assert [r.prefix_spans for r in seen[1:]] == [(span([1, 2, 3]),), (), ()]
    put(cache, [8, 8])
    clock.now = 1000
    cache.evict_expired()  # neither the TTL …
    put(cache, [9, 9])
    cache.flush()  # … nor a flush calls it
    assert len(seen) == 4


def test_on_evict_runs_outside_the_lock_and_its_errors_stay_there(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    def hook(record: Evicted) -> None:
        calls.append(cache.match(key([*record.tokens, 0])).n_cached)  # would deadlock inside
        raise RuntimeError("the tier is broken")

    cache = RadixCache(3 * BPT, on_evict=hook)
    put(cache, [1, 2, 3])
    assert put(cache, [4, 5, 6]) == 3  # the insert itself succeeds
    assert calls == [0] and "on_evict failed" in caplog.text
    check(cache)


# -- flush and stats --------------------------------------------------------------------


def test_flush_one_namespace_or_all() -> None:
    cache = RadixCache(1000)
    put(cache, [1, 2, 3], ns="a")
    put(cache, [1, 2, 4], ns="a")
    put(cache, [1, 2], ns="b")
    assert cache.flush("a") == 4 * BPT
    assert cache.tokens_by_namespace() == {"b": 2}
    assert cache.flush() == 2 * BPT
    stats = check(cache)
    assert (stats.nodes, stats.tokens, stats.bytes, stats.flushed_tokens) == (0, 0, 0, 6)


def test_stats_count_queries_and_hits() -> None:
    cache = RadixCache(1000)
    put(cache, [1, 2, 3, 4])
    cache.match(key([1, 2, 3, 4]))
    cache.match(key([9, 9]))
    stats = check(cache)
    assert (stats.queries, stats.hits, stats.queried_tokens, stats.hit_tokens) == (2, 1, 6, 3)
    assert stats.hit_rate == pytest.approx(0.5)
    assert RadixCache(1).stats.hit_rate == 0.0


# -- threads ----------------------------------------------------------------------------


def test_concurrent_use_keeps_the_invariants() -> None:
    cache = RadixCache(300)
    errors: list[BaseException] = []

    def engine(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(400):
                tokens = [rng.randrange(3) for _ in range(rng.randrange(1, 12))]
                k = key(tokens, ns=f"ns{rng.randrange(2)}")
                with cache.hold(cache.match(k)) as m:
                    assert served(m) == tuple(tokens[: m.n_cached])
                    cache.insert(k, span(tokens))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def admin() -> None:
        try:
            for i in range(200):
                assert cache.stats.bytes <= 300
                if i % 20 == 0:
                    cache.flush("ns0" if i % 40 else None)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=engine, args=(s,)) for s in range(4)]
    threads.append(threading.Thread(target=admin))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert check(cache).locked_bytes == 0
