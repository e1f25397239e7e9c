"""Continuous batching: batched forward passes are exact, and a request's output is its own.

The invariant (fp32): the logits a sequence gets in a packed step, whatever it is batched
with, equal a cold single-sequence forward of its whole history (max |Δ| ≤ 1e-4).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from localmodel import Completion, Engine, Event, Finished, SamplingParams
from localmodel.batch import Piece, forward, use_batched_attention
from localmodel.kv import KVLayout, RequestCache
from localmodel.scheduler import Scheduler

NS = "smollm2|tenant-a"
TOL = 1e-4


def _tiny(kind: str, vocab: int) -> Any:
    """2-layer random models of two architectures (GQA in both; Qwen2 has q/k/v biases)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    shape = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)  # fmt: skip
    torch.manual_seed(0)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**shape)).eval()
    return Qwen2ForCausalLM(Qwen2Config(**shape)).eval()


def _cold(model: Any, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([tokens])).logits[0, -1]  # [vocab]


def _check_compositions(model: Any, vocab: int) -> None:
    """Three steps mixing whole prefills, chunks and decodes of different lengths."""
    use_batched_attention(model)
    layout = KVLayout.of(model)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in (1, 9, 40, 23)]
    caches = [RequestCache.allocate(layout, 64) for _ in prompts]
    seen: list[list[int]] = [[] for _ in prompts]
    steps = [  # (sequence, new tokens) per step
        [(0, prompts[0]), (1, prompts[1]), (2, prompts[2][:17])],  # prefills, one chunked
        [(0, [5]), (1, [6]), (2, prompts[2][17:]), (3, prompts[3])],  # decodes + prefills
        [(0, [7]), (1, [8]), (2, [9]), (3, [10])],  # decode only, four lengths
        [(2, [11])],  # alone
    ]
    for step in steps:
        logits = forward(model, [Piece(caches[i], tuple(t)) for i, t in step])
        for row, (i, tokens) in zip(logits, step, strict=True):
            seen[i] += tokens
            assert (row - _cold(model, seen[i])).abs().max().item() <= TOL, (i, len(seen[i]))
    assert [c.length for c in caches] == [len(s) for s in seen]


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_batched_steps_equal_cold_forwards_on_two_architectures(kind: str) -> None:
    _check_compositions(_tiny(kind, 512), 512)


def test_batched_steps_equal_cold_forwards_on_the_bundled_model(engine: Engine) -> None:
    _check_compositions(engine.model, 2000)


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
