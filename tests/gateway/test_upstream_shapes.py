"""Upstream answers and stream chunks whose fields have types no model sends (found by fuzzing).

Each reaches its client as a 200 relayed as it came, or a ``502 upstream_error`` event, never
the gateway's own ``500 internal_error`` with a traceback in its log, and none is stored: a
stored one failed every hit on it until its TTL ran out.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

import pytest

from gateway.canonical import GatewayRequest
from gateway.chat import ChoicesAdapter, ChunkFold
from gateway.messages import MessagesAdapter
from gateway.responses import ResponsesAdapter
from tests.gateway.test_api import sse_chunks
from tests.gateway.test_metrics import sample
from tests.gateway.test_upstream_faults import chunk, error_of, raw, sse

CHAT = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}  # fmt: skip
COMPLETION = {"id": "c1", "object": "text_completion", "created": 1, "model": "m",
              "choices": [{"index": 0, "text": "hi", "finish_reason": "stop", "logprobs": None}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}  # fmt: skip
RESPONSE = {"id": "resp_1", "object": "response", "created_at": 1, "status": "completed",
            "model": "m", "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
            "output": [{"type": "message", "id": "msg_1", "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": "hi", "annotations": []}]}]}  # fmt: skip
ASKED = {
    "/v1/chat/completions": (CHAT, {"messages": [{"role": "user", "content": "odd"}]}),
    "/v1/completions": (COMPLETION, {"prompt": "odd"}),
    "/v1/responses": (RESPONSE, {"input": "odd"}),
}


def _with(answer: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(answer)
    into: Any = changed
    for step in path[:-1]:
        into = into[step]
    into[path[-1]] = value
    return changed


@pytest.mark.parametrize(
    ("route", "path", "value"),
    [
        ("/v1/chat/completions", ("usage",), "x"),
        ("/v1/chat/completions", ("usage", "completion_tokens"), -1),
        ("/v1/chat/completions", ("choices", 0, "finish_reason"), []),
        ("/v1/completions", ("usage",), 5),
        ("/v1/completions", ("choices", 0, "finish_reason"), {}),
        ("/v1/responses", ("usage", "output_tokens"), "x"),
        ("/v1/responses", ("status",), []),
        ("/v1/responses", ("output",), 5),
        ("/v1/responses", ("output", 0), 5),
        ("/v1/responses", ("output", 0, "content"), "x"),
    ],
)
def test_an_answer_of_unexpected_shape_is_relayed_and_never_stored(
    make_gateway: Any, caplog: pytest.LogCaptureFixture, route: str, path: tuple[Any], value: Any
) -> None:
    gw = make_gateway()
    answer, asked = ASKED[route]
    fake = raw(json.dumps(_with(answer, path, value)))
    body = {"model": "fake-model", **asked, "fake": fake}
    for _ in range(2):  # (a stored one: the second was a hit, a 500 or a broken replay)
        response = gw.http.post(route, json=body)
        assert response.status_code == 200, response.text
        assert response.headers["x-cache"] == "miss"
    streamed = gw.http.post(route, json={**body, "stream": True})  # (nor replayed as a stream)
    assert streamed.status_code == 502, streamed.text  # (the JSON answer: no event stream)
    assert gw.http.get("/admin/stats").json()["cache"]["entries"] == 0
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_a_well_formed_answer_is_still_stored(make_gateway: Any) -> None:
    gw = make_gateway()
    for route, (answer, asked) in ASKED.items():
        body = {"model": "fake-model", **asked, "fake": raw(json.dumps(answer))}
        assert gw.http.post(route, json=body).headers["x-cache"] == "miss"
        assert gw.http.post(route, json=body).headers["x-cache"] == "exact"
        assert gw.http.post(route, json={**body, "stream": True}).headers["x-cache"] == "exact"


@pytest.mark.parametrize(
    "bad",
    [
        {"index": 0, "delta": "not an object"},
        {"index": 0, "delta": {"tool_calls": "x"}},
        {"index": 0, "delta": {"function_call": {"name": 5}}},  # (joined at the end)
        {"index": [0], "delta": {"content": "a"}},
        5,
    ],
)
def test_a_chunk_of_unexpected_shape_ends_the_stream_with_an_upstream_error(
    make_gateway: Any, caplog: pytest.LogCaptureFixture, bad: Any
) -> None:
    gw = make_gateway()
    fake = sse(chunk("Hel"), {**chunk(), "choices": [bad]}, chunk("lo", "stop"), "data: [DONE]\n\n")
    for _ in range(2):
        response = gw.chat("odd chunk", stream=True, fake=fake)
        assert response.status_code == 200 and response.headers["x-cache"] == "miss"
        error = error_of(sse_chunks(response.text))
        assert error["code"] == "upstream_error" and error["type"] == "upstream_error"
        assert "unexpected shape" in error["message"]
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def _not_stored(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "not storing" in r.getMessage()]


class _Surprise(Exception):
    """An exception no replay check expects (an adapter's bug on an odd but valid answer)."""


def test_a_replay_check_that_fails_in_any_way_only_leaves_the_answer_unstored(
    make_gateway: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(any other exception than the five it caught was a 500 after the upstream billed)"""

    def broken(self: ChoicesAdapter, request: GatewayRequest, stored: dict[str, Any]) -> Any:
        raise _Surprise("an adapter bug")

    monkeypatch.setattr(ChoicesAdapter, "replay", broken)
    caplog.set_level(logging.DEBUG, logger="gateway.pipeline")
    gw = make_gateway()
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "odd"}]}
    for _ in range(2):
        response = gw.http.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        assert response.headers["x-cache"] == "miss"
        assert response.json()["choices"][0]["message"]["content"]
    streamed = gw.http.post("/v1/chat/completions", json={**body, "stream": True})
    assert streamed.status_code == 200 and streamed.headers["x-cache"] == "miss"
    assert streamed.text.rstrip().endswith("data: [DONE]") and '"error"' not in streamed.text
    stats = gw.http.get("/admin/stats").json()["cache"]
    assert stats["entries"] == 0 and stats["stores"] == 0 and stats["store_failures"] == 3
    warned = [r for r in _not_stored(caplog) if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "_Surprise" in warned[0].getMessage()
    assert not warned[0].exc_info  # (the traceback: at debug level only, one per answer)
    traced = [r for r in caplog.records if r.exc_info]
    assert len(traced) == 3 and all(r.levelno == logging.DEBUG for r in traced)
    assert all(r.exc_info and r.exc_info[0] is _Surprise for r in traced)


def test_every_answer_not_stored_is_counted_but_few_are_logged(
    make_gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """(a misbehaving upstream made one warning per request)"""
    gw = make_gateway()
    answer, asked = ASKED["/v1/chat/completions"]
    body = {"model": "fake-model", **asked, "fake": raw(json.dumps({**answer, "usage": "x"}))}
    n = 6
    for _ in range(n):
        response = gw.http.post("/v1/chat/completions", json=body)
        assert response.status_code == 200 and response.json()["usage"] == "x"
    assert gw.http.get("/admin/stats").json()["cache"]["store_failures"] == n
    assert sample(gw.http.get("/metrics").text, "cachegate_cache_store_failures_total") == n
    warned = _not_stored(caplog)
    assert 1 <= len(warned) < n
    assert "fake-model" in warned[0].getMessage() and "AttributeError" in warned[0].getMessage()


DELIVERED = [
    (ChoicesAdapter, "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "kept?"}]}, "data: [DONE]"),
    (ResponsesAdapter, "/v1/responses", {"input": "kept?"}, "event: response.completed"),
    (MessagesAdapter, "/v1/messages",
     {"max_tokens": 8, "messages": [{"role": "user", "content": "kept?"}]},
     "event: message_stop"),
]  # fmt: skip


@pytest.mark.parametrize(("adapter", "route", "asked", "last"), DELIVERED)
def test_a_delivered_step_that_fails_still_answers_and_stores(
    make_gateway: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    adapter: type,
    route: str,
    asked: dict[str, Any],
    last: str,
) -> None:
    """(a failing ``delivered`` made a miss the upstream answered, and billed, a 500, or an
    error event in place of a stream's last one)"""

    def broken(self: Any, request: GatewayRequest, answer: dict[str, Any], **_: Any) -> None:
        raise _Surprise("an adapter bug")

    monkeypatch.setattr(adapter, "delivered", broken)
    caplog.set_level(logging.DEBUG, logger="gateway.pipeline")
    gw = make_gateway()
    body = {"model": "fake-model", **asked}
    answered = gw.http.post(route, json=body)
    assert answered.status_code == 200, answered.text
    assert answered.headers["x-cache"] == "miss" and answered.json()["id"]
    streamed = gw.http.post(route, json={**body, "stream": True, "temperature": 0.5})
    assert streamed.status_code == 200 and streamed.headers["x-cache"] == "miss"
    assert last in streamed.text and "internal_error" not in streamed.text, streamed.text
    warned = [r for r in caplog.records if "not kept for follow-ups" in r.getMessage()]
    assert len(warned) == 1 and "_Surprise" in warned[0].getMessage()
    assert not warned[0].exc_info
    traced = [r for r in caplog.records if r.exc_info]
    assert len(traced) == 2 and all(r.levelno == logging.DEBUG for r in traced)
    assert all(r.exc_info and r.exc_info[0] is _Surprise for r in traced)
    monkeypatch.undo()  # both answers were stored all the same
    assert gw.http.post(route, json=body).headers["x-cache"] == "exact"
    again = gw.http.post(route, json={**body, "stream": True, "temperature": 0.5})
    assert again.headers["x-cache"] == "exact" and last in again.text


def test_a_fold_that_fails_in_any_way_ends_the_stream_with_an_upstream_error(
    make_gateway: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(any other exception than the four it caught was the gateway's 500 internal_error)"""

    def broken(self: ChunkFold, chunk: dict[str, Any]) -> bool:
        raise _Surprise("a fold bug")

    monkeypatch.setattr(ChunkFold, "add", broken)
    caplog.set_level(logging.DEBUG, logger="gateway.pipeline")
    gw = make_gateway()
    for _ in range(2):
        response = gw.chat("odd fold", stream=True)
        assert response.status_code == 200 and response.headers["x-cache"] == "miss"
        error = error_of(sse_chunks(response.text))
        assert error["code"] == "upstream_error" and error["type"] == "upstream_error"
        assert "unexpected shape" in error["message"]
    assert gw.http.get("/admin/stats").json()["cache"]["entries"] == 0
    traced = [r for r in caplog.records if r.exc_info]
    assert len(traced) == 2 and all(r.levelno == logging.DEBUG for r in traced)
    assert all(r.exc_info and r.exc_info[0] is _Surprise for r in traced)
