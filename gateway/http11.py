"""A lean HTTP/1.1 transport for httpx: asyncio's own sockets, parsed by httptools.

``UpstreamBackend`` sends every upstream request through one ``httpx.AsyncClient``; this is its
transport (in place of httpcore's), for ``http://`` and ``https://`` alike. Per request it does
what an upstream call needs and no more: take an idle kept-alive connection (or open one), send
the request line, headers and body in one write, parse the answer with the C parser uvicorn
uses, and hand httpx a ``Response`` whose body is read as it arrives. Everything above the wire
(headers, content decoding, the client's API) stays httpx's; an upstream reached through a
proxy from the environment goes through httpx's own transport instead (gateway.upstream).

NOTE: measured with bench/overhead.py, httpcore (h11 in Python, anyio's stream layers, headers
and body written separately) was the largest part of the gateway's own time per request.

Failures are httpx's exceptions, as httpcore's are mapped: ``ConnectError``/``ConnectTimeout``
before anything was sent, ``ReadTimeout``/``WriteTimeout``, ``RemoteProtocolError`` when the
server closed without an answer (a stale kept-alive connection), ``ReadError``/``WriteError``.
A connection goes back to the pool only after its answer was read to the end; one whose answer
was abandoned (closed early, cancelled, failed) is closed. Idle connections are dropped after
``keepalive_expiry`` s (httpx's default: 5), or as soon as the server closes them.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import httptools
import httpx

__all__ = ["HANDLED", "HTTP11Transport", "StaleConnection"]

#: Set in the extensions of each request this transport handled: its failures say exactly
#: whether the request may be sent again (:class:`StaleConnection`).
HANDLED = "cachegate.http11"


class StaleConnection(httpx.RemoteProtocolError):
    """A reused keep-alive connection closed (or reset) before a single byte of the answer
    came: the server closed it as idle when the request went out, so it never worked on the
    request. The only failure after which a request (a POST) may be sent again."""


#: A body read this far ahead of its reader pauses the socket until it catches up.
_READ_AHEAD = 1 << 20
#: An answer whose status line and headers run longer than this is refused (h11's limit):
#: a server sending endless headers would otherwise grow them in memory without bound.
_MAX_HEAD = 64 * 1024
_Origin = tuple[bytes, str, int]


class HTTP11Transport(httpx.AsyncBaseTransport):
    """Keep-alive HTTP/1.1 connections per origin, at most ``max_idle`` idle ones each.

    NOTE: it queues nothing: ``_Admission`` (gateway.upstream) bounds the requests on the wire.
    """

    def __init__(
        self,
        *,
        max_idle: int,
        keepalive_expiry: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._max_idle = max_idle
        self._expiry = keepalive_expiry
        self._idle: dict[_Origin, list[_Connection]] = {}
        #: httpx's default (certifi's CAs, SSL_CERT_FILE/SSL_CERT_DIR), made on first use
        self._ssl = ssl_context

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout") or {}
        request.extensions[HANDLED] = True
        url = request.url
        origin = (url.raw_scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        head = _head(request) + await _body(request)
        connection = self._reuse(origin)
        reused = connection is not None
        if connection is None:
            connection = await self._connect(origin, timeouts.get("connect"))
        connection.reused = reused
        try:
            await connection.send(
                head, timeouts.get("write"), head_request=request.method == "HEAD"
            )
            status, reason, headers = await connection.response(timeouts.get("read"))
        except BaseException:
            connection.close()
            raise
        stream = _Body(connection, lambda: self._release(origin, connection), timeouts.get("read"))
        return httpx.Response(
            status,
            headers=headers,
            stream=stream,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
        )

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()

    def _reuse(self, origin: _Origin) -> _Connection | None:
        """The most recently used idle connection to ``origin`` still open and fresh."""
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if connection.usable and now - connection.idle_since < self._expiry:
                return connection
            connection.close()
        return None

    def _release(self, origin: _Origin, connection: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        connection.idle()
        if connection.usable and len(idle) < self._max_idle:
            connection.idle_since = time.monotonic()
            idle.append(connection)
        else:
            connection.close()

    async def _connect(self, origin: _Origin, timeout: float | None) -> _Connection:
        scheme, host, port = origin
        context = None
        if scheme == b"https":
            if self._ssl is None:
                self._ssl = httpx.create_ssl_context()
                self._ssl.set_alpn_protocols(["http/1.1"])
            context = self._ssl
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    _Connection, host, port, ssl=context, server_hostname=host if context else None
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(str(exc) or repr(exc)) from None
        return connection


def _head(request: httpx.Request) -> bytes:
    """The request line and headers (CR or LF in any of them: ``LocalProtocolError``)."""
    url = request.url
    lines = [request.method.encode("ascii"), b" ", url.raw_path, b" HTTP/1.1\r\n"]
    for name, value in request.headers.raw:
        if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name or b":" in name:
            raise httpx.LocalProtocolError(f"Illegal header: {name!r}")
        lines += (name, b": ", value, b"\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


async def _body(request: httpx.Request) -> bytes:
    """The request's body as it goes on the wire (chunked when its length was not known)."""
    if isinstance(request.stream, httpx.ByteStream):
        return request.content
    chunks = [chunk async for chunk in request.stream]  # type: ignore[union-attr]
    if "transfer-encoding" not in request.headers:
        return b"".join(chunks)
    return b"".join(b"%x\r\n%b\r\n" % (len(c), c) for c in chunks if c) + b"0\r\n\r\n"


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: writes a request, parses its answer as data arrives."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._wake: asyncio.Future[None] | None = None
        self._writable = True
        self._drained: asyncio.Future[None] | None = None
        self.idle_since = 0.0
        self.reused = False  # taken from the idle pool (it may have been closed as idle)
        self._busy = False  # a request was sent and its answer is not read to the end
        self._reset()

    def _reset(self) -> None:
        self._headers: list[tuple[bytes, bytes]] = []
        self._status = 0
        self._reason = b""
        self._head_done = self._complete = self._eof_body = False
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._keep_alive = True
        self._closed_by: BaseException | None = None
        self._received = 0  # bytes of this request's answer that arrived
        self._head_request = False

    @property
    def usable(self) -> bool:
        transport = self._transport
        return transport is not None and not transport.is_closing() and self._keep_alive

    # -- the request's side ------------------------------------------------------------------

    async def send(self, data: bytes, timeout: float | None, head_request: bool = False) -> None:
        self._reset()
        self._head_request = head_request
        self._busy = True
        if self._transport is None or self._transport.is_closing():
            raise StaleConnection("Server disconnected without sending a response.")
        self._transport.write(data)
        if not self._writable:
            self._drained = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout):
                    await self._drained
            except TimeoutError:
                raise httpx.WriteTimeout("writing the request timed out") from None

    async def response(self, timeout: float | None) -> tuple[int, bytes, list[Any]]:
        """Wait for the status line and headers of the answer."""
        while not self._head_done:
            await self._wait(timeout)
        return self._status, self._reason, self._headers

    async def read(self, timeout: float | None) -> bytes:
        """The body that arrived since the last read; b"" at its end."""
        while not self._chunks and not self._complete:
            await self._wait(timeout)
        data = b"".join(self._chunks)
        self._chunks.clear()
        if self._buffered > _READ_AHEAD and self._transport is not None:
            self._transport.resume_reading()
        self._buffered = 0
        return data

    def idle(self) -> None:
        """Its answer was read to the end: anything that arrives now is unasked for."""
        self._busy = False

    @property
    def complete(self) -> bool:
        return self._complete

    def close(self) -> None:
        self._keep_alive = False
        if self._transport is not None:
            self._transport.close()

    async def _wait(self, timeout: float | None) -> None:
        if self._closed_by is not None:
            raise self._closed_by
        self._wake = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await self._wake
        except TimeoutError:
            raise httpx.ReadTimeout("reading the answer timed out") from None
        finally:
            self._wake = None
        if self._closed_by is not None and not (self._chunks or self._complete):
            raise self._closed_by

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        if not self._busy:  # bytes nobody asked for (an idle connection): not to be reused
            self.close()
            return
        self._received += len(data)
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(httpx.RemoteProtocolError(f"invalid answer: {exc}"))
            return
        if not self._head_done and self._received > _MAX_HEAD:
            self._fail(httpx.RemoteProtocolError(f"invalid answer: a head over {_MAX_HEAD} bytes"))
            return
        if self._buffered > _READ_AHEAD and self._transport is not None:
            self._transport.pause_reading()
        self._notify()

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended(exc)
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def _ended(self, exc: Exception | None = None) -> None:
        """The server closed the connection (or it broke)."""
        self._keep_alive = False
        if self._head_done and self._eof_body and exc is None:
            self._complete = True  # a body that lasts until the connection closes
        elif not self._complete and self._closed_by is None:
            if exc is not None and self.reused and not self._received and not self._head_done:
                self._closed_by = StaleConnection(str(exc) or repr(exc))
            elif exc is not None:
                self._closed_by = httpx.ReadError(str(exc) or repr(exc))
            elif self._head_done:
                self._closed_by = httpx.RemoteProtocolError("peer closed connection mid-answer")
            elif self._received:
                self._closed_by = httpx.RemoteProtocolError("peer closed connection mid-head")
            else:
                cls = StaleConnection if self.reused else httpx.RemoteProtocolError
                self._closed_by = cls("Server disconnected without sending a response.")
        self._notify()

    def _fail(self, error: BaseException) -> None:
        self._closed_by = error
        self.close()
        self._notify()

    # -- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._complete:  # a second answer to one request: bytes nobody asked for
            raise RuntimeError("data after the end of the answer")

    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        if self._status < 200:  # informational (100 Continue): the final answer follows
            self._headers, self._reason = [], b""
            return
        self._keep_alive = self._keep_alive and self._parser.should_keep_alive()
        names = {name.lower() for name, _ in self._headers}
        self._eof_body = b"content-length" not in names and b"transfer-encoding" not in names
        self._head_done = True
        if self._head_request:
            # NOTE: no body follows a HEAD, whatever its headers say; the parser cannot be
            # told, so this connection (which it would read a body from) is not reused
            self._eof_body = False
            self._complete = True
            self._keep_alive = False

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)

    def on_message_complete(self) -> None:
        if self._status < 200:
            return  # an informational answer: the final one follows
        self._complete = True
        self._eof_body = False


class _Body(httpx.AsyncByteStream):
    """An answer's body, read as it arrives; its connection is pooled again once read to the
    end, and closed when the body is closed before that."""

    def __init__(self, connection: _Connection, release: Any, timeout: float | None) -> None:
        self._connection = connection
        self._release = release
        self._timeout = timeout
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        while not self._done:
            data = await connection.read(self._timeout)
            if data:
                yield data
            elif connection.complete:
                self._finish(reuse=True)

    async def aclose(self) -> None:
        self._finish(reuse=self._connection.complete and not self._connection_has_data())

    def _connection_has_data(self) -> bool:
        return bool(self._connection._chunks)

    def _finish(self, *, reuse: bool) -> None:
        if self._done:
            return
        self._done = True
        if reuse:
            self._release()
        else:
            self._connection.close()
