"""Request parsing: validation errors name the parameter; cache controls from headers and body."""

from __future__ import annotations

import msgspec
import pytest

from gateway.errors import APIError
from gateway.requests import CacheControl, parse_cache_control, parse_request


def parse(body: object, headers: dict[str, str] | None = None, kind: str = "chat") -> object:
    return parse_request(kind, msgspec.json.encode(body), headers or {}, "t")  # type: ignore[arg-type]


def test_valid_chat_request_keeps_unknown_fields() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "stream_options": {"include_usage": True}, "vendor_x": {"y": 1}, "temperature": 1}  # fmt: skip
    request = parse(body)
    assert request.stream and request.include_usage  # type: ignore[attr-defined]
    assert request.body["vendor_x"] == {"y": 1}  # type: ignore[attr-defined]
    assert request.tenant == "t"  # type: ignore[attr-defined]


def test_content_parts_and_tool_messages_are_valid() -> None:
    parse({"model": "m", "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "42"},
    ]})  # fmt: skip


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": 3, "messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 1.5}, "top_p"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            "max_tokens",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5},
            "max_tokens",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "seed": "7"}, "seed"),
        ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": {}}, "tools"),
    ],
)
def test_wrong_types_name_the_param(body: object, param: str) -> None:
    with pytest.raises(APIError) as error:
        parse(body)
    assert error.value.status == 400 and error.value.param == param


def test_integral_floats_in_integer_fields_are_sent_as_integers() -> None:
    """``3.0`` is the integer 3 (JSON Schema's and vLLM's integers), sent on as ``3``."""
    chat = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 3.0,
            "max_completion_tokens": 4.0, "n": 2.0, "seed": -1.0, "top_logprobs": 2.0}  # fmt: skip
    body = parse(chat).body  # type: ignore[attr-defined]
    assert [(body[k], type(body[k])) for k in list(chat)[2:]] == [
        (3, int), (4, int), (2, int), (-1, int), (2, int)
    ]  # fmt: skip
    completion = parse({"model": "m", "prompt": "x", "logprobs": 1.0}, kind="completion")
    assert type(completion.body["logprobs"]) is int  # type: ignore[attr-defined]
    assert type(parse({**chat, "temperature": 1.0}).body["temperature"]) is float  # type: ignore[attr-defined]


def test_completion_prompts() -> None:
    assert parse({"model": "m", "prompt": "hi"}, kind="completion").kind == "completion"  # type: ignore[attr-defined]
    parse({"model": "m", "prompt": ["a", "b"]}, kind="completion")
    parse({"model": "m", "prompt": [1, 2, 3]}, kind="completion")
    parse({"model": "m", "prompt": ""}, kind="completion")  # as OpenAI: a prompt, if empty
    with pytest.raises(APIError):
        parse({"model": "m", "prompt": []}, kind="completion")
    with pytest.raises(APIError):
        parse({"model": "m"}, kind="completion")


def test_cache_controls_from_headers_and_body() -> None:
    assert parse_cache_control({}) == CacheControl()
    control = parse_cache_control(
        {
            "cache-control": "no-cache, max-age=30",
            "x-cache-namespace": "team-a",
            "x-cache-threshold": "0.8",
            "x-cache-ttl": "60",
        }
    )
    assert control == CacheControl(
        no_cache=True, namespace="team-a", threshold=0.8, ttl=60.0, max_age=30.0
    )
    # RFC 9111's quoted form of the argument (was a 400)
    assert parse_cache_control({"cache-control": 'max-age="0"'}).max_age == 0.0
    body = parse_cache_control(
        {}, {"no-store": True, "no_cache": False, "namespace": "n", "threshold": 0, "ttl": 5}
    )
    assert body == CacheControl(no_store=True, namespace="n", threshold=0.0, ttl=5.0)
    assert parse_cache_control({}, {"threshold": 1}).threshold == 1.0
    # both given: the body's value wins; no-cache / no-store hold if either asks (docs)
    both = parse_cache_control(
        {"cache-control": "no-cache", "x-cache-namespace": "a", "x-cache-ttl": "100"},
        {"namespace": "", "ttl": 1, "no-cache": False},
    )
    assert both == CacheControl(no_cache=True, namespace="", ttl=1.0)


@pytest.mark.parametrize(
    ("headers", "extension"),
    [
        ({"x-cache-threshold": "1.01"}, None),
        ({"x-cache-threshold": "nan"}, None),
        ({"x-cache-ttl": "0"}, None),
        ({"x-cache-ttl": "inf"}, None),
        ({"x-cache-ttl": "1_000"}, None),  # (Python's number syntax: was 1000)
        ({}, {"ttl": 1e16}),
        ({"cache-control": "max-age=-1"}, None),
        ({"x-cache-namespace": "x" * 129}, None),
        ({}, {"threshold": "0.5"}),
        ({}, {"threshold": True}),
        ({}, {"no-cache": "yes"}),
        ({}, {"namespace": 3}),
        ({}, ["no-cache"]),
    ],
)
def test_bad_cache_controls(headers: dict[str, str], extension: object) -> None:
    with pytest.raises(APIError) as error:
        parse_cache_control(headers, extension)
    assert error.value.status == 400 and error.value.param
