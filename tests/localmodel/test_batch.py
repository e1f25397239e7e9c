"""Continuous batching: batched forward passes are exact, and a request's output is its own.

The invariant (fp32): the logits a sequence gets in a packed step, whatever it is batched
with, equal a cold single-sequence forward of its whole history (max |Δ| ≤ 1e-4).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from localmodel import Completion, Engine, Event, Finished, SamplingParams
from localmodel.batch import BatchCache, Piece, forward, use_batched_attention
from localmodel.kv import KVLayout
from localmodel.pages import PagedCache, PagePool
from localmodel.scheduler import Scheduler
from localmodel.weights import use_native_weights

NS = "smollm2|tenant-a"
TOL = 1e-4
#: The bundled model's logits reach ~30 after 30 layers, where float32's step is 2**-19, and
#: batched and cold forwards sum in different orders (row counts pick different kernels): on
#: the machine of 2026-12-03 the largest difference was 1.09e-4 (57 steps) with oneDNN packed
#: weights and 1.05e-4 with MKL, under 1e-4 on the earlier one. A wrong mask, position or
#: page moves logits by 1e-2 and more, so 2e-4 still tells a bug from summation order.
TOL_BUNDLED = 2e-4


def _tiny(kind: str, vocab: int) -> Any:
    """2-layer random models of two architectures (GQA, and for Llama also one K/V head per
    query head; Qwen2 has q/k/v biases)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    shape = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)  # fmt: skip
    torch.manual_seed(0)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**shape)).eval()
    if kind == "llama-mha":
        return LlamaForCausalLM(LlamaConfig(**{**shape, "num_key_value_heads": 4})).eval()
    return Qwen2ForCausalLM(Qwen2Config(**shape)).eval()


def _cold(model: Any, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([tokens])).logits[0, -1]  # [vocab]


#: (sequence, new tokens) per step: a slice of its prompt (whole prefills, chunks, chunks that
#: continue a cached prefix) or decode tokens, the decodes of different lengths before,
#: between and after the chunks
_STEPS: list[list[tuple[int, slice | list[int]]]] = [
    [(0, slice(None)), (1, slice(None)), (2, slice(None, 17))],
    [(0, [5]), (1, [6]), (2, slice(17, None)), (3, slice(None))],
    [(0, [7]), (1, [8]), (2, [9]), (3, [10])],
    [(3, [11]), (4, slice(None, 6)), (0, [12]), (2, [13])],
    [(4, slice(6, None)), (1, [14]), (3, [15])],
    [(2, [11])],  # alone
]


def _check_compositions(
    model: Any, vocab: int, make_cache: Callable[[], PagedCache], tol: float = TOL
) -> None:
    """Steps mixing whole prefills, chunks and decodes of different lengths, in any order."""
    use_batched_attention(model)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in (1, 9, 40, 23, 30)]
    caches = [make_cache() for _ in prompts]
    seen: list[list[int]] = [[] for _ in prompts]
    for step in _STEPS:
        fed = [(i, t if isinstance(t, list) else prompts[i][t]) for i, t in step]
        pieces = [Piece(caches[i], tuple(t)) for i, t in fed]
        logits = forward(model, pieces)
        for row, (i, tokens) in zip(logits, fed, strict=True):
            seen[i] += tokens
            assert (row - _cold(model, seen[i])).abs().max().item() <= tol, (i, len(seen[i]))
    assert [c.length for c in caches] == [len(s) for s in seen]


def _paged(model: Any) -> Callable[[], PagedCache]:
    pool = PagePool(KVLayout.of(model), n_pages=100, page_size=4)  # pages cut sequences often
    return lambda: PagedCache(pool, 64)


@pytest.mark.parametrize("kind", ["llama", "llama-mha", "qwen2"])
def test_batched_steps_equal_cold_forwards_on_two_architectures(kind: str) -> None:
    model = _tiny(kind, 512)
    _check_compositions(model, 512, _paged(model))


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_on_the_native_kernel_a_decode_next_to_a_prefill_is_bitwise_alone(kind: str) -> None:
    """``weights: auto`` on one thread (the native kernel), on a model with biases too
    (Qwen2): the compositions above hold, and a decode step's logits are bitwise the same
    alone or batched with another sequence's prefill chunk (its attention runs in a group of
    its own), and with other decodes of other lengths (the kernel's attention reads each
    sequence's own slots: no padding, no batch-wide sum)."""
    model = _tiny(kind, 512)
    assert use_native_weights(model) == 2 * 7 + 1  # q k v o gate up down per layer, lm_head
    _check_compositions(model, 512, _paged(model))
    make_cache = _paged(model)
    alone, batched, other = make_cache(), make_cache(), make_cache()
    prompt = tuple(range(3, 20))
    forward(model, [Piece(alone, prompt)])
    forward(model, [Piece(batched, prompt)])
    want = forward(model, [Piece(alone, (7,))])[0]
    got = forward(model, [Piece(batched, (7,)), Piece(other, tuple(range(30, 60)))])[0]
    assert torch.equal(got, want)
    want = forward(model, [Piece(alone, (8,))])[0]  # 18 tokens; `other` holds 30
    got = forward(model, [Piece(other, (9,)), Piece(batched, (8,))])[1]
    assert torch.equal(got, want)


def test_without_the_native_kernel_decodes_attend_by_sdpa_as_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No attention kernel (no C compiler, or it failed its check: ``kernel.attention()`` is
    None): float32 decodes are gathered and padded for one SDPA call, and the compositions
    hold as on the kernel."""
    from localmodel import kernel

    monkeypatch.setattr(kernel, "attention", lambda: None)
    model = _tiny("llama", 512)
    make_cache = _paged(model)
    caches = [make_cache(), make_cache()]
    use_batched_attention(model)
    forward(model, [Piece(caches[0], (1, 2, 3)), Piece(caches[1], (4, 5))])
    plan = BatchCache([Piece(caches[0], (6,)), Piece(caches[1], (7,))], 2, torch.float32)
    assert plan.groups[0].native is None and len(plan.groups[0].gather) > 0
    _check_compositions(model, 512, make_cache)


def test_batched_steps_equal_cold_forwards_on_the_bundled_model(engine: Engine) -> None:
    model = engine.model
    _check_compositions(model, 2000, _paged(model), TOL_BUNDLED)


def test_paged_steps_read_the_pool_in_place_and_decode_in_one_group() -> None:
    """On one pool, all decoding sequences share one attention call; caches of another pool
    cannot join the step."""
    model = _tiny("llama", 512)
    use_batched_attention(model)
    pool = PagePool(KVLayout.of(model), n_pages=40, page_size=4)
    caches = [PagedCache(pool, 64) for _ in range(3)]
    forward(model, [Piece(c, tuple(range(3 + 5 * i, 10 + 6 * i))) for i, c in enumerate(caches)])
    pieces = [Piece(caches[0], (1,)), Piece(caches[1], (4, 5, 6)), Piece(caches[2], (2,))]
    batch = BatchCache(pieces, 2, torch.float32)
    assert batch.pool is pool
    assert [(g.pieces, g.n) for g in batch.groups] == [((0, 2), 1), ((1,), 3)]
    # the decodes attend in place in the pages (cachegate's kernel, float32): nothing gathered
    assert batch.groups[0].native is not None and batch.groups[1].native is None
    assert len(batch.groups[0].gather) == 0
    history = [list(c.tokens) for c in caches]
    logits = forward(model, pieces)
    for row, tokens in zip(logits, [history[0] + [1], history[1] + [4, 5, 6], history[2] + [2]],
                           strict=True):  # fmt: skip
        assert (row - _cold(model, tokens)).abs().max().item() <= TOL
    other = PagedCache(PagePool(KVLayout.of(model), n_pages=8, page_size=4), 64)
    with pytest.raises(ValueError, match="one pool"):
        BatchCache([*pieces, Piece(other, (3, 4))], 2, torch.float32)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float16, torch.int8])
def test_reduced_precision_pages_batch_in_place_as_each_sequence_reads_them_alone(
    kv_dtype: torch.dtype,
) -> None:
    """`kv_dtype: bfloat16 | float16 | int8` pages take the batched path (written in place,
    the decodes in one attention call reading them in place), and each sequence's logits equal
    those of the same steps fed one sequence at a time through the model's cache hook
    (`PagedCache`'s own write and read, which round K/V to the pages' dtype the same way; for
    int8, a partly filled page's K from the request's full-precision tail)."""
    from localmodel.forward import prefill

    model = _tiny("llama", 512)
    use_batched_attention(model)
    layout = KVLayout.of(model)
    batched_pool = PagePool(layout, n_pages=100, page_size=4, dtype=kv_dtype)
    alone_pool = PagePool(layout, n_pages=100, page_size=4, dtype=kv_dtype)
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, 512, (n,), generator=gen).tolist() for n in (1, 9, 40, 23, 30)]
    batched = [PagedCache(batched_pool, 64) for _ in prompts]
    alone = [PagedCache(alone_pool, 64) for _ in prompts]
    for step in _STEPS:
        fed = [(i, t if isinstance(t, list) else prompts[i][t]) for i, t in step]
        pieces = [Piece(batched[i], tuple(t)) for i, t in fed]
        plan = BatchCache(pieces, 2, torch.float32)
        assert plan.pool is batched_pool  # in place, not a group per piece
        decoding = tuple(j for j, (_, t) in enumerate(fed) if len(t) == 1)
        assert not decoding or plan.groups[0].pieces == decoding
        # cachegate's kernel reads them in place: half pages widened, int8 de-quantised
        assert plan.groups[0].native is not None or not decoding
        logits = forward(model, pieces)
        for row, (i, tokens) in zip(logits, fed, strict=True):
            cache = alone[i]
            cache.reserve(len(tokens))
            with torch.inference_mode():
                expected = prefill(model, cache, torch.tensor([tokens]), start=cache.length)
            assert (row - expected).abs().max().item() <= TOL, (i, cache.length)
    assert [c.length for c in batched] == [c.length for c in alone]


def test_int8_pages_shared_with_a_prefix_batch_as_each_sequence_reads_them_alone() -> None:
    """int8 pages a prefix hit shares: the owner keeps its partly filled page's K in its
    full-precision tail after the tree's view sealed the page, the sharer reads the sealed
    (rounded) K and copies the page when it writes. In one batched step with a third
    sequence, each one's logits equal the same steps fed alone, pages filling mid-run."""
    from localmodel.forward import prefill

    model = _tiny("llama", 512)
    use_batched_attention(model)
    layout = KVLayout.of(model)
    gen = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, 512, (10,), generator=gen).tolist()  # 2 full pages + 2 tokens
    other = torch.randint(0, 512, (7,), generator=gen).tolist()
    runs = []
    for _ in range(2):  # batched, alone
        pool = PagePool(layout, n_pages=60, page_size=4, dtype=torch.int8)
        owner, sharer, third = (PagedCache(pool, 64) for _ in range(3))
        for cache, tokens in ((owner, prompt), (third, other)):
            cache.reserve(len(tokens))
            with torch.inference_mode():
                prefill(model, cache, torch.tensor([tokens]), start=0)
            cache.note_fed(tokens)
        span = owner.view(10)  # seals the owner's third page
        sharer.map_prefix([span], 10, prompt)
        runs.append((pool, [owner, sharer, third]))
    (pool, batched), (_, alone) = runs
    for step in range(7):
        fed = [(0, 20 + step), (1, 40 + step), (2, 60 + step)]
        pieces = [Piece(batched[i], (t,)) for i, t in fed]
        assert BatchCache(pieces, 2, torch.float32).pool is pool
        logits = forward(model, pieces)
        for row, (i, t) in zip(logits, fed, strict=True):
            cache = alone[i]
            cache.reserve(1)
            with torch.inference_mode():
                expected = prefill(model, cache, torch.tensor([[t]]), start=cache.length)
            assert (row - expected).abs().max().item() <= TOL, (i, step)
    assert pool.copied_pages == 1  # the sharer's copy of the sealed page, once
    assert [c.length for c in batched] == [17, 17, 14]


def _alone(engine: Engine, prompt: list[int], params: SamplingParams) -> Completion:
    return engine.complete(engine.prepare(prompt, params, namespace=f"{NS}|alone"))


def _batched(
    engine: Engine, jobs: list[tuple[list[int], SamplingParams]], **limits: int
) -> list[Completion]:
    scheduler = Scheduler(engine, **{"max_batch": 16, "step_tokens": 256, **limits})
    events: list[list[Event | BaseException]] = [[] for _ in jobs]
    for i, (prompt, params) in enumerate(jobs):
        request = engine.prepare(prompt, params, namespace=NS)
        scheduler.add(request, lambda item, i=i: events[i].append(item) or True)  # type: ignore[misc]
    while scheduler.busy:
        scheduler.step()
    last = [e[-1] for e in events]
    assert all(isinstance(e, Finished) for e in last), last
    return [e.completion for e in last if isinstance(e, Finished)]


def test_batched_requests_get_the_tokens_they_get_alone(engine: Engine) -> None:
    questions = ["Name a fruit.", "What is the capital of France?", "Count to five.", "Hi!"]
    prompts = [engine.encode_chat([{"role": "user", "content": q}]) for q in questions]
    plain = _alone(engine, prompts[2], SamplingParams(temperature=0.0, max_tokens=16))
    stop = plain.choices[0].text.split()[2]  # a word it says: the stop string cuts there
    jobs = [
        (prompts[0], SamplingParams(temperature=0.0, max_tokens=10)),
        (prompts[1], SamplingParams(temperature=0.8, seed=3, max_tokens=12, n=2)),
        (prompts[2], SamplingParams(temperature=0.0, max_tokens=16, stop=(stop,))),
        (prompts[3], SamplingParams(temperature=0.0, max_tokens=4)),
    ]
    expected = [_alone(engine, p, params).choices for p, params in jobs]
    results = _batched(engine, jobs, step_tokens=24)  # prompts prefill in chunks
    assert [r.choices for r in results] == expected
    assert results[2].choices[0].finish_reason == "stop"
    assert stop not in results[2].choices[0].text


def test_a_prefix_hit_inside_a_batch_reports_cached_tokens(engine: Engine) -> None:
    system = {"role": "system", "content": "You answer in one short sentence. " * 8}
    first = engine.encode_chat([system, {"role": "user", "content": "What is Mars?"}])
    params = SamplingParams(temperature=0.0, max_tokens=3)
    _batched(engine, [(first, params)])
    second = engine.encode_chat([system, {"role": "user", "content": "What is Venus?"}])
    (result,) = _batched(engine, [(second, params)])
    assert result.usage.cached_tokens > 60  # the shared system prompt, from the tree


def test_cancelled_request_stops_at_the_next_step_others_continue(tiny_engine: Engine) -> None:
    scheduler = Scheduler(tiny_engine, max_batch=4, step_tokens=64)
    params = SamplingParams(temperature=0.0, max_tokens=40)
    got: dict[str, list[Event | BaseException]] = {"a": [], "b": []}
    requests = {}
    for name in got:
        requests[name] = tiny_engine.prepare([1, 2, 3, len(name)], params, namespace=NS)
        scheduler.add(requests[name], lambda item, n=name: got[n].append(item) or True)  # type: ignore[misc]
    for _ in range(3):
        scheduler.step()
    requests["a"].cancel.set()
    scheduler.step()
    assert len(scheduler.running) == 1  # a's buffers are gone after this one step
    while scheduler.busy:
        scheduler.step()
    finished = {n: e[-1] for n, e in got.items()}
    assert isinstance(finished["a"], Finished) and isinstance(finished["b"], Finished)
    assert finished["a"].completion.choices[0].finish_reason == "cancelled"
    assert len(finished["b"].completion.choices[0].token_ids) == 40


def test_a_prompt_cancelled_part_way_is_not_fed_further_and_keeps_its_kv(
    tiny_engine: Engine,
) -> None:
    """A client that leaves during a long prefill frees its step budget at the next step."""
    from prefix import RadixKey

    scheduler = Scheduler(tiny_engine, max_batch=4, step_tokens=16)  # 16 prompt tokens a step
    params = SamplingParams(temperature=0.0, max_tokens=6)
    long_prompt = list(range(5, 105))  # 100 tokens: 7 steps of prefill
    got: dict[str, list[Event | BaseException]] = {"long": [], "short": []}
    requests = {
        "long": tiny_engine.prepare(long_prompt, params, namespace=NS),
        "short": tiny_engine.prepare([1, 2, 3], params, namespace=NS),
    }
    for name, request in requests.items():
        scheduler.add(request, lambda item, n=name: got[n].append(item) or True)  # type: ignore[misc]
    scheduler.step()
    scheduler.step()  # the long prompt is 2 chunks in (oldest first: the short one waits)
    fed = next(s.fed for s in scheduler.running if s.request is requests["long"])
    assert 0 < fed < len(long_prompt)
    requests["long"].cancel.set()
    scheduler.step()
    assert [s.request for s in scheduler.running] == [requests["short"]]  # gone at this step
    finished = got["long"][-1]
    assert isinstance(finished, Finished)
    assert finished.completion.choices[0].finish_reason == "cancelled"
    assert finished.completion.usage.completion_tokens == 0
    # what was computed is kept: a retry of the same prompt starts from there
    assert tiny_engine.prefix_cache.match(RadixKey(NS, long_prompt)).n_cached == fed
    while scheduler.busy:
        scheduler.step()
    done = got["short"][-1]
    assert isinstance(done, Finished) and len(done.completion.choices[0].token_ids) == 6


def test_a_prompts_few_last_tokens_are_not_left_for_another_step(tiny_engine: Engine) -> None:
    """8 prompts of 64 tokens, 256 tokens a step: two steps prefill them all, although the
    second also feeds the first four's decode tokens (the last prompt's 4-token remainder is
    taken whole instead of costing it a third step)."""
    scheduler = Scheduler(tiny_engine, max_batch=16, step_tokens=256)
    params = SamplingParams(temperature=0.0, max_tokens=8)
    for i in range(8):
        request = tiny_engine.prepare([10 + i] * 64, params, namespace=f"{NS}|{i}")
        scheduler.add(request, lambda item: True)
    scheduler.step()
    assert sum(s.piece is not None and len(s.piece.tokens) == 1 for s in scheduler.running) == 4
    scheduler.step()
    assert all(s.piece is not None and len(s.piece.tokens) == 1 for s in scheduler.running)
    while scheduler.busy:
        scheduler.step()


def test_a_burst_sharing_a_new_prompt_prefills_it_once(tiny_engine: Engine) -> None:
    """Requests that arrive together with a long prefix the tree does not hold yet (users of
    one system prompt after a start): the first prefills it, the others wait for that and
    map it (each prefilled it alongside before: ``cached_tokens`` 0, the last one's first
    token after every copy of the prefix), and each gets the tokens it gets alone."""
    shared = list(range(300, 500))  # 200 tokens
    params = SamplingParams(temperature=0.0, max_tokens=5)
    jobs = [(shared + [600 + i] * (3 + i), params) for i in range(4)]
    expected = [_alone(tiny_engine, p, params).choices for p, _ in jobs]
    results = _batched(tiny_engine, jobs, step_tokens=64)
    assert [r.choices for r in results] == expected
    assert [r.usage.cached_tokens for r in results] == [0, 200, 200, 200]


def test_a_request_waiting_for_a_shared_prefill_keeps_its_batch_slot(tiny_engine: Engine) -> None:
    """A request held back while another prefills the prompt prefix they share keeps its
    place: one behind it that shares nothing took the last batch slot meanwhile, and the held
    request waited for a whole generation to end (its first token after the other two
    finished) rather than for one prefill."""
    shared = list(range(300, 400))  # 100 tokens
    long, short = (SamplingParams(temperature=0.0, max_tokens=n) for n in (40, 1))
    jobs = [([*shared, 600], long), ([*shared, 601], short), (list(range(700, 720)), long)]
    scheduler = Scheduler(tiny_engine, max_batch=2, step_tokens=256)
    events: list[list[Event | BaseException]] = [[] for _ in jobs]
    for i, (prompt, params) in enumerate(jobs):
        request = tiny_engine.prepare(prompt, params, namespace=NS)
        scheduler.add(request, lambda item, i=i: events[i].append(item) or True)  # type: ignore[misc]
    finished_at: dict[int, int] = {}
    for step in range(200):
        if not scheduler.busy:
            break
        scheduler.step()
        for i, seen in enumerate(events):
            if seen and isinstance(seen[-1], Finished):
                finished_at.setdefault(i, step)
    assert finished_at[1] < min(finished_at[0], finished_at[2])  # (one prefill, not a generation)
    last = events[1][-1]
    assert isinstance(last, Finished) and last.completion.usage.cached_tokens == 100
