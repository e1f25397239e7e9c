"""Engine behaviour with the bundled SmolLM2 (CPU, float32) and, for plumbing, a tiny Llama.

The correctness invariant of prefix reuse: a warm prefix must give the same logits (and so
the same greedy tokens) as a cold prefill of the whole prompt.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from localmodel import (
    ChoiceFinished,
    Completion,
    ContextWindowExceeded,
    Engine,
    Finished,
    InvalidRequestError,
    SamplingParams,
    TextDelta,
)
from localmodel.engine import prefill
from localmodel.kv import RequestCache
from localmodel.loader import BUNDLED_SAMPLING, model_sampling_defaults
from localmodel.sampling import OPENAI_DEFAULTS, SamplingDefaults
from prefix import RadixKey
from tests.localmodel.conftest import MakeEngine

NS = "smollm2|tenant-a"
GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
DOC = (
    "Cachegate keeps the keys and values of prompt prefixes in a radix tree, so that a "
    "request sharing a prefix with an earlier one only computes its new suffix. "
) * 4


def _chat(engine: Engine, *turns: str) -> list[int]:
    roles = ("user", "assistant")
    return engine.encode_chat([{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)])


def _run(
    engine: Engine, tokens: list[int], params: SamplingParams = GREEDY, ns: str = NS
) -> Completion:
    return engine.complete(engine.prepare(tokens, params, namespace=ns))


def test_warm_prefix_logits_equal_cold_full_prefill(engine: Engine) -> None:
    _run(engine, _chat(engine, DOC + "What is stored?"), SamplingParams(max_tokens=1))
    prompt = _chat(engine, DOC + "Why is it faster?")
    match = engine.prefix_cache.match(RadixKey(NS, prompt))
    assert match.n_cached > 100  # system prompt + DOC

    cache = RequestCache.allocate(engine.layout, len(prompt))
    cache.load(match.spans, match.n_cached)
    suffix = torch.tensor([prompt[match.n_cached :]])
    warm = prefill(engine.model, cache, suffix, start=match.n_cached)
    with torch.inference_mode():
        cold = engine.model(torch.tensor([prompt])).logits[0, -1]
    assert (warm - cold).abs().max().item() <= 1e-4


def test_greedy_completion_identical_cold_warm_and_to_hf_generate(engine: Engine) -> None:
    prompt = _chat(engine, "Write one sentence about the sea.")
    cold = _run(engine, prompt)
    warm = _run(engine, prompt)
    assert cold.usage.cached_tokens == 0
    assert warm.usage.cached_tokens == len(prompt) - 1  # NOTE: the last token is recomputed
    assert warm.choices == cold.choices  # text, token ids and finish reason

    with torch.inference_mode():
        reference = engine.model.generate(
            torch.tensor([prompt]), max_new_tokens=GREEDY.max_tokens, do_sample=False
        )
    assert list(cold.choices[0].token_ids) == reference[0, len(prompt) :].tolist()


def test_multi_turn_conversation_reports_growing_cached_tokens(engine: Engine) -> None:
    turns = ["My name is Ana. Say hello.", "What is my name?", "Thank you."]
    history: list[str] = []
    usages = []
    for turn in turns:
        history.append(turn)
        prompt = _chat(engine, *history)
        result = _run(engine, prompt, SamplingParams(temperature=0.0, max_tokens=6))
        usages.append((len(prompt), result.usage.cached_tokens))
        history.append(result.choices[0].text)
    (p1, c1), (p2, c2), (_, c3) = usages
    assert c1 == 0
    assert c2 >= p1  # turn 2 begins with turn 1's prompt (and answer)
    assert c3 >= p2
    assert c1 < c2 < c3


def test_tenants_do_not_share_prefix_kv(engine: Engine) -> None:
    prompt = _chat(engine, "Hello!")
    params = SamplingParams(temperature=0.0, max_tokens=3)
    a = _run(engine, prompt, params, ns="smollm2|tenant-a")
    b = _run(engine, prompt, params, ns="smollm2|tenant-b")
    again = _run(engine, prompt, params, ns="smollm2|tenant-a")
    assert (a.usage.cached_tokens, b.usage.cached_tokens) == (0, 0)
    assert again.usage.cached_tokens == len(prompt) - 1
    assert a.choices == b.choices == again.choices


def test_eviction_under_a_tiny_budget_keeps_answers_identical_to_cold(
    make_engine: MakeEngine,
) -> None:
    budget = 40 * 46_080  # KV of 40 tokens: about one prompt
    small, cold = make_engine(max_bytes=budget), make_engine(max_bytes=0)
    params = SamplingParams(temperature=0.0, max_tokens=3)
    expected: dict[str, Any] = {}
    for persona in ["You are a pirate.", "You are a poet.", "You are a chef.", "You are a pirate."]:
        prompt = small.encode_chat(
            [{"role": "system", "content": persona}, {"role": "user", "content": "Greet me."}]
        )
        if persona not in expected:
            expected[persona] = _run(cold, prompt, params).choices
        assert _run(small, prompt, params).choices == expected[persona]
    stats = small.prefix_cache.stats
    assert stats.evictions > 0
    assert stats.bytes <= budget
    assert cold.prefix_cache.stats.tokens == 0


def test_stop_string_cuts_the_text_and_the_stream_never_shows_it(engine: Engine) -> None:
    prompt = _chat(engine, "Count from one to ten in words, separated by commas.")
    base = _run(engine, prompt, SamplingParams(temperature=0.0, max_tokens=12)).choices[0]
    middle = len(base.text) // 2
    stop = base.text[middle : middle + 3]
    assert len(stop) == 3
    request = engine.prepare(
        prompt, SamplingParams(temperature=0.0, max_tokens=12, stop=(stop, "zzz")), namespace=NS
    )
    events = list(engine.generate(request))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert isinstance(events[-1], Finished)
    choice = events[-1].completion.choices[0]
    assert choice.text == base.text[: base.text.index(stop)] == "".join(deltas)
    assert choice.finish_reason == "stop" and choice.stop_string == stop  # (not "zzz")
    assert ChoiceFinished(0, "stop", stop) in events


def test_max_tokens_ends_with_length(engine: Engine) -> None:
    prompt = _chat(engine, "Tell me a long story about a dragon.")
    result = _run(engine, prompt, SamplingParams(temperature=0.0, max_tokens=3))
    assert result.choices[0].finish_reason == "length"
    assert len(result.choices[0].token_ids) == result.usage.completion_tokens == 3


def test_eos_ends_with_stop_and_is_not_in_the_text(engine: Engine) -> None:
    prompt = _chat(engine, "What is the capital of France? Answer in one sentence.")
    choice = _run(engine, prompt, SamplingParams(temperature=0.0, max_tokens=20)).choices[0]
    assert choice.finish_reason == "stop"
    assert choice.token_ids[-1] in engine.stop_token_ids
    assert "<|im_end|>" not in choice.text


def test_same_seed_reproduces_sampled_text(engine: Engine) -> None:
    prompt = _chat(engine, "Invent a name for a cat.")
    params = SamplingParams(temperature=1.0, top_p=0.95, seed=1234, max_tokens=6)
    assert _run(engine, prompt, params).choices == _run(engine, prompt, params).choices


def test_different_seeds_differ_on_the_tiny_model(tiny_engine: Engine) -> None:
    prompt = _chat(tiny_engine, "hi")

    def tokens(seed: int) -> tuple[int, ...]:
        params = SamplingParams(temperature=1.0, seed=seed, max_tokens=8)
        return _run(tiny_engine, prompt, params).choices[0].token_ids

    assert tokens(1) == tokens(1)
    assert tokens(1) != tokens(2)


def test_n_choices_share_one_prefill_and_are_all_cached(tiny_engine: Engine) -> None:
    prompt = _chat(tiny_engine, "hi")
    params = SamplingParams(temperature=1.0, seed=5, max_tokens=5, n=3)
    result = _run(tiny_engine, prompt, params)
    assert [c.index for c in result.choices] == [0, 1, 2]
    assert result.usage.completion_tokens == sum(len(c.token_ids) for c in result.choices)
    single = _run(tiny_engine, prompt, SamplingParams(temperature=1.0, seed=5, max_tokens=5))
    assert single.choices[0].token_ids == result.choices[0].token_ids
    for choice in result.choices:  # each continuation went into the tree (but its last token)
        key = RadixKey(NS, [*prompt, *choice.token_ids, 0])
        assert tiny_engine.prefix_cache.match(key).n_cached >= len(prompt) + 4


def test_a_failed_cache_insert_still_answers(
    make_engine: MakeEngine, tiny_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(tiny=tiny_model)
    prompt = _chat(engine, "hi")
    expected = _run(engine, prompt, ns="cold").choices[0].token_ids

    def out_of_memory(*args: Any) -> int:
        raise torch.OutOfMemoryError("simulated: the KV copy did not fit")

    monkeypatch.setattr(engine.prefix_cache, "insert", out_of_memory)
    result = _run(engine, prompt)  # the answer is complete: only its reuse is lost
    assert result.choices[0].token_ids == expected
    monkeypatch.undo()
    assert _run(engine, prompt).usage.cached_tokens == 0  # nothing was kept


def test_context_window_is_checked_before_generation(make_engine: MakeEngine) -> None:
    engine = make_engine(max_context=64)
    prompt = _chat(engine, "Hi")
    room = 64 - len(prompt)
    assert room > 0
    with pytest.raises(ContextWindowExceeded) as info:
        engine.prepare(prompt, SamplingParams(max_tokens=room + 1), namespace=NS)
    assert (info.value.prompt_tokens, info.value.max_tokens, info.value.limit) == (
        len(prompt),
        room + 1,
        64,
    )
    assert "maximum context length is 64" in str(info.value)
    assert engine.prepare(prompt, namespace=NS).max_tokens == room  # default: what fits
    with pytest.raises(ContextWindowExceeded):
        engine.prepare(list(range(100, 164)), namespace=NS)  # no room for even one token
    with pytest.raises(InvalidRequestError):
        engine.prepare([], namespace=NS)
    with pytest.raises(InvalidRequestError):
        engine.prepare([10**9], namespace=NS)


def test_default_max_tokens_is_capped_by_config(make_engine: MakeEngine) -> None:
    engine = make_engine(default_max_tokens=7)
    assert engine.context_window == 8192
    assert engine.prepare([1, 2, 3], namespace=NS).max_tokens == 7


def test_cancel_stops_between_tokens_and_keeps_the_kv(tiny_engine: Engine) -> None:
    prompt = _chat(tiny_engine, "hi")
    request = tiny_engine.prepare(
        prompt, SamplingParams(temperature=0.0, max_tokens=200), namespace=NS
    )
    deltas = 0
    events: list[Any] = []
    for event in tiny_engine.generate(request):
        events.append(event)
        deltas += isinstance(event, TextDelta)
        if deltas == 3:
            request.cancel.set()
    finished = events[-1]
    assert isinstance(finished, Finished)
    choice = finished.completion.choices[0]
    assert choice.finish_reason == "cancelled"
    assert 3 <= len(choice.token_ids) < 10
    assert tiny_engine.prefix_cache.stats.tokens >= len(prompt)


def test_bundled_model_samples_with_its_model_card_defaults(engine: Engine) -> None:
    assert engine.sampling_defaults == BUNDLED_SAMPLING
    request = engine.prepare([1, 2, 3], SamplingParams(), namespace=NS)
    assert (request.params.temperature, request.params.top_p) == (0.2, 0.9)
    kept = engine.prepare([1, 2, 3], SamplingParams(temperature=1.0, top_p=1.0), namespace=NS)
    assert (kept.params.temperature, kept.params.top_p) == (1.0, 1.0)


def test_readme_question_answers_paris_with_the_defaults(engine: Engine) -> None:
    # OpenAI's temperature 1.0 made this 135M model answer "Alsace-Lille, a charming…".
    prompt = engine.encode_chat([{"role": "user", "content": "What is the capital of France?"}])
    answers = [_run(engine, prompt, SamplingParams(seed=s, max_tokens=12)) for s in range(3)]
    assert all("Paris" in a.choices[0].text for a in answers)


def test_config_overrides_and_generation_config_are_read(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    assert model_sampling_defaults(tiny_model) == OPENAI_DEFAULTS  # says nothing: OpenAI's
    before = tiny_model.generation_config.temperature
    tiny_model.generation_config.temperature = 0.6
    try:
        assert model_sampling_defaults(tiny_model).temperature == 0.6
        engine = make_engine(tiny=tiny_model, default_top_p=0.5, default_top_k=7)
        assert engine.sampling_defaults == SamplingDefaults(0.6, 0.5, 7)
        engine = make_engine(tiny=tiny_model, default_temperature=0.0)
        assert engine.prepare([1, 2], SamplingParams(), namespace=NS).params.greedy
    finally:
        tiny_model.generation_config.temperature = before
