"""SSE parsing, stream assembly and replay."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.sse import Assembler, EventTooLarge, SSEParser, replay


def test_parser_handles_split_events_crlf_comments_and_multiline() -> None:
    parser = SSEParser()
    stream = b': keep-alive\r\n\r\ndata: {"a":\r\ndata: 1}\r\n\r\nevent: x\ndata: [DONE]\n\n'
    events: list[bytes] = []
    for i in range(len(stream)):  # one byte at a time
        events += parser.feed(stream[i : i + 1])
    assert events == [b'{"a":\n1}', b"[DONE]"]
    assert parser.pending == b""
    # every split of the same stream gives the same events (CR halves of CRLF included)
    for size in (2, 3, 5, 7, 64):
        parser = SSEParser()
        split = [parser.feed(stream[i : i + size]) for i in range(0, len(stream), size)]
        assert [e for part in split for e in part] == [b'{"a":\n1}', b"[DONE]"], size


def test_parser_ends_a_cr_only_stream_whose_last_byte_is_cr() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: 1\r\rdata: [DONE]\r\r") == [b"1"]  # (the last CR: a CRLF?)
    assert parser.end() == [b"[DONE]"]  # no: the stream ended there
    assert parser.end() == [] and parser.pending == b""
    crlf = SSEParser()
    assert crlf.feed(b"data: 1\r\n\r\n") == [b"1"] and crlf.end() == []


def test_parser_tells_of_an_event_of_comments_only() -> None:
    parser = SSEParser()
    assert parser.feed(b": keep-alive\r\n\r\n") == [] and parser.commented()
    assert not parser.commented()  # (once)
    assert parser.feed(b"event: ping\n\n\n\n") == [] and not parser.commented()
    assert parser.feed(b"id: 1\n: x\n\ndata: 1\n\n") == [b"1"] and parser.commented()


def test_parser_bounds_an_event_and_reads_a_large_one_in_linear_time() -> None:
    parser = SSEParser(max_event_bytes=1000)
    assert parser.feed(b"data: " + b"x" * 900) == []
    with pytest.raises(EventTooLarge):
        parser.feed(b"y" * 200)
    big = b"data: " + b"z" * (8 * 2**20) + b"\r\n\r\n"  # 8 MB in 4 KiB reads: was 10 s
    parser = SSEParser()
    events = [e for i in range(0, len(big), 4096) for e in parser.feed(big[i : i + 4096])]
    assert events == [b"z" * (8 * 2**20)]


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


def test_assembler_joins_reasoning_and_takes_the_head_from_the_first_chunk_that_has_it() -> None:
    # Azure opens with a prompt-filter chunk: empty id/model/created and no choices.
    filter_chunk = {"id": "", "object": "", "created": 0, "model": "", "choices": [],
                    "prompt_filter_results": [{"prompt_index": 0}]}  # fmt: skip
    head = {"id": "chatcmpl-a", "object": "chat.completion.chunk", "created": 7,
            "model": "gpt-4o-2024-08-06", "system_fingerprint": "fp_a"}  # fmt: skip

    def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}

    assembler = Assembler("chat")
    for c in (
        filter_chunk,
        delta({"role": "assistant", "content": ""}),
        delta({"reasoning": "Let me "}),
        delta({"reasoning": "think."}),
        delta({"content": "4"}),
        delta({}, "stop"),
    ):
        assembler.add(c)
    result = assembler.result()
    assert result is not None
    assert (result["id"], result["model"], result["created"]) == ("chatcmpl-a", head["model"], 7)
    assert result["system_fingerprint"] == "fp_a"
    message = result["choices"][0]["message"]
    assert message["reasoning"] == "Let me think." and message["content"] == "4"


def test_replay_sends_every_message_field_and_null_content_for_tool_calls() -> None:
    annotations = [{"type": "url_citation", "url_citation": {"url": "https://x", "title": "x"}}]
    message = {"role": "assistant", "content": "Paris.", "reasoning": "France's capital.",
               "annotations": annotations}  # fmt: skip
    tool = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "f", "arguments": "{}"}}]}  # fmt: skip
    for msg in (message, tool):
        stored = {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
                  "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                               "message": msg}]}  # fmt: skip
        chunks = [
            json.loads(e[6:]) for e in list(replay(stored, kind="chat", include_usage=False))[:-1]
        ]
        opening = "" if msg["content"] is not None else None
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": opening}
        assembler = Assembler("chat")
        for c in chunks:
            assembler.add(c)
        result = assembler.result()
        assert result is not None and result["choices"][0]["message"] == msg


def test_provider_stream_variants_are_cached_whole_through_http(make_gateway: Any) -> None:
    """An Azure-style filter chunk first, reasoning as ``delta.reasoning``: a streamed hit and a
    JSON hit give back the model name and the whole reasoning text."""
    head = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 3, "model": "gpt-x"}
    events = [
        {"id": "", "object": "", "created": 0, "model": "", "choices": [],
         "prompt_filter_results": []},
        *({**head, "choices": [{"index": 0, "delta": d, "finish_reason": f}]}
          for d, f in (({"role": "assistant", "content": ""}, None), ({"reasoning": "2+2 "}, None),
                       ({"reasoning": "is 4."}, None), ({"content": "4"}, None), ({}, "stop"))),
    ]  # fmt: skip
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    fake = {"raw": {"content_type": "text/event-stream", "body": body}}
    gw = make_gateway()

    def streamed(response: Any) -> tuple[set[str], str]:
        chunks = [json.loads(line[6:]) for line in response.text.split("\n")
                  if line.startswith("data: {")]  # fmt: skip
        text = "".join(c["choices"][0]["delta"].get("reasoning") or "" for c in chunks
                       if c["choices"])  # fmt: skip
        return {c["model"] for c in chunks}, text

    miss = gw.chat("2+2?", stream=True, fake=fake)
    assert miss.headers["x-cache"] == "miss" and streamed(miss)[1] == "2+2 is 4."
    hit = gw.chat("2+2?", stream=True, fake=fake)
    assert hit.headers["x-cache"] == "exact"
    assert streamed(hit) == ({"gpt-x"}, "2+2 is 4.")
    as_json = gw.chat("2+2?", fake=fake)
    assert as_json.headers["x-cache"] == "exact"
    assert as_json.json()["model"] == "gpt-x"
    assert as_json.json()["choices"][0]["message"]["reasoning"] == "2+2 is 4."


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {**head, "choices": [choice], **extra}


def test_audio_pieces_lists_and_extra_fields_are_kept_and_replayed() -> None:
    chunks = [
        _chunk({"role": "assistant", "audio": {"id": "audio_1", "transcript": "The capital "}},
               citations=["https://a"]),
        _chunk({"audio": {"data": "AAAA", "transcript": "is Paris."},
                "reasoning_details": [{"text": "So"}]}, citations=["https://a"]),
        _chunk({"audio": {"data": "BBBB", "expires_at": 9},
                "reasoning_details": [{"text": " yes."}]}, citations=["https://a"]),
        {**_chunk({}, "stop", citations=["https://a"]),
         "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": 7}]},
    ]  # fmt: skip
    assembler = Assembler("chat")
    for c in chunks:
        assembler.add(c)
    result = assembler.result()
    assert result is not None and result["citations"] == ["https://a"]
    choice = result["choices"][0]
    assert choice["stop_reason"] == 7
    assert choice["message"]["audio"] == {
        "id": "audio_1", "transcript": "The capital is Paris.", "data": "AAAABBBB", "expires_at": 9
    }  # fmt: skip
    assert choice["message"]["reasoning_details"] == [{"text": "So"}, {"text": " yes."}]
    replayed = [
        json.loads(e[6:]) for e in list(replay(result, kind="chat", include_usage=False))[:-1]
    ]
    assert all(c["citations"] == ["https://a"] for c in replayed)
    again = Assembler("chat")
    for c in replayed:
        again.add(c)
    assert again.result() == {
        **result,
        "id": again.result()["id"],
        "created": again.result()["created"],
    }


def test_a_field_sent_again_changed_is_not_joined_so_not_stored() -> None:
    assembler = Assembler("chat")
    for c in (
        _chunk({"role": "assistant", "thinking": "Let me "}),
        _chunk({"thinking": "see."}),
        _chunk({"content": "4"}, "stop"),
    ):
        assembler.add(c)
    assert assembler.unjoinable == "thinking" and assembler.result() is None
    same = Assembler("chat")  # a field repeated unchanged is fine
    for c in (_chunk({"role": "assistant", "name": "bot"}), _chunk({"name": "bot"}, "stop")):
        same.add(c)
    assert same.result() is not None


def test_a_stream_that_cannot_be_joined_is_relayed_but_not_cached(make_gateway: Any) -> None:
    events = [_chunk({"role": "assistant", "thinking": "Let me "}), _chunk({"thinking": "see."}),
              _chunk({"content": "4"}, "stop")]  # fmt: skip
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    fake = {"raw": {"content_type": "text/event-stream", "body": body}}
    gw = make_gateway()
    first = gw.chat("think", stream=True, fake=fake)
    assert first.status_code == 200 and first.text.endswith("data: [DONE]\n\n")
    assert '"thinking": "see."' in first.text or '"thinking":"see."' in first.text
    assert gw.chat("think", stream=True, fake=fake).headers["x-cache"] == "miss"


def test_a_stream_opened_with_a_byte_order_mark_keeps_its_first_event(make_gateway: Any) -> None:
    """An upstream that writes a UTF-8 BOM first (.NET's UTF-8 writers do): the standard says
    it is not part of the first line. Read as part of it, the first event had no data line
    and was dropped unseen: its text was missing from the answer, and the answer was cached."""
    parser = SSEParser()
    stream = b'\xef\xbb\xbfdata: {"a":1}\n\n'
    assert [e for i in range(len(stream)) for e in parser.feed(stream[i : i + 1])] == [b'{"a":1}']
    assert SSEParser().feed(b"\xef\xbb\xbf\xef\xbb\xbfdata: 1\n\n") == []  # (only one, first)
    events = (_chunk({"role": "assistant", "content": "Hel"}), _chunk({"content": "lo"}, "stop"))
    body = "\ufeff" + "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    fake = {"raw": {"content_type": "text/event-stream", "body": body}}
    gw = make_gateway()
    for cache in ("miss", "exact"):
        response = gw.chat("bom", stream=True, fake=fake)
        assert response.headers["x-cache"] == cache
        chunks = [json.loads(line[6:]) for line in response.text.split("\n")
                  if line.startswith("data: {")]  # fmt: skip
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "Hello"
