"""Property tests: RadixCache against a brute-force reference model.

The model keeps no tree. It stores segments (the cache's nodes, each as the full token
path from its namespace's root plus where the segment starts on it) in a flat dict and
answers every question by scanning: which prefixes are stored, which segments are
leaves, which leaf is least recently used, who holds which lock. Random programs of
inserts, matches, locks, evictions, clock jumps and flushes over a 3-token alphabet
(so that prefixes collide and nodes split) must give exactly the same answers, spans,
byte counts and stats as the model. When the cache has an `on_evict` hook, it must see
exactly the segments the model's byte budget evicted (not the TTL's, not a flush's),
each with its whole path and its ancestors' spans, and never under the tree's lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

from prefix import Evicted, Match, RadixCache, RadixKey
from tests.prefix.prefix_fakes import FakeSpan, covered, span

NAMESPACES = ("a", "b")
token_lists = st.lists(st.integers(0, 2), max_size=10)


@dataclass
class Seg:
    """One node: it holds `path[start:]`, the tail of the path from its root."""

    id: int
    ns: str
    path: tuple[int, ...]
    start: int
    last: float
    nbytes: int

    def holds(self, ns: str, prefix: tuple[int, ...]) -> bool:
        """Whether the last token of `prefix` is stored in this segment."""
        n = len(prefix)
        return ns == self.ns and self.start < n <= len(self.path) and self.path[:n] == prefix


@dataclass
class Model:
    max_bytes: int
    ttl_s: float | None
    bytes_per_token: int
    overhead: int
    segs: dict[int, Seg] = field(default_factory=dict)
    handles: dict[int, set[int]] = field(default_factory=dict)  # match -> segment ids
    locks: list[int] = field(default_factory=list)  # handles locked, with repeats
    next_id: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    evicted: list[tuple[str, tuple[int, ...], int]] = field(default_factory=list)  # by budget

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def nbytes(self, n_tokens: int) -> int:
        return n_tokens * self.bytes_per_token + self.overhead

    def lock_count(self, seg: Seg) -> int:
        return sum(seg.id in self.handles[h] for h in self.locks)

    def is_leaf(self, seg: Seg) -> bool:
        n = len(seg.path)
        return not any(
            s.ns == seg.ns and s.start == n and s.path[:n] == seg.path for s in self.segs.values()
        )

    def stored_len(self, ns: str, tokens: tuple[int, ...], limit: int) -> int:
        n = 0
        while n < limit and any(s.holds(ns, tokens[: n + 1]) for s in self.segs.values()):
            n += 1
        return n

    def path_segs(self, ns: str, tokens: tuple[int, ...], n: int) -> list[Seg]:
        """Segments holding tokens[:1] .. tokens[:n], root first."""
        segs = [s for s in self.segs.values() if s.holds(ns, tokens[: s.start + 1])]
        return sorted((s for s in segs if s.start < n), key=lambda s: s.start)

    def remove(self, victims: list[Seg], reason: str) -> int:
        if victims:
            event(f"removed: {reason}")
        for seg in victims:
            del self.segs[seg.id]
            if reason == "evicted":
                self.evicted.append((seg.ns, seg.path, seg.start))
            self.count(f"{reason}_tokens", len(seg.path) - seg.start)
            self.count("evictions" if reason != "flushed" else "flushes")
        return sum(seg.nbytes for seg in victims)

    def expire(self, now: float) -> int:
        if self.ttl_s is None:
            return 0
        ttl = self.ttl_s
        victims = [s for s in self.segs.values() if now - s.last >= ttl and not self.lock_count(s)]
        return self.remove(victims, "expired")

    def evict(self, n_bytes: int) -> int:
        freed = 0
        while freed < n_bytes:
            leaves = [s for s in self.segs.values() if self.is_leaf(s) and not self.lock_count(s)]
            if not leaves:
                break
            freed += self.remove([min(leaves, key=lambda s: s.last)], "evicted")
        return freed

    def match(self, ns: str, tokens: tuple[int, ...], now: float) -> tuple[int, list[Seg]]:
        self.expire(now)
        self.count("queries")
        self.count("queried_tokens", len(tokens))
        n = self.stored_len(ns, tokens, len(tokens) - 1)
        segs = self.path_segs(ns, tokens, n)
        for seg in segs:
            seg.last = now
        self.count("hits", n > 0)
        self.count("hit_tokens", n)
        return n, segs

    def insert(self, ns: str, tokens: tuple[int, ...], now: float) -> int:
        self.expire(now)
        n = len(tokens)
        start = self.stored_len(ns, tokens, n)
        path = self.path_segs(ns, tokens, start)
        if start == n:
            for seg in path:
                seg.last = now
            return 0
        cut = path[-1] if path and len(path[-1].path) > start else None
        # A segment the new path leaves midway is split first: its lower half (`cut` keeps
        # its id and age) is then a sibling branch, evictable like any other leaf; only
        # the upper half is on the path the insert locks.
        upper = self.split(cut, start, now) if cut else None
        tmp = self.new_id()  # the insert locks its own path while it makes room
        self.handles[tmp] = {s.id for s in self.path_segs(ns, tokens, start)}
        self.locks.append(tmp)
        self.evict(self.bytes() + self.nbytes(n - start) - self.max_bytes)
        self.locks.remove(tmp)
        room = self.max_bytes - self.bytes()
        stored = max((m for m in range(n - start + 1) if self.nbytes(m) <= room), default=0)
        event("insert: " + ("all" if stored == n - start else "some" if stored else "none"))
        if stored == 0:
            if cut is not None and upper is not None and cut.id in self.segs:
                event("split undone")  # the lower half is pinned: a split is for a new leaf
                self.unsplit(upper, cut)
            elif upper is not None:  # the lower half went: the upper one stays, used now
                event("split kept, nothing stored")
                for seg in self.path_segs(ns, tokens, start):
                    seg.last = now
            return 0
        if cut is not None:
            event(f"split, overhead {self.overhead}")
            if cut.id not in self.segs:
                event("split, sibling evicted")
        leaf = Seg(self.new_id(), ns, tokens[: start + stored], start, now, self.nbytes(stored))
        self.segs[leaf.id] = leaf
        for seg in self.path_segs(ns, tokens, start + stored):
            seg.last = now
        self.count("inserted_tokens", stored)
        return stored

    def split(self, cut: Seg, start: int, now: float) -> Seg:
        """Cut `cut` at `start`; it keeps the lower half; return the new upper half."""
        upper = Seg(self.new_id(), cut.ns, cut.path[:start], cut.start, now, 0)
        upper.nbytes = self.nbytes(start - cut.start)
        cut.start = start
        cut.nbytes = self.nbytes(len(cut.path) - start)
        self.segs[upper.id] = upper
        for ids in self.handles.values():
            if cut.id in ids:
                ids.add(upper.id)
        return upper

    def unsplit(self, upper: Seg, cut: Seg) -> None:
        """Undo `split`: `cut` holds its whole tail again."""
        del self.segs[upper.id]
        for ids in self.handles.values():
            ids.discard(upper.id)
        cut.start = upper.start
        cut.nbytes = self.nbytes(len(cut.path) - cut.start)

    def flush(self, ns: str | None) -> int:
        victims = [
            s for s in self.segs.values() if not self.lock_count(s) and (ns is None or s.ns == ns)
        ]
        return self.remove(victims, "flushed")

    def bytes(self) -> int:
        return sum(s.nbytes for s in self.segs.values())


class RadixMachine(RuleBasedStateMachine):
    matches = Bundle("matches")

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.locked: list[tuple[Match, int]] = []
        self.prompts: list[tuple[str, tuple[int, ...]]] = []
        self.hooked: list[Evicted] | None = None

    def on_evict(self, record: Evicted) -> None:
        assert not self.cache._mutex.locked()  # NOTE: the hook may call back into the tree
        assert self.hooked is not None
        self.hooked.append(record)

    def clock(self) -> float:
        return self.now

    def tick(self) -> float:
        # a distinct time per operation, so the least recently used leaf is unique
        self.now += 1
        return self.now

    @initialize(
        max_bytes=st.integers(0, 160),
        ttl_s=st.none() | st.integers(3, 40).map(float),
        bytes_per_token=st.integers(1, 4),
        overhead=st.sampled_from([0, 1, 5]),
        n_warm=st.integers(0, 8),
        hook=st.booleans(),
        data=st.data(),
    )
    def setup(
        self,
        max_bytes: int,
        ttl_s: float | None,
        bytes_per_token: int,
        overhead: int,
        n_warm: int,
        hook: bool,
        data: st.DataObject,
    ) -> None:
        self.hooked = [] if hook else None
        on_evict = self.on_evict if hook else None
        self.cache = RadixCache(max_bytes, ttl_s=ttl_s, clock=self.clock, on_evict=on_evict)
        self.model = Model(max_bytes, ttl_s, bytes_per_token, overhead)
        for _ in range(n_warm):  # most runs are short: start them with a populated tree
            self.insert(data)

    def span(self, tokens: tuple[int, ...]) -> FakeSpan:
        return span(tokens, self.model.bytes_per_token, self.model.overhead)

    def draw_prompt(self, data: st.DataObject) -> tuple[str, tuple[int, ...]]:
        """A fresh prompt, or (mostly) one that shares a prefix with an earlier prompt."""
        if self.prompts and data.draw(st.integers(0, 3), label="derived") > 0:
            ns, base = data.draw(st.sampled_from(self.prompts))
            keep = data.draw(st.integers(0, len(base)))
            tail = data.draw(st.lists(st.integers(0, 2), max_size=5))
            prompt = ns, base[:keep] + tuple(tail)
        else:
            prompt = data.draw(st.sampled_from(NAMESPACES)), tuple(data.draw(token_lists))
        self.prompts.append(prompt)
        return prompt

    @rule(data=st.data())
    def insert(self, data: st.DataObject) -> None:
        ns, t = self.draw_prompt(data)
        now = self.tick()
        assert self.cache.insert(RadixKey(ns, t), self.span(t)) == self.model.insert(ns, t, now)

    @rule(target=matches, data=st.data())
    def match(self, data: st.DataObject) -> tuple[Match, int]:
        ns, t = self.draw_prompt(data)
        now = self.tick()
        got = self.cache.match(RadixKey(ns, t))
        n, segs = self.model.match(ns, t, now)
        assert got.n_cached == n
        assert covered(got)[:n] == t[:n]
        spans = [s.tokens for s in got.spans if isinstance(s, FakeSpan)]
        assert spans == [seg.path[seg.start :] for seg in segs]
        handle = self.model.new_id()
        self.model.handles[handle] = {seg.id for seg in segs}
        return got, handle

    @rule(m=matches)
    def lock(self, m: tuple[Match, int]) -> None:
        if not self.model.handles[m[1]] <= self.model.segs.keys():
            event("lock: partly evicted path")
        self.cache.lock(m[0])
        self.model.locks.append(m[1])
        self.locked.append(m)

    @precondition(lambda self: self.locked)
    @rule(data=st.data())
    def unlock(self, data: st.DataObject) -> None:
        m = self.locked.pop(data.draw(st.integers(0, len(self.locked) - 1)))
        self.cache.unlock(m[0])
        self.model.locks.remove(m[1])

    @rule(data=st.data(), m=consumes(matches))
    def request(self, data: st.DataObject, m: tuple[Match, int]) -> None:
        """Like the engine: hold an (older) match while inserting."""
        with self.cache.hold(m[0]):
            self.model.locks.append(m[1])
            self.insert(data)
            self.model.locks.remove(m[1])

    @rule(dt=st.integers(1, 30))
    def advance_clock(self, dt: int) -> None:
        self.now += dt

    @rule(n_bytes=st.integers(0, 60))
    def evict(self, n_bytes: int) -> None:
        self.tick()
        assert self.cache.evict(n_bytes) == self.model.evict(n_bytes)

    @rule()
    def evict_expired(self) -> None:
        now = self.tick()
        assert self.cache.evict_expired() == self.model.expire(now)

    @rule(ns=st.none() | st.sampled_from(NAMESPACES))
    def flush(self, ns: str | None) -> None:
        self.tick()
        assert self.cache.flush(ns) == self.model.flush(ns)

    @invariant()
    def agrees_with_model(self) -> None:
        if not hasattr(self, "cache"):
            return
        self.cache._check_invariants()
        model, c = self.model, self.model.counters
        stats = self.cache.stats
        assert stats.bytes == model.bytes() <= stats.max_bytes
        assert stats.nodes == len(model.segs)
        assert stats.tokens == sum(len(s.path) - s.start for s in model.segs.values())
        locked = [s for s in model.segs.values() if model.lock_count(s)]
        assert stats.locked_bytes == sum(s.nbytes for s in locked)
        expected = {
            "queries": c.get("queries", 0),
            "hits": c.get("hits", 0),
            "queried_tokens": c.get("queried_tokens", 0),
            "hit_tokens": c.get("hit_tokens", 0),
            "inserted_tokens": c.get("inserted_tokens", 0),
            "evicted_tokens": c.get("evicted_tokens", 0) + c.get("expired_tokens", 0),
            "expired_tokens": c.get("expired_tokens", 0),
            "flushed_tokens": c.get("flushed_tokens", 0),
            "evictions": c.get("evictions", 0),
        }
        assert {name: getattr(stats, name) for name in expected} == expected
        by_ns: dict[str, int] = {}
        for s in model.segs.values():
            by_ns[s.ns] = by_ns.get(s.ns, 0) + len(s.path) - s.start
        assert self.cache.tokens_by_namespace() == by_ns
        assert stats.namespaces == len(by_ns)

    @invariant()
    def hook_saw_the_budget_evictions(self) -> None:
        if not hasattr(self, "cache"):
            return
        expected, self.model.evicted = self.model.evicted, []
        if self.hooked is None:
            return
        got, self.hooked = self.hooked, []
        if got:
            event("on_evict called")
        assert sorted((r.namespace, r.tokens, r.start) for r in got) == sorted(expected)
        for record in got:
            assert isinstance(record.span, FakeSpan)
            assert record.span.tokens == record.tokens[record.start :]
            prefix = [t for s in record.prefix_spans if isinstance(s, FakeSpan) for t in s.tokens]
            assert tuple(prefix) == record.tokens[: record.start]


RadixMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_radix_cache_matches_the_model = RadixMachine.TestCase
