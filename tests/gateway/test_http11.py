"""gateway.http11: the upstream transport, against raw asyncio servers that answer what each
test needs (the fake upstreams cover the ordinary answers through the gateway's own tests)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from gateway.http11 import HTTP11Transport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


@asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A server on 127.0.0.1; yields its base URL and a list that counts its connections."""
    connections: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    async with srv:
        yield f"http://127.0.0.1:{port}", connections


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request: its head and (content-length) body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


async def keep_answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A kept-alive server: 200 to every request until the client closes."""
    while True:
        try:
            await read_request(reader)
        except asyncio.IncompleteReadError:
            return
        writer.write(OK)


def client(base: str, **options: float) -> httpx.AsyncClient:
    transport = HTTP11Transport(max_idle=4, **options)
    return httpx.AsyncClient(base_url=base, transport=transport, timeout=2)


async def test_kept_alive_connections_are_reused() -> None:
    async with server(keep_answering) as (base, connections), client(base) as c:
        for _ in range(3):
            r = await c.post("/v1/x", content=b'{"a": 1}')
            assert r.status_code == 200 and r.json() == {}
    assert len(connections) == 1


async def test_the_request_is_sent_whole_and_the_body_arrives_as_sent() -> None:
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"6\r\n world\r\n0\r\n\r\n")

    async with (
        server(handler) as (base, _),
        client(base) as c,
        c.stream("POST", "/v1/chat/completions?x=1", content=b"body!") as r,
    ):
        parts = [part async for part in r.aiter_raw()]
    assert parts == [b"hello", b" world"]
    head, _, body = seen[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/chat/completions?x=1 HTTP/1.1\r\n")
    assert b"\r\ncontent-length: 5" in head.lower() and body == b"body!"


async def test_a_body_without_a_length_lasts_until_the_server_closes() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end")
        await writer.drain()

    async with server(handler) as (base, connections), client(base) as c:
        assert (await c.post("/", content=b"")).content == b"until the end"
        assert (await c.post("/", content=b"")).content == b"until the end"
    assert len(connections) == 2  # not reused


async def test_an_idle_connection_the_server_closed_is_not_used_again() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)
        await writer.drain()  # then closes, as uvicorn does after its keep-alive timeout

    async with server(handler) as (base, connections), client(base) as c:
        assert (await c.post("/", content=b"")).status_code == 200
        await asyncio.sleep(0.05)
        assert (await c.post("/", content=b"")).status_code == 200
    assert len(connections) == 2


async def test_idle_connections_expire() -> None:
    async with (
        server(keep_answering) as (base, connections),
        client(base, keepalive_expiry=0.05) as c,
    ):
        await c.post("/", content=b"")
        await asyncio.sleep(0.1)
        await c.post("/", content=b"")
    assert len(connections) == 2


async def test_a_server_that_closes_without_answering_is_a_remote_protocol_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async with server(handler) as (base, _), client(base) as c:
        with pytest.raises(httpx.RemoteProtocolError):
            await c.post("/", content=b"")


async def test_a_body_cut_off_is_an_error_and_a_body_closed_early_frees_no_connection() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
            await writer.drain()

    async with server(handler) as (base, connections), client(base, keepalive_expiry=60) as c:
        async with c.stream("POST", "/", content=b"") as r:
            assert await r.aiter_raw().__anext__() == b"abc"  # closed before its end
        with pytest.raises(httpx.ReadTimeout):
            await c.post("/", content=b"", timeout=0.1)
    assert len(connections) == 2


async def test_informational_answers_are_skipped() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + OK)

    async with server(handler) as (base, _), client(base) as c:
        r = await c.post("/", content=b"")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"


async def test_headers_with_line_breaks_are_refused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)

    async with server(handler) as (base, connections), client(base) as c:
        with pytest.raises(httpx.LocalProtocolError):
            await c.post("/", content=b"", headers={"x-a": "b\r\nx-injected: 1"})
    assert connections == []  # refused before anything was sent


async def test_connect_failures_are_connect_errors() -> None:
    srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    srv.close()
    await srv.wait_closed()
    async with client(f"http://127.0.0.1:{port}") as c:
        with pytest.raises(httpx.ConnectError):
            await c.post("/", content=b"")


async def test_an_invalid_answer_is_a_remote_protocol_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SPDY/9 what\r\n\r\n")

    async with server(handler) as (base, _), client(base) as c:
        with pytest.raises(httpx.RemoteProtocolError):
            await c.post("/", content=b"")


async def test_https(tmp_path: Path) -> None:
    """TLS with the server's name checked (a self-signed certificate for 127.0.0.1)."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        capture_output=True,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr  # (Debian's openssl, in every image this runs on)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)

    srv = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=served)
    base = f"https://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    trusting = HTTP11Transport(max_idle=1, ssl_context=ssl.create_default_context(cafile=cert))
    untrusting = HTTP11Transport(max_idle=1, ssl_context=ssl.create_default_context())
    async with srv:
        async with httpx.AsyncClient(base_url=base, transport=trusting) as c:
            assert (await c.post("/", content=b"")).json() == {}
        async with httpx.AsyncClient(base_url=base, transport=untrusting) as c:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await c.post("/", content=b"")


async def test_a_second_answer_after_the_first_is_not_merged_into_it() -> None:
    """Bytes after the end of the answer (a stray second response in the same read) neither
    replace its status nor join its body, and the connection is not used again."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK + b"HTTP/1.1 500 Oops\r\ncontent-length: 7\r\n\r\n{error}")
        await keep_answering(reader, writer)

    async with server(handler) as (base, connections), client(base) as c:
        first = await c.post("/", content=b"")
        assert (first.status_code, first.content) == (200, b"{}")
        again = await c.post("/", content=b"")
        assert (again.status_code, again.content) == (200, b"{}")
    assert len(connections) == 2  # the first connection was not reused


async def test_a_body_until_close_that_is_reset_is_an_error_not_a_short_success() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\npartial-bo")
        await writer.drain()
        await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # a reset (RST), not a close

    async with server(handler) as (base, _), client(base) as c:
        with pytest.raises(httpx.ReadError):
            await c.post("/", content=b"")


async def test_head_and_upgrade_answers() -> None:
    """A HEAD's answer has no body whatever its content-length says (no wait for one); a 101
    is an invalid answer, not a crash in the protocol's callback."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await read_request(reader)
        if request.startswith(b"HEAD"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"
                         b"connection: upgrade\r\n\r\n\x81\x02hi")  # fmt: skip
        await writer.drain()
        await asyncio.sleep(1)

    async with server(handler) as (base, _), client(base) as c:
        head = await asyncio.wait_for(c.head("/"), 1)
        assert (head.status_code, head.content) == (200, b"")
        with pytest.raises(httpx.RemoteProtocolError, match="invalid answer"):
            await c.post("/", content=b"")


async def test_an_endless_head_is_refused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nx-padding: ")
        for _ in range(64):  # 1 MiB of one header, and still no end of the head
            writer.write(b"a" * 16384)
            await writer.drain()
        await asyncio.sleep(1)

    async with server(handler) as (base, _), client(base) as c:
        with pytest.raises(httpx.RemoteProtocolError, match="head over 65536 bytes"):
            await c.post("/", content=b"")
