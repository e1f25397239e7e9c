"""Coalescing: identical cacheable misses in flight at once make one model call.

The first request to miss *leads*: it registers a ``Flight`` under its exact key, calls the
model and stores the answer. An identical request that misses meanwhile *follows*: it waits
for the flight to land (at most ``max_wait`` seconds), then looks the answer up in the cache::

    flights = Flights(config)
    if flights.busy(key.exact):  # (body: the request's, as it is sent to the model)
        followed = await flights.follow(key.exact, body)  # "landed": look it up again;
                                                          # "lead": it leads followed.flight
    flight = flights.lead(key.exact, body)  # None: someone else leads
    ...                                       # call the model, store
    flight.land()                             # answered: wake the followers (finally)
    flight.fail(error)                        # no answer: wake them, one leads next

When the leader gets no answer (an upstream error, a timeout, its client gone), the followers
must not all call the model at once (a herd, when the model is already failing): one of them
leads the next flight and the others wait on for it, within their own ``max_wait``. An error
that the others would get too is theirs at once instead: a 4xx about the request itself, or
any error of that second flight (the model failed twice in a row: nobody else tries now). A
4xx is theirs only when they sent the same body: the key leaves out fields that do not change
an answer (``stream``, ``user``, ``metadata``, ...), but the upstream may refuse a request for
one of them (a ``metadata`` value too long, a model the account may not stream) and answer
another that differs in it.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .config import CoalesceConfig
from .errors import TRANSIENT_4XX, APIError

__all__ = ["Flight", "Flights", "Followed"]

Watch = Callable[[Awaitable[Any]], Awaitable[Any]]


class Flight:
    """One model call that identical requests wait on; ``land`` or ``fail`` wakes them (once).

    ``retry``: led by a follower of a flight that failed (its own failure is shared);
    ``body``: its leader's request body (an error about the request is shared only with
    requests that sent the same, see :meth:`shared`).
    """

    __slots__ = (
        "_event", "_flights", "_on_land", "body", "error", "exact", "failed", "retry", "since"
    )  # fmt: skip

    def __init__(
        self,
        flights: dict[str, Flight],
        exact: str,
        body: Mapping[str, Any],
        *,
        retry: bool = False,
        on_land: Callable[[str], None] | None = None,
    ) -> None:
        self._flights = flights
        self._on_land = on_land  # (told of a landing with an answer: Flights.landed_since)
        self._event = asyncio.Event()
        self.exact = exact
        self.body = body
        self.since = time.monotonic()
        self.retry = retry
        self.failed = False  # the leader got no answer
        self.error: APIError | None = None  # what the followers get instead of an answer

    def land(self) -> None:
        """The leader has its answer (stored, or not storable): release the key and wake the
        followers, to look it up."""
        if self._flights.get(self.exact) is self:
            del self._flights[self.exact]
        if not self._event.is_set() and not self.failed and self._on_land is not None:
            self._on_land(self.exact)
        self._event.set()

    def fail(self, error: BaseException | None) -> None:
        """The leader got no answer (``error``: why, when known): wake the followers, to get
        ``error`` when it would fail them too (see :func:`_shared`), else to lead again."""
        if not self._event.is_set():
            self.failed = True
            self.error = _shared(error, retried=self.retry)
        self.land()

    async def wait(self) -> None:
        await self._event.wait()

    def shared(self, body: Mapping[str, Any]) -> APIError | None:
        """The error a follower that sent ``body`` gets instead of calling the model.

        NOTE: fields outside the cache key (``stream``, ``user``, ``metadata``, ...) still go
        upstream: a request may be refused for one of them (400: the account may not stream
        this model, a ``metadata`` value too long) where one that differs in it is answered,
        so an error about the request is only for requests that sent the same body.
        """
        error = self.error
        if error is not None and _about_request(error) and body != self.body:
            return None
        return error


@dataclass(frozen=True, slots=True)
class Followed:
    """How a follower's wait ended: ``landed`` (look its answer up in the cache), ``late``
    (``max_wait`` passed: call the model alone) or ``lead`` (the leader failed: this request
    leads ``flight``, the next one)."""

    kind: Literal["landed", "late", "lead"]
    flight: Flight | None = None


class Flights:
    """The flights in progress, by exact key."""

    def __init__(self, config: CoalesceConfig) -> None:
        self.config = config
        self._flights: dict[str, Flight] = {}
        #: Flights landed with an answer, counted; the count at each key's last landing (the
        #: most recent ``_LANDED_MAX`` keys: a lookup takes milliseconds, not thousands of them)
        self._landings = 0
        self._landed: collections.OrderedDict[str, int] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._flights)

    def busy(self, exact: str) -> bool:
        """Whether a live flight for ``exact`` is in progress."""
        return self._live(exact) is not None

    def mark(self) -> int:
        """Where the landings stand now: take it before a lookup, for :meth:`landed_since`."""
        return self._landings

    def landed_since(self, exact: str, mark: int) -> bool:
        """Whether a flight of ``exact`` landed with an answer after ``mark``.

        NOTE: an identical request whose lookup began before the answer was stored and ended
        after its flight landed saw neither: it led a second model call (found by a review:
        eight identical requests at once made two calls in five bursts of eight)."""
        return self._landed.get(exact, 0) > mark

    def _landed_now(self, exact: str) -> None:
        self._landings += 1
        self._landed[exact] = self._landings
        self._landed.move_to_end(exact)
        if len(self._landed) > _LANDED_MAX:
            self._landed.popitem(last=False)

    def lead(self, exact: str, body: Mapping[str, Any], *, retry: bool = False) -> Flight | None:
        """Register a flight for ``exact`` (``body``: its leader's request); None when a live
        one is in progress already."""
        if self._live(exact) is not None:
            return None
        flight = self._flights[exact] = Flight(
            self._flights, exact, body, retry=retry, on_land=self._landed_now
        )
        return flight

    async def follow(
        self, exact: str, body: Mapping[str, Any], watch: Watch | None = None
    ) -> Followed:
        """Wait for the flight of ``exact`` to land, for ``max_wait`` seconds in all.

        When its leader fails, the first follower to wake leads the next flight and the
        others wait for that one; raises the leader's error when it is shared (``Flight.fail``).

        NOTE: the first to wake takes the lead before it awaits anything, so exactly one
        follower calls the model again, however many were waiting.
        """
        deadline = time.monotonic() + self.config.max_wait
        while (flight := self._live(exact)) is not None:
            waiting = asyncio.wait_for(flight.wait(), deadline - time.monotonic())
            try:
                await (watch(waiting) if watch else waiting)
            except TimeoutError:
                return Followed("late")
            if not flight.failed:
                return Followed("landed")
            if (error := flight.shared(body)) is not None:
                raise _copy(error)
            successor = self.lead(exact, body, retry=True)
            if successor is not None:
                return Followed("lead", successor)
        return Followed("landed")

    def _live(self, exact: str) -> Flight | None:
        """The flight of ``exact``, unless it is abandoned.

        NOTE: a leader lands its flight when its call ends, or when its stream is closed (the
        HTTP layer closes every stream it started). A stream that was never started (its
        client left before the first byte) may never land: such a flight counts as abandoned
        once it is older than ``max_wait``, and the next request leads a flight of its own.
        Its followers are not woken: each waits on for its own ``max_wait``, counted from
        when it began (it may have joined a moment ago), and the leader may only be slow.
        """
        flight = self._flights.get(exact)
        if flight is not None and time.monotonic() - flight.since > self.config.max_wait:
            del self._flights[exact]
            return None
        return flight


#: The keys whose last landing ``Flights`` remembers.
_LANDED_MAX = 4096


def _shared(error: BaseException | None, *, retried: bool) -> APIError | None:
    """The error a failed flight's followers get instead of calling the model, or None.

    A 4xx about the request itself (400, 401, 404, 413, 422, ...) would fail each identical
    request the same way: theirs at once. A flight that was itself a follower's retry shares
    any error: the model failed twice in a row, and the followers left should not each try
    again (one after another, or all at once). Not an error of the request (its client left,
    the gateway is shutting down: no ``APIError``): another follower leads.
    """
    if not isinstance(error, APIError):
        return None
    if retried or _about_request(error):
        return error
    return None


def _about_request(error: APIError) -> bool:
    """A 4xx about the request itself (not one that another try may get answered)."""
    return 400 <= error.status < 500 and error.status not in TRANSIENT_4XX


def _copy(error: APIError) -> APIError:
    """A follower's own copy of the leader's error (a handler may change its ``param``),
    marked as an identical request's."""
    headers = {**error.headers, "x-cache-coalesced": "true"}
    return APIError(error.status, error.message, type=error.type, param=error.param,
                    code=error.code, headers=headers)  # fmt: skip
