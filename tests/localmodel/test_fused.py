"""RMSNorm layers as one fused op (``localmodel.fused``): swapped where they compute the same,
kept where they do not, and the model's logits unchanged."""

from __future__ import annotations

import copy

import torch
from torch import nn

from localmodel.fused import FusedRMSNorm, use_fused_norms
from localmodel.lean import original_layers
from localmodel.loader import LoadedModel


class GemmaStyleRMSNorm(nn.Module):
    """A norm that scales by ``1 + weight`` (as Gemma's does): not what the fused op computes."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(size))
        self.eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * (1.0 + self.weight)


def test_the_bundled_models_norms_are_fused_with_the_same_logits(bundled: LoadedModel) -> None:
    fused = [m for m in bundled.model.modules() if isinstance(m, FusedRMSNorm)]
    assert len(fused) == 30 * 2 + 1  # two a layer and the final one
    assert not any(type(m).__name__ == "LlamaRMSNorm" for m in bundled.model.modules())
    ids = bundled.tokenizer("The capital of France is", return_tensors="pt").input_ids
    # (transformers' layers, which call the norms: localmodel.lean's compute theirs in C)
    with torch.inference_mode(), original_layers(bundled.model):
        got = bundled.model(input_ids=ids).logits
        for module in fused:  # the same forward through transformers' own norm
            module.forward = _as_loaded(module)  # type: ignore[method-assign]
        try:
            want = bundled.model(input_ids=ids).logits
        finally:
            for module in fused:
                del module.forward
    assert (got - want).abs().max() < 1e-5


def test_a_norm_that_computes_otherwise_is_kept() -> None:
    model = nn.Sequential(GemmaStyleRMSNorm(64), nn.Linear(64, 8))
    with torch.no_grad():
        model[0].weight.normal_()
    before = copy.deepcopy(model)
    assert use_fused_norms(model) == 0
    assert isinstance(model[0], GemmaStyleRMSNorm)
    x = torch.randn(2, 64)
    assert torch.equal(model(x), before(x))


def _as_loaded(module: FusedRMSNorm):  # type: ignore[no-untyped-def]
    """transformers' own norm of the bundled model's class, on ``module``'s weight."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(module.shape[0], eps=module.eps)
    norm.weight = module.weight
    return norm.forward
