"""A paged KV pool that running requests and the prefix tree share (vLLM's PagedAttention
memory layout, SGLang's radix tree owning the pages).

All the KV of one engine lives in two preallocated tensors, split into pages of
``page_size`` tokens. Three kinds of objects reference pages, each reference counted:

* a running request's :class:`PagedCache`: its *page table* (page ``i`` holds positions
  ``i·P … i·P+P-1``), the pages it reads and writes;
* a :class:`PagedKV`, the ``prefix.KVSpan`` the radix tree stores: page references, no data
  of its own. ``slice`` (the tree's insert and split) shares pages, it never copies, so a
  request's KV goes into the tree with no copy, and a prefix hit maps the tree's pages into
  the new request's table with no copy either;
* nothing else: a page nobody references is on the free list.

A page is written only by the one page table that holds its only reference. A request
about to write into a page that someone else also references (the partly filled last page
of a prefix hit, or of its own KV once the tree shares it) copies that page first
(copy-on-write): the only copy a prefix hit ever costs is of that one partial page.

A span may start inside its first page (``offset``): a node split at any token shares both
halves' pages. The slots of that first page before ``offset`` hold the KV of the same path's
earlier tokens (every page was written by a request whose tokens are the path), so mapping
the span's first page over the previous span's last page changes no value.

When the pool has no free page, :attr:`PagePool.reclaim` (the engine: evict from the prefix
tree, least recently used leaves first) is asked for room; pages still referenced by a
running request are not freed by that. If nothing can be freed, :class:`PoolExhausted` is
raised and the scheduler preempts its youngest running request. A copy-on-write that finds
no page asks :attr:`PagePool.unshare` (the engine: evict the tree's tokens on that page)
first: when only the tree shared the page, the request then writes into it in place.

Pages hold KV in ``kv_dtype`` (the pool's ``dtype``): the model's dtype, a half-precision
one (converted on write, back on read) or int8 (``localmodel.kvquant``'s rules): V is
quantised per token as it is written; K is quantised per channel over each page (a
[layer, head, page, channel] float16 scale). Attention reads every page dequantised to the
model's dtype at every step (``read_layer``), so the pool holds ~3.7× (int8) or 2× (half)
the tokens of float32 in the same bytes, scales counted.

Per-channel K scales over a page that fills one token at a time: the partly filled last
page of a running request keeps its K in full precision in the request's own *tail*
(``[n_layers, n_kv_heads, page_size, head_dim]``, one page per request), which attention
reads as is; the page is quantised when it fills, in one go over its ``page_size`` tokens.
So a page that one request filled holds exactly ``quantize_keys`` of its tokens (one
rounding, the same bits as quantising the block at once). When another holder needs a
partly filled page (the tree inserting it, a preemption), it is *sealed* first: its tokens
so far quantised with scales over those tokens. Whoever later writes into a sealed page
starts its tail from the page's dequantised tokens; re-quantising those gives back the
same bits wherever the new tokens do not widen a channel's range (``kvquant``'s NOTE), so
a token is rounded again only in a channel that a later token of its page exceeded.
The request that sealed its own page keeps its full-precision tail.

Why a tail rather than re-quantising the page whenever a token widens a channel's range:
that would round a page's early tokens again and again as its scale grows, and make every
decode step quantise the page; the tail costs one page of floats per *running* request
(SmolLM2: 368 KB), nothing per cached prefix, and its writer's attention reads its newest
tokens unrounded. V needs no tail: per-token scales depend on the token alone.

Releases happen when a span object is dropped (``__del__``: the tree drops a node's span
when it evicts, expires, flushes or splits it; a match's spans when the request has mapped
them), so spans still held elsewhere (a ``prefix.Match``, an eviction record queued for the
disk tier) keep their pages valid, as the ``prefix.Match`` contract requires.

Example::

    pool = PagePool.of_bytes(layout, 512 << 20, page_size=16, dtype=torch.int8)
    cache = PagedCache(pool, capacity=len(prompt) + max_tokens, namespace=ns)
    cache.map_prefix(match.spans, match.n_cached, prompt)      # shared pages, no copy
    cache.reserve(len(suffix))                                  # pages for the new tokens
    model(input_ids=suffix, cache=cache, ...)                   # writes into the pages
    tree.insert(key, cache.view(cache.length))                  # the tree shares the pages
    cache.release()                                             # the request's references
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from localmodel.kv import KVLayout, StoredKV, TensorKV
from localmodel.kvquant import SCALE_DTYPE, Int8KV, dequantize, quantize_keys, quantize_values

__all__ = ["PagePool", "PagedCache", "PagedKV", "PoolExhausted", "PoolStats"]


class PoolExhausted(RuntimeError):
    """No free page, even after reclaiming what only the prefix tree referenced."""


@dataclass(frozen=True)
class PoolStats:
    """Pages of a :class:`PagePool`: ``used`` = referenced; of those, ``cached`` are referenced
    only by prefix spans (the tree), the rest by running requests (maybe shared)."""

    pages: int
    free: int
    used: int
    cached: int
    page_size: int
    page_bytes: int
    preemptions: int
    copied_pages: int  # copy-on-write copies of a shared page
    dtype: str = "float32"  # what pages hold (kv_dtype): float32, bfloat16, float16, int8


class PagePool:
    """Preallocated K and V pages ``[n_layers, n_kv_heads, n_pages, page_size, head_dim]``
    in ``dtype`` (default: the model's); int8 pages also have float16 scales, K's per page
    and channel ``[n_layers, n_kv_heads, n_pages, head_dim]``, V's per token
    ``[n_layers, n_kv_heads, n_pages, page_size]``.

    Reference counts are kept per page, in total and for page tables alone (``cached`` pages
    are referenced by spans only). Thread-safe: spans may be dropped on any thread (the disk
    tier's writer drops the eviction records it wrote); one re-entrant lock, never held while
    calling out (so a span dropped inside the tree's lock cannot deadlock).
    """

    def __init__(
        self,
        layout: KVLayout,
        n_pages: int,
        page_size: int = 16,
        dtype: torch.dtype | None = None,
    ) -> None:
        if n_pages < 1 or page_size < 1:
            raise ValueError(
                f"PagePool: n_pages and page_size must be >= 1 ({n_pages}, {page_size})"
            )
        self.layout = layout
        self.n_pages = n_pages
        self.page_size = page_size
        self.dtype = dtype or layout.dtype
        self.quantized = self.dtype == torch.int8
        L, H, D, device = layout.n_layers, layout.n_kv_heads, layout.head_dim, layout.device
        shape = (L, H, n_pages, page_size, D)
        # NOTE: torch.empty: on a CPU the OS maps memory as pages are first written
        self.keys = torch.empty(shape, dtype=self.dtype, device=device)
        self.values = torch.empty(shape, dtype=self.dtype, device=device)
        self.key_scales: torch.Tensor | None = None  # int8: [L, H, n_pages, D]
        self.value_scales: torch.Tensor | None = None  # int8: [L, H, n_pages, page_size]
        if self.quantized:
            # NOTE: zeros, not empty: a batched step pads shorter sequences with a slot whose
            # page may never have been sealed, and its K must dequantise finite (0 · q)
            self.key_scales = torch.zeros((L, H, n_pages, D), dtype=SCALE_DTYPE, device=device)
            self.value_scales = torch.empty(shape[:-1], dtype=SCALE_DTYPE, device=device)
        self.page_bytes = self.bytes_per_page(layout, page_size, self.dtype)
        #: what a token costs, its share of the page's K scales included (the tree counts it)
        self.bytes_per_token = -(-self.page_bytes // page_size)
        self._refs = [0] * n_pages
        self._table_refs = [0] * n_pages
        self._n_cached = 0  # pages with references from spans only
        self._free = list(range(n_pages - 1, -1, -1))  # pop() hands out low pages first
        self._lock = threading.RLock()
        #: called with a number of pages to free when too few are free (set by the engine)
        self.reclaim: Callable[[int], None] | None = None
        #: called with a table's shared, partly filled page when no page is free to copy it
        #: to: drop the spans' references to it if that can be done (set by the engine)
        self.unshare: Callable[[int], None] | None = None
        self.preemptions = 0
        self.copied_pages = 0

    @classmethod
    def of_bytes(
        cls,
        layout: KVLayout,
        n_bytes: int,
        page_size: int = 16,
        dtype: torch.dtype | None = None,
    ) -> PagePool:
        """A pool of as many pages as ``n_bytes`` holds (K and V, all layers, scales too)."""
        page_bytes = cls.bytes_per_page(layout, page_size, dtype or layout.dtype)
        return cls(layout, max(1, n_bytes // page_bytes), page_size, dtype)

    @staticmethod
    def bytes_per_page(layout: KVLayout, page_size: int, dtype: torch.dtype) -> int:
        """Bytes of one page, all layers: K and V, plus an int8 page's float16 scales."""
        heads = layout.n_layers * layout.n_kv_heads
        elements = heads * page_size * layout.head_dim  # of K, and as many of V
        itemsize = torch.empty((), dtype=dtype).element_size()
        if dtype != torch.int8:
            return 2 * elements * itemsize
        scale = torch.empty((), dtype=SCALE_DTYPE).element_size()
        return 2 * elements + scale * heads * (layout.head_dim + page_size)  # K + V scales

    @property
    def device(self) -> torch.device:
        return self.keys.device

    @property
    def free_pages(self) -> int:
        return len(self._free)

    @property
    def available_pages(self) -> int:
        """Free pages plus those only spans (the tree) hold: reclaimable by evicting it."""
        with self._lock:
            return len(self._free) + self._n_cached

    @property
    def stats(self) -> PoolStats:
        with self._lock:
            return PoolStats(
                pages=self.n_pages,
                free=len(self._free),
                used=self.n_pages - len(self._free),
                cached=self._n_cached,
                page_size=self.page_size,
                page_bytes=self.page_bytes,
                preemptions=self.preemptions,
                copied_pages=self.copied_pages,
                dtype=str(self.dtype).removeprefix("torch."),
            )

    def refs(self, page: int) -> int:
        return self._refs[page]

    def table_refs(self, page: int) -> int:
        """How many page tables (running requests) hold ``page``."""
        return self._table_refs[page]

    def in_table(self, page: int) -> bool:
        """Whether a request's page table holds ``page`` (a running or prefilling request)."""
        return self._table_refs[page] > 0

    def allocate(self, n: int) -> list[int]:
        """``n`` fresh pages for a page table (one reference each); reclaim first if needed."""
        if n <= 0:
            return []
        short = n - len(self._free)
        if short > 0 and self.reclaim is not None:
            self.reclaim(short)  # NOTE: outside the lock: it evicts tree nodes (drops spans)
        with self._lock:
            if len(self._free) < n:
                raise PoolExhausted(
                    f"KV pool: {n} pages needed, {len(self._free)} free of {self.n_pages}"
                )
            pages = [self._free.pop() for _ in range(n)]
            for page in pages:
                self._refs[page] = self._table_refs[page] = 1
            return pages

    def incref(self, pages: Iterable[int], *, table: bool) -> None:
        with self._lock:
            for page in pages:
                if self._refs[page] <= 0:
                    raise RuntimeError(f"KV pool: page {page} is free")
                self._count(page, +1, table)

    def decref(self, pages: Iterable[int], *, table: bool) -> None:
        with self._lock:
            for page in pages:
                if self._refs[page] <= 0 or (table and self._table_refs[page] <= 0):
                    raise RuntimeError(f"KV pool: page {page} released twice")
                self._count(page, -1, table)
                if self._refs[page] == 0:
                    self._free.append(page)

    def write_int8_values(self, layer: int, slots: torch.Tensor, values: torch.Tensor) -> None:
        """int8 pools: V ``[n_kv_heads, n, head_dim]`` of tokens at flat ``slots`` (rows of a
        layer's ``[n_kv_heads, n_pages · P, head_dim]``), quantised per token, scales beside."""
        assert self.value_scales is not None
        _, H, N, P, D = self.keys.shape
        q, scales = quantize_values(values)  # per token: [H, n, D], [H, n]
        self.values[layer].view(H, N * P, D).index_copy_(1, slots, q)
        self.value_scales[layer].view(H, N * P).index_copy_(1, slots, scales)

    def copy_page(self, src: int, dst: int) -> None:
        with torch.inference_mode():
            for tensor in self._tensors():
                tensor[:, :, dst].copy_(tensor[:, :, src])
        self.copied_pages += 1

    def gather(
        self, pages: Sequence[int], start: int, stop: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens ``[start, stop)`` of ``pages`` laid end to end, in the model's dtype
        (dequantised): new ``[L, H, n, D]`` tensors."""
        L, H, _, P, D = self.keys.shape
        m, dtype = len(pages), self.layout.dtype
        index = torch.tensor(pages, dtype=torch.long, device=self.device)
        with torch.inference_mode():
            keys = self.keys.index_select(2, index)  # [L, H, m, P, D]
            values = self.values.index_select(2, index)
            if self.key_scales is not None and self.value_scales is not None:
                k_scales = self.key_scales.index_select(2, index)  # [L, H, m, D]
                v_scales = self.value_scales.index_select(2, index)  # [L, H, m, P]
                keys = dequantize(keys, k_scales.unsqueeze(3), dtype)
                values = dequantize(values, v_scales.unsqueeze(4), dtype)
            elif self.dtype != dtype:
                keys, values = keys.to(dtype), values.to(dtype)
        return keys.view(L, H, m * P, D)[:, :, start:stop], values.view(L, H, m * P, D)[
            :, :, start:stop
        ]

    def stored(self, pages: Sequence[int], start: int, stop: int) -> TensorKV | Int8KV:
        """Tokens ``[start, stop)`` of ``pages`` as they are stored, a copy that holds no
        page: a ``TensorKV`` in ``dtype``, or an ``Int8KV`` whose K scales are per token
        (each token's page's), so that the disk tier writes the very bits (no re-rounding)."""
        L, H, _, P, D = self.keys.shape
        m, n = len(pages), stop - start
        index = torch.tensor(pages, dtype=torch.long, device=self.device)

        def tokens(t: torch.Tensor) -> torch.Tensor:  # [L, H, m, P, …] → [L, H, n, …]
            t = t.index_select(2, index)
            return t.reshape(L, H, m * P, *t.shape[4:])[:, :, start:stop].contiguous()

        with torch.inference_mode():
            keys, values = tokens(self.keys), tokens(self.values)
            if self.key_scales is None or self.value_scales is None:
                return TensorKV(keys, values)
            k_scales = self.key_scales.index_select(2, index).unsqueeze(3).expand(L, H, m, P, D)
            k_scales = k_scales.reshape(L, H, m * P, D)[:, :, start:stop].contiguous()
            v_scales = tokens(self.value_scales.unsqueeze(4)).view(L, H, n, 1)
            return Int8KV(keys, k_scales, values, v_scales)

    # ── helpers ──────────────────────────────────────────────────────────────────────

    def _count(self, page: int, delta: int, table: bool) -> None:
        """Change a page's references (under the lock), keeping ``_n_cached`` exact."""
        refs, table_refs = self._refs, self._table_refs
        was_cached = refs[page] > 0 and table_refs[page] == 0
        refs[page] += delta
        if table:
            table_refs[page] += delta
        self._n_cached += (refs[page] > 0 and table_refs[page] == 0) - was_cached

    def _tensors(self) -> list[torch.Tensor]:
        """Every tensor with a page dimension (dim 2): K, V, and int8's scales."""
        extra = [t for t in (self.key_scales, self.value_scales) if t is not None]
        return [self.keys, self.values, *extra]


class PagedKV:
    """A prefix span as page references: tokens ``[offset, offset + length)`` of ``pages``
    laid end to end. Holds one reference to each page until dropped (``__del__``).

    ``nbytes`` is the tokens' KV (``length × bytes_per_token``), what the tree's byte budget
    counts; the pages held may add up to two partial pages per span.
    """

    __slots__ = ("length", "offset", "pages", "pool")

    def __init__(self, pool: PagePool, pages: Sequence[int], offset: int, length: int) -> None:
        if not 0 <= offset < pool.page_size or offset + length > len(pages) * pool.page_size:
            raise ValueError(f"PagedKV: {length} tokens at {offset} do not fit {len(pages)} pages")
        pool.incref(pages, table=False)
        self.pool = pool
        self.pages = tuple(pages)
        self.offset = offset
        self.length = length

    def __del__(self) -> None:
        pages = getattr(self, "pages", ())
        if pages:
            # NOTE: at interpreter shutdown the pool may be gone: nothing left to release
            with contextlib.suppress(Exception):
                self.pool.decref(pages, table=False)

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"PagedKV(tokens={self.length}, offset={self.offset}, pages={list(self.pages)})"

    @property
    def nbytes(self) -> int:
        return self.length * self.pool.bytes_per_token

    def in_use(self, but: int | None = None) -> int:
        """How many leading tokens of the span are on pages that a running request's page
        table holds too (dropping those frees no page now); page ``but`` counts as not held
        (a table's page the tree is to stop sharing, ``PagePool.unshare``)."""
        pool = self.pool
        n = next(
            (i for i, page in enumerate(self.pages) if page == but or not pool.in_table(page)),
            None,
        )
        if n is None:
            return self.length
        return max(0, min(self.length, n * self.pool.page_size - self.offset))

    def slice(self, start: int, stop: int) -> PagedKV:
        """Tokens ``[start, stop)``, sharing this span's pages (no copy)."""
        if not 0 <= start <= stop <= self.length:
            raise IndexError(f"PagedKV.slice({start}, {stop}) out of range 0..{self.length}")
        if start == stop:
            return PagedKV(self.pool, (), 0, 0)
        P = self.pool.page_size
        first, last = (self.offset + start) // P, -(-(self.offset + stop) // P)
        return PagedKV(self.pool, self.pages[first:last], (self.offset + start) % P, stop - start)

    def gather(self, start: int = 0, stop: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of tokens ``[start, stop)``: new tensors ``[L, H, n, D]`` (a copy)."""
        stop = self.length if stop is None else stop
        pages, a = self._pages_of(start, stop)
        return self.pool.gather(pages, a, a + stop - start)

    def to_tensor_kv(self, start: int = 0, stop: int | None = None) -> TensorKV:
        """Tokens ``[start, stop)`` as a ``TensorKV`` that owns its memory (holds no page),
        in the model's dtype."""
        keys, values = self.gather(start, stop)
        return TensorKV(keys.contiguous(), values.contiguous())

    def stored(self, start: int = 0, stop: int | None = None) -> TensorKV | Int8KV:
        """Tokens ``[start, stop)`` in the pool's own format (``PagePool.stored``): what the
        disk tier writes, with no page held."""
        stop = self.length if stop is None else stop
        pages, a = self._pages_of(start, stop)
        return self.pool.stored(pages, a, a + stop - start)

    def write_into(self, keys_out: torch.Tensor, values_out: torch.Tensor) -> None:
        """``StoredKV``: copy the first ``keys_out.shape[2]`` tokens out."""
        keys, values = self.gather(0, keys_out.shape[2])
        keys_out.copy_(keys)
        values_out.copy_(values)

    def _pages_of(self, start: int, stop: int) -> tuple[Sequence[int], int]:
        """The pages tokens ``[start, stop)`` lie in, and where ``start`` is in the first."""
        P = self.pool.page_size
        first, last = (self.offset + start) // P, -(-(self.offset + stop) // P)
        return self.pages[first:last], self.offset + start - first * P


class _PagedLayer(DynamicLayer):
    """One layer of a :class:`PagedCache`: writes into the table's pages, reads them back."""

    def __init__(self, cache: PagedCache, index: int) -> None:
        super().__init__()
        self.cache = cache
        self.index = index
        self.device = cache.pool.device
        self.is_initialized = True
        self.length = 0

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # key_states, value_states: [1, n_kv_heads, new, head_dim]
        start = self.length
        stop = start + key_states.shape[-2]
        if self.index == 0:
            self.cache.reserve(stop - start)  # NOTE: a no-op when the caller reserved
        self.cache.write_layer(self.index, key_states[0], value_states[0], start)
        self.length = stop
        return self.cache.read_layer(self.index, stop)  # [1, n_kv_heads, stop, head_dim]

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count (transformers 5 convention)")
        self.cache.truncate(max(0, self.length + tokens_to_remove))


class PagedCache(DynamicCache):
    """The attention cache of one request over a :class:`PagePool`: a page table.

    ``tokens`` are the ids whose KV the cache holds (positions ``0…length-1``), so that a
    preempted request can be restored (from the tree) or recomputed; whoever feeds tokens
    appends them (``note_fed``). ``capacity`` bounds the request's tokens, as the
    contiguous ``RequestCache``'s buffers do; pages are taken only as tokens come.
    """

    def __init__(self, pool: PagePool, capacity: int, namespace: str = "") -> None:
        self.pool = pool
        self.capacity = capacity
        self.namespace = namespace
        self.table: list[int] = []
        self.tokens: list[int] = []
        #: tokens a context shift dropped (``localmodel.sinks``); then the KV is no prefix's
        self.dropped = 0
        self._layers = [_PagedLayer(self, i) for i in range(pool.layout.n_layers)]
        Cache.__init__(self, layers=list(self._layers))  # DynamicCache's __init__ can't
        self._table_t: torch.Tensor | None = None
        self._slots: tuple[int, int, torch.Tensor] | None = None
        layout, P = pool.layout, pool.page_size
        #: int8 pools: K of the partly filled last page in full precision (see the module
        #: docstring), per layer: positions ``length - length % P … length - 1``
        self._tail: torch.Tensor | None = None
        if pool.quantized:  # [L, H, P, D]
            shape = (layout.n_layers, layout.n_kv_heads, P, layout.head_dim)
            self._tail = torch.empty(shape, dtype=layout.dtype, device=layout.device)
        #: the pool's copy of that page holds a quantisation of the tail's tokens (spans may
        #: share the page); False once the tail took tokens the page has not got
        self._sealed = True

    @property
    def device(self) -> torch.device:
        return self.pool.device

    @property
    def length(self) -> int:
        """Tokens whose K/V are in the cache (the position of the next token)."""
        return self._layers[0].length

    # ── pages ────────────────────────────────────────────────────────────────────────

    def map_prefix(self, spans: Iterable[Any], n_tokens: int, tokens: Sequence[int]) -> None:
        """Positions ``0…n_tokens-1`` from a prefix match's spans, into an empty cache.

        Pages of this pool's spans are shared (a reference each, no copy); a span of another
        kind (``TensorKV``…) is copied into fresh pages.
        """
        if self.table or self.length:
            raise ValueError("map_prefix into a cache that holds tokens")
        if n_tokens > self.capacity:
            raise ValueError(f"cannot map {n_tokens} tokens into a {self.capacity}-token cache")
        P = self.pool.page_size
        pos = 0
        for span in spans:
            if pos == n_tokens:
                break
            take = min(len(span), n_tokens - pos)
            if isinstance(span, PagedKV) and span.pool is self.pool and span.offset == pos % P:
                pages = span.pages[: -(-(span.offset + take) // P)]
                self._set_pages(pos // P, pages)
                self._set_length(pos + take)
                self._load_tail()
            elif isinstance(span, StoredKV):
                self._copy_in(span, take)
            else:
                raise TypeError(f"PagedCache.map_prefix: unsupported span {type(span)}")
            pos += take
        if pos != n_tokens:
            raise ValueError(f"prefix spans cover {pos} tokens, match promised {n_tokens}")
        self.tokens = list(tokens[:n_tokens])

    def reserve(self, n: int) -> None:
        """Make positions ``length … length+n-1`` writable: the page the first of them goes
        into is this cache's alone (copied on write if shared), and pages for the rest exist.

        Raises :class:`PoolExhausted` (after the pool's reclaim) when pages run out.
        """
        length, P = self.length, self.pool.page_size
        if length + n > self.capacity:
            raise RuntimeError(f"PagedCache overflow: {length + n} > {self.capacity} tokens")
        i = length // P
        if length % P and self.pool.refs(self.table[i]) > 1:  # copy-on-write
            self._own_page(i)
        need = -(-(length + n) // P) - len(self.table)
        if need > 0:
            self.table.extend(self.pool.allocate(need))
            self._table_changed()

    def note_fed(self, tokens: Sequence[int]) -> None:
        """Record the ids of tokens just fed (their KV is now at the end of the cache)."""
        self.tokens.extend(tokens)
        if len(self.tokens) != self.length:
            raise RuntimeError(f"PagedCache: {len(self.tokens)} token ids for {self.length} tokens")

    def truncate(self, length: int) -> None:
        """Forget every token at or after ``length``; pages past it go back."""
        if not 0 <= length <= self.length:
            raise ValueError(f"truncate({length}) out of range 0..{self.length}")
        P, before = self.pool.page_size, self.length
        keep = -(-length // P)
        self.pool.decref(self.table[keep:], table=True)
        del self.table[keep:]
        del self.tokens[length:]
        self._table_changed()
        self._set_length(length)
        if not (before % P and length // P == before // P):  # else the tail still holds it
            self._load_tail()

    def release(self) -> None:
        """Give every page back (the request finished or is preempted); idempotent."""
        self.truncate(0)

    def view(self, length: int) -> PagedKV:
        """The first ``length`` tokens as a span sharing this cache's pages (``tree.insert``)."""
        if length > self.length:
            raise ValueError(f"view({length}) past the cached {self.length} tokens")
        P = self.pool.page_size
        if length % P and length // P == self.length // P and not self._sealed:
            self._seal()  # NOTE: the span's last page is the tail's: others will read it
        return PagedKV(self.pool, self.table[: -(-length // P)], 0, length)

    @torch.inference_mode()
    def load_rows(self, rows: torch.Tensor, start: int) -> None:
        """Append token rows ``[n, 2, n_layers, n_kv_heads, head_dim]`` (K, V) at ``start``
        (the disk tier's format); ``start`` must equal ``length``. Token ids: the caller's."""
        if start != self.length:
            raise ValueError(f"load_rows at {start} into a cache of {self.length} tokens")
        # rows[:, 0]: [n, L, H, D] → [L, H, n, D]
        self._write_all(rows[:, 0].permute(1, 2, 0, 3), rows[:, 1].permute(1, 2, 0, 3))

    # ── attention (one layer, inside a forward pass) ────────────────────────────────

    def append(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write new K/V (``[1, n_kv_heads, new, head_dim]``) of one layer; return its whole
        cached K/V ``[1, n_kv_heads, length, head_dim]`` (gathered from the pages)."""
        return self._layers[layer].update(keys, values)

    def slots(self, start: int, stop: int) -> torch.Tensor:
        """Flat slots (``page · P + offset``) of positions ``start…stop-1`` (reserved): rows of
        a layer's ``pool.keys[layer].view(n_kv_heads, n_pages · P, head_dim)``."""
        return self._slot_index(start, stop)

    def advance(self, n: int) -> None:
        """Count ``n`` more tokens as cached: the caller wrote their K/V at :meth:`slots` in
        every layer itself (``localmodel.batch``'s batched step)."""
        self._set_length(self.length + n)

    def write_layer(self, layer: int, keys: torch.Tensor, values: torch.Tensor, start: int) -> None:
        """Write one layer's new K/V (``[n_kv_heads, n, head_dim]``) at positions ``start…``."""
        index = self._slot_index(start, start + keys.shape[1])
        pool = self.pool
        _, H, N, P, D = pool.keys.shape
        if pool.value_scales is None:
            pool.keys[layer].view(H, N * P, D).index_copy_(1, index, keys.to(pool.dtype))
            pool.values[layer].view(H, N * P, D).index_copy_(1, index, values.to(pool.dtype))
            return
        pool.write_int8_values(layer, index, values)
        self.write_keys(layer, keys, start)

    def read_layer(self, layer: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer's K/V of positions ``0…stop-1``, gathered (and dequantised) into the
        model's dtype: ``[1, n_kv_heads, stop, d]``."""
        pool, dtype = self.pool, self.pool.layout.dtype
        _, H, N, P, D = pool.keys.shape
        m = -(-stop // P)
        pages = self._table_tensor()[:m]
        if pool.key_scales is None or pool.value_scales is None:
            keys = pool.keys[layer].view(H, N, P * D).index_select(1, pages)
            values = pool.values[layer].view(H, N, P * D).index_select(1, pages)
            if pool.dtype != dtype:
                keys, values = keys.to(dtype), values.to(dtype)
        else:
            k_scales = pool.key_scales[layer].index_select(1, pages).unsqueeze(2)  # [H, m, 1, D]
            keys = dequantize(pool.keys[layer].index_select(1, pages), k_scales, dtype)
            v_scales = pool.value_scales[layer].index_select(1, pages).unsqueeze(3)  # [H, m, P, 1]
            values = dequantize(pool.values[layer].index_select(1, pages), v_scales, dtype)
            length = self._layers[layer].length
            if stop % P and length % P and stop // P == length // P:
                assert self._tail is not None  # NOTE: the partly filled page: full precision
                keys[:, m - 1, : stop % P].copy_(self._tail[layer, :, : stop % P])
        return keys.view(1, H, m * P, D)[:, :, :stop], values.view(1, H, m * P, D)[:, :, :stop]

    @torch.inference_mode()
    def refill(self, keys: torch.Tensor, values: torch.Tensor, tokens: Sequence[int]) -> None:
        """Replace everything cached by K/V ``[n_layers, n_kv_heads, n, d]`` of ``tokens``
        (a context shift's kept tokens): the pages held go back, new ones are written.

        NOTE: may raise :class:`PoolExhausted` (the cache is then empty) only if the pages
        given back were shared with another running request and nothing else is free.
        """
        if keys.shape[2] != len(tokens):
            raise ValueError(f"refill: K/V of {keys.shape[2]} tokens for {len(tokens)} ids")
        self.truncate(0)
        self._write_all(keys, values)
        self.tokens = list(tokens)

    def tails(self, stop: int) -> tuple[int, torch.Tensor] | None:
        """:meth:`tail` of every layer at once: ``(start, the tail [L, n_kv_heads, P,
        head_dim])``, of which positions ``start…stop-1`` are rows ``0…stop-start-1``; None
        when ``stop`` ends on a page boundary or the pool is not int8."""
        r = stop % self.pool.page_size
        if self._tail is None or not r:
            return None
        return stop - r, self._tail

    def tail(self, layer: int, stop: int) -> tuple[int, torch.Tensor] | None:
        """int8 pools: K of positions ``start…stop-1`` of a partly filled last page, kept in
        full precision in the tail (``(start, [n_kv_heads, stop - start, head_dim])``) rather
        than in the page; None when ``stop`` ends on a page boundary. ``stop`` is the length
        once this step's tokens are written (:meth:`write_keys` put them there)."""
        tails = self.tails(stop)
        if tails is None:
            return None
        start, rows = tails
        return start, rows[layer, :, : stop - start]

    # ── helpers ──────────────────────────────────────────────────────────────────────

    def _set_pages(self, first: int, pages: Sequence[int]) -> None:
        """Table entries ``first…`` become ``pages`` (referenced), replacing what was there."""
        self.pool.incref(pages, table=True)
        self.pool.decref(self.table[first:], table=True)
        del self.table[first:]
        self.table.extend(pages)
        self._table_changed()

    def _own_page(self, i: int) -> None:
        """Make the shared, partly filled page ``table[i]`` this cache's alone: a copy; or,
        when no page is free for one, the page itself if the pool's ``unshare`` (the tree
        evicting its tokens on it) leaves no other reference to it.

        NOTE: without that, a request whose table holds every page the pool can give it (a
        prompt that fills the pool, sent again; the next choice of ``n > 1`` once the tree
        shares the prompt's last page) could never write its next token.
        """
        shared, pool = self.table[i], self.pool
        try:
            (page,) = pool.allocate(1)
        except PoolExhausted:
            if pool.unshare is None or pool.table_refs(shared) > 1:
                raise
            pool.unshare(shared)
            if pool.refs(shared) == 1:
                return  # this table's alone now: written in place
            (page,) = pool.allocate(1)  # (the pages the eviction freed, if any)
        pool.copy_page(shared, page)
        pool.decref((shared,), table=True)
        self.table[i] = page
        self._table_changed()

    def _set_length(self, length: int) -> None:
        for layer in self._layers:
            layer.length = length

    def _copy_in(self, span: StoredKV, n: int) -> None:
        """Append the first ``n`` tokens of a span that is not this pool's (a copy)."""
        layout = self.pool.layout
        shape = (layout.n_layers, layout.n_kv_heads, n, layout.head_dim)
        keys = torch.empty(shape, dtype=layout.dtype, device=self.device)
        values = torch.empty_like(keys)
        span.write_into(keys, values)
        self._write_all(keys, values)

    def _write_all(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Append K/V of all layers (``[L, H, n, D]``) at ``length``."""
        start, n = self.length, keys.shape[2]
        self.reserve(n)
        L, H, N, P, D = self.pool.keys.shape
        with torch.inference_mode():
            if self.pool.quantized:
                for layer in range(L):
                    self.write_layer(layer, keys[layer], values[layer], start)
            else:
                index = self._slot_index(start, start + n)
                pool_keys, pool_values = self.pool.keys, self.pool.values
                pool_keys.view(L, H, N * P, D).index_copy_(2, index, keys.to(pool_keys.dtype))
                pool_values.view(L, H, N * P, D).index_copy_(2, index, values.to(pool_keys.dtype))
        self._set_length(start + n)

    def write_keys(self, layer: int, keys: torch.Tensor, start: int) -> None:
        """int8 pools: one layer's new K (``[n_kv_heads, n, head_dim]``) at ``start…``.

        Tokens of a page that stays partly filled go to the tail in full precision; a page
        that fills is quantised at once over its ``page_size`` tokens (tail + new ones).
        """
        assert self._tail is not None and self.pool.key_scales is not None
        P, n = self.pool.page_size, keys.shape[1]
        tail = self._tail[layer]  # [H, P, D]
        r = start % P  # tokens the tail holds
        self.keys_written(start, n)
        if r + n < P:
            tail[:, r : r + n].copy_(keys)
            return
        block = torch.cat([tail[:, :r], keys], dim=1) if r else keys  # [H, r + n, D]
        H, _, D = block.shape
        full = (r + n) // P  # pages that fill, from page (start - r) // P on
        q, scales = quantize_keys(
            block[:, : full * P].reshape(H, full, P, D)
        )  # scales [H, full, D]
        first = (start - r) // P
        pages = self._table_tensor()[first : first + full]
        self.pool.keys[layer].index_copy_(1, pages, q)
        self.pool.key_scales[layer].index_copy_(1, pages, scales)
        rest = r + n - full * P
        if rest:
            tail[:, :rest].copy_(block[:, full * P :])

    def keys_written(self, start: int, n: int) -> None:
        """int8 pools: K of positions ``start…start+n-1`` went in as :meth:`write_keys` puts
        them (by it, or by ``kernel.decoder_layer`` into :meth:`tail_address`'s tail)."""
        # NOTE: sealed when no partly filled page is left (or new ones)
        self._sealed = (start + n) % self.pool.page_size == 0

    def tail_address(self) -> int:
        """int8 pools: the address of the full-precision tail, float32 ``[L, n_kv_heads,
        page_size, head_dim]`` (:meth:`write_keys`' rows; ``kernel.q8_pages``)."""
        assert self._tail is not None
        return self._tail.data_ptr()

    def _seal(self) -> None:
        """int8 pools: quantise the tail's tokens into the partly filled last page (per
        channel over those tokens), so that a span sharing the page can read them."""
        assert self._tail is not None and self.pool.key_scales is not None
        P = self.pool.page_size
        r, page = self.length % P, self.table[self.length // P]
        if self.pool.refs(page) > 1:  # NOTE: tokens went into the tail after `reserve`'s CoW
            raise RuntimeError(f"PagedCache: page {page} is shared; it cannot be sealed")
        with torch.inference_mode():
            q, scales = quantize_keys(self._tail[:, :, :r])  # [L, H, r, D], [L, H, D]
            self.pool.keys[:, :, page, :r].copy_(q)
            self.pool.key_scales[:, :, page].copy_(scales)
        self._sealed = True

    def _load_tail(self) -> None:
        """int8 pools: the tail from the partly filled last page's dequantised tokens (after
        mapping a prefix or truncating into a page the tail does not hold)."""
        self._sealed = True
        r, P = self.length % self.pool.page_size, self.pool.page_size
        if self._tail is None or self.pool.key_scales is None or not r:
            return
        page = self.table[self.length // P]
        with torch.inference_mode():
            scales = self.pool.key_scales[:, :, page].unsqueeze(2)  # [L, H, 1, D]
            keys = dequantize(self.pool.keys[:, :, page, :r], scales, self._tail.dtype)
            self._tail[:, :, :r].copy_(keys)

    def _table_changed(self) -> None:
        self._table_t = None
        self._slots = None

    def _table_tensor(self) -> torch.Tensor:
        if self._table_t is None:
            self._table_t = torch.tensor(self.table, dtype=torch.long, device=self.device)
        return self._table_t

    def _slot_index(self, start: int, stop: int) -> torch.Tensor:
        """Flat slots (``page · P + offset``) of positions ``start…stop-1`` (cached per step)."""
        cached = self._slots
        if cached is not None and cached[0] == start and cached[1] == stop:
            return cached[2]
        P = self.pool.page_size
        if -(-stop // P) > len(self.table):
            raise RuntimeError(f"PagedCache: positions up to {stop} not reserved")
        positions = torch.arange(start, stop, device=self.device)
        index = self._table_tensor()[positions // P] * P + positions % P
        self._slots = (start, stop, index)
        return index
