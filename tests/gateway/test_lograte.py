"""``RateLimitedLog``: one warning per key per interval, the rest counted into the next line."""

from __future__ import annotations

import logging

import pytest

from gateway.lograte import RateLimitedLog


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_key_per_interval_then_how_many_were_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock()
    said = RateLimitedLog(logging.getLogger("tests.lograte"), interval=60.0, clock=clock)
    logged = [said.warning("a", "model %s: odd (%s)", "a", "TypeError") for _ in range(4)]
    assert logged == [True, False, False, False]
    assert said.warning("b", "model %s: odd", "b")  # (another key: its own interval)
    clock.now += 59.0
    assert not said.warning("a", "model %s: odd", "a")
    clock.now += 1.0
    assert said.warning("a", "model %s: odd", "a")
    clock.now += 60.0
    assert said.warning("a", "model %s: odd", "a")  # (nothing left out since the last)
    lines = [r.getMessage() for r in caplog.records if r.name == "tests.lograte"]
    assert lines == [
        "model a: odd (TypeError)",
        "model b: odd",
        "model a: odd (4 more like it not logged)",
        "model a: odd",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records if r.name == "tests.lograte")
