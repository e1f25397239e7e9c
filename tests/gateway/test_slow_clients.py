"""A client that stops reading a stream must not hold its model call forever."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest

from tests.conftest import Gateway, wait_for
from tests.fake_upstream import FakeUpstream


def open_stream_and_stop_reading(gw: Gateway, body: dict[str, Any]) -> socket.socket:
    """Send a streaming request on a raw socket with a tiny receive window, read nothing."""
    host, port = gw.url.removeprefix("http://").split(":")
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # (before connecting)
    client.connect((host, int(port)))
    payload = json.dumps(body).encode()
    client.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    return client


def test_a_stream_nobody_reads_ends_after_stream_idle_timeout(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway("server: {stream_idle_timeout: 1}")
    # events of 4 kB until the gateway hangs up: more than any socket buffer between the fake
    # upstream, the gateway and the client holds (loopback receive buffers grow to 32 MB), so
    # the upstream can only end by being cancelled
    fake = {"content": "x" * 4000, "chunks": 1, "endless": True}
    body = {"model": "fake-model", "stream": True, "fake": fake,
            "messages": [{"role": "user", "content": "a very long answer"}]}  # fmt: skip
    client = open_stream_and_stop_reading(gw, body)
    try:
        wait_for(lambda: gw.runtime.streams)  # the stream started ...
        wait_for(lambda: not gw.runtime.streams)  # ... and was ended, with nobody reading
        metrics = gw.http.get("/metrics").text
        assert (
            'cachegate_stream_errors_total{code="client_stuck",model="fake-model",'
            'route="/v1/chat/completions"} 1.0'
        ) in metrics
        # its upstream call was cancelled, and the client's connection closed
        wait_for(lambda: upstream.stats["streams_cancelled"] == 1)
        client.settimeout(10)
        received = 0
        while chunk := client.recv(1 << 20):
            received += len(chunk)
        assert received > 0  # what was buffered for it, then the end of the connection
    finally:
        client.close()
    # nothing of the cut answer was stored, and the gateway serves on
    again = gw.chat("a very long answer", stream=False, fake={"content": "short"})
    assert again.status_code == 200 and again.headers["x-cache"] == "miss"


def test_a_client_that_stops_reading_then_leaves_frees_its_stream_at_once(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """A client that hangs up while the gateway waits to write to it (its window full) left:
    its upstream call ends and the request is booked then, not at the idle timeout."""
    gw = make_gateway("")  # (stream_idle_timeout at its default, 300 s)
    # (paced as a model streams: a flood the gateway reads faster than it can drop it would
    # hold its event loop while it drains, wherever the cancel lands)
    fake = {"content": "x" * 4000, "chunks": 1, "endless": True, "chunk_delay": 0.002}
    body = {"model": "fake-model", "stream": True, "fake": fake,
            "messages": [{"role": "user", "content": "an answer nobody waits for"}]}  # fmt: skip
    client = open_stream_and_stop_reading(gw, body)
    try:
        # the gateway has waited a second to write the next event: the client's window is full
        wait_for(
            lambda: any(
                w.since is not None and time.monotonic() - w.since > 1 for w in gw.runtime.streams
            )
        )
    finally:
        client.close()
    # (the watchdog would end it after 300 s: well past wait_for's 15)
    wait_for(lambda: not gw.runtime.streams)
    wait_for(lambda: upstream.stats["streams_cancelled"] == 1)
    metrics = gw.http.get("/metrics").text
    assert (
        'cachegate_stream_errors_total{code="client_disconnected",model="fake-model",'
        'route="/v1/chat/completions"} 1.0'
    ) in metrics
    points = gw.http.get("/admin/history").json()["points"]
    assert sum(sum(p["tiers"].values()) for p in points) == 1  # it is in the history too


def test_a_slow_reader_that_keeps_reading_is_not_cut(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway("server: {stream_idle_timeout: 1}")
    body = {"model": "fake-model", "stream": True,
            "fake": {"chunk_delay": 0.3, "chunks": 8},  # 2.4 s in all: more than the timeout
            "messages": [{"role": "user", "content": "slowly"}]}  # fmt: skip
    response = gw.http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200 and response.text.endswith("data: [DONE]\n\n")
    assert 'code="client_stuck"' not in gw.http.get("/metrics").text  # (no such series)


def test_the_watchdog_spares_a_stream_whose_client_reads_again() -> None:
    """Ending one stuck stream takes time; a stream picked with it that resumed meanwhile
    must not be ended, and one whose generator is running must not be cancelled."""
    import asyncio
    from types import SimpleNamespace

    from gateway.connections import Connections, StreamWatch

    async def scenario() -> tuple[list[str], bool, bool]:
        loop = asyncio.get_running_loop()
        ended: list[str] = []

        class Slow:  # ends slowly, and meanwhile the other client takes an event
            since = loop.time() - 10

            async def end(self) -> None:
                ended.append("a")
                await asyncio.sleep(0.05)
                resumed.since = None
                runtime.streams.remove(self)  # (an ended stream leaves the set)

        class Resumed:
            since = loop.time() - 10

            async def end(self) -> None:
                ended.append("b")

        resumed = Resumed()
        runtime = SimpleNamespace(streams=[Slow(), resumed])  # (a list: this order)
        watchdog = asyncio.create_task(Connections._end_stuck_streams(runtime, 0.04))  # type: ignore[arg-type]
        await asyncio.sleep(0.3)
        watchdog.cancel()

        # a generator that is running (its client took an event) is neither closed nor cancelled
        watch = StreamWatch()

        async def events() -> Any:
            await asyncio.sleep(0.2)
            yield b"x"

        watch.events = events()
        watch.task = asyncio.current_task()
        step = asyncio.ensure_future(watch.events.__anext__())
        await asyncio.sleep(0.01)  # now running (awaiting inside)
        await watch.end()
        assert await step == b"x"
        return ended, watch.stuck, watch.task.cancelling() > 0  # type: ignore[union-attr]

    ended, stuck, cancelled = asyncio.run(scenario())
    assert ended == ["a"]
    assert not stuck and not cancelled


@pytest.mark.parametrize("deadline", [False, True], ids=["serving", "after the deadline"])
def test_a_client_that_leaves_mid_body_is_a_499_not_a_500(
    make_gateway: Any, upstream: FakeUpstream, deadline: bool
) -> None:
    """A client that hangs up while sending its body left: not a gateway error. After a
    shutdown's deadline too: it was a 503 (the flag saying the deadline passed was the whole
    process's), as for an upload the deadline ended (tests/e2e/test_lifecycle.py)."""
    gw = make_gateway("")
    gw.runtime.connections.aborting = deadline  # (as ``abort_in_flight`` sets it)
    host, port = gw.url.removeprefix("http://").split(":")
    payload = b'{"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}'
    with socket.create_connection((host, int(port))) as client:
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json"
            + f"\r\ncontent-length: {len(payload)}\r\n\r\n".encode()
            + payload[:10]
        )
    series = 'cachegate_requests_total{cache="bypass",model="",route="/v1/chat/completions",'
    wait_for(lambda: series in gw.http.get("/metrics").text)
    metrics = gw.http.get("/metrics").text
    assert series + 'status="499"} 1.0' in metrics
    assert 'status="500"' not in metrics and 'status="503"' not in metrics, metrics
    assert upstream.stats["requests"] == 0
