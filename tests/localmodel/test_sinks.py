"""``context_overflow: sinks``: the context shift re-rotates K exactly, nothing changes below
the window, and past it requests are answered instead of refused."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from transformers import DynamicCache

from localmodel import ContextWindowExceeded, Event, Finished, InvalidRequestError, SamplingParams
from localmodel.engine import prefill
from localmodel.kv import KVLayout, RequestCache, UnsupportedModelError
from localmodel.kvquant import resolve_kv_dtype
from localmodel.pages import PagedCache, PagePool, PoolExhausted
from localmodel.scheduler import Scheduler
from localmodel.sinks import ContextShift
from prefix import RadixKey
from tests.localmodel.conftest import MakeEngine

NS = "smollm2|tenant-a"
STORY = (
    "The lighthouse keeper wrote down every ship that passed, the weather of each morning, "
    "and the colour of the sea at dusk. "
) * 6


def _layer0_kv(model: Any, tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer 0's K/V of a cold forward at positions 0…n-1 (depends on tokens and positions only)."""
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(torch.tensor([tokens]), cache=cache, use_cache=True)
    return cache.layers[0].keys[0], cache.layers[0].values[0]  # [n_kv_heads, n, head_dim]


def test_shift_keeps_sinks_and_recent_tokens_with_k_rotated_to_new_positions(
    tiny_model: Any,
) -> None:
    tokens = list(range(100, 132))
    cache = RequestCache.allocate(KVLayout.of(tiny_model), capacity=32)
    prefill(tiny_model, cache, torch.tensor([tokens]), start=0)
    shift = ContextShift.of(tiny_model, sink_tokens=4)
    dropped = shift.shift(cache)
    assert dropped == (32 - 4) // 4 == 7 and cache.length == 25 and cache.dropped == 7
    kept = tokens[:4] + tokens[4 + dropped :]
    # Layer 0 sees no other token, so its K/V of the kept tokens at their new slots is
    # exactly what a cold forward of the kept tokens computes: the rotation is RoPE's.
    keys, values = _layer0_kv(tiny_model, kept)
    assert (cache.view(25).keys[0] - keys).abs().max().item() <= 1e-5
    assert torch.equal(cache.view(25).values[0], values)
    assert not torch.equal(cache.view(25).keys[0, :, 4:], cache.key_buf[0, 0, :, 11:32])


@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.int8])
def test_a_shift_over_pages_keeps_what_a_shift_of_buffers_keeps(
    tiny_model: Any, kv_dtype: torch.dtype
) -> None:
    """The engine's caches are page tables: a shift writes the kept tokens (K rotated) into
    fresh pages, equal to the contiguous shift (float32 exactly, int8 within its rounding),
    and the pages the prefix tree shares (the window before the shift) keep their KV."""
    tokens = list(range(100, 132))
    layout = KVLayout.of(tiny_model)
    buffers = RequestCache.allocate(layout, capacity=32)
    prefill(tiny_model, buffers, torch.tensor([tokens]), start=0)
    pool = PagePool(layout, n_pages=20, page_size=8, dtype=kv_dtype)
    pages = PagedCache(pool, capacity=32)
    prefill(tiny_model, pages, torch.tensor([tokens]), start=0)
    pages.note_fed(tokens)
    shared = pages.view(30)  # what the tree would hold: 4 pages, the last one partly
    before = shared.gather()
    shift = ContextShift.of(tiny_model, sink_tokens=4)
    assert shift.shift(buffers) == shift.shift(pages) == 7
    assert pages.length == 25 and pages.dropped == 7
    assert pages.tokens == tokens[:4] + tokens[11:]
    read = [pages.read_layer(layer, 25) for layer in range(layout.n_layers)]  # [1, H, 25, D]
    keys, values = torch.cat([k for k, _ in read]), torch.cat([v for _, v in read])
    want_k, want_v = buffers.view(25).keys, buffers.view(25).values
    tol = 1e-6 if kv_dtype == torch.float32 else 0.02 * want_k.abs().max().item()
    assert (keys - want_k).abs().max().item() <= tol
    assert (values - want_v).abs().max().item() <= (tol if kv_dtype == torch.float32 else
                                                     0.02 * want_v.abs().max().item())  # fmt: skip
    assert not set(pages.table) & set(shared.pages)  # fresh pages, the shared ones untouched
    after = shared.gather()
    assert torch.equal(after[0], before[0]) and torch.equal(after[1], before[1])
    assert pool.stats.used == len(shared.pages) + len(pages.table)


def test_models_without_linear_rope_are_refused(tiny_model: Any) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**tiny_model.config.to_dict(), "rope_parameters": {
        "rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}})  # fmt: skip
    with pytest.raises(UnsupportedModelError, match="context_overflow"):
        ContextShift.of(LlamaForCausalLM(config), sink_tokens=4)


def test_nothing_changes_below_the_window(make_engine: MakeEngine) -> None:
    error, sinks = (
        make_engine(max_context=96),
        make_engine(max_context=96, context_overflow="sinks"),
    )
    prompt = error.encode_chat([{"role": "user", "content": STORY[:180] + " Tell me more."}])
    assert 60 < len(prompt) < 90
    params = SamplingParams(temperature=0.0, max_tokens=96 - len(prompt))  # fills the window
    a = error.complete(error.prepare(prompt, params, namespace=NS))
    b = sinks.complete(sinks.prepare(prompt, params, namespace=NS))
    assert a.choices[0].token_ids == b.choices[0].token_ids
    assert a.usage == b.usage
    assert error.prefix_cache.stats.tokens == sinks.prefix_cache.stats.tokens  # both cached


def test_a_prompt_past_the_window_is_answered_with_sinks(make_engine: MakeEngine) -> None:
    error, sinks = (
        make_engine(max_context=96),
        make_engine(max_context=96, context_overflow="sinks"),
    )
    messages = [{"role": "user", "content": STORY + "What did the keeper write down?"}]
    prompt = sinks.encode_chat(messages)
    assert len(prompt) > 96 + 72  # more than one shift
    with pytest.raises(ContextWindowExceeded):
        error.prepare(prompt, namespace=NS)
    request = sinks.prepare(prompt, SamplingParams(temperature=0.0, max_tokens=8), namespace=NS)
    first = sinks.complete(request)
    assert len(first.choices[0].token_ids) >= 1 and first.choices[0].text.strip()
    # the prompt's first window went to the prefix tree before the shift overwrote it
    stats = sinks.prefix_cache.stats
    assert stats.tokens == 96
    assert sinks.prefix_cache.match(RadixKey(NS, prompt)).n_cached == 96
    again = sinks.complete(sinks.prepare(prompt, request.params, namespace=NS))
    assert again.usage.cached_tokens == 96
    assert again.choices[0].token_ids == first.choices[0].token_ids  # the same windows


def test_decode_past_the_window_shifts_and_caches_nothing_shifted(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    engine = make_engine(tiny=tiny_model, max_context=32, context_overflow="sinks")
    prompt = list(range(200, 220))
    params = SamplingParams(temperature=0.0, max_tokens=60)
    with pytest.raises(InvalidRequestError, match="n > 1"):
        engine.prepare(prompt, SamplingParams(max_tokens=60, n=2), namespace=NS)
    result = engine.complete(engine.prepare(prompt, params, namespace=NS))
    stop_ids = engine.stop_token_ids
    tokens = result.choices[0].token_ids
    assert len(tokens) == 60 or tokens[-1] in stop_ids
    assert len(tokens) > 32 - 20  # it went past the window
    # the prompt, kept once prefilled (before any shift); nothing of the slid decode
    assert engine.prefix_cache.stats.tokens == len(prompt)
    # default max_tokens is not capped by the window with sinks
    assert engine.prepare(prompt, namespace=NS).max_tokens == engine.config.default_max_tokens


def test_sink_tokens_must_leave_room(make_engine: MakeEngine) -> None:
    with pytest.raises(ValueError, match="sink_tokens"):
        make_engine(max_context=16, context_overflow="sinks", sink_tokens=8)
    with pytest.raises(ValueError, match="context_overflow"):
        make_engine(context_overflow="truncate")


def test_batched_requests_past_the_window_get_the_tokens_they_get_alone(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    engine = make_engine(tiny=tiny_model, max_context=32, context_overflow="sinks")
    jobs = [
        (list(range(300, 350)), SamplingParams(temperature=0.0, max_tokens=40)),  # prompt > window
        (list(range(400, 410)), SamplingParams(temperature=0.0, max_tokens=8)),  # fits
        (list(range(500, 520)), SamplingParams(temperature=0.0, max_tokens=30)),  # decode shifts
    ]
    alone = [
        engine.complete(engine.prepare(p, params, namespace=f"alone{i}")).choices
        for i, (p, params) in enumerate(jobs)
    ]
    assert len(alone[2][0].token_ids) > 32 - 20  # its decode went past the window
    scheduler = Scheduler(engine, max_batch=4, step_tokens=12)  # prompts prefill in chunks
    finished = _run(scheduler, engine, jobs, "batched")
    assert [f.completion.choices for f in finished] == alone


def _run(
    scheduler: Scheduler, engine: Any, jobs: list[tuple[list[int], SamplingParams]], ns: str
) -> list[Finished]:
    """Every job through ``scheduler`` at once; each one's last event, which must be Finished."""
    events: list[list[Event | BaseException]] = [[] for _ in jobs]
    for i, (prompt, params) in enumerate(jobs):
        request = engine.prepare(prompt, params, namespace=f"{ns}{i}")
        scheduler.add(request, lambda item, i=i: events[i].append(item) or True)  # type: ignore[misc]
    while scheduler.busy:
        scheduler.step()
    finished = [e[-1] for e in events]
    assert all(isinstance(f, Finished) for f in finished), finished
    return [f for f in finished if isinstance(f, Finished)]


@pytest.mark.parametrize("kv_dtype", ["auto", "int8"])
def test_requests_past_the_window_share_the_pool_and_survive_preemption(
    make_engine: MakeEngine, tiny_model: Any, kv_dtype: str
) -> None:
    """With sinks the requests run on the paged pool (in ``kv_dtype``), batched in one step:
    a pool too small for all of them preempts the youngest, slid or not, and every request
    still finishes with every page back."""
    page = PagePool.bytes_per_page(
        KVLayout.of(tiny_model), 8, resolve_kv_dtype(kv_dtype, torch.float32)
    )
    engine = make_engine(tiny=tiny_model, max_context=32, context_overflow="sinks",
                         kv_dtype=kv_dtype, page_size=8, kv_pool_bytes=9 * page)  # fmt: skip
    pool = engine.pool
    assert pool.n_pages == 9 and pool.stats.dtype == ("float32" if kv_dtype == "auto" else "int8")
    jobs = [
        (list(range(300, 350)), SamplingParams(temperature=0.0, max_tokens=30)),  # prompt > window
        (list(range(400, 420)), SamplingParams(temperature=0.0, max_tokens=40)),  # decode shifts
        (list(range(500, 516)), SamplingParams(temperature=0.0, max_tokens=40)),
    ]
    finished = _run(Scheduler(engine, max_batch=3, step_tokens=16), engine, jobs, "t")
    assert pool.stats.preemptions >= 1
    for f, (_, params) in zip(finished, jobs, strict=True):
        tokens = f.completion.choices[0].token_ids
        assert len(tokens) == params.max_tokens or tokens[-1] in engine.stop_token_ids
    assert pool.stats.used == pool.stats.cached  # every request gave its pages back
    engine.flush_prefix_cache()
    assert pool.stats.used == 0


def test_a_prompt_longer_than_the_pool_is_admitted_beside_running_work(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    """A sinks request holds at most its window, whatever its prompt's length: a prompt
    longer than the whole pool is admitted as soon as a window's pages are free, not after
    every running request has finished."""
    page = PagePool.bytes_per_page(KVLayout.of(tiny_model), 8, torch.float32)
    engine = make_engine(tiny=tiny_model, max_context=32, context_overflow="sinks",
                         page_size=8, kv_pool_bytes=9 * page)  # fmt: skip
    scheduler = Scheduler(engine, max_batch=4, step_tokens=16)
    done: list[int] = []  # jobs in the order they finished
    jobs = [(list(range(400, 416)), 40), (list(range(300, 400)), 2)]  # 100 > 72 pool tokens
    for i, (prompt, n) in enumerate(jobs):
        params = SamplingParams(temperature=0.0, max_tokens=n)
        request = engine.prepare(prompt, params, namespace=f"long{i}")
        scheduler.add(request, functools.partial(_note_finished, done, i))
    scheduler.step()
    scheduler.step()
    assert len(scheduler.running) == 2  # the long prompt runs beside the first request
    while scheduler.busy:
        scheduler.step()
    assert sorted(done) == [0, 1]
    assert engine.pool.stats.used == engine.pool.stats.cached  # every page given back


def _note_finished(done: list[int], i: int, item: Any) -> bool:
    if isinstance(item, Finished):
        done.append(i)
    return True


@pytest.mark.parametrize("prompt_len", [20, 50])  # the shift while decoding / while prefilling
def test_a_shift_with_no_page_for_what_it_keeps_recomputes_it_instead_of_failing(
    make_engine: MakeEngine, tiny_model: Any, monkeypatch: pytest.MonkeyPatch, prompt_len: int
) -> None:
    """When the pages a shift gives back are shared with another running request and none is
    free, the kept tokens get no page (``refill`` raises PoolExhausted, the cache empty). The
    request then feeds the kept tokens again in its next piece (whose pages the scheduler
    reserves, preempting if it must) and finishes, instead of failing."""
    engine = make_engine(tiny=tiny_model, max_context=32, context_overflow="sinks", page_size=8)
    params = SamplingParams(temperature=0.0, max_tokens=40)
    refill, failed = PagedCache.refill, []

    def no_page_once(cache: PagedCache, *args: Any) -> None:
        if not failed:
            cache.truncate(0)
            failed.append(cache)
            raise PoolExhausted("no free page")
        refill(cache, *args)

    monkeypatch.setattr(PagedCache, "refill", no_page_once)
    fed: list[tuple[int, ...]] = []
    forward = engine.forward_batch
    engine.forward_batch = lambda pieces: fed.extend(p.tokens for p in pieces) or forward(pieces)  # type: ignore[method-assign]
    prompt = list(range(300, 300 + prompt_len))
    (finished,) = _run(
        Scheduler(engine, max_batch=2, step_tokens=64), engine, [(prompt, params)], "x"
    )
    assert failed and failed[0].dropped > 0  # it happened; the cache never counts as a prefix
    choice = finished.completion.choices[0]
    assert choice.finish_reason == "length" and len(choice.token_ids) == 40
    assert any(len(tokens) >= 25 for tokens in fed[1:])  # the 25 kept tokens fed again
    assert engine.pool.stats.used == engine.pool.stats.cached
