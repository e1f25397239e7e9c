"""The tier walk: one path through the caching tiers, in order, for every API.

    route by model name (404 when unknown)
    response cache lookup (exact, then semantic)  ── hit ──► replay (JSON or SSE); a sampled
        │                                                semantic hit carries an AuditJob (audit.py)
        │ miss
    the same request already in flight? ── wait for its answer ──► replay (coalesced)
        │ no (or it stored nothing; if it failed, one waiter calls again, the others wait on)
    backend (local model with its prefix KV cache, or an upstream)
        │
    store the answer, only when it is complete and successful

The walk knows no wire format: it works on the canonical ``GatewayRequest`` and asks the
request's ``Adapter`` whatever depends on one (key, completeness, folding, replay, errors).
HTTP, disconnects and shutdown live in api.py and connections.py.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import hashlib
import logging
import re
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
)
from dataclasses import dataclass
from typing import Any, TypeVar

from semantic.audit import Tightened
from semantic.cache import Lookup, ResponseCache
from semantic.keys import CacheKey, ContextMode, salted
from semantic.store import Entry

from .audit import AuditJob, Auditor
from .backend import Backend, BackendStream
from .canonical import (
    Adapter,
    Answer,
    Bridge,
    CacheState,
    Fold,
    GatewayRequest,
    Meter,
    Reply,
    StreamOutcome,
)
from .coalesce import Flight, Flights
from .config import CoalesceConfig
from .connections import ClientDisconnected
from .errors import APIError
from .ledger import MAX_TOKENS, Usage, partial_usage, usage_of
from .lograte import RateLimitedLog
from .messages_bridge import named_as_sent
from .requests import partitioned
from .responses import param_as_sent, resent_if_lost
from .tracing import tier

__all__ = ["Pipeline", "Save", "Watch", "cache_key_id"]

log = logging.getLogger(__name__)

T = TypeVar("T")
#: Wraps each wait for a backend (the HTTP layer's: cancel it when the client disconnects).
Watch = Callable[[Awaitable[T]], Awaitable[T]]

#: A semantic hit's audit job, from its lookup and the tightened threshold's generation.
_Audit = Callable[[Lookup, int], AuditJob]

_CODE = re.compile(r"[a-z_]{1,40}")
#: How long a lookup waits for the writes in progress in its scope (normally a store's
#: milliseconds; bounded, since a write may wait for an embedder that is busy or loading).
_WRITTEN_WAIT_S = 1.0
#: How long the cache writes in progress may take at shutdown (or before a flush).
_DRAIN_S = 10.0


@dataclass(frozen=True, slots=True)
class Save:
    """Where a fresh answer goes: its key, and the question's embedding if already computed
    (``overloaded``: the lookup found the embedder overloaded; store for exact hits only;
    ``epoch``: the cache's when the request began: a flush since then drops the answer)."""

    key: CacheKey
    vector: Any
    overloaded: bool = False
    epoch: int | None = None


@dataclass(frozen=True, slots=True)
class _Looked:
    """The response cache's verdict on a request."""

    state: CacheState
    hit: Lookup | None = None  # a servable stored answer
    save: Save | None = None  # where to store a fresh answer (None: do not)
    key: CacheKey | None = None  # None: the cache was bypassed
    missed: Lookup | None = None  # the miss (with any guard rejection), for the dashboard
    generation: int = 0  # of the tightened threshold the lookup ran under (AuditJob)
    served: _Served | None = None  # the hit, made ready to serve
    landings: int = 0  # ``Flights.mark`` before the lookup (see ``_join``)


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
        auditor: Auditor | None = None,
        overloaded: Callable[[], bool] | None = None,
    ) -> None:
        self.backends = backends
        #: True while the gateway turns requests away at its door (gateway.admission): the
        #: semantic lookup then steps aside, as when the embedder is overloaded.
        self.overloaded = overloaded or (lambda: False)
        self.auditor = auditor
        self.cache = cache
        self._context_turns = context_turns
        self._context = context
        self._thresholds = dict(semantic_thresholds or {})
        self.flights = Flights(coalesce or CoalesceConfig(enabled=False))
        #: fresh answers' cache writes in progress, by scope (see store_soon)
        self._writes: dict[str, set[asyncio.Task[None]]] = {}
        #: answers not stored because a hit could not serve them back: a line a minute per model
        self._unstorable_log = RateLimitedLog(log)
        #: answers whose adapter bookkeeping failed once delivered: a line a minute per model
        self._undelivered_log = RateLimitedLog(log)

    async def handle(
        self,
        request: GatewayRequest,
        adapter: Adapter,
        *,
        auth: str | None = None,
        watch: Watch[Any] | None = None,
    ) -> Reply:
        """Answer ``request``; ``watch`` wraps every wait (e.g. cancel on disconnect)."""
        account = request.tenant  # (the ledger's: routing may key a tenant by the client's key)
        backend, request = self.route(request, auth)
        bridge = _bridge(backend, adapter, request)
        looked = await self._look_up(request, adapter, backend.cache_salt, native=bridge is None)
        audit = functools.partial(_audit_job, backend, bridge, request, adapter, auth, account)
        if looked.hit is not None:
            return self._hit(request, adapter, looked, audit)
        flight: Flight | None = None
        if looked.state == "miss" and looked.save is not None and self._coalesces(request):
            joined = await self._join(request, adapter, looked, watch, audit)
            if isinstance(joined, Reply):
                return joined
            flight = joined
        seen: dict[str, Any] = {"lookup": looked.missed, "key": looked.key}
        meter = Meter()
        try:
            if request.stream:
                with tier("model", **{"gen_ai.request.model": request.model, "stream": True}):
                    stream = await _open(backend, bridge, request, auth, watch)
                relay = _Relay(self, request, adapter, stream, looked.save, flight, bridge is None,
                               hide=functools.partial(backend.hidden, auth=auth))  # fmt: skip
                flight = None  # the relay owns it from here: lands it when it ends or is closed
                headers = _keyed(stream.headers, looked.key)
                return Reply(looked.state, headers, stream=relay, outcome=relay.outcome, **seen)
            with tier("model", **{"gen_ai.request.model": request.model}):
                answer = await _complete(backend, bridge, request, auth, watch, meter)
            if looked.save is not None and self._storable(adapter, request, answer):
                self.store_soon(request, looked.save, answer.body, flight)
                flight = None  # it lands once the answer is stored
            self.delivered(adapter, request, answer.body, upstream=bridge is None)
            headers = _keyed(answer.headers, looked.key)
            return Reply(looked.state, headers, body=answer.body, **seen)
        except BaseException as exc:  # no answer: an error, a timeout, its client gone
            if flight is not None:
                flight.fail(exc)  # (then land below does nothing more)
            _abandoned(exc, looked.state, meter, seen)
            raise
        finally:
            if flight is not None:
                flight.land()

    def route(self, request: GatewayRequest, auth: str | None) -> tuple[Backend, GatewayRequest]:
        """The backend of the request's model (404 when none), and the request as it sees it,
        with what the backend fills in for the client (``Backend.as_sent``): its cache key is
        that of the request the model answers.

        NOTE: when the backend forwards the client's own key, the upstream checks that key; a
        cached answer is only for requests carrying the same key (a missing or wrong key never
        reads another's), so the tenant becomes that key's digest.
        """
        backend = self.backends.get(request.model)
        if backend is None:
            raise APIError(
                404,
                f"The model `{request.model}` does not exist or you do not have access to it.",
                param="model",
                code="model_not_found",
            )
        if backend.forwards_client_auth:
            tenant = partitioned(_client_key_tenant(auth, request.account), request.partition)
            request = dataclasses.replace(request, tenant=tenant)
        return backend, backend.as_sent(request)

    def store_soon(
        self, request: GatewayRequest, save: Save, answer: dict[str, Any], flight: Flight | None
    ) -> None:
        """Store a complete answer in a task of its own, so that its response does not wait
        for the write, then land its flight (identical requests waiting on it find it).

        NOTE: a lookup in the same scope waits for the writes in progress there
        (:meth:`written`): a client that got an answer and asks again finds it stored.
        """

        async def work() -> None:
            try:
                with tier("cache.store"):
                    await self.store(request, save, answer)
            finally:
                if flight is not None:
                    flight.land()

        self._write_soon(save.key.scope, work())

    def store_many_soon(
        self,
        request: GatewayRequest,
        answers: list[tuple[CacheKey, dict[str, Any]]],
        epoch: int | None = None,
    ) -> None:
        """Store complete answers of one scope (an embeddings batch's inputs, exact only) in a
        task of its own, in a few store writes: the response does not wait for them (nor are
        they stored after a flush since ``epoch``, the cache's when the request began)."""

        async def work() -> None:
            assert self.cache is not None
            try:
                with tier("cache.store"):
                    await self.cache.store_many(
                        answers,
                        model=request.model,
                        tenant=request.tenant,
                        namespace=request.control.namespace,
                        ttl=request.control.ttl,
                        epoch=epoch,
                    )
            except Exception:  # the answers are good; a cache write failure must not lose them
                log.exception("storing responses failed")

        self._write_soon(answers[0][0].scope, work())

    def _write_soon(self, scope: str, work: Coroutine[Any, Any, None]) -> None:
        """Run a cache write of ``scope`` as a task that lookups there wait for."""
        writes = self._writes.setdefault(scope, set())
        task = asyncio.get_running_loop().create_task(work)
        writes.add(task)

        def done(_: object) -> None:
            writes.discard(task)
            if not writes and self._writes.get(scope) is writes:
                del self._writes[scope]

        task.add_done_callback(done)

    async def settle(self, timeout: float | None = None) -> set[asyncio.Task[None]]:
        """Wait up to ``timeout`` (default ``_DRAIN_S``) for the cache writes in progress,
        those that start meanwhile too (before a flush: an answer a client has seen is not
        written after it); returns those still running."""
        deadline = asyncio.get_running_loop().time() + (_DRAIN_S if timeout is None else timeout)
        while tasks := {task for writes in self._writes.values() for task in writes}:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return tasks
            await asyncio.wait(tasks, timeout=left)
        return set()

    async def drain(self, why: str = "at shutdown") -> int:
        """Before the cache closes or is flushed: let the writes in progress finish, for a
        bounded time (a write waiting for an embedder that is still loading could wait for
        minutes), then cancel the rest (their flights still land): an answer a client has
        seen is then never written after it. Returns how many were cancelled."""
        pending = await self.settle()
        for task in pending:
            task.cancel()
        if pending:
            log.warning("%d cache write(s) abandoned %s", len(pending), why)
            await asyncio.wait(pending)
        return len(pending)

    async def store(self, request: GatewayRequest, save: Save, answer: dict[str, Any]) -> None:
        """Store a complete answer; a failing cache write is logged, never lost to the client.
        (Its ``cache.store`` span is the caller's: one for all the inputs of an embeddings batch.)"""
        assert self.cache is not None
        try:
            await self.cache.store(
                save.key,
                answer,
                model=request.model,
                tenant=request.tenant,
                namespace=request.control.namespace,
                ttl=request.control.ttl,
                vector=save.vector,
                overloaded=save.overloaded,
                epoch=save.epoch,
            )
        except Exception:  # the answer is good; a cache write failure must not lose it
            log.exception("storing a response failed")

    def storable(self, adapter: Adapter, request: GatewayRequest, answer: dict[str, Any]) -> bool:
        """A complete answer that a hit can serve back (:func:`_replayable`).

        NOTE: deciding whether to store never fails the request: the upstream has billed the
        answer and its client gets it. Any failure of the check (a field of a type no model
        sends, or an adapter's bug on an odd but valid answer) is an answer not stored, counted
        in ``store_failures`` and logged at most once a minute per model (the traceback at
        debug level): a misbehaving upstream made one warning per request.
        """
        try:
            return _replayable(adapter, request, answer)
        except Exception as exc:
            if self.cache is not None:
                self.cache.unstorable()
            self._unstorable_log.warning(
                request.model, "model %s: not storing an answer a hit could not serve back (%s)",
                request.model, type(exc).__name__,
            )  # fmt: skip
            log.debug("model %s: the answer's replay check failed", request.model, exc_info=exc)
            return False

    def delivered(
        self, adapter: Adapter, request: GatewayRequest, answer: dict[str, Any], *, upstream: bool
    ) -> None:
        """``adapter.delivered``: what an adapter keeps of a fresh answer its client gets.

        NOTE: it never fails the request: the upstream has answered and billed, and a stream's
        client has all but its last event already. What it keeps is bookkeeping with a
        fallback: a Response not kept here is looked up at the upstream by a follow-up naming
        it, as any id not kept; an id or container left unclaimed is one the upstream holds all
        the same, and a 500 in its place claimed nothing either. Any failure is logged at most
        once a minute per model (the traceback at debug level); the answer is sent, and stored
        when storable, as if it had not failed.
        """
        try:
            adapter.delivered(request, answer, upstream=upstream)
        except Exception as exc:
            self._undelivered_log.warning(
                request.model, "model %s: an answer was delivered but not kept for follow-ups (%s)",
                request.model, type(exc).__name__,
            )  # fmt: skip
            log.debug("model %s: keeping a delivered answer failed", request.model, exc_info=exc)

    # -- helpers ---------------------------------------------------------------------------

    def _storable(self, adapter: Adapter, request: GatewayRequest, answer: Answer) -> bool:
        """A complete answer the client got as the backend gave it (not one a bridge changed)."""
        return answer.lossless and self.storable(adapter, request, answer.body)

    async def _look_up(
        self, request: GatewayRequest, adapter: Adapter, salt: str, *, native: bool
    ) -> _Looked:
        control = request.control
        if self.cache is None or (control.no_cache and control.no_store):
            return _Looked("bypass")
        key = adapter.key(request, self._context_turns, self._context, native=native)
        key = salted(key, salt)
        epoch = self.cache.epoch  # (before the lookup: the answer is made after it)
        save = None if control.no_store else Save(key, None, epoch=epoch)
        if control.no_cache:
            return _Looked("refresh", save=save, key=key)
        await self.written(key.scope)
        landings = self.flights.mark()
        # NOTE: threshold and generation read together, before the lookup: the hit's audit
        # must count in the window of the threshold it was served under, not of a later one
        tightened = self._tightened(request)
        with tier("cache.lookup") as span:
            found = await self.cache.lookup(
                key,
                max_age=control.max_age,
                threshold=self._threshold(request),
                score_threshold=tightened.threshold,
                overloaded=self.overloaded(),
            )
            if span is not None:
                span.set_attribute("cachegate.cache", found.kind)
        if found.entry is not None:
            served = await self._servable(request, adapter, found.entry)
            if served is not None:
                return _Looked("exact", found, key=key, generation=tightened.generation,
                               served=served)  # fmt: skip
            found = Lookup("miss", vector=found.vector, skipped=found.skipped)
        # the question's embedding: computed once, for lookup and store
        save = None if control.no_store else Save(key, found.vector, found.overloaded, epoch)
        return _Looked("miss", save=save, key=key, missed=found, landings=landings)

    async def _servable(
        self, request: GatewayRequest, adapter: Adapter, entry: Entry
    ) -> _Served | None:
        """A stored answer made ready to serve; None when it cannot be (see :func:`_served`):
        it is dropped from the cache (exact and semantic tiers), and the request is a miss."""
        served = _served(request, adapter, entry)
        if served is None:
            assert self.cache is not None
            await self.cache.drop_unreplayable(entry)
        return served

    async def written(self, scope: str) -> None:
        """Wait for the cache writes in progress in ``scope`` (already running: a store's
        time, not a response's): an answer a client has seen is found by its next request."""
        writes = self._writes.get(scope)
        if writes:  # (a cancelled lookup leaves the writes running)
            await asyncio.wait(list(writes), timeout=_WRITTEN_WAIT_S)

    def _coalesces(self, request: GatewayRequest) -> bool:
        """Whether identical misses of this request wait for each other's answer.

        Only when the one that runs can store an answer the others find: it needs the exact
        tier (a follower looks the answer up by the request's exact key), and a request that
        takes answers of any age (``max-age=0`` takes none that is stored before it asked).
        """
        max_age = request.control.max_age
        if max_age is not None and max_age <= 0:
            return False
        config = self.flights.config
        return bool(config.enabled and self.cache is not None and self.cache.exact)

    async def _follow(
        self, request: GatewayRequest, adapter: Adapter, looked: _Looked, watch: Watch[Any] | None
    ) -> _Looked | Flight | None:
        """Wait for the identical request in flight, then look up what it stored (a hit): a
        second lookup of the request ``looked`` up first (a skip it counted is not counted again).

        A ``Flight`` when the one in flight failed and this request leads the next try (the
        others wait for it; raises the error the failed one shares, see gateway.coalesce).
        ``None`` when it stored nothing although it answered (its answer was not complete, or
        not as the backend gave it) or took too long: this request then calls the model
        itself. NOTE: the followers of an answer that could not be stored do not queue behind
        each other: each would get an answer none of them can share.
        """
        assert self.cache is not None and looked.key is not None and looked.missed is not None
        key = looked.key
        with tier("coalesce.wait"):
            followed = await self.flights.follow(key.exact, request.body, watch)
        if followed.kind != "landed":
            return followed.flight  # (late: None)
        return await self._look_again(request, adapter, looked)

    async def _look_again(
        self, request: GatewayRequest, adapter: Adapter, looked: _Looked
    ) -> _Looked | None:
        """The lookup of a request that missed (``looked``), again, once the identical request
        in flight has landed: a hit, or None (it stored nothing servable)."""
        assert self.cache is not None and looked.key is not None and looked.missed is not None
        key = looked.key
        tightened = self._tightened(request)  # (with its generation: see _look_up)
        found = await self.cache.lookup(
            key,
            max_age=request.control.max_age,
            threshold=self._threshold(request),
            score_threshold=tightened.threshold,
            again=looked.missed,
            overloaded=self.overloaded(),  # (as the first lookup: see _look_up)
        )
        if found.entry is None:
            return None
        served = await self._servable(request, adapter, found.entry)
        if served is None:  # (a bad entry of an older build: this request calls the model)
            return None
        state: CacheState = "semantic" if found.kind == "semantic" else "exact"
        return _Looked(state, hit=found, key=key, generation=tightened.generation, served=served)

    def _hit(
        self,
        request: GatewayRequest,
        adapter: Adapter,
        looked: _Looked,
        audit: _Audit,
    ) -> Reply:
        """A stored answer, served; a sampled semantic hit carries its ``audit`` (audit.py)."""
        hit, key = looked.hit, looked.key
        assert hit is not None and hit.entry is not None and key is not None
        assert looked.served is not None
        served = self._replay(hit, key, looked.served)
        # NOTE: with cache.exact off the identical request is found by the semantic tier: its
        # answer was the model's to that very request, so it is not audited (as an exact hit)
        semantic = hit.kind == "semantic" and hit.entry.exact != key.exact
        if semantic and self.auditor and self.auditor.sample():
            served.audit = audit(hit, looked.generation)
        return served

    async def _join(
        self,
        request: GatewayRequest,
        adapter: Adapter,
        looked: _Looked,
        watch: Watch[Any] | None,
        audit: _Audit,
    ) -> Reply | Flight | None:
        """Coalesce a miss (``looked``) with the identical requests in flight: the answer of
        the one that ran (a replay), or the flight this request leads (None: it calls the model
        alone). A semantic hit found then (another request's answer, stored meanwhile: the one
        that ran stored nothing) is sampled for the ``audit`` as any other."""
        flights, key = self.flights, looked.key
        assert key is not None
        followed: _Looked | Flight | None = None
        if flights.busy(key.exact) and (not request.stream or flights.config.streams):
            followed = await self._follow(request, adapter, looked, watch)
        elif flights.landed_since(key.exact, looked.landings):  # (while this one looked up)
            followed = await self._look_again(request, adapter, looked)
        if isinstance(followed, _Looked):
            reply = self._hit(request, adapter, followed, audit)
            reply.coalesced = True
            reply.headers["x-cache-coalesced"] = "true"
            return reply
        if followed is not None:
            return followed
        return flights.lead(key.exact, request.body)

    def _threshold(self, request: GatewayRequest) -> float | None:
        if request.control.threshold is not None:
            return request.control.threshold
        return self._thresholds.get(request.model)

    def _tightened(self, request: GatewayRequest) -> Tightened:
        """The verifier score threshold auto-tighten set for the request's scope, if any."""
        if self.auditor is None:
            return Tightened()
        return self.auditor.tightened(request)

    def _replay(self, found: Lookup, key: CacheKey, served: _Served) -> Reply:
        assert found.entry is not None
        headers = _keyed({"x-cache-age": str(int(found.age or 0))}, key)
        headers["x-cache-entry"] = str(found.entry.id)  # GET /admin/cache/entries/{id}
        if found.kind == "semantic":
            headers["x-cache-similarity"] = f"{found.similarity or 0.0:.4f}"
        kind: CacheState = "semantic" if found.kind == "semantic" else "exact"
        seen: dict[str, Any] = {"saved_tokens": served.saved, "lookup": found, "key": key}
        if served.events is not None:
            return Reply(kind, headers, stream=_Replayed(iter(served.events)), **seen)
        return Reply(kind, headers, body=served.answer, **seen)


class _Relay:
    """A model's stream on its way to the client: passed through as it arrives, folded into
    the answer, which is stored if it completed.

    NOTE: the answer is stored before the stream's last event is sent, so a client that
    disconnects right after the last token still leaves a complete answer in the cache, while
    a stream that breaks before it (either side) never stores anything. Either way its
    ``outcome.usage`` says what the call cost once it has ended (see :meth:`_spent`).
    """

    def __init__(
        self,
        pipeline: Pipeline,
        request: GatewayRequest,
        adapter: Adapter,
        stream: BackendStream,
        save: Save | None,
        flight: Flight | None,
        native: bool,
        hide: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self._native = native  # the backend spoke the API itself (no chat bridge)
        #: the complete answer as kept (stored, delivered): the backend's key hidden in it
        self._hide = hide
        self._pipeline = pipeline
        self._request = request
        self._adapter = adapter
        self._stream = stream
        self._save = save
        self._flight = flight
        self._events: AsyncGenerator[bytes, None] | None = None
        self._closed = False
        self._error: APIError | None = None  # why the stream failed, for its flight
        self.outcome = StreamOutcome()

    def __aiter__(self) -> AsyncGenerator[bytes, None]:
        if self._events is None:
            self._events = self._relay()
        return self._events

    async def aclose(self) -> None:
        """Close the backend's stream and land the flight, whether or not it was started."""
        try:
            if self._events is not None:
                await self._events.aclose()
        except RuntimeError:  # running in another task right now: that task cleans up
            return
        finally:
            self._land()
        await self._close_stream()

    async def _close_stream(self) -> None:
        if not self._closed:
            self._closed = True
            await self._stream.aclose()

    def _land(self) -> None:
        """Land the flight (when the answer was not stored: stored, it lands after the write);
        a stream that ended before its answer failed it."""
        if self._flight is not None:
            if self.outcome.finished:
                self._flight.land()
            else:
                self._flight.fail(self._error)
            self._flight = None

    async def _relay(self) -> AsyncGenerator[bytes, None]:
        fold = self._adapter.fold(self._request, cached=self._save is not None)
        # events that arrived together leave together (one write, not several)
        # NOTE: a list joined once: bytes added to bytes copied all the batch so far, per event
        # (a megabyte batch of small events, a reader that fell behind, held the loop seconds)
        pending: list[bytes] = []
        try:
            async for event in self._stream:
                if event.error:
                    self.outcome.error = "upstream_error"  # the upstream's own error event
                    self._error = APIError(
                        502, "The model failed while streaming its answer.", code="upstream_error"
                    )
                    yield b"".join([*pending, event.raw])
                    return
                if event.done:
                    self._store(fold, event.chunk)
                    self.outcome.finished = True
                    yield b"".join([*pending, event.raw])
                    return
                if event.chunk is None or self._fold(fold, event.chunk):
                    pending.append(event.raw)
                    self.outcome.sequence = _next_sequence(event.chunk, self.outcome.sequence)
                if not event.more and pending:
                    yield b"".join(pending)
                    pending.clear()
            if pending:
                yield b"".join(pending)
            yield self._failed(
                APIError(
                    502, "The model's stream ended before it completed.", code="stream_incomplete"
                )
            )
        except APIError as exc:
            yield self._failed(exc)
        except Exception:  # a bug or a malformed chunk: the client still gets an error event
            log.exception("stream relay failed")
            yield self._failed(
                APIError(500, "The gateway failed while streaming.", code="internal_error")
            )
        finally:
            self.outcome.usage = self._spent(fold)
            self._land()
            await self._close_stream()

    def _fold(self, fold: Fold, chunk: dict[str, Any]) -> bool:
        with _shaped_as_sent(self._request.model):
            return fold.add(chunk)

    def _spent(self, fold: Fold) -> Usage | None:
        """The usage the stream reported, when its answer finished; else (the client left,
        the stream broke or failed, the run was cancelled) what is known of it: the model ran,
        and the provider bills what it generated (``ledger.partial_usage``)."""
        reported = fold.usage()
        if self.outcome.finished:
            return usage_of(reported) if reported is not None else None
        counted = self._stream.counted()
        self.outcome.ran = counted is None or bool(counted.get("prompt_tokens"))  # (see counted)
        return partial_usage(reported, counted, fold.streamed())

    def _store(self, fold: Fold, last: dict[str, Any] | None) -> None:
        """Start the complete answer's cache write (the last event does not wait for it); an
        answer the stream ended with reached its client, complete or not (``delivered``: a
        Response cut at ``max_output_tokens`` is kept for ``previous_response_id`` too)."""
        if last is not None:  # a last event that carries data (Responses' response.completed)
            fold.add(last)
        with _shaped_as_sent(self._request.model):
            result = fold.result()
        if result is None:
            return
        if self._hide is not None:  # (a key split over events was in none of them whole)
            result = self._hide(result)
        if self._save is not None and self._pipeline.storable(self._adapter, self._request, result):
            self._pipeline.store_soon(self._request, self._save, result, self._flight)
            self._flight = None  # it lands once the answer is stored
        self._pipeline.delivered(self._adapter, self._request, result, upstream=self._native)

    def _failed(self, error: APIError) -> bytes:
        self._error = error
        # a metrics label: only the gateway's own short snake_case codes
        code = error.code or ""
        self.outcome.error = code if _CODE.fullmatch(code) else "stream_error"
        return self._adapter.error_event(error, self.outcome.sequence)


@contextlib.contextmanager
def _shaped_as_sent(model: str) -> Iterator[None]:
    """Folding a stream's chunks: a chunk whose fields have types no model sends (a ``delta``
    that is a string, a tool call's name that is a number) is a 502, the upstream's fault,
    where it was the gateway's 500 ``internal_error`` with a traceback in the log.

    NOTE: a fold reads only the chunks, so an error in it is theirs: any exception, not only a
    type or key error (a fold's bug on an odd chunk ended the stream with a 500 all the same);
    one of a type an odd chunk does not raise on its own logs its traceback at debug level.
    An ``APIError`` (the fold's own verdict) passes as it is."""
    try:
        yield
    except APIError:
        raise
    except Exception as exc:
        log.warning("model %s sent a stream chunk of unexpected shape: %r", model, exc)
        if not isinstance(exc, (AttributeError, KeyError, TypeError, ValueError)):
            log.debug("model %s: folding a stream chunk failed", model, exc_info=exc)
        message = f"Upstream for model '{model}' sent a chunk of unexpected shape."
        raise APIError(502, message, type="upstream_error", code="upstream_error") from None


def _next_sequence(chunk: dict[str, Any] | None, sequence: int) -> int:
    """The number an event after ``chunk`` takes, in a stream that numbers its events."""
    numbered = chunk.get("sequence_number") if chunk is not None else None
    return numbered + 1 if isinstance(numbered, int) and numbered >= sequence else sequence


class _Replayed:
    """A stored answer's events, as a stream (nothing to free when closed).

    NOTE: sent in one write, like a JSON body: event by event, each write woke the client and
    a loaded machine made the gateway wait for the CPU again after each (see gateway.readahead).
    """

    def __init__(self, events: Iterator[bytes]) -> None:
        self._events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b"".join(self._events)

    async def aclose(self) -> None:
        pass


def cache_key_id(key: CacheKey) -> str:
    """``x-cache-key``: 16 hex digits of the exact key's hash; equal values, same exact key."""
    return key.exact[:16]


def _keyed(headers: Mapping[str, str], key: CacheKey | None) -> dict[str, str]:
    """``headers`` plus ``x-cache-key`` when the cache was consulted."""
    return {**headers, "x-cache-key": cache_key_id(key)} if key is not None else dict(headers)


def _client_key_tenant(authorization: str | None, account: tuple[tuple[str, str], ...]) -> str:
    """One tenant per client key and organization/project: what the upstream bills and allows."""
    seen = "\n".join([authorization or "", *(f"{h}: {v}" for h, v in account)])
    return f"client-key:{hashlib.sha256(seen.encode()).hexdigest()[:32]}"


def _replayable(adapter: Adapter, request: GatewayRequest, answer: dict[str, Any]) -> bool:
    """True for a complete answer that a hit can serve back, as JSON and as a stream; False
    for one that is not complete; raises for one that a hit could not serve back.

    NOTE: an answer is stored only once it replays: one whose fields have types no model sends
    (an upstream's ``"usage": "x"``, an output item that is a number) reached its client as it
    came, but stored, every hit on it failed with a 500 until its TTL ran out.
    """
    if not adapter.complete(request, answer):
        return False
    _check_saved(adapter.saved_tokens(answer))
    collections.deque(adapter.replay(request, adapter.fresh(request, answer)), maxlen=0)
    return True


def _check_saved(saved: object) -> None:
    """Raises for an adapter's saved tokens that a hit could not book: not a count (past
    ``MAX_TOKENS``: a hostile upstream's 10**30 went into a /metrics counter for good)."""
    if not isinstance(saved, int) or not 0 <= saved <= MAX_TOKENS:
        raise ValueError(f"saved tokens {saved!r}")


@dataclass(frozen=True, slots=True)
class _Served:
    """A stored answer made ready to serve (:func:`_served`)."""

    saved: int  # its completion tokens, saved
    answer: dict[str, Any]  # a new response: new id, this request's echoes
    events: list[bytes] | None  # a stream's events, when the request streams


def _served(request: GatewayRequest, adapter: Adapter, entry: Entry) -> _Served | None:
    """A stored answer made ready to serve.

    NOTE: None when it cannot be served back: an entry stored by a build before
    :func:`_replayable` (``"usage": "x"``), or a damaged record, failed every hit on it with a
    500 (a stream broke mid-replay) until its TTL ran out; the caller drops it and answers the
    request as a miss. A stream's events are made here, before any is sent, for that reason.
    """
    try:
        saved = adapter.saved_tokens(entry.response)
        answer = adapter.fresh(request, entry.response)
        events = list(adapter.replay(request, answer)) if request.stream else None
        _check_saved(saved)
        adapter.delivered(request, answer, upstream=False)
    except Exception as exc:  # (any failure here is the stored data's: a miss, not a 500)
        log.warning("model %s: cached answer %d cannot be served back (%s: %s): dropped, "
                    "answered as a miss", request.model, entry.id, type(exc).__name__, exc)  # fmt: skip
        return None
    return _Served(saved, answer, events)


def _bridge(backend: Backend, adapter: Adapter, request: GatewayRequest) -> Bridge | None:
    """None when the backend speaks the request's API, once it has checked the request
    (``Backend.check``); else the adapter's chat bridge, once that has (``Bridge.check``), the
    request is in chat form (``to_chat``: what that form cannot carry) and the backend has
    checked that (the local model's sampling, a tool call it cannot read): all before the
    cache is looked in, in the order a call would find them, named as the client sent them."""
    if request.kind in backend.apis:
        backend.check(request)
        return None
    bridge = adapter.bridge
    if bridge is None or "chat" not in backend.apis:
        routes = " or ".join(
            f"POST {_ROUTES[api]}" for api in sorted(backend.apis & _ROUTES.keys())
        )
        raise APIError(
            400,
            f"The model `{request.model}` does not serve the {request.kind} API: use {routes}.",
            param="model",
            code="unsupported_endpoint",
        )
    bridge.check(request)
    with _params_of(request):
        chat = bridge.to_chat(request)
        backend.check(chat)
    return _Checked(bridge, request, chat)


@dataclass(frozen=True)
class _Checked:
    """A chat bridge with the request ``_bridge`` checked in chat form: the call made for it
    takes that form, not another made the same way (an audit's request is converted anew)."""

    bridge: Bridge
    request: GatewayRequest
    chat: GatewayRequest

    def check(self, request: GatewayRequest) -> None:
        self.bridge.check(request)

    def to_chat(self, request: GatewayRequest) -> GatewayRequest:
        return self.chat if request is self.request else self.bridge.to_chat(request)

    def from_chat(
        self, request: GatewayRequest, answer: Answer, sampling: Mapping[str, float]
    ) -> Answer:
        return self.bridge.from_chat(request, answer, sampling)

    def from_chat_stream(
        self, request: GatewayRequest, stream: BackendStream, sampling: Mapping[str, float]
    ) -> BackendStream:
        return self.bridge.from_chat_stream(request, stream, sampling)


#: The route of each API a backend may serve (what a 400 for another API points the client to).
_ROUTES = {"chat": "/v1/chat/completions", "completion": "/v1/completions",
           "responses": "/v1/responses", "messages": "/v1/messages"}  # fmt: skip


def _audit_job(
    backend: Backend,
    bridge: Bridge | None,
    request: GatewayRequest,
    adapter: Adapter,
    auth: str | None,
    account: str,
    hit: Lookup,
    generation: int,
) -> AuditJob:
    """The audit of a semantic hit: the same request to the same backend with the same
    credentials, as one non-streamed call whose answer nobody stores.

    NOTE: it calls the backend directly, past the response cache, so the fresh answer can
    never be stored or served; a Responses request says ``store: false`` so the upstream keeps
    no response object for it either.
    """
    assert hit.entry is not None

    def audited(sent: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in sent.items() if k not in ("stream", "stream_options")}
        if request.kind == "responses":
            body["store"] = False
        return body

    control = dataclasses.replace(request.control, no_cache=True, no_store=True)
    standalone = None if request.standalone is None else audited(request.standalone)
    # (one attempt: an audit is optional, its retries would add to a failing upstream's load)
    asked = dataclasses.replace(request, body=audited(request.body), stream=False,
                                include_usage=False, control=control, standalone=standalone,
                                retries=False)  # fmt: skip

    def ask() -> Awaitable[Answer]:
        return _complete(backend, bridge, asked, auth, None)

    return AuditJob(asked, adapter, hit.entry.response, ask, account, generation)


def _abandoned(exc: BaseException, state: CacheState, meter: Meter, seen: dict[str, Any]) -> None:
    """A non-streamed call whose client left (``exc``) is booked as a stream whose client left
    (``_Relay._spent``) when its backend counted that the model ran: ``exc.reply``."""
    if not isinstance(exc, ClientDisconnected) or meter.counted is None:
        return
    counted = meter.counted()
    if counted and counted.get("prompt_tokens"):  # (none: it never ran: ``BackendStream.counted``)
        usage = partial_usage(None, counted, 0)
        outcome = StreamOutcome(error="client_disconnected", usage=usage)
        exc.reply = Reply(state, outcome=outcome, **seen)


async def _complete(
    backend: Backend,
    bridge: Bridge | None,
    request: GatewayRequest,
    auth: str | None,
    watch: Watch[Any] | None,
    meter: Meter | None = None,
) -> Answer:
    if bridge is None:
        return await resent_if_lost(
            lambda sent: _watched(backend.complete(sent, auth, meter), watch), request
        )
    with _params_of(request):
        chat = bridge.to_chat(request)
        answer = await _renamed(
            lambda sent: _watched(backend.complete(sent, auth, meter), watch), chat
        )
    return bridge.from_chat(request, answer, backend.sampling_defaults())


async def _open(
    backend: Backend,
    bridge: Bridge | None,
    request: GatewayRequest,
    auth: str | None,
    watch: Watch[Any] | None,
) -> BackendStream:
    if bridge is None:
        return await resent_if_lost(
            lambda sent: _watched(backend.open_stream(sent, auth), watch), request
        )
    with _params_of(request):
        chat = bridge.to_chat(request)
        stream = await _renamed(lambda sent: _watched(backend.open_stream(sent, auth), watch), chat)
    return bridge.from_chat_stream(request, stream, backend.sampling_defaults())


async def _renamed(call: Callable[[GatewayRequest], Awaitable[T]], chat: GatewayRequest) -> T:
    """``call(chat)`` (a bridged request in chat form), and once more with its ``max_tokens``
    as ``max_completion_tokens`` when the upstream refuses the older name, as OpenAI's
    reasoning models do (the bridge sends ``max_tokens``, which other servers know)."""
    try:
        return await call(chat)
    except APIError as exc:
        if exc.param != "max_tokens" or "max_completion_tokens" not in exc.message:
            raise
        if "max_tokens" not in chat.body:
            raise
    body = {k: v for k, v in chat.body.items() if k != "max_tokens"}
    body["max_completion_tokens"] = chat.body["max_tokens"]
    return await call(dataclasses.replace(chat, body=body))


@contextlib.contextmanager
def _params_of(request: GatewayRequest) -> Iterator[None]:
    """An error about the chat form of a bridged request names what the client sent: a
    Responses request's field in its ``param`` (``responses.param_as_sent``), a Messages
    request's as ``messages_bridge.named_as_sent`` says."""
    try:
        yield
    except APIError as exc:
        if request.kind == "messages":
            named_as_sent(request.body, exc)
        elif request.kind == "responses":
            param_as_sent(exc)
        raise


async def _watched(call: Awaitable[T], watch: Watch[Any] | None) -> T:
    result: T = await (watch(call) if watch else call)
    return result
