"""The production audit: how often served semantic hits are wrong, measured live.

A sampled share (``audit_rate``) of semantic hits is, after being served as usual, also sent to
its model in the background; the fresh answer is compared with the served one and the verdict
counted per (model, namespace). The wrong share with a Wilson 95% interval is the live estimate
of the false-hit rate:

    >>> audit = Audit(rate=0.01, seed=1)
    >>> if audit.sample():                       # this hit is audited
    ...     verdict = await audit.judge(served_text, fresh_text, verifier=v, embedder=e)
    ...     audit.record("gpt-4o", "default", verdict)          # "ok" | "wrong"
    >>> audit.estimate("gpt-4o", "default")      # Estimate(audits=..., wrong=..., low=..., high=...)

The comparison (:meth:`Audit.judge`), in order:

1. the hard checks on the two answers: a changed number, unit or date makes them different
   ("The fee is 20 dollars" vs "... 35 dollars"). Negation and entity checks are left out:
   over two multi-sentence answers their counts change with the wording alone;
2. with the verifier on, its score of the pair (``same_score``, 0.5);
3. with it off, the cosine of the two answers' embeddings (``same_similarity``, 0.8).

Answers to one question differ in wording from call to call, so "wrong" over-counts: the
estimate errs on the safe side. A hand-written development set of 16 answer pairs (8 the same
answer reworded, 8 different answers; the scores alone, without the hard checks) gave: verifier
at 0.5, 5 of 8 same kept and 6 of 8 different caught (it missed "send money to Bob" vs "request
money from Bob", and "cancel" vs "upgrade"); cosine at 0.8, 6 of 8 and 6 of 8 (it missed "open"
vs "closed on Sundays", and the Bob pair). Rough instruments: the interval covers the sampling
error, not theirs, which is why the estimate is an alarm, not a label for any single hit.

Audits that could not be judged are counted apart, never in the estimate: ``error`` (the model
call failed or timed out) and ``dropped`` (too many audits already running: shed, not queued).
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = ["VERDICTS", "Audit", "Estimate", "Verdict", "answer_difference", "wilson"]

#: ``ok``/``wrong``: judged; ``error``: the audit's model call failed; ``dropped``: shed under load.
Verdict = Literal["ok", "wrong", "error", "dropped"]
VERDICTS: tuple[Verdict, ...] = ("ok", "wrong", "error", "dropped")
#: Hard checks that make two answers different whatever the verifier says.
_ANSWER_CHECKS = ("number_mismatch", "unit_mismatch", "date_mismatch")
_Z95 = 1.959964


class _Verifier(Protocol):
    async def verify(self, stored: str, new: str) -> float: ...


class _Embedder(Protocol):
    async def embed(self, text: str, *, max_wait: float | None = None) -> Any: ...


@dataclass(frozen=True, slots=True)
class Estimate:
    """Judged audits, how many were wrong, and the Wilson 95% interval of the wrong share."""

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


def answer_difference(served: str, fresh: str) -> str | None:
    """The first hard check two answers fail (a changed number, unit or date), or None."""
    from ._guard_checks import analyze, compare

    failed = compare(analyze(served), analyze(fresh)).failed
    return next((name for name in failed if name in _ANSWER_CHECKS), None)


class Audit:
    """Sampling, judging and counting of audited hits (thread-safe counters).

    ``seed``: the sampler's random seed. NOTE: sampling is random, never every n-th hit, so a
    workload that repeats itself in a cycle cannot line its audits up with one question.
    """

    def __init__(
        self,
        rate: float,
        *,
        seed: int | None = None,
        same_score: float = 0.5,
        same_similarity: float = 0.8,
    ) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"audit_rate must be in [0, 1], got {rate}")
        self.rate = rate
        self.same_score = same_score
        self.same_similarity = same_similarity
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], dict[Verdict, int]] = {}  # (model, ns) -> counts

    def sample(self) -> bool:
        """Whether to audit this hit."""
        return self.rate > 0 and self._rng.random() < self.rate

    async def judge(
        self,
        served: str,
        fresh: str,
        *,
        verifier: _Verifier | None = None,
        embedder: _Embedder | None = None,
    ) -> Verdict:
        """``ok`` when ``fresh`` (the model's answer now) says what ``served`` said, else
        ``wrong`` (see the module docstring). Neither verifier nor embedder: hard checks only."""
        if served == fresh:
            return "ok"
        if answer_difference(served, fresh) is not None:
            return "wrong"
        if verifier is not None:
            score = await verifier.verify(served, fresh)
            return "ok" if score >= self.same_score else "wrong"
        if embedder is not None:
            a, b = await asyncio.gather(embedder.embed(served), embedder.embed(fresh))
            return "ok" if float(a @ b) >= self.same_similarity else "wrong"
        return "ok"

    def record(self, model: str, namespace: str, verdict: Verdict) -> None:
        with self._lock:
            counts = self._counts.setdefault((model, namespace), dict.fromkeys(VERDICTS, 0))
            counts[verdict] += 1

    def estimate(self, model: str, namespace: str) -> Estimate:
        with self._lock:
            counts = dict(self._counts.get((model, namespace)) or dict.fromkeys(VERDICTS, 0))
        judged = counts["ok"] + counts["wrong"]
        return Estimate(judged, counts["wrong"], *wilson(counts["wrong"], judged))

    def stats(self) -> list[dict[str, Any]]:
        """Per (model, namespace): the verdicts, the estimate and its interval (admin stats)."""
        with self._lock:
            rows = sorted((key, dict(counts)) for key, counts in self._counts.items())
        out = []
        for (model, namespace), counts in rows:
            e = self.estimate(model, namespace)
            out.append({"model": model, "namespace": namespace, "audits": e.audits,
                        "wrong": e.wrong, "errors": counts["error"], "dropped": counts["dropped"],
                        "false_hit_rate": round(e.rate, 6),
                        "interval95": [round(e.low, 4), round(e.high, 4)]})  # fmt: skip
        return out
