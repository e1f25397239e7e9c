"""RMSNorm layers as one fused op (``torch.nn.functional.rms_norm``), where it computes the same.

A decoder layer's RMSNorm, as transformers writes it for Llama-shaped models (Llama, Qwen2,
SmolLM2, Mistral, …), is seven tensor ops: widen, square, mean, add, rsqrt, multiply, scale.
On a single-stream CPU decode step each op is a few microseconds of dispatch on a one-row
input, ~60 norms a step: measured for the bundled model's norm on this project's CPU, 29 µs
against 53 µs a call under load, ~1.5 ms of a ~30 ms step. ``F.rms_norm`` computes the same
``weight * x / sqrt(mean(x²) + eps)`` in one op.

The swap is by checking, not by name: a module whose class name ends in ``RMSNorm`` with a
1-d ``weight`` and an ``eps`` (``variance_epsilon`` or ``eps``) is replaced only if, on a
random input in the model's dtype, its output equals the fused op's to float32 rounding
(architectures whose norm scales by ``1 + weight``, as Gemma's does, keep theirs).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["FusedRMSNorm", "use_fused_norms"]


class FusedRMSNorm(nn.Module):
    """``weight * x / sqrt(mean(x², last dim) + eps)`` as one ``F.rms_norm`` call."""

    def __init__(self, weight: nn.Parameter, eps: float) -> None:
        super().__init__()
        self.weight = weight  # (the same Parameter as the module it replaces)
        self.eps = eps
        self.shape = (weight.shape[0],)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.shape}, eps={self.eps}, fused"


def use_fused_norms(model: Any) -> int:
    """Replace each RMSNorm of ``model`` that :class:`FusedRMSNorm` computes the same;
    return how many were replaced."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            fused = _fused(child)
            if fused is not None:
                setattr(parent, name, fused)
                swapped += 1
    return swapped


def _fused(module: nn.Module) -> FusedRMSNorm | None:
    if not type(module).__name__.endswith("RMSNorm"):
        return None
    weight = getattr(module, "weight", None)
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if not isinstance(weight, nn.Parameter) or weight.dim() != 1 or not isinstance(eps, float):
        return None
    fused = FusedRMSNorm(weight, eps)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, weight.shape[0], generator=generator).to(weight.dtype).to(weight.device)
    with torch.no_grad():
        want, got = module(x), fused(x)
    if want.shape != got.shape or want.dtype != got.dtype:
        return None
    close = torch.allclose(got.float(), want.float(), rtol=1e-6, atol=1e-6)
    return fused if close else None
