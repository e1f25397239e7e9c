"""What every answered request leaves behind: a history point, a ledger entry, a log line.

The HTTP layer calls ``observe`` once per request, when its answer is complete (a JSON body
sent, or a stream ended), with what it measured; this module decides what the dashboard's
history, the usage ledger and the semantic-verdict table learn from it::

    >>> observe(runtime, Seen(route, request_id, tenant, model, namespace, status=200,
    ...                       latency=0.004), reply)

NOTE: never raises: observability must not fail a request that was answered.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from semantic.cache import Lookup

from .config import LocalModelConfig
from .errors import TRANSIENT_4XX
from .history import Answer, RecentHit, Tier
from .ledger import Usage, usage_of

if TYPE_CHECKING:
    from .canonical import Reply
    from .runtime import Runtime
    from .tracing import RequestTrace

__all__ = ["Seen", "observe", "request_id"]

log = logging.getLogger("cachegate.requests")

_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


@dataclass(frozen=True, slots=True)
class Seen:
    """What the HTTP layer measured about one request."""

    route: str
    request_id: str
    tenant: str
    model: str  # "" when the request named no configured model
    namespace: str
    status: int
    latency: float  # seconds to the complete answer (streams: to their end)
    ttft: float | None = None  # streams: seconds to the first event
    trace: RequestTrace | None = None  # its OpenTelemetry span, when tracing is on
    upstream_id: str = ""  # the provider's x-request-id of a fresh upstream answer
    upstream_status: int | None = None  # the status of the upstream's own error, if it sent one


def request_id(incoming: str | None) -> str:
    """``x-request-id``: the client's own when it sent a sane one, else a fresh one."""
    if incoming and _CLIENT_ID.fullmatch(incoming):
        return incoming
    return "req_" + secrets.token_hex(12)


def observe(runtime: Runtime, seen: Seen, reply: Reply | None) -> None:
    """Count one answered request (``reply`` None: it failed before an answer; a stream's
    once it has ended, its ``outcome`` saying what its model call cost; a reply with neither
    body nor stream: its client left before the answer of a model call that ran)."""
    try:
        _observe(runtime, seen, reply)
    except Exception:  # NOTE: see the module docstring
        log.exception("observing request %s failed", seen.request_id)


def _observe(runtime: Runtime, seen: Seen, reply: Reply | None) -> None:
    tier: Tier = "bypass" if reply is None else reply.cache
    if reply is not None and reply.coalesced:
        tier = "coalesced"
    # NOTE: a request refused with a 4xx before it had an answer (a wrong key, an unknown model,
    # a malformed body, a client that left while it waited) is in no tier of the history, only
    # in its errors: as a "bypass" it lowered the dashboard's hit rate for clients' mistakes.
    # (One whose model ran all the same has a reply, without a body or stream: it is booked.)
    answered = reply is not None and (reply.body is not None or reply.stream is not None)
    # (an upstream's rate limit or other passing 4xx is its failure, not the client's mistake:
    # a "bypass", as /metrics counts it; it was in no tier)
    failed_upstream = seen.upstream_status in TRANSIENT_4XX
    refused = not answered and 400 <= seen.status < 500 and not failed_upstream
    counted_tier = None if refused else tier
    runtime.history.record(
        Answer(counted_tier, seen.model, seen.namespace, seen.latency, seen.ttft, seen.status)
    )
    log.info(
        "%s %s model=%s cache=%s status=%d %.1fms%s",
        seen.request_id, seen.route, seen.model or "-", tier, seen.status,
        seen.latency * 1000, f" upstream_request_id={seen.upstream_id}" if seen.upstream_id else "",
    )  # fmt: skip
    local = isinstance(runtime.config.models.get(seen.model), LocalModelConfig)
    hit = tier in ("exact", "semantic", "coalesced")
    counted, early = _counted(seen, reply, hit)
    if seen.trace is not None:
        similarity = (
            reply.lookup.similarity if reply and reply.lookup and tier == "semantic" else None
        )
        provider = "cachegate" if hit else "cachegate.local" if local else "openai"
        seen.trace.end(status=seen.status, cache=tier, provider=provider, usage=counted,
                       similarity=similarity)  # fmt: skip
    if reply is None or not seen.model or (reply.outcome is None and seen.status >= 400):
        return
    if reply.outcome is not None and not reply.outcome.ran:
        return  # the model never took it up (its client left first): as a JSON answer's 499
    # an answer whose usage was not reported (an upstream that sends none) is still a request,
    # a model call or a call avoided: its tokens are unknown (0)
    saved = runtime.ledger.record(seen.tenant, seen.model, counted or Usage(),
                                  source="local" if local else "upstream", hit=hit,
                                  ended_early=early)  # fmt: skip
    runtime.history.record_saving(saved)
    if reply.avoided is not None and not hit:  # embeddings: some inputs from the cache
        avoided = usage_of(reply.avoided)
        runtime.history.record_saving(runtime.ledger.avoided(seen.tenant, seen.model, avoided))
    if reply.lookup is not None and reply.key is not None:
        _verdict(runtime, seen, reply.lookup, reply.key.question)


def _counted(seen: Seen, reply: Reply | None, hit: bool) -> tuple[Usage | None, bool]:
    """The usage the ledger books a request with (None: none), and whether it is a model's
    stream that ended before its answer.

    NOTE: such a stream is booked whatever its status (502: it failed; 499: its client left):
    its model ran, and the provider bills what it generated.
    """
    if reply is None or not seen.model:
        return None, False
    if reply.outcome is not None:  # a model's stream, ended
        return reply.outcome.usage, not reply.outcome.finished
    if seen.status >= 400:
        return None, False
    usage: Any = None
    if hit and reply.lookup is not None and reply.lookup.entry is not None:
        usage = reply.lookup.entry.response.get("usage")
    elif hit and reply.avoided is not None:  # embeddings: every input from the cache
        usage = reply.avoided
    elif reply.body is not None:
        usage = reply.body.get("usage")
    return (usage_of(usage) if usage is not None else None), False


def _verdict(runtime: Runtime, seen: Seen, lookup: Lookup, question: str) -> None:
    """A semantic hit, or the guard's rejection of the nearest entry, for the dashboard."""
    if lookup.kind == "semantic" and lookup.entry is not None:
        entry, similarity, score, reason = (
            lookup.entry,
            lookup.similarity or 0.0,
            lookup.score,
            "ok",
        )
        accepted = True
    elif lookup.rejected is not None:
        rejected = lookup.rejected
        entry, similarity, score = rejected.entry, rejected.similarity, rejected.score
        reason, accepted = rejected.reason, False
    else:
        return
    runtime.history.record_verdict(
        RecentHit(
            at=time.time(),
            accepted=accepted,
            model=seen.model,
            namespace=seen.namespace,
            question=runtime.texts.describe(question),
            stored=runtime.texts.describe(entry.question),
            similarity=similarity,
            score=score,
            reason=reason,
            age=time.time() - entry.created,
            entry_id=entry.id,
        )
    )
