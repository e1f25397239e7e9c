"""uvicorn's httptools protocol, with the writes of one event-loop turn sent in one send.

uvicorn writes a response's status line and headers, then each body part (and a chunked
body's terminator), each as its own ``transport.write``: one socket send apiece, each waking
the client. ``CorkedHttpToolsProtocol`` (``uvicorn.Config(http=...)``, see cli.py) holds what
is written until the task that wrote it yields to the loop, then sends it in one write: a JSON
answer leaves as one send instead of two, a stream's headers leave with its first events.

NOTE: measured with bench/overhead.py (c=1): the two sends of a JSON answer cost the gateway
about as much CPU as its whole upstream request parse. Nothing waits longer than the current
turn of the loop; closing the transport sends what is held first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["CorkedHttpToolsProtocol"]


class CorkedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` writing through a ``_Corked`` transport."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # (flow control stays on the real transport: its pause/resume reach this protocol)
        self.transport = _Corked(transport)  # type: ignore[assignment]


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
