"""Run an :class:`~localmodel.engine.Engine` off the event loop.

One dedicated thread owns the model and runs a :class:`~localmodel.scheduler.Scheduler`:
requests queued between two steps are admitted at the next one and decode together with
those already running (continuous batching, up to ``config.max_batch``). Events cross back to the event loop with
``loop.call_soon_threadsafe`` into a per-request ``asyncio.Queue``, so the loop never
blocks on a forward pass.

Example (inside the gateway's lifespan)::

    async with AsyncEngine(Engine.load(config)) as engine:
        request = engine.engine.prepare(tokens, params, namespace=ns)   # 400s happen here
        async for event in engine.stream(request):                     # deltas, then Finished
            ...
        completion = await engine.complete(request)

Leaving the ``async for`` early (client disconnect) sets ``request.cancel``; the worker
stops that request at its next token and frees its KV buffers.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from functools import partial
from types import TracebackType

from localmodel.engine import Completion, Engine, Event, Finished, GenerationRequest
from localmodel.scheduler import Scheduler

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
    """An ``Engine`` served by one worker thread that batches the requests it is given."""

    def __init__(self, engine: Engine, *, name: str = "cachegate-localmodel") -> None:
        self.engine = engine
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._closed = False
        self._stepping_since: float | None = None  # (monotonic) when the running step began
        config = engine.config
        self._scheduler = Scheduler(
            engine, max_batch=config.max_batch, step_tokens=config.step_tokens
        )

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
        scheduler = self._scheduler
        return self._jobs.qsize() + len(scheduler.waiting) + len(scheduler.running)

    def stuck_for(self) -> float:
        """Seconds the step running now has taken (0: none runs, the thread waits for work).

        A hung engine (its thread alive, its step stuck) is one whose step never ends: a
        stream's keep-alive must not hide it (``LocalStream._quiet``)."""
        since = self._stepping_since
        return 0.0 if since is None else time.monotonic() - since

    def start(self) -> None:
        if not self._thread.is_alive():
            self._thread.start()

    async def aclose(self, *, stuck: float | None = None) -> None:
        """Shut down: refuse new requests, cancel the running ones, fail queued ones.

        A graceful HTTP shutdown has already let in-flight responses finish by the time
        the lifespan closes the engine, so whatever is left here has no one waiting long.
        Then the engine itself is closed (its disk tier's writer and files, if any), on
        another thread.

        NOTE: ``stuck``: once one step has run that long, the thread is not waited for (nor
        the engine, which it still uses, closed: ``running`` stays true). A hung engine's
        step never ends: the shutdown of its process (SIGTERM, Ctrl-C) waited for ever.
        """
        if self._closed:
            return
        self._closed = True
        self._jobs.put(None)  # NOTE: the worker cancels what runs when it takes this
        while self._thread.is_alive():
            if stuck is not None and self.stuck_for() >= stuck:
                logger.warning("localmodel: one step of the engine has run for %.0f s: "
                               "shutting down without it", self.stuck_for())  # fmt: skip
                return
            await asyncio.to_thread(self._thread.join, 0.1)
        # NOTE: off the loop: it waits (up to 10 s) for a disk writer stuck in I/O and removes
        # the tier's files; on the loop, nothing else ran meanwhile (the shutdown's errors to
        # the streams still open included)
        await asyncio.to_thread(self.engine.close)

    @property
    def running(self) -> bool:
        """Whether the engine's thread runs (after ``aclose``: a step that did not end)."""
        return self._thread.is_alive()

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
        scheduler = self._scheduler
        while self._take_jobs(block=not scheduler.busy):
            self._step()
        scheduler.fail_waiting(EngineClosedError("the local model engine is shut down"))
        for seq in scheduler.running:
            seq.request.cancel.set()
        while scheduler.busy:  # the cancelled ones finish "cancelled" at their next token
            self._step()

    def _step(self) -> None:
        """One scheduler step, timed (``stuck_for``); one that fails fails its requests.

        NOTE: the steps that end the running requests at shutdown too: untimed, one that hung
        there held ``aclose(stuck=)`` for ever; unguarded, one that failed killed the thread,
        and those requests' callers waited for ever (a dead thread answers no one)."""
        self._stepping_since = time.monotonic()
        try:
            self._scheduler.step()
        except Exception as exc:
            logger.exception("localmodel: a scheduler step failed; failing its requests")
            self._scheduler.fail_all(exc)
        finally:
            self._stepping_since = None

    def _take_jobs(self, *, block: bool) -> bool:
        """Move queued jobs to the scheduler (waiting for one if ``block``); False: closing."""
        while True:
            try:
                job = self._jobs.get(block=block)
            except queue.Empty:
                return True
            if job is None:
                return False
            self._scheduler.add(job.request, partial(self._send, job))
            block = False

    @staticmethod
    def _send(job: _Job, item: _Item) -> bool:
        try:
            job.emit(item)
            return True
        except RuntimeError:  # the caller's event loop is closed
            return False
