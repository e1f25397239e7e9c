"""How a CPU model's linear layers keep their weights (``weights``): packed, in float16,
bfloat16 or int8.

Decoding is a chain of matrix products over a few rows (one per running request), and on a
CPU each is bound by how fast the weights stream from memory: a profile of a float32 decode
step of the bundled model put 88% of it in ``aten::mm``, at ~12 GB/s. Every option swaps each
``nn.Linear`` of a float32 model by type (any architecture). ``weights: bfloat16``
(:class:`PackedLinear` in bfloat16) and ``weights: int8`` (:class:`Int8Linear`) are described
in their classes; the two that keep the most precision:

``weights: auto`` → :class:`NativeLinear` where cachegate's own kernel builds on this machine
(``localmodel.kernel``; each call split over torch's threads): each weight repacked once into
tiles the kernel streams at close to the memory's read speed, ~1.5× oneDNN's speed on a
single-stream decode step's products (1.9× the whole step), ~1.3× at 8 rows, on par on
prefill (at one thread); a row's product is bitwise the same alone or batched. Otherwise (no
C compiler) → :class:`PackedLinear`
(``weights: onednn``, where oneDNN is available): each weight prepacked once into oneDNN's
blocked layout. MKL's GEMM gets slower per row on 4–16 rows; oneDNN with packed weights is
~1.5× faster there (batched decode), ~1.2× at 64 rows and on par at one. Both: the same
arithmetic as float32 ``nn.Linear`` up to summation order.

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
the benchmark's teacher-forced tokens; ``bench/engine.py`` measures it) — the default
``weights: auto`` keeps the model's dtype, and a request's logits batched within summation
order of those alone (~4e-5 on the bundled model: attention over decodes of other lengths,
other prefill chunks).

Any decoder-only architecture works: the swap is by module type, not by layer names. The input
embedding table stays as loaded (one row is read per token); a tied ``lm_head`` gets its own
float16 copy.

Example::

    if can_use_native(model):
        use_native_weights(model)     # what the loader does for weights: auto
    elif can_pack(model):
        use_packed_weights(model)     # ... weights: onednn
    saved = use_half_weights(model)   # or, on a float32 model as loaded: weights: float16
    saved = use_int8_weights(model)   # ... weights: int8 (use_bfloat16_weights: bfloat16)
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from localmodel import kernel

__all__ = [
    "INT8_KERNEL_ROWS",
    "BFloat16Linear",
    "HalfLinear",
    "Int8Linear",
    "NativeLinear",
    "PackedLinear",
    "can_pack",
    "can_use_native",
    "in_use",
    "use_bfloat16_weights",
    "use_half_weights",
    "use_int8_weights",
    "use_native_weights",
    "use_packed_weights",
]

#: Largest weight widened at once (4 MiB of float32: every layer of the bundled model whole;
#: its 49152-row output layer in slices, so the scratch buffer stays small).
_SCRATCH_ELEMENTS = 2**20


class _StoredLinear(nn.Module):
    """What the layers that store a weight in another dtype share: the shape, the bias (in
    the model's dtype) and a scratch buffer to widen the weight into."""

    def __init__(self, linear: nn.Linear, scratch: _Scratch | None = None) -> None:
        super().__init__()
        self._scratch = scratch or _Scratch()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.bias = linear.bias  # None or [out]


class HalfLinear(_StoredLinear):
    """``nn.Linear`` with its weight stored in float16 and results in the input's dtype."""

    def __init__(self, linear: nn.Linear, scratch: _Scratch | None = None) -> None:
        super().__init__(linear, scratch)
        with torch.no_grad():
            weight = linear.weight.detach().to(torch.float16).contiguous()  # [out, in]
        self.weight16 = nn.Parameter(weight, requires_grad=False)

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
        return _widened_product(x, self.weight16, self._scratch)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, float16"


def _widened_product(x: torch.Tensor, weight: torch.Tensor, scratch: _Scratch) -> torch.Tensor:
    """``x @ weight.T`` with ``weight`` widened to ``x``'s dtype in ``scratch`` (in slices of
    output features for a large one, so the buffer stays in cache)."""
    rows = max(1, _SCRATCH_ELEMENTS // weight.shape[1])  # output features widened at once
    if rows >= weight.shape[0]:
        return F.linear(x, _widen(weight, x.dtype, scratch))
    # a large weight (an output layer over the vocabulary) is widened in slices
    out = x.new_empty((*x.shape[:-1], weight.shape[0]))
    for start in range(0, weight.shape[0], rows):
        out[..., start : start + rows] = F.linear(
            x, _widen(weight[start : start + rows], x.dtype, scratch)
        )
    return out


def _widen(weight: torch.Tensor, dtype: torch.dtype, scratch: _Scratch) -> torch.Tensor:
    return scratch.get(weight.numel(), dtype).view(weight.shape).copy_(weight)


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
    """``nn.Linear`` on oneDNN with its weight prepacked in oneDNN's blocked layout.

    In float32 (``weights: auto``): the same arithmetic as ``nn.Linear`` up to summation
    order (max |Δ| ~1e-5 a layer). MKL's GEMM is slow on the few rows a decode step has;
    measured over the bundled model's layers on this CPU, oneDNN with packed weights is 1.5×
    faster at 8–16 rows (batched decode), 1.2× at 64 (prefill chunks) and on par at one row.

    In bfloat16 (``weights: bfloat16``): the weight rounded to bfloat16 (8 significant bits)
    and the activations too, so oneDNN runs the product on the CPU's bfloat16 units (AMX on
    this CPU), accumulating in float32; the result comes back in the input's dtype and the
    bias is added there. Measured over one decoder layer of the bundled model: 1.3× faster
    than float32 packed at one row, 2–2.8× at 4–64 rows and 3.7× at 256 rows (prefill).
    """

    def __init__(self, linear: nn.Linear, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.dtype = dtype
        with torch.no_grad():  # NOTE: packed for 64 rows: measured as good at 1 to 256 rows
            weight = linear.weight.detach().to(dtype)
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, 64)
        self.bias = linear.bias  # None or [out], in the model's dtype

    @property
    def weight(self) -> torch.Tensor:
        """The packed weight (an opaque oneDNN tensor: dtype and shape ``[out, in]`` only)."""
        return self.packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == self.dtype:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        y = torch.ops.mkldnn._linear_pointwise(
            x.to(self.dtype), self.packed, None, "none", [], ""
        ).to(x.dtype)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        kind = "" if self.dtype == torch.float32 else f" {str(self.dtype).removeprefix('torch.')}"
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN{kind}"


class NativeLinear(nn.Module):
    """``nn.Linear`` in float32 on cachegate's own kernel (``localmodel.kernel``), its weight
    repacked once into tiles of 16 output features (the same bytes as the weight).

    Measured over the bundled model's 211 layers on this project's CPU, one thread: 1.5× the
    speed of :class:`PackedLinear` at one row (single-stream decode), 1.3× at 8 rows, on par
    at 16–256 rows (prefill). The same arithmetic as ``nn.Linear`` up to summation order
    (max |Δ| ~1e-5 a layer); each output sums its inputs in order, so a row's result does not
    depend on the rows computed with it. Any other input (not float32 on the CPU, or one
    that needs a gradient) is computed by ``F.linear`` on the unpacked weight.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if kernel.library() is None:
            raise ValueError("localmodel: the native linear kernel is not built here (see the log)")
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        with torch.no_grad():
            self.packed = nn.Parameter(kernel.pack(linear.weight.float()), requires_grad=False)
        self.bias = linear.bias  # None or [out], float32
        self.bias_data = _kernel_bias(self.bias)
        self.register_load_state_dict_post_hook(_derive_after_load)

    @property
    def weight(self) -> torch.Tensor:
        """The weight ``[out, in]`` (a copy unpacked from the tiles)."""
        return kernel.unpack(self.packed, self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lib, packed = kernel.library(), self.packed
        # (tiles that model.half() or .to() cast are not float32 tiles on the CPU: F.linear)
        usable = x.dtype is packed.dtype is torch.float32 and x.is_cpu and packed.is_cpu
        if not usable or x.requires_grad or lib is None or x.shape[-1] != self.in_features:
            bias = None if self.bias is None else self.bias.to(x.dtype)  # (F.linear says why)
            return F.linear(x, self.weight.to(x.dtype), bias)
        x = x if x.is_contiguous() else x.contiguous()
        return kernel.linear(lib, packed, x, self.out_features, self.bias_data)

    def _derive(self) -> None:
        self.bias_data = _kernel_bias(self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, native"


def _kernel_bias(bias: torch.Tensor | None) -> torch.Tensor | None:
    """The bias as the native kernel reads it (float32, contiguous): the same storage where it
    is one already. NOTE: a copy of the layer (deepcopy) gets a bias of its own."""
    return None if bias is None else bias.detach().float().contiguous()


def _derive_after_load(module: NativeLinear | Int8Linear, incompatible_keys: Any) -> None:
    """After ``load_state_dict``: what the kernel reads follows the loaded weight and bias (it
    kept the old ones: the int8 tiles are a copy, a copied layer's bias data its own)."""
    module._derive()


class Int8Linear(_StoredLinear):
    """``nn.Linear`` with a weight-only int8 weight: one symmetric scale per output feature.

    ``weight ≈ q * scale[:, None]`` with ``q`` in [-127, 127] (``scale = max |row| / 127``);
    a quarter of the float32 bytes, so a decode step reads a quarter. What it computes
    depends on how many rows come in:

    * **up to** :data:`INT8_KERNEL_ROWS` **rows** (decode steps, one stream or a batch),
      where cachegate's kernel is built (``localmodel.kernel``): the int8 weight in tiles of
      16 output features (a second copy of the int8 bytes), widened to float32 in registers
      and multiplied with float32 activations, the scales applied to each sum. Measured over
      the bundled model's 211 layers on this CPU: 10–11 ms at one row, 24 ms at 8, against
      23 and 58 ms for torch's kernel below (which rounds the activations to bfloat16).
      Where it is not built: torch's weight-only int8 kernel
      (``aten._weight_int8pack_mm``) on bfloat16 activations: the int8 weight is read as it is stored. Measured over one decoder
      layer of the bundled model on this CPU: 2.6× faster than float32 packed at one row,
      1.4× at 8, on par at 16. It is used only where it is checked at load to agree with
      the product it stands for (inner size a multiple of 16: on others it was seen to
      return garbage or crash); other layers always take the path below.
    * **more rows** (prefill chunks): ``q`` widened to bfloat16 into a scratch buffer (exact:
      bfloat16 holds every integer up to 256), a bfloat16 product (the CPU's bfloat16
      units), then the scales in float32: 1.3× faster than float32 packed at 64 rows, 2.4×
      at 256; the int8 kernel is 2–4× slower than float32 there.

    torch's paths round the activations to bfloat16 and return the input's dtype, with the
    bias added in it. Quality against float32 is measured in ``bench/engine.py``.
    """

    scale: torch.Tensor  # [out] float32 (a buffer)
    scale16: torch.Tensor  # [out] bfloat16, what the kernel takes

    def __init__(self, linear: nn.Linear, scratch: _Scratch | None = None) -> None:
        super().__init__(linear, scratch)
        with torch.no_grad():
            weight = linear.weight.detach().float()  # [out, in]
            scale = weight.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / 127
            q = torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8)
        self.weight8 = nn.Parameter(q.contiguous(), requires_grad=False)  # [out, in]
        self.register_buffer("scale", scale)  # [out], float32
        self.register_buffer("scale16", scale.to(torch.bfloat16))  # what the kernel takes
        self.kernel = _int8_kernel_agrees(self.weight8, self.scale16)
        self._derive()
        self.register_load_state_dict_post_hook(_derive_after_load)

    def _derive(self) -> None:
        """What the native kernel reads, from the weight and bias (again after a load)."""
        # the native kernel's int8 tiles (a second copy of the int8 bytes) where it is built
        self.tiles8: tuple[torch.Tensor, torch.Tensor] | None = None
        if kernel.library() is not None:
            self.tiles8 = kernel.pack_q8(self.weight8.detach(), self.scale)
        self.bias_data = _kernel_bias(self.bias)

    @property
    def weight(self) -> torch.Tensor:
        """The stored int8 weight ``[out, in]`` (what code that inspects ``.weight`` sees)."""
        return self.weight8

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [..., in] → [..., out]
        lib = kernel.library()
        if self.tiles8 is not None and lib is not None and _native_rows(x, self.in_features):
            x = x if x.is_contiguous() else x.contiguous()
            return kernel.linear_q8(lib, *self.tiles8, x, self.out_features, self.bias_data)
        flat = x.reshape(-1, self.in_features).to(torch.bfloat16)  # [rows, in]
        if self.kernel and flat.shape[0] <= INT8_KERNEL_ROWS:
            y = torch.ops.aten._weight_int8pack_mm(flat, self.weight8, self.scale16).to(x.dtype)
        else:
            y = _widened_product(flat, self.weight8, self._scratch).to(x.dtype)
            y = y * self.scale.to(x.dtype)
        y = y.view(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


#: Rows (tokens in one forward pass) up to which :class:`Int8Linear` runs the native int8
#: kernel (or else torch's); above, the widened bfloat16 product is faster (measured: on
#: par at 16 rows for torch's kernel; the native one ~3x faster at 16, ~10% slower at 64).
INT8_KERNEL_ROWS = 16


def _native_rows(x: torch.Tensor, in_features: int) -> bool:
    """Whether ``x`` goes to :class:`Int8Linear`'s native kernel: float32 on the CPU, no
    gradient, the layer's inner size, at most :data:`INT8_KERNEL_ROWS` rows."""
    if x.dtype is not torch.float32 or not x.is_cpu or x.requires_grad:
        return False
    return x.shape[-1] == in_features and x.numel() <= INT8_KERNEL_ROWS * in_features


def _int8_kernel_agrees(q: torch.Tensor, scale16: torch.Tensor) -> bool:
    """Whether ``aten._weight_int8pack_mm`` computes ``x @ (q * scale).T`` for this weight.

    Checked on a few random rows against the widened product: the kernel needs the inner
    size to be a multiple of 16 here (at 8, 24 and 40 it returned garbage, at 33 it crashed
    the process), and a torch build or CPU without it leaves every row on the widened path.
    """
    if q.shape[1] % 16 or not hasattr(torch.ops.aten, "_weight_int8pack_mm"):
        return False
    x = torch.randn(3, q.shape[1], generator=torch.Generator().manual_seed(0))
    x = x.to(torch.bfloat16)
    try:
        got = torch.ops.aten._weight_int8pack_mm(x, q, scale16).float()
    except (RuntimeError, NotImplementedError):
        return False
    want = (x.float() @ q.float().T) * scale16.float()
    return bool(torch.allclose(got, want, rtol=2e-2, atol=2e-2 * float(want.abs().max())))


def in_use(model: Any) -> str:
    """How ``model``'s linear layers keep their weights: ``"native"``, ``"onednn-packed"``,
    ``"onednn-packed bfloat16"``, ``"bfloat16"``, ``"int8"``, ``"float16"`` or
    ``"as loaded (<dtype>)"`` (what ``/admin/stats`` reports)."""
    for module in model.modules():
        if isinstance(module, NativeLinear):
            return "native"
        if isinstance(module, PackedLinear):
            return "onednn-packed" + ("" if module.dtype == torch.float32 else " bfloat16")
        if isinstance(module, BFloat16Linear):
            return "bfloat16"
        if isinstance(module, Int8Linear):
            return "int8"
        if isinstance(module, HalfLinear):
            return "float16"
    return f"as loaded ({str(next(model.parameters()).dtype).removeprefix('torch.')})"


def can_pack(model: Any) -> bool:
    """Whether :func:`use_packed_weights` applies: a float32 model on a CPU with oneDNN."""
    return _float32_on_cpu(model) and _onednn_works()


def can_use_native(model: Any) -> bool:
    """Whether :func:`use_native_weights` applies: a float32 model on a CPU, and the kernel
    built and checked on this machine (``localmodel.kernel.library``)."""
    return _float32_on_cpu(model) and kernel.library() is not None


def use_native_weights(model: Any) -> int:
    """Swap every ``nn.Linear`` of ``model`` for a :class:`NativeLinear`; return how many."""
    if not can_use_native(model):
        raise ValueError(
            "localmodel: weights: native needs a float32 model on the CPU and a C compiler "
            "(cc, or $CC) that builds localmodel/linear.c; the log says why it did not"
        )
    return len(_swap(model, NativeLinear))


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
    _need_float32_on_cpu(model, "float16")
    scratch = _Scratch()  # shared by the model's layers, which run one after another
    return _saved(_swap(model, lambda linear: HalfLinear(linear, scratch)), 2)


def use_int8_weights(model: Any) -> int:
    """Swap every ``nn.Linear`` of ``model`` (float32, on CPU) for an :class:`Int8Linear`.

    Returns how many bytes of weights a decode step no longer reads (the scales, 4 + 2 bytes
    per output feature, are counted as read). Raises ValueError like :func:`use_half_weights`.
    """
    _need_float32_on_cpu(model, "int8")
    scratch = _Scratch()
    swapped = _swap(model, lambda linear: Int8Linear(linear, scratch))
    return _saved(swapped, 1) - sum(6 * linear.out_features for linear in swapped)


def use_bfloat16_weights(model: Any) -> int:
    """Swap every ``nn.Linear`` of ``model`` (float32, on CPU) for a bfloat16 one: a
    :class:`PackedLinear` in bfloat16 where oneDNN runs bfloat16 on this CPU, else a
    :class:`BFloat16Linear`. Returns the bytes a decode step no longer reads."""
    _need_float32_on_cpu(model, "bfloat16")
    if _onednn_works() and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return _saved(_swap(model, lambda linear: PackedLinear(linear, torch.bfloat16)), 2)
    return _saved(_swap(model, BFloat16Linear), 2)


class BFloat16Linear(_StoredLinear):
    """``nn.Linear`` in bfloat16 without oneDNN (``weights: bfloat16`` on a CPU that oneDNN
    does not run bfloat16 on): the weight and the activations in bfloat16, the result and
    the bias in the input's dtype."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__(linear)
        with torch.no_grad():
            weight = linear.weight.detach().to(torch.bfloat16).contiguous()
        self.weight = nn.Parameter(weight, requires_grad=False)  # [out, in]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x.to(torch.bfloat16), self.weight).to(x.dtype)
        return y if self.bias is None else y + self.bias


def _need_float32_on_cpu(model: Any, setting: str) -> None:
    if not _float32_on_cpu(model):
        param = next(model.parameters())
        raise ValueError(
            f"localmodel: weights: {setting} needs a float32 model on the CPU "
            f"(got {str(param.dtype).removeprefix('torch.')} on {param.device}); "
            "on a GPU use dtype: bfloat16"
        )


def _saved(swapped: list[nn.Linear], stored_bytes: int) -> int:
    """Bytes of float32 weights no longer read when each is stored in ``stored_bytes``."""
    return sum(linear.weight.numel() * (linear.weight.element_size() - stored_bytes)
               for linear in swapped)  # fmt: skip


def _swap(model: Any, make: Any) -> list[nn.Linear]:
    """Replace every ``nn.Linear`` (exactly: subclasses may compute otherwise) with ``make(it)``."""
    swapped = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, make(child))
                swapped.append(child)
    return swapped
