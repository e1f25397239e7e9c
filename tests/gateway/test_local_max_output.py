"""A local model's bound on the output tokens one request may ask for (``max_output_tokens``).

With ``context_overflow: sinks`` nothing else bounded ``max_tokens``: a request for 10**6 (or
2**53) tokens held the model until its client left. As vLLM and OpenAI answer a ``max_tokens``
past what the model produces, it is a 400 naming the field the client set, on every route
that reaches a local model (a tiny random Llama, with the bundled tokenizer, over HTTP).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import ConfigError, load_config_text
from tests.conftest import Gateway

WINDOW = 64


@pytest.fixture(scope="module")
def gw(bundled_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    where = tmp_path_factory.mktemp("max-output")
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir)
    tiny = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=256, tie_word_embeddings=True)  # fmt: skip
    LlamaForCausalLM(tiny).save_pretrained(where / "tiny")
    tokenizer.save_pretrained(where / "tiny")
    model = {"backend": "local", "source": str(where / "tiny"), "threads": 1,
             "max_context": WINDOW, "default_max_tokens": 4}  # fmt: skip
    text = yaml.safe_dump({
        "data_dir": str(where / "data"),
        "cache": {"semantic": {"enabled": False}},
        "models": {
            "sinks": {**model, "context_overflow": "sinks"},  # bound: the window
            "sinks-default": {**model, "context_overflow": "sinks", "default_max_tokens": 256},
            "capped": {**model, "max_output_tokens": 8},  # (error mode, bound set)
            "strict": model,  # error mode: the window bounds prompt + max_tokens, as before
        },
    })  # fmt: skip
    with Gateway(load_config_text(text)) as gateway:
        yield gateway


def _post(gw: Gateway, route: str, model: str, **fields: Any) -> Any:
    question = {
        "/v1/chat/completions": {"messages": [{"role": "user", "content": "Count to ten."}]},
        "/v1/completions": {"prompt": "One, two,"},
        "/v1/responses": {"input": "Count to ten."},
        "/v1/messages": {"messages": [{"role": "user", "content": "Count to ten."}]},
    }[route]
    return gw.http.post(route, json={"model": model, **question, **fields})


@pytest.mark.parametrize(
    ("route", "field"),
    [
        ("/v1/chat/completions", "max_tokens"),
        ("/v1/chat/completions", "max_completion_tokens"),
        ("/v1/completions", "max_tokens"),
        ("/v1/responses", "max_output_tokens"),
        ("/v1/messages", "max_tokens"),
    ],
)
@pytest.mark.parametrize("asked", [WINDOW + 1, 10**6, 2**53])
def test_more_output_tokens_than_the_window_with_sinks_is_a_400(
    gw: Gateway, route: str, field: str, asked: int
) -> None:
    response = _post(gw, route, "sinks", **{field: asked})
    assert response.status_code == 400, response.text
    assert response.headers["x-cache"] == "bypass"
    error = response.json()["error"]
    assert f"{asked}" in error["message"] and f"at most {WINDOW} tokens" in error["message"]
    if route == "/v1/messages":  # (Anthropic's body: no param; its type names the mistake)
        assert response.json()["type"] == "error" and error["type"] == "invalid_request_error"
    else:
        assert (error["param"], error["code"]) == (field, "invalid_value")
        assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("route", "field"),
    [
        ("/v1/chat/completions", "max_tokens"),
        ("/v1/completions", "max_tokens"),
        ("/v1/responses", "max_output_tokens"),
        ("/v1/messages", "max_tokens"),
    ],
)
def test_up_to_the_bound_is_answered(gw: Gateway, route: str, field: str) -> None:
    """The window itself with sinks (past it the answer slides), and a set bound."""
    assert _post(gw, route, "sinks", **{field: WINDOW}).status_code == 200
    assert _post(gw, route, "capped", **{field: 8}).status_code == 200
    refused = _post(gw, route, "capped", **{field: 9})
    assert refused.status_code == 400 and "at most 8 tokens" in refused.json()["error"]["message"]


def test_error_mode_without_a_bound_is_unchanged(gw: Gateway) -> None:
    """``context_overflow: error`` and no ``max_output_tokens``: the window bounds prompt +
    max_tokens (``context_length_exceeded``), as before."""
    response = _post(gw, "/v1/chat/completions", "strict", max_tokens=10**6)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("max_tokens", "context_length_exceeded")
    assert _post(gw, "/v1/chat/completions", "strict", max_tokens=8).status_code == 200


def test_a_default_above_the_bound_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="default_max_tokens"):
        load_config_text(
            "models: {m: {backend: local, max_output_tokens: 8, default_max_tokens: 9}}"
        )


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions", "/v1/responses"])
def test_a_default_above_the_windows_bound_is_held_to_it(gw: Gateway, route: str) -> None:
    """With sinks and no ``max_output_tokens`` the bound is the window, but a request that set
    no ``max_tokens`` got ``default_max_tokens`` (256 here) past it, while asking for 65 was a
    400: it gets the bound."""
    answer = _post(gw, route, "sinks-default", temperature=0).json()
    usage = answer["usage"]
    produced = usage.get("completion_tokens", usage.get("output_tokens"))
    assert 0 < produced <= WINDOW, answer
