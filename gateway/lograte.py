"""A warning that can come with every request, logged at most once a minute per key.

A misbehaving upstream (an answer of a shape no model sends, at every request) made one warning
per request: a log that hides everything else. ``RateLimitedLog`` logs the first of each key's
(a model's) interval and counts the rest; its next line says how many were left out::

    declined = RateLimitedLog(log, interval=60.0)
    declined.warning("gpt-x", "model %s: not storing an answer (%s)", "gpt-x", "TypeError")
    # logged: "model gpt-x: not storing an answer (TypeError)"; the same within the minute
    # is only counted, and the first one after it ends "(3 more like it not logged)"
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

__all__ = ["RateLimitedLog"]


class RateLimitedLog:
    """At most one warning per key per ``interval`` seconds; the others are counted.

    NOTE: it keeps one time and one count per key: keys must be few (configured model names),
    never what a client may choose.
    """

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._interval = interval
        self._clock = clock
        self._quiet_until: dict[str, float] = {}
        self._left_out: Counter[str] = Counter()

    def warning(self, key: str, message: str, *args: object) -> bool:
        """Log ``message % args`` unless ``key`` had a line less than ``interval`` s ago;
        True when it was logged."""
        now = self._clock()
        if now < self._quiet_until.get(key, now):
            self._left_out[key] += 1
            return False
        self._quiet_until[key] = now + self._interval
        left_out = self._left_out.pop(key, 0)
        more = f" ({left_out} more like it not logged)" if left_out else ""
        self._log.warning(message + "%s", *args, more)
        return True
