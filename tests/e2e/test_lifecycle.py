"""End to end: `cachegate serve` (a real process) starting and stopping: a start that cannot
bind its port, and the signals that stop it (the first drains the open requests, the second ends
them now, the third exits at once)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.cli import SAME_SIGNAL_WINDOW
from tests.e2e.conftest import ServeProcess, free_port
from tests.e2e.test_openai_sdk import read_until_error
from tests.fake_upstream import ThreadedServer


def config(
    upstream_server: ThreadedServer, tmp_path: Path, extra: str = "", **server: int | None
) -> str:
    """A gateway's YAML; ``server``: its ``server`` settings (``shutdown_timeout`` 600 s)."""
    settings = ", ".join(
        f"{k}: {json.dumps(v)}" for k, v in {"shutdown_timeout": 600, **server}.items()
    )
    return f"""
server: {{{settings}}}
data_dir: {tmp_path / "data"}
cache: {{semantic: {{enabled: false}}}}
models:
  fake-model: {{backend: openai, base_url: "{upstream_server.url}/v1", api_key: sk}}
{extra}"""


def signal_again(gateway: ServeProcess, sig: signal.Signals, times: int) -> None:
    """Send ``sig`` ``times`` times, two seconds apart (past ``SAME_SIGNAL_WINDOW``, within
    which a signal is the same as the one before)."""
    for _ in range(times):
        time.sleep(2 * SAME_SIGNAL_WINDOW)
        gateway.proc.send_signal(sig)


class Trickle:
    """A raw client sending a request's line, headers and half its body, then a byte of the
    rest now and then (a slow upload), until the server closes; ``answer()``: what came back."""

    def __init__(self, port: int, path: str = "/v1/chat/completions") -> None:
        self.client = socket.create_connection(("127.0.0.1", port))
        self.client.sendall(
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n".encode()
            + b'content-length: 100000\r\n\r\n{"model": "fake-model", '
        )
        self.sending = threading.Thread(target=self._send, daemon=True)
        self.sending.start()

    def _send(self) -> None:
        with contextlib.suppress(OSError):  # (the server closed: the answer is there to read)
            for _ in range(1000):
                time.sleep(0.2)
                self.client.sendall(b" ")

    def answer(self, timeout: float) -> bytes:
        self.client.settimeout(timeout)
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while piece := self.client.recv(65536):
                received += piece
        self.client.close()
        return received


@pytest.mark.parametrize(
    ("ended_by", "port"),
    [("a second signal", "data"), ("the deadline", "data"), ("a second signal", "admin")],
    ids=["second signal", "deadline", "second signal, admin port"],
)
def test_a_request_whose_body_is_still_arriving_ends_at_the_deadline(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path, ended_by: str, port: str
) -> None:
    """A client still sending its body (slowly, or stopped half way) held uvicorn's drain for
    shutdown_timeout + 2 s, a second signal or not: the deadline ended only requests waiting
    for a model. Now it ends this one too, with the same retryable 503, on either port."""
    admin = free_port() if port == "admin" else None
    timeout = 600 if ended_by == "a second signal" else 1
    gateway = serve(config(upstream_server, tmp_path, shutdown_timeout=timeout, admin_port=admin))
    upload = Trickle(gateway.port) if admin is None else Trickle(admin, "/admin/cache/flush")
    time.sleep(0.5)  # (the request is in)
    gateway.proc.send_signal(signal.SIGINT)
    gateway.wait_logged("Waiting for connections to close", timeout=30)
    if ended_by == "a second signal":
        signal_again(gateway, signal.SIGINT, 1)
    answer = upload.answer(timeout=30)  # (not 600 s later)
    assert answer.startswith(b"HTTP/1.1 503 "), answer
    assert b'"code":"shutting_down"' in answer, answer
    assert gateway.proc.wait(timeout=30) == 0
    log = gateway.log.read_text()
    waited = "a second signal" if ended_by == "a second signal" else "1s"
    assert f"shutdown: 1 requests still sending their body after {waited}; ended" in log, log
    if admin is None:  # (the request's own log line: not a client's 499)
        assert "/v1/chat/completions model=- cache=bypass status=503" in log, log
    assert "Traceback" not in log and "Application shutdown complete" in log, log


_POST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
)


def pipelined_behind_a_stream(gateway: ServeProcess, behind: bytes) -> tuple[bytes, bytes]:
    """Send a slow stream's request and, on the same connection, ``behind`` (pipelined); once
    the stream has started, SIGINT, and wait for the exit (``shutdown_timeout`` 1 s).
    Returns what the connection got: the stream's answer, and what followed a ``503``."""
    streamed = json.dumps({"model": "fake-model", "stream": True,
                           "messages": [{"role": "user", "content": "slow"}],
                           "fake": {"chunks": 50, "chunk_delay": 0.5}}).encode()  # fmt: skip
    with socket.create_connection(("127.0.0.1", gateway.port)) as client:
        client.sendall(_POST + b"content-length: %d\r\n\r\n%s" % (len(streamed), streamed)
                       + behind)  # fmt: skip
        assert client.recv(12) == b"HTTP/1.1 200"  # (the stream has started)
        gateway.proc.send_signal(signal.SIGINT)
        assert gateway.proc.wait(timeout=30) == 0
        client.settimeout(10)
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while piece := client.recv(65536):
                received += piece
    stream, _, refused = received.partition(b"HTTP/1.1 503 ")
    # the stream ended by the deadline: its error event, then its end
    assert b'"code":"shutting_down"' in stream and stream.endswith(b"\r\n0\r\n\r\n"), received
    return stream, refused


def test_an_upload_pipelined_behind_a_stream_waits_for_the_stream_to_end(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    """HTTP pipelining: a stream being answered, and behind it a request whose body is still
    arriving (the connection's last request). At the deadline that one's 503 was written
    inside the stream and the connection closed: the stream got neither its error event nor
    its end. Now the stream ends with its error, then the upload gets its 503."""
    gateway = serve(config(upstream_server, tmp_path, shutdown_timeout=1))
    upload = _POST + b'content-length: 100000\r\n\r\n{"model": "fake-model", '
    _, refused = pipelined_behind_a_stream(gateway, upload)
    assert b'"code":"shutting_down"' in refused, refused
    log = gateway.log.read_text()
    assert "shutdown: 1 requests still sending their body after 1s; ended" in log, log


def test_a_request_pipelined_behind_a_stream_gets_its_503_after_the_deadline(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    """HTTP pipelining: a request that had fully arrived, queued behind a stream, starts only
    once the deadline has ended that stream: the deadline had not cancelled it, and it waited
    for its model until uvicorn's own deadline cut it (a 500). Now it gets the 503 at once."""
    gateway = serve(config(upstream_server, tmp_path, shutdown_timeout=1))
    queued = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "q"}],
                         "fake": {"delay": 20}}).encode()  # fmt: skip
    _, refused = pipelined_behind_a_stream(
        gateway, _POST + b"content-length: %d\r\n\r\n%s" % (len(queued), queued)
    )
    assert b'"code":"shutting_down"' in refused, refused


def test_a_second_signal_drops_a_client_that_reads_nothing_of_its_answer(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    """A connection closes only once what it buffered is sent: a client that stopped reading
    its answer (here a large one, its window full) held the drain after a second signal for
    shutdown_timeout + 2 s, its request long answered. Now its connection is dropped."""
    gateway = serve(config(upstream_server, tmp_path))
    question = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "big"}],
                           "fake": {"content": "0123456789", "repeat": 2_000_000}}).encode()  # fmt: skip
    with socket.socket() as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(("127.0.0.1", gateway.port))
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(question), question)
        )
        assert client.recv(12) == b"HTTP/1.1 200"  # (then it reads nothing more)
        gateway.proc.send_signal(signal.SIGINT)
        gateway.wait_logged("Waiting for connections to close", timeout=30)
        signal_again(gateway, signal.SIGINT, 1)
        assert gateway.proc.wait(timeout=30) == 0  # (not 600 s later)
    log = gateway.log.read_text()
    said = "shutdown: 1 clients took nothing of their answers 1s after a second signal"
    assert said in log and "Traceback" not in log, log


def test_a_second_signal_spares_a_client_still_reading_its_answer_slowly(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    """The drop above took every connection still sending 1 s after the deadline: a client
    reading a large answer slowly but steadily (64 kB every 50 ms: the answer past what the
    kernel's buffers hold) got it cut half way.
    Now only one that took nothing of it since the look before is dropped."""
    gateway = serve(config(upstream_server, tmp_path))
    text = "0123456789" * 600_000
    question = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "big"}],
                           "fake": {"content": "0123456789", "repeat": 600_000}}).encode()  # fmt: skip
    with socket.socket() as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        client.connect(("127.0.0.1", gateway.port))
        client.sendall(_POST + b"content-length: %d\r\n\r\n%s" % (len(question), question))
        received = client.recv(12)
        assert received == b"HTTP/1.1 200"
        gateway.proc.send_signal(signal.SIGINT)
        gateway.wait_logged("Waiting for connections to close", timeout=30)
        signal_again(gateway, signal.SIGINT, 1)
        client.settimeout(30)
        while piece := client.recv(65536):  # (some seconds for its 6 MB: past the 1 s)
            received += piece
            time.sleep(0.05)
    head, _, body = received.partition(b"\r\n\r\n")
    assert json.loads(body)["choices"][0]["message"]["content"] == text, head
    assert gateway.proc.wait(timeout=30) == 0
    log = gateway.log.read_text()
    assert "took nothing of their answers" not in log and "Traceback" not in log, log


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_third_signal_exits_while_the_app_shutdown_hangs(
    serve: Any,
    upstream_server: ThreadedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sig: signal.Signals,
) -> None:
    """The app's own shutdown (runtime.close), after the drain, can hang: here flushing the
    traces to a collector that accepts connections and never answers. Ctrl-C did nothing
    there, however many times (a SIGTERM after the first, every one): only SIGKILL ended the
    process. The third now exits at once, non-zero."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "600")
    with socket.socket() as collector:
        collector.bind(("127.0.0.1", 0))
        collector.listen(16)  # (connections wait in its backlog, never answered)
        endpoint = f"http://127.0.0.1:{collector.getsockname()[1]}/v1/traces"
        gateway = serve(config(upstream_server, tmp_path, f"tracing: {{enabled: true, "
                                                          f"endpoint: '{endpoint}'}}"))  # fmt: skip
        answer = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert answer.status_code == 200  # (a span to export)
        gateway.proc.send_signal(sig)
        gateway.wait_logged("Waiting for application shutdown", timeout=30)
        signal_again(gateway, sig, 2)
        assert gateway.proc.wait(timeout=15) == 128 + sig
    log = gateway.log.read_text()
    assert f"shutdown: a third signal ({sig.name}): exiting now" in log, log


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_ends_open_requests_now_with_their_error(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path, sig: signal.Signals
) -> None:
    """A second Ctrl-C while requests drain (uvicorn's "CTRL+C to force quit") cut them (the
    SDK's "peer closed connection", a traceback each in the log, the runtime never closed), and
    a repeated `kill` did nothing: the open requests kept the process for shutdown_timeout. Now
    both end them at once with their 503 (an error event on a stream that has started), and the
    shutdown goes on as usual."""
    gateway = serve(config(upstream_server, tmp_path))

    async def run() -> tuple[Any, list[str], Any]:
        sdk = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="sk", max_retries=0)
        slow = asyncio.create_task(sdk.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "a slow question"}],
            extra_body={"fake": {"delay": 600}},
        ))  # fmt: skip
        stream = await sdk.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "a long story"}],
            stream=True, extra_body={"fake": {"chunk_delay": 1, "chunks": 600}},
        )  # fmt: skip
        pieces: list[str] = []
        reading = asyncio.create_task(read_until_error(stream, pieces))
        await asyncio.sleep(0.5)
        gateway.proc.send_signal(sig)
        await asyncio.to_thread(gateway.wait_logged, "Waiting for connections to close", 30)
        await asyncio.to_thread(signal_again, gateway, sig, 1)
        done, _ = await asyncio.wait([slow, reading], timeout=60)  # (not 600 s)
        await sdk.close()
        assert slow in done and reading in done
        return slow.exception(), pieces, reading.result()

    slow, pieces, stream_error = asyncio.run(run())
    assert isinstance(slow, openai.InternalServerError) and slow.status_code == 503, slow
    assert slow.body["code"] == "shutting_down"
    assert pieces and isinstance(stream_error, openai.APIError), stream_error
    assert "shutting down" in stream_error.message
    # (uvicorn re-raises a SIGTERM, a clean stop; after Ctrl-C it exits 0)
    assert gateway.proc.wait(timeout=30) == (-sig if sig == signal.SIGTERM else 0)
    log = gateway.log.read_text()
    assert "shutdown: 2 requests still open after a second signal; ended" in log, log
    assert "Traceback" not in log and "Application shutdown complete" in log, log


@pytest.mark.parametrize(
    ("gap", "hurried"),
    [(0.05, False), (2 * SAME_SIGNAL_WINDOW, True)],
    ids=["one Ctrl-C under foreman", "a second Ctrl-C"],
)
def test_a_sigterm_just_after_the_sigint_is_the_same_stop(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path, gap: float, hurried: bool
) -> None:
    """foreman and honcho turn one Ctrl-C into two signals: the terminal's SIGINT to the whole
    process group, and their own SIGTERM to each child at once. Counted as two, one Ctrl-C
    hurried the shutdown: the open requests got a 503 at once instead of shutdown_timeout s
    to finish. A signal within SAME_SIGNAL_WINDOW of the last is now the same stop; one two
    seconds later still hurries it."""
    gateway = serve(config(upstream_server, tmp_path))
    question = {"model": "fake-model", "messages": [{"role": "user", "content": "slow"}],
                "fake": {"delay": 8}}  # fmt: skip
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        slow = pool.submit(
            httpx.post, f"{gateway.url}/v1/chat/completions", json=question, timeout=60
        )
        time.sleep(0.5)  # (the request is in)
        gateway.proc.send_signal(signal.SIGINT)
        time.sleep(gap)
        gateway.proc.send_signal(signal.SIGTERM)
        answer = slow.result(timeout=60)
    code = gateway.proc.wait(timeout=30)
    log = gateway.log.read_text()
    if hurried:
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "shutting_down"
        assert "shutdown: 1 requests still open after a second signal; ended" in log, log
        assert code == -signal.SIGTERM  # (uvicorn re-raises both signals, the last first)
    else:
        assert answer.status_code == 200, answer.text
        assert "SIGTERM" in log and "after the last signal counts as the same one" in log, log
        assert "still open" not in log, log
        assert code == 0, log  # (the SIGINT alone re-raised: no SIGTERM status)
    assert "Traceback" not in log and "Application shutdown complete" in log, log


def test_a_port_taken_since_the_check_fails_the_start_while_the_model_loads(
    bundled_model_dir: Path, tmp_path: Path
) -> None:
    """The port probe (``_check_ports``) runs before anything loads; a port another process
    takes after it is uvicorn's own bind error, after the app's startup has begun loading the
    local model on its daemon thread: the process says why and exits with uvicorn's status 3,
    without waiting for the load (``_exit_now``), and is not aborted by the load's thread."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "c.yaml"
        config.write_text(f"""
data_dir: {tmp_path / "data"}
cache: {{semantic: {{enabled: false}}}}
models:
  m: {{backend: local, source: "{bundled_model_dir}", threads: 1}}
""")
        serve = (  # the CLI, its probe passed: the port was taken after it
            "import sys, gateway.cli as cli; cli._check_ports = lambda config: None; "
            f"sys.exit(cli.main(['serve', '--config', {str(config)!r}, '--port', '{port}']))"
        )
        result = subprocess.run(
            [sys.executable, "-c", serve], capture_output=True, text=True, timeout=120
        )
    assert result.returncode == 3, result.stderr
    assert f"('127.0.0.1', {port}): address already in use" in result.stderr
    assert "local model m is still loading: shutting down without it" in result.stderr
    assert "Traceback" not in result.stderr and "FATAL" not in result.stderr


def test_ctrl_c_on_a_gateway_without_a_local_model_never_imports_torch(
    serve: Any, upstream_server: ThreadedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exit asked whether a local model was still loading by importing gateway.local:
    torch and transformers, seconds of CPU after "Finished server process" (14 s on a busy
    2-core machine) in a gateway that has no local model. Here a torch that cannot be
    imported shows whether it was."""
    no_torch = tmp_path / "no-torch"
    (no_torch / "torch").mkdir(parents=True)
    (no_torch / "torch" / "__init__.py").write_text('raise ImportError("torch was imported")\n')
    path = [str(no_torch), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    gateway = serve(config(upstream_server, tmp_path))
    answer = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert answer.status_code == 200
    gateway.proc.send_signal(signal.SIGINT)
    code = gateway.proc.wait(timeout=60)
    log = gateway.log.read_text()
    assert code == 0, log
    assert "Finished server process" in log and "Traceback" not in log, log
