"""Run an :class:`~localmodel.engine.Engine` off the event loop.

One dedicated thread owns the model and serves queued requests one after another (a
batch of one; batching comes later). Events cross back to the event loop with
``loop.call_soon_threadsafe`` into a per-request ``asyncio.Queue``, so the loop never
blocks on a forward pass.

Example (inside the gateway's lifespan)::

    async with AsyncEngine(Engine.load(config)) as engine:
        request = engine.engine.prepare(tokens, params, namespace=ns)   # 400s happen here
        async for event in engine.stream(request):                     # deltas, then Finished
            ...
        completion = await engine.complete(request)

Leaving the ``async for`` early (client disconnect) sets ``request.cancel``; the worker
stops that request between two tokens and moves on to the next.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from types import TracebackType

from localmodel.engine import Completion, Engine, Event, Finished, GenerationRequest

__all__ = ["AsyncEngine", "EngineClosedError"]

logger = logging.getLogger(__name__)

_Item = Event | BaseException


class EngineClosedError(RuntimeError):
    """The engine was closed before or while serving the request (HTTP 503)."""


@dataclass(frozen=True)
class _Job:
    request: GenerationRequest
    emit: Callable[[_Item], None]  # thread-safe: schedules a put on the caller's loop


class AsyncEngine:
    """An ``Engine`` served by one worker thread through a FIFO queue."""

    def __init__(self, engine: Engine, *, name: str = "cachegate-localmodel") -> None:
        self.engine = engine
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._closed = False
        self._current: _Job | None = None

    async def __aenter__(self) -> AsyncEngine:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def pending(self) -> int:
        """Requests queued or running (approximate: read without a lock, for metrics)."""
        return self._jobs.qsize() + int(self._current is not None)

    def start(self) -> None:
        if not self._thread.is_alive():
            self._thread.start()

    async def aclose(self) -> None:
        """Shut down: refuse new requests, cancel the running one, fail queued ones.

        A graceful HTTP shutdown has already let in-flight responses finish by the time
        the lifespan closes the engine, so whatever is left here has no one waiting long.
        Then the engine itself is closed (its disk tier's writer and files, if any).
        """
        if self._closed:
            return
        self._closed = True
        current = self._current
        if current is not None:
            current.request.cancel.set()
        self._jobs.put(None)
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join)
        self.engine.close()

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[Event, None]:
        """Events of ``request`` as the worker produces them; ends after ``Finished``.

        Exceptions raised by the engine are re-raised here. Closing the iterator early
        cancels the request.
        """
        if self._closed:
            raise EngineClosedError("the local model engine is shut down")
        self.start()
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[_Item] = asyncio.Queue()

        def emit(item: _Item) -> None:  # runs on the worker thread
            loop.call_soon_threadsafe(events.put_nowait, item)

        self._jobs.put(_Job(request, emit))
        try:
            while True:
                item = await events.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, Finished):
                    return
        finally:
            request.cancel.set()  # NOTE: a no-op after Finished; stops the worker otherwise

    async def complete(self, request: GenerationRequest) -> Completion:
        """Run ``request`` to the end on the worker and return its result."""
        async for event in self.stream(request):
            if isinstance(event, Finished):
                return event.completion
        raise AssertionError("stream ended without a Finished event")

    # ── worker thread ─────────────────────────────────────────────────────────────────

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            if self._closed:  # queued before close(): fail fast, callers must not hang
                self._send(job, EngineClosedError("the local model engine is shut down"))
                continue
            self._current = job
            try:
                self._run(job)
            finally:
                self._current = None

    def _run(self, job: _Job) -> None:
        if job.request.cancel.is_set():
            return  # the client left while the request was queued
        try:
            for event in self.engine.generate(job.request):
                if not self._send(job, event):
                    job.request.cancel.set()
        except Exception as exc:
            logger.exception("localmodel: request failed")
            self._send(job, exc)

    @staticmethod
    def _send(job: _Job, item: _Item) -> bool:
        try:
            job.emit(item)
            return True
        except RuntimeError:  # the caller's event loop is closed
            return False
