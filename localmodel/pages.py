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
raised and the scheduler preempts its youngest running request.

Releases happen when a span object is dropped (``__del__``: the tree drops a node's span
when it evicts, expires, flushes or splits it; a match's spans when the request has mapped
them), so spans still held elsewhere (a ``prefix.Match``, an eviction record queued for the
disk tier) keep their pages valid, as the ``prefix.Match`` contract requires.

Example::

    pool = PagePool.of_bytes(layout, 512 << 20, page_size=16)
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


class PagePool:
    """Preallocated K and V pages ``[n_layers, n_kv_heads, n_pages, page_size, head_dim]``.

    Reference counts are kept per page, in total and for page tables alone (``cached`` pages
    are referenced by spans only). Thread-safe: spans may be dropped on any thread (the disk
    tier's writer drops the eviction records it wrote); one re-entrant lock, never held while
    calling out (so a span dropped inside the tree's lock cannot deadlock).
    """

    def __init__(self, layout: KVLayout, n_pages: int, page_size: int = 16) -> None:
        if n_pages < 1 or page_size < 1:
            raise ValueError(
                f"PagePool: n_pages and page_size must be >= 1 ({n_pages}, {page_size})"
            )
        self.layout = layout
        self.n_pages = n_pages
        self.page_size = page_size
        shape = (layout.n_layers, layout.n_kv_heads, n_pages, page_size, layout.head_dim)
        # NOTE: torch.empty: on a CPU the OS maps memory as pages are first written
        self.keys = torch.empty(shape, dtype=layout.dtype, device=layout.device)
        self.values = torch.empty(shape, dtype=layout.dtype, device=layout.device)
        self.bytes_per_token = layout.bytes_per_token
        self.page_bytes = page_size * layout.bytes_per_token
        self._refs = [0] * n_pages
        self._table_refs = [0] * n_pages
        self._n_cached = 0  # pages with references from spans only
        self._free = list(range(n_pages - 1, -1, -1))  # pop() hands out low pages first
        self._lock = threading.RLock()
        #: called with a number of pages to free when too few are free (set by the engine)
        self.reclaim: Callable[[int], None] | None = None
        self.preemptions = 0
        self.copied_pages = 0

    @classmethod
    def of_bytes(cls, layout: KVLayout, n_bytes: int, page_size: int = 16) -> PagePool:
        """A pool of as many pages as ``n_bytes`` holds (K and V, all layers)."""
        return cls(layout, max(1, n_bytes // (page_size * layout.bytes_per_token)), page_size)

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
            )

    def refs(self, page: int) -> int:
        return self._refs[page]

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

    def _count(self, page: int, delta: int, table: bool) -> None:
        """Change a page's references (under the lock), keeping ``_n_cached`` exact."""
        refs, table_refs = self._refs, self._table_refs
        was_cached = refs[page] > 0 and table_refs[page] == 0
        refs[page] += delta
        if table:
            table_refs[page] += delta
        self._n_cached += (refs[page] > 0 and table_refs[page] == 0) - was_cached

    def copy_page(self, src: int, dst: int) -> None:
        with torch.inference_mode():
            self.keys[:, :, dst].copy_(self.keys[:, :, src])
            self.values[:, :, dst].copy_(self.values[:, :, src])
        self.copied_pages += 1

    def gather(
        self, pages: Sequence[int], start: int, stop: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens ``[start, stop)`` of ``pages`` laid end to end: new ``[L, H, n, D]`` tensors."""
        L, H, _, P, D = self.keys.shape
        index = torch.tensor(pages, dtype=torch.long, device=self.device)
        with torch.inference_mode():
            keys = self.keys.view(L, H, self.n_pages, P * D).index_select(2, index)
            values = self.values.view(L, H, self.n_pages, P * D).index_select(2, index)
        m = len(pages)
        return keys.view(L, H, m * P, D)[:, :, start:stop], values.view(L, H, m * P, D)[
            :, :, start:stop
        ]


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
        P = self.pool.page_size
        first, last = (self.offset + start) // P, -(-(self.offset + stop) // P)
        a = self.offset + start - first * P
        return self.pool.gather(self.pages[first:last], a, a + stop - start)

    def to_tensor_kv(self, start: int = 0, stop: int | None = None) -> TensorKV:
        """Tokens ``[start, stop)`` as a ``TensorKV`` that owns its memory (holds no page)."""
        keys, values = self.gather(start, stop)
        return TensorKV(keys.contiguous(), values.contiguous())

    def write_into(self, keys_out: torch.Tensor, values_out: torch.Tensor) -> None:
        """``StoredKV``: copy the first ``keys_out.shape[2]`` tokens out."""
        keys, values = self.gather(0, keys_out.shape[2])
        keys_out.copy_(keys)
        values_out.copy_(values)


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
        self.dropped = 0  # NOTE: a paged cache never slides (context_overflow: sinks is contiguous)
        self._layers = [_PagedLayer(self, i) for i in range(pool.layout.n_layers)]
        Cache.__init__(self, layers=list(self._layers))  # DynamicCache's __init__ can't
        self._table_t: torch.Tensor | None = None
        self._slots: tuple[int, int, torch.Tensor] | None = None

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
            (page,) = self.pool.allocate(1)
            self.pool.copy_page(self.table[i], page)
            self.pool.decref((self.table[i],), table=True)
            self.table[i] = page
            self._table_changed()
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
        keep = -(-length // self.pool.page_size)
        self.pool.decref(self.table[keep:], table=True)
        del self.table[keep:]
        del self.tokens[length:]
        self._table_changed()
        self._set_length(length)

    def release(self) -> None:
        """Give every page back (the request finished or is preempted); idempotent."""
        self.truncate(0)

    def view(self, length: int) -> PagedKV:
        """The first ``length`` tokens as a span sharing this cache's pages (``tree.insert``)."""
        if length > self.length:
            raise ValueError(f"view({length}) past the cached {self.length} tokens")
        return PagedKV(self.pool, self.table[: -(-length // self.pool.page_size)], 0, length)

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
        _, H, N, P, D = self.pool.keys.shape
        self.pool.keys[layer].view(H, N * P, D).index_copy_(1, index, keys)
        self.pool.values[layer].view(H, N * P, D).index_copy_(1, index, values)

    def read_layer(self, layer: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer's K/V of positions ``0…stop-1``, gathered: ``[1, n_kv_heads, stop, d]``."""
        _, H, N, P, D = self.pool.keys.shape
        m = -(-stop // P)
        pages = self._table_tensor()[:m]
        keys = self.pool.keys[layer].view(H, N, P * D).index_select(1, pages)
        values = self.pool.values[layer].view(H, N, P * D).index_select(1, pages)
        return keys.view(1, H, m * P, D)[:, :, :stop], values.view(1, H, m * P, D)[:, :, :stop]

    # ── helpers ──────────────────────────────────────────────────────────────────────

    def _set_pages(self, first: int, pages: Sequence[int]) -> None:
        """Table entries ``first…`` become ``pages`` (referenced), replacing what was there."""
        self.pool.incref(pages, table=True)
        self.pool.decref(self.table[first:], table=True)
        del self.table[first:]
        self.table.extend(pages)
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
        index = self._slot_index(start, start + n)
        L, H, N, P, D = self.pool.keys.shape
        with torch.inference_mode():
            self.pool.keys.view(L, H, N * P, D).index_copy_(2, index, keys.to(self.pool.keys.dtype))
            self.pool.values.view(L, H, N * P, D).index_copy_(
                2, index, values.to(self.pool.values.dtype)
            )
        self._set_length(start + n)

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
