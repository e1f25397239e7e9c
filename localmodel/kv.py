"""Key/Value tensors: the prefix cache's handles and the per-request attention cache.

NOTE: these are the contiguous objects; the engine's requests and its prefix tree share the
paged pool of ``localmodel.pages`` (pages in any ``kv_dtype``) instead; the disk tier (its
rows, its break-even measurement) and the tests use these.

Two objects, two lifetimes:

* :class:`TensorKV` is what the prefix tree (``prefix.RadixCache``) stores per node: the K
  and V of a span of tokens for every layer, one tensor each,
  ``[n_layers, n_kv_heads, span, head_dim]``. It implements the ``prefix.KVSpan`` protocol
  (``len``, ``nbytes``, ``slice``). Stored spans are immutable: nobody writes into them.
* :class:`RequestCache` is the attention cache of one request, a ``transformers``
  ``DynamicCache`` whose layers write into buffers preallocated for the whole request
  (prompt + ``max_tokens``). It is filled from the matched spans with one copy per span,
  never with ``copy.deepcopy``, and grows in place, never by ``torch.cat`` per token (the
  stock ``DynamicLayer`` re-copies the whole history at every decode step).

Example::

    cache = RequestCache.allocate(layout, capacity=len(prompt) + max_tokens)
    cache.load(match.spans, match.n_cached)          # warm prefix
    model(input_ids=suffix, cache=cache, ...)         # prefill continues at n_cached
    tree.insert(key, cache.view(cache.length))        # the tree copies what it lacks
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

__all__ = ["KVLayout", "RequestCache", "StoredKV", "TensorKV", "UnsupportedModelError"]


class UnsupportedModelError(ValueError):
    """The model uses attention layers (sliding window, linear…) this cache cannot hold."""


@dataclass(frozen=True)
class KVLayout:
    """Shape and placement of one model's KV cache."""

    n_layers: int
    n_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, model: Any) -> KVLayout:
        """Read the layout from a loaded causal LM; refuse non full-attention models."""
        config = model.config.get_text_config(decoder=True)
        probe = DynamicCache(config=config)
        if any(type(layer) is not DynamicLayer for layer in probe.layers):
            raise UnsupportedModelError(
                "localmodel: prefix KV reuse supports full-attention decoder models only "
                f"(got {sorted({type(layer).__name__ for layer in probe.layers})})"
            )
        n_heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_heads
        param = next(model.parameters())
        return cls(
            n_layers=config.num_hidden_layers,
            n_kv_heads=getattr(config, "num_key_value_heads", None) or n_heads,
            head_dim=head_dim,
            dtype=param.dtype,
            device=param.device,
        )

    @property
    def bytes_per_token(self) -> int:
        """K and V of one token across all layers (SmolLM2-135M fp32: 30·2·3·64·4 = 46 080)."""
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * itemsize


@runtime_checkable
class StoredKV(Protocol):
    """A span the prefix tree stores (``TensorKV``, ``localmodel.kvquant.Int8KV``): what
    :meth:`RequestCache.load` needs of it, besides the ``prefix.KVSpan`` protocol."""

    def __len__(self) -> int: ...

    def write_into(self, keys_out: torch.Tensor, values_out: torch.Tensor) -> None:
        """Write the first ``keys_out.shape[2]`` tokens (``[n_layers, n_kv_heads, n, head_dim]``)."""
        ...


class TensorKV:
    """K and V of a contiguous token span, all layers: the prefix tree's node value.

    ``keys`` and ``values`` are ``[n_layers, n_kv_heads, span, head_dim]``; they may be views
    into a request's buffers (what the engine hands to ``RadixCache.insert``) or tensors that
    own their memory (what ``slice`` returns and the tree keeps).
    """

    __slots__ = ("keys", "values")

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        if keys.dim() != 4 or keys.shape != values.shape:
            raise ValueError(f"TensorKV: bad shapes {tuple(keys.shape)} / {tuple(values.shape)}")
        self.keys = keys  # [n_layers, n_kv_heads, span, head_dim]
        self.values = values  # [n_layers, n_kv_heads, span, head_dim]

    def __len__(self) -> int:
        return int(self.keys.shape[2])

    def __repr__(self) -> str:
        return f"TensorKV(tokens={len(self)}, shape={tuple(self.keys.shape)}, {self.keys.dtype})"

    @property
    def nbytes(self) -> int:
        """Bytes of the span itself (not of a larger buffer a view may point into)."""
        return 2 * self.keys.numel() * self.keys.element_size()

    def slice(self, start: int, stop: int) -> TensorKV:
        """An independent contiguous copy of tokens ``[start, stop)``.

        NOTE: always a copy, even when the slice is already contiguous, so that a node never
        shares memory with a request buffer that is reused or freed afterwards.
        """
        if not 0 <= start <= stop <= len(self):
            raise IndexError(f"TensorKV.slice({start}, {stop}) out of range 0..{len(self)}")
        with torch.inference_mode():
            keys = self.keys[:, :, start:stop].clone(memory_format=torch.contiguous_format)
            values = self.values[:, :, start:stop].clone(memory_format=torch.contiguous_format)
        return TensorKV(keys, values)

    def write_into(self, keys_out: torch.Tensor, values_out: torch.Tensor) -> None:
        """Copy the first ``keys_out.shape[2]`` tokens out (converting to the output's dtype)."""
        n = keys_out.shape[2]  # keys_out: [n_layers, n_kv_heads, n, head_dim]
        keys_out.copy_(self.keys[:, :, :n])
        values_out.copy_(self.values[:, :, :n])


class _BufferLayer(DynamicLayer):
    """One layer of a :class:`RequestCache`: appends into a preallocated buffer.

    ``keys``/``values`` are always views ``buffer[:, :, :length]``, exactly what
    ``DynamicLayer`` would hold after its ``torch.cat``s, so masks and SDPA see no difference.
    """

    def __init__(self, key_buf: torch.Tensor, value_buf: torch.Tensor) -> None:
        super().__init__()
        self._key_buf = key_buf  # [1, n_kv_heads, capacity, head_dim]
        self._value_buf = value_buf  # [1, n_kv_heads, capacity, head_dim]
        self.device = key_buf.device
        self.is_initialized = True
        self.set_length(0)

    def set_length(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.length = length
        keys = self._key_buf[:, :, :length]  # [1, n_kv_heads, length, head_dim]
        values = self._value_buf[:, :, :length]
        self.keys, self.values = keys, values
        return keys, values

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        start, stop = self.length, self.length + key_states.shape[-2]
        if stop > self._key_buf.shape[2]:
            raise RuntimeError(f"RequestCache overflow: {stop} > {self._key_buf.shape[2]} tokens")
        # key_states, value_states: [1, n_kv_heads, new, head_dim]
        self._key_buf[:, :, start:stop].copy_(key_states)
        self._value_buf[:, :, start:stop].copy_(value_states)
        return self.set_length(stop)

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count (transformers 5 convention)")
        self.set_length(max(0, self.length + tokens_to_remove))


class RequestCache(DynamicCache):
    """The attention cache of one request: preallocated, filled from prefix spans.

    All layers live in two tensors ``[n_layers, 1, n_kv_heads, capacity, head_dim]`` so
    that loading a span or exposing the result to the prefix tree is one copy / one view for
    all layers rather than one per layer.
    """

    def __init__(self, key_buf: torch.Tensor, value_buf: torch.Tensor) -> None:
        self.key_buf = key_buf  # [n_layers, 1, n_kv_heads, capacity, head_dim]
        self.value_buf = value_buf  # [n_layers, 1, n_kv_heads, capacity, head_dim]
        self._buffer_layers = [_BufferLayer(k, v) for k, v in zip(key_buf, value_buf, strict=True)]
        Cache.__init__(self, layers=list(self._buffer_layers))  # DynamicCache's __init__ can't
        #: tokens a context shift dropped (``localmodel.sinks``); then the KV is no prefix's
        self.dropped = 0

    @classmethod
    @torch.inference_mode()
    def allocate(cls, layout: KVLayout, capacity: int) -> RequestCache:
        """Empty buffers for ``capacity`` tokens (uninitialised memory: only ``[:length]`` is read)."""
        shape = (layout.n_layers, 1, layout.n_kv_heads, capacity, layout.head_dim)
        key_buf = torch.empty(shape, dtype=layout.dtype, device=layout.device)
        value_buf = torch.empty(shape, dtype=layout.dtype, device=layout.device)
        return cls(key_buf, value_buf)

    @property
    def capacity(self) -> int:
        return int(self.key_buf.shape[3])

    @property
    def device(self) -> torch.device:
        return self.key_buf.device

    @property
    def length(self) -> int:
        """Tokens whose K/V are in the cache (the position of the next token)."""
        return self._buffer_layers[0].length

    @torch.inference_mode()
    def load(self, spans: Iterable[Any], n_tokens: int) -> None:
        """Copy the first ``n_tokens`` tokens of the concatenated ``spans`` into positions 0…n-1.

        ``spans`` are the ``StoredKV`` handles of a ``prefix.Match`` (``TensorKV`` in any
        dtype, or ``Int8KV``: converted or dequantised here, once); their concatenation may
        cover more than ``n_tokens`` (the tree's last node can reach past the match point).
        """
        if n_tokens > self.capacity:
            raise ValueError(f"cannot load {n_tokens} tokens into a {self.capacity}-token cache")
        filled = 0
        for span in spans:
            if filled == n_tokens:
                break
            if not isinstance(span, StoredKV):
                raise TypeError(f"RequestCache.load: expected StoredKV spans, got {type(span)}")
            take = min(len(span), n_tokens - filled)
            # span: [n_layers, n_kv_heads, take, head_dim] → buffer[:, 0, :, filled:filled+take]
            span.write_into(
                self.key_buf[:, 0, :, filled : filled + take],
                self.value_buf[:, 0, :, filled : filled + take],
            )
            filled += take
        if filled != n_tokens:
            raise ValueError(f"prefix spans cover {filled} tokens, match promised {n_tokens}")
        self.truncate(n_tokens)

    @torch.inference_mode()
    def load_rows(self, rows: torch.Tensor, start: int) -> None:
        """Append token rows ``[n, 2, n_layers, n_kv_heads, head_dim]`` (K, V) at ``start``.

        The disk tier's format (``localmodel.disk.RowCodec``): ``start`` must equal
        ``length``, like a prefill's, so that the loaded tokens continue the cached ones.
        """
        n = rows.shape[0]
        if start != self.length or start + n > self.capacity:
            raise ValueError(f"load_rows({n} at {start}) into {self.length}/{self.capacity} tokens")
        # rows[:, 0]: [n, L, H, D] → buffer[:, 0, :, start:start+n]: [L, H, n, D]
        self.key_buf[:, 0, :, start : start + n].copy_(rows[:, 0].permute(1, 2, 0, 3))
        self.value_buf[:, 0, :, start : start + n].copy_(rows[:, 1].permute(1, 2, 0, 3))
        self.truncate(start + n)

    def truncate(self, length: int) -> None:
        """Forget every token at or after ``length`` (no copy: later writes overwrite them)."""
        if not 0 <= length <= self.capacity:
            raise ValueError(f"truncate({length}) out of range 0..{self.capacity}")
        for layer in self._buffer_layers:
            layer.set_length(length)

    def view(self, length: int) -> TensorKV:
        """The first ``length`` tokens as a ``TensorKV`` *view* (no copy) for ``RadixCache.insert``.

        NOTE: the view aliases this request's buffers; the tree must only keep copies made
        with ``TensorKV.slice`` (the ``prefix.KVSpan`` contract), never the view itself.
        """
        if length > self.length:
            raise ValueError(f"view({length}) past the cached {self.length} tokens")
        keys = self.key_buf[:, 0, :, :length]  # [n_layers, n_kv_heads, length, head_dim]
        values = self.value_buf[:, 0, :, :length]
        return TensorKV(keys, values)
