"""Token-prefix radix cache: reuse the KV of prompt prefixes across requests (tier 2).

A request whose prompt starts with tokens another request already computed can skip
their prefill. The cache is a radix tree over token ids: each node holds a run of
tokens (its edge label) and an opaque `KVSpan` with their keys and values; a path from
a namespace's root spells a token prefix, and the spans along it, concatenated, are
that prefix's KV. The tree never looks inside a span: it only measures (`len`,
`nbytes`) and cuts (`slice`) them, so it is equally happy with torch tensors, numpy
arrays or the tuples the tests use.

Nodes are evicted leaf-first in LRU order under a byte budget, and optionally after a
TTL; paths that running requests use are locked and never evicted. An optional
`on_evict` callback sees every node the byte budget evicts (not the TTL's or a flush's),
so that a second tier (`prefix.offload.DiskTier`) can keep what memory had to drop.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["CountSpan", "Evicted", "KVSpan", "Match", "RadixCache", "RadixKey", "RadixStats"]

logger = logging.getLogger(__name__)


@runtime_checkable
class KVSpan(Protocol):
    """Opaque KV for a contiguous run of tokens. The tree never looks inside."""

    def __len__(self) -> int:
        """Number of tokens covered."""
        ...

    @property
    def nbytes(self) -> int:
        """Bytes held, counted against the cache's budget."""
        ...

    def slice(self, start: int, stop: int) -> KVSpan:
        """Tokens `[start, stop)` as an independent copy that owns its memory."""
        ...


class CountSpan:
    """A span with no data, only a length: for trees that track *which* prefixes exist.

    A router remembering what it sent where, or a benchmark isolating the tree's own cost,
    needs the tree's matching and eviction but no tensors; ``nbytes`` is
    ``len * bytes_per_token`` so the byte budget still means something.
    """

    __slots__ = ("bytes_per_token", "n")

    def __init__(self, n: int, bytes_per_token: int = 1) -> None:
        self.n = n
        self.bytes_per_token = bytes_per_token

    def __len__(self) -> int:
        return self.n

    @property
    def nbytes(self) -> int:
        return self.n * self.bytes_per_token

    def slice(self, start: int, stop: int) -> CountSpan:
        return CountSpan(stop - start, self.bytes_per_token)


@dataclass(frozen=True, slots=True)
class RadixKey:
    """What a prefix is looked up by: token ids inside a namespace.

    The namespace is built by the caller from everything that makes KV incompatible or
    private (model, adapter, tenant salt), e.g. ``"smollm2|tenant:acme"``. Different
    namespaces never share nodes. `tokens` is copied into a tuple of ints, so the key
    is immutable and later edits to the caller's list do not leak into the cache
    (numpy arrays and torch tensors go through `.tolist()`: their elements would
    compare slowly, and 0-d tensors hash by identity).
    """

    namespace: str
    tokens: Sequence[int]

    def __post_init__(self) -> None:
        tokens = self.tokens
        if type(tokens) is not tuple:
            tolist = getattr(tokens, "tolist", None)
            object.__setattr__(self, "tokens", tuple(tolist() if tolist else tokens))


@dataclass(frozen=True, slots=True)
class Match:
    """The cached prefix of a prompt.

    `spans` are in root-to-leaf order; their concatenation covers at least `n_cached`
    tokens (the last one may run past the prompt), and the caller uses the first
    `n_cached`. The spans stay valid even if the tree later evicts or splits their
    nodes; `RadixCache.lock` keeps the tree from evicting them meanwhile.
    """

    n_cached: int
    spans: tuple[KVSpan, ...]
    _node: _Node | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Evicted:
    """A node the byte budget evicted, as `RadixCache`'s `on_evict` callback receives it.

    The node held ``tokens[start:]``; ``tokens`` is the whole path from its namespace's
    root, so the node can be looked up again by prefix. ``prefix_spans`` are the spans of
    its ancestors at eviction time (root first, covering ``tokens[:start]``): a second
    tier that lacks that prefix can store it along with the node, so that what it holds is
    always a whole prefix from the root (they may be evicted in the same batch, after
    this node). The spans are the tree's own, immutable ones: read them, never write.
    """

    namespace: str
    tokens: tuple[int, ...]
    start: int
    span: KVSpan
    prefix_spans: tuple[KVSpan, ...]


@dataclass(frozen=True, slots=True)
class RadixStats:
    """A snapshot of the cache's counters (cumulative) and gauges (current).

    ``evicted_tokens`` counts tokens dropped by the byte budget or the TTL (the TTL's
    share is also in ``expired_tokens``); ``flush`` is counted apart, so
    ``tokens == inserted_tokens - evicted_tokens - flushed_tokens`` always holds.
    """

    queries: int  # match() calls
    hits: int  # match() calls that served at least one token
    queried_tokens: int  # prompt tokens passed to match()
    hit_tokens: int  # of which served from cache
    inserted_tokens: int
    evicted_tokens: int
    expired_tokens: int
    flushed_tokens: int
    evictions: int  # nodes dropped by budget or TTL
    nodes: int
    tokens: int
    bytes: int
    max_bytes: int
    locked_bytes: int
    namespaces: int

    @property
    def hit_rate(self) -> float:
        """Share of queried prompt tokens that were served from cache."""
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0


class RadixCache:
    """A byte-budgeted radix tree from token prefixes to their KV, shared by requests.

    Usage (one request of an engine)::

        cache = RadixCache(max_bytes=2 << 30, ttl_s=3600.0)
        key = RadixKey("smollm2|tenant:acme", prompt_ids)
        m = cache.match(key)              # m.n_cached <= len(prompt_ids) - 1
        with cache.hold(m):               # the matched path cannot be evicted meanwhile
            past = concat(m.spans)[: m.n_cached]
            kv = prefill(prompt_ids[m.n_cached :], past)   # positions from m.n_cached
            ...decode...
        cache.insert(RadixKey(key.namespace, prompt_ids), kv)   # len(kv) == len(ids)

    `insert` stores only the tokens the tree lacks, copying them out of `kv` with
    `kv.slice`, and splits a node (also via `slice`) where the new path leaves it.
    When the budget is exceeded, the least recently used unlocked leaves go first (a
    parent becomes a leaf when its last child goes). With `ttl_s`, nodes unused for
    that many seconds expire; this is checked lazily in `match`/`insert` and on
    `evict_expired`. All methods are thread-safe (one internal lock).

    ``on_evict`` is called once per node evicted by the byte budget (in `insert` or
    `evict`; TTL expiry and `flush` do not call it), leaf first, on the evicting thread,
    after the tree's lock is released: it may call back into the tree. It should be
    quick (hand the work to another thread); an exception it raises is logged, not
    propagated, since the eviction has already happened.
    """

    def __init__(
        self,
        max_bytes: int,
        *,
        ttl_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_evict: Callable[[Evicted], object] | None = None,
    ) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0 or None, got {ttl_s}")
        self._max_bytes = max_bytes
        self._ttl_s = ttl_s
        self._clock = clock
        self._on_evict = on_evict
        # Filled under the lock by _evict_lru, handed to on_evict after it (see _deliver).
        self._evicted: list[Evicted] = []
        self._mutex = threading.Lock()
        self._roots: dict[str, _Node] = {}
        # NOTE: every non-root node, least recently used first. Touching a node also
        # touches its ancestors, after it, with the same monotonic time; so the order is
        # sorted by last_access AND every node comes before all its ancestors. Hence the
        # first unlocked node is the LRU evictable leaf, and one forward pass yields
        # victims leaf-first (_evict_lru, _expire and flush rely on this). The one exception,
        # a split's upper half inside `insert`, is locked until it is touched (see _split).
        self._lru: OrderedDict[_Node, None] = OrderedDict()
        self._bytes = 0
        self._tokens = 0
        self._locked_bytes = 0
        self._ns_tokens: dict[str, int] = {}
        self._queries = self._hits = self._queried_tokens = self._hit_tokens = 0
        self._inserted_tokens = self._evicted_tokens = self._expired_tokens = 0
        self._flushed_tokens = self._evictions = 0

    # -- public -------------------------------------------------------------------------

    def match(self, key: RadixKey, *, count: bool = True) -> Match:
        """Return the longest cached prefix of `key.tokens` (at most n - 1 tokens).

        Refreshes the LRU time of the matched path and counts queried/hit tokens (unless
        not `count`: a lookup that is no request's, e.g. a preempted one taking its own
        KV back, which would inflate the hit rate).
        """
        tokens = _as_tuple(key.tokens)
        # NOTE: at most n - 1 prompt tokens are served from cache, so the model always
        # computes the last prompt token and has its logits to sample from.
        limit = len(tokens) - 1
        with self._mutex:
            now = self._clock()
            self._expire(now)
            if count:
                self._queries += 1
                self._queried_tokens += len(tokens)
            root = self._roots.get(key.namespace)
            if root is None or limit <= 0:
                return _MISS
            path, n_matched, _ = _walk(root, tokens, limit)
            if not path:
                return _MISS
            n_cached = min(n_matched, limit)
            self._touch(path[-1], now)
            if count:
                self._hits += 1
                self._hit_tokens += n_cached
            return Match(n_cached, tuple(node.value for node in path), path[-1])

    def cached_len(self, key: RadixKey) -> int:
        """How many leading tokens of `key.tokens` the tree holds now, all of them possibly
        (a look only: no LRU refresh, no counters; it may change the moment after)."""
        tokens = _as_tuple(key.tokens)
        with self._mutex:
            root = self._roots.get(key.namespace)
            if root is None:
                return 0
            _, n_matched, _ = _walk(root, tokens, len(tokens))
            return min(n_matched, len(tokens))

    def insert(self, key: RadixKey, kv: KVSpan) -> int:
        """Store the KV of `key.tokens` that the tree lacks; return how many tokens were new.

        `kv` covers exactly `key.tokens`. New tokens are copied out with `kv.slice`, so
        the caller keeps ownership of `kv`. Evicts to stay within `max_bytes`; if the new
        tokens cannot fit even then, stores the longest prefix of them that fits (maybe
        none). Returns 0 when nothing was new or nothing fitted.
        """
        tokens = _as_tuple(key.tokens)
        n = len(tokens)
        if len(kv) != n:
            raise ValueError(f"kv covers {len(kv)} tokens but the key has {n}")
        with self._mutex:
            try:
                stored = self._insert(key.namespace, tokens, kv)
            finally:
                evicted = self._take_evicted()
        self._deliver(evicted)
        return stored

    def lock(self, match: Match) -> None:
        """Pin the matched path: it is not evicted, expired or flushed until `unlock`.

        Locks are counted, so several requests may hold the same path. A path evicted
        between `match` and `lock` stays usable through `match.spans`; the lock then pins
        whatever part of it is still in the tree.
        """
        if match._node is not None:
            with self._mutex:
                self._lock_path(match._node)

    def unlock(self, match: Match) -> None:
        """Release one `lock` of the matched path."""
        if match._node is not None:
            with self._mutex:
                if match._node.lock_ref <= 0:
                    raise RuntimeError("unlock() without a matching lock()")
                self._unlock_path(match._node)

    def hold(self, match: Match) -> AbstractContextManager[Match]:
        """`lock` the matched path for the duration of a ``with`` block."""
        return self._hold(match)

    def evict(self, n_bytes: int, *, keep: Callable[[KVSpan], int] | None = None) -> int:
        """Evict unlocked leaves, least recently used first, until `n_bytes` are freed.

        Returns the bytes freed: whole nodes go, so it may exceed `n_bytes`; it is less
        when everything evictable is gone. `keep(span)`: how many of a span's leading
        tokens to keep (e.g. those whose memory others hold too, so evicting them frees
        nothing): all of them, the node and its ancestors stay; some, the node is cut there
        and only its tail goes.
        """
        with self._mutex:
            freed = self._evict_lru(n_bytes, keep)
            evicted = self._take_evicted()
        self._deliver(evicted)
        return freed

    def evict_expired(self) -> int:
        """Drop unlocked nodes not used for `ttl_s` seconds; return the bytes freed."""
        with self._mutex:
            return self._expire(self._clock())

    def flush(self, namespace: str | None = None) -> int:
        """Drop every unlocked node (of one namespace, if given); return the bytes freed."""
        with self._mutex:
            victims = [
                node
                for node in self._lru
                if node.lock_ref == 0 and (namespace is None or node.namespace == namespace)
            ]
            freed, n_tokens = self._remove(victims)
            self._flushed_tokens += n_tokens
            return freed

    @property
    def stats(self) -> RadixStats:
        """A consistent snapshot of counters and gauges."""
        with self._mutex:
            return RadixStats(
                queries=self._queries,
                hits=self._hits,
                queried_tokens=self._queried_tokens,
                hit_tokens=self._hit_tokens,
                inserted_tokens=self._inserted_tokens,
                evicted_tokens=self._evicted_tokens,
                expired_tokens=self._expired_tokens,
                flushed_tokens=self._flushed_tokens,
                evictions=self._evictions,
                nodes=len(self._lru),
                tokens=self._tokens,
                bytes=self._bytes,
                max_bytes=self._max_bytes,
                locked_bytes=self._locked_bytes,
                namespaces=len(self._ns_tokens),
            )

    def tokens_by_namespace(self) -> dict[str, int]:
        """Tokens currently stored per namespace (namespaces with none are absent)."""
        with self._mutex:
            return dict(self._ns_tokens)

    # -- helpers ------------------------------------------------------------------------

    def _insert(self, namespace: str, tokens: tuple[int, ...], kv: KVSpan) -> int:
        """The body of `insert`, under the lock."""
        n = len(tokens)
        now = self._clock()
        self._expire(now)
        if n == 0:
            return 0
        root = self._roots.get(namespace)
        if root is None:
            root = self._roots[namespace] = _Node(namespace, (), _NO_SPAN, None, now)
        path, n_matched, cut = _walk(root, tokens, n)
        if n_matched == n:  # already cached (possibly ending inside a node)
            self._touch(path[-1], now)
            return 0
        # The new tokens hang below `parent`: the last node of the path or, when the
        # path leaves that node midway, its upper half. Split first: the lower half is
        # then a sibling branch, evictable while making room like any other unlocked
        # node, and the lock below covers only the path the new leaf hangs from.
        anchor = path[-1] if path else root
        whole = anchor.value
        parent = self._split(anchor, cut, now) if cut else anchor
        stored = 0
        self._lock_path(parent)
        try:
            stored = self._store(parent, tokens, n_matched, kv, now)
        finally:
            # NOTE: also when the copy raised (a CUDA out-of-memory in kv.slice): a split left
            # as is would keep the upper half after its parent in the LRU order, and a later
            # eviction would reach the parent first.
            self._unlock_path(parent)
            if cut and not stored:
                if parent.children:  # the lower half is pinned: a split is for a new leaf
                    self._unsplit(parent, whole)
                else:  # the lower half was evicted: the upper half stays, as a leaf
                    self._touch(parent, now)
        return stored

    @contextmanager
    def _hold(self, match: Match) -> Iterator[Match]:
        self.lock(match)
        try:
            yield match
        finally:
            self.unlock(match)

    def _store(
        self, parent: _Node, tokens: tuple[int, ...], start: int, kv: KVSpan, now: float
    ) -> int:
        """Make room for `tokens[start:]` and hang what fits below `parent`; return its length."""
        span = self._make_room(kv, start)
        if span is None:
            return 0
        leaf = _Node(parent.namespace, tokens[start : start + len(span)], span, parent, now)
        parent.children[leaf.key[0]] = leaf
        self._lru[leaf] = None
        self._account(leaf, +1)
        self._inserted_tokens += len(leaf.key)
        self._touch(leaf, now)
        return len(leaf.key)

    def _make_room(self, kv: KVSpan, start: int) -> KVSpan | None:
        """Evict for `kv[start:]`; return a copy of it, or of its longest prefix that fits.

        Returns None when not even one token fits. NOTE: `kv` is copied only once the
        copy is known to fit by its estimated size (`kv`'s bytes per token), so a full
        or tight budget costs no copy. The estimate is exact when nbytes is proportional
        to tokens (tensors) and never above the real size when nbytes is affine (a
        per-span overhead); then the real size decides, making more room or fitting
        fewer tokens, and the victims are those one eviction for the real size picks.
        """
        n = len(kv) - start
        nbytes = _estimate(kv, n)
        span: KVSpan | None = None  # kv[start : start + n] once copied
        while n > 0:
            self._evict_lru(self._bytes + nbytes - self._max_bytes)  # no-op if it fits
            room = self._max_bytes - self._bytes
            if nbytes > room:  # everything evictable is gone: fit fewer tokens
                # Guess from the bytes per token, then step down; with nbytes affine in
                # tokens the guess never undershoots, so this finds the longest fit.
                n = min(n - 1, n * room // nbytes) if room > 0 else 0
                span, nbytes = None, _estimate(kv, n)
            elif span is None:
                span = kv.slice(start, start + n)
                nbytes = span.nbytes  # the real size: check it on the next pass
            else:
                return span
        return None

    def _split(self, node: _Node, cut: int, now: float) -> _Node:
        """Cut `node` after `cut` tokens (copying both halves); return the new upper half.

        The split may add bytes (a per-span overhead) beyond the budget: the insert's
        `_make_room` counts them, and `_unsplit` takes them back if nothing fits.
        """
        assert node.parent is not None
        # NOTE: `node` keeps its identity as the lower half, because a Match (and its lock)
        # holds the deepest node of its path and walks up from there; the new upper half
        # inherits lock_ref since every lock through the lower half passes through it.
        lower = node.value.slice(cut, len(node.key))
        upper = _Node(node.namespace, node.key[:cut], node.value.slice(0, cut), node.parent, now)
        upper.lock_ref = node.lock_ref
        node.parent.children[node.key[0]] = upper
        old_nbytes = node.nbytes
        node.key, node.value, node.nbytes = node.key[cut:], lower, lower.nbytes
        node.parent = upper
        upper.children[node.key[0]] = node
        self._resize(node, upper.nbytes + node.nbytes - old_nbytes)
        # NOTE: the lower half keeps its place (and age) in the LRU order; the upper half
        # goes last, after its ancestors, until the caller touches it or `_unsplit` drops
        # it. Meanwhile the insert's lock keeps eviction away from both.
        self._lru[upper] = None
        return upper

    def _unsplit(self, upper: _Node, whole: KVSpan) -> None:
        """Undo `_split`: merge `upper` back into its only child, whose value was `whole`."""
        (node,) = upper.children.values()
        assert upper.parent is not None and upper.lock_ref == node.lock_ref
        upper.parent.children[upper.key[0]] = node
        node.parent = upper.parent
        delta = whole.nbytes - upper.nbytes - node.nbytes
        node.key, node.value, node.nbytes = upper.key + node.key, whole, whole.nbytes
        self._resize(node, delta)
        del self._lru[upper]
        upper.value, upper.nbytes = _NO_SPAN, 0

    def _touch(self, node: _Node, now: float) -> None:
        """Mark `node` and its ancestors used at `now` (leaf first: see the NOTE on _lru)."""
        lru = self._lru
        while node.parent is not None:
            node.last_access = now
            lru.move_to_end(node)
            node = node.parent

    def _lock_path(self, node: _Node | None) -> None:
        while node is not None:
            if node.lock_ref == 0:
                self._locked_bytes += node.nbytes  # 0 for roots and removed nodes
            node.lock_ref += 1
            node = node.parent

    def _unlock_path(self, node: _Node | None) -> None:
        while node is not None:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._locked_bytes -= node.nbytes
                if node.parent is None and not node.children:
                    self._prune_root(node)  # emptied while a lock kept it
            node = node.parent

    def _evict_lru(self, n_bytes: int, keep: Callable[[KVSpan], int] | None = None) -> int:
        victims: dict[_Node, None] = {}
        cuts: list[tuple[_Node, int]] = []  # nodes whose tail only goes, and where
        freed = 0
        for node in self._lru:
            if freed >= n_bytes:
                break
            if node.lock_ref:
                continue
            if keep is not None:
                # NOTE: its children came first (LRU order): one that stays keeps it a parent
                if any(c not in victims for c in node.children.values()):
                    continue
                kept = min(keep(node.value), len(node.key))
                if kept == len(node.key):
                    continue
                if kept > 0:
                    cuts.append((node, kept))
                    freed += node.nbytes * (len(node.key) - kept) // len(node.key)
                    continue
            victims[node] = None
            freed += node.nbytes
        freed = self._drop(list(victims))
        if cuts:  # NOTE: once the victims are gone (its children among them), each is a leaf
            freed += self._drop([self._cut(node, kept) for node, kept in cuts])
        return freed

    def _drop(self, victims: list[_Node]) -> int:
        """Evict `victims` (leaf-first), recording them for `on_evict`; return bytes freed."""
        if self._on_evict is not None:
            # NOTE: recorded before _remove detaches them: each victim's path is read while
            # its ancestors still hold it (any of them evicted too come later in `victims`).
            self._evicted.extend(_evicted(node) for node in victims)
        freed, n_tokens = self._remove(victims)
        self._evicted_tokens += n_tokens
        self._evictions += len(victims)
        return freed

    def _cut(self, node: _Node, kept: int) -> _Node:
        """Split leaf `node` after `kept` tokens; return the lower half (to evict). The upper
        half stays, first in the LRU order (before its ancestors, as the order needs) with
        the oldest time in it (the order stays sorted by time for `_expire`)."""
        oldest = min(node.last_access, next(iter(self._lru)).last_access)
        upper = self._split(node, kept, oldest)
        self._lru.move_to_end(upper, last=False)
        return node

    def _take_evicted(self) -> list[Evicted]:
        """Hand over the evictions recorded under the lock (the caller holds it)."""
        if not self._evicted:
            return _NO_EVICTIONS
        evicted, self._evicted = self._evicted, []
        return evicted

    def _deliver(self, evicted: list[Evicted]) -> None:
        """Call `on_evict` for each eviction; NOTE: never under the lock (it may re-enter)."""
        on_evict = self._on_evict
        if on_evict is None:
            return
        for record in evicted:
            try:
                on_evict(record)
            except Exception:
                logger.exception("prefix: on_evict failed for %d tokens", len(record.span))

    def _expire(self, now: float) -> int:
        if self._ttl_s is None:
            return 0
        victims: list[_Node] = []
        for node in self._lru:
            if now - node.last_access < self._ttl_s:
                break  # sorted by last_access: the rest are fresher
            if node.lock_ref == 0:
                victims.append(node)
        freed, n_tokens = self._remove(victims)
        self._evicted_tokens += n_tokens
        self._expired_tokens += n_tokens
        self._evictions += len(victims)
        return freed

    def _remove(self, victims: Iterable[_Node]) -> tuple[int, int]:
        """Detach `victims` (in LRU order); return (bytes, tokens) freed."""
        freed = n_tokens = 0
        for node in victims:
            # NOTE: victims come in LRU order, where a node precedes its ancestors, and an
            # unlocked node has only unlocked descendants, which were therefore picked
            # first: each victim is a leaf by the time it goes.
            assert not node.children and node.lock_ref == 0 and node.parent is not None
            parent = node.parent
            del parent.children[node.key[0]]
            del self._lru[node]
            self._account(node, -1)
            freed += node.nbytes
            n_tokens += len(node.key)
            # Keep node.parent: a stale Match may still lock/unlock through it.
            node.value, node.nbytes = _NO_SPAN, 0
            if parent.parent is None and not parent.children:
                self._prune_root(parent)
        return freed, n_tokens

    def _prune_root(self, root: _Node) -> None:
        if root.lock_ref == 0 and self._roots.get(root.namespace) is root:
            del self._roots[root.namespace]

    def _account(self, node: _Node, sign: int) -> None:
        n = len(node.key)
        self._bytes += sign * node.nbytes
        self._tokens += sign * n
        ns_tokens = self._ns_tokens.get(node.namespace, 0) + sign * n
        if ns_tokens:
            self._ns_tokens[node.namespace] = ns_tokens
        else:
            self._ns_tokens.pop(node.namespace, None)

    def _resize(self, node: _Node, delta: int) -> None:
        """Account `delta` bytes gained by a split or merge around `node` (tokens unchanged)."""
        self._bytes += delta
        if node.lock_ref:  # the halves share their lock count
            self._locked_bytes += delta

    def _check_invariants(self) -> None:
        """Assert the tree's structural and accounting invariants (for tests; O(size))."""
        with self._mutex:
            nodes: list[_Node] = []
            stack = list(self._roots.values())
            while stack:
                node = stack.pop()
                assert sum(c.lock_ref for c in node.children.values()) <= node.lock_ref
                for first, child in node.children.items():
                    assert child.key and child.key[0] == first and child.parent is node
                    assert len(child.value) == len(child.key)
                    assert child.nbytes == child.value.nbytes
                    assert child.namespace == node.namespace
                    nodes.append(child)
                    stack.append(child)
            assert set(nodes) == set(self._lru) and len(nodes) == len(self._lru)
            seen: set[_Node] = set()
            last = float("-inf")
            for node in self._lru:  # sorted by time, every node before its ancestors
                assert node.last_access >= last and node not in seen
                last = node.last_access
                seen.add(node)
                assert node.parent is not None and node.parent not in seen
            assert self._bytes == sum(n.nbytes for n in nodes) <= self._max_bytes
            assert self._tokens == sum(len(n.key) for n in nodes)
            assert self._locked_bytes == sum(n.nbytes for n in nodes if n.lock_ref)
            for ns, root in self._roots.items():
                assert root.namespace == ns and (root.children or root.lock_ref)


class _Node:
    """A run of tokens (`key`) and their KV (`value`), below `parent`."""

    __slots__ = (
        "children",
        "key",
        "last_access",
        "lock_ref",
        "namespace",
        "nbytes",
        "parent",
        "value",
    )

    def __init__(
        self,
        namespace: str,
        key: tuple[int, ...],
        value: KVSpan,
        parent: _Node | None,
        now: float,
    ) -> None:
        self.namespace = namespace
        self.key = key
        self.value = value
        self.nbytes = value.nbytes  # cached so that accounting stays exact
        self.parent = parent
        # NOTE: keyed by first token; siblings never share it, since a shared first
        # token would have been one edge split at their divergence.
        self.children: dict[int, _Node] = {}
        self.last_access = now
        self.lock_ref = 0  # locks on paths through this node, ancestors included


class _NoSpan:
    """The value of roots and of removed nodes."""

    def __len__(self) -> int:
        return 0

    @property
    def nbytes(self) -> int:
        return 0

    def slice(self, start: int, stop: int) -> KVSpan:
        return self


_NO_SPAN = _NoSpan()
_MISS = Match(0, ())
_NO_EVICTIONS: list[Evicted] = []  # shared and never appended to: see _take_evicted


def _evicted(node: _Node) -> Evicted:
    """The `Evicted` record of `node`, read while it is still attached to the tree."""
    keys: list[tuple[int, ...]] = []
    spans: list[KVSpan] = []
    ancestor = node.parent
    while ancestor is not None and ancestor.parent is not None:  # stop below the root
        keys.append(ancestor.key)
        spans.append(ancestor.value)
        ancestor = ancestor.parent
    keys.reverse()
    spans.reverse()
    start = sum(len(key) for key in keys)
    tokens = tuple(itertools.chain.from_iterable(keys)) + node.key
    return Evicted(node.namespace, tokens, start, node.value, tuple(spans))


def _as_tuple(tokens: Sequence[int]) -> tuple[int, ...]:
    return tokens if type(tokens) is tuple else tuple(tokens)


def _walk(root: _Node, tokens: tuple[int, ...], limit: int) -> tuple[list[_Node], int, int]:
    """Follow `tokens` down from `root` while fewer than `limit` tokens have matched.

    Returns ``(path, n_matched, cut)``: the nodes entered (root excluded), the tokens
    matched along them, and, when the last node matched only partly, how many of its
    tokens matched (else 0). `n_matched` may exceed `limit` by the rest of the last node.
    """
    path: list[_Node] = []
    node, pos = root, 0
    while pos < limit:
        child = node.children.get(tokens[pos])
        if child is None:
            break
        path.append(child)
        end = pos + len(child.key)
        segment = tokens[pos:end]  # shorter than the key if tokens end inside it
        if segment == child.key:
            node, pos = child, end
            continue
        cut = _common_prefix_len(segment, child.key)
        return path, pos + cut, cut
    return path, pos, 0


def _common_prefix_len(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Length of the common prefix, by bisection over C-speed slice comparisons."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # invariant: a[:lo] == b[:lo] and the common prefix is <= hi
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _estimate(kv: KVSpan, n: int) -> int:
    """Bytes of `n` of `kv`'s tokens at its bytes per token, rounded up, without a copy."""
    return -(-kv.nbytes * n // len(kv))
