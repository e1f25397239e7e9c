"""AsyncEngine: one worker thread batching requests (FIFO admission), events to the loop."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch

from localmodel import (
    AsyncEngine,
    Choice,
    ChoiceFinished,
    Completion,
    Engine,
    EngineClosedError,
    EngineConfig,
    Event,
    Finished,
    GenerationRequest,
    SamplingParams,
    TextDelta,
    Usage,
)
from localmodel.batch import Piece
from localmodel.disk import BreakEven
from localmodel.engine import Steps
from localmodel.kv import TensorKV
from prefix import RadixKey
from tests.localmodel.conftest import MakeEngine

NS = "smollm2|tenant-a"


class _SlowEngine:
    """Stands in for Engine: each batched step blocks its thread like a forward pass would."""

    def __init__(
        self, step_s: float = 0.05, steps: int = 4, fail: bool = False, max_batch: int = 16
    ) -> None:
        self.step_s, self.n_steps, self.fail = step_s, steps, fail
        self.fail_forward = self.fail_cleanup = False
        self.config = EngineConfig(max_batch=max_batch)
        self.served: list[GenerationRequest] = []
        self.batch_sizes: list[int] = []
        #: set: a cancelled request's coroutine waits for it (its cleanup hangs in a step)
        self.hang_when_cancelled: threading.Event | None = None

    def steps(self, request: GenerationRequest) -> Steps:
        self.served.append(request)
        if self.fail:
            raise RuntimeError("boom")
        try:
            for i in range(self.n_steps):
                if request.cancel.is_set():
                    if self.hang_when_cancelled is not None:
                        self.hang_when_cancelled.wait()
                    break
                yield Piece(None, (i,))  # type: ignore[arg-type]  # no cache: nothing reads it
                yield TextDelta(0, str(i))
        except GeneratorExit:
            if self.fail_cleanup:  # e.g. returning its pages to the pool failed
                raise RuntimeError("cleanup failed") from None
            raise
        choice = Choice(0, "", (), "length")
        yield Finished(Completion((choice,), Usage(1, self.n_steps, 0), 0.0, 0.0))

    def forward_batch(self, pieces: list[Piece]) -> torch.Tensor:
        self.batch_sizes.append(len(pieces))
        time.sleep(self.step_s)
        if self.fail_forward:
            self.fail_forward = False
            raise RuntimeError("out of memory")
        return torch.zeros(len(pieces), 1)

    def close(self) -> None:
        self.closed = True


def _request(tag: int = 0) -> GenerationRequest:
    return GenerationRequest((1, 2, tag), NS, SamplingParams(max_tokens=4))


async def test_concurrent_requests_all_get_their_own_correct_answers(engine: Engine) -> None:
    questions = ["Name a fruit.", "Name a planet.", "Name a colour."]
    params = SamplingParams(temperature=0.0, max_tokens=5)
    prompts = [engine.encode_chat([{"role": "user", "content": q}]) for q in questions]
    expected = [engine.complete(engine.prepare(p, params, namespace=NS)).choices for p in prompts]

    async with AsyncEngine(engine) as local:
        results = await asyncio.gather(
            *(local.complete(engine.prepare(p, params, namespace=NS)) for p in prompts)
        )
    assert [r.choices for r in results] == expected
    assert all(r.usage.cached_tokens == len(p) - 1 for r, p in zip(results, prompts, strict=True))


async def test_stream_yields_deltas_then_finished_and_never_blocks_the_loop() -> None:
    fake = _SlowEngine(step_s=0.2, steps=6)
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.01)

    async with AsyncEngine(fake) as local:  # type: ignore[arg-type]
        task = asyncio.create_task(ticker())
        events = [event async for event in local.stream(_request())]
        task.cancel()
    assert [e.text for e in events if isinstance(e, TextDelta)] == list("012345")
    assert isinstance(events[-1], Finished)
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    # the 1.2 s of "forward passes" ran elsewhere: a loop blocked by them would stall 0.2 s at
    # every step, six times; a loaded machine may stall a tick or two, not most of them
    assert len(ticks) > 20 and sorted(gaps)[-3] < 0.19


async def test_max_batch_one_serves_requests_one_after_another_in_order() -> None:
    fake = _SlowEngine(step_s=0.01, steps=2, max_batch=1)
    async with AsyncEngine(fake) as local:  # type: ignore[arg-type]
        await asyncio.gather(*(local.complete(_request(i)) for i in range(5)))
    assert [r.prompt_tokens[-1] for r in fake.served] == [0, 1, 2, 3, 4]
    assert set(fake.batch_sizes) == {1}


async def test_concurrent_requests_decode_together_in_one_step() -> None:
    fake = _SlowEngine(step_s=0.02, steps=6, max_batch=3)
    async with AsyncEngine(fake) as local:  # type: ignore[arg-type]
        results = await asyncio.gather(*(local.complete(_request(i)) for i in range(5)))
    assert len(results) == 5 and [r.prompt_tokens[-1] for r in fake.served] == [0, 1, 2, 3, 4]
    assert max(fake.batch_sizes) == 3  # capped by max_batch; the last two admitted later
    assert sum(fake.batch_sizes) == 5 * 6  # every token of every request, once


async def test_leaving_the_stream_cancels_the_request_and_the_worker_moves_on() -> None:
    fake = _SlowEngine(step_s=0.05, steps=100)
    async with AsyncEngine(fake) as local:  # type: ignore[arg-type]
        first = _request(1)
        stream = local.stream(first)
        async for _ in stream:
            break
        await stream.aclose()  # what a disconnecting client's handler does
        assert first.cancel.is_set()
        fake.n_steps = 2
        started = time.perf_counter()
        await local.complete(_request(2))  # not stuck behind 100 steps of the first
        assert time.perf_counter() - started < 2.5


async def test_engine_errors_are_raised_in_the_caller_and_the_worker_survives() -> None:
    fake = _SlowEngine(fail=True)
    async with AsyncEngine(fake) as local:  # type: ignore[arg-type]
        with pytest.raises(RuntimeError, match="boom"):
            await local.complete(_request())
        fake.fail = False
        assert isinstance(await local.complete(_request()), Completion)


async def test_a_failed_scheduler_step_fails_its_requests_and_the_worker_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from localmodel.scheduler import Scheduler

    admit, failures = Scheduler._admit, iter([RuntimeError("scheduler bug")])

    def once_broken(self: Scheduler) -> None:
        admit(self)
        if self.running and (error := next(failures, None)) is not None:
            raise error

    monkeypatch.setattr(Scheduler, "_admit", once_broken)
    async with AsyncEngine(_SlowEngine()) as local:  # type: ignore[arg-type]
        first = [asyncio.create_task(local.complete(_request(i))) for i in range(2)]
        for task in first:  # each is answered with the error: none waits forever
            with pytest.raises(RuntimeError, match="scheduler bug"):
                await asyncio.wait_for(task, 10)
        # (the worker thread may still be between answering a request and dropping it)
        for _ in range(500):
            if local.pending == 0:
                break
            await asyncio.sleep(0.01)
        assert local.pending == 0
        assert isinstance(await asyncio.wait_for(local.complete(_request()), 10), Completion)


async def test_requests_whose_cleanup_fails_after_a_failed_step_are_all_answered() -> None:
    """A failed forward pass fails its requests; one whose cleanup fails too must not leave
    the others (or later requests) waiting forever behind a dead worker thread."""
    fake = _SlowEngine(step_s=0.01, steps=4)
    fake.fail_forward = fake.fail_cleanup = True
    async with AsyncEngine(fake) as local:  # type: ignore[arg-type]
        tasks = [asyncio.create_task(local.complete(_request(i))) for i in range(3)]
        for task in tasks:
            with pytest.raises(RuntimeError, match="out of memory"):
                await asyncio.wait_for(task, 10)
        fake.fail_cleanup = False
        assert isinstance(await asyncio.wait_for(local.complete(_request()), 10), Completion)


async def test_closed_engine_refuses_requests() -> None:
    local = AsyncEngine(_SlowEngine())  # type: ignore[arg-type]
    local.start()
    await local.aclose()
    with pytest.raises(EngineClosedError):
        await local.complete(_request())


async def test_real_engine_stream_deltas_add_up_to_the_text(tiny_engine: Engine) -> None:
    prompt = tiny_engine.encode_chat([{"role": "user", "content": "hi"}])
    request = tiny_engine.prepare(
        prompt, SamplingParams(temperature=0.0, max_tokens=6), namespace=NS
    )
    async with AsyncEngine(tiny_engine) as local:
        events: list[Any] = [event async for event in local.stream(request)]
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert events[-1].completion.choices[0].text == text
    assert events[-1].completion.usage.completion_tokens == 6


async def test_close_cancels_the_running_request_and_fails_queued_ones() -> None:
    fake = _SlowEngine(step_s=0.05, steps=1000, max_batch=1)
    local = AsyncEngine(fake)  # type: ignore[arg-type]
    running, queued = _request(1), _request(2)
    first = asyncio.create_task(local.complete(running))
    second = asyncio.create_task(local.complete(queued))
    while not fake.served:
        await asyncio.sleep(0.01)
    await asyncio.wait_for(local.aclose(), timeout=5)
    assert running.cancel.is_set()
    assert isinstance(await first, Completion)  # ended early, between two steps
    with pytest.raises(EngineClosedError):
        await second


async def test_a_shutdown_leaves_behind_a_step_stuck_while_it_ends_the_running_requests() -> None:
    """``aclose(stuck=)`` cancels what runs and steps the scheduler until it has ended; a step
    that hangs there (a device that stopped answering) is left behind once it has run that
    long, as one before. Those steps were not timed (``stuck_for`` said 0): the shutdown
    waited for it for ever."""
    released = threading.Event()
    fake = _SlowEngine(step_s=0.01, steps=1000)
    fake.hang_when_cancelled = released
    local = AsyncEngine(fake)  # type: ignore[arg-type]
    running = asyncio.create_task(local.complete(_request()))
    while not fake.served:
        await asyncio.sleep(0.01)
    try:
        await asyncio.wait_for(local.aclose(stuck=0.5), timeout=30)
        assert local.running and local.stuck_for() >= 0.5  # (its thread, still in that step)
    finally:
        released.set()
    assert isinstance(await asyncio.wait_for(running, 10), Completion)  # (it ended, cancelled)


async def test_a_step_that_fails_while_the_engine_shuts_down_answers_its_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The steps that end the running requests at shutdown fail them as any step does when
    it fails. Such a failure killed the engine's thread: their callers waited for ever."""
    from localmodel.scheduler import Scheduler

    admit = Scheduler._admit

    def broken_at_shutdown(self: Scheduler) -> None:
        admit(self)
        if any(seq.request.cancel.is_set() for seq in self.running):
            raise RuntimeError("scheduler bug")

    monkeypatch.setattr(Scheduler, "_admit", broken_at_shutdown)
    fake = _SlowEngine(step_s=0.01, steps=1000)
    local = AsyncEngine(fake)  # type: ignore[arg-type]
    running = asyncio.create_task(local.complete(_request()))
    while not fake.served:
        await asyncio.sleep(0.01)
    await asyncio.wait_for(local.aclose(), timeout=30)
    with pytest.raises(RuntimeError, match="scheduler bug"):
        await asyncio.wait_for(running, 10)


async def test_a_request_cancelled_before_it_ran_still_ends_its_stream(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    """A request whose client cancelled it while it waited for a batch slot leaves the queue
    at the next step; a caller still reading its stream gets ``Finished`` ("cancelled", the
    prompt not run), as a cancelled running request's caller does. It was dropped with no
    answer: that caller waited for ever."""
    engine = make_engine(tiny=tiny_model, max_batch=1)
    params = SamplingParams(temperature=0.0, max_tokens=4)
    running = engine.prepare([1, 2, 3], params, namespace=NS)
    queued = engine.prepare([1, 2, 4], params, namespace=NS)
    queued.cancel.set()  # (before the worker takes it: it never gets the slot)
    async with AsyncEngine(engine) as local:
        first = asyncio.create_task(local.complete(running))
        events = await asyncio.wait_for(_events(local.stream(queued)), 30)
        assert isinstance(await asyncio.wait_for(first, 30), Completion)
    assert not queued.started.is_set()  # it never ran
    assert events == [ChoiceFinished(0, "cancelled"), events[-1]]
    assert isinstance(events[-1], Finished)
    completion = events[-1].completion
    assert completion.choices == (Choice(0, "", (), "cancelled"),)
    assert completion.usage == Usage(0, 0, 0)  # (nothing ran: nothing to bill)


async def _events(stream: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in stream]


class _HeldEncode:
    """A disk tier's codec whose writer waits in ``encode`` until ``release`` is set."""

    def __init__(self, encode: Any, bytes_per_token: int) -> None:
        self.bytes_per_token = bytes_per_token
        self.writing, self.release = threading.Event(), threading.Event()
        self._encode = encode

    def encode(self, spans: Any, start: int, stop: int) -> Any:
        self.writing.set()
        self.release.wait(timeout=60)
        return self._encode(spans, start, stop)


async def test_closing_waits_for_a_stuck_disk_writer_off_the_event_loop(
    make_engine: MakeEngine, tiny_model: Any, tmp_path: Path
) -> None:
    """``aclose`` closes the engine, whose disk tier waits (up to 10 s) for a writer stuck in
    I/O: the event loop goes on meanwhile (a shutdown's errors to the open streams go out).
    ``Engine.close`` ran on the loop: nothing else ran there until it returned."""
    engine = make_engine(tiny=tiny_model, prefix_disk_dir=tmp_path, break_even=BreakEven.fixed(1))
    assert engine.disk is not None
    tier = engine.disk.tier
    held = _HeldEncode(tier.codec.encode, tier.codec.bytes_per_token)
    tier.codec = held
    layout = engine.layout
    kv = torch.zeros(layout.n_layers, layout.n_kv_heads, 1, layout.head_dim)  # [L, kv, 1, d]
    engine.prefix_cache.insert(RadixKey("filler", [7]), TensorKV(kv, kv))
    engine.prefix_cache.evict(engine.prefix_cache.stats.bytes)  # (to the writer, which waits)
    assert await asyncio.to_thread(held.writing.wait, 30)
    closing = threading.Event()
    close = engine.close

    def close_and_say() -> None:
        closing.set()
        close()

    engine.close = close_and_say  # type: ignore[method-assign]
    local = AsyncEngine(engine)
    local.start()
    shutdown = asyncio.create_task(local.aclose())
    try:
        assert await asyncio.to_thread(closing.wait, 30)
        ran: list[bool] = []  # an asyncio callback, run while close() waits for the writer
        asyncio.get_running_loop().call_soon(lambda: ran.append(not shutdown.done()))
        await asyncio.sleep(0)
        assert ran == [True]
    finally:
        held.release.set()
    await asyncio.wait_for(shutdown, 30)
    assert not tier.directory.exists()  # (closed all the same: its run directory removed)
