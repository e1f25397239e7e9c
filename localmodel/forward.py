"""The forward passes over a request's KV cache: ``prefill`` and ``decode_one_token``.

A leaf module (it imports only ``localmodel.kv`` and ``localmodel.pages``) so that both the engine and the disk tier's
break-even measurement (``localmodel.disk``) use the same phases without importing each other.
"""

from __future__ import annotations

from typing import Any

import torch

from localmodel.kv import RequestCache
from localmodel.pages import PagedCache

__all__ = ["decode_one_token", "prefill"]


@torch.inference_mode()
def prefill(
    model: Any, cache: RequestCache | PagedCache, input_ids: torch.Tensor, start: int
) -> torch.Tensor:
    """Run ``input_ids`` (``[1, n]``) at positions ``start…start+n-1``; return the last logits.

    NOTE: ``start`` must equal ``cache.length``: the new tokens attend to every cached token
    and get the positions that follow them, exactly as in a cold prefill of the whole prompt.
    """
    if start != cache.length:
        raise ValueError(f"prefill at position {start} but the cache holds {cache.length} tokens")
    n = input_ids.shape[1]
    position_ids = torch.arange(start, start + n, device=input_ids.device)[None]  # [1, n]
    out = model(
        input_ids=input_ids,
        position_ids=position_ids,
        cache=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    return out.logits[0, -1]  # [vocab]; logits_to_keep=1 skips the lm_head for the others


@torch.inference_mode()
def decode_one_token(
    model: Any, cache: RequestCache | PagedCache, token: int, pos: int
) -> torch.Tensor:
    """Feed one token at position ``pos`` against the KV cache; return the next logits."""
    device = cache.device
    input_ids = torch.tensor([[token]], device=device)  # [1, 1]
    position_ids = torch.tensor([[pos]], device=device)  # [1, 1]
    out = model(input_ids=input_ids, position_ids=position_ids, cache=cache, use_cache=True)
    return out.logits[0, -1]  # [vocab]
