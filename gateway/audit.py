"""The semantic audit, live: a sampled share of semantic hits is asked again of its model.

The tier walk samples a semantic hit (``cache.semantic.audit_rate``) and attaches an
:class:`AuditJob` to its reply; the HTTP layer hands the job to the :class:`Auditor` once the
response has been sent, so an audit never delays the client whose hit it checks, and its
scoring is never queued ahead of another request's lookup (see ``judge``). The auditor then, in
the background:

    ask      the same canonical request, to the same backend, with the same credentials the
             client's request would have used (the gateway's key for the model, or the client's
             own key it forwards), as one non-streamed call with nothing stored: the call goes to
             the backend directly, past the response cache, and a Responses request is sent
             with ``store: false`` (the upstream keeps no response object either)
    judge    the fresh answer against the served one (semantic.audit.Audit.judge), on the
             verifier's or the embedder's background path: queued apart from the live
             lookups' pairs and texts and scored alone, only while none of theirs waits
    control  with ``cache.semantic.audit_controls`` (the default), a judged audit's request
             asked once more and its two fresh answers judged against each other: the
             judge's false-alarm rate, which the estimate is net of (semantic.audit)
    count    ``cachegate_semantic_audits_total{model,verdict}`` and
             ``cachegate_semantic_audit_controls_total{model,verdict}``, the estimate per
             tenant, model and namespace (/admin/stats ``cache.audit``), and the calls' cost in
             the usage ledger (``audit_*`` fields: spending, never savings)

With ``cache.semantic.auto_tighten`` on, every judged verdict also feeds a
:class:`semantic.audit.Tightening`: a scope (tenant, model, namespace: :func:`audit_scope`)
whose audits show, window by window, more wrong hits than ``max_wrong_rate`` gets a stricter
verifier score threshold (:meth:`Auditor.tightened`, read by the pipeline at every lookup),
counted in ``cachegate_semantic_tightenings_total{model}`` and logged. Tenants never share a
scope: one tenant's wrong hits (or its reset) leave every other tenant's threshold as it was,
as they never share a cached answer either. A job carries the generation of the threshold its
hit was served under: an audit that ends after the scope stepped up (or was reset) counts in
the estimate, never in the new threshold's window.

At most ``audit_max_concurrency`` audits run at once; a hit sampled while they all run is
counted ``dropped`` rather than queued (an audit is worth less than the capacity it takes from
live traffic). Shutdown cancels the running audits.

    >>> auditor = Auditor(Audit(rate=0.01), cache, metrics, ledger, max_concurrency=2)
    >>> if auditor.sample(): reply.audit = AuditJob(...)       # pipeline.py
    >>> auditor.submit(reply.audit)                            # api.py, after the send
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from semantic.audit import CONTROLS, VERDICTS, Audit, AuditScope, Tightened, Tightening, Verdict

from .canonical import Adapter, Answer, GatewayRequest
from .ledger import Ledger, usage_of
from .metrics import Metrics

if TYPE_CHECKING:
    from semantic.cache import ResponseCache

__all__ = ["AuditJob", "Auditor", "audit_scope"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AuditJob:
    """One served semantic hit to check against a fresh answer of its model."""

    #: The request as its backend sees it, made non-streamed and unstored (see the module).
    request: GatewayRequest
    adapter: Adapter
    #: The answer that was served (the stored entry's response).
    served: dict[str, Any]
    #: The model call: the backend's ``complete`` with the original request's credentials.
    ask: Callable[[], Awaitable[Answer]]
    #: The ledger account its cost goes to: the tenant its request is booked under (before
    #: routing keys a tenant by the client's own key, ``request.tenant`` after)
    account: str
    #: The generation of the scope's threshold at the lookup that found the hit
    #: (:meth:`Auditor.tightened`): only that threshold's window takes its verdict.
    generation: int


class Auditor:
    """Runs audits in the background, bounded, and counts their verdicts."""

    def __init__(
        self,
        audit: Audit,
        cache: ResponseCache,
        metrics: Metrics,
        ledger: Ledger,
        *,
        max_concurrency: int = 2,
        tightening: Tightening | None = None,
        models: Iterable[str] = (),
        controls: bool = True,
    ) -> None:
        # NOTE: every model's series from the start, at 0: one that first appears at 1 loses
        # that increment to rate() and increase(), and wrong / (ok + wrong) has no value
        # while ok is missing (every audit wrong so far: the alarm itself)
        for model in models:
            for verdict in VERDICTS:
                metrics.semantic_audits.labels(model, verdict)
            for verdict in CONTROLS if controls else ():
                metrics.semantic_audit_controls.labels(model, verdict)
            if tightening is not None:
                metrics.semantic_tightenings.labels(model)
        self.audit = audit
        self.tightening = tightening
        self.controls = controls
        self._cache = cache
        self._metrics = metrics
        self._ledger = ledger
        self._max = max_concurrency
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def sample(self) -> bool:
        """Whether to audit the semantic hit being served."""
        return not self._closed and self.audit.sample()

    def submit(self, job: AuditJob) -> bool:
        """Start ``job`` in the background (call it after the response is sent); False when it
        was dropped because ``max_concurrency`` audits are running already."""
        if self._closed:
            return False
        if len(self._tasks) >= self._max:
            self._count(job, "dropped")
            return False
        task = asyncio.get_running_loop().create_task(self._run(job), name="semantic-audit")
        self._tasks.add(task)  # NOTE: the loop keeps only weak references to tasks
        task.add_done_callback(self._tasks.discard)
        return True

    def tightened(self, request: GatewayRequest) -> Tightened:
        """The verifier score threshold auto-tighten set for the request's scope (None: the
        configured one, or auto-tighten is off) with its generation, for the hit's job."""
        if self.tightening is None:
            return Tightened()
        return self.tightening.current(audit_scope(request))

    @property
    def running(self) -> int:
        return len(self._tasks)

    async def close(self) -> None:
        """Cancel the running audits (at shutdown, before the backends close)."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        """``cache.audit`` of /admin/stats: the sampling rate and, per tenant, model and
        namespace, the verdicts with the estimated false-hit rate and its 95% interval."""
        # NOTE: a tightened scope is shown even when its estimate went (past MAX_SCOPES): its
        # threshold is still in force, and this is where an operator finds it
        tightened = self.tightening.tightened() if self.tightening is not None else []
        estimates = self.audit.stats(also=tightened)
        out: dict[str, Any] = {
            "rate": self.audit.rate,
            "running": len(self._tasks),
            "max_concurrency": self._max,
            "comparison": "verifier" if self._cache.verifier is not None else "embedding",
            "controls": self.controls,
            "estimates": estimates,
        }
        if (tightening := self.tightening) is not None:
            out["auto_tighten"] = {"bound": tightening.bound, "window": tightening.window}
            for row in estimates:
                scope = AuditScope(row["tenant"], row["model"], row["namespace"])
                row["tightened"] = tightening.state(scope)
        return out

    # -- helpers ---------------------------------------------------------------------------

    async def _run(self, job: AuditJob) -> None:
        fresh = await self._ask(job)
        if fresh is None:
            self._count(job, "error")
            return
        verdict = await self._judge(job, job.adapter.text(job.served), fresh)
        self._count(job, verdict)
        if self.controls and verdict != "error":
            # NOTE: the same request again: its two answers can only differ as rewordings (or
            # as a model that answers differently from call to call), which is what the judge
            # mistakes for a wrong hit; the estimate is net of it (semantic.audit)
            again = await self._ask(job)
            control = "error" if again is None else await self._judge(job, fresh, again)
            self.audit.record_control(audit_scope(job.request), control)
            self._metrics.semantic_audit_controls.labels(job.request.model, control).inc()

    async def _ask(self, job: AuditJob) -> str | None:
        """The model's answer to the audited request now (None: the call failed, or its answer
        cannot be compared), its cost booked in the ledger."""
        request = job.request
        try:
            answer = await job.ask()
        except Exception as exc:  # an APIError (5xx, timeout, ...) or a broken backend
            log.warning("semantic audit of %s: the model call failed: %s", request.model, exc)
            return None
        usage = answer.body.get("usage")
        self._ledger.record_audit(job.account, request.model, usage_of(usage))
        if not (answer.lossless and job.adapter.complete(request, answer.body)):
            return None  # e.g. a content filter: nothing to compare with
        return job.adapter.text(answer.body)

    async def _judge(self, job: AuditJob, first: str, second: str) -> Verdict:
        try:
            return await self.audit.judge(
                first, second, verifier=self._cache.verifier, embedder=self._cache.embedder
            )
        except Exception:
            log.exception("semantic audit of %s: judging the answers failed", job.request.model)
            return "error"

    def _count(self, job: AuditJob, verdict: Verdict) -> None:
        scope = audit_scope(job.request)
        self.audit.record(scope, verdict)
        self._metrics.semantic_audits.labels(scope.model, verdict).inc()
        # NOTE: a hit served under the request's own threshold (x-cache-threshold) says
        # nothing of the configured one: it counts in the estimate, not toward tightening
        if self.tightening is not None and job.request.control.threshold is None:
            self._tighten(self.tightening, scope, verdict, job.generation)

    def _tighten(
        self, tightening: Tightening, scope: AuditScope, verdict: Verdict, generation: int
    ) -> None:
        cache = self._cache
        calibration = cache.verifier.calibration if cache.verifier is not None else None
        if calibration is None or cache.score_threshold is None:
            return  # the verifier is not loaded: no calibrated threshold to step from
        stepped = tightening.observe(
            scope, verdict, generation, base=cache.score_threshold, stricter=calibration.stricter
        )
        if stepped is not None:
            self._metrics.semantic_tightenings.labels(scope.model).inc()
            log.warning(
                "auto-tighten: audits of tenant %r, model %s, namespace %r show more than "
                "%.2g%% wrong hits; its verifier score threshold is now %.4f%s", scope.tenant,
                scope.model, scope.namespace, 100 * tightening.bound, stepped,
                " (no semantic hits)" if stepped >= 1.0 else "",
            )  # fmt: skip


def audit_scope(request: GatewayRequest) -> AuditScope:
    """Where a request's audits count and its threshold is tightened: its tenant (the one its
    cache key holds: ``request`` as routed), model and namespace."""
    return AuditScope(request.tenant, request.model, request.control.namespace)
