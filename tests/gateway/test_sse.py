"""SSE parsing, stream assembly and replay."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.sse import Assembler, SSEParser, replay


def test_parser_handles_split_events_crlf_comments_and_multiline() -> None:
    parser = SSEParser()
    stream = b': keep-alive\r\n\r\ndata: {"a":\r\ndata: 1}\r\n\r\nevent: x\ndata: [DONE]\n\n'
    events: list[bytes] = []
    for i in range(len(stream)):  # one byte at a time
        events += parser.feed(stream[i : i + 1])
    assert events == [b'{"a":\n1}', b"[DONE]"]
    assert parser.pending == b""


def chat_chunks() -> list[dict[str, Any]]:
    head = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "system_fingerprint": "fp",
    }
    return [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]},
        {**head, "choices": [{"index": 1, "delta": {"role": "assistant", "content": "Bye"}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}]}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {**head, "choices": [{"index": 1, "delta": {}, "finish_reason": "stop"}]},
        {**head, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}},
    ]  # fmt: skip


def test_assembler_builds_the_complete_response() -> None:
    assembler = Assembler("chat")
    for chunk in chat_chunks():
        assembler.add(chunk)
    result = assembler.result()
    assert result is not None
    assert result["object"] == "chat.completion" and result["system_fingerprint"] == "fp"
    first, second = result["choices"]
    assert first["message"]["content"] == "Hello"
    assert first["message"]["tool_calls"] == [
        {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]
    assert first["finish_reason"] == "tool_calls"
    assert second["message"]["content"] == "Bye" and second["finish_reason"] == "stop"
    assert result["usage"]["total_tokens"] == 7


def test_assembler_refuses_an_unfinished_stream() -> None:
    assembler = Assembler("chat")
    for chunk in chat_chunks()[:-2]:
        assembler.add(chunk)
    assert assembler.result() is None
    assert Assembler("chat").result() is None


@pytest.mark.parametrize("include_usage", [True, False])
def test_replay_round_trips_through_the_assembler(include_usage: bool) -> None:
    assembler = Assembler("chat")
    for chunk in chat_chunks():
        assembler.add(chunk)
    original = assembler.result()
    assert original is not None
    events = list(replay(original, kind="chat", include_usage=include_usage))
    assert events[-1] == b"data: [DONE]\n\n"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"] != "c1"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert (chunks[-1]["choices"] == [] and "usage" in chunks[-1]) is include_usage
    again = Assembler("chat")
    for c in chunks:
        again.add(c)
    rebuilt = again.result()
    assert rebuilt is not None
    assert rebuilt["choices"] == original["choices"]


def test_completion_replay_and_assembly() -> None:
    stored = {"id": "x", "object": "text_completion", "created": 1, "model": "m",
              "choices": [{"index": 0, "text": "abc", "logprobs": None, "finish_reason": "length"}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}}  # fmt: skip
    chunks = [
        json.loads(e[6:]) for e in list(replay(stored, kind="completion", include_usage=True))[:-1]
    ]
    assembler = Assembler("completion")
    for c in chunks:
        assembler.add(c)
    result = assembler.result()
    assert (
        result is not None
        and result["choices"] == stored["choices"]
        and result["usage"] == stored["usage"]
    )


def test_replay_keeps_reasoning_and_refusal_in_stream_order() -> None:
    stored = {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
              "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                           "message": {"role": "assistant", "reasoning_content": "think", "content": "answer",
                                       "refusal": "no"}}]}  # fmt: skip
    chunks = [
        json.loads(e[6:]) for e in list(replay(stored, kind="chat", include_usage=False))[:-1]
    ]
    fields = [next(iter(c["choices"][0]["delta"]), None) for c in chunks]
    assert fields == ["role", "reasoning_content", "content", "refusal", None]
    assembler = Assembler("chat")
    for c in chunks:
        assembler.add(c)
    result = assembler.result()
    assert result is not None and result["choices"][0]["message"] == stored["choices"][0]["message"]
