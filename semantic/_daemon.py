"""A blocking call awaited on a daemon thread of its own (model loads a shutdown must not wait
for). Shared by the semantic cache's loader and the gateway's local model backend."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["on_daemon_thread"]

T = TypeVar("T")


async def on_daemon_thread(
    fn: Callable[[], T], *, name: str, running: threading.Event | None = None
) -> T:
    """``fn()`` on a daemon thread of its own, awaited; ``running`` is set while it runs
    (what a shutdown asks: a load it does not wait for).

    NOTE: not ``asyncio.to_thread``: the interpreter joins its executor's threads at exit, so a
    model still loading held a Ctrl-C'd process until the load ended.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(set_outcome: Callable[[Any], object], outcome: object) -> None:
        if not future.done():  # (cancelled: the task awaiting it was)
            set_outcome(outcome)

    def run() -> None:
        try:
            outcome: tuple[Callable[[Any], object], object] = (future.set_result, fn())
        except BaseException as exc:  # (delivered to the awaiting task, which logs it)
            outcome = (future.set_exception, exc)
        finally:
            if running is not None:
                running.clear()
        with contextlib.suppress(RuntimeError):  # the loop has closed: the process is ending
            loop.call_soon_threadsafe(settle, *outcome)

    if running is not None:
        running.set()
    threading.Thread(target=run, name=name, daemon=True).start()
    return await future
