"""Reading a streamed response body ahead, so that what arrived together leaves together.

httpx yields a chunked body one HTTP chunk at a time, and an SSE upstream sends one event per
chunk, so a single network read that brought a whole answer still comes out of
``aiter_bytes()`` as many pieces, and relaying them one by one costs a write to the client
per event. ``ReadAhead`` reads the body in its own task and hands the consumer everything
received since it last asked, joined::

    body = ReadAhead(response.aiter_bytes())
    try:
        async for data in body:  # b"data: {...}\\n\\ndata: {...}\\n\\n", all that came
            ...
    finally:
        await body.aclose(drain=finished)

NOTE: each write to a client that is waiting wakes it, and on a loaded machine the writer then
waits for the CPU again: a stream relayed event by event paid that once per event (9 writes
for a 6-event answer that arrived in one read, now 3). The ~15 ms that pass-through streams
once added at concurrency 1 turned out to be that run's machine load (the pre-restructure
gateway showed it too); on a quiet machine streams add about what JSON adds
(docs/benchmarks.md). Nothing is held back to make a batch: the reader drains what httpx
has already received and then waits for the network, and only then does the consumer run,
so a batch is exactly what was there, and a lone event still goes out at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import NoReturn

__all__ = ["ReadAhead"]

_END = object()  # the body ended


class ReadAhead:
    """A body read in its own task, at most ``limit`` bytes (and the rest of one read) ahead
    of its consumer, which takes under twice ``limit`` a step (a longer read, in pieces).

    Each step returns what arrived since the last one, joined; an error the read raised is
    raised to the consumer after the chunks before it. ``aclose`` stops the reader (with
    ``drain``, it first reads the rest of the body for up to a second, so httpx can pool the
    connection); it must always be called, since the reader holds the connection until then.

    NOTE: an iterator class, not an async generator: a generator left suspended after the
    last event would be closed by the event loop's finalizer hook, one task per stream.

    NOTE: bounded in bytes, not in chunks: a step hands over all that is queued, and its
    events are relayed without the loop turning (a client's write is sent at the turn's end:
    gateway.corked), so what is queued is what one turn of the loop parses and holds. 64
    chunks of up to a megabyte each (gateway.http11 reads that far ahead) let a fast stream
    whose client stopped reading hold the loop for seconds at a time, and 60 MB.
    """

    def __init__(self, chunks: AsyncIterator[bytes], limit: int = 64 * 1024) -> None:
        self._chunks = chunks
        self._limit = limit
        self._queue: asyncio.Queue[object] = asyncio.Queue()  # (bounded by ``_room``)
        self._queued = 0  # bytes in the queue
        self._room = asyncio.Event()  # set while the queue holds less than ``limit`` bytes
        self._room.set()
        self._task: asyncio.Task[None] | None = None
        self._last: object = None  # _END or the read's error, once the consumer took it

    def __aiter__(self) -> ReadAhead:
        return self

    async def __anext__(self) -> bytes:
        if self._task is None:
            self._task = asyncio.create_task(self._read(), name="read-ahead")
        if self._last is not None:
            self._stop()
        pieces: list[bytes] = []
        item = self._took(await self._queue.get())
        while isinstance(item, bytes):
            pieces.append(item)
            if self._queue.empty():
                return b"".join(pieces)
            item = self._took(self._queue.get_nowait())
        self._last = item  # the end, or an error: after the pieces that came before it
        if not pieces:
            self._stop()
        return b"".join(pieces)

    async def aclose(self, *, drain: bool = False) -> None:
        task = self._task
        if task is None:
            return
        try:
            if drain and self._last is None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        while isinstance(self._took(await self._queue.get()), bytes):
                            pass
        finally:
            task.cancel()
            await asyncio.wait([task])  # (never raises: the reader's end is not ours)

    def _took(self, item: object) -> object:
        """``item``, taken from the queue: its bytes make room for the reader."""
        if isinstance(item, bytes):
            self._queued -= len(item)
            if self._queued < self._limit:
                self._room.set()
        return item

    def _stop(self) -> NoReturn:
        if isinstance(self._last, BaseException):
            raise self._last
        raise StopAsyncIteration

    async def _read(self) -> None:
        try:
            async for chunk in self._chunks:
                for start in range(0, len(chunk), self._limit):
                    piece = chunk[start : start + self._limit]
                    self._queue.put_nowait(piece)
                    self._queued += len(piece)
                    if self._queued >= self._limit:  # (no more until the consumer takes it)
                        self._room.clear()
                        await self._room.wait()
        except Exception as exc:  # handed to the consumer, who raises it
            self._queue.put_nowait(exc)
            return
        self._queue.put_nowait(_END)
