"""One forward pass for many sequences: ragged batching through transformers' attention hooks.

Continuous batching packs the new tokens of every scheduled sequence (one token for each
decoding sequence, a chunk for each prefilling one) into a single row ``[1, total]``, the
layout vLLM calls "flattened": the linear layers (where the weights are read) run once for all
of them, and each sequence attends to its own K/V only. Two transformers hooks make that work for any
decoder-only architecture whose attention is scaled dot-product (not only Llama-shaped ones):

* a :class:`BatchCache` (a ``transformers`` ``Cache``) whose ``update`` writes each
  sequence's new K/V into its pages of the engine's pool and reads back what each group
  attends to;
* an attention function registered with ``AttentionInterface`` under :data:`ATTENTION` that,
  given the ``batch=`` keyword, runs one attention call per group — all decoding sequences
  together: for a float32 model on float32 or half-precision pages on the CPU, cachegate's
  kernel (``localmodel.kernel``) reading each one's K/V in place in the pages, else SDPA over
  their K/V padded to the longest with a length mask; a prompt chunk alone, SDPA, causal,
  offset by what its sequence already holds — and otherwise is plain ``sdpa`` (so the
  single-request path and every other caller of the model are unchanged).

The step is planned once (``BatchCache.__init__``: every new token's slot, every
group's rows), so a layer costs a fixed number of tensor ops whatever the number of sequences.

Positions go in ``position_ids`` token by token, so RoPE sees each sequence's own positions.
A 4-D placeholder ``attention_mask`` makes transformers skip building a mask (it would be
wrong for a packed row; the attention function builds its own).

Example::

    use_batched_attention(model)                           # once, at engine start
    pieces = [Piece(cache_a, (t,)), Piece(cache_b, chunk)]  # tokens go at cache.length…
    logits = forward(model, pieces)                         # [len(pieces), vocab]: last of each
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from localmodel import kernel
from localmodel.kvquant import dequantize
from localmodel.pages import PagedCache, PagePool

__all__ = ["ATTENTION", "BatchCache", "Piece", "forward", "use_batched_attention"]

#: The attention implementation name this module registers (plain sdpa without ``batch=``).
ATTENTION = "cachegate_batched"


#: no rows to gather (a group attended in place)
_NO_ROWS = torch.empty(0, dtype=torch.int64)


@dataclass(frozen=True)
class Piece:
    """New tokens of one sequence for this step, fed at positions ``cache.length…``."""

    cache: PagedCache
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class _Group:
    """Pieces whose attention is one SDPA call: ``G`` sequences of ``n`` new tokens each,
    batched over their K/V padded to ``S`` tokens.

    ``cols`` are their columns in the packed row, piece after piece; ``mask`` (``[G, 1, n, S]``,
    True = attend) hides padding and, for a chunk that continues a cached prefix, the future;
    with ``causal`` SDPA masks the future itself (a prompt's first chunk).
    """

    pieces: tuple[int, ...]
    cols: slice | torch.Tensor
    n: int
    mask: torch.Tensor | None
    causal: bool
    gather: torch.Tensor  # rows of a layer's [n_kv_heads · slots, head_dim]
    #: decoding sequences attended by cachegate's kernel, in place in the pages (no gather):
    #: their slots [G, S] and lengths [G]
    native: tuple[torch.Tensor, torch.Tensor] | None = None


class BatchCache(Cache):
    """The cache a batched forward sees: writes each sequence's new K/V into its own cache
    and hands the attention each group's K/V.

    ``spans[i] = (start, stop)`` are piece ``i``'s columns in the packed row; ``pasts[i]``
    is how many tokens its cache held before this step (the causal mask's offset).

    Every piece's cache is a :class:`PagedCache` of one pool, so a layer costs two
    ``index_copy_`` (every new token's K and V into its slot, converted to the pages' dtype)
    and two ``index_select`` (every group's K/V out of the pool, converted back in one go),
    whatever the number of sequences, and all decoding sequences (one new token each) form
    one group: one SDPA call over their K/V padded to the longest, with a length mask.
    int8 pages (``kv_dtype: int8``) differ in two places, as ``PagedCache`` itself does: V is
    quantised per token in one go, but each piece's K goes through its own cache (the
    full-precision tail of its partly filled last page, or a page quantised as it fills; in a
    step of decodes only, ``kernel.decoder_layer`` writes both the same way, bitwise), and
    after the gather (dequantised with scales gathered alongside) each piece's tail is copied
    over its last page's rows.
    """

    def __init__(self, pieces: Sequence[Piece], n_layers: int, dtype: torch.dtype) -> None:
        super().__init__(layers=[DynamicLayer() for _ in range(n_layers)])
        self.caches = [p.cache for p in pieces]
        self.pasts = [p.cache.length for p in pieces]
        offsets = [0]
        for piece in pieces:
            offsets.append(offsets[-1] + len(piece.tokens))
        self.spans = list(itertools.pairwise(offsets))
        #: the pool every cache pages into: K/V are written and read in place there
        self.pool = _one_pool(self.caches)
        self.dtype = dtype  # the model's: what attention reads
        self.groups = self._plan_groups()
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []  # per group, the current layer
        only = self.groups[0] if len(self.groups) == 1 else None
        #: a step of decoding pieces only, on float32, bfloat16 or int8 pages read in place:
        #: (slots, lengths)
        self._decoding = (
            only.native
            if only is not None and len(only.pieces) == len(pieces)
            and (self.pool.keys.dtype in kernel.STEP_PAGE_DTYPES or self.pool.quantized)
            and kernel.attention() is not None
            else None
        )  # fmt: skip
        #: int8 pages, such a step: each sequence's tail, where its new K goes
        self._q8_bases = (
            torch.tensor([self.caches[i].tail_address() for i in only.pieces])
            if self._decoding is not None and self.pool.quantized and only is not None
            else None
        )  # fmt: skip

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        # key_states, value_states: [1, n_kv_heads, total, head_dim]
        # NOTE: layers run one after another, so `kv` always holds the current layer's K/V.
        self.kv = self._write_and_gather(layer_idx, key_states[0], value_states[0])
        return key_states, value_states  # NOTE: unused; the attention reads `kv`

    @property
    def decoding(self) -> bool:
        """Whether every piece decodes one token on pages :meth:`decoder_layer` writes
        (``kernel.STEP_PAGE_DTYPES``) read in place by cachegate's kernel."""
        return self._decoding is not None

    def decoder_layer(
        self,
        layer: int,
        params: Any,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        """``localmodel.lean``'s decode step: a whole Llama-shaped layer (``params``, from
        ``kernel.layer_params``) in one kernel call (``kernel.decoder_layer``), its new K/V
        written into the pages, past :meth:`update` and the attention function: ``x``
        ``[G, hidden]`` in, ``[G, hidden]`` out. Only where :attr:`decoding`."""
        lib = kernel.attention()
        assert self._decoding is not None and lib is not None
        slots, lengths = self._decoding
        q8 = None
        if self._q8_bases is not None:  # int8 pages: K/V quantised as PagedCache writes them
            q8 = kernel.q8_pages(self._q8_scales(layer), self._q8_bases, self._q8_layer(layer))
        return kernel.decoder_layer(lib, params, x, cos, sin, self._pages_of(layer),
                                    (self._writes, slots, lengths), q8)  # fmt: skip

    def attend_int8(self, lib: Any, q: torch.Tensor, layer: int, scale: float) -> torch.Tensor:
        """int8 pages: the decoding group's attention in one kernel call, each sequence's K/V
        de-quantised as the kernel reads them in place (its partly filled page's K from its
        tail): ``q`` [G, Hq, D] → [G, Hq, D]."""
        slots, lengths = self.groups[0].native or (_NO_ROWS, _NO_ROWS)
        return kernel.decode_attention_q8(lib, q, self._pages_of(layer), self._q8_scales(layer),
                                          (slots, lengths), self._q8_layer(layer), scale)  # fmt: skip

    def _q8_scales(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """int8 pages: one layer's K scales ``[H, pages, D]`` and V scales ``[H, slots]``."""
        assert self.pool.key_scales is not None and self.pool.value_scales is not None
        _, H, N, P, _ = self.pool.keys.shape
        return self.pool.key_scales[layer], self.pool.value_scales[layer].view(H, N * P)

    def _q8_layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """int8 pages: the decoding group's tails as the kernel reads them in ``layer``."""
        addresses, starts, layer_bytes = self._q8_tails
        return addresses, starts, layer * layer_bytes

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # NOTE: position_ids are always given, so nothing derives positions from it

    def advance(self) -> None:
        """After the forward pass: the caches now hold their pieces' tokens (int8 pages, a
        step of decodes: their K went in as ``write_keys`` puts it, by it or by the one C call
        a layer, which says so here once, not in every layer)."""
        for cache, past, (a, b) in zip(self.caches, self.pasts, self.spans, strict=True):
            if self._q8_bases is not None:
                cache.keys_written(past, b - a)
            cache.advance(b - a)

    # ── helpers ──────────────────────────────────────────────────────────────────────

    def _plan_groups(self) -> list[_Group]:
        """Every decoding piece in one group, each chunk of a prompt in one of its own; the
        slots they write (``_writes``) and the pool rows each group reads (its ``gather``)."""
        device = self.pool.device
        history = []  # per piece, the slots of positions 0…past+n-1
        for cache, past, (a, b) in zip(self.caches, self.pasts, self.spans, strict=True):
            cache.reserve(b - a)  # NOTE: a no-op when the scheduler reserved
            history.append(cache.slots(0, past + b - a))
        self._writes = torch.cat(
            [h[p:] for h, p in zip(history, self.pasts, strict=True)]
        )  # [total]: column j's slot
        decoding = [i for i, (a, b) in enumerate(self.spans) if b - a == 1]
        groups = []
        if decoding:
            lengths = [len(history[i]) for i in decoding]
            # NOTE: a padding slot must hold finite K/V in every layer (masked scores still
            # multiply V): position 0 of a decoding sequence is written before attention reads
            pad = int(history[decoding[0]][0])
            slots = torch.nn.utils.rnn.pad_sequence(
                [history[i] for i in decoding], batch_first=True, padding_value=pad
            )  # [G, S]
            mask = None
            if min(lengths) != max(lengths):
                cols = torch.arange(max(lengths), device=device)
                mask = (cols[None] < torch.tensor(lengths, device=device)[:, None])[:, None, None]
            first = self.spans[decoding[0]][0]
            contiguous = decoding == list(range(decoding[0], decoding[0] + len(decoding)))
            cols_d = slice(first, first + len(decoding)) if contiguous else torch.tensor(
                [self.spans[i][0] for i in decoding], device=device
            )  # fmt: skip
            if self._native_decode():
                native = (slots, torch.tensor(lengths, dtype=torch.int64))
                groups.append(_Group(tuple(decoding), cols_d, 1, None, False, _NO_ROWS, native))
            else:
                groups.append(_Group(tuple(decoding), cols_d, 1, mask, False, self._rows(slots)))
        for i, ((a, b), past) in enumerate(zip(self.spans, self.pasts, strict=True)):
            if b - a > 1:
                mask = _causal_mask(past, b - a, device)[None, None] if past else None
                gather = self._rows(history[i][None])
                groups.append(_Group((i,), slice(a, b), b - a, mask, not past, gather))
        self._sizes = [len(g.gather) for g in groups]
        self._gather = torch.cat([g.gather for g in groups])
        if self.pool.quantized:
            # a gathered row's K scale: row h·N·P + page·P + offset → h·N + page
            self._pages = torch.div(self._gather, self.pool.page_size, rounding_mode="floor")
            # (group, index in it, cache, length after the step) of every piece
            self._tails = [
                (g, j, self.caches[i], self.pasts[i] + self.spans[i][1] - self.spans[i][0])
                for g, group in enumerate(groups)
                if group.native is None  # (the kernel reads those tails itself)
                for j, i in enumerate(group.pieces)
            ]
            if groups and groups[0].native is not None:
                self._q8_tails = self._tail_rows(groups[0])
        # the gathered K and V of every group, one layer at a time: [rows, head_dim]
        self._k_buf = self.pool.keys.new_empty((len(self._gather), self.pool.keys.shape[-1]))
        self._v_buf = torch.empty_like(self._k_buf)
        return groups

    def _pages_of(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer's K and V pages as ``[H, slots, D]`` views (what the kernels read)."""
        _, H, N, P, D = self.pool.keys.shape
        return self.pool.keys[layer].view(H, N * P, D), self.pool.values[layer].view(H, N * P, D)

    def _native_decode(self) -> bool:
        """Whether the decoding group's attention runs on cachegate's kernel: a float32 model
        and float32, half-precision or int8 pages on the CPU, where the kernel is built."""
        pool = self.pool
        pages = pool.keys.dtype in kernel.PAGE_DTYPES or pool.quantized
        float32 = pages and self.dtype is torch.float32 and pool.device.type == "cpu"
        return float32 and kernel.attention() is not None

    def _tail_rows(self, group: _Group) -> tuple[torch.Tensor, torch.Tensor, int]:
        """int8 pages, the decoding group on the kernel: each sequence's full-precision tail
        (the address of its ``[L, H, P, D]`` rows, 0 where none) and the position its rows
        start at, and the bytes a layer of a tail takes (``kernel.decode_attention_q8``; also
        where none has a tail: a step on the C layer writes every tail)."""
        _, H, _, P, D = self.pool.keys.shape
        addresses, starts, layer_bytes = [], [], H * P * D * self.pool.layout.dtype.itemsize
        for i in group.pieces:
            stop = self.pasts[i] + 1
            tails = self.caches[i].tails(stop)
            if tails is None:
                addresses.append(0)
                starts.append(stop)
            else:
                addresses.append(tails[1].data_ptr())
                starts.append(tails[0])
                assert layer_bytes == tails[1][0].numel() * tails[1].element_size()
        return torch.tensor(addresses), torch.tensor(starts), layer_bytes

    def _rows(self, slots: torch.Tensor) -> torch.Tensor:
        """Rows of a layer's ``[H · slots, D]`` view for slots ``[G, S]``: ``[G · H · S]``,
        in the order of a ``[G, H, S, D]`` tensor."""
        _, H, N, P, _ = self.pool.keys.shape
        heads = torch.arange(H, device=slots.device)[None, :, None] * (N * P)  # [1, H, 1]
        return (heads + slots[:, None, :]).reshape(-1)

    def _write_and_gather(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Write this layer's new K/V (``[H, total, D]``) into the pool; read every group's."""
        _, H, N, P, D = self.pool.keys.shape
        pool_k, pool_v = self.pool.keys[layer], self.pool.values[layer]  # [H, N, P, D]
        pages = self._pages_of(layer)  # (read in place)
        if self.pool.quantized:
            self._write_int8(layer, keys, values)
        else:
            pages[0].index_copy_(1, self._writes, keys.to(pool_k.dtype))
            pages[1].index_copy_(1, self._writes, values.to(pool_v.dtype))
        # NOTE: into buffers made once a step: a fresh ~MB tensor per layer was mapped afresh
        # by malloc, and its page faults cost more than the gather itself (measured)
        if not len(self._gather):  # every group attends in place: nothing to gather
            return [pages] * len(self.groups)
        k_all = torch.index_select(pool_k.view(H * N * P, D), 0, self._gather, out=self._k_buf)
        v_all = torch.index_select(pool_v.view(H * N * P, D), 0, self._gather, out=self._v_buf)
        if self.pool.quantized:
            k_all, v_all = self._dequantize(layer, k_all, v_all)
        elif k_all.dtype != self.dtype:  # half-precision pages: one conversion for all groups
            k_all, v_all = k_all.to(self.dtype), v_all.to(self.dtype)
        kv = []
        for group, k, v in zip(
            self.groups, k_all.split(self._sizes), v_all.split(self._sizes), strict=True
        ):
            if group.native is not None:
                kv.append(pages)
                continue
            shape = (len(group.pieces), H, -1, D)  # [G, H, S, D]
            kv.append((k.view(shape), v.view(shape)))
        if self.pool.quantized:
            self._overlay_tails(layer, kv)
        return kv

    def _write_int8(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """int8 pages: every new token's V quantised (per token) into its slot in one go;
        each piece's K through its own cache (its tail, or a page quantised as it fills)."""
        self.pool.write_int8_values(layer, self._writes, values)
        for cache, past, (a, b) in zip(self.caches, self.pasts, self.spans, strict=True):
            cache.write_keys(layer, keys[:, a:b], past)

    def _dequantize(
        self, layer: int, k_q: torch.Tensor, v_q: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gathered int8 rows (``[rows, D]``) times their scales, in the model's dtype (as
        ``PagedCache.read_layer`` computes them): K's per page and channel, V's per token."""
        assert self.pool.key_scales is not None and self.pool.value_scales is not None
        _, H, N, P, D = self.pool.keys.shape
        k_scales = self.pool.key_scales[layer].view(H * N, D).index_select(0, self._pages)
        v_scales = self.pool.value_scales[layer].view(H * N * P).index_select(0, self._gather)
        return dequantize(k_q, k_scales, self.dtype), dequantize(v_q, v_scales[:, None], self.dtype)

    def _overlay_tails(self, layer: int, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """int8 pages: a partly filled last page's K is read from its request's tail."""
        for g, j, cache, stop in self._tails:
            tail = cache.tail(layer, stop)
            if tail is not None:
                start, rows = tail
                kv[g][0][j, :, start:stop].copy_(rows)


def use_batched_attention(model: Any) -> None:
    """Switch ``model`` to :data:`ATTENTION` (registered on first use); idempotent."""
    if ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTENTION, _attention)
        AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    if model.config._attn_implementation != ATTENTION:
        model.set_attn_implementation(ATTENTION)


@torch.inference_mode()
def forward(model: Any, pieces: Sequence[Piece]) -> torch.Tensor:
    """Run every piece in one forward pass; return each piece's last logits ``[n, vocab]``.

    NOTE: the model must be switched with :func:`use_batched_attention` first; the caches
    grow by their piece's tokens, exactly as a prefill of that piece alone would grow them.
    """
    device = pieces[0].cache.device
    n_layers = len(pieces[0].cache.layers)
    ids = [t for p in pieces for t in p.tokens]
    positions = [p.cache.length + i for p in pieces for i in range(len(p.tokens))]
    batch = BatchCache(pieces, n_layers, model.dtype)
    last = torch.tensor([stop - 1 for _, stop in batch.spans], device=device)  # [n]
    out = model(
        input_ids=torch.tensor([ids], device=device),  # [1, total]
        position_ids=torch.tensor([positions], device=device),  # [1, total]
        attention_mask=torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device),  # placeholder
        cache=batch,
        use_cache=True,
        logits_to_keep=last,
        batch=batch,
    )
    batch.advance()
    for piece in pieces:
        piece.cache.note_fed(piece.tokens)  # what a preempted request re-feeds
    return out.logits[0]  # [n, vocab]


def _attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    batch: BatchCache | None = None,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """SDPA per group of sequences over their cached K/V; plain sdpa when not batched."""
    if batch is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, **kwargs
        )
    _, n_heads, total, d = query.shape  # query: [1, n_heads, total, head_dim]
    outs = []
    for group, (k, v) in zip(batch.groups, batch.kv, strict=True):
        g = len(group.pieces)
        if group.native is not None:  # k, v: the layer's pages [n_kv_heads, slots, d]
            q = query[0, :, group.cols].transpose(0, 1).contiguous()  # [G, h, d]
            scale = d**-0.5 if scaling is None else scaling
            lib = kernel.attention()
            assert lib is not None
            if batch.pool.quantized:
                outs.append(batch.attend_int8(lib, q, module.layer_idx, scale))
            else:
                outs.append(kernel.decode_attention(lib, q, k, v, *group.native, scale))
            continue
        q = query[0, :, group.cols].view(n_heads, g, group.n, d).transpose(0, 1)  # [G, h, n, d]
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=group.mask, is_causal=group.causal, scale=scaling,
            enable_gqa=n_heads != k.shape[1],
        )  # fmt: skip  # k, v: [G, n_kv_heads, S, d]; out: [G, h, n, d]
        outs.append(out.transpose(1, 2).reshape(g * group.n, n_heads, d))  # [G·n, h, d]
    if len(outs) == 1 and outs[0].shape[0] == total:  # (the group holds every column)
        return outs[0][None], None  # [1, total, heads, d]
    merged = query.new_empty((total, n_heads, d))
    for group, out in zip(batch.groups, outs, strict=True):
        if isinstance(group.cols, slice):
            merged[group.cols] = out
        else:
            merged.index_copy_(0, group.cols, out)
    return merged[None], None  # [1, total, heads, d]


def _one_pool(caches: Sequence[PagedCache]) -> PagePool:
    """The pool all ``caches`` page into (K/V are written and read there in place)."""
    pool = caches[0].pool
    if any(c.pool is not pool for c in caches):
        raise ValueError("a batched step's caches must all page into one pool")
    return pool


def _causal_mask(past: int, n: int, device: torch.device) -> torch.Tensor:
    """``[n, past + n]``: causal, offset by ``past`` cached tokens (bottom-right aligned)."""
    cols = torch.arange(past + n, device=device)
    return cols[None] <= (past + torch.arange(n, device=device))[:, None]
