"""Admission by event-loop lag (gateway.admission, ``server.admission_max_lag_ms``).

The lag is real in every test here: a callback that blocks the event loop (``time.sleep``)
makes the probe run late, as a saturated CPU does. Through HTTP with the SDK, under a late
loop: tests/chaos/test_overload.py.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gateway.admission import RELEASE_AFTER, Admission


def blocking(
    loop: asyncio.AbstractEventLoop, seconds: float, each: float = 0.03, spin: bool = True
) -> None:
    """From now on, for ``seconds``, block ``loop`` for ``each`` s at a time (any thread):
    spinning on the CPU (a loop saturated by its own work) or asleep (``spin=False``: a loop
    whose thread does not get the CPU, as under a local model's decode threads)."""
    stop = time.monotonic() + seconds

    def block() -> None:
        until = time.monotonic() + each
        if spin:
            while time.monotonic() < until:
                pass
        else:
            time.sleep(each)
        if time.monotonic() < stop:
            loop.call_later(0.002, block)

    loop.call_soon_threadsafe(block)


def test_a_late_loop_queues_new_requests_in_order_and_the_door_opens_again() -> None:
    async def scenario() -> None:
        # (its thread counts as busy whatever CPU share a loaded test machine gives the spin)
        admission = Admission(max_lag=0.005, cpu_clock=time.monotonic)
        loop = asyncio.get_running_loop()
        assert admission.door() is None  # on time: straight in (and the probe starts)
        blocking(loop, 1.0)
        await asyncio.sleep(0.3)  # several late probes
        assert admission.rate > 0 and admission.lag > 0.005  # (its busy thread was late)

        doors = [admission.door() for _ in range(10)]
        waiting = [door for door in doors if door is not None]
        assert len(waiting) >= 9  # (one turn may have been free)
        assert admission.limiting()
        order: list[int] = []
        for i, door in enumerate(waiting):
            door.add_done_callback(lambda d, i=i: order.append(i) if not d.cancelled() else None)
        waiting[3].cancel()  # its client went away: the turn goes to the next one
        await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 20)
        assert order == [i for i in range(len(waiting)) if i != 3]  # first come, first in
        stats = admission.stats()
        assert stats.waited == len(waiting) - 1 and stats.wait_seconds > 0
        assert stats.queued == 0 and not admission.limiting()

        # NOTE: the blocking is over: from here a late probe is the machine's load (other
        # tests' processes on a busy CI host), which the thread's own CPU clock tells apart;
        # with the monotonic clock any probe 5 ms late kept the door armed (a flaky failure)
        at, offset = time.thread_time(), time.monotonic()  # (continuous: no negative share)
        admission.cpu_clock = lambda: offset + time.thread_time() - at
        deadline = time.monotonic() + 1.0 + RELEASE_AFTER + 5
        while admission.rate and time.monotonic() < deadline:  # on time again, nobody waits
            await asyncio.sleep(0.05)
        assert admission.rate == 0
        assert admission.door() is None

    asyncio.run(scenario())


def test_a_late_loop_whose_thread_does_not_get_the_cpu_lets_everyone_in() -> None:
    """Late because something else has the CPU (its thread asleep, not busy): holding requests
    at the door would not make it punctual, so none waits."""

    async def scenario() -> None:
        admission = Admission(max_lag=0.005)
        assert admission.door() is None
        blocking(asyncio.get_running_loop(), 0.6, spin=False)
        await asyncio.sleep(0.3)
        assert admission.lag > 0.005 and admission.busy < 0.5
        assert admission.rate == 0
        assert all(admission.door() is None for _ in range(20))
        assert admission.stats().waited == 0

    asyncio.run(scenario())


def test_an_on_time_loop_lets_everyone_in_at_once() -> None:
    async def scenario() -> None:
        admission = Admission(max_lag=0.05)
        for _ in range(200):
            assert admission.door() is None
            await asyncio.sleep(0)
        await asyncio.sleep(0.1)
        assert admission.rate == 0 and admission.stats().admitted == 200
        assert admission.stats().waited == 0

    asyncio.run(scenario())


def test_admission_off(make_gateway: Any) -> None:
    gw = make_gateway("server: {admission_max_lag_ms: null}")
    assert gw.chat("hello").status_code == 200
    assert gw.runtime.admission is None
    assert "admission" not in gw.http.get("/admin/stats").json()
    assert "cachegate_admission" not in gw.http.get("/metrics").text
