"""TensorKV, RequestCache and the prefill/decode phases on a tiny random Llama."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import DynamicCache

from localmodel.engine import decode_one_token, prefill
from localmodel.kv import KVLayout, RequestCache, TensorKV


def _kv(n: int, start: float = 0.0) -> TensorKV:
    keys = torch.arange(n, dtype=torch.float32).add(start).view(1, 1, n, 1).expand(2, 3, n, 4)
    return TensorKV(keys.contiguous(), (-keys).contiguous())  # [2 layers, 3 heads, n, 4]


def _cold_logits(model: Any, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        out = model(torch.tensor([tokens]), cache=DynamicCache(config=model.config), use_cache=True)
    return out.logits[0, -1]


def test_tensor_kv_len_nbytes_and_slice_is_an_independent_copy() -> None:
    kv = _kv(10)
    assert len(kv) == 10
    assert kv.nbytes == 2 * 2 * 3 * 10 * 4 * 4
    part = kv.slice(2, 5)
    assert len(part) == 3 and part.keys.is_contiguous()
    assert part.keys[0, 0, :, 0].tolist() == [2.0, 3.0, 4.0]
    whole = kv.slice(0, 10)  # already contiguous: must still be a copy
    assert whole.keys.data_ptr() != kv.keys.data_ptr()
    with pytest.raises(IndexError):
        kv.slice(5, 11)


def test_request_cache_loads_spans_views_and_truncates(tiny_model: Any) -> None:
    layout = KVLayout.of(tiny_model)
    cache = RequestCache.allocate(layout, capacity=16)
    a = TensorKV(torch.randn(2, 2, 4, 16), torch.randn(2, 2, 4, 16))
    b = TensorKV(torch.randn(2, 2, 6, 16), torch.randn(2, 2, 6, 16))
    cache.load([a, b], 7)  # the last span reaches past the match: only 3 of its 6 tokens
    assert cache.length == cache.get_seq_length() == 7
    view = cache.view(7)
    assert torch.equal(view.keys[:, :, :4], a.keys)
    assert torch.equal(view.values[:, :, 4:7], b.values[:, :, :3])
    assert view.keys.data_ptr() == cache.key_buf.data_ptr()  # a view, not a copy
    cache.truncate(2)
    assert cache.length == 2 and cache.view(2).keys.shape == (2, 2, 2, 16)
    with pytest.raises(ValueError):
        cache.load([a], 5)  # spans cover 4 < 5
    with pytest.raises(ValueError):
        cache.view(3)


def test_layout_bytes_per_token(tiny_model: Any, bundled: Any) -> None:
    assert KVLayout.of(tiny_model).bytes_per_token == 2 * 2 * 2 * 16 * 4
    assert KVLayout.of(bundled.model).bytes_per_token == 46_080  # 30 layers · 2 · 3 · 64 · 4


def test_warm_prefill_equals_cold_prefill_on_tiny_model(tiny_model: Any) -> None:
    torch.manual_seed(1)
    tokens = torch.randint(10, 1000, (40,)).tolist()
    layout = KVLayout.of(tiny_model)
    first = RequestCache.allocate(layout, capacity=40)
    prefill(tiny_model, first, torch.tensor([tokens[:25]]), start=0)
    span = first.view(25).slice(0, 25)  # what the tree would keep

    warm = RequestCache.allocate(layout, capacity=40)
    warm.load([span], 25)
    warm_logits = prefill(tiny_model, warm, torch.tensor([tokens[25:]]), start=25)
    assert (warm_logits - _cold_logits(tiny_model, tokens)).abs().max() <= 1e-5


def test_decode_one_token_matches_full_recompute(tiny_model: Any) -> None:
    tokens = [5, 17, 300, 42, 9]
    cache = RequestCache.allocate(KVLayout.of(tiny_model), capacity=12)
    logits = prefill(tiny_model, cache, torch.tensor([tokens]), start=0)
    for _ in range(6):
        token = int(logits.argmax())
        assert (logits - _cold_logits(tiny_model, tokens)).abs().max() <= 1e-5
        logits = decode_one_token(tiny_model, cache, token, pos=len(tokens))
        tokens.append(token)
        assert cache.length == len(tokens)
    with pytest.raises(RuntimeError, match="overflow"):
        prefill(tiny_model, cache, torch.tensor([[1, 2]]), start=cache.length)
