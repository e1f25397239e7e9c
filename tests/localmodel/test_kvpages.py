"""Pool pages in ``kv_dtype`` (``localmodel.pages`` with int8 or half-precision pages).

What must hold: an int8 page that one request filled holds exactly ``quantize_keys`` of its
K (per channel over the page) and ``quantize_values`` of its V (per token), and the partly
filled last page is read in full precision by its writer; a sealed partial page is shared
without changing what its writer reads; re-quantising what was dequantised changes no bit;
the pool holds ≥ 3.5× (int8) and 2× (half) the tokens of float32 in the same bytes; a warm
prefix hit shares pages; preemption, reclaim and the disk tier work on these pages; greedy
output agrees with float32 within a measured bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from bench.kv import measure_quality
from localmodel import Engine, SamplingParams
from localmodel.batch import Piece
from localmodel.disk import BreakEven
from localmodel.kv import KVLayout
from localmodel.kvquant import dequantize, quantize_keys, quantize_values
from localmodel.pages import PagedCache, PagePool
from prefix import RadixKey
from tests.localmodel.conftest import MakeEngine
from tests.localmodel.test_batch import _batched

NS = "smollm2|tenant-a"
GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
HALF = ("float16", "bfloat16")
LOW = ("int8", *HALF)


def _layout(layers: int = 2, heads: int = 2, dim: int = 8) -> KVLayout:
    return KVLayout(layers, heads, dim, torch.float32, torch.device("cpu"))


def _kv(n: int, seed: int = 0, layout: KVLayout | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random K/V ``[L, H, n, D]`` with an outlier K channel, as real K has."""
    layout = layout or _layout()
    gen = torch.Generator().manual_seed(seed)
    shape = (layout.n_layers, layout.n_kv_heads, n, layout.head_dim)
    keys, values = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    keys[..., 1] *= 20
    return keys, values


def _append(cache: PagedCache, keys: torch.Tensor, values: torch.Tensor) -> list[torch.Tensor]:
    """Feed K/V ``[L, H, n, D]`` through attention's write path; return what each layer
    reads back (``[H, length, D]`` K)."""
    start, n = cache.length, keys.shape[2]
    cache.reserve(n)
    out = [
        cache.append(i, k[None], v[None])[0][0]
        for i, (k, v) in enumerate(zip(keys, values, strict=True))
    ]
    cache.note_fed(range(start, start + n))
    return out


def _page_keys(pool: PagePool, page: int) -> tuple[torch.Tensor, torch.Tensor]:
    assert pool.key_scales is not None
    return pool.keys[:, :, page], pool.key_scales[:, :, page]  # [L, H, P, D], [L, H, D]


# ── int8 pages, no model ─────────────────────────────────────────────────────────────


def test_int8_pages_quantise_each_full_page_once_and_read_the_last_in_full_precision() -> None:
    layout = _layout()
    pool = PagePool(layout, n_pages=8, page_size=4, dtype=torch.int8)
    L, H, D, P = 2, 2, 8, 4
    assert pool.stats.dtype == "int8"
    assert pool.page_bytes == 2 * L * H * P * D + 2 * L * H * (D + P)  # int8 K, V + fp16 scales
    keys, values = _kv(10)
    cache = PagedCache(pool, capacity=32)
    _append(cache, keys[:, :, :3], values[:, :, :3])  # token by token and in chunks: same bits
    for t in range(3, 7):
        _append(cache, keys[:, :, t : t + 1], values[:, :, t : t + 1])
    read = _append(cache, keys[:, :, 7:], values[:, :, 7:])
    assert cache.table == [0, 1, 2]
    for page in (0, 1):  # full: exactly K quantised per channel over the page, in one go
        q, scales = quantize_keys(keys[:, :, page * P : page * P + P])
        assert torch.equal(_page_keys(pool, page)[0], q)
        assert torch.equal(_page_keys(pool, page)[1], scales)
    assert pool.value_scales is not None
    v_q, v_scales = quantize_values(values)  # V: per token, every token (the last page's too)
    assert torch.equal(pool.values[:, :, :3].reshape(L, H, 12, D)[:, :, :10], v_q)
    assert torch.equal(pool.value_scales[:, :, :3].reshape(L, H, 12)[:, :, :10], v_scales)
    for layer in range(L):
        assert torch.equal(read[layer][:, 8:], keys[layer][:, 8:])  # the partly filled page
        step = _page_keys(pool, 0)[1][layer].float().unsqueeze(1)  # [H, 1, D]
        assert ((read[layer][:, :4] - keys[layer][:, :4]).abs() <= step / 2 + 1e-6).all()
        assert not torch.equal(read[layer][:, :4], keys[layer][:, :4])  # it was rounded
        _, v = cache.read_layer(layer, 10)
        assert torch.equal(
            v[0], dequantize(v_q[layer], v_scales[layer].unsqueeze(-1), torch.float32)
        )


def test_requantising_dequantised_int8_gives_back_the_same_bits() -> None:
    keys, values = _kv(64, seed=3)
    keys[..., 2] *= 1e-6  # a channel below the smallest scale
    values[:, :, 5] = 0.0  # an all-zero token
    q, scales = quantize_keys(keys)
    assert torch.equal(quantize_keys(dequantize(q, scales.unsqueeze(-2), torch.float32))[0], q)
    v_q, v_scales = quantize_values(values)
    again = quantize_values(dequantize(v_q, v_scales.unsqueeze(-1), torch.float32))
    assert torch.equal(again[0], v_q) and torch.equal(again[1], v_scales)


def test_a_sealed_partial_page_is_shared_and_its_writer_still_gets_one_rounding() -> None:
    pool = PagePool(_layout(), n_pages=8, page_size=4, dtype=torch.int8)
    keys, values = _kv(8)
    writer = PagedCache(pool, capacity=16)
    _append(writer, keys[:, :, :6], values[:, :, :6])  # page 1 holds 2 of 4 tokens
    span = writer.view(6)  # sealed: those 2 tokens quantised with scales over them
    q, scales = quantize_keys(keys[:, :, 4:6])
    assert torch.equal(_page_keys(pool, 1)[0][:, :, :2], q)
    assert torch.equal(_page_keys(pool, 1)[1], scales)
    sealed = span.gather()[0].clone()

    reader = PagedCache(pool, capacity=16)  # a prefix hit on the span: the same pages
    reader.map_prefix([span], 6, range(6))
    assert reader.table == [0, 1] and pool.copied_pages == 0
    small = keys[:, :, 4:6].abs().amax(dim=2, keepdim=True) * 0.5  # within page 1's range
    _append(reader, small.expand(-1, -1, 2, -1).contiguous(), values[:, :, 6:8])  # CoW, fills
    assert pool.copied_pages == 1
    page = reader.table[1]
    assert torch.equal(_page_keys(pool, page)[0][:, :, :2], q)  # no re-rounding of tokens 4, 5

    read = _append(writer, keys[:, :, 6:8], values[:, :, 6:8])  # CoW again, then the page fills
    assert pool.copied_pages == 2 and writer.table[1] not in (1, page)
    full_q, full_scales = quantize_keys(keys[:, :, 4:8])  # from full precision, not the seal
    assert torch.equal(_page_keys(pool, writer.table[1])[0], full_q)
    assert torch.equal(_page_keys(pool, writer.table[1])[1], full_scales)
    assert torch.equal(
        read[0][:, 4:8], dequantize(full_q[0], full_scales[0].unsqueeze(1), torch.float32)
    )
    assert torch.equal(span.gather()[0], sealed)  # the span's page is intact
    for cache in (writer, reader):
        cache.release()
    del span
    assert pool.stats.used == 0


def test_truncating_into_a_full_int8_page_and_writing_again_reads_what_it_should() -> None:
    """``n > 1``: the cache goes back to the prompt, inside a page that a choice filled."""
    pool = PagePool(_layout(), n_pages=8, page_size=4, dtype=torch.int8)
    keys, values = _kv(12, seed=5)
    cache = PagedCache(pool, capacity=16)
    _append(cache, keys[:, :, :9], values[:, :, :9])
    cache.truncate(6)  # back into page 1, full and quantised
    read = _append(cache, keys[:, :, 9:10], values[:, :, 9:10])  # page 1 not full yet
    q, scales = quantize_keys(keys[:, :, 4:8])
    expected = dequantize(q, scales.unsqueeze(2), torch.float32)[:, :, :2]  # tokens 4, 5
    assert torch.equal(read[0][:, 4:6], expected[0])
    assert torch.equal(read[0][:, 6], keys[0][:, 9])  # the new one, full precision


@pytest.mark.parametrize("dtype", HALF)
def test_half_pages_convert_on_write_and_back_on_read(dtype: str) -> None:
    half = getattr(torch, dtype)
    pool = PagePool(_layout(), n_pages=8, page_size=4, dtype=half)
    assert pool.page_bytes * 2 == PagePool(_layout(), 8, 4).page_bytes
    assert pool.keys.dtype == half and pool.stats.dtype == dtype
    keys, values = _kv(10)
    cache = PagedCache(pool, capacity=16)
    read = _append(cache, keys, values)
    assert read[1].dtype == torch.float32
    assert torch.equal(read[1], keys[1].to(half).float())
    stored = cache.view(10).stored()  # what the disk tier writes: the pages' own dtype
    assert stored.keys.dtype == half and torch.equal(stored.values, values.to(half))


# ── the engine on int8 and half pages ────────────────────────────────────────────────


@pytest.mark.parametrize(("dtype", "ratio"), [("int8", 3.5), ("float16", 2.0), ("bfloat16", 2.0)])
def test_the_pool_holds_more_tokens_in_the_same_bytes(
    make_engine: MakeEngine, dtype: str, ratio: float
) -> None:
    fp32 = make_engine(kv_pool_bytes=64 * 2**20)
    low = make_engine(kv_pool_bytes=64 * 2**20, kv_dtype=dtype)
    assert fp32.pool is not None and low.pool is not None
    assert low.stats.pool is not None and low.stats.pool.dtype == dtype
    assert low.pool.n_pages * low.pool.page_bytes <= 64 * 2**20  # scales counted
    assert low.pool.n_pages / fp32.pool.n_pages >= ratio
    prompt = fp32.encode_chat([{"role": "user", "content": "Name three rivers in Europe."}])
    for engine in (fp32, low):
        engine.complete(
            engine.prepare(prompt, SamplingParams(temperature=0, max_tokens=4), namespace=NS)
        )
    a, b = fp32.prefix_cache.stats, low.prefix_cache.stats
    assert a.tokens == b.tokens > 20
    assert a.bytes / b.bytes >= ratio  # the tree's budget holds as many more tokens


@pytest.mark.parametrize("dtype", LOW)
def test_a_warm_prefix_hit_shares_low_precision_pages(
    make_engine: MakeEngine, tiny_model: Any, dtype: str
) -> None:
    engine = make_engine(tiny=tiny_model, kv_dtype=dtype)
    pool = engine.pool
    assert pool is not None and pool.dtype == getattr(torch, dtype)
    prompt = engine.encode_chat(
        [{"role": "user", "content": "Tell me about the sea and its ships."}]
    )
    first = engine.complete(engine.prepare(prompt, GREEDY, namespace=NS))
    assert pool.stats.used == pool.stats.cached > 0

    steps = engine.steps(engine.prepare(prompt, GREEDY, namespace=NS))
    piece = steps.send(None)
    assert isinstance(piece, Piece) and isinstance(piece.cache, PagedCache)
    spans = engine.prefix_cache.match(RadixKey(NS, prompt)).spans
    tree_pages = [p for s in spans for p in s.pages]  # type: ignore[attr-defined]
    n = len(prompt) - 1
    assert piece.cache.table == tree_pages[: -(-n // pool.page_size)]  # mapped, not copied
    copied = pool.copied_pages
    warm = engine.forward_batch([piece])[0]  # writes into the shared partly filled page
    assert pool.copied_pages == copied + (n % pool.page_size > 0)  # that page, and only it
    steps.close()
    del spans
    with torch.inference_mode():
        cold = engine.model(torch.tensor([prompt])).logits[0, -1]
    assert 0 < (warm - cold).abs().max().item() < 0.05  # low precision, but close
    again = engine.complete(engine.prepare(prompt, GREEDY, namespace=NS))
    assert again.usage.cached_tokens == n
    assert again.choices[0].token_ids == first.choices[0].token_ids
    engine.flush_prefix_cache()
    assert pool.stats.used == 0


def test_greedy_output_of_low_precision_pages_agrees_with_float32(engine: Engine) -> None:
    """bench.kv's measurement on 16 of its prompts: the tree's pages of each dtype mapped by
    a request that is fed the float32 engine's greedy answer (its KV in those pages too)."""
    rows = {r["kv_dtype"]: r for r in measure_quality(engine, n_prompts=16, n_answer=8)["rows"]}
    assert rows["float32"]["agreement"] == 1.0 and rows["float32"]["drift_max"] <= 1e-4  # exact
    assert rows["float16"]["agreement"] >= 0.99 and rows["float16"]["drift_max"] < 0.1
    assert rows["bfloat16"]["agreement"] >= 0.97 and rows["bfloat16"]["drift_max"] < 1.0
    assert rows["int8"]["agreement"] >= 0.97 and 0.01 < rows["int8"]["drift_max"] < 2.0


@pytest.mark.parametrize("dtype", ["int8", "float16"])
def test_low_precision_pages_preempt_reclaim_and_release_every_page(
    make_engine: MakeEngine, tiny_model: Any, dtype: str
) -> None:
    """Nine requests (shared prefixes, n = 2) through 10 pages, 4 at a time; then a request
    as large as the pool makes the tree give back its cached pages."""
    shared = list(range(500, 520))
    prompts = [shared[: 5 + 2 * i] + list(range(600 + 9 * i, 606 + 9 * i)) for i in range(9)]
    params = [
        SamplingParams(temperature=0.0, max_tokens=40 + 3 * (i % 3), n=1 + i % 2) for i in range(9)
    ]
    alone = make_engine(tiny=tiny_model, kv_dtype=dtype)
    expected = [
        alone.complete(alone.prepare(p, q, namespace=NS)).choices
        for p, q in zip(prompts, params, strict=True)
    ]
    page = PagePool.bytes_per_page(KVLayout.of(tiny_model), 16, getattr(torch, dtype))
    engine = make_engine(tiny=tiny_model, kv_dtype=dtype, kv_pool_bytes=10 * page)
    pool = engine.pool
    assert pool is not None and pool.n_pages == 10
    jobs = list(zip(prompts, params, strict=True))
    got = _batched(engine, jobs, max_batch=4, step_tokens=32)  # (every one Finished)
    assert pool.stats.preemptions >= 1
    tokens = [[c.token_ids for c in completion.choices] for completion in got]
    want = [[c.token_ids for c in choices] for choices in expected]
    if dtype == "float16":  # the same values whether kept, re-mapped or recomputed
        assert tokens == want
    else:  # a resumed request reads its last page as sealed (rounded): most choices equal
        same = sum(
            a == b for t, w in zip(tokens, want, strict=True) for a, b in zip(t, w, strict=True)
        )
        assert same >= 0.75 * sum(len(w) for w in want)
    assert pool.stats.used == pool.stats.cached  # every request released its pages
    cached = pool.stats.cached
    assert cached > 0
    evictions = engine.prefix_cache.stats.evictions
    big = list(range(10, 10 + 10 * 16 - 4))  # every page of the pool
    engine.complete(engine.prepare(big, SamplingParams(max_tokens=4), namespace="x"))
    assert engine.prefix_cache.stats.evictions > evictions  # the tree gave its pages back
    engine.flush_prefix_cache()
    assert pool.stats.used == 0


@pytest.mark.parametrize("dtype", ["int8", "bfloat16"])
def test_low_precision_pages_go_to_disk_and_come_back_bit_for_bit(
    make_engine: MakeEngine, tmp_path: Path, dtype: str
) -> None:
    engine = make_engine(
        kv_dtype=dtype,
        prefix_disk_dir=tmp_path,
        prefix_disk_bytes=2**30,
        break_even=BreakEven.fixed(1),
    )
    assert engine.disk is not None and engine.disk.codec.dtype == getattr(torch, dtype)
    messages = [{"role": "system", "content": "You answer in one short sentence. " * 6},
                {"role": "user", "content": "What is the capital of France?"}]  # fmt: skip
    prompt = engine.encode_chat(messages)
    n = len(prompt) - 1
    first = engine.complete(engine.prepare(prompt, GREEDY, namespace=NS))
    before = [_read_prefix(engine, prompt, n)]
    engine.prefix_cache.evict(engine.prefix_cache.stats.bytes)  # to disk
    engine.disk.tier.drain()
    assert engine.prefix_cache.stats.tokens == 0 and engine.disk.stats.tokens > n
    assert engine.pool is not None and engine.pool.stats.used == 0  # copied out: pages free
    after = _read_prefix(engine, prompt, n)  # loaded from disk into fresh pages
    assert engine.disk.hit_tokens == n
    for a, b in zip(before[0], after, strict=True):
        assert torch.equal(a, b)  # K and V every layer reads: the very values
    again = engine.complete(engine.prepare(prompt, GREEDY, namespace=NS))
    assert again.choices[0].token_ids == first.choices[0].token_ids


def _read_prefix(engine: Engine, prompt: list[int], n: int) -> list[torch.Tensor]:
    """What attention reads of the first ``n`` prompt tokens (every layer's K and V) once a
    request has matched and loaded its prefix (memory tree, then disk)."""
    steps = engine.steps(engine.prepare(prompt, GREEDY, namespace=NS))
    piece = steps.send(None)
    assert isinstance(piece, Piece) and isinstance(piece.cache, PagedCache)
    cache = piece.cache
    assert cache.length == n
    out = [t.clone() for layer in range(engine.layout.n_layers) for t in cache.read_layer(layer, n)]
    steps.close()
    return out
