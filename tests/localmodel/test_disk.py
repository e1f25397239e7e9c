"""The disk tier behind the engine: prefixes the memory tree evicts come back from disk.

The invariant is the memory tree's: KV re-loaded from disk gives the logits of a cold full
prefill (float32, max abs diff ≤ 1e-4), so greedy answers are identical. The bundled
SmolLM2 checks that; the tiny random Llama checks the plumbing (budgets, drops, tenants,
damaged files) in milliseconds.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from localmodel import Completion, Engine, EngineConfig, SamplingParams
from localmodel.disk import BreakEven, RowCodec
from localmodel.engine import prefill
from localmodel.kv import KVLayout, RequestCache, TensorKV
from prefix import KVSpan, RadixCache, RadixKey
from tests.localmodel.conftest import MakeEngine

NS = "smollm2|tenant-a"
ONE = BreakEven.fixed(1)  # skips the ~1 s measurement; one test below measures for real
GREEDY = SamplingParams(temperature=0.0, max_tokens=4)
DOC = (
    "Cachegate keeps the keys and values of prompt prefixes in a radix tree, and what the "
    "tree must drop goes to disk, where reading it back beats computing it again. "
) * 3


def _chat(engine: Engine, system: str, user: str) -> list[int]:
    return engine.encode_chat(
        [{"role": "system", "content": system}, {"role": "user", "content": user}]
    )


def _run(engine: Engine, tokens: Sequence[int], ns: str = NS) -> Completion:
    return engine.complete(engine.prepare(tokens, GREEDY, namespace=ns))


def _disk_engine(make_engine: MakeEngine, directory: Path, **kw: Any) -> Engine:
    kw.setdefault("break_even", ONE)
    kw.setdefault("prefix_disk_bytes", 2**30)
    return make_engine(prefix_disk_dir=directory, **kw)


def _offload_all(engine: Engine) -> None:
    """Evict every memory node (by budget, so they go to disk) and wait for the writer."""
    assert engine.disk is not None
    engine.prefix_cache.evict(engine.prefix_cache.stats.bytes)
    engine.disk.tier.drain()
    assert engine.prefix_cache.stats.tokens == 0


def _files(engine: Engine) -> dict[Path, int]:
    assert engine.disk is not None
    return {p: p.stat().st_size for p in engine.disk.tier.directory.iterdir()}


# ── the row format ────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_codec_round_trips_a_token_range_across_spans(dtype: torch.dtype) -> None:
    layout = KVLayout(n_layers=3, n_kv_heads=2, head_dim=4, dtype=dtype, device=torch.device("cpu"))
    codec = RowCodec(layout)
    spans: list[KVSpan] = [
        TensorKV(torch.randn(3, 2, n, 4).to(dtype), torch.randn(3, 2, n, 4).to(dtype))
        for n in (5, 7)
    ]
    rows = codec.encode(spans, 3, 10)  # the end of span 1, most of span 2
    assert rows.dtype == np.uint8 and rows.shape == (7, layout.bytes_per_token)
    cache = RequestCache.allocate(layout, 12)
    cache.load(spans, 3)  # as if memory held [0, 3)
    codec.decode_into(cache, rows, 3)
    assert cache.length == 10
    keys = torch.cat([s.keys for s in spans if isinstance(s, TensorKV)], dim=2)[:, :, :10]
    values = torch.cat([s.values for s in spans if isinstance(s, TensorKV)], dim=2)[:, :, :10]
    assert torch.equal(cache.view(10).keys, keys) and torch.equal(cache.view(10).values, values)


# ── correctness with the bundled model ────────────────────────────────────────────────


def test_prefix_from_memory_and_disk_gives_the_logits_of_a_cold_prefill(
    make_engine: MakeEngine, tmp_path: Path
) -> None:
    engine = _disk_engine(make_engine, tmp_path)
    _run(engine, _chat(engine, "You are terse.", DOC + "What is stored?"))
    _offload_all(engine)
    _run(engine, _chat(engine, "You are terse.", "Hi"))  # memory: the system turn again
    prompt = _chat(engine, "You are terse.", DOC + "Why is it faster?")
    key = RadixKey(NS, prompt)

    cache = RequestCache.allocate(engine.layout, len(prompt))
    match = engine.prefix_cache.match(key)  # what Engine.generate does, step by step
    cache.load(match.spans, match.n_cached)
    assert engine.disk is not None
    n_disk = engine.disk.load(key, cache, match.n_cached)
    assert match.n_cached > 5 and n_disk > 100  # both tiers served a part
    n = match.n_cached + n_disk
    warm = prefill(engine.model, cache, torch.tensor([prompt[n:]]), start=n)
    with torch.inference_mode():
        cold = engine.model(torch.tensor([prompt])).logits[0, -1]
    assert (warm - cold).abs().max().item() <= 1e-4


def test_the_disk_tier_under_the_paged_pool_frees_pages_and_loads_into_pages(
    make_engine: MakeEngine, tmp_path: Path
) -> None:
    from localmodel.pages import PagedCache

    engine = _disk_engine(make_engine, tmp_path)
    pool = engine.pool
    assert pool is not None
    _run(engine, _chat(engine, "You are terse.", DOC + "What is stored?"))
    assert pool.stats.cached > 0
    engine.prefix_cache.evict(engine.prefix_cache.stats.bytes)
    assert pool.stats.used == 0  # the writer got copies: the pages are free before it ran
    assert engine.disk is not None
    engine.disk.tier.drain()
    prompt = _chat(engine, "You are terse.", DOC + "Why is it faster?")
    cache = PagedCache(pool, len(prompt), NS)
    n = engine.disk.load(RadixKey(NS, prompt), cache, 0)
    assert n > 100 and cache.length == n and len(cache.table) == -(-n // pool.page_size)
    cache.tokens = list(prompt[:n])
    warm = prefill(engine.model, cache, torch.tensor([prompt[n:]]), start=n)
    with torch.inference_mode():
        cold = engine.model(torch.tensor([prompt])).logits[0, -1]
    assert (warm - cold).abs().max().item() <= 1e-4
    cache.release()
    assert pool.stats.used == 0


def test_a_prefix_evicted_with_its_branches_frees_every_page_before_the_writer_runs(
    make_engine: MakeEngine, tmp_path: Path
) -> None:
    """A branch's record carries the prefix its node hangs from (the disk lacks it), copied
    out of the pool: pinned there, the pages of a shared prompt evicted in the same reclaim
    stayed in use until the writer was done, and the reclaim came up short."""
    from localmodel.pages import PagedCache

    engine = _disk_engine(make_engine, tmp_path)
    pool, tier = engine.pool, engine.disk.tier if engine.disk is not None else None
    assert tier is not None
    for question in ("What is stored?", "Why is it faster?"):
        _run(engine, _chat(engine, "You are terse.", DOC + question))
    assert engine.prefix_cache.stats.nodes >= 3  # the shared prompt and its two branches
    with tier._write_lock:  # the writer waits: every record it was handed is still queued
        engine.prefix_cache.evict(engine.prefix_cache.stats.bytes)
        assert engine.prefix_cache.stats.tokens == 0
        assert pool.stats.used == 0  # was: the shared prompt's pages, held by a branch's record
    tier.drain()
    assert tier.stats.write_errors == 0
    for question in ("What is stored?", "Why is it faster?"):  # both whole on disk
        prompt = _chat(engine, "You are terse.", DOC + question)
        cache = PagedCache(pool, len(prompt), NS)
        assert engine.disk is not None
        assert engine.disk.load(RadixKey(NS, prompt), cache, 0) == len(prompt) - 1
        cache.release()
    assert pool.stats.used == 0


def test_prefix_evicted_from_memory_is_served_from_disk_with_identical_output(
    make_engine: MakeEngine, tmp_path: Path
) -> None:
    small = _disk_engine(make_engine, tmp_path, max_bytes=40 * 46_080)  # about one prompt
    cold = make_engine(max_bytes=0)
    results: list[tuple[int, Completion]] = []
    for persona in ["You are a pirate.", "You are a poet.", "You are a pirate."]:
        prompt = _chat(small, persona, "Greet me.")
        warm = _run(small, prompt)
        assert small.disk is not None
        small.disk.tier.drain()
        assert warm.choices == _run(cold, prompt).choices
        results.append((len(prompt), warm))
    (_, first), _, (n_prompt, again) = results
    assert first.usage.cached_tokens == 0
    assert again.usage.cached_tokens == n_prompt - 1  # memory's shared start + disk's rest
    stats = small.stats
    assert stats.disk is not None and stats.prefix.evictions > 0
    assert 0 < stats.disk_hit_tokens == stats.disk.hit_tokens < again.usage.cached_tokens


def test_break_even_is_measured_at_start(make_engine: MakeEngine, tmp_path: Path) -> None:
    engine = make_engine(prefix_disk_dir=tmp_path)
    measured = engine.stats.break_even
    assert measured is not None and measured.measured_tokens == 256
    # On a CPU a token's prefill costs milliseconds, its read microseconds: loading pays.
    assert measured.prefill_s_per_token > 10 * measured.load_s_per_token
    assert measured.min_tokens is not None and measured.min_tokens <= 16
    assert _files(engine) == {}  # the scratch file is gone


# ── plumbing with the tiny model ──────────────────────────────────────────────────────


def test_no_disk_reads_when_recomputing_is_faster(
    make_engine: MakeEngine, tiny_model: Any, tmp_path: Path
) -> None:
    engine = _disk_engine(make_engine, tmp_path, tiny=tiny_model, break_even=BreakEven.fixed(None))
    prompt = _chat(engine, "x", "hello there")
    _run(engine, prompt)
    _offload_all(engine)
    assert _run(engine, prompt).usage.cached_tokens == 0
    assert engine.stats.disk is not None and engine.stats.disk.queries == 0


def test_disk_budget_deletes_files_and_accounts_bytes_exactly(
    make_engine: MakeEngine, tiny_model: Any, tmp_path: Path
) -> None:
    bpt = 2 * 2 * 2 * 16 * 4  # the tiny Llama: 2 layers, 2 KV heads, head_dim 16, fp32
    budget = 64 * bpt
    engine = _disk_engine(make_engine, tmp_path, tiny=tiny_model, prefix_disk_bytes=budget)
    for i in range(6):
        _run(engine, _chat(engine, f"persona number {i} " * 3, "hello"))
        _offload_all(engine)
    stats = engine.stats.disk
    assert stats is not None and stats.evicted_tokens > 0
    files = _files(engine)
    assert stats.files == len(files) and stats.file_bytes == sum(files.values()) <= budget
    assert stats.bytes == stats.tokens * bpt
    engine.flush_prefix_cache()
    after = engine.stats.disk
    assert _files(engine) == {} and after is not None
    assert (after.tokens, after.bytes, after.files, after.file_bytes) == (0, 0, 0, 0)


def test_a_full_writer_queue_drops_writes_and_answers_stay_right(
    make_engine: MakeEngine, tiny_model: Any, tmp_path: Path
) -> None:
    engine = _disk_engine(make_engine, tmp_path, tiny=tiny_model, max_bytes=12 * 512)
    plain = make_engine(tiny=tiny_model, max_bytes=0)
    assert engine.disk is not None
    tier = engine.disk.tier
    gate = threading.Event()
    tier.codec = _Gated(tier.codec.encode, gate)  # the writer stalls on its first record
    try:
        layout = engine.layout
        for i in range(80):  # 80 one-token prefixes: each evicts one, the queue holds 64
            kv = torch.zeros(layout.n_layers, layout.n_kv_heads, 1, layout.head_dim)
            engine.prefix_cache.insert(RadixKey("filler", [i]), TensorKV(kv, kv))
        dropped = tier.stats.dropped
        assert dropped > 0
        for i in range(3):
            prompt = _chat(engine, f"p{i}", "hello")
            assert _run(engine, prompt).choices == _run(plain, prompt).choices
        assert tier.stats.dropped > dropped  # these requests' evictions were dropped too
    finally:
        gate.set()
    tier.drain()
    assert tier.stats.offered + tier.stats.dropped == engine.stats.prefix.evictions
    assert tier.stats.write_errors == 0 and tier.stats.pending == 0


class _Gated:
    def __init__(self, encode: Any, gate: threading.Event) -> None:
        self.bytes_per_token = 512
        self._encode, self._gate = encode, gate

    def encode(self, spans: Sequence[KVSpan], start: int, stop: int) -> np.ndarray:
        self._gate.wait(timeout=30)
        return self._encode(spans, start, stop)


def test_tenants_stay_isolated_on_disk(
    make_engine: MakeEngine, tiny_model: Any, tmp_path: Path
) -> None:
    engine = _disk_engine(make_engine, tmp_path, tiny=tiny_model)
    prompt = _chat(engine, "shared words", "hello")
    a = _run(engine, prompt, ns="tiny|tenant-a")
    _offload_all(engine)
    b = _run(engine, prompt, ns="tiny|tenant-b")  # same tokens, other tenant: no disk hit
    assert b.usage.cached_tokens == 0 and engine.stats.disk_hit_tokens == 0
    again = _run(engine, prompt, ns="tiny|tenant-a")
    assert again.usage.cached_tokens == len(prompt) - 1 == engine.stats.disk_hit_tokens
    assert a.choices == b.choices == again.choices


@pytest.mark.parametrize("damage", ["truncated", "missing", "garbled"])
def test_a_damaged_file_is_a_miss_not_a_crash(
    make_engine: MakeEngine, tiny_model: Any, tmp_path: Path, damage: str
) -> None:
    engine = _disk_engine(make_engine, tmp_path, tiny=tiny_model)
    prompt = _chat(engine, "remember this", "hello")
    first = _run(engine, prompt)
    _offload_all(engine)
    for path, size in _files(engine).items():
        if damage == "truncated":
            path.write_bytes(path.read_bytes()[: size // 2])
        elif damage == "missing":
            path.unlink()
        else:
            path.write_bytes(b"\xff" * size)
    again = _run(engine, prompt)
    assert again.usage.cached_tokens == 0 and again.choices == first.choices
    stats = engine.stats
    assert stats.disk is not None and stats.disk.read_errors == 1 and stats.disk.tokens == 0
    _offload_all(engine)  # and the prefix can go to disk again
    assert _run(engine, prompt).usage.cached_tokens == len(prompt) - 1


def test_disk_config_is_checked_and_close_removes_the_files(
    make_engine: MakeEngine, tiny_model: Any, tmp_path: Path, bundled: Any
) -> None:
    with pytest.raises(ValueError, match="prefix_disk_bytes"):
        EngineConfig(prefix_disk_dir=tmp_path, prefix_disk_bytes=0)
    assert EngineConfig(prefix_disk_dir=str(tmp_path)).prefix_disk_dir == tmp_path  # type: ignore[arg-type]
    config = EngineConfig(device="cpu", prefix_disk_dir=tmp_path)
    with pytest.raises(ValueError, match="prefix_cache"):
        Engine(tiny_model, bundled.tokenizer, config, prefix_cache=RadixCache(1), break_even=ONE)
    engine = _disk_engine(make_engine, tmp_path, tiny=tiny_model)
    _run(engine, _chat(engine, "x", "hello"))
    _offload_all(engine)
    assert engine.disk is not None and _files(engine)
    run_dir = engine.disk.tier.directory
    engine.close()
    assert not run_dir.exists()
    assert _run(engine, _chat(engine, "x", "hello")).choices  # memory-only from here on


def test_a_disk_that_cannot_be_used_leaves_the_model_serving(
    make_engine: MakeEngine, tiny_model: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    engine = make_engine(tiny=tiny_model, prefix_disk_dir=blocker / "kv")  # mkdir fails
    assert engine.disk is None and engine.stats.disk is None
    assert "prefix disk tier" in caplog.text and "is off" in caplog.text
    prompt = _chat(engine, "x", "hello")
    assert _run(engine, prompt).choices
    assert _run(engine, prompt).usage.cached_tokens > 0  # the memory tier still works
