"""The request pipeline: one walk through the tiers, in order.

    response cache lookup (exact, then semantic)  ── hit ──► replay (JSON or SSE)
        │ miss
    the same request already in flight? ── wait for its answer ──► replay (coalesced)
        │ no (or it stored nothing)
    route by model name ──► backend (local model with its prefix KV cache, or an upstream)
        │
    store the answer, only when it is complete and successful

HTTP lives in api.py; this module turns a ``GatewayRequest`` into a ``Reply``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import re
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from semantic.cache import Lookup, ResponseCache
from semantic.keys import CacheKey, ContextMode, chat_key, completion_key

from .backend import RELAYED_HEADERS, Backend, BackendStream
from .config import CoalesceConfig
from .embeddings import embed
from .errors import APIError, sse_error
from .requests import GatewayRequest, partitioned
from .sse import Assembler, fresh_identity, replay

__all__ = ["CacheState", "Pipeline", "Reply", "StreamOutcome"]

log = logging.getLogger(__name__)

T = TypeVar("T")
CacheState = Literal["exact", "semantic", "miss", "bypass", "refresh"]
Watch = Callable[[Awaitable[T]], Awaitable[T]]

_CODE = re.compile(r"[a-z_]{1,40}")

#: Finish reasons of a complete answer; anything else (content_filter, error, null) is not stored.
_COMPLETE = frozenset({"stop", "length", "tool_calls", "function_call", "eos"})


@dataclass(slots=True)
class Reply:
    """What the HTTP layer sends: a JSON body or an SSE stream, plus headers."""

    cache: CacheState
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    stream: AsyncIterator[bytes] | None = None
    #: Completion tokens answered without running a model (cache hits).
    saved_tokens: int = 0
    #: Served the answer of an identical request that was in flight (see ``_follow``).
    coalesced: bool = False
    #: How a stream from a model ended, once it has (``None`` for a JSON body or a replay).
    outcome: StreamOutcome | None = None


@dataclass(slots=True)
class StreamOutcome:
    """Set by the relay when it sends an error event instead of ``[DONE]``: its code."""

    error: str | None = None


class Pipeline:
    """Walks a request through the response cache and its model backend."""

    def __init__(
        self,
        backends: Mapping[str, Backend],
        cache: ResponseCache | None,
        *,
        context_turns: int | None = None,
        context: ContextMode = "exact",
        semantic_thresholds: Mapping[str, float] | None = None,
        coalesce: CoalesceConfig | None = None,
    ) -> None:
        self.backends = backends
        self.cache = cache
        self._context_turns = context_turns
        self._context = context
        self._thresholds = dict(semantic_thresholds or {})
        self._coalesce = coalesce or CoalesceConfig(enabled=False)
        self._flights: dict[str, asyncio.Event] = {}

    async def handle(
        self, request: GatewayRequest, *, auth: str | None = None, watch: Watch[Any] | None = None
    ) -> Reply:
        """Answer ``request``; ``watch`` wraps the backend call (e.g. cancel on disconnect)."""
        backend = self.backends.get(request.model)
        if backend is None:
            raise APIError(
                404,
                f"The model `{request.model}` does not exist or you do not have access to it.",
                param="model",
                code="model_not_found",
            )
        if backend.forwards_client_auth:
            # NOTE: the upstream checks this client's own key; a cached answer is only for
            # requests carrying the same key (a missing or wrong key never reads another's).
            tenant = partitioned(_client_key_tenant(auth, request.account), request.partition)
            request = dataclasses.replace(request, tenant=tenant)
        if request.kind == "embedding":
            return await embed(self, request, backend, auth, watch)
        control = request.control
        key: CacheKey | None = None
        vector: Any = None  # the question's embedding: computed once, for lookup and store
        state: CacheState = "bypass"
        if self.cache is not None and not (control.no_cache and control.no_store):
            key = self._key(request)
            if control.no_cache:
                state = "refresh"
            else:
                found = await self.cache.lookup(
                    key, max_age=control.max_age, threshold=self._threshold(request)
                )
                if found.entry is not None:
                    return self._replay(request, found)
                state, vector = "miss", found.vector
        save = None if control.no_store or key is None else _Save(key, vector)
        flight: asyncio.Event | None = None
        if state == "miss" and save is not None and self._coalesces(request):
            assert key is not None
            if key.exact in self._flights and (not request.stream or self._coalesce.streams):
                answered = await self._follow(request, key, watch)
                if answered is not None:
                    reply = self._replay(request, answered)
                    reply.coalesced = True
                    reply.headers["x-cache-coalesced"] = "true"
                    return reply
            if key.exact not in self._flights:
                flight = self._flights[key.exact] = asyncio.Event()
        headers: dict[str, str] = {}  # the upstream's request id etc. (a fresh answer only)
        token = RELAYED_HEADERS.set(headers)
        try:
            if request.stream:
                opened = backend.open_stream(request, auth)
                stream = await (watch(opened) if watch else opened)
                outcome = StreamOutcome()
                relay = self._relay(request, stream, save, outcome, flight)
                if flight is not None:  # released by the relay, or if it is dropped unstarted
                    weakref.finalize(relay, self._land, save, flight)
                flight = None
                return Reply(state, headers, stream=relay, outcome=outcome)
            pending = backend.complete(request, auth)
            response = await (watch(pending) if watch else pending)
            if save is not None and _complete(request, response):
                await self._store(request, save, response)
        finally:
            RELAYED_HEADERS.reset(token)
            if flight is not None:
                self._land(save, flight)
        return Reply(state, headers, body=response)

    # -- coalescing -----------------------------------------------------------------------

    def _coalesces(self, request: GatewayRequest) -> bool:
        """Whether identical misses of this request wait for each other's answer.

        Only when the one that runs can store an answer the others find: it needs the exact
        tier (a follower looks the answer up by the request's exact key), and a request that
        takes answers of any age (``max-age=0`` takes none that is stored before it asked).
        """
        max_age = request.control.max_age
        if max_age is not None and max_age <= 0:
            return False
        return bool(self._coalesce.enabled and self.cache is not None and self.cache.exact)

    async def _follow(
        self, request: GatewayRequest, key: CacheKey, watch: Watch[Any] | None
    ) -> Lookup | None:
        """Wait (at most ``max_wait``) for the identical request in flight, then look it up.

        ``None`` when it stored nothing (it failed, was cancelled or its answer was not
        complete) or took too long: this request then calls the model itself. It waits once
        only, so a failing model is not retried one waiting request after another.
        """
        assert self.cache is not None
        flight = self._flights[key.exact]
        waiting = asyncio.wait_for(flight.wait(), self._coalesce.max_wait)
        try:
            await (watch(waiting) if watch else waiting)
        except TimeoutError:
            return None
        found = await self.cache.lookup(
            key, max_age=request.control.max_age, threshold=self._threshold(request), again=True
        )
        return found if found.entry is not None else None

    def _land(self, save: _Save | None, flight: asyncio.Event) -> None:
        """The request that ran has stored its answer, or failed: wake those waiting on it."""
        assert save is not None
        if self._flights.get(save.key.exact) is flight:
            del self._flights[save.key.exact]
        flight.set()

    # -- helpers ---------------------------------------------------------------------------

    def _key(self, request: GatewayRequest) -> CacheKey:
        ns = request.control.namespace
        if request.kind == "chat":
            body, turns = request.body, self._context_turns
            return chat_key(request.tenant, ns, request.model, body, turns, self._context)
        return completion_key(request.tenant, ns, request.model, request.body)

    def _threshold(self, request: GatewayRequest) -> float | None:
        if request.control.threshold is not None:
            return request.control.threshold
        return self._thresholds.get(request.model)

    def _replay(self, request: GatewayRequest, found: Lookup) -> Reply:
        assert found.entry is not None
        stored = found.entry.response
        headers = {"x-cache-age": str(int(found.age or 0))}
        if found.kind == "semantic":
            headers["x-cache-similarity"] = f"{found.similarity or 0.0:.4f}"
        usage = stored.get("usage") or {}
        saved = int(usage.get("completion_tokens") or 0)
        kind: CacheState = "semantic" if found.kind == "semantic" else "exact"
        if request.stream:
            events = replay(stored, kind=request.kind, include_usage=request.include_usage)
            return Reply(kind, headers, stream=_aiter(events), saved_tokens=saved)
        rid, created = fresh_identity(request.kind)
        return Reply(
            kind, headers, body={**stored, "id": rid, "created": created}, saved_tokens=saved
        )

    async def _store(self, request: GatewayRequest, save: _Save, response: dict[str, Any]) -> None:
        assert self.cache is not None
        try:
            await self.cache.store(
                save.key,
                response,
                model=request.model,
                tenant=request.tenant,
                namespace=request.control.namespace,
                ttl=request.control.ttl,
                vector=save.vector,
            )
        except Exception:  # the answer is good; a cache write failure must not lose it
            log.exception("storing a response failed")

    async def _relay(
        self,
        request: GatewayRequest,
        stream: BackendStream,
        save: _Save | None,
        outcome: StreamOutcome,
        flight: asyncio.Event | None = None,
    ) -> AsyncIterator[bytes]:
        """Pass events through as they arrive; store the assembled answer if it completed.

        NOTE: the answer is stored before ``[DONE]`` is sent, so a client that disconnects
        right after the last token still leaves a complete answer in the cache, while a stream
        that breaks before ``[DONE]`` (either side) never stores anything.
        """
        assembler = Assembler(request.kind) if save is not None else None
        pending = b""  # events that arrived together leave together (one write, not several)
        try:
            async for event in stream:
                if event.error:
                    outcome.error = "upstream_error"  # the upstream's own error event
                    yield pending + event.raw
                    return
                if event.done:
                    result = assembler.result() if assembler else None
                    if save is not None and result is not None and _complete(request, result):
                        await self._store(request, save, result)
                    yield pending + event.raw
                    return
                chunk = event.chunk
                dropped = False
                if chunk is not None:
                    if assembler is not None:
                        assembler.add(chunk)
                    dropped = not request.include_usage and _usage_only(chunk)
                if not dropped:
                    pending += event.raw
                if not event.more and pending:
                    yield pending
                    pending = b""
            if pending:
                yield pending
            yield self._failed(
                outcome,
                APIError(
                    502, "The model's stream ended before it completed.", code="stream_incomplete"
                ),
            )
        except APIError as exc:
            yield self._failed(outcome, exc)
        except Exception:  # a bug or a malformed chunk: the client still gets an error event
            log.exception("stream relay failed")
            yield self._failed(
                outcome, APIError(500, "The gateway failed while streaming.", code="internal_error")
            )
        finally:
            if flight is not None:
                self._land(save, flight)
            await stream.aclose()

    @staticmethod
    def _failed(outcome: StreamOutcome, error: APIError) -> bytes:
        # a metrics label: only the gateway's own short snake_case codes
        code = error.code or ""
        outcome.error = code if _CODE.fullmatch(code) else "stream_error"
        return sse_error(error)


def _client_key_tenant(authorization: str | None, account: tuple[tuple[str, str], ...]) -> str:
    """One tenant per client key and organization/project: what the upstream bills and allows."""
    seen = "\n".join([authorization or "", *(f"{h}: {v}" for h, v in account)])
    return f"client-key:{hashlib.sha256(seen.encode()).hexdigest()[:32]}"


@dataclass(frozen=True, slots=True)
class _Save:
    """Where a fresh answer goes: its key, and the question's embedding if already computed."""

    key: CacheKey
    vector: Any


def _complete(request: GatewayRequest, response: dict[str, Any]) -> bool:
    """Every choice the request asked for is there and finished normally."""
    choices = response.get("choices")
    if "error" in response or not isinstance(choices, list) or len(choices) != _expected(request):
        return False
    return all(_finished(request, c) for c in choices)


def _finished(request: GatewayRequest, choice: Any) -> bool:
    """A choice that finished normally and carries its answer (a message, or a text)."""
    if not isinstance(choice, dict) or choice.get("finish_reason") not in _COMPLETE:
        return False
    if request.kind == "chat":
        return isinstance(choice.get("message"), dict)
    return isinstance(choice.get("text"), str)


def _expected(request: GatewayRequest) -> int:
    n = request.body.get("n") or 1
    prompt = request.body.get("prompt")
    if (
        request.kind == "completion"
        and isinstance(prompt, list)
        and prompt
        and not isinstance(prompt[0], int)
    ):
        return int(n) * len(prompt)  # one set of choices per prompt
    return int(n)


def _usage_only(chunk: dict[str, Any]) -> bool:
    return not chunk.get("choices") and chunk.get("usage") is not None


async def _aiter(events: Any) -> AsyncIterator[bytes]:
    for event in events:
        yield event
