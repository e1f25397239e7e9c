"""Past the context window: attention sinks and a context shift that re-rotates K.

With ``context_overflow: sinks`` a request longer than the window is not refused. Its KV
cache holds at most ``window`` tokens: the first ``sink_tokens`` (the *attention sinks* of
StreamingLLM, which soak up attention mass; dropping them is what makes plain window
attention collapse) and the most recent tokens. When the cache is full, :meth:`ContextShift.shift`
drops the oldest quarter of the non-sink tokens in one go, as llama.cpp's context shift does
(one memmove per quarter window rather than one per token)::

    before: [s s s s | a a a a a a a a | b b b b b b b b b b b b b b b b b b b b b b b b]
    after:  [s s s s | b b b b b b b b b b b b b b b b b b b b b b b b | · · · · · · · ·]

Positions are the cache's, not the text's (as in StreamingLLM): a token at cache slot ``i``
has position ``i``. The K of the kept tokens was rotated (RoPE) for the slot it had, so it is
rotated back by the number of dropped tokens; RoPE rotations compose
(``R(p - d) = R(-d) · R(p)``), so this equals the rotation for the new slot exactly, with no
recompute. V carries no position. Re-rotation instead of re-computing the window: a shift
costs a copy and a rotation of the cache (SmolLM2 at a 2k window: ~0.1 s on this shared
2-core CPU under load, once every 511 tokens) where a recompute would cost a prefill of ¾
of the window (1.5k tokens: seconds on a CPU) every quarter window.

Below the window nothing runs: a request whose prompt + ``max_tokens`` fits is served
exactly as with ``context_overflow: error``.

NOTE: the rotation supports RoPE whose angle is linear in the position with the
``rotate_half`` layout (rope types ``default``, ``linear``, ``llama3``: Llama, Mistral,
Qwen2, SmolLM…); :meth:`ContextShift.of` refuses other models at start-up.

Example::

    shift = ContextShift.of(model, sink_tokens=4)
    if cache.length == cache.capacity:
        shift.shift(cache)          # drops a quarter window after the sinks, re-rotates K
"""

from __future__ import annotations

from typing import Any

import torch

from localmodel.kv import RequestCache, UnsupportedModelError
from localmodel.pages import PagedCache, PoolExhausted

__all__ = ["ContextShift", "KeptNotStored"]

_LINEAR_ROPE = ("default", "linear", "llama3")  # the angle is inv_freq · position


class KeptNotStored(PoolExhausted):
    """A shift over pages found no page for the kept tokens' K/V (the pages it gave back are
    shared with another running request and nothing else is free). The cache is empty but
    counts the dropped tokens; ``tokens`` (sinks and the most recent) must be fed again."""

    def __init__(self, tokens: list[int]) -> None:
        super().__init__(f"no KV page for the {len(tokens)} tokens a context shift keeps")
        self.tokens = tokens


class ContextShift:
    """Keeps ``sink_tokens`` + the most recent tokens of a full cache, K re-rotated."""

    def __init__(self, inv_freq: torch.Tensor, sink_tokens: int) -> None:
        self.inv_freq = inv_freq.float()  # [rotary_dim / 2]
        self.sink_tokens = sink_tokens

    @classmethod
    def of(cls, model: Any, sink_tokens: int) -> ContextShift:
        """Read the model's RoPE; refuse models whose K cannot be re-rotated exactly."""
        rotary = getattr(model.get_decoder(), "rotary_emb", None)
        rope_type = getattr(rotary, "rope_type", None)
        if rotary is None or rope_type not in _LINEAR_ROPE or rotary.attention_scaling != 1.0:
            raise UnsupportedModelError(
                "localmodel: context_overflow: sinks needs rotary position embeddings of type "
                f"{_LINEAR_ROPE} (got {rope_type!r}); use context_overflow: error"
            )
        return cls(rotary.inv_freq.detach().cpu(), sink_tokens)

    def discard(self, cache: RequestCache | PagedCache) -> int:
        """Tokens a shift of ``cache`` drops: a quarter of the non-sink capacity (>= 1)."""
        return max(1, (cache.capacity - self.sink_tokens) // 4)

    @torch.inference_mode()
    def shift(self, cache: RequestCache | PagedCache) -> int:
        """Drop the oldest non-sink tokens of ``cache``; move the rest down; return how many.

        Raises :class:`KeptNotStored` when a paged cache gets no page for what it keeps.

        NOTE: the cache's KV no longer matches any token prefix afterwards (the kept tokens
        attended to the dropped ones), so it must never be inserted into the prefix tree.
        """
        keep = self.sink_tokens
        length = cache.length
        if length <= keep + 1:
            raise ValueError(f"cannot shift a cache of {length} tokens with {keep} sinks")
        drop = min(self.discard(cache), length - keep - 1)
        try:
            if isinstance(cache, PagedCache):
                self._shift_pages(cache, drop)
            else:
                self._shift_buffers(cache, drop)
        finally:
            cache.dropped += drop  # (an empty cache that raised KeptNotStored too)
        return drop

    def _shift_buffers(self, cache: RequestCache, drop: int) -> None:
        """Contiguous buffers: the kept tokens move down in place, K rotated."""
        keep, length = self.sink_tokens, cache.length
        # buffers: [n_layers, 1, n_kv_heads, capacity, head_dim]; tokens [keep + drop, length)
        # move to [keep, length - drop). NOTE: clone first (the ranges overlap), one layer
        # at a time so the copy in flight is a layer's, not the whole cache's.
        for key_buf, value_buf in zip(cache.key_buf, cache.value_buf, strict=True):
            keys = self._rotated(key_buf[:, :, keep + drop : length], -drop)  # a new tensor
            key_buf[:, :, keep : length - drop].copy_(keys)
            value_buf[:, :, keep : length - drop].copy_(
                value_buf[:, :, keep + drop : length].clone()
            )
        cache.truncate(length - drop)

    def _shift_pages(self, cache: PagedCache, drop: int) -> None:
        """Pages: the kept tokens are read out (dequantised), K rotated, and written into
        fresh pages (re-quantised for int8 pages); the old pages go back, or stay with the
        prefix tree where it shares them (the window the prompt filled first)."""
        keep, length = self.sink_tokens, cache.length
        # NOTE: one layer read out at a time, into the kept tokens' K/V: the copy beside the
        # pages is the window's less what is dropped, plus a layer (not the whole window twice)
        layout = cache.pool.layout  # (read_layer gives the model's dtype, whatever the pages')
        shape = (layout.n_layers, layout.n_kv_heads, length - drop, layout.head_dim)
        keys = torch.empty(shape, dtype=layout.dtype, device=layout.device)
        values = torch.empty_like(keys)
        for layer in range(layout.n_layers):
            k, v = (t[0] for t in cache.read_layer(layer, length))  # [n_kv_heads, length, d]
            keys[layer, :, :keep] = k[:, :keep]
            keys[layer, :, keep:] = self._rotated(k[:, keep + drop :], -drop)
            values[layer, :, :keep] = v[:, :keep]
            values[layer, :, keep:] = v[:, keep + drop :]
        kept = cache.tokens[:keep] + cache.tokens[keep + drop :]
        try:
            cache.refill(keys, values, kept)
        except PoolExhausted:
            raise KeptNotStored(kept) from None

    def _rotated(self, keys: torch.Tensor, delta: int) -> torch.Tensor:
        """Post-RoPE ``keys`` (``[..., head_dim]``) rotated by ``delta`` positions, a new tensor.

        The ``rotate_half`` layout pairs dim ``i`` with ``i + rotary_dim / 2`` at angle
        ``θ_i · delta``: ``(a, b) → (a cos - b sin, b cos + a sin)``.
        """
        angles = (delta * self.inv_freq).to(keys.device)  # [rotary_dim / 2]
        cos, sin = angles.cos().to(keys.dtype), angles.sin().to(keys.dtype)
        half = angles.shape[0]
        a, b = keys[..., :half], keys[..., half : 2 * half]
        out = keys.clone()  # NOTE: partial rotary embeddings rotate the first dims only
        torch.mul(a, cos, out=out[..., :half]).sub_(b * sin)
        torch.mul(b, cos, out=out[..., half : 2 * half]).add_(a * sin)
        return out
