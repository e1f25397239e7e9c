"""Malformed and odd upstream answers: each becomes a clear OpenAI error, and none is cached.

The fake upstream's ``raw`` option sends a status, headers and body exactly as written.
"""

from __future__ import annotations

import gc
import json
import logging
import secrets
import sys
import time
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import wait_for
from tests.fake_upstream import FakeUpstream
from tests.gateway.test_api import sse_chunks
from tests.gateway.test_tracing import traced

HEAD = {"id": "chatcmpl-raw", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def raw(
    body: str,
    *,
    status: int = 200,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "raw": {"status": status, "content_type": content_type, "body": body, "headers": headers}
    }


def sse(*events: Any) -> dict[str, Any]:
    """An SSE body: dicts are sent as one JSON line, strings exactly as given."""
    body = "".join((e if isinstance(e, str) else f"data: {json.dumps(e)}\n\n") for e in events)
    return raw(body, content_type="text/event-stream")


def chunk(content: str | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    delta = {} if content is None else {"content": content}
    return {**HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def error_of(events: list[Any]) -> dict[str, Any]:
    last = events[-1]
    assert isinstance(last, dict) and set(last) == {"error"}, events
    error: dict[str, Any] = last["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def sdk_stream(gw: Any, content: str, fake: dict[str, Any]) -> tuple[str, str]:
    """Asks ``gw`` for a stream through the openai SDK (``with_streaming_response``, for the
    headers): the answer's ``x-cache`` and the text that the SDK read from its chunks."""
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-none", max_retries=0)
    with client.chat.completions.with_streaming_response.create(
        model="fake-model",
        messages=[{"role": "user", "content": content}],
        stream=True,
        extra_body={"fake": fake},
    ) as raw_response:
        stream = raw_response.parse()
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        return raw_response.headers["x-cache"], text


def test_huge_number_in_a_cache_option_is_400(make_gateway: Any) -> None:
    gw = make_gateway()
    for option in ("ttl", "threshold", "max_age"):
        response = gw.chat("big", cache={option: 10**400})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == f"cache.{option}"


def test_body_its_encoding_cannot_undo_is_502(make_gateway: Any) -> None:
    gw = make_gateway()
    gzip = {"content-encoding": "gzip"}
    response = gw.chat("gz", fake=raw('{"choices": []}', headers=gzip))
    assert response.status_code == 502 and response.json()["error"]["code"] == "upstream_error"
    stream = gw.chat(
        "gz",
        stream=True,
        fake=raw('data: {"choices": []}\n\n', content_type="text/event-stream", headers=gzip),
    )
    assert stream.status_code == 200
    error = error_of(sse_chunks(stream.text))
    assert error["code"] == "upstream_error" and "broke off" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_redirect_is_502_not_success(make_gateway: Any, upstream: Any, stream: bool) -> None:
    gw = make_gateway()
    fake = raw("", status=302, headers={"location": "http://elsewhere.invalid/"})
    response = gw.chat("moved", stream=stream, fake=fake)
    assert response.status_code == 502
    assert "HTTP 302" in response.json()["error"]["message"]
    assert upstream.stats["chat"] == 1  # not retried: another try gets the same redirect


def test_error_fields_of_the_wrong_type_are_made_strings_or_null(make_gateway: Any) -> None:
    gw = make_gateway()
    body = '{"error": {"message": "weird", "type": 5, "param": [1], "code": {"a": 1}}}'
    response = gw.chat("teapot", fake=raw(body, status=418))
    assert response.status_code == 418
    assert response.json()["error"] == {
        "message": "weird",
        "type": "5",
        "param": None,
        "code": None,
    }


@pytest.mark.parametrize("said", ["nan", "-1"])  # (-1 was read as 0: no backoff, passed on)
def test_retry_after_that_is_not_a_number_is_not_passed_on(
    make_gateway: Any, upstream: Any, said: str
) -> None:
    gw = make_gateway()
    response = gw.chat(f"limited {said}", fake={"status": 429, "retry_after": said})
    assert response.status_code == 429
    assert "retry-after" not in response.headers
    assert upstream.stats["chat"] == 3  # retried with the configured backoff instead


@pytest.mark.parametrize("body", ['{"id": "x", "choices": [', "<html>busy</html>", "[1, 2]"])
def test_an_answer_that_is_no_json_object_is_coded_upstream_error(
    make_gateway: Any, body: str
) -> None:
    """As the other answers that are no answers are (it said ``code: null``, ``api_error``)."""
    gw = make_gateway()
    response = gw.chat(f"no json {body}", fake=raw(body))
    assert response.status_code == 502
    error = response.json()["error"]
    assert (error["code"], error["type"]) == ("upstream_error", "upstream_error")
    assert gw.chat(f"no json {body}").headers["x-cache"] == "miss"  # nothing stored


def test_answer_without_its_message_is_served_but_not_cached(make_gateway: Any) -> None:
    gw = make_gateway()
    body = json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop"}],
        }
    )
    first = gw.chat("hollow", fake=raw(body))
    assert first.status_code == 200 and first.headers["x-cache"] == "miss"
    assert gw.chat("hollow", fake=raw(body)).headers["x-cache"] == "miss"


def test_json_answer_to_a_stream_request_is_502_with_its_message(make_gateway: Any) -> None:
    gw = make_gateway()
    body = '{"error": {"message": "quota exceeded", "type": "insufficient_quota"}}'
    response = gw.chat("quota", stream=True, fake=raw(body))
    assert response.status_code == 502
    assert "quota exceeded" in response.json()["error"]["message"]
    plain = gw.chat("plain", stream=True, fake=raw('{"choices": []}'))
    assert plain.status_code == 502
    assert "answered a stream request with application/json" in plain.json()["error"]["message"]


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (raw("", status=204, content_type="text/plain"), "with HTTP 204 (no content)."),
        (raw("quota exceeded\n", content_type="text/plain"), "with text/plain: quota exceeded"),
        (raw("<html>log in</html>", content_type="text/html"), "with text/html: <html>log in"),
        (raw("<html>log in</html>", content_type="text/html; charset=utf-8"), "<html>log in"),
        (raw("Bad gateway", content_type="application/octet-stream"), ": Bad gateway"),
        (raw('{"choices": []}', content_type="application/octet-stream"), ': {"choices"'),
        (raw("", content_type="application/octet-stream"), "with application/octet-stream."),
        (raw("\n" * 2000, content_type="text/plain"), "with text/plain."),
    ],
)
def test_an_answer_to_a_stream_request_that_is_no_stream_is_502(
    make_gateway: Any, answer: dict[str, Any], says: str
) -> None:
    # (it was a 200 whose only event said stream_incomplete)
    gw = make_gateway()
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-none", max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": "no stream"}],
            stream=True,
            extra_body={"fake": answer},
        )
    assert caught.value.status_code == 502
    error = caught.value.response.json()["error"]
    assert error["code"] == "upstream_error" and says in error["message"], error
    again = gw.chat("no stream", stream=True, fake=answer)  # nothing was stored
    assert again.status_code == 502, again.text


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("data: oops not json\n\n", "not a JSON object: 'oops not json'"),
        ('data: ["a list"]\n\n', "not a JSON object"),
        ('data: {"error": "boom"}\n\n', "failed mid-stream: boom"),
        ('data: {"error": {"no message": 1}}\n\n', "failed mid-stream"),
    ],
)
def test_malformed_error_event_becomes_an_openai_error_event(
    make_gateway: Any, bad: str, says: str
) -> None:
    gw = make_gateway()
    fake = sse(chunk("Hel"), bad, chunk("lo", "stop"), "data: [DONE]\n\n")
    response = gw.chat("mid", stream=True, fake=fake)
    events = sse_chunks(response.text)
    assert events[0]["choices"][0]["delta"] == {"content": "Hel"}
    error = error_of(events)
    assert error["code"] == "upstream_error" and says in error["message"]
    assert gw.chat("mid", stream=True, fake=fake).headers["x-cache"] == "miss"


def test_openai_error_event_passes_through(make_gateway: Any) -> None:
    gw = make_gateway()
    error = {"error": {"message": "overloaded", "type": "server_error", "param": None,
                       "code": "overloaded"}}  # fmt: skip
    response = gw.chat("mid", stream=True, fake=sse(chunk("Hel"), error))
    assert sse_chunks(response.text)[-1] == error


def test_chunk_with_a_null_error_member_is_an_ordinary_chunk(make_gateway: Any) -> None:
    gw = make_gateway()
    fake = sse(chunk("Hel", error=None), chunk("lo", "stop"), "data: [DONE]\n\n")
    events = sse_chunks(gw.chat("null", stream=True, fake=fake).text)
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1]) == "Hello"
    replay = gw.chat("null", stream=True, fake=fake)
    assert replay.headers["x-cache"] == "exact"  # a complete answer, so it was stored


def test_event_whose_data_spans_lines_reaches_the_sdk_whole(make_gateway: Any) -> None:
    gw = make_gateway()
    first = json.dumps(chunk("Hel"), indent=1)  # one JSON value over several lines
    multi = "".join(f"data: {line}\n" for line in first.split("\n")) + "\n"
    fake = sse(multi, chunk("lo", "stop"), "data: [DONE]\n\n")
    for expected in ("miss", "exact"):
        assert sdk_stream(gw, "lines", fake) == (expected, "Hello")


def test_upstream_keep_alives_reach_the_client_of_a_quiet_stream(make_gateway: Any) -> None:
    # the model thinks for 2.5 s, its upstream sending a comment every 0.4 s: a client whose
    # read timeout is 1 s is answered, as it is straight from that upstream (they were dropped)
    gw = make_gateway()
    client = openai.OpenAI(
        base_url=f"{gw.url}/v1", api_key="sk-none", max_retries=0, timeout=httpx.Timeout(1.0)
    )
    fake = {"first_delay": 2.5, "keepalive": 0.4}
    stream = client.chat.completions.create(
        model="fake-model",
        messages=[{"role": "user", "content": "think"}],
        stream=True,
        extra_body={"fake": fake},
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.startswith("answer #")
    with gw.http.stream("POST", "/v1/chat/completions", json={
        "model": "fake-model", "messages": [{"role": "user", "content": "again"}],
        "stream": True, "fake": {**fake, "first_delay": 1.0}}) as response:  # fmt: skip
        body = response.read()
    assert body.startswith(b": keep-alive\n\n") and body.endswith(b"data: [DONE]\n\n")


def test_unreachable_after_retries_tells_clients_not_to_retry(
    make_gateway: Any, refused_url: str
) -> None:
    gw = make_gateway(model_yaml=f"{{base_url: '{refused_url}', max_retries: 1}}")
    response = gw.chat("nobody home")
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unreachable"
    assert response.headers["x-should-retry"] == "false"


def test_all_connections_busy_is_503_upstream_busy(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    import threading

    gw = make_gateway(model_yaml="{max_connections: 1, timeout: {pool: 0.3}}")
    slow = threading.Thread(target=gw.chat, args=("slow",), kwargs={"fake": {"delay": 4}})
    slow.start()
    wait_for(lambda: upstream.stats["chat"] >= 1, timeout=3)  # it holds the one connection
    assert upstream.stats["chat"] == 1
    response = gw.chat("waiting")
    slow.join()
    assert response.status_code == 503  # not a 504 "timed out": the upstream is fine
    assert response.json()["error"]["code"] == "upstream_busy"


def test_max_connections_are_on_the_wire_at_once_and_the_next_is_turned_away(
    make_gateway: Any, upstream: Any
) -> None:
    """``max_connections: 20``: all 20 requests reach the upstream at once (the transport opens
    a connection for each), and the 21st is turned away by the gate, not queued."""
    import threading

    gw = make_gateway(model_yaml="{max_connections: 20, timeout: {pool: 0.3}}")
    answers: list[int] = []
    slow = [
        threading.Thread(
            target=lambda i=i: answers.append(gw.chat(f"slow {i}", fake={"delay": 3}).status_code)
        )
        for i in range(20)
    ]
    for thread in slow:
        thread.start()
    deadline = time.monotonic() + 20
    while upstream.stats["chat"] < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.stats["chat"] == 20  # every one of them reached the upstream
    response = gw.chat("the 21st")
    for thread in slow:
        thread.join()
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "upstream_busy"
    assert answers == [200] * 20


def test_overload_is_turned_away_not_queued_past_the_pool_timeout(
    make_gateway: Any, upstream: Any
) -> None:
    """40 requests at once on 4 connections, 0.3 s each upstream, pool timeout 0.8 s.

    About 4 x (0.8 / 0.3 + 1), ~15, can start within 0.8 s; the rest get 503 upstream_busy.
    (httpcore alone restarts a waiter's pool timeout whenever a freed connection is raced
    for: all 40 were served, the last after ~3 s, and the queue grew with the load.)
    """
    import asyncio

    import httpx

    gw = make_gateway(model_yaml="{max_connections: 4, timeout: {pool: 0.8}}")

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
            asks = [
                {
                    "model": "fake-model",
                    "fake": {"delay": 0.3},
                    "messages": [{"role": "user", "content": f"question {i}"}],
                }
                for i in range(40)
            ]
            return list(
                await asyncio.gather(*(http.post("/v1/chat/completions", json=a) for a in asks))
            )

    responses = asyncio.run(burst())
    served = [r for r in responses if r.status_code == 200]
    busy = [r for r in responses if r.status_code == 503]
    assert len(served) + len(busy) == 40
    # (a wide margin for timing: unbounded, all 40 were served, the last after ~3 s; a loaded
    # machine may start the 40 over a while, and serve more of them in the pool's 0.8 s)
    assert 4 <= len(served) <= 32 and len(busy) >= 8
    assert {r.json()["error"]["code"] for r in busy} == {"upstream_busy"}
    assert upstream.stats["chat"] == len(served)
    # the turns came back: the next request is served
    assert gw.chat("after the burst").status_code == 200


def test_a_custom_transport_with_read_answers_gives_its_turns_back(tmp_path: Any) -> None:
    """A transport that returns answers already read (httpx.MockTransport) closes nothing."""
    import httpx

    from gateway.config import load_config_text
    from tests.conftest import Gateway

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        return httpx.Response(200, json={
            "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "hi"}}]})  # fmt: skip

    config = load_config_text(
        f"data_dir: {tmp_path}\ncache: {{enabled: false}}\nmodels:\n  m: {{backend: openai, "
        "base_url: 'http://upstream.test/v1', max_connections: 2, timeout: {pool: 0.3}}\n"
    )
    gw = Gateway(config, transport=httpx.MockTransport(answer))
    try:
        statuses = [
            gw.http.post(
                "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]},
            ).status_code
            for i in range(5)
        ]
        assert statuses == [200] * 5  # was 200, 200, then 503 upstream_busy
    finally:
        gw.stop()


class RawUpstream:
    """An HTTP/1.1 server on a raw socket, for connection-level faults.

    ``work`` seconds after reading a request it answers (``answer_first``: only the first
    request of each connection; later ones are closed unanswered, as an upstream's idle
    timeout closes a pooled connection at the wrong moment) or closes without answering
    (after sending ``partial``, the start of an answer, when given).
    """

    def __init__(
        self, *, answer_first: bool = True, work: float = 0.0, partial: bytes = b""
    ) -> None:
        import socket
        import threading

        self.answer_first, self.work, self.partial = answer_first, work, partial
        self.received = self.answered = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _read_request(self, conn: Any) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next(
            line.split(b":")[1] for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ))  # fmt: skip
        while len(body) < length:
            body += conn.recv(65536)
        self.received += 1
        time.sleep(self.work)
        return True

    def _connection(self, conn: Any) -> None:
        with conn:
            if not self._read_request(conn) or not self.answer_first:
                conn.sendall(self.partial)
                return  # closed unanswered
            answer = json.dumps({
                "id": "x", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "fine"}}],
            }).encode()  # fmt: skip
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(answer)}\r\n\r\n".encode()
                + answer
            )
            self.answered += 1
            self._read_request(conn)  # the next request on this connection: closed unanswered

    def close(self) -> None:
        self._sock.close()


def test_a_kept_alive_connection_closed_under_a_request_is_sent_again(
    make_gateway: Any,
) -> None:
    server = RawUpstream()
    try:
        gw = make_gateway(model_yaml=f"{{base_url: '{server.url}', max_retries: 0}}")
        assert gw.chat("first").status_code == 200
        second = gw.chat("second")  # goes out on the kept-alive connection, which closes
        assert second.status_code == 200, second.text  # was 502 "broke off"
        assert server.answered == 2
        # the resend is a retry like any other, in /metrics (it was only logged)
        metrics = gw.http.get("/metrics").text
        retried = 'cachegate_upstream_retries_total{model="fake-model",why="stale connection"}'
        assert f"{retried} 1.0" in metrics.splitlines()
    finally:
        server.close()


def test_an_upstream_that_dies_while_working_is_not_sent_the_request_again(
    make_gateway: Any,
) -> None:
    server = RawUpstream(answer_first=False, work=0.5)  # reads, works, then closes
    try:
        gw = make_gateway(model_yaml=f"{{base_url: '{server.url}', max_retries: 0}}")
        response = gw.chat("expensive")
        assert response.status_code == 502 and "broke off" in response.json()["error"]["message"]
        assert server.received == 1  # it may have done (and billed) the work: not twice
    finally:
        server.close()


@pytest.mark.parametrize("partial", [b"", b"HTTP/1.1 200 OK\r\ncontent-"])
def test_a_fresh_connection_that_breaks_at_once_is_not_sent_the_request_again(
    make_gateway: Any, partial: bytes
) -> None:
    """Only a kept-alive connection closed as idle proves the upstream never read the request:
    a fresh one that breaks, even within the resend window, may have done the work."""
    server = RawUpstream(answer_first=False, work=0.1, partial=partial)
    try:
        gw = make_gateway(model_yaml=f"{{base_url: '{server.url}', max_retries: 0}}")
        response = gw.chat("expensive")
        assert response.status_code == 502 and "broke off" in response.json()["error"]["message"]
        assert server.received == 1
    finally:
        server.close()


def test_a_503_asking_to_wait_longer_than_max_retry_wait_passes_its_retry_after_on(
    make_gateway: Any, upstream: Any
) -> None:
    """Not waited here (longer than max_retry_wait): the client is told how long to wait,
    or its SDK would retry within seconds."""
    gw = make_gateway()
    response = gw.chat("down for maintenance", fake={"status": 503, "retry_after": "600"})
    assert response.status_code == 502 and response.headers["retry-after"] == "600"
    assert upstream.stats["chat"] == 1


def test_an_upstream_refusing_the_gateways_own_key_is_the_operators_502(
    make_gateway: Any, upstream: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The model's api_key is the gateway's: a client must not get an authentication error
    about it, nor the upstream's message (which quotes part of the key); the log says it.
    With the client's own key forwarded, the upstream's 401 is the client's, as it came."""
    gw = make_gateway()  # the model has its own api_key
    refused = raw('{"error": {"message": "Incorrect API key provided: sk-t***est"}}', status=401)
    response = gw.chat("who am I", fake=refused)
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "upstream_auth_error" and "sk-t" not in error["message"]
    assert "Incorrect API key provided" in caplog.text
    own = make_gateway(model_yaml="api_key: null")
    response = own.chat("who am I", fake=refused, headers={"authorization": "Bearer sk-me"})
    assert (
        response.status_code == 401 and "Incorrect API key" in response.json()["error"]["message"]
    )


def test_an_upstream_error_quoting_the_gateways_key_reaches_nobody_with_it(
    make_gateway: Any, upstream: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Some upstreams quote the key they were sent in an error, whatever its status: the
    model's ``api_key`` serves every tenant, and a 400 or a 5xx relayed as it came gave it to
    whichever tenant's request got the error (and a 401 wrote it to the log)."""
    gw = make_gateway(model_yaml="api_key: sk-shared-by-all-tenants")
    exporter = traced(gw)  # (a span records the error raised through it as an event)
    for status in (400, 404, 429, 500, 401):
        quoting = {"error": {"message": "Bad key sk-shared-by-all-tenants for this model",
                             "param": "sk-shared-by-all-tenants", "code": "bad_key"}}  # fmt: skip
        response = gw.chat(f"quoted {status}", fake=raw(json.dumps(quoting), status=status))
        assert response.status_code >= 400
        assert "sk-shared" not in response.text, (status, response.text)
        assert "Bad key ***" in response.text or status == 401, (status, response.text)
    assert "Bad key ***" in caplog.text and "sk-shared" not in caplog.text
    events = [str(dict(e.attributes or {})) for span in exporter.get_finished_spans()
              for e in span.events]  # fmt: skip
    assert any("Bad key ***" in e for e in events) and not any("sk-shared" in e for e in events)
    placeholder = make_gateway(model_yaml="api_key: EMPTY")  # (not a secret: left as it is)
    said = {"error": {"message": "EMPTY is not a model"}}
    response = placeholder.chat("quoted", fake=raw(json.dumps(said), status=400))
    assert response.json()["error"]["message"] == "EMPTY is not a model"


def test_the_gateways_key_quoted_outside_an_error_status_reaches_nobody_either(
    make_gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The same key quoted where no error status says so: an ``{"error"}`` body with status
    200, an error event mid-stream (chat, Responses: ``error`` and ``response.failed``), a
    JSON or text answer to a stream request. Each reached the client as the upstream said it."""
    caplog.set_level(logging.DEBUG)
    gw = make_gateway(model_yaml="api_key: sk-shared-by-all-tenants")
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-none", max_retries=0)
    said = "Bad key sk-shared-by-all-tenants for this model"
    quoting = json.dumps({"error": {"message": said, "type": "invalid_request_error"}})
    failed = {"type": "response.failed", "sequence_number": 1, "response": {
        "id": "resp_1", "object": "response", "status": "failed", "output": [],
        "error": {"code": "server_error", "message": said}}}  # fmt: skip
    errors = {"type": "error", "sequence_number": 1, "code": "bad_key", "message": said}
    created = {"type": "response.created", "sequence_number": 0, "response": {
        "id": "resp_1", "object": "response", "status": "in_progress", "output": []}}  # fmt: skip
    answers = [  # (stream, fake answer)
        (False, raw(quoting)),
        (True, raw(quoting)),
        (True, raw(said, content_type="text/plain")),
        (True, sse(chunk("Hel"), json.loads(quoting))),
    ]
    seen = []
    for stream, fake in answers:
        try:
            answer = client.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "quoted"}],
                stream=stream, extra_body={"fake": fake},
            )  # fmt: skip
            seen.append(str(list(answer)))
        except openai.APIError as exc:
            seen.append(f"{exc.message} {exc.body}")
    for event in (errors, failed):
        try:
            seen.append(str(list(client.responses.create(
                model="fake-model", input="quoted", stream=True,
                extra_body={"fake": sse(created, event)}))))  # fmt: skip
        except openai.APIError as exc:
            seen.append(f"{exc.message} {exc.body}")
    assert len(seen) == 6 and all("Bad key ***" in text for text in seen), seen
    assert not any("sk-shared" in text for text in seen), seen
    assert "sk-shared" not in caplog.text
    again = gw.chat("quoted", fake=raw(quoting))  # (an error: nothing was stored)
    assert again.status_code == 502 and "Bad key ***" in again.text


@pytest.mark.parametrize(
    ("route", "choices"),
    [
        ("chat/completions", []),
        ("chat/completions", [None]),
        ("chat/completions", [{"index": 0, "message": "oops", "finish_reason": "stop"}]),
        ("completions", [{"index": 0, "text": 7, "finish_reason": "stop"}]),
    ],
)
def test_choices_no_client_can_read_are_a_502(
    make_gateway: Any, route: str, choices: list[Any]
) -> None:
    """Passed on as a 200 (a fuzzer's): the SDK's ``choices[0].message.content`` then failed
    on them, saying nothing of the upstream. Never stored either way."""
    gw = make_gateway()
    asked = {"messages": [{"role": "user", "content": "x"}]} if "chat" in route else {"prompt": "x"}
    body = {"model": "fake-model", **asked, "fake": raw(json.dumps({"choices": choices}))}
    for _ in range(2):
        response = gw.http.post(f"/v1/{route}", json=body)
        assert response.status_code == 502, response.text
        assert response.json()["error"]["code"] == "upstream_error"
        assert "choice" in response.json()["error"]["message"]


def test_an_answer_counting_absurd_tokens_is_not_kept_to_be_counted_again(
    make_gateway: Any,
) -> None:
    """A usage of 1e30 completion tokens (a hostile or broken upstream) was stored, and each
    hit on it added 1e+30 to cachegate_saved_completion_tokens_total for good."""
    gw = make_gateway()
    answer = {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
              "choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": "hi"}}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1e30, "total_tokens": 1e30}}  # fmt: skip
    for _ in range(2):
        response = gw.chat("absurd", fake=raw(json.dumps(answer)))
        assert response.status_code == 200 and response.headers["x-cache"] == "miss"
    assert "e+30" not in gw.http.get("/metrics").text


def test_a_key_split_over_stream_events_is_hidden_in_the_answer_kept(
    make_gateway: Any,
) -> None:
    """The key quoted in a streamed answer, its pieces in several events (as a token stream
    splits it): no event held it whole, so none was masked, and the answer assembled from them
    was stored with it whole and served to every later hit of the tenant, JSON or streamed."""
    gw = make_gateway(model_yaml="api_key: sk-shared-by-all-tenants")
    said = "upstream said: sk-shared-by-all-tenants, twice: sk-shared-by-all-tenants"
    fake = {"content": said, "chunks": 7}
    for path, field in (("chat/completions", "messages"), ("completions", "prompt")):
        asked: Any = [{"role": "user", "content": "quote"}] if field == "messages" else "quote"
        body = {"model": "fake-model", field: asked, "fake": fake}
        streamed = gw.http.post(f"/v1/{path}", json={**body, "stream": True})
        assert streamed.headers["x-cache"] == "miss" and "[DONE]" in streamed.text
        chunks = [json.loads(line[6:]) for line in streamed.text.splitlines()
                  if line.startswith("data: {")]  # fmt: skip
        pieces = [c["choices"][0].get("delta", {}).get("content") or c["choices"][0].get("text")
                  or "" for c in chunks if c.get("choices")]  # fmt: skip
        assert "".join(pieces) == said, pieces  # (split: its client got the pieces as they came)
        for stream in (False, True):
            hit = gw.http.post(f"/v1/{path}", json={**body, "stream": stream})
            assert hit.headers["x-cache"] == "exact", (path, stream)
            assert "sk-shared" not in hit.text, (path, stream, hit.text)
            assert "***" in hit.text, (path, stream, hit.text)


def test_a_forwarded_client_key_quoted_by_the_upstream_stays_out_of_traces(
    make_gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With no ``api_key`` the client's own key goes upstream: quoted in an error, it went
    back to that client only, but each span recorded the error's message with it whole."""
    caplog.set_level(logging.DEBUG)
    gw = make_gateway(model_yaml="api_key: null")
    exporter = traced(gw)
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-client-own-key", max_retries=0)
    quoting = json.dumps({"error": {"message": "Bad key sk-client-own-key for this model"}})
    for status in (400, 500, 200):
        with pytest.raises(openai.APIError) as caught:
            client.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": f"quoted {status}"}],
                extra_body={"fake": raw(quoting, status=status)},
            )  # fmt: skip
        assert "Bad key ***" in caught.value.message and "sk-client" not in caught.value.message
    events = [str(dict(e.attributes or {})) for span in exporter.get_finished_spans()
              for e in span.events]  # fmt: skip
    assert len([e for e in events if "Bad key ***" in e]) >= 3, events
    assert not any("sk-client" in e for e in events), events
    assert "sk-client" not in caplog.text


def test_a_base_urls_credentials_stay_out_of_the_debug_log(
    make_gateway: Any, upstream_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """At ``log_level: debug`` every upstream request is logged with its URL (httpx's line
    and the gateway's own in its name): a password or ``?api-key=`` in ``base_url`` was
    written out in full, where ``config show`` and ``/admin/stats`` hide it."""
    port = upstream_server.url.rsplit(":", 1)[1]
    base = f"http://user:pw-hidden@127.0.0.1:{port}/v1?api-key=q-hidden&api-version=1"
    gw = make_gateway(model_yaml=f"base_url: '{base}'")
    caplog.set_level(logging.DEBUG, logger="httpx")
    assert gw.chat("logged").status_code == 200
    assert gw.http.get("/v1/models").status_code == 200  # (httpx's own line: GET /models)
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert any("/chat/completions" in line for line in lines), lines
    assert any("/models" in line for line in lines), lines
    assert not any("hidden" in line for line in lines), lines
    assert any("user:***@" in line and "api-key=***&api-version=1" in line for line in lines)


def test_an_upstream_header_beyond_latin_1_is_passed_on_as_sent(make_gateway: Any) -> None:
    """httpx reads header bytes that are valid UTF-8 as UTF-8: an ``x-request-id`` of
    ``req-€`` could not be written to the response (a 500 for the upstream's answer), and
    the stream's turn on the one connection was never given back (503 upstream_busy after)."""
    gw = make_gateway(model_yaml="{max_connections: 1, timeout: {pool: 0.3}}")
    euro = {"x-request-id": "req-€"}
    answer = json.dumps({"id": "x", "object": "chat.completion", "created": 1, "model": "m",
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": "hi"}}]})  # fmt: skip
    streamed = sse(chunk("hi", "stop"), "data: [DONE]\n\n")
    streamed["raw"]["headers"] = euro
    for i in range(2):
        response = gw.chat(f"euro {i}", stream=True, fake=streamed)
        assert response.status_code == 200, response.text
        assert sse_chunks(response.text)[-1] == "[DONE]"
        assert response.headers["x-request-id"] == "req-€"  # (the bytes as the upstream sent)
    response = gw.chat("euro", fake=raw(answer, headers=euro))
    assert response.status_code == 200, response.text
    limited = raw("{}", status=429, headers={**euro, "retry-after": "٦٠٠"})  # (digits, too)
    response = gw.chat("euro", fake=limited)
    assert response.status_code == 429 and "retry-after" not in response.headers


class EndlessError(RawUpstream):
    """Answers every request with a 400 whose body never ends (until the client leaves)."""

    def _connection(self, conn: Any) -> None:
        with conn:
            if not self._read_request(conn):
                return
            piece = b'{"error": {"message": "' + b"x" * 65536
            try:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
                while True:
                    conn.sendall(b"%x\r\n%b\r\n" % (len(piece), piece))
            except OSError:
                return  # the gateway closed it


def test_an_error_answer_whose_body_never_ends_is_answered_from_its_start(
    make_gateway: Any,
) -> None:
    """Only the start of an error's body is read: it was read whole, into memory, for as long
    as the upstream sent it (here: forever, and the client waited until its timeout)."""
    server = EndlessError()
    try:
        gw = make_gateway(model_yaml=f"{{base_url: '{server.url}'}}")
        response = gw.http.post(
            "/v1/chat/completions",
            json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]},
            timeout=10,
        )
        assert response.status_code == 400
        assert response.json()["error"]["message"].startswith('{"error": {"message": "xxx')
        assert gw.chat("after").status_code == 400  # (its turn on a connection was given back)
    finally:
        server.close()


def test_a_stream_with_cr_line_endings_ending_in_cr_keeps_its_last_event(
    make_gateway: Any,
) -> None:
    gw = make_gateway()
    body = "".join(f"data: {json.dumps(c)}\r\r" for c in (chunk("Hel"), chunk("lo", "stop")))
    fake = raw(body + "data: [DONE]\r\r", content_type="text/event-stream")
    for expected in ("miss", "exact"):
        response = gw.chat("cr", stream=True, fake=fake)
        assert response.headers["x-cache"] == expected
        events = sse_chunks(response.text)
        assert events[-1] == "[DONE]", events  # was a stream_incomplete error, nothing cached
        assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1]) == "Hello"


def test_a_stream_whose_response_fails_before_its_first_event_gives_its_turn_back(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever fails between the upstream's stream opening and its first event going out
    (here a relayed header the response cannot encode, as ``req-€`` once was) closes it: it
    was left open, its turn on the one connection never given back (503 upstream_busy)."""
    from gateway import backend

    monkeypatch.setattr(backend, "_sendable", lambda value: value)  # (as before that fix)
    gw = make_gateway(model_yaml="{max_connections: 1, timeout: {pool: 0.3}}")
    streamed = sse(chunk("hi", "stop"), "data: [DONE]\n\n")
    streamed["raw"]["headers"] = {"x-request-id": "req-€"}
    failed = gw.chat("unsendable", stream=True, fake=streamed)
    assert failed.status_code == 500, failed.text
    after = gw.chat("next", stream=True)
    assert after.status_code == 200, after.text
    assert sse_chunks(after.text)[-1] == "[DONE]"


def test_a_stream_opened_as_the_shutdown_deadline_passes_gives_its_turn_back(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shutdown deadline may end a request's wait for its upstream's stream just after
    the stream opened, before the wait saw it: the client gets its 503 ``shutting_down``, and
    the stream, which nobody sends, is closed (it was left open, its turn on the one
    connection never given back: every later request a 503 upstream_busy)."""
    from gateway.upstream import UpstreamBackend

    gw = make_gateway(model_yaml="{max_connections: 1, timeout: {pool: 0.3}}")
    opening = UpstreamBackend.open_stream

    async def opened_at_the_deadline(self: Any, request: Any, auth: Any = None) -> Any:
        stream = await opening(self, request, auth)
        if request.body["messages"][0]["content"] == "at the deadline":
            gw.runtime.abort_in_flight()  # (as cli._shutdown_deadline does)
        return stream

    monkeypatch.setattr(UpstreamBackend, "open_stream", opened_at_the_deadline)
    ended = gw.chat("at the deadline", stream=True)
    assert ended.status_code == 503 and ended.json()["error"]["code"] == "shutting_down"
    gw.runtime.connections.aborting = False  # (a gateway that serves on, as a test's does)
    after = gw.chat("next", stream=True)
    assert after.status_code == 200, after.text
    assert sse_chunks(after.text)[-1] == "[DONE]"


@pytest.mark.parametrize(
    "content_type",
    ["application/octet-stream", "text/plain; charset=utf-8", "text/event-stream; charset=utf-8"],
)
def test_an_event_stream_sent_as_another_type_is_streamed(
    make_gateway: Any, content_type: str
) -> None:
    # (some proxies send one so; the openai SDK reads any answer to a stream request as SSE,
    # and the gateway answered it with a 502 "answered a stream request with ...")
    gw = make_gateway()
    fake = sse(": opening\n\n", chunk("Hel"), chunk("lo", "stop"), "data: [DONE]\n\n")
    fake["raw"]["content_type"] = content_type
    for expected in ("miss", "exact"):
        assert sdk_stream(gw, f"as {content_type}", fake) == (expected, "Hello")


class Trickled(RawUpstream):
    """Streams an answer as ``application/octet-stream`` a few bytes at a time, its opening
    (a byte order mark, a blank line, ``data:``) cut across pieces."""

    def _connection(self, conn: Any) -> None:
        with conn:
            if not self._read_request(conn):
                return
            events = "".join(
                f"data: {json.dumps(c)}\n\n" for c in (chunk("Hel"), chunk("lo", "stop"))
            )
            body = b"\xef\xbb\xbf\n" + events.encode() + b"data: [DONE]\n\n"
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
            for piece in (body[:2], body[2:4], body[4:6], body[6:40], body[40:]):
                conn.sendall(b"%x\r\n%b\r\n" % (len(piece), piece))
                time.sleep(0.05)
            conn.sendall(b"0\r\n\r\n")


def test_an_event_stream_of_another_type_that_trickles_in_is_streamed(
    make_gateway: Any,
) -> None:
    server = Trickled()
    try:
        gw = make_gateway(model_yaml=f"{{base_url: '{server.url}'}}")
        response = gw.chat("trickled", stream=True)
        assert response.status_code == 200, response.text
        events = sse_chunks(response.text)
        assert events[-1] == "[DONE]", events
        assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1]) == "Hello"
    finally:
        server.close()


def test_a_complete_stream_closed_without_done_is_complete(make_gateway: Any) -> None:
    """ik_llama.cpp and older llama-box close a stream after its last chunk (finish_reason)
    and usage chunk with no ``[DONE]``: that was a ``stream_incomplete`` error event (the
    openai SDK raised) and nothing was cached. A stream closed before that stays an error."""
    gw = make_gateway()
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-none", max_retries=0)
    usage = {**HEAD, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                               "total_tokens": 5}}  # fmt: skip
    fake = sse(chunk("Hel"), chunk("lo", "stop"), usage)
    pieces = list(client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "no done"}], stream=True,
        extra_body={"fake": fake}))  # fmt: skip
    assert "".join(p.choices[0].delta.content or "" for p in pieces if p.choices) == "Hello"
    again = gw.chat("no done", stream=True, fake=fake)
    assert again.headers["x-cache"] == "exact" and sse_chunks(again.text)[-1] == "[DONE]"
    two = {**HEAD, "choices": [{"index": 1, "delta": {"content": "x"}, "finish_reason": None}]}
    for cut, extra in (
        (sse(chunk("Hel"), chunk("lo", "stop")), {}),  # (its usage chunk never came)
        (sse(chunk("Hel"), usage), {}),  # (no finish_reason)
        (sse(chunk("Hel", "stop"), two, usage), {"n": 2}),  # (one of its two choices ended)
    ):
        for expected in ("miss", "miss"):
            response = gw.chat("cut short", stream=True, fake=cut, **extra)
            assert response.headers["x-cache"] == expected
            assert error_of(sse_chunks(response.text))["code"] == "stream_incomplete"


def test_the_gateways_key_quoted_json_escaped_reaches_nobody(make_gateway: Any) -> None:
    """A base64 key (Amazon Bedrock's has ``/``, ``+`` and ``=``) quoted in an error's JSON as
    PHP writes ``/`` (``\\/``) or Gson writes ``=`` (``\\u003d``) reached the client whole, as
    its SDK decoded the message: only the key as it is was hidden."""
    key = "ABSKQmVkcm9ja0FQSUtleS/shared+by/all=="
    gw = make_gateway(model_yaml=f"api_key: '{key}'")
    said = json.dumps({"error": {"message": f"Bad key {key} for this model"}})
    php, gson = said.replace("/", "\\/"), said.replace("=", "\\u003d")
    answers = [(php, 400, False), (gson, 500, False), (php, 200, False), (gson, 200, True)]
    for i, (body, status, stream) in enumerate(answers):
        fake = sse(chunk("Hel"), json.loads(body)) if stream else raw(body, status=status)
        if stream:  # (the event as the upstream wrote it)
            fake["raw"]["body"] = f"data: {json.dumps(chunk('Hel'))}\n\ndata: {body}\n\n"
        response = gw.chat(f"quoted {i}", stream=stream, fake=fake)
        text = json.dumps(sse_chunks(response.text)[-1] if stream else response.json())
        assert "Bad key ***" in text and "shared" not in text, (i, text)


def test_an_answer_without_choices_is_502_with_what_it_said(make_gateway: Any) -> None:
    """A 200 without ``choices`` (vLLM's error shape, a framework's ``{"detail"}``), or a
    Response's without ``output``, was passed on as the answer: the openai SDK gave
    ``choices=None`` and ``.choices[0]`` a TypeError (``.output_text`` as well)."""
    gw = make_gateway()
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-none", max_retries=0)
    vllm = {"object": "error", "message": "The model is overloaded", "type": "x", "code": 503}
    for body, says in ((vllm, "The model is overloaded"), ({"detail": "Not Found"}, "Not Found"),
                       ({"id": "x", "object": "chat.completion"}, '"id":"x"')):  # fmt: skip
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "no choices"}],
                extra_body={"fake": raw(json.dumps(body))},
            )  # fmt: skip
        assert caught.value.code == "upstream_error" and says in caught.value.message
    legacy = {"model": "fake-model", "prompt": "x", "fake": raw(json.dumps({"detail": "nope"}))}
    response = gw.http.post("/v1/completions", json=legacy)
    assert response.status_code == 502 and "nope" in response.json()["error"]["message"]
    with pytest.raises(openai.InternalServerError) as caught:  # (a Response without output)
        client.responses.create(model="fake-model", input="no output",
                                extra_body={"fake": raw(json.dumps(vllm))})  # fmt: skip
    assert "without output: The model is overloaded" in caught.value.message


def test_a_vllm_error_object_mid_stream_ends_the_stream_with_its_message(
    make_gateway: Any,
) -> None:
    """vLLM's older error shape, ``{"object": "error", "message": ...}``, sent as an event:
    it was relayed as a chunk, and the openai SDK gave the client ``choices=None`` (its
    ``.choices[0]`` a TypeError that said nothing of the upstream)."""
    gw = make_gateway()
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-none", max_retries=0)
    vllm = {"object": "error", "message": "CUDA out of memory", "type": "InternalServerError",
            "param": None, "code": 500}  # fmt: skip
    fake = sse(chunk("Hel"), vllm, chunk("lo", "stop"), "data: [DONE]\n\n")
    pieces: list[Any] = []
    with pytest.raises(openai.APIError) as caught:
        for piece in client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "oom"}], stream=True,
            extra_body={"fake": fake},
        ):  # fmt: skip
            pieces.append(piece)
    assert "CUDA out of memory" in caught.value.message
    assert all(p.choices is not None for p in pieces)
    response = gw.chat("oom", stream=True, fake=fake)  # nothing was stored
    assert response.headers["x-cache"] == "miss"
    assert "CUDA out of memory" in error_of(sse_chunks(response.text))["message"]
    responses = gw.http.post("/v1/responses", json={  # a Responses stream: no such event type
        "model": "fake-model", "input": "oom", "stream": True, "fake": sse(vllm)})  # fmt: skip
    assert "event: error\n" in responses.text and "CUDA out of memory" in responses.text
    assert "event: InternalServerError" not in responses.text


def test_a_json_error_sent_as_an_event_stream_reaches_the_client_with_its_message(
    make_gateway: Any,
) -> None:
    """Some proxies answer a stream request 200 ``text/event-stream`` with a plain JSON error
    body (no ``data:``): it was a stream of no events, ended as ``stream_incomplete``, and the
    upstream's message was lost."""
    gw = make_gateway()
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-none", max_retries=0)
    quota = {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                       "param": None, "code": "insufficient_quota"}}  # fmt: skip
    vllm = {"object": "error", "message": "The model is overloaded", "type": "x", "code": 503}
    for body, says in ((quota, "You exceeded your current quota"),
                       (vllm, "The model is overloaded")):  # fmt: skip
        fake = raw(json.dumps(body), content_type="text/event-stream")
        with pytest.raises(openai.APIError) as caught:
            list(client.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "proxied"}],
                stream=True, extra_body={"fake": fake}))  # fmt: skip
        assert says in caught.value.message, caught.value.message
        response = gw.chat("proxied", stream=True, fake=fake)  # nothing was stored
        assert response.headers["x-cache"] == "miss"
        error = error_of(sse_chunks(response.text))
        assert error["code"] == "upstream_error" and says in error["message"]


def test_a_json_error_sent_as_an_event_stream_with_a_blank_line_reaches_the_client(
    make_gateway: Any,
) -> None:
    """The same JSON error body ending with a blank line (``\\n\\n``, as an event ends): the
    parser took it for an event without data and dropped it, and the client got the generic
    ``stream_incomplete`` error without the upstream's message. Its key is hidden as ever."""
    gw = make_gateway(model_yaml="api_key: sk-proxy-key-1234")
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-none", max_retries=0)
    quota = {"error": {"message": "You exceeded your current quota (key sk-proxy-key-1234)",
                       "type": "insufficient_quota", "code": "insufficient_quota"}}  # fmt: skip
    for end in ("\n\n", "\r\n\r\n", "\n\n\n"):
        fake = raw(json.dumps(quota) + end, content_type="text/event-stream")
        with pytest.raises(openai.APIError) as caught:
            list(client.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "proxied"}],
                stream=True, extra_body={"fake": fake}))  # fmt: skip
        message = caught.value.message
        assert "You exceeded your current quota (key ***)" in message, (end, message)
        assert "sk-proxy-key-1234" not in message


def test_a_forwarded_client_key_is_not_kept_after_its_request(make_gateway: Any) -> None:
    """With no ``api_key`` each client's own key goes upstream, and what the upstream sends
    back is searched for it (``_hide``): the forms it is searched in were cached module-wide
    for the last 256 keys, so the gateway held its clients' keys after their requests."""
    gw = make_gateway(model_yaml="api_key: null")
    key = "sk-client-" + secrets.token_hex(12)

    def ask() -> None:  # (the client, and the key it holds, gone at its end)
        with openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0) as client:
            asked = {"model": "fake-model", "messages": [{"role": "user", "content": "mine"}]}
            client.chat.completions.create(**asked)
            assert "".join(c.choices[0].delta.content or "" for c in
                           client.chat.completions.create(**asked, stream=True) if c.choices)  # fmt: skip

    ask()
    gc.collect()
    held = [f"{module.__name__}.{name}" for module in list(sys.modules.values())
            if module.__name__.split(".")[0] == "gateway"
            for name, value in vars(module).items()
            if any(_holds(v, key) for v in (value, *gc.get_referents(value)))]  # fmt: skip
    assert not held, held


def _holds(value: Any, key: str) -> bool:
    """Whether ``value`` is, or (a container) holds as such, a text with ``key`` in it."""
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else [value]
    if isinstance(value, (tuple, list)):
        items = list(value)
    return any(
        key in i if isinstance(i, str) else isinstance(i, bytes) and key.encode() in i
        for i in items
    )


def test_a_generation_longer_than_the_read_timeout_is_not_sent_again_by_the_sdk(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """One ``base_url`` that answers ``GET /models`` but not a generation within
    ``timeout.read``: slow, not hung, the generation may still run there. Its 504 says
    ``x-should-retry: false``, as a replica's does (it said nothing, and each of the openai
    SDK's two retries ran the generation once more: three runs, three read timeouts)."""
    from tests.gateway.test_router import a_novel

    gw = make_gateway(model_yaml="{timeout: {read: 0.5}}")
    timed_out = a_novel(gw.url)
    assert timed_out.status_code == 504 and timed_out.code == "upstream_timeout"
    assert timed_out.response.headers.get("x-should-retry") == "false"
    assert upstream.stats["chat"] == 1


def test_a_hung_upstreams_timeout_may_be_retried(make_gateway: Any) -> None:
    """One that answers neither (it accepts connections, never a byte): hung, perhaps for a
    moment, so its 504 leaves the client's retries be."""
    import socket

    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)  # (connections wait in its backlog, never accepted nor answered)
        url = f"http://127.0.0.1:{hung.getsockname()[1]}/v1"
        gw = make_gateway(model_yaml=f"{{base_url: '{url}', timeout: {{read: 0.3, connect: 0.3}}}}")
        response = gw.chat("anyone there?")
        assert response.status_code == 504
        assert response.json()["error"]["code"] == "upstream_timeout"
        assert "x-should-retry" not in response.headers
