"""KV in a smaller dtype (``kv_dtype``): the int8 format and its rounding rules.

``kv_dtype`` (per local model) names the dtype KV is kept in. With the paged pool (the
default, ``context_overflow: error``) that is the dtype of the pool's pages themselves
(``localmodel.pages``): running requests and the prefix tree share the same int8 or
half-precision pages, and attention dequantises them at every step. This module holds the
rounding rules both sides use:

* ``float16`` / ``bfloat16``: a plain conversion (2× the tokens of float32 in the same bytes);
* ``int8``: symmetric int8 with **per-channel** scales for K (one per layer, head and channel
  over a group of tokens — a page, or a stored span: K has outlier channels, KIVI) and
  **per-token** scales for V (one per layer, head and token), both stored as float16
  (:func:`quantize_keys`, :func:`quantize_values`). SmolLM2-135M, 16-token pages:
  11 520 B of int8 + 180 B of V scales a token, plus 11 520 B of K scales a page, against
  46 080 B a token in float32: 3.7× the tokens (3.8× with 32-token pages).

NOTE: re-quantising dequantised int8 is the identity: a channel's largest value is
``±127 · scale`` exactly, so the scale comes out the same and every ``q · s / s`` divides
back to ``q`` (:func:`quantize_keys` on :func:`dequantize` of its output returns the same
bits). That is why a page that is re-quantised (a partly filled page completed by another
request, KV re-loaded from disk) changes only where new tokens widen a channel's range.

:class:`Int8KV` is an int8 span outside the pool: what the disk tier writes and reads back
(``PagedKV.stored``), and what a contiguous ``RequestCache`` loads dequantised.

Example::

    fmt = resolve_kv_dtype("int8", model_dtype=torch.float32)     # torch.int8
    q, scales = quantize_keys(page_keys)                            # [.., P, D] → scales [.., D]
    keys = dequantize(q, scales.unsqueeze(-2), torch.float32)       # what attention reads
"""

from __future__ import annotations

import torch

from localmodel.config import KV_DTYPES
from localmodel.kv import TensorKV

__all__ = [
    "KV_DTYPES",
    "SCALE_DTYPE",
    "Int8KV",
    "dequantize",
    "quantize_keys",
    "quantize_values",
    "resolve_kv_dtype",
]

#: The dtype of int8 scales (counted in every byte budget).
SCALE_DTYPE = torch.float16
#: The smallest scale: float16's smallest normal number. An all-zero channel or token needs
#: some positive scale; a subnormal one would round too coarsely for re-quantising the
#: dequantised values to give back the same bits (see the NOTE above).
_MIN_SCALE = 2.0**-14


def resolve_kv_dtype(kv_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    """``"auto"`` → the model's dtype; otherwise the named one (``torch.int8`` for int8)."""
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"localmodel: kv_dtype must be one of {KV_DTYPES}, got {kv_dtype!r}")
    return model_dtype if kv_dtype == "auto" else getattr(torch, kv_dtype)


def quantize_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """K ``[..., tokens, head_dim]`` → int8 of that shape and per-channel scales
    ``[..., head_dim]`` over the tokens (``x ≈ q · scale``)."""
    scales = _scales(keys.abs().amax(dim=-2))  # [..., D]
    return _round(keys, scales.unsqueeze(-2)), scales


def quantize_values(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """V ``[..., head_dim]`` → int8 of that shape and per-token scales ``[...]``."""
    scales = _scales(values.abs().amax(dim=-1))  # [...]
    return _round(values, scales.unsqueeze(-1)), scales


def dequantize(q: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``q · scales`` in ``dtype`` (``scales`` broadcast against ``q``): one new tensor."""
    return torch.mul(q, scales.to(dtype))


class Int8KV:
    """int8 K and V of a token span, all layers, with their scales: a ``prefix.KVSpan``.

    ``keys``/``values``: int8 ``[n_layers, n_kv_heads, span, head_dim]``;
    ``key_scales``: ``[n_layers, n_kv_heads, 1, head_dim]`` (per channel; per token and
    channel, ``[…, span, head_dim]``, when decoded from disk rows of several spans);
    ``value_scales``: ``[n_layers, n_kv_heads, span, 1]`` (per token). ``x ≈ q · scale``.
    """

    __slots__ = ("key_scales", "keys", "value_scales", "values")

    def __init__(
        self,
        keys: torch.Tensor,
        key_scales: torch.Tensor,
        values: torch.Tensor,
        value_scales: torch.Tensor,
    ) -> None:
        if keys.dtype != torch.int8 or keys.shape != values.shape or keys.dim() != 4:
            raise ValueError(f"Int8KV: bad K/V {tuple(keys.shape)} {keys.dtype}")
        self.keys = keys  # [L, H, S, D] int8
        self.key_scales = key_scales  # [L, H, 1, D]
        self.values = values  # [L, H, S, D] int8
        self.value_scales = value_scales  # [L, H, S, 1]

    @classmethod
    @torch.inference_mode()
    def quantize(cls, keys: torch.Tensor, values: torch.Tensor) -> Int8KV:
        """Quantise float K/V ``[n_layers, n_kv_heads, span, head_dim]`` (a copy, always)."""
        k_q, k_scales = quantize_keys(keys)  # scales [L, H, D]: per channel over the span
        v_q, v_scales = quantize_values(values)  # scales [L, H, S]: per token
        return cls(k_q, k_scales.unsqueeze(2), v_q, v_scales.unsqueeze(3))

    def __len__(self) -> int:
        return int(self.keys.shape[2])

    def __repr__(self) -> str:
        return f"Int8KV(tokens={len(self)}, shape={tuple(self.keys.shape)})"

    @property
    def nbytes(self) -> int:
        """The real bytes held: int8 K and V plus both scales."""
        return sum(t.numel() * t.element_size() for t in self._tensors())

    def slice(self, start: int, stop: int) -> Int8KV:
        """Tokens ``[start, stop)``, a copy that keeps the span's K scales (no re-rounding)."""
        if not 0 <= start <= stop <= len(self):
            raise IndexError(f"Int8KV.slice({start}, {stop}) out of range 0..{len(self)}")
        k_scales = self.key_scales
        if k_scales.shape[2] != 1:
            k_scales = k_scales[:, :, start:stop]
        with torch.inference_mode():
            return Int8KV(
                self.keys[:, :, start:stop].clone(memory_format=torch.contiguous_format),
                k_scales.clone(memory_format=torch.contiguous_format),
                self.values[:, :, start:stop].clone(memory_format=torch.contiguous_format),
                self.value_scales[:, :, start:stop].clone(memory_format=torch.contiguous_format),
            )

    @torch.inference_mode()
    def write_into(self, keys_out: torch.Tensor, values_out: torch.Tensor) -> None:
        """Dequantise the first ``keys_out.shape[2]`` tokens into ``keys_out``/``values_out``."""
        n = keys_out.shape[2]  # keys_out: [L, H, n, D] in the request's dtype
        k_scales = self.key_scales if self.key_scales.shape[2] == 1 else self.key_scales[:, :, :n]
        keys_out.copy_(self.keys[:, :, :n] * k_scales.to(keys_out.dtype))
        values_out.copy_(self.values[:, :, :n] * self.value_scales[:, :, :n].to(values_out.dtype))

    def dequantize(self, dtype: torch.dtype = torch.float32) -> TensorKV:
        keys = torch.empty(self.keys.shape, dtype=dtype)
        values = torch.empty(self.values.shape, dtype=dtype)
        self.write_into(keys, values)
        return TensorKV(keys, values)

    def _tensors(self) -> tuple[torch.Tensor, ...]:
        return self.keys, self.key_scales, self.values, self.value_scales


def _scales(absmax: torch.Tensor) -> torch.Tensor:
    """absmax / 127, rounded to the stored dtype *before* quantising (so q · scale is exact)."""
    return (absmax.float() / 127.0).clamp_min(_MIN_SCALE).to(SCALE_DTYPE)


def _round(x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return (x.float() / scales.float()).round_().clamp_(-127, 127).to(torch.int8)
