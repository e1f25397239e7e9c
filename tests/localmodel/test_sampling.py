"""Sampling: greedy, filters, per-request seeds, validation."""

from __future__ import annotations

import pytest
import torch

from localmodel.sampling import (
    MAX_STOP_STRINGS,
    SamplingDefaults,
    SamplingError,
    SamplingParams,
    make_generator,
    sample,
)

CPU = torch.device("cpu")


def _logits() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(1000)


def test_temperature_zero_is_argmax_and_ignores_filters() -> None:
    logits = _logits()
    params = SamplingParams(temperature=0.0, top_k=5, top_p=0.1, seed=1)
    assert sample(logits, params, make_generator(1, CPU)) == int(logits.argmax())


def test_top_k_one_and_tiny_top_p_collapse_to_argmax() -> None:
    logits = _logits()
    for params in (SamplingParams(temperature=2.0, top_k=1), SamplingParams(top_p=1e-6)):
        generator = make_generator(7, CPU)
        assert {sample(logits, params, generator) for _ in range(20)} == {int(logits.argmax())}


def test_top_k_never_samples_outside_the_k_best() -> None:
    logits = _logits()
    allowed = set(torch.topk(logits, 3).indices.tolist())
    generator = make_generator(3, CPU)
    params = SamplingParams(temperature=2.0, top_k=3)
    assert {sample(logits, params, generator) for _ in range(200)} <= allowed


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    generator = make_generator(0, CPU)
    draws = {sample(logits, SamplingParams(top_p=0.8), generator) for _ in range(300)}
    assert draws == {0, 1}  # 0.5 + 0.3 reaches 0.8; token 2 would exceed it


def test_same_seed_same_tokens_different_seed_differs() -> None:
    logits = _logits()
    params = SamplingParams(temperature=1.0)

    def draw(seed: int) -> list[int]:
        generator = make_generator(seed, CPU)
        return [sample(logits, params, generator) for _ in range(30)]

    assert draw(42) == draw(42)
    assert draw(42) != draw(43)


def test_sample_does_not_modify_logits() -> None:
    logits = _logits()
    before = logits.clone()
    sample(logits, SamplingParams(temperature=0.5, top_k=10, top_p=0.5), make_generator(0, CPU))
    assert torch.equal(logits, before)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_tokens": 0},
        {"temperature": -0.1},
        {"temperature": 2.5},
        {"top_p": -0.1},
        {"top_p": 1.5},
        {"top_k": -1},
        {"stop": ("a",) * (MAX_STOP_STRINGS + 1)},
        {"stop": ("",)},
        {"n": 0},
    ],
)
def test_invalid_params_raise_an_error_naming_the_param(kwargs: dict[str, object]) -> None:
    with pytest.raises(SamplingError) as error:
        SamplingParams(**kwargs)  # type: ignore[arg-type]
    assert error.value.param == next(iter(kwargs))


def test_temperatures_that_overflow_the_logits_are_greedy() -> None:
    logits = _logits() * 30  # logits / 1e-38 would be inf, then NaN in the softmax
    for temperature in (1e-38, 5e-324, 1e-6):
        params = SamplingParams(temperature=temperature, seed=1)
        assert sample(logits, params, make_generator(1, CPU)) == int(logits.argmax())


def test_top_p_zero_or_below_float32_keeps_the_most_likely_token() -> None:
    logits = _logits()
    for top_p in (0.0, 1e-300, 1e-46):
        generator = make_generator(5, CPU)
        params = SamplingParams(temperature=1.0, top_p=top_p)
        assert {sample(logits, params, generator) for _ in range(10)} == {int(logits.argmax())}


def test_unset_parameters_take_the_defaults_and_set_ones_stay() -> None:
    defaults = SamplingDefaults(temperature=0.2, top_p=0.9, top_k=40)
    assert SamplingParams().with_defaults(defaults) == SamplingParams(
        temperature=0.2, top_p=0.9, top_k=40
    )
    explicit = SamplingParams(temperature=0.0, top_p=1.0, top_k=0)
    assert explicit.with_defaults(defaults) == explicit  # 0 is a value, not "unset"


def test_defaults_are_validated() -> None:
    with pytest.raises(SamplingError):
        SamplingDefaults(temperature=3.0)
