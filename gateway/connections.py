"""Client connections: the one place that handles disconnects, stuck clients and shutdown.

Every request the data port answers passes through here:

* ``Connections.guard(request)`` wraps each wait for a model: a client that disconnects
  cancels the wait (``ClientDisconnected``), and the shutdown deadline ends it with a 503
  ``shutting_down`` error instead of a cut connection;
* ``Connections.send(reply, ...)`` sends a stream: it is watched for a client that stopped
  reading (the watchdog ends it), the shutdown deadline ends it with an error event, and it
  is always closed at the end, which frees the model call or upstream connection behind it;
* ``closing(app)`` closes a stream that a failure kept from being sent (``hold``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Protocol, TypeVar

from .canonical import ByteStream, Reply
from .errors import APIError, shutting_down

__all__ = ["SHUTTING_DOWN", "ClientDisconnected", "Connections", "StreamWatch", "closing", "hold"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The cancel message of requests aborted at the shutdown deadline.
SHUTTING_DOWN = "cachegate: shutdown deadline"


class ClientDisconnected(Exception):
    """The client closed the connection before the answer was ready.

    ``reply``: what its model call did all the same, for the ledger (a non-streamed call the
    model ran, ``pipeline._abandoned``); None: no model call to book.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.reply: Reply | None = None


class Receiver(Protocol):
    """What a disconnect is heard from (a litestar ``Request``)."""

    receive: Callable[..., Awaitable[Any]]


class StreamWatch:
    """A stream on its way to a client: since when it waits for the client (``since``)."""

    __slots__ = ("events", "since", "stuck", "task")

    def __init__(self) -> None:
        self.since: float | None = None  # loop time it began waiting for the client; None: not
        self.stuck = False
        self.task: asyncio.Task[Any] | None = None  # the task sending it
        self.events: Any = None  # the async generator it is sent from

    async def end(self) -> None:
        """Close the stream (its model call ends) and stop the task that sends it.

        NOTE: the client's socket itself stays open until the client goes (uvicorn closes a
        connection only once its buffered bytes are sent; it logs "ASGI callable returned
        without completing response"): what is freed is the model call and the upstream
        connection behind the stream.
        """
        self.stuck = True
        if self.events is not None:
            try:
                await self.events.aclose()
            except RuntimeError:  # it is running: its client took an event after all
                self.stuck = False
                return
        if self.task is not None:
            self.task.cancel()


class Connections:
    """The requests being answered and the streams being sent, for the watchdog and shutdown."""

    def __init__(self, stream_idle_timeout: float | None = None) -> None:
        self._idle_timeout = stream_idle_timeout
        #: Tasks answering requests (waiting for a model, or relaying its stream).
        self.in_flight: set[asyncio.Task[Any]] = set()
        #: Set by ``abort_in_flight``: a shutdown deadline passed.
        self.aborting = False
        #: Streams being sent to clients (see ``StreamWatch``); the watchdog ends stuck ones.
        self.streams: set[StreamWatch] = set()
        self._watchdog: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._idle_timeout is not None:
            self._watchdog = asyncio.create_task(
                self._end_stuck_streams(self._idle_timeout), name="watchdog"
            )

    def stop(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()

    def abort_in_flight(self) -> int:
        """Cancel every request still waiting for a model (the shutdown deadline passed).

        Each gets an error instead of a cut connection: a 503 ``shutting_down`` body, or an
        error event on a stream that has started.
        """
        self.aborting = True
        tasks = [t for t in self.in_flight if not t.done()]
        for task in tasks:
            task.cancel(msg=SHUTTING_DOWN)
        return len(tasks)

    @contextlib.contextmanager
    def abortable(self, *, enabled: bool = True) -> Iterator[None]:
        """Let the shutdown deadline stop this task's wait with a 503 ``shutting_down`` error
        (a wait that begins after the deadline, at once).

        NOTE: ``abort_in_flight`` cancels the task; the cancellation is turned into an
        ``APIError`` here (and the task uncancelled), so the client gets an error body or
        event rather than a connection cut by uvicorn's own deadline, which comes later.
        """
        task = asyncio.current_task()
        if not enabled or task is None:
            yield
            return
        if self.aborting:
            # NOTE: a request that starts after the deadline (pipelined behind an answer the
            # deadline ended) is not among those it cancelled: it waited for its model until
            # uvicorn's own deadline cut it, a 500
            raise shutting_down()
        self.in_flight.add(task)
        try:
            yield
        except asyncio.CancelledError as exc:
            if not (self.aborting and exc.args == (SHUTTING_DOWN,)):
                raise
            task.uncancel()
            raise shutting_down() from None
        finally:
            self.in_flight.discard(task)

    def guard(self, client: Receiver) -> Callable[[Awaitable[T]], Awaitable[T]]:
        """A ``watch`` for the tier walk: each wait ends when ``client`` disconnects."""
        return lambda awaitable: until_disconnect(client, awaitable)

    async def send(
        self,
        reply: Reply,
        watch: StreamWatch,
        error_event: Callable[[APIError, int], bytes],
        on_first: Callable[[], None],
        on_error: Callable[[str], None],
    ) -> AsyncIterator[bytes]:
        """``reply.stream`` to the client: ``on_first`` at its first byte, ``on_error`` with
        the code of how it ended if not normally; closed whatever happens."""
        assert reply.stream is not None
        stream, outcome = reply.stream, reply.outcome
        first, ended, delivered = True, False, False
        loop = asyncio.get_running_loop()
        watch.task = asyncio.current_task()
        self.streams.add(watch)
        try:
            try:
                with self.abortable(enabled=outcome is not None):  # a model's stream
                    async for piece in stream:
                        if first:
                            first = False
                            on_first()
                        watch.since = loop.time()
                        yield piece
                        watch.since = None
                        # (the client took the answer's last event: what follows is cleanup)
                        delivered = outcome is not None and outcome.finished
            except APIError as exc:  # the shutdown deadline passed while it streamed
                assert outcome is not None
                if not outcome.finished:  # (else only cleanup after the end was cut short)
                    outcome.error = exc.code
                    yield error_event(exc, outcome.sequence)
            ended = True
        finally:
            self.streams.discard(watch)
            error = outcome.error if outcome is not None else None
            # NOTE: not a client that left once it had taken its answer's last event, while
            # the relay read the end of the upstream's body (a worker's): its answer was whole
            # (one stuck in that last event's write is still client_stuck)
            if error is None and not ended and not delivered:
                error = "client_stuck" if watch.stuck else "client_disconnected"
            if error is not None:
                on_error(error)
            await stream.aclose()

    async def _end_stuck_streams(self, timeout: float) -> None:
        """End streams whose client has taken nothing for ``timeout`` s (it stopped reading).

        NOTE: such a stream waits in the server's write (the client's window is full), holding
        its model call or upstream connection as long as the client keeps the socket open.
        """
        loop = asyncio.get_running_loop()

        def stuck(watch: StreamWatch) -> bool:
            return watch.since is not None and loop.time() - watch.since > timeout

        while True:
            await asyncio.sleep(min(timeout / 4, 5.0))
            for watch in [w for w in self.streams if stuck(w)]:
                if not stuck(watch):  # its client took an event while others were ended
                    continue
                log.warning("a client took no stream event for %.0fs: ending its stream", timeout)
                try:
                    await watch.end()
                except Exception:  # one stream's cleanup must not stop the watchdog
                    log.exception("ending a stuck stream failed")


def hold(state: dict[str, Any], stream: ByteStream | None) -> None:
    """Leave ``stream`` (a request's answer, not yet sent) to ``closing``, should it never be
    sent: ``state`` is the request's ASGI ``scope["state"]``."""
    if stream is not None:
        state[_HELD] = stream


def closing(app: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """An ASGI ``app`` that closes the stream its request ``hold`` s when it is done, in every
    path (its close is a no-op once ``Connections.send`` has closed it).

    NOTE: the stream holds its model call: an upstream connection and its turn among
    ``max_connections``. A failure between the tier walk's answer and the stream's first
    event (a relayed header the response could not encode: see backend._sendable) left it
    open for good; after ``max_connections`` of them, every request to the model was a 503
    ``upstream_busy`` until a restart.
    """

    async def closing_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        finally:
            stream = scope.get("state", {}).pop(_HELD, None)
            if stream is not None:
                await stream.aclose()

    return closing_app


#: Where a request's scope holds its unsent stream (see ``hold``).
_HELD = "cachegate.stream"


async def until_disconnect(client: Receiver, awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` unless the client disconnects first; then cancel it.

    NOTE: the body has been read, so the next ASGI ``receive`` returns only when the client goes
    away (``http.disconnect``); that is what cancels an upstream call nobody waits for.
    """
    work = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(_wait_disconnect(client))
    try:
        done, _ = await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        _abandon(work)
        raise
    finally:
        watcher.cancel()
    if work in done:
        return work.result()
    _abandon(work)
    raise ClientDisconnected


def _abandon(work: asyncio.Future[Any]) -> None:
    """Cancel ``work``; what it made all the same (an opened stream: an upstream connection
    and its turn among ``max_connections``) is closed.

    NOTE: the shutdown deadline may cancel the wait after ``work`` finished but before the
    wait saw it: the stream it had opened was never closed.
    """
    work.cancel()
    work.add_done_callback(_close_made)


def _close_made(work: asyncio.Future[Any]) -> None:
    if work.cancelled() or work.exception() is not None:
        return
    close = getattr(work.result(), "aclose", None)
    if close is not None:
        task = asyncio.ensure_future(close())
        _CLOSING.add(task)  # NOTE: the loop keeps only weak references to tasks
        task.add_done_callback(_CLOSING.discard)


#: Closes of what abandoned work made (see ``_abandon``), until they are done.
_CLOSING: set[asyncio.Future[Any]] = set()


async def _wait_disconnect(client: Receiver) -> None:
    while True:
        message = await client.receive()
        if message["type"] == "http.disconnect":
            return
