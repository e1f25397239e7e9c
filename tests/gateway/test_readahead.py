"""gateway.readahead: how far a streamed body is read ahead of its relay, and how much of it
the relay takes at a time (what one turn of the event loop parses and holds)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from gateway.readahead import ReadAhead

LIMIT = 64 * 1024


async def steps_of(reads: list[bytes]) -> list[bytes]:
    """What a consumer takes, step by step, of a body that arrives as ``reads`` at once."""

    async def arrived() -> AsyncIterator[bytes]:
        for read in reads:
            yield read

    body = ReadAhead(arrived(), limit=LIMIT)
    try:
        return [step async for step in body]
    finally:
        await body.aclose()


async def turns(n: int = 200) -> None:
    """Let the loop run ``n`` times (the reader's task reads whatever it is allowed to)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_consumer_that_takes_nothing_stops_the_read() -> None:
    """Backpressure reaches the body's read: a relay stuck on its client (a full window) holds
    the reader to ``limit`` bytes ahead, not 64 reads of up to a megabyte each."""
    pulled: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        for _ in range(100):  # (20 MB: as good as endless here)
            await asyncio.sleep(0)  # (the network read)
            pulled.append(1)
            yield b"data: {}\n\n" * 20_000  # (200 kB: what one read of a fast upstream brings)

    body = ReadAhead(endless(), limit=LIMIT)
    try:
        first = await anext(body)
        await turns()  # the consumer is stuck: it takes nothing more
        assert len(pulled) == 1  # the read it took from is not finished yet: no other began
        assert len(first) <= 2 * LIMIT
        taken = len(first)
        while taken < 600_000:  # it reads on as the consumer takes
            taken += len(await anext(body))
        await turns()
        assert 3 <= len(pulled) <= 4  # 600 kB taken: three reads, and at most one ahead
    finally:
        await body.aclose()


async def test_a_long_read_is_handed_over_in_pieces_in_order() -> None:
    """A read of a megabyte of small events (an upstream faster than its client) is taken a
    piece at a time, each under twice ``limit``, so no turn of the loop parses it all."""
    sent = b"".join(b'data: {"n":%d}\n\n' % i for i in range(80_000))
    steps = await steps_of([sent])
    assert b"".join(steps) == sent
    assert len(steps) > 1 and max(map(len, steps)) < 2 * LIMIT


async def test_reads_that_arrived_together_are_still_taken_together() -> None:
    """Small reads queued before the consumer asks leave in one step (one write to the
    client), as before the bound."""
    events = [b"data: %d\n\n" % i for i in range(5)]
    assert await steps_of(events) == [b"".join(events)]
