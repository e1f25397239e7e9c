"""The dashboard's memory: a bounded ring of per-interval counters, and the recent semantic hits.

Nothing here is a database: ``points`` intervals of ``interval`` seconds are kept (one hour of
10 s points by default) and the oldest is overwritten. Each point counts answers by tier, model
and namespace, holds latency histograms (hits vs misses, and time to first token of streams)
from which percentiles are read, money and tokens saved, and the last gauge readings (prefix
KV bytes, ...)::

    >>> history = History(interval=10, points=360)
    >>> history.record(Answer(tier="exact", model="gpt-4o", namespace="", latency=0.002))
    >>> history.snapshot()["points"][-1]["tiers"]        # {"exact": 1}

Latency percentiles come from fixed log-spaced bins (``_EDGES``): a percentile is the upper
edge of the bin where the running count reaches it, so it is exact to within one bin (~19%).
"""

from __future__ import annotations

import bisect
import math
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Answer", "History", "RecentHit"]

#: The tiers an answer can come from (``x-cache``, with ``coalesced`` split out of ``exact``).
Tier = Literal["exact", "semantic", "coalesced", "miss", "bypass", "refresh"]
TIERS: tuple[Tier, ...] = ("exact", "semantic", "coalesced", "miss", "bypass", "refresh")
_HITS = frozenset({"exact", "semantic", "coalesced"})

#: Namespaces counted apart; the answers of any other are counted together under
#: ``OTHER_NAMESPACES`` (a name no namespace can have), so that a client sending a new
#: namespace with every request cannot grow the history without bound.
NAMESPACES = 100
OTHER_NAMESPACES = "(other)"

#: Latency bin edges in seconds: 0.25 ms to ~2 min, 2**(1/4) apart.
_EDGES = tuple(0.00025 * 2 ** (i / 4) for i in range(76))
_QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True, slots=True)
class Answer:
    """One answered request, as the history counts it."""

    tier: Tier | None  # None: refused with a 4xx before any answer (an error, in no tier)
    model: str
    namespace: str
    latency: float  # seconds to the complete answer (streams: to their end)
    ttft: float | None = None  # streams: seconds to the first event
    status: int = 200  # 400 and above: an error (``errors``); 4xx are left out of the latency


@dataclass(frozen=True, slots=True)
class RecentHit:
    """A semantic hit (``accepted``) or a guard rejection, for the dashboard's table.

    ``question`` / ``stored`` are the texts, or their digests when texts are hidden
    (``gateway.texts.Texts.describe``).
    """

    at: float
    accepted: bool
    model: str
    namespace: str
    question: str
    stored: str
    similarity: float
    score: float | None  # the verifier's probability, when it ran
    reason: str  # "ok" or the guard's rejection reason
    age: float | None  # seconds the stored answer had been cached
    entry_id: int


@dataclass(slots=True)
class _Point:
    start: float
    tiers: Counter[str] = field(default_factory=Counter)
    by_model: Counter[tuple[str, str]] = field(default_factory=Counter)
    by_namespace: Counter[tuple[str, str]] = field(default_factory=Counter)
    errors: int = 0
    latency: dict[str, list[int]] = field(default_factory=dict)  # "hit"/"miss"/"ttft" -> bins
    saved: Counter[str] = field(default_factory=Counter)  # ledger deltas (tokens, usd)
    gauges: dict[str, float] = field(default_factory=dict)


class History:
    """The last ``points`` intervals of counters, and the last ``recent`` semantic verdicts."""

    def __init__(
        self,
        interval: float = 10.0,
        points: int = 360,
        *,
        recent: int = 50,
        gauges: Callable[[], dict[str, float]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.interval = interval
        self._points: deque[_Point] = deque(maxlen=points)
        self._hits: deque[RecentHit] = deque(maxlen=recent)
        self._rejections: deque[RecentHit] = deque(maxlen=recent)
        self._gauges = gauges
        self._clock = clock
        #: The namespaces counted apart (clients name them: the first ``NAMESPACES`` seen).
        self._namespaces: set[str] = set()

    def record(self, answer: Answer) -> None:
        point = self._current()
        if answer.status >= 400:
            point.errors += 1
        if answer.tier is None:  # neither a hit, a miss nor a bypass: the hit rate leaves it out
            return
        point.tiers[answer.tier] += 1
        point.by_model[(answer.model, answer.tier)] += 1
        namespace = answer.namespace
        if namespace not in self._namespaces:
            if len(self._namespaces) < NAMESPACES:
                self._namespaces.add(namespace)
            else:
                namespace = OTHER_NAMESPACES
        point.by_namespace[(namespace, answer.tier)] += 1
        if 400 <= answer.status < 500:
            # NOTE: a request refused at once (a wrong key, an unknown model) is no miss: it
            # would pull the misses' latency down to a fraction of a millisecond. (A 5xx stays:
            # its client waited that long on a model call.)
            return
        series = "hit" if answer.tier in _HITS else "miss"
        _observe(point.latency, series, answer.latency)
        if answer.ttft is not None:
            _observe(point.latency, "ttft", answer.ttft)

    def record_saving(self, amounts: dict[str, float]) -> None:
        """Add the ledger's deltas of one answer (tokens and USD saved) to this interval."""
        self._current().saved.update({k: v for k, v in amounts.items() if v})

    def record_verdict(self, hit: RecentHit) -> None:
        (self._hits if hit.accepted else self._rejections).appendleft(hit)

    def snapshot(self, since: float | None = None) -> dict[str, Any]:
        """The points (oldest first, those starting after ``since``) and the recent verdicts."""
        self._current()
        self._sample_gauges()
        points = [p for p in self._points if since is None or p.start > since]
        return {
            "interval_s": self.interval,
            "oldest_t": self._points[0].start,  # (a reader of ``since`` drops its older points)
            "points": [_render(p) for p in points],
            "recent_hits": [_hit(h) for h in self._hits],
            "recent_rejections": [_hit(h) for h in self._rejections],
        }

    # -- helpers ---------------------------------------------------------------------------

    def _current(self) -> _Point:
        now = self._clock()
        start = math.floor(now / self.interval) * self.interval
        if not self._points or self._points[-1].start != start:
            self._points.append(_Point(start))
            self._sample_gauges()
        return self._points[-1]

    def _sample_gauges(self) -> None:
        """Read the gauges (prefix KV bytes, entries, ...) into the current point."""
        if self._gauges is None or not self._points:
            return
        point = self._points[-1]
        try:
            point.gauges = self._gauges()
        except Exception:  # a stats reader must never fail a request
            point.gauges = {}


def percentile(bins: list[int], q: float) -> float | None:
    """The ``q`` quantile (0..1) of a histogram over ``_EDGES`` (None when it is empty)."""
    total = sum(bins)
    if not total:
        return None
    rank, running = q * total, 0
    for i, count in enumerate(bins):
        running += count
        if running >= rank and count:
            return _EDGES[i] if i < len(_EDGES) else _EDGES[-1] * 2
    return _EDGES[-1]


def _observe(latency: dict[str, list[int]], series: str, seconds: float) -> None:
    bins = latency.get(series)
    if bins is None:
        bins = latency[series] = [0] * (len(_EDGES) + 1)
    bins[bisect.bisect_left(_EDGES, seconds)] += 1  # bin i: (_EDGES[i-1], _EDGES[i]]


def _render(point: _Point) -> dict[str, Any]:
    latency = {
        series: {f"p{round(q * 100)}": percentile(bins, q) for q in _QUANTILES}
        | {"count": sum(bins)}
        for series, bins in point.latency.items()
    }
    return {
        "t": point.start,
        "tiers": dict(point.tiers),
        "by_model": _nest(point.by_model),
        "by_namespace": _nest(point.by_namespace),
        "errors": point.errors,
        "latency": latency,
        "saved": {k: round(v, 6) for k, v in point.saved.items()},
        "gauges": point.gauges,
    }


def _nest(counts: Counter[tuple[str, str]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (name, tier), n in counts.items():
        out.setdefault(name, {})[tier] = n
    return out


def _hit(hit: RecentHit) -> dict[str, Any]:
    return {
        "at": hit.at,
        "accepted": hit.accepted,
        "model": hit.model,
        "namespace": hit.namespace,
        "question": hit.question,
        "stored_question": hit.stored,
        "similarity": round(hit.similarity, 4),
        "verifier_score": None if hit.score is None else round(hit.score, 4),
        "reason": hit.reason,
        "age_s": None if hit.age is None else round(hit.age, 1),
        "entry_id": str(hit.entry_id),
    }
