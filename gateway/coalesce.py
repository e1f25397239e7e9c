"""Coalescing: identical cacheable misses in flight at once make one model call.

The first request to miss *leads*: it registers a ``Flight`` under its exact key, calls the
model and stores the answer. An identical request that misses meanwhile *follows*: it waits
for the flight to land (at most ``max_wait`` seconds), then looks the answer up in the cache::

    flights = Flights(config)
    if flights.busy(key.exact):
        landed = await flights.follow(key.exact)    # then: cache lookup again
    flight = flights.lead(key.exact)                # None: someone else leads
    ...                                             # call the model, store
    flight.land()                                   # wake the followers (always: finally)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .config import CoalesceConfig

__all__ = ["Flight", "Flights"]

Watch = Callable[[Awaitable[Any]], Awaitable[Any]]


class Flight:
    """One model call that identical requests wait on; ``land`` wakes them (idempotent)."""

    __slots__ = ("_event", "_flights", "exact", "since")

    def __init__(self, flights: dict[str, Flight], exact: str) -> None:
        self._flights = flights
        self._event = asyncio.Event()
        self.exact = exact
        self.since = time.monotonic()

    def land(self) -> None:
        """The leader stored its answer, or failed: release the key and wake the followers."""
        if self._flights.get(self.exact) is self:
            del self._flights[self.exact]
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()


class Flights:
    """The flights in progress, by exact key."""

    def __init__(self, config: CoalesceConfig) -> None:
        self.config = config
        self._flights: dict[str, Flight] = {}

    def __len__(self) -> int:
        return len(self._flights)

    def busy(self, exact: str) -> bool:
        """Whether a live flight for ``exact`` is in progress."""
        return self._live(exact) is not None

    def lead(self, exact: str) -> Flight | None:
        """Register a flight for ``exact``; None when a live one is in progress already."""
        if self._live(exact) is not None:
            return None
        flight = self._flights[exact] = Flight(self._flights, exact)
        return flight

    async def follow(self, exact: str, watch: Watch | None = None) -> bool:
        """Wait for the flight of ``exact`` to land: False when it did not within max_wait.

        It waits once only, so a failing model is not retried one waiting request after
        another.
        """
        flight = self._live(exact)
        if flight is None:
            return True
        waiting = asyncio.wait_for(flight.wait(), self.config.max_wait)
        try:
            await (watch(waiting) if watch else waiting)
        except TimeoutError:
            return False
        return True

    def _live(self, exact: str) -> Flight | None:
        """The flight of ``exact``, unless it is abandoned.

        NOTE: a leader lands its flight when its call ends, or when its stream is closed (the
        HTTP layer closes every stream it started). A stream that was never started (its
        client left before the first byte) may never land: such a flight counts as abandoned
        once it is older than ``max_wait``, the longest any follower waits anyway.
        """
        flight = self._flights.get(exact)
        if flight is not None and time.monotonic() - flight.since > self.config.max_wait:
            flight.land()
            return None
        return flight
