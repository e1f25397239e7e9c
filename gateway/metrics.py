"""Prometheus metrics, one registry per app (tests build many apps in one process)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

__all__ = ["Metrics"]

disable_created_metrics()  # the *_created series only double the scrape size

_NONE = re.compile(r"(?!)")  # matches nothing

_LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    """Counters and histograms the gateway updates, plus gauges read from live stats."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        counter = functools.partial(Counter, registry=r)
        self.requests = counter(
            "cachegate_requests",
            "Requests by route, model, cache outcome (x-cache) and HTTP status.",
            ["route", "model", "cache", "status"],
        )
        self.latency = Histogram(
            "cachegate_request_duration_seconds",
            "Time to the response body (streams: to their first event), by route and cache outcome.",
            ["route", "cache"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_retries = counter(
            "cachegate_upstream_retries",
            "Upstream retries before the first byte.",
            ["model", "why"],
        )
        self.saved_tokens = counter(
            "cachegate_saved_completion_tokens",
            "Completion tokens answered from the response cache instead of a model.",
            ["model"],
        )
        self.stream_errors = counter(
            "cachegate_stream_errors",
            "Streams that ended without [DONE]: an error event (its code), client_disconnected or "
            "client_stuck.",
            ["route", "model", "code"],
        )
        self._audit_counters(counter)
        self.coalesced = counter(
            "cachegate_coalesced_requests",
            "Misses answered with the answer of an identical request that was in flight.",
            ["model"],
        )

    def _audit_counters(self, counter: Callable[..., Counter]) -> None:
        """The semantic audit's counters (gateway/audit.py)."""
        self.semantic_audits = counter(
            "cachegate_semantic_audits",
            "Audited semantic hits by verdict: ok, wrong (the fresh answer differs from the "
            "served one), error (the audit's model call failed), dropped (too many running).",
            ["model", "verdict"],
        )
        self.semantic_audit_controls = counter(
            "cachegate_semantic_audit_controls",
            "Audit controls by verdict (an audited request asked twice, its two answers "
            "compared): ok, wrong (the judge's false alarm), error (the second call failed).",
            ["model", "verdict"],
        )
        self.semantic_tightenings = counter(
            "cachegate_semantic_tightenings",
            "Steps auto-tighten took: a (tenant, model, namespace) whose audits showed more wrong "
            "hits than cache.semantic.max_wrong_rate got a stricter verifier threshold.",
            ["model"],
        )

    def gauges(
        self,
        name: str,
        help_text: str,
        read: Callable[[], dict[str, float]],
        counters: re.Pattern[str] = _NONE,
    ) -> None:
        """Export ``read()`` (a flat name → value dict) as gauges ``{name}_{key}``.

        Keys that ``counters`` matches only ever go up: they become counters
        ``{name}_{key}_total`` (so ``rate()`` and metadata-aware tools treat them right).
        """
        self.registry.register(_Gauges(name, help_text, "", lambda: {"": read()}, counters))

    def labelled_gauges(
        self,
        name: str,
        help_text: str,
        label: str,
        read: Callable[[], dict[str, dict[str, float]]],
        counters: re.Pattern[str] = _NONE,
    ) -> None:
        """Export ``read()`` ({label value: flat stats}) as ``{name}_{key}{label=...}``."""
        self.registry.register(_Gauges(name, help_text, label, read, counters))

    def histogram(
        self,
        name: str,
        help_text: str,
        read: Callable[[], tuple[Sequence[float], Sequence[int], int, float] | None],
    ) -> None:
        """Export a histogram kept elsewhere: ``read()`` gives ``(bounds, cumulative counts
        per bound, count, sum)``, or None while there is nothing to report."""
        self.registry.register(_Histogram(name, help_text, read))

    def ledger(self, ledger: Any) -> None:
        """Export the usage ledger (``gateway.ledger``) by tenant and model.

        Counters ``cachegate_ledger_{field}_total{tenant, model}``, and the gauge
        ``cachegate_ledger_saved_usd`` (net of cache-write premiums, so it can go down).
        """
        self.registry.register(_LedgerCollector(ledger))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def on_retry(self, model: str, why: str) -> None:
        self.upstream_retries.labels(model, why.split(":")[0]).inc()


class _LedgerCollector(Collector):
    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger

    def collect(self) -> Iterator[Metric]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for (tenant, model), row in sorted(self._ledger.series().items()):
            for field, value in sorted(row.items()):
                family = families.get(field)
                if family is None:
                    # NOTE: saved_usd is net of cache-write premiums: it can go down
                    kind = GaugeMetricFamily if field == "saved_usd" else CounterMetricFamily
                    family = families[field] = kind(
                        f"cachegate_ledger_{field}",
                        f"Usage ledger: {field.replace('_', ' ')}, by tenant and model.",
                        labels=["tenant", "model"],
                    )
                family.add_metric([tenant, model], value)
        yield from families.values()

    def describe(self) -> Iterator[Metric]:
        return iter(())


class _Histogram(Collector):
    def __init__(
        self,
        name: str,
        help_text: str,
        read: Callable[[], tuple[Sequence[float], Sequence[int], int, float] | None],
    ) -> None:
        self._name, self._help, self._read = name, help_text, read

    def collect(self) -> Iterator[Metric]:
        read = self._read()
        if read is None:
            return
        bounds, counts, count, total = read
        buckets = [(repr(float(b)), float(c)) for b, c in zip(bounds, counts, strict=True)]
        yield HistogramMetricFamily(
            self._name, self._help, buckets=[*buckets, ("+Inf", float(count))], sum_value=total
        )

    def describe(self) -> Iterator[Metric]:
        return iter(())


class _Gauges(Collector):
    """Gauges (and counters) read from live stats, optionally with one label."""

    def __init__(
        self,
        name: str,
        help_text: str,
        label: str,
        read: Callable[[], dict[str, dict[str, float]]],
        counters: re.Pattern[str],
    ) -> None:
        self._name, self._help, self._label = name, help_text, label
        self._read, self._counters = read, counters

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        labels = [self._label] if self._label else []
        for label_value, values in sorted(self._read().items()):
            for key, value in sorted(values.items()):
                if not isinstance(value, int | float) or isinstance(value, bool):
                    continue
                family = families.get(key)
                if family is None:
                    kind = (
                        CounterMetricFamily if self._counters.fullmatch(key) else GaugeMetricFamily
                    )
                    family = families[key] = kind(
                        f"{self._name}_{key}", f"{self._help} ({key})", labels=labels
                    )
                family.add_metric([label_value] if labels else [], value)
        yield from families.values()

    def describe(self) -> Iterator[Metric]:
        return iter(())
