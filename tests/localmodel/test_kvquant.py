"""KV in a smaller dtype (``kv_dtype``): int8 error bounds, byte accounting, the disk tier's
round trip, and greedy answers of the bundled model from an int8 prefix.

The engine tests here read the tree's int8 prefix into contiguous buffers and through the
disk tier; int8 and half-precision *pages* themselves are tested in ``test_kvpages.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from localmodel import Engine, EngineConfig, SamplingParams
from localmodel.disk import BreakEven, RowCodec
from localmodel.engine import prefill
from localmodel.kv import KVLayout, RequestCache, TensorKV
from localmodel.kvquant import Int8KV, resolve_kv_dtype
from prefix import KVSpan, RadixKey
from tests.localmodel.conftest import MakeEngine

NS = "smollm2|tenant-a"
GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
SYSTEM = "You are a helpful assistant for a hardware store. Answer in one short sentence. " * 4
QUESTIONS = ("What is a hammer for?", "Where are the screws?", "What is the capital of France?")


def _kv(layers: int = 3, heads: int = 2, n: int = 20, dim: int = 8, seed: int = 0) -> TensorKV:
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(layers, heads, n, dim, generator=gen)
    keys[:, :, :, 1] *= 30  # an outlier channel, as K has: per-channel scales absorb it
    keys[:, :, :, 2] += 5  # and an offset one
    values = torch.randn(layers, heads, n, dim, generator=gen) * torch.rand(1, 1, n, 1) * 4
    return TensorKV(keys, values)


def test_int8_round_trip_error_is_within_half_a_step_per_channel_and_token() -> None:
    kv = _kv()
    q = Int8KV.quantize(kv.keys, kv.values)
    back = q.dequantize()
    k_step = q.key_scales.float()  # [L, H, 1, D]: one step per channel
    v_step = q.value_scales.float()  # [L, H, S, 1]: one step per token
    assert ((back.keys - kv.keys).abs() <= k_step * 0.5 + 1e-6).all()
    assert ((back.values - kv.values).abs() <= v_step * 0.5 + 1e-6).all()
    # the steps are tight: absmax / 127 of each channel (K) and each token (V)
    assert torch.allclose(k_step * 127, kv.keys.abs().amax(dim=2, keepdim=True), rtol=1e-3)
    assert torch.allclose(v_step * 127, kv.values.abs().amax(dim=3, keepdim=True), rtol=1e-3)
    # the outlier channel does not cost the others their precision
    assert (back.keys[..., 0] - kv.keys[..., 0]).abs().max() < 0.05


def test_int8_slice_keeps_the_span_scales_and_nbytes_counts_them() -> None:
    q = Int8KV.quantize(_kv().keys, _kv().values)
    part = q.slice(5, 12)
    assert len(part) == 7 and part.keys.data_ptr() != q.keys.data_ptr()
    assert torch.equal(part.dequantize().keys, q.dequantize().keys[:, :, 5:12])  # no re-rounding
    assert torch.equal(part.dequantize().values, q.dequantize().values[:, :, 5:12])
    # int8 K and V, float16 scales: K per channel (per span), V per token
    assert part.nbytes == 2 * 3 * 2 * 7 * 8 + 2 * (3 * 2 * 8) + 2 * (3 * 2 * 7)
    with pytest.raises(IndexError):
        q.slice(3, 21)


def test_kv_dtype_names_resolve_or_are_refused() -> None:
    assert resolve_kv_dtype("auto", torch.float32) == torch.float32
    assert resolve_kv_dtype("int8", torch.float32) == torch.int8
    with pytest.raises(ValueError, match="kv_dtype"):
        resolve_kv_dtype("int4", torch.float32)
    with pytest.raises(ValueError, match="kv_dtype"):
        EngineConfig(kv_dtype="fp8")


def test_request_cache_loads_int8_and_half_spans_dequantised() -> None:
    layout = KVLayout(3, 2, 8, torch.float32, torch.device("cpu"))
    kv = _kv()
    spans = [Int8KV.quantize(kv.keys[:, :, :9], kv.values[:, :, :9]),
             TensorKV(kv.keys[:, :, 9:].bfloat16(), kv.values[:, :, 9:].bfloat16())]  # fmt: skip
    cache = RequestCache.allocate(layout, 24)
    cache.load(spans, 15)
    view = cache.view(15)
    assert view.keys.dtype == torch.float32
    assert torch.equal(view.keys[:, :, :9], spans[0].dequantize().keys)
    assert torch.equal(view.values[:, :, 9:15], kv.values[:, :, 9:15].bfloat16().float())


def test_int8_rows_round_trip_spans_with_different_scales_bit_for_bit() -> None:
    layout = KVLayout(3, 2, 8, torch.float32, torch.device("cpu"))
    codec = RowCodec(layout, torch.int8)
    a, b = _kv(n=6, seed=1), _kv(n=9, seed=2)
    spans: list[KVSpan] = [Int8KV.quantize(a.keys * 3, a.values), Int8KV.quantize(b.keys, b.values)]
    rows = codec.encode(spans, 2, 13)  # the end of span 1, most of span 2
    assert rows.shape == (11, codec.bytes_per_token)
    elements = 3 * 2 * 8
    assert codec.bytes_per_token == 2 * elements + 2 * 3 * 2 + 2 * elements  # + K scales per row
    cache = RequestCache.allocate(layout, 16)
    cache.load(spans, 2)
    codec.decode_into(cache, rows, 2)
    expected = RequestCache.allocate(layout, 16)
    expected.load(spans, 13)
    assert torch.equal(cache.view(13).keys, expected.view(13).keys)
    assert torch.equal(cache.view(13).values, expected.view(13).values)


def test_half_rows_of_a_float32_model_round_trip() -> None:
    layout = KVLayout(3, 2, 8, torch.float32, torch.device("cpu"))
    codec = RowCodec(layout, torch.bfloat16)
    assert codec.bytes_per_token == layout.bytes_per_token // 2
    kv = _kv()
    span = TensorKV(kv.keys.bfloat16(), kv.values.bfloat16())
    cache = RequestCache.allocate(layout, 20)
    codec.decode_into(cache, codec.encode([span], 0, 20), 0)
    assert torch.equal(cache.view(20).keys, span.keys.float())


# ── the bundled model ─────────────────────────────────────────────────────────────────


def _prompt(engine: Engine, question: str) -> list[int]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    return engine.encode_chat(messages)


def test_int8_prefix_logits_stay_close_to_float32(make_engine: MakeEngine) -> None:
    engine = make_engine(kv_dtype="int8")
    prompt = _prompt(engine, QUESTIONS[1])
    engine.complete(engine.prepare(prompt, GREEDY, namespace=NS))
    match = engine.prefix_cache.match(RadixKey(NS, prompt))
    assert match.n_cached == len(prompt) - 1
    cache = RequestCache.allocate(engine.layout, len(prompt))
    cache.load(match.spans, match.n_cached)
    warm = prefill(engine.model, cache, torch.tensor([prompt[-1:]]), start=match.n_cached)
    with torch.inference_mode():
        cold = engine.model(torch.tensor([prompt])).logits[0, -1]
    drift = (warm - cold).abs().max().item()
    assert 0 < drift < 0.5  # int8 is not float32, but close (make bench measures it at scale)
    assert warm.argmax() == cold.argmax()


def test_int8_prefix_goes_to_disk_and_comes_back(make_engine: MakeEngine, tmp_path: Path) -> None:
    engine = make_engine(
        kv_dtype="int8",
        prefix_disk_dir=tmp_path,
        prefix_disk_bytes=2**30,
        break_even=BreakEven.fixed(1),
    )
    prompt = _prompt(engine, QUESTIONS[2])
    first = engine.complete(engine.prepare(prompt, GREEDY, namespace=NS))
    assert engine.disk is not None and engine.disk.codec.dtype == torch.int8
    engine.prefix_cache.evict(engine.prefix_cache.stats.bytes)  # to disk
    engine.disk.tier.drain()
    assert engine.prefix_cache.stats.tokens == 0 and engine.disk.stats.tokens > 80
    again = engine.complete(engine.prepare(prompt, GREEDY, namespace=NS))
    assert again.usage.cached_tokens == len(prompt) - 1  # all from disk
    assert engine.disk.hit_tokens == len(prompt) - 1
    assert again.choices[0].token_ids == first.choices[0].token_ids
