"""uvicorn's httptools protocol, with the writes of one event-loop turn sent in one send.

uvicorn writes a response's status line and headers, then each body part (and a chunked
body's terminator), each as its own ``transport.write``: one socket send apiece, each waking
the client. ``CorkedHttpToolsProtocol`` (``uvicorn.Config(http=...)``, see cli.py) holds what
is written until the task that wrote it yields to the loop, then sends it in one write: a JSON
answer leaves as one send instead of two, a stream's headers leave with its first events.

NOTE: measured with bench/overhead.py (c=1): the two sends of a JSON answer cost the gateway
about as much CPU as its whole upstream request parse. Nothing waits longer than the current
turn of the loop; closing the transport sends what is held first.

It also gives a request's line and headers ``header_timeout`` seconds to arrive (from the
connection's opening, or the end of the answer before), then closes the connection: uvicorn
has no such deadline, so a client sending its headers a byte at a time (slowloris), or blank
lines, or nothing, was held for as long as it went on. And it answers ``431`` to a request
whose line and headers (or chunked body's trailer) pass ``max_header_bytes``: httptools
keeps a header's value whole, however long, until its line ends (and copies it at every read:
quadratic), so one connection sending a header without end made the process hold it and spend
its event loop copying it.
At a shutdown's deadline (``end_upload``, from cli.py) it ends a request whose body is
still arriving with a 503 ``shutting_down``.
``serving_protocol`` makes the class ``cachegate serve`` runs with ``server.header_timeout``
and ``server.max_header_bytes``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from .errors import UPLOAD_ENDED, APIError, shutting_down

__all__ = ["CorkedHttpToolsProtocol", "serving_protocol"]


class CorkedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` writing through a ``_Corked`` transport, with a deadline and a
    size limit for each request's headers."""

    #: Seconds a request's line and headers may take to arrive; None: no deadline.
    header_timeout: float | None = 30.0
    #: Bytes a request's line and headers may hold (one read more may be held meanwhile).
    max_header_bytes: int = 64 * 1024

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_deadline: asyncio.TimerHandle | None = None
        self._in_headers = True  # (blank lines before a request count too)
        self._heads = 0  # requests whose headers were complete
        self._header_bytes = 0
        self._body_read = False  # (the read being parsed held body bytes)
        self._refuse_queued = False  # (``end_upload`` of a request queued behind an answer)
        super().connection_made(transport)
        # (flow control stays on the real transport: its pause/resume reach this protocol)
        self.transport = _Corked(transport)  # type: ignore[assignment]
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        before, self._body_read = (self._in_headers, self._heads), False
        super().data_received(data)
        # NOTE: a read counts only when it holds nothing but one request's line and headers,
        # or nothing but a chunked body's trailer (no body bytes: httptools keeps a trailer's
        # line whole as it does a header's, so one without end was held past the limit, no key
        # needed); one that ends or begins them counts 0: at most a read more than the limit
        # is held
        if self._body_read or before != (self._in_headers, self._heads):
            self._header_bytes = 0
            return
        self._header_bytes += len(data)
        if self._header_bytes > self.max_header_bytes and not self.transport.is_closing():
            self._refuse(APIError(431, "The request's headers are too large.",
                                  code="headers_too_large"))  # fmt: skip

    def end_upload(self) -> bool:
        """End the request whose body is still arriving (a shutdown's deadline passed): a 503
        ``shutting_down`` when its answer has not started, else the connection closed; whether
        there was one.

        NOTE: the deadline's ``abort_in_flight`` ends only requests waiting for a model; one
        whose client was still sending its body (slowly, or stopped half way) held the drain
        for uvicorn's whole ``timeout_graceful_shutdown``, a second signal or not. Its app task
        waiting for the rest of the body hears a disconnect.

        NOTE: ``cycle`` is the last request whose headers came: one pipelined behind an answer
        still being sent is queued (``pipeline``), its app not started. Its 503 written then
        went out inside that answer (a stream's events cut, its own end lost) and the close
        cut it: it gets its 503 once the answer before it is complete (``on_response_complete``).
        """
        cycle = self.cycle
        if cycle is None or not cycle.more_body or cycle.response_complete:
            return False
        if self.transport.is_closing():  # (already ended: a 431, a header deadline)
            return False
        cycle.scope.setdefault("state", {})[UPLOAD_ENDED] = True  # (a 503, not a 499: api.py)
        if self.pipeline:
            self._refuse_queued = True
            return True
        if cycle.response_started:  # (its head is gone: only the close is left to say it)
            self.transport.close()
        else:
            self._refuse(shutting_down())
        return True

    def on_body(self, body: bytes) -> None:
        self._body_read = True
        super().on_body(body)

    def on_message_begin(self) -> None:
        self._in_headers = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._disarm_header_deadline()
        self._in_headers, self._heads = False, self._heads + 1
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        if self._refuse_queued and not self.transport.is_closing():  # (see ``end_upload``)
            self.pipeline.clear()
            self._refuse(shutting_down())
        super().on_response_complete()
        # NOTE: kept alive, the deadline is for the next request's headers; not while a
        # request pipelined behind this answer (``cycle``: the last whose headers came) is
        # yet to be answered: armed from this answer's end, it closed the connection soon
        # after that request's answer, under the client's next request
        if not self.transport.is_closing() and self.cycle.response_complete:
            self._arm_header_deadline()

    def _arm_header_deadline(self) -> None:
        if self.header_timeout is not None and self._header_deadline is None:
            self._header_deadline = self.loop.call_later(self.header_timeout, self._headers_late)

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_late(self) -> None:
        self._header_deadline = None
        if self.cycle is not None and not self.cycle.response_complete:
            # NOTE: a pipelined request behind an answer still being sent: that answer has
            # deadlines of its own (stream_idle_timeout); this one gets another period
            self._arm_header_deadline()
        elif not self.transport.is_closing():
            self.transport.close()

    def _refuse(self, error: APIError) -> None:
        """Answer ``error`` with its OpenAI error body, and close: the request is not read."""
        body = error.json()
        head = b"content-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
        self.transport.write(STATUS_LINE[error.status] + head % len(body) + body)
        self.transport.close()


def serving_protocol(
    header_timeout: float | None, max_header_bytes: int
) -> type[CorkedHttpToolsProtocol]:
    """The protocol class for ``uvicorn.Config(http=...)``, its headers' limits set."""
    limits = {"header_timeout": header_timeout, "max_header_bytes": max_header_bytes}
    return type("CorkedHttpToolsProtocol", (CorkedHttpToolsProtocol,), limits)


class _Corked:
    """A transport whose writes in one turn of the loop go out as one write, at its end."""

    __slots__ = ("_held", "_inner", "_loop")

    def __init__(self, inner: asyncio.Transport) -> None:
        self._inner = inner
        self._loop = asyncio.get_running_loop()
        self._held: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self._held is None:
            self._held = [data]
            self._loop.call_soon(self._flush)
        else:
            self._held.append(data)

    def close(self) -> None:
        self._flush()
        self._inner.close()

    def is_closing(self) -> bool:
        return self._inner.is_closing()

    def get_write_buffer_size(self) -> int:
        held = sum(map(len, self._held)) if self._held else 0
        return held + self._inner.get_write_buffer_size()

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._inner.is_closing():
            self._inner.write(held[0] if len(held) == 1 else b"".join(held))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
