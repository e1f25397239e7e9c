"""The gateway's live parts, built from the config and opened/closed by the app's lifespan."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from semantic.audit import Audit, Tightening
from semantic.cache import CacheSettings, ResponseCache, SemanticSettings
from semantic.keys import ContextMode
from semantic.store import TENANTS_SHOWN, DiskStore, EntryStore, TenantEntries

from .admission import WAIT_BUCKETS, Admission
from .anthropic import AnthropicBackend
from .audit import Auditor
from .auth import AllowedHosts, KeyRing, bearer, foreign_origin
from .backend import Backend
from .config import AnthropicModelConfig, Config, ConfigError, LocalModelConfig, OpenAIModelConfig
from .connections import Connections, StreamWatch
from .errors import APIError
from .history import History
from .ledger import Ledger
from .lograte import RateLimitedLog
from .messages import MessagesAdapter
from .messages_bridge import MESSAGES
from .metrics import Metrics
from .pipeline import Pipeline
from .requests import unpartitioned
from .responses import ResponsesAdapter
from .stored import ResponseStore
from .texts import Texts, load_salt
from .tracing import Tracing
from .upstream import ReplicatedBackend, UpstreamBackend

__all__ = ["Runtime", "semantic_settings"]

log = logging.getLogger(__name__)


#: Builds the backend of a ``local`` model (set by gateway.local when it is importable).
LocalFactory = Callable[[str, LocalModelConfig, Config], Backend]


@dataclass
class Runtime:
    """Everything a request needs: config, backends, response cache, pipeline, metrics."""

    config: Config
    backends: dict[str, Backend]
    cache: ResponseCache | None
    pipeline: Pipeline
    metrics: Metrics
    #: Requests being answered and streams being sent (disconnects, watchdog, shutdown).
    connections: Connections
    #: The Responses API adapter, with the responses this gateway stored.
    responses: ResponsesAdapter
    #: The Messages API adapter, keeping who owns each container in the responses' store.
    messages: MessagesAdapter
    started: float = field(default_factory=time.time)
    #: This process among a deployment's replicas (/admin/stats, /admin/history, the dashboard).
    replica: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    keys: KeyRing = field(default_factory=lambda: KeyRing({}, None))
    #: The dashboard's history ring and the usage ledger (gateway.observe feeds both).
    history: History = field(default_factory=History)
    ledger: Ledger = field(default_factory=Ledger)
    #: OpenTelemetry traces (None: tracing.enabled is false).
    tracing: Tracing | None = None
    #: The semantic audit (None: no semantic tier, or cache.semantic.audit_rate is 0).
    auditor: Auditor | None = None
    #: Admission by event-loop lag (None: server.admission_max_lag_ms is null).
    admission: Admission | None = None
    #: A refused ``Host`` (a name left out of server.allowed_hosts, a proxy's), logged at most
    #: once a minute: a page that tries again and again must not fill the log.
    refused_hosts: RateLimitedLog = field(default_factory=lambda: RateLimitedLog(log))
    #: How the admin views show users' texts (admin.show_text; hidden: digests keyed with the
    #: data directory's secret, read at ``start``).
    texts: Texts = field(default_factory=lambda: Texts(show=False))

    @classmethod
    def build(
        cls,
        config: Config,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        local_factory: LocalFactory | None = None,
        worker: bool = False,
    ) -> Runtime:
        """Wire the parts together (nothing is opened or loaded until ``start``).

        ``worker``: serve only the ``local`` models, with no response cache (``cachegate worker``).
        """
        metrics = Metrics()
        backends = _backends(config, metrics, transport, local_factory, worker)
        cache: ResponseCache | None = None
        if not worker and config.cache.enabled:
            store = _entry_store(config)
            cache = ResponseCache(
                store,
                _cache_settings(config),
                semantic_settings(config),
            )
            _cache_metrics(metrics, cache, backends if config.cache.coalesce.enabled else ())
        metrics.labelled_gauges("cachegate_backend", "Model backend", "model",
                                lambda: _backend_stats(backends), _BACKEND_COUNTERS)  # fmt: skip
        connections = Connections(config.server.stream_idle_timeout)
        observers = _observers(config, cache, backends, metrics)
        auditor = _auditor(config, cache, metrics, observers["ledger"])
        admission = _admission(config, metrics)
        pipeline = _pipeline(config, backends, cache, auditor, admission)
        keys = KeyRing.from_config(config)
        responses = ResponsesAdapter(ResponseStore(), keyed=bool(config.auth.keys))
        return cls(
            config,
            backends,
            cache,
            pipeline,
            metrics,
            connections,
            responses,
            MESSAGES.owned(responses.store, responses.owner),
            keys=keys,
            auditor=auditor,
            admission=admission,
            texts=Texts(config.admin.show_text),
            **observers,
        )

    async def start(self) -> None:
        Path(self.config.data_dir).mkdir(parents=True, exist_ok=True)
        if self.cache is not None:  # (texts are shown of its entries only)
            self.texts = Texts(self.texts.show, load_salt(Path(self.config.data_dir)))
            await self.cache.start()
        for backend in self.backends.values():
            await backend.start()
        self.connections.start()

    async def close(self) -> None:
        self.connections.stop()
        await self.pipeline.drain()  # cache writes in progress (the cache closes below)
        if self.auditor is not None:  # (audits use the backends: they stop first)
            await self.auditor.close()
        await asyncio.gather(*(b.close() for b in self.backends.values()), return_exceptions=True)
        if self.cache is not None:
            await self.cache.close()
        if self.tracing is not None:
            self.tracing.close()  # (exports the spans still batched)

    @property
    def streams(self) -> set[StreamWatch]:
        """Streams being sent to clients right now."""
        return self.connections.streams

    def abort_in_flight(self) -> int:
        """End every request still waiting for a model (see ``Connections.abort_in_flight``)."""
        return self.connections.abort_in_flight()

    @functools.cached_property
    def hosts(self) -> AllowedHosts:
        """The host names a browser may reach this gateway by (``server.allowed_hosts``)."""
        return AllowedHosts.from_server(self.config.server)

    def authenticate(self, authorization: str | None, headers: Mapping[str, str]) -> str:
        """The tenant of a request; raises 401 when keys are configured and this one is not.

        With no keys, a browser's request for a web page other than the gateway's own is a
        403 (``refuse_web_pages``): any page could otherwise spend the upstream keys.
        """
        if not self.keys.has_tenants:
            self.refuse_web_pages(headers, "The API routes of a gateway without keys")
            return "default"
        token = bearer(authorization)
        tenant = self.keys.tenant(token)
        if tenant is None:
            raise APIError(
                401,
                "Incorrect API key provided." if token else "You didn't provide an API key.",
                code="invalid_api_key",
            )
        return tenant

    def refuse_web_pages(self, headers: Mapping[str, str], routes: str) -> None:
        """Raise the 403 for a request that a web page other than the gateway's own may
        have sent to ``routes``, which a browser on the operator's machine reaches with no key:
        one naming a host not in ``server.allowed_hosts`` (``host_not_allowed``: a page whose
        name was pointed at this address, DNS rebinding), or one from a page of another origin
        (``cross_origin``, see ``foreign_origin``).
        """
        host = headers.get("host")
        if not self.hosts.allows(host):
            shown = (host or "")[:100]  # (a header of up to max_header_bytes)
            self.refused_hosts.warning("host", "refused a request for host %r: not in "
                                   "server.allowed_hosts", shown)  # fmt: skip
            raise APIError(403, f"{routes} answer no request for the host {shown!r}: it is not "
                           "in server.allowed_hosts (list there the names this gateway is "
                           "reached by).", code="host_not_allowed")  # fmt: skip
        if foreign_origin(headers, self.hosts):
            raise APIError(403, f"{routes} answer no web page of another origin than the "
                           "gateway's own.", code="cross_origin")  # fmt: skip

    async def readiness(self) -> dict[str, Any]:
        # NOTE: each backend's stall is read once, and whether it is ready follows from that
        # read: read twice (ready, then why stalled), a step that crossed the bound or ended
        # in between made a 200 "ready" with "stalled", or a 503 "loading" for a sound engine
        stalled = {name: why for name, b in self.backends.items() if (why := b.stalled)}
        models = {
            name: await b.ready() and name not in stalled for name, b in self.backends.items()
        }
        # (null: no response cache to wait for: a worker's, or cache.enabled: false; it said
        # true, as if a worker had one)
        cache: bool | str | None = None if self.cache is None else self.cache.ready
        if cache is True and self.cache is not None and not self.cache.available:
            # NOTE: still ready (requests are answered, as misses; failing every replica's
            # readiness at once would take the whole deployment down with Redis); it said true
            cache = "degraded"
        failed = {name: failure for name, b in self.backends.items() if (failure := b.failure)}
        ready = all(models.values()) and cache is not False
        state: dict[str, Any] = {"ready": ready, "models": models, "cache": cache}
        if failed:
            state["failed"] = failed
        if stalled:  # (a model's engine stuck in one step: see LocalBackend.stalled)
            state["stalled"] = stalled
        return state

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "replica": self.replica,
            "uptime_s": round(time.time() - self.started, 1),
            "models": list(self.backends),
            "cache": self._cache_stats(),
            "ledger": self.ledger.stats(),
            "priced": sorted(self.config.prices),  # (the others' money is unknown: not $0)
        }
        if self.admission is not None:
            out["admission"] = dataclasses.asdict(self.admission.stats())
        for name, backend in self.backends.items():
            if (backend_stats := backend.stats()) is not None:
                out.setdefault("backends", {})[name] = backend_stats
        return out

    def _cache_stats(self) -> dict[str, Any] | None:
        if self.cache is None:
            return None
        stats = self.cache.stats()
        if self.config.cache.max_entries_per_tenant is not None:  # (not a metric: one per tenant)
            stats.update(_tenants_shown(self.cache.tenant_entries()))
        if self.auditor is not None:
            stats["audit"] = self.auditor.stats()
        return stats


#: Tenants whose entry counts ``/admin/stats`` lists by name (those holding the most).
MAX_TENANTS_SHOWN = TENANTS_SHOWN


def _tenants_shown(counts: TenantEntries) -> dict[str, Any]:
    """``entries_by_tenant`` (the :data:`MAX_TENANTS_SHOWN` tenants holding the most entries),
    and the rest together in ``entries_by_other_tenants``."""
    out: dict[str, Any] = {"entries_by_tenant": dict(counts.top)}
    if counts.tenants > len(counts.top):
        rest = counts.entries - sum(counts.top.values())
        out["entries_by_other_tenants"] = {
            "tenants": counts.tenants - len(counts.top),
            "entries": rest,
        }
    return out


def _admission(config: Config, metrics: Metrics) -> Admission | None:
    """The door of the API routes (gateway.admission), and its metrics."""
    if config.server.admission_max_lag_ms is None:
        return None
    admission = Admission(config.server.admission_max_lag_ms / 1000)

    def read() -> dict[str, float]:
        stats = admission.stats()
        return {"loop_lag_seconds": stats.loop_lag_seconds, "loop_busy": stats.loop_busy,
                "rate": stats.rate,
                "queued": stats.queued, "admitted": stats.admitted}  # fmt: skip

    metrics.gauges("cachegate_admission", "Admission by event-loop lag", read,
                   re.compile("admitted"))  # fmt: skip
    metrics.histogram(
        "cachegate_admission_wait_seconds",
        "Time requests waited at the door while the event loop ran late (those that waited).",
        lambda: (WAIT_BUCKETS, (s := admission.stats()).wait_buckets, s.waited, s.wait_seconds),
    )
    return admission


def _auditor(
    config: Config, cache: ResponseCache | None, metrics: Metrics, ledger: Ledger
) -> Auditor | None:
    """The semantic audit, when there is a semantic tier and ``audit_rate`` is above 0.

    NOTE: the sampler is seeded, so a run is reproducible (which hits of a process get audited
    depends only on their order, never on their content).
    """
    semantic = config.cache.semantic
    if cache is None or not semantic.enabled or semantic.audit_rate == 0:
        return None
    audit = Audit(semantic.audit_rate, seed=0)
    tightening = None
    if semantic.auto_tighten:
        assert semantic.max_wrong_rate  # (checked by the config)
        tightening = Tightening(semantic.max_wrong_rate)
    return Auditor(
        audit, cache, metrics, ledger,
        max_concurrency=semantic.audit_max_concurrency, tightening=tightening,
        models=config.models, controls=semantic.audit_controls,
    )  # fmt: skip


def _observers(
    config: Config, cache: ResponseCache | None, backends: dict[str, Backend], metrics: Metrics
) -> dict[str, Any]:
    """The usage ledger (exported in /metrics), the history ring and the tracing, if on."""
    ledger = Ledger(config.prices)
    metrics.ledger(ledger)
    history = History(
        config.admin.history_interval,
        config.admin.history_points,
        gauges=lambda: _history_gauges(cache, backends),
    )
    tracing = Tracing(config.tracing) if config.tracing.enabled else None
    return {"ledger": ledger, "history": history, "tracing": tracing}


def _history_gauges(cache: ResponseCache | None, backends: dict[str, Backend]) -> dict[str, float]:
    """What the dashboard plots as levels: cached answers, and each model's prefix KV stats
    (bytes and budget, hit and queried tokens, evictions, disk tier)."""
    out = {"cache_entries": float(cache.stats()["entries"])} if cache is not None else {}
    for name, stats in _backend_stats(backends).items():
        out.update({f"{name}\x1f{k}": v for k, v in stats.items() if k.startswith("prefix_")})
    return out


def _pipeline(
    config: Config,
    backends: dict[str, Backend],
    cache: ResponseCache | None,
    auditor: Auditor | None,
    admission: Admission | None,
) -> Pipeline:
    thresholds = {
        name: m.semantic_threshold
        for name, m in config.models.items()
        if m.semantic_threshold is not None
    }
    return Pipeline(
        backends,
        cache,
        context_turns=config.cache.semantic.context_turns,
        context=_context_mode(config),
        semantic_thresholds=thresholds,
        coalesce=config.cache.coalesce,
        auditor=auditor,
        overloaded=admission.limiting if admission is not None else None,
    )


def _backends(
    config: Config,
    metrics: Metrics,
    transport: httpx.AsyncBaseTransport | None,
    local_factory: LocalFactory | None,
    worker: bool,
) -> dict[str, Backend]:
    """One backend per configured model (a worker: only the ``local`` ones)."""
    backends: dict[str, Backend] = {}
    for name, model in config.models.items():
        if worker and not isinstance(model, LocalModelConfig):
            continue
        options: dict[str, Any] = {
            "forward_client_auth": not config.auth.keys,
            # (several keys of one tenant, e.g. while one is rotated, are still one tenant)
            "one_tenant": len({key.tenant for key in config.auth.keys}) <= 1,
            "transport": transport,
            "on_retry": metrics.on_retry,
        }
        if isinstance(model, AnthropicModelConfig):
            backends[name] = AnthropicBackend(name, model, **options)
        elif isinstance(model, OpenAIModelConfig):
            backends[name] = (
                ReplicatedBackend(name, model, **options)
                if len(model.replicas) > 1
                else UpstreamBackend(name, model, **options)
            )
        else:
            if local_factory is None:
                from .local import LocalBackend

                local_factory = LocalBackend.from_config
            backends[name] = local_factory(name, model, config)
    if not backends:
        raise ConfigError("no model to serve: a worker needs at least one `backend: local` model")
    return backends


def _context_mode(config: Config) -> ContextMode:
    """Earlier turns leave the exact scope only when a verifier judges them."""
    semantic = config.cache.semantic
    judged = semantic.verifier != "off" and semantic.verifier_role == "decide"
    return "verify" if semantic.context == "verify" and judged else "exact"


def _cache_settings(config: Config) -> CacheSettings:
    cache = config.cache
    return CacheSettings(
        exact=cache.exact.enabled, ttl=cache.ttl, sweep_interval=cache.sweep_interval
    )


def semantic_settings(config: Config) -> SemanticSettings | None:
    """The response cache's semantic tier as ``config`` sets it (None: off)."""
    semantic = config.cache.semantic
    if not semantic.enabled:
        return None
    index_path = None
    if config.cache.backend == "disk":  # a shared (Redis) store rebuilds the index from Redis
        index_path = Path(config.data_dir) / "response-cache" / "vector-index.npz"
    return SemanticSettings(
        threshold=semantic.threshold,
        guard=semantic.guard,
        guard_min_score=semantic.guard_min_score,
        verifier=None if semantic.verifier == "off" else semantic.verifier,
        verifier_role=semantic.verifier_role,
        verifier_threshold=semantic.verifier_threshold,
        max_wrong_rate=semantic.max_wrong_rate,
        embedding_model=None if semantic.embedding_model == "bundled" else semantic.embedding_model,
        embedder_backend=semantic.embedder_backend,
        verifier_backend=semantic.verifier_backend,
        export_dir=None
        if semantic.embedder_export_dir is None
        else Path(semantic.embedder_export_dir),
        hnsw_threshold=semantic.hnsw_threshold,
        hnsw_ef_search=semantic.hnsw_ef_search,
        index_path=index_path,
        max_wait=None if semantic.max_wait_ms is None else semantic.max_wait_ms / 1000,
        # follow-ups that share their question differ only in context: score a few
        candidates=3 if _context_mode(config) == "verify" else 1,
        context_pair=semantic.context_pair,
    )


def _cache_metrics(metrics: Metrics, cache: ResponseCache, coalescing: Iterable[str]) -> None:
    """The response cache's series; ``coalescing``: the models whose coalesced requests are
    counted, each at 0 from the start (one that appears at 1 loses it to increase())."""
    for model in coalescing:
        metrics.coalesced.labels(model)

    def flat() -> dict[str, float]:  # (semantic_skipped: the labelled series below)
        return _flat({k: v for k, v in cache.stats().items() if k != "semantic_skipped"})

    metrics.gauges("cachegate_cache", "Response cache", flat, _CACHE_COUNTERS)
    metrics.labelled_gauges(  # cachegate_semantic_skipped_total{reason="overload"}
        "cachegate_semantic",
        "Semantic steps skipped",
        "reason",
        lambda: {r: {"skipped": n} for r, n in cache.stats()["semantic_skipped"].items()},
        re.compile("skipped"),
    )
    metrics.labelled_gauges(  # cachegate_embedder_backend_info{backend="onnx"} 1
        "cachegate_embedder",
        "The embedder's forward pass in use",
        "backend",
        lambda: {} if cache.embedder is None else {cache.embedder.backend: {"backend_info": 1}},
    )
    metrics.labelled_gauges(  # cachegate_verifier_backend_info{backend="onnx"} 1
        "cachegate_verifier",
        "The verifier's model call in use",
        "backend",
        lambda: {} if cache.verifier is None else {cache.verifier.backend: {"backend_info": 1}},
    )
    metrics.histogram(
        "cachegate_embedder_wait_seconds",
        "Time questions waited in the embedder's queue for a worker (lookups and stores).",
        lambda: _embedder_waits(cache),
    )


def _embedder_waits(
    cache: ResponseCache,
) -> tuple[Sequence[float], Sequence[int], int, float] | None:
    if cache.embedder is None:
        return None
    from semantic.embedder import WAIT_BUCKETS  # (loaded with the embedder)

    stats = cache.embedder.stats()
    return WAIT_BUCKETS, stats.wait_buckets, stats.waits, stats.wait_seconds


def _entry_store(config: Config) -> EntryStore:
    cache = config.cache
    if cache.backend == "redis":
        from semantic.redis_store import RedisStore

        return RedisStore(
            cache.redis.url,
            max_entries=cache.max_entries,
            key_prefix=cache.redis.key_prefix,
            timeout=cache.redis.timeout,
            max_entries_per_tenant=cache.max_entries_per_tenant,
            tenant_of=unpartitioned,
        )
    return DiskStore(
        Path(config.data_dir) / "response-cache",
        max_entries=cache.max_entries,
        # (a client may name any x-cachegate-partition: its tenant's share bounds them all)
        max_entries_per_tenant=cache.max_entries_per_tenant,
        tenant_of=unpartitioned,
    )


#: Statistics that only go up, exported as counters (``..._total``).
_CACHE_COUNTERS = re.compile(
    r"lookups|hits_\w+|guard_rejections(_by_reason_\w+)?|stores|store_failures|evictions"
    r"|expirations|stores_superseded"
    r"|too_long_for_semantic|semantic_errors|replay_failures|store_skipped_commands|store_slow_commands"
    r"|embedder_(waits|wait_seconds|texts_encoded)"
)
_BACKEND_COUNTERS = re.compile(
    r"prefix_cache_(queried_tokens|hit_tokens|evicted_tokens|evictions)"
    r"|prefix_disk_(queries|hits|hit_tokens|served_tokens|read_errors|offered|dropped"
    r"|written_tokens|files_written|write_errors|evicted_tokens)"
    r"|kv_pool_(preemptions|copied_pages)"
    r"|prompt_caching_(requests|marks_added)"
    r"|routing_routed_\w+"
)


def _backend_stats(backends: dict[str, Backend]) -> dict[str, dict[str, float]]:
    """Per model: prefix-cache counters of local models, routing counters of replicas."""
    out = {}
    for name, backend in backends.items():
        if (stats := backend.stats()) is not None:
            out[name] = _flat(stats)
    return out


def _flat(stats: dict[str, Any], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in stats.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}_"))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[f"{prefix}{key}"] = value
    return out
