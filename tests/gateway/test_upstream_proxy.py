"""Upstream calls go through the proxy the environment names (``HTTP_PROXY``, ``NO_PROXY``):
a gateway deployed behind an egress proxy reaches its upstream only through it."""

from __future__ import annotations

import asyncio
import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from gateway.config import OpenAIModelConfig, load_config_text
from gateway.requests import parse_request
from gateway.upstream import UpstreamBackend


class _Forward(socketserver.StreamRequestHandler):
    """One proxied request per connection: an absolute-form request line, forwarded to its
    origin with ``connection: close``, and the answer relayed back until the origin closes."""

    def handle(self) -> None:
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            line = self.rfile.readline()
            if not line:
                return
            head += line
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, target, version = request_line.split(" ")
        self.server.seen.append(f"{method} {target}")  # type: ignore[attr-defined]
        headers = [h for h in header_lines if h and not h.lower().startswith("connection:")]
        length = next((int(h.split(":")[1]) for h in headers
                       if h.lower().startswith("content-length:")), 0)  # fmt: skip
        body = self.rfile.read(length)
        url = urlsplit(target)
        path = url.path + (f"?{url.query}" if url.query else "")
        with socket.create_connection((url.hostname, url.port or 80)) as origin:
            forwarded = [f"{method} {path} {version}", *headers, "connection: close", "", ""]
            origin.sendall("\r\n".join(forwarded).encode("latin-1") + body)
            while data := origin.recv(65536):
                self.wfile.write(data)


@pytest.fixture
def proxy() -> Iterator[Any]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Forward)
    server.daemon_threads = True
    server.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _environment(monkeypatch: pytest.MonkeyPatch, proxy: Any, no_proxy: str) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
    monkeypatch.setenv("NO_PROXY", no_proxy)


def test_upstream_calls_go_through_the_proxy_in_the_environment(
    make_gateway: Any, upstream_server: Any, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _environment(monkeypatch, proxy, "")
    gw = make_gateway()
    response = gw.chat("through the proxy?")
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"].startswith("answer #")
    upstream_calls = [s for s in proxy.seen if s.startswith(f"POST {upstream_server.url}/v1/")]
    assert upstream_calls == [f"POST {upstream_server.url}/v1/chat/completions"], proxy.seen


def test_no_proxy_hosts_are_reached_directly(
    make_gateway: Any, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _environment(monkeypatch, proxy, "127.0.0.1")
    gw = make_gateway()
    response = gw.chat("directly?")
    assert response.status_code == 200, response.text
    assert proxy.seen == []


@pytest.mark.parametrize("proxied", [False, True], ids=["direct", "proxied"])
def test_the_liveness_check_is_asked_past_max_connections_through_a_proxy_too(
    upstream_server: Any, proxy: Any, monkeypatch: pytest.MonkeyPatch, proxied: bool
) -> None:
    """``UpstreamBackend.answers`` (the ``GET /models/{model}`` that tells a slow replica from
    a hung one) while the upstream's one connection (``max_connections: 1``) carries a stream:
    answered, directly or through the proxy. Through one it waited for httpx's own pool,
    limited to ``max_connections`` too, gave up after ``timeout.connect``, and the replica was
    taken for hung (marked down, its prefixes forgotten, its request failed over)."""
    _environment(monkeypatch, proxy, "" if proxied else "127.0.0.1")
    backend = _one_connection(upstream_server)
    body = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hi"}],
            "fake": {"endless": True, "chunk_delay": 0.05}}  # fmt: skip
    request = parse_request("chat", json.dumps(body).encode(), {}, "tenant")

    async def check() -> bool:
        stream = await backend.open_stream(request)
        try:
            await anext(aiter(stream))  # (the stream holds the one connection)
            return await backend.answers()
        finally:
            await stream.aclose()
            await backend.close()

    assert asyncio.run(check())
    probes = [s for s in proxy.seen if s.startswith("GET ")]
    assert probes == ([f"GET {upstream_server.url}/v1/models/fake-model"] if proxied else [])


def test_timeouts_that_come_together_share_one_liveness_check(
    upstream_server: Any, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``UpstreamBackend.answers`` asked for each of a burst of timed-out requests at once
    (up to ``max_connections`` of them): one ``GET /models/{model}`` answers them all; the
    next burst asks again. Each asked its own, past the ``max_connections`` gate and, through
    a proxy, past any cap of its pool: as many new tunnels at once as requests timed out."""
    _environment(monkeypatch, proxy, "")
    backend = _one_connection(upstream_server)

    async def check() -> list[bool]:
        try:
            burst = await asyncio.gather(*(backend.answers() for _ in range(8)))
            return [*burst, await backend.answers()]
        finally:
            await backend.close()

    assert asyncio.run(check()) == [True] * 9
    probes = [s for s in proxy.seen if s.startswith("GET ")]
    assert probes == [f"GET {upstream_server.url}/v1/models/fake-model"] * 2


def _one_connection(upstream_server: Any) -> UpstreamBackend:
    """The fake upstream's model, ``max_connections: 1`` (``connect`` and ``pool``: 1 s)."""
    config = load_config_text(f"""
models:
  fake-model:
    backend: openai
    base_url: "{upstream_server.url}/v1"
    max_connections: 1
    timeout: {{connect: 1, pool: 1}}
""").models["fake-model"]
    assert isinstance(config, OpenAIModelConfig)
    return UpstreamBackend("fake-model", config, forward_client_auth=False, one_tenant=True)
