"""One forward pass for many sequences: ragged batching through transformers' attention hooks.

Continuous batching packs the new tokens of every scheduled sequence (one token for each
decoding sequence, a chunk for each prefilling one) into a single row ``[1, total]``, the
layout vLLM calls "flattened": the linear layers (where the weights are read) run once for all
of them, and only attention is per sequence. Two transformers hooks make that work for any
decoder-only architecture whose attention is scaled dot-product (not only Llama-shaped ones):

* a :class:`BatchCache` (a ``transformers`` ``Cache``) whose ``update`` scatters each
  sequence's new K/V into that sequence's own :class:`~localmodel.kv.RequestCache`;
* an attention function registered with ``AttentionInterface`` under :data:`ATTENTION` that,
  given the ``batch=`` keyword, runs SDPA per sequence over its cached K/V with a causal mask
  offset by what the sequence already holds, and otherwise is plain ``sdpa`` (so the
  single-request path and every other caller of the model are unchanged).

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

from localmodel.kv import RequestCache
from localmodel.pages import PagedCache

__all__ = ["ATTENTION", "BatchCache", "KVCache", "Piece", "forward", "use_batched_attention"]

#: A request's attention cache: contiguous buffers, or a page table over the engine's pool.
KVCache = RequestCache | PagedCache

#: The attention implementation name this module registers (plain sdpa without ``batch=``).
ATTENTION = "cachegate_batched"


@dataclass(frozen=True)
class Piece:
    """New tokens of one sequence for this step, fed at positions ``cache.length…``."""

    cache: KVCache
    tokens: tuple[int, ...]


class BatchCache(Cache):
    """The cache a batched forward sees: scatters K/V into each sequence's own cache.

    ``spans[i] = (start, stop)`` are piece ``i``'s columns in the packed row; ``pasts[i]``
    is how many tokens its cache held before this step (the causal mask's offset).
    """

    def __init__(self, pieces: Sequence[Piece], n_layers: int) -> None:
        super().__init__(layers=[DynamicLayer() for _ in range(n_layers)])
        self.caches = [p.cache for p in pieces]
        self.pasts = [p.cache.length for p in pieces]
        offsets = [0]
        for piece in pieces:
            offsets.append(offsets[-1] + len(piece.tokens))
        self.spans = list(itertools.pairwise(offsets))
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []  # per piece, the current layer

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        # key_states, value_states: [1, n_kv_heads, total, head_dim]
        # NOTE: layers run one after another, so `kv` always holds the current layer's views.
        self.kv = [
            cache.append(layer_idx, key_states[:, :, a:b], value_states[:, :, a:b])
            for cache, (a, b) in zip(self.caches, self.spans, strict=True)
        ]
        return key_states, value_states  # NOTE: unused; the attention reads `kv`

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # NOTE: position_ids are always given, so nothing derives positions from it


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
    batch = BatchCache(pieces, n_layers)
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
    for piece in pieces:
        if isinstance(piece.cache, PagedCache):
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
    """Per-sequence SDPA over each sequence's cache; plain sdpa when not batched."""
    if batch is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, **kwargs
        )
    outs = []
    for (k, v), past, (start, stop) in zip(batch.kv, batch.pasts, batch.spans, strict=True):
        q = query[:, :, start:stop]  # [1, n_heads, n, head_dim]; k, v: [1, n_kv, past + n, d]
        n = stop - start
        mask = None
        if n > 1 and past:  # causal, offset by the cached tokens (bottom-right aligned)
            cols = torch.arange(past + n, device=q.device)
            mask = cols[None] <= (past + torch.arange(n, device=q.device))[:, None]  # [n, past+n]
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=n > 1 and not past, scale=scaling,
            enable_gqa=q.shape[1] != k.shape[1],
        )  # fmt: skip
        outs.append(out)  # [1, n_heads, n, head_dim]
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None  # [1, total, heads, d]
