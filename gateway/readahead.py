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
    """A body read in its own task, at most ``limit`` chunks ahead of its consumer.

    Each step returns what arrived since the last one, joined; an error the read raised is
    raised to the consumer after the chunks before it. ``aclose`` stops the reader (with
    ``drain``, it first reads the rest of the body for up to a second, so httpx can pool the
    connection); it must always be called, since the reader holds the connection until then.

    NOTE: an iterator class, not an async generator: a generator left suspended after the
    last event would be closed by the event loop's finalizer hook, one task per stream.
    """

    def __init__(self, chunks: AsyncIterator[bytes], limit: int = 64) -> None:
        self._chunks = chunks
        self._queue: asyncio.Queue[object] = asyncio.Queue(limit)
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
        item = await self._queue.get()
        while isinstance(item, bytes):
            pieces.append(item)
            if self._queue.empty():
                return b"".join(pieces)
            item = self._queue.get_nowait()
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
                        while isinstance(await self._queue.get(), bytes):
                            pass
        finally:
            task.cancel()
            await asyncio.wait([task])  # (never raises: the reader's end is not ours)

    def _stop(self) -> NoReturn:
        if isinstance(self._last, BaseException):
            raise self._last
        raise StopAsyncIteration

    async def _read(self) -> None:
        try:
            async for chunk in self._chunks:
                await self._queue.put(chunk)
        except Exception as exc:  # handed to the consumer, who raises it
            await self._queue.put(exc)
            return
        await self._queue.put(_END)
