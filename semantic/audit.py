"""The production audit: how often served semantic hits are wrong, measured live.

A sampled share (``audit_rate``) of semantic hits is, after being served as usual, also sent to
its model in the background; the fresh answer is compared with the served one and the verdict
counted per :class:`AuditScope` (tenant, model, namespace). The wrong share, net of the judge's
own false alarms where controls measure them (below), with its 95% interval is the live
estimate of the false-hit rate:

    >>> audit, scope = Audit(rate=0.01, seed=1), AuditScope("acme", "gpt-4o", "")
    >>> if audit.sample():                       # this hit is audited
    ...     verdict = await audit.judge(served_text, fresh_text, verifier=v, embedder=e)
    ...     audit.record(scope, verdict)         # "ok" | "wrong"
    >>> audit.record_control(scope, "ok")        # the request asked twice: answers agree
    >>> audit.estimate(scope)                    # Estimate(audits=..., wrong=..., rate=..., ...)

The comparison (:meth:`Audit.judge`), in order:

1. the hard checks on the two answers: a changed number, unit or date makes them different
   ("The fee is 20 dollars" vs "... 35 dollars"). Negation and entity checks are left out:
   over two multi-sentence answers their counts change with the wording alone;
2. with the verifier on, its score of the pair (``same_score``, 0.5);
3. with it off, the cosine of the two answers' embeddings (``same_similarity``, 0.8).

Answers to one question differ in wording from call to call, so "wrong" over-counts (the
controls below measure by how much). A hand-written development set of 16 answer pairs (8 the
same answer reworded, 8 different answers; the scores alone, without the hard checks) gave: verifier
at 0.5, 5 of 8 same kept and 6 of 8 different caught (it missed "send money to Bob" vs "request
money from Bob", and "cancel" vs "upgrade"); cosine at 0.8, 6 of 8 and 6 of 8 (it missed "open"
vs "closed on Sundays", and the Bob pair). Rough instruments: without controls the interval
covers the sampling error, not theirs; with them, their false alarms too (not the wrong answers
they miss). The estimate is an alarm, not a label for any single hit.

Audits that could not be judged are counted apart, never in the estimate: ``error`` (the model
call failed or timed out) and ``dropped`` (too many audits already running: shed, not queued).

Controls (``cache.semantic.audit_controls``, on by default): a judged audit asks its request of
the model a second time and judges the two fresh answers against each other. They answer one
question, so a ``wrong`` control is the judge's false alarm (rewording, or a model that answers
differently from call to call), the error that made the plain estimate over-count. With controls
the estimate is net of it: if a share ``w`` of audits and ``c`` of controls are judged wrong,
the false-hit rate is ``(w - c) / (1 - c)`` (the judge is taken to catch every wrong hit: a
judge that misses some makes this under-count, as the plain share then does too), with
Newcombe's interval of the difference ``w - c`` from the two Wilson intervals, scaled alike
(:func:`estimate_rate`). Controls cost a second model call per judged audit.

Auto-tighten (:class:`Tightening`, ``cache.semantic.auto_tighten``, off by default): the judged
audits of each scope (tenant, model, namespace) are read in windows of :func:`window_size` ``(bound)`` audits,
the fewest with which a clean window (no wrong verdict) can show the rate is under ``bound``.
At the end of a window whose Wilson 95% upper bound exceeds ``bound``, the scope's verifier
score threshold moves one calibrated step up (``Calibration.stricter``: the wrong rate measured
at the new point is at most half the old one; past the last row, 1.0: no semantic hits in that
scope). A window starts empty after every decision, so each step is judged on audits of the
threshold it set: every served hit carries the scope's *generation* when it was looked up
(:meth:`Tightening.current`: the steps taken plus the resets), and a verdict of an older
generation (an audit still running when the threshold stepped up or was reset) is left out of
the window. It still counts in the estimate: that hit was served, right or wrong. The window is
sized so that small samples cannot ratchet a sound scope up: with 5 audits the upper bound of 0
wrong is 0.43 whatever the true rate.

An audit never takes the models from live lookups: the judge scores the two answers through
the verifier's and the embedder's background paths (``verify_background``,
``embed_background``): one pair (or text) at a time, alone, and only while no live lookup's
pair (or text) is queued.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = [
    "CONTROLS",
    "MAX_SCOPES",
    "VERDICTS",
    "Audit",
    "AuditScope",
    "Estimate",
    "Tightened",
    "Tightening",
    "Verdict",
    "answer_difference",
    "estimate_rate",
    "wilson",
    "window_size",
]

#: ``ok``/``wrong``: judged; ``error``: the audit's model call failed; ``dropped``: shed under load.
Verdict = Literal["ok", "wrong", "error", "dropped"]
VERDICTS: tuple[Verdict, ...] = ("ok", "wrong", "error", "dropped")
#: A control's verdicts (the two fresh answers of one request compared): ``error``, its second
#: model call failed.
CONTROLS: tuple[Verdict, ...] = ("ok", "wrong", "error")
_CONTROL_KEYS = tuple(f"control_{v}" for v in CONTROLS)
#: Hard checks that make two answers different whatever the verifier says.
_ANSWER_CHECKS = ("number_mismatch", "unit_mismatch", "date_mismatch")
_Z95 = 1.959964
#: The most scopes (tenant, model, namespace) held: namespaces are the client's to choose.
#: Past it the estimate least recently updated goes, and the untightened window least
#: recently updated; a tightened scope is never forgotten (see ``Tightening``).
MAX_SCOPES = 10_000


class _Verifier(Protocol):
    async def verify_background(self, stored: str, new: str) -> float: ...


class _Embedder(Protocol):
    async def embed_background(self, text: str) -> Any: ...


@dataclass(frozen=True, slots=True, order=True)
class AuditScope:
    """Where audits are counted and thresholds tightened: the tenant, model and namespace of
    the audited hits, so one tenant's wrong hits never tighten another tenant's scope.

    NOTE: the tenant is the one the response cache keys by (``GatewayRequest.tenant`` after
    routing: with a front gateway's partition, or the client's key digest), so a tightened
    threshold applies exactly where the audited answers could be served.
    """

    tenant: str
    model: str
    namespace: str


@dataclass(frozen=True, slots=True)
class Estimate:
    """Judged audits, how many were wrong, judged controls and how many of them were wrong,
    and the false-hit rate with its 95% interval (:func:`estimate_rate`)."""

    audits: int
    wrong: int
    low: float
    high: float
    controls: int = 0
    control_wrong: int = 0
    rate: float = 0.0

    @classmethod
    def of(cls, audits: int, wrong: int, controls: int = 0, control_wrong: int = 0) -> Estimate:
        rate, low, high = estimate_rate(wrong, audits, control_wrong, controls)
        return cls(audits, wrong, low, high, controls, control_wrong, rate)

    @property
    def judged_rate(self) -> float:
        """The share of audits judged wrong (the estimate without controls)."""
        return self.wrong / self.audits if self.audits else 0.0


def wilson(wrong: int, n: int, z: float = _Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial share (good at small counts and near 0)."""
    if n == 0:
        return 0.0, 1.0
    p = wrong / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def estimate_rate(
    wrong: int, n: int, control_wrong: int = 0, controls: int = 0, z: float = _Z95
) -> tuple[float, float, float]:
    """The false-hit rate and its 95% interval from ``wrong`` of ``n`` audits, net of the
    judge's false alarms measured by ``control_wrong`` of ``controls`` (see the module
    docstring). No controls: the wrong share and its Wilson interval. Every control wrong:
    the judge tells nothing, the interval is [0, 1]."""
    p = wrong / n if n else 0.0
    if n == 0 or controls == 0:
        return (p, *wilson(wrong, n, z))
    c = control_wrong / controls
    if c >= 1.0:
        return p, 0.0, 1.0
    (l1, u1), (l2, u2) = wilson(wrong, n, z), wilson(control_wrong, controls, z)
    d = p - c
    low = d - math.sqrt((p - l1) ** 2 + (u2 - c) ** 2)  # Newcombe's hybrid score interval
    high = d + math.sqrt((u1 - p) ** 2 + (c - l2) ** 2)

    def clip(x: float) -> float:
        return min(1.0, max(0.0, x / (1.0 - c)))

    return clip(d), clip(low), clip(high)


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
        self._counts: OrderedDict[AuditScope, dict[str, int]] = OrderedDict()

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
        # NOTE: off the event loop: the checks grow with the answers (measured here: 2 ms at
        # 4k characters, 9 ms at 16k, 59 ms at 64k), a wait every request would share
        if await asyncio.to_thread(answer_difference, served, fresh) is not None:
            return "wrong"
        # NOTE: on the models' background paths: an audit's answers are long, and in a live
        # lookup's batch they would make that lookup wait for them
        if verifier is not None:
            score = await verifier.verify_background(served, fresh)
            return "ok" if score >= self.same_score else "wrong"
        if embedder is not None:
            a, b = await asyncio.gather(
                embedder.embed_background(served), embedder.embed_background(fresh)
            )
            return "ok" if float(a @ b) >= self.same_similarity else "wrong"
        return "ok"

    def record(self, scope: AuditScope, verdict: Verdict) -> None:
        self._add(scope, verdict)

    def record_control(self, scope: AuditScope, verdict: Verdict) -> None:
        """Count a control's verdict (the two fresh answers of one audited request)."""
        self._add(scope, f"control_{verdict}")

    def estimate(self, scope: AuditScope) -> Estimate:
        with self._lock:
            counts = dict(self._counts.get(scope) or _zero())
        return _estimate(counts)

    def _add(self, scope: AuditScope, key: str) -> None:
        with self._lock:
            counts = self._counts.setdefault(scope, _zero())
            counts[key] += 1
            self._counts.move_to_end(scope)
            if len(self._counts) > MAX_SCOPES:
                self._counts.popitem(last=False)

    def stats(self, also: Iterable[AuditScope] = ()) -> list[dict[str, Any]]:
        """Per scope (tenant, model, namespace): the verdicts, the estimate and its interval
        (admin stats); ``also``: scopes shown even with no verdict held (none yet, or dropped
        past MAX_SCOPES)."""
        with self._lock:
            held = {key: dict(counts) for key, counts in self._counts.items()}
        for scope in also:
            held.setdefault(scope, _zero())
        out = []
        for scope, counts in sorted(held.items()):
            e = _estimate(counts)
            out.append({"tenant": scope.tenant, "model": scope.model,
                        "namespace": scope.namespace, "audits": e.audits,
                        "wrong": e.wrong, "errors": counts["error"], "dropped": counts["dropped"],
                        "controls": e.controls, "control_wrong": e.control_wrong,
                        "control_errors": counts["control_error"],
                        "judged_wrong_rate": round(e.judged_rate, 6),
                        "false_hit_rate": round(e.rate, 6),
                        "interval95": [round(e.low, 4), round(e.high, 4)]})  # fmt: skip
        return out


def _zero() -> dict[str, int]:
    return dict.fromkeys(VERDICTS + _CONTROL_KEYS, 0)


def _estimate(counts: dict[str, int]) -> Estimate:
    judged = counts["ok"] + counts["wrong"]
    controls = counts["control_ok"] + counts["control_wrong"]
    return Estimate.of(judged, counts["wrong"], controls, counts["control_wrong"])


def window_size(bound: float, z: float = _Z95) -> int:
    """The fewest judged audits whose Wilson upper bound, with none wrong, is at most ``bound``
    (``bound`` in (0, 1]): 0.05 -> 73, 0.02 -> 189, 0.01 -> 381."""
    if not 0.0 < bound <= 1.0:
        raise ValueError(f"the bound must be in (0, 1], got {bound}")
    n = max(1, math.floor(z * z * (1 - bound) / bound))
    while wilson(0, n, z)[1] > bound:
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class Tightened:
    """A scope's verifier score threshold as auto-tighten left it (None: the configured one)
    and its generation, which an audit of a hit served under it hands back to
    :meth:`Tightening.observe`."""

    threshold: float | None = None
    generation: int = 0


@dataclass(slots=True)
class _Scope:
    ok: int = 0
    wrong: int = 0
    steps: int = 0
    threshold: float | None = None  # None: not tightened (the configured threshold)
    generation: int = 0  # bumped by every step and every reset: whose audits the window takes


class Tightening:
    """Per :class:`AuditScope` (tenant, model, namespace), the verifier score threshold that
    auto-tighten has set (see the module docstring). Thread-safe; in memory: a restart, or
    :meth:`reset`, undoes it.

        >>> t, scope = Tightening(bound=0.5), AuditScope("acme", "m", "ns")  # windows of 4
        >>> served, up = t.current(scope), lambda x: x + 0.06  # at the lookup: Tightened(None, 0)
        >>> for _ in range(4):
        ...     stepped = t.observe(scope, "wrong", served.generation, base=0.87, stricter=up)
        >>> stepped, t.current(scope)                     # 0.93, Tightened(0.93, 1): one step
        >>> t.observe(scope, "wrong", served.generation, base=0.87, stricter=up)  # None: stale
        >>> t.threshold(AuditScope("other", "m", "ns"))   # None: another tenant's is its own
    """

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self.window = window_size(bound)
        self._lock = threading.Lock()
        self._scopes: OrderedDict[AuditScope, _Scope] = OrderedDict()

    def threshold(self, scope: AuditScope) -> float | None:
        """The scope's tightened score threshold; None: the configured one applies."""
        return self.current(scope).threshold

    def current(self, scope: AuditScope) -> Tightened:
        """The scope's threshold and its generation, read together (at a lookup: the
        generation goes with the audit of the hit it serves)."""
        with self._lock:
            held = self._scopes.get(scope)
            return Tightened() if held is None else Tightened(held.threshold, held.generation)

    def observe(
        self,
        scope: AuditScope,
        verdict: Verdict,
        generation: int,
        *,
        base: float,
        stricter: Callable[[float], float],
    ) -> float | None:
        """Count a verdict of a hit served under ``generation`` (:meth:`current`); at the end
        of a window that fails, step the scope's threshold up from its current one (``base``
        while untightened) and return the new threshold."""
        if verdict not in ("ok", "wrong"):
            return None  # not judged: no evidence either way
        with self._lock:
            held = self._held(scope)
            # NOTE: an audit runs for seconds after its hit was served; one served before the
            # last step (or reset) judges the threshold that was, not this window's
            if generation != held.generation:
                return None
            if verdict == "wrong":
                held.wrong += 1
            else:
                held.ok += 1
            n = held.ok + held.wrong
            if n < self.window:
                return None
            high = wilson(held.wrong, n)[1]
            held.ok = held.wrong = 0  # a new window, whatever the decision
            current = base if held.threshold is None else held.threshold
            if high <= self.bound or current >= 1.0:
                return None
            held.threshold = stricter(current)
            held.steps += 1
            held.generation += 1
            return held.threshold

    def _held(self, scope: AuditScope) -> _Scope:
        """The scope's state, created if new, as the most recently used (under the lock).

        NOTE: past MAX_SCOPES an untightened scope's window goes (the least recently used): a
        tightened one never does, or one tenant's flood of namespaces could loosen another's.
        """
        held = self._scopes.get(scope)
        if held is None:
            if len(self._scopes) >= MAX_SCOPES:
                old = next((k for k, v in self._scopes.items() if v.threshold is None), None)
                if old is not None:
                    del self._scopes[old]
            held = self._scopes[scope] = _Scope()
        self._scopes.move_to_end(scope)
        return held

    def reset(
        self, tenant: str | None = None, model: str | None = None, namespace: str | None = None
    ) -> int:
        """Forget the tightening and the window of matching scopes (None matches any); how
        many had either to forget."""
        with self._lock:
            keys = [k for k in self._scopes
                    if tenant in (None, k.tenant) and model in (None, k.model)
                    and namespace in (None, k.namespace)]  # fmt: skip
            reset = 0
            for key in keys:
                held = self._scopes[key]
                reset += bool(held.steps or held.ok or held.wrong)
                # NOTE: kept, one generation on, not deleted: the audits of hits served before
                # the reset must stay out of the window of the threshold it restores
                self._scopes[key] = _Scope(generation=held.generation + 1)
            return reset

    def tightened(self) -> list[AuditScope]:
        """The scopes whose threshold is tightened (kept past MAX_SCOPES: see ``_held``)."""
        with self._lock:
            return [key for key, held in self._scopes.items() if held.threshold is not None]

    def state(self, scope: AuditScope) -> dict[str, Any]:
        """The scope's steps, threshold and current window (admin stats)."""
        with self._lock:
            held = self._scopes.get(scope) or _Scope()
            return {"steps": held.steps, "score_threshold": held.threshold,
                    "window": [held.ok + held.wrong, self.window]}  # fmt: skip
