"""End to end: the official openai SDK → `cachegate serve` (a real process) → fake upstream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import ServeProcess
from tests.fake_upstream import FakeUpstream, ThreadedServer


@pytest.fixture
def gateway(
    serve: Any, upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> ServeProcess:
    return serve(f"""
data_dir: {tmp_path / "data"}
models:
  fake-model:
    backend: openai
    base_url: {upstream_server.url}/v1
    api_key: sk-upstream
    retry_backoff: 0.01
""")


def client(gateway: ServeProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-anything", max_retries=0)


def ask(c: openai.OpenAI, question: str, **kwargs: Any) -> Any:
    return c.chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "user", "content": question}], **kwargs
    )


async def read_until_error(stream: Any, pieces: list[str]) -> openai.APIError | None:
    """Read a streamed chat answer's text into ``pieces``; the error it ended with, if any."""
    try:
        async for chunk in stream:
            pieces.append(chunk.choices[0].delta.content or "")
    except openai.APIError as exc:
        return exc
    return None


def test_sync_exact_hit_never_reaches_upstream(
    gateway: ServeProcess, upstream: FakeUpstream
) -> None:
    c = client(gateway)
    first = ask(c, "What is the tallest mountain?")
    second = ask(c, "What is the tallest mountain?")
    assert first.headers["x-cache"] == "miss" and second.headers["x-cache"] == "exact"
    a, b = first.parse(), second.parse()
    assert a.choices[0].message.content == b.choices[0].message.content
    assert b.usage is not None and b.usage.completion_tokens > 0
    assert upstream.stats["chat"] == 1


def test_sync_streaming_hit_and_usage(gateway: ServeProcess, upstream: FakeUpstream) -> None:
    c = client(gateway)
    streamed = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in c.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "Stream a poem"}], stream=True
        )
        if chunk.choices
    )
    assert streamed.startswith("answer #")
    with c.chat.completions.with_streaming_response.create(
        model="fake-model",
        messages=[{"role": "user", "content": "Stream a poem"}],
        stream=True,
        stream_options={"include_usage": True},
    ) as raw:
        assert raw.headers["x-cache"] == "exact"
        chunks = list(raw.parse())
    replayed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert replayed == streamed
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert upstream.stats["chat"] == 1


def test_no_cache_and_changed_parameters_reach_upstream(
    gateway: ServeProcess, upstream: FakeUpstream
) -> None:
    c = client(gateway)
    ask(c, "Name a colour")
    assert (
        ask(c, "Name a colour", extra_headers={"cache-control": "no-cache"}).headers["x-cache"]
        == "refresh"
    )
    assert (
        ask(c, "Name a colour", extra_body={"cache": {"no-cache": True}}).headers["x-cache"]
        == "refresh"
    )
    assert ask(c, "Name a colour", temperature=0.1).headers["x-cache"] == "miss"
    assert ask(c, "Name a colour", max_tokens=3).headers["x-cache"] == "miss"
    tool = {"type": "function", "function": {"name": "pick", "parameters": {"type": "object"}}}
    assert ask(c, "Name a colour", tools=[tool]).headers["x-cache"] == "miss"
    system = c.chat.completions.with_raw_response.create(
        model="fake-model",
        messages=[
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "Name a colour"},
        ],
    )
    assert system.headers["x-cache"] == "miss"
    earlier = c.chat.completions.with_raw_response.create(
        model="fake-model",
        messages=[
            {"role": "user", "content": "I like the sea."},
            {"role": "assistant", "content": "Nice."},
            {"role": "user", "content": "Name a colour"},
        ],
    )
    assert earlier.headers["x-cache"] == "miss"
    assert upstream.stats["chat"] == 8


def test_broken_upstream_stream_is_not_cached(
    gateway: ServeProcess, upstream: FakeUpstream
) -> None:
    c = client(gateway)
    with pytest.raises(openai.APIError):
        for _ in c.chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": "break"}],
            stream=True,
            extra_body={"fake": {"break_after": 2}},
        ):
            pass
    assert upstream.stats["streams_broken"] == 1
    again = ask(c, "break", extra_body={"fake": {"break_after": 2}})  # non-streaming: completes
    assert again.headers["x-cache"] == "miss"
    assert upstream.stats["chat"] == 2


def test_errors_are_openai_errors(gateway: ServeProcess, upstream: FakeUpstream) -> None:
    c = client(gateway)
    with pytest.raises(openai.NotFoundError) as missing:
        c.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        c.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "x"}], temperature=5
        )
    assert bad.value.param == "temperature"
    with pytest.raises(openai.InternalServerError) as upstream_down:
        ask(c, "x", extra_body={"fake": {"status": 500}})
    assert upstream_down.value.status_code == 502
    assert [m.id for m in c.models.list()] == ["fake-model"]


def test_upstream_request_id_and_rate_limits_reach_the_sdk_on_a_miss(
    gateway: ServeProcess, upstream: FakeUpstream
) -> None:
    c = client(gateway)
    miss = ask(c, "Which request was this?")
    assert miss.headers["x-cache"] == "miss"
    assert miss.parse()._request_id == f"req_{miss.parse().id}"  # the upstream's id
    assert miss.headers["x-ratelimit-remaining-requests"] == "4999"
    assert "set-cookie" not in miss.headers  # only the headers worth relaying
    streamed = c.chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "user", "content": "And this one?"}], stream=True
    )
    assert streamed.headers["x-request-id"].startswith("req_")
    assert "".join(c.choices[0].delta.content or "" for c in streamed.parse() if c.choices)
    hit = ask(c, "Which request was this?")
    assert hit.headers["x-cache"] == "exact"
    # a hit ran no upstream request: its id is the gateway's own
    assert hit.headers["x-request-id"].startswith("req_")
    assert hit.parse()._request_id != miss.parse()._request_id


def test_sdk_does_not_retry_what_the_gateway_already_retried(
    gateway: ServeProcess, upstream: FakeUpstream
) -> None:
    """The SDK's own retries (2 by default) used to run the gateway's 3 attempts each: 9."""
    c = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-anything")  # max_retries=2
    for status, error in ((500, openai.InternalServerError), (429, openai.RateLimitError)):
        upstream.reset()
        with pytest.raises(error) as raised:
            ask(c, f"always {status}", extra_body={"fake": {"status": status}})
        assert raised.value.response.headers["x-should-retry"] == "false"
        assert raised.value.request_id == f"req_failed_{status}"  # the upstream's, relayed
        assert upstream.stats["chat"] == 3  # the gateway's 1 + max_retries 2, nothing more
    upstream.reset()
    with pytest.raises(openai.APIStatusError) as looped:
        ask(c, "loop", extra_headers={"x-cachegate-hops": "8"})
    assert looped.value.status_code == 508
    assert looped.value.response.headers["x-should-retry"] == "false"


def test_async_client_concurrent_and_streaming(
    gateway: ServeProcess, upstream: FakeUpstream
) -> None:
    async def run() -> None:
        c = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="sk-anything", max_retries=0)
        questions = [f"question {i}" for i in range(8)]
        first = await asyncio.gather(*(
            c.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": q}])
            for q in questions
        ))  # fmt: skip
        second = await asyncio.gather(*(
            c.chat.completions.with_raw_response.create(model="fake-model", messages=[{"role": "user", "content": q}])
            for q in questions
        ))  # fmt: skip
        assert all(r.headers["x-cache"] == "exact" for r in second)
        assert [r.parse().choices[0].message.content for r in second] == [
            r.choices[0].message.content for r in first
        ]
        stream = await c.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "question 3"}], stream=True
        )
        text = "".join([ch.choices[0].delta.content or "" async for ch in stream if ch.choices])
        assert text == first[3].choices[0].message.content
        completion = await c.completions.create(model="fake-model", prompt="Say hi", max_tokens=4)
        assert completion.choices[0].text.startswith("answer #")
        await c.close()

    asyncio.run(run())
    assert upstream.stats["chat"] == 8 and upstream.stats["completions"] == 1


def test_bad_config_fails_at_start_with_key_path(tmp_path: Path) -> None:
    import subprocess

    from tests.e2e.conftest import CACHEGATE

    bad = tmp_path / "bad.yaml"
    bad.write_text("server:\n  port: eighty\n")
    result = subprocess.run(
        [CACHEGATE, "serve", "--config", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert f"{bad}: server.port: expected `int`, got `str`" in result.stderr
    check = subprocess.run(
        [CACHEGATE, "config", "check", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 1 and "server.port" in check.stderr


def test_requests_open_at_the_shutdown_deadline_get_a_503_error(
    serve: Any, upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """SIGTERM: open requests get ``shutdown_timeout`` s, then an OpenAI error, not a cut."""
    gateway = serve(f"""
server: {{shutdown_timeout: 3}}
data_dir: {tmp_path / "data"}
cache: {{semantic: {{enabled: false}}}}
models:
  fake-model: {{backend: openai, base_url: "{upstream_server.url}/v1", api_key: sk}}
""")
    quick = "answered before the deadline"

    async def run() -> tuple[Any, Any, list[str], Any]:
        sdk = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="sk", max_retries=0)
        messages = [{"role": "user", "content": "a slow question"}]
        slow = asyncio.create_task(
            sdk.chat.completions.create(
                model="fake-model", messages=messages, extra_body={"fake": {"delay": 30}}
            )
        )
        finished = asyncio.create_task(
            sdk.chat.completions.create(
                model="fake-model",
                messages=[{"role": "user", "content": quick}],
                extra_body={"fake": {"delay": 0.6}},
            )
        )
        stream = await sdk.chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": "a long story"}],
            stream=True,
            extra_body={"fake": {"chunk_delay": 1, "chunks": 30}},
        )
        pieces: list[str] = []
        reading = asyncio.create_task(read_until_error(stream, pieces))
        await asyncio.sleep(0.3)
        gateway.proc.terminate()
        results = await asyncio.gather(slow, finished, reading, return_exceptions=True)
        await sdk.close()
        return results[0], results[1], pieces, results[2]

    slow, finished, pieces, stream_error = asyncio.run(run())
    # a request that finished within shutdown_timeout was answered normally
    assert finished.choices[0].message.content.endswith(
        quick + " [temperature=None max_tokens=None]"
    )
    # the one still waiting got a retryable 503 with an OpenAI body
    assert isinstance(slow, openai.InternalServerError) and slow.status_code == 503
    assert slow.body["code"] == "shutting_down"
    assert slow.response.headers.get("x-should-retry") != "false"
    # the stream that had started ended with an error event after what it had sent
    assert pieces and isinstance(stream_error, openai.APIError)
    assert "shutting down" in stream_error.message
    assert gateway.proc.wait(timeout=10) in (0, -15)  # exits on time (uvicorn re-raises SIGTERM)
    assert "shutdown: 2 requests still open after 3s; ended" in gateway.log.read_text()


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_shutdown_stops_the_admin_port_with_the_data_port(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path, sig: str
) -> None:
    """With ``admin_port``: both ports refuse new connections while open requests drain, and
    Ctrl-C ends quietly (the admin server was cancelled after the drain: a traceback)."""
    import signal
    import threading
    import time

    import httpx

    from tests.e2e.conftest import free_port

    admin_port = free_port()
    gateway = serve(f"""
server: {{shutdown_timeout: 3, admin_port: {admin_port}}}
data_dir: {tmp_path / "data"}
cache: {{semantic: {{enabled: false}}}}
models:
  fake-model: {{backend: openai, base_url: "{upstream_server.url}/v1", api_key: sk}}
""")
    admin = f"http://127.0.0.1:{admin_port}"
    assert httpx.get(f"{admin}/admin/stats").status_code == 200
    sdk = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk", max_retries=0)
    slow: list[Any] = []

    def ask() -> None:
        try:
            sdk.chat.completions.create(
                model="fake-model",
                messages=[{"role": "user", "content": "slow"}],
                extra_body={"fake": {"delay": 30}},
            )
        except openai.APIStatusError as exc:
            slow.append(exc)

    asking = threading.Thread(target=ask)
    asking.start()
    time.sleep(0.5)  # (the request is in flight)
    gateway.proc.send_signal(getattr(signal, sig))
    time.sleep(1)  # draining: shutdown_timeout is 3 s
    for url in (f"{gateway.url}/readyz", f"{admin}/admin/stats"):  # draining: both refuse
        with pytest.raises(httpx.ConnectError):
            httpx.get(url, timeout=2)
    asking.join(timeout=20)
    assert slow and slow[0].status_code == 503  # the open request still got its answer
    assert gateway.proc.wait(timeout=10) == (0 if sig == "SIGINT" else -15)
    assert "Traceback" not in gateway.log.read_text()


def test_ctrl_c_while_the_embedder_loads_is_not_held_by_the_load(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    """Ctrl-C in the first seconds after a start (the semantic cache's embedder loading, its
    ONNX graph exported at a first start) was held until the load had ended; now the process
    says so and exits as after a clean shutdown, and the next start exports afresh (removing
    the temp dir the stopped export was written in)."""
    import signal
    import time

    exports = tmp_path / "exports"
    config = f"""
data_dir: {tmp_path / "data"}
cache: {{semantic: {{embedder_export_dir: "{exports}"}}}}
models:
  fake-model: {{backend: openai, base_url: "{upstream_server.url}/v1", api_key: sk}}
"""
    gateway = serve(config, ready_timeout=None)
    gateway.wait_logged("cachegate gateway serving", timeout=60)
    deadline = time.monotonic() + 60
    while not [p for p in exports.glob("*/*") if p.is_dir()]:  # the export is being written
        assert gateway.proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    gateway.proc.send_signal(signal.SIGINT)
    code = gateway.proc.wait(timeout=60)
    log = gateway.log.read_text(errors="replace")
    assert "the semantic cache is still loading: shutting down without it" in log, log
    assert code == 0, log
    assert "Traceback" not in log and "FATAL" not in log
    assert not list(exports.glob("*/model*.onnx"))  # (nothing half-written in place)

    again = serve(config, name="again.yaml", ready_timeout=120)  # exports it, and serves
    assert httpx.get(f"{again.url}/readyz").status_code == 200
    assert list(exports.glob("*/model.onnx"))
    assert not [p for p in exports.glob("*/*") if p.is_dir()]  # the stopped one's temp dir too


def test_debug_access_log_hides_the_dashboard_key(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    gateway = serve(f"""
server: {{log_level: debug}}
admin: {{api_key: admin-secret-123}}
data_dir: {tmp_path / "data"}
cache: {{semantic: {{enabled: false}}}}
models:
  fake-model: {{backend: openai, base_url: "{upstream_server.url}/v1", api_key: sk}}
""")
    import httpx

    assert httpx.get(f"{gateway.url}/dashboard?key=admin-secret-123").status_code == 200
    assert httpx.get(f"{gateway.url}/dashboard?x=1&key=wrong-guess").status_code == 401
    # the name percent-encoded opens the dashboard all the same (and was logged as it came)
    assert httpx.get(f"{gateway.url}/dashboard?k%65y=admin-secret-123").status_code == 200
    assert httpx.get(f"{gateway.url}/dashboard?KEY=admin-secret-123").status_code == 401
    gateway.stop()
    log = gateway.log.read_text()
    assert "GET /dashboard?key=*** HTTP/1.1" in log and "x=1&key=***" in log
    assert "k%65y=***" in log and "KEY=***" in log
    assert "admin-secret-123" not in log and "wrong-guess" not in log


def test_info_log_has_one_line_per_request_not_httpx_own(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    gateway = serve(f"""
data_dir: {tmp_path / "data"}
cache: {{semantic: {{enabled: false}}}}
models:
  fake-model: {{backend: openai, base_url: "{upstream_server.url}/v1", api_key: sk}}
""")
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "log me once"}]
    client.chat.completions.create(model="fake-model", messages=messages)  # type: ignore[arg-type]
    gateway.stop()
    log = gateway.log.read_text()
    assert "cachegate.requests:" in log and "model=fake-model cache=miss status=200" in log
    assert "HTTP Request: POST" not in log  # httpx's own line per upstream request


def test_headers_that_never_finish_arriving_are_cut_at_header_timeout(
    serve: Any, upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A client sending its request's headers a byte at a time (slowloris), or nothing at all,
    held its connection for as long as it went on: uvicorn has no deadline for headers, so
    enough such clients exhausted the process's file descriptors without a key."""
    import socket

    gateway = serve(f"""
server: {{header_timeout: 1}}
data_dir: {tmp_path / "data"}
cache: {{semantic: {{enabled: false}}}}
models:
  fake-model: {{backend: openai, base_url: "{upstream_server.url}/v1", api_key: sk}}
""")

    def cut(trickle: bytes, first: bytes = b"") -> bool:
        """Whether the gateway closes a connection sending ``trickle`` a byte at a time (after
        the request ``first``, answered: the next request on a connection kept alive)."""
        with socket.create_connection(("127.0.0.1", gateway.port)) as slow:
            if first:
                slow.sendall(first)
                assert slow.recv(4096).startswith(b"HTTP/1.1 200 ")
            slow.settimeout(0.2)
            for byte in trickle:
                try:
                    slow.sendall(bytes([byte]))
                    if slow.recv(1024) == b"":
                        return True
                except TimeoutError:
                    continue
                except OSError:  # (reset: closed while the client was still sending)
                    return True
        return False

    header = b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nx-pad: " + b"a" * 100
    assert cut(header)  # 20 s of trickle at most: it was never cut
    assert cut(b"\r\n" * 100)  # (llhttp skips blank lines before a request: nothing arrives)
    assert cut(b"\r\n" * 100, first=b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
    # the deadline is for the headers: a body that arrives slowly is read, and answered
    body = b'{"model": "fake-model", "messages": [{"role": "user", "content": "slow body"}]}'
    with socket.create_connection(("127.0.0.1", gateway.port)) as client:
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
        )
        for i in range(0, len(body), 4):
            client.sendall(body[i : i + 4])
            time.sleep(0.1)  # 2 s in all, past the header timeout
        client.settimeout(30)
        assert client.recv(1024).startswith(b"HTTP/1.1 200 ")
    assert upstream.stats["chat"] == 1


def test_a_header_that_never_ends_is_refused_past_max_header_bytes(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    """httptools keeps a header's value whole until its line ends, however long (and copies
    it at every read): a client sending one without end, with no key needed, made the gateway
    hold all of it (hundreds of MB a connection) and spend its event loop copying it."""
    import socket

    gateway = serve(f"""
server: {{max_header_bytes: 8192}}
data_dir: {tmp_path / "data"}
cache: {{semantic: {{enabled: false}}}}
models:
  fake-model: {{backend: openai, base_url: "{upstream_server.url}/v1", api_key: sk}}
""")
    with socket.create_connection(("127.0.0.1", gateway.port)) as client:
        client.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-pad: ")
        try:
            for _ in range(1024):  # 16 MB, 16 kB at a time, and the line never ends
                client.sendall(b"a" * 16384)
        except OSError:  # (reset: the gateway closed with what was sent still unread)
            pass
        client.settimeout(10)
        answer = b""
        with contextlib.suppress(OSError):  # (a timeout: no answer came)
            answer = client.recv(4096)
    assert answer.startswith(b"HTTP/1.1 431 "), answer
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "headers_too_large"
    assert httpx.get(f"{gateway.url}/healthz", headers={"x-pad": "a" * 4000}).status_code == 200


def test_a_chunked_bodys_trailer_that_never_ends_is_refused_past_max_header_bytes(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    """httptools keeps a chunked body's trailer line whole as it does a header's: a client
    sending one without end, with no key needed, was held whole past ``max_header_bytes``
    (until ``header_timeout``: hundreds of MB a connection), as a header was before 431."""
    import socket

    gateway = serve(f"""
server: {{max_header_bytes: 8192}}
auth: {{keys: [{{key: k1, tenant: acme}}]}}
data_dir: {tmp_path / "data"}
cache: {{semantic: {{enabled: false}}}}
models:
  fake-model: {{backend: openai, base_url: "{upstream_server.url}/v1", api_key: sk}}
""")
    answer = b""
    with socket.create_connection(("127.0.0.1", gateway.port)) as client:
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"transfer-encoding: chunked\r\n\r\n0\r\nx-trailer: "
        )
        with contextlib.suppress(OSError):  # (reset: closed with what was sent still unread)
            for _ in range(1024):  # 16 MB, 16 kB at a time, and the trailer never ends
                client.sendall(b"a" * 16384)
        client.settimeout(10)
        with contextlib.suppress(OSError):  # (a timeout: the connection was kept)
            while chunk := client.recv(4096):
                answer += chunk
    assert b"HTTP/1.1 431 " in answer, answer
    assert b'"code":"headers_too_large"' in answer.replace(b" ", b"")


def test_a_pipelined_requests_answer_restarts_the_header_timeout(
    serve: Any, upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """The deadline for the next request's headers was armed at the end of the first answer
    of two pipelined requests, while the second was still being answered: it closed the
    connection soon after the second's answer, under the client's next request (sent well
    inside ``header_timeout``), which got no answer."""
    import socket

    gateway = serve(f"""
server: {{header_timeout: 4}}
data_dir: {tmp_path / "data"}
cache: {{semantic: {{enabled: false}}}}
models:
  fake-model: {{backend: openai, base_url: "{upstream_server.url}/v1", api_key: sk}}
""")
    body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "slow"}],
                       "fake": {"delay": 3}}).encode()  # fmt: skip
    health = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", gateway.port)) as client:
        client.sendall(
            health + b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            b"content-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        client.settimeout(30)
        answers = b""
        while answers.count(b"HTTP/1.1 200 ") < 2 or not answers.endswith(b"}"):
            answers += client.recv(65536)
        time.sleep(2.5)  # (idle, inside header_timeout: 5.5 s past the first answer's end)
        client.sendall(health)
        assert client.recv(4096).startswith(b"HTTP/1.1 200 ")
    assert upstream.stats["chat"] == 1
