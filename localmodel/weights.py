"""How a CPU model's linear layers keep their weights (``weights``): packed, or in float16.

Decoding is a chain of matrix products over a few rows (one per running request), and on a
CPU each is bound by how fast the weights stream from memory: a profile of a float32 decode
step of the bundled model put 88% of it in ``aten::mm``, at ~12 GB/s. Both options swap every
``nn.Linear`` of a float32 model by type (any architecture):

``weights: auto`` → :class:`PackedLinear` (where oneDNN is available): each weight is
prepacked once into oneDNN's blocked layout. MKL's GEMM gets slower per row on 4–16 rows;
oneDNN with packed weights is ~1.5× faster there (batched decode), ~1.2× at 64 rows and on
par at one. Same arithmetic up to summation order.

``weights: float16`` → :class:`HalfLinear`: the weight is kept in float16, so decode reads
half the bytes. What it computes depends on how many rows come in:

* **one row** (a single-stream decode step): float16 activations against the float16 weight
  (MKL's half-precision GEMV; accumulated in float32), the result back in float32. Measured on
  this project's 2-core CPU: the bundled model's linear layers take ~14 ms a token instead of
  ~37 ms in float32. If the float16 result is not finite (an activation past float16's range,
  ±65504), that row is recomputed the other way;
* **several rows** (prefill, batched decode): the weight is widened to float32 into a scratch
  buffer (a copy that stays in cache) and multiplied in float32: CPU float16 GEMM runs per
  row and is ~4× slower than float32 at 64 rows. Measured over the bundled model's layers,
  this is 1.2–1.4× faster than the float32 weights up to 16 rows (batched decode), and as fast
  at 64 and 256 (prefill).
  NOTE: the buffer is reused (one per thread, up to 4 MiB; larger weights are widened in
  slices of output features): a fresh 3.5 MB tensor per call was sometimes mapped afresh by
  malloc, and its page faults made the layers ~4× slower than float32.

Norms, attention, RoPE, residuals and the KV cache stay float32; only the stored weights are
rounded to float16 (relative error ≤ 2⁻¹¹). The two paths round differently, so a request's
logits depend slightly on whether it ran alone or batched (greedy tokens agreed on 99.9% of
the benchmark's teacher-forced tokens; ``bench/engine.py`` measures it) — the default ``weights: auto`` keeps the
model's dtype and batched output identical to the same request alone.

Any decoder-only architecture works: the swap is by module type, not by layer names. The input
embedding table stays as loaded (one row is read per token); a tied ``lm_head`` gets its own
float16 copy.

Example::

    if can_pack(model):
        use_packed_weights(model)     # what the loader does for weights: auto
    saved = use_half_weights(model)   # or, on a float32 model as loaded: weights: float16
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "HalfLinear",
    "PackedLinear",
    "can_pack",
    "in_use",
    "use_half_weights",
    "use_packed_weights",
]

#: Largest weight widened at once (4 MiB of float32: every layer of the bundled model whole;
#: its 49152-row output layer in slices, so the scratch buffer stays small).
_SCRATCH_ELEMENTS = 2**20


class HalfLinear(nn.Module):
    """``nn.Linear`` with its weight stored in float16 and results in the input's dtype."""

    def __init__(self, linear: nn.Linear, scratch: _Scratch | None = None) -> None:
        super().__init__()
        self._scratch = scratch or _Scratch()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        with torch.no_grad():
            weight = linear.weight.detach().to(torch.float16).contiguous()  # [out, in]
        self.weight16 = nn.Parameter(weight, requires_grad=False)
        self.bias = linear.bias  # None or [out], kept in the model's dtype

    @property
    def weight(self) -> torch.Tensor:
        """The stored float16 weight ``[out, in]`` (what code that inspects ``.weight`` sees)."""
        return self.weight16

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [..., in] → [..., out]
        if x.numel() == x.shape[-1]:  # one row: the half-precision GEMV reads half the bytes
            y = F.linear(x.to(torch.float16), self.weight16)
            # NOTE: one reduction tells an inf/nan apart (finite halves sum finite in float32)
            finite = math.isfinite(y.sum(dtype=torch.float32).item())
            y = y.to(x.dtype) if finite else self._widened(x)
        else:
            y = self._widened(x)
        return y if self.bias is None else y + self.bias

    def _widened(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight16  # [out, in]
        rows = max(1, _SCRATCH_ELEMENTS // weight.shape[1])  # output features widened at once
        if rows >= weight.shape[0]:
            return F.linear(x, self._widen(weight, x.dtype))
        # a large weight (an output layer over the vocabulary) is widened in slices
        out = x.new_empty((*x.shape[:-1], weight.shape[0]))
        for start in range(0, weight.shape[0], rows):
            out[..., start : start + rows] = F.linear(
                x, self._widen(weight[start : start + rows], x.dtype)
            )
        return out

    def _widen(self, weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self._scratch.get(weight.numel(), dtype).view(weight.shape).copy_(weight)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, float16"


class _Scratch(threading.local):
    """A buffer per thread for widened weights (each engine runs its model on one thread)."""

    def __init__(self) -> None:
        self.buffer = torch.empty(0)

    def __deepcopy__(self, memo: dict[int, Any]) -> _Scratch:
        return _Scratch()  # (a copied model gets buffers of its own)

    def get(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        if self.buffer.numel() < numel or self.buffer.dtype != dtype:
            self.buffer = torch.empty(numel, dtype=dtype)
        return self.buffer[:numel]


class PackedLinear(nn.Module):
    """``nn.Linear`` on oneDNN with its float32 weight prepacked in oneDNN's blocked layout.

    Same arithmetic as ``nn.Linear`` up to summation order (max |Δ| ~1e-5 a layer). MKL's
    GEMM is slow on the few rows a decode step has; measured over the bundled model's layers
    on this CPU, oneDNN with packed weights is 1.5× faster at 8–16 rows (batched decode),
    1.2× at 64 (prefill chunks) and on par at one row.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        with torch.no_grad():  # NOTE: packed for 64 rows: measured as good at 1 to 256 rows
            self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), 64)
        self.bias = linear.bias  # None or [out]

    @property
    def weight(self) -> torch.Tensor:
        """The packed weight (an opaque oneDNN tensor: dtype and shape ``[out, in]`` only)."""
        return self.packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN"


def in_use(model: Any) -> str:
    """How ``model``'s linear layers keep their weights: ``"onednn-packed"``, ``"float16"``
    or ``"as loaded (<dtype>)"`` (what ``/admin/stats`` reports)."""
    kinds = {type(m) for m in model.modules()}
    if PackedLinear in kinds:
        return "onednn-packed"
    if HalfLinear in kinds:
        return "float16"
    return f"as loaded ({str(next(model.parameters()).dtype).removeprefix('torch.')})"


def can_pack(model: Any) -> bool:
    """Whether :func:`use_packed_weights` applies: a float32 model on a CPU with oneDNN."""
    return _float32_on_cpu(model) and _onednn_works()


def _float32_on_cpu(model: Any) -> bool:
    param = next(model.parameters())
    return param.dtype == torch.float32 and param.device.type == "cpu"


@functools.cache
def _onednn_works() -> bool:
    """Whether this torch build packs and multiplies (a build without oneDNN, or a CPU it
    does not support, keeps the weights as loaded instead of failing the model's load)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(torch.ones(8, 8), 64)
        out = torch.ops.mkldnn._linear_pointwise(torch.ones(2, 8), packed, None, "none", [], "")
    except (RuntimeError, AttributeError):
        return False
    return bool(torch.equal(out, torch.full((2, 8), 8.0)))


def use_packed_weights(model: Any) -> int:
    """Swap every ``nn.Linear`` of ``model`` for a :class:`PackedLinear`; return how many."""
    if not can_pack(model):
        raise ValueError("localmodel: packed weights need a float32 model on a CPU with oneDNN")
    return len(_swap(model, PackedLinear))


def use_half_weights(model: Any) -> int:
    """Swap every ``nn.Linear`` of ``model`` (float32, on CPU) for a :class:`HalfLinear`.

    Returns how many bytes of weights a decode step no longer reads. Raises ValueError for a
    model that is not float32 on a CPU (on a GPU, run the model in bfloat16 instead).
    """
    if not _float32_on_cpu(model):
        param = next(model.parameters())
        raise ValueError(
            "localmodel: weights: float16 needs a float32 model on the CPU "
            f"(got {str(param.dtype).removeprefix('torch.')} on {param.device}); "
            "on a GPU use dtype: bfloat16"
        )
    scratch = _Scratch()  # shared by the model's layers, which run one after another
    swapped = _swap(model, lambda linear: HalfLinear(linear, scratch))
    return sum(linear.weight.numel() * (linear.weight.element_size() - 2) for linear in swapped)


def _swap(model: Any, make: Any) -> list[nn.Linear]:
    """Replace every ``nn.Linear`` (exactly: subclasses may compute otherwise) with ``make(it)``."""
    swapped = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, make(child))
                swapped.append(child)
    return swapped
