"""The production audit: how often served semantic hits are wrong, measured live.

A sampled share (``audit_rate``) of semantic hits is, after being served as usual, also sent to
its model in the background; the fresh answer is compared with the served one and the verdict
counted per (model, namespace). The wrong share with a Wilson 95% interval is the live estimate
of the false-hit rate:

    >>> audit = Audit(rate=0.01, seed=1)
    >>> if audit.sample():                       # this hit is audited
    ...     verdict = audit.judge(served_text, fresh_text, verifier)   # "same" | "different"
    ...     audit.record("gpt-4o", "default", verdict)
    >>> audit.estimate("gpt-4o", "default")      # Estimate(audits=..., wrong=..., low=..., high=...)

The comparison: the hard checks on the two answers (a changed number, unit or date makes them
different) and then the verifier on the two answers. Answers to one question differ in wording
from call to call, so "different" over-counts a little: the estimate errs on the safe side.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = ["Audit", "Estimate", "Verdict", "wilson"]

Verdict = Literal["same", "different"]
#: Hard checks that make two answers different whatever the verifier says.
_ANSWER_CHECKS = ("number_mismatch", "unit_mismatch", "date_mismatch")
_Z95 = 1.959964


class _Scorer(Protocol):
    def score(self, pairs: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class Estimate:
    """Audited hits, how many were wrong, and the Wilson 95% interval of the wrong share."""

    audits: int
    wrong: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.wrong / self.audits if self.audits else 0.0


def wilson(wrong: int, n: int, z: float = _Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial share (good at small counts and near 0)."""
    if n == 0:
        return 0.0, 1.0
    p = wrong / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


class Audit:
    """Sampling, judging and counting of audited hits (thread-safe counters)."""

    def __init__(self, rate: float, *, seed: int | None = None, same_score: float = 0.5) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"audit_rate must be in [0, 1], got {rate}")
        self.rate = rate
        self.same_score = same_score
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], list[int]] = {}  # (model, ns) -> [audits, wrong]

    def sample(self) -> bool:
        """Whether to audit this hit."""
        return self.rate > 0 and self._rng.random() < self.rate

    def judge(self, served: str, fresh: str, verifier: _Scorer | None) -> Verdict:
        from ._guard_checks import analyze, compare

        failed = compare(analyze(served), analyze(fresh)).failed
        if any(name in _ANSWER_CHECKS for name in failed):
            return "different"
        if verifier is not None and float(verifier.score([(served, fresh)])[0]) < self.same_score:
            return "different"
        return "same"

    def record(self, model: str, namespace: str, verdict: Verdict) -> None:
        with self._lock:
            counts = self._counts.setdefault((model, namespace), [0, 0])
            counts[0] += 1
            counts[1] += verdict == "different"

    def estimate(self, model: str, namespace: str) -> Estimate:
        with self._lock:
            audits, wrong = self._counts.get((model, namespace), [0, 0])
        return Estimate(audits, wrong, *wilson(wrong, audits))

    def stats(self) -> list[dict[str, Any]]:
        """Per (model, namespace): audits, wrong, the estimate and its interval (admin stats)."""
        with self._lock:
            keys = sorted(self._counts)
        out = []
        for model, namespace in keys:
            e = self.estimate(model, namespace)
            out.append({"model": model, "namespace": namespace, "audits": e.audits,
                        "wrong": e.wrong, "false_hit_rate": e.rate,
                        "interval95": [round(e.low, 4), round(e.high, 4)]})  # fmt: skip
        return out
