"""Admission by event-loop lag: under CPU overload, new requests wait their turn at the door.

One Python process answers every request on one event loop. When more requests arrive than
its CPU can take, every callback runs late, and a request pays that lateness at each of its
waits: a cache hit has a few, a miss that goes upstream has a dozen or more (connect, send,
headers, body, store...). Measured with wrk at 200 connections (bench/overload.py): the loop
ran 50-100 ms late, hits took 0.5 s and misses 4 s at p99, most of it inside the gateway.

``server.admission_max_lag_ms`` bounds that lateness instead. A probe callback measures how
late the loop runs (every ``TICK`` s while requests come); while it runs later than the bound,
new API requests are let in at a rate that backs off (x ``DECREASE`` a tick) and creeps up
again (+ ``INCREASE`` a tick) while the loop is on time and requests wait, and the others wait
in FIFO order. Requests already in flight then finish at an on-time loop; the queueing moves
to the door, where every request waits the same. Nothing is refused: a request waits as long
as it takes (its client's timeout applies), and a waiting client that goes away is dropped.

NOTE: only lateness of a busy loop counts: while its thread used under ``BUSY`` of a core
(measured with ``time.thread_time`` between probes), the loop is late because something else
has the CPU or the GIL (a local model's decode threads, another process): fewer requests would
not make it punctual, and holding them at the door would only add their wait.

NOTE: a rate, not a concurrency limit: a long stream or a slow upstream call in flight holds
nothing, so an I/O-bound gateway (the usual LLM traffic) is never throttled by it. Only API
requests are gated; /readyz, /metrics, /admin and the dashboard always answer at once.
With the loop on time and nobody waiting for ``RELEASE_AFTER`` s, the gate opens fully.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["WAIT_BUCKETS", "Admission", "AdmissionStats"]

TICK = 0.01  # seconds between two lag probes (while requests come)
DECREASE = 0.9  # rate x this, each tick the loop runs late
INCREASE = 0.02  # rate x (1 + this) + 1 req/s, each on-time tick while requests wait
FLOOR = 5.0  # requests/s let in however late the loop runs (nothing starves)
BUSY = 0.5  # the loop's thread must use this share of a core for its lateness to count
RELEASE_AFTER = 1.0  # on time with nobody waiting this long: no limit
IDLE_AFTER = 5.0  # the probe stops this long after the last request (lag then reads 0)
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True, slots=True)
class AdmissionStats:
    loop_lag_seconds: float  # how late the last probe ran
    loop_busy: float  # the loop thread's CPU time over wall time, smoothed (0..1)
    rate: float  # requests/s let in now (0: no limit)
    queued: int  # requests waiting at the door now
    admitted: int  # requests let in so far
    waited: int  # of them, those that had to wait
    wait_seconds: float  # their total wait
    wait_buckets: tuple[int, ...]  # waits <= each of WAIT_BUCKETS (cumulative counts)


class Admission:
    """The door of one event loop (built at startup; each API request asks ``door()``)."""

    def __init__(self, max_lag: float, cpu_clock: Callable[[], float] = time.thread_time) -> None:
        """``cpu_clock``: the CPU time of the calling thread (a test may count wall time, as
        if the loop's thread were always busy)."""
        self.max_lag = max_lag
        self.cpu_clock = cpu_clock
        self.lag = 0.0
        self.rate = 0.0  # 0: no limit
        self._tokens = 0.0
        #: waiting requests' doors, with when each came
        self._queue: collections.deque[tuple[asyncio.Future[None], float]] = collections.deque()
        self._admitted_at_tick = 0  # ``_admitted`` at the last tick
        self._recent_rate = 0.0  # admissions/s, smoothed over ~10 ticks
        self._last_request = 0.0
        self._last_late = 0.0  # last time the loop ran late or someone waited
        self._probing = False
        self.busy = 0.0  # the loop thread's CPU share, smoothed (see _probe)
        self._cpu_at: tuple[float, float] | None = None  # its CPU time and the time, last probe
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop it watches (first request's)
        self._admitted = self._waited = 0
        self._wait_seconds = 0.0
        self._wait_counts = [0] * len(WAIT_BUCKETS)

    def door(self) -> asyncio.Future[None] | None:
        """None: this request may start now; else a future set when its turn comes (cancel it
        when its client goes away: the turn passes to the next one)."""
        now = time.monotonic()
        self._last_request = now
        self.loop = loop = asyncio.get_running_loop()
        if not self._probing:
            self._probing = True
            loop.call_later(TICK, self._probe, now + TICK)
        if not self._queue and self._take():
            return None
        door: asyncio.Future[None] = loop.create_future()
        self._queue.append((door, now))
        return door

    def limiting(self) -> bool:
        """Whether requests wait at the door now (the gateway's CPU cannot keep up)."""
        return bool(self._queue)

    def stats(self) -> AdmissionStats:
        return AdmissionStats(
            self.lag,
            round(self.busy, 3),
            self.rate,
            sum(1 for door, _ in self._queue if not door.done()),
            self._admitted,
            self._waited,
            self._wait_seconds,
            tuple(itertools.accumulate(self._wait_counts)),
        )

    # -- the controller (one tick every TICK s while requests come) -----------------------

    def tick(self, lag: float, now: float, busy: float = 1.0) -> None:
        """Adjust the rate to the loop's lateness ``lag`` (s) and how busy its thread was
        (``busy``: its CPU time over wall time, smoothed), then let waiting requests in."""
        self.lag, self.busy = lag, busy
        recent = (self._admitted - self._admitted_at_tick) / TICK
        self._admitted_at_tick = self._admitted
        self._recent_rate = 0.9 * self._recent_rate + 0.1 * recent
        if lag > self.max_lag and busy >= BUSY:
            start = self.rate or max(self._recent_rate, FLOOR)
            self.rate = max(FLOOR, start * DECREASE)
            self._last_late = now
        elif self.rate and self._queue:
            self.rate = self.rate * (1 + INCREASE) + 1
            self._last_late = now
        elif self.rate and now - self._last_late > RELEASE_AFTER:
            self.rate = 0.0  # on time, nobody waiting: open
        if self.rate:
            self._tokens = min(self._tokens + self.rate * TICK, max(1.0, 2 * self.rate * TICK))
        self._release()

    def _take(self) -> bool:
        """Let one request in if the rate allows (counted in ``_admitted``)."""
        if self.rate:
            if self._tokens < 1:
                return False
            self._tokens -= 1
        self._admitted += 1
        return True

    def _release(self) -> None:
        now = time.monotonic()
        while self._queue:
            door, came = self._queue[0]
            if door.done():  # its client went away
                self._queue.popleft()
                continue
            if not self._take():
                return
            self._queue.popleft()
            self._waited += 1
            self._wait_seconds += now - came
            slot = bisect.bisect_left(WAIT_BUCKETS, now - came)
            if slot < len(WAIT_BUCKETS):
                self._wait_counts[slot] += 1
            door.set_result(None)

    def _probe(self, due: float) -> None:
        now, cpu = time.monotonic(), self.cpu_clock()  # (this runs in the loop's thread)
        if self._cpu_at is not None:
            share = (cpu - self._cpu_at[0]) / max(now - self._cpu_at[1], 1e-6)
            self.busy = 0.8 * self.busy + 0.2 * min(share, 1.0)
        self._cpu_at = (cpu, now)
        self.tick(max(0.0, now - due), now, self.busy)
        if now - self._last_request > IDLE_AFTER and not self._queue:
            self._probing, self.lag, self._cpu_at = False, 0.0, None
            return
        assert self.loop is not None
        self.loop.call_later(TICK, self._probe, now + TICK)
