"""The response cache (tier 1): exact lookup, then semantic lookup, and storing answers.

    >>> cache = ResponseCache(DiskStore(path, max_entries=100_000), CacheSettings(),
    ...                       SemanticSettings(threshold=0.8))
    >>> await cache.start()                          # loads the embedder, restores the index
    >>> found = await cache.lookup(key)              # Lookup(kind="exact"|"semantic"|"miss", ...)
    >>> if found.entry is None:
    ...     response = run_the_model()
    ...     await cache.store(key, response, model=..., tenant=..., namespace=...,
    ...                       vector=found.vector)   # reuse the lookup's embedding

A semantic hit needs three things: the nearest stored question *of the same scope* (scope is
an exact-match key: tenant, model, parameters, system prompt, earlier turns), a cosine
similarity at or above the threshold, and the precision guard's agreement (it rejects what
embeddings blur: changed numbers, negations, other named entities, ...). The threshold trades
hit rate for precision; docs/configuration.md shows the trade-off measured on Quora pairs.

The cache knows nothing about HTTP or models: it is given a ``CacheKey`` (see keys.py) and
the complete response object, and gives back stored response objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from ._daemon import on_daemon_thread
from .keys import CacheKey, context_question, entry_id
from .store import Entry, EntryStore, StoreUnavailable, Superseded, TenantEntries

if TYPE_CHECKING:
    from .embedder import Embedder
    from .guard import Guard
    from .index import Hit, VectorIndex
    from .verifier import CandidateSignals, PairVerifier

__all__ = [
    "CacheSettings",
    "Lookup",
    "Rejection",
    "ResponseCache",
    "SemanticSettings",
    "score_threshold",
]

log = logging.getLogger(__name__)

LookupKind = Literal["exact", "semantic", "miss"]
#: Why a semantic lookup was skipped under overload (``Lookup.skipped``).
SkipReason = Literal["overload", "overload_verify", "loading"]

#: Nearest neighbours checked per semantic lookup. NOTE: only the nearest, with the guard or
#: the verifier: the next ones were measured to add more wrong hits than right ones (the guard,
#: Quora as a cache: precision 0.667 with 1 candidate, 0.654 with 4; the verifier, 3,000
#: training-half Quora questions against the training half's stored ones: the nearest 3
#: instead of 1 served 78 more, none of them a labelled pair, and the ones read by hand were
#: mostly wrong, for twice the cross-encoder's time). With ``context: verify`` the verifier
#: scores the nearest few in one batch (``SemanticSettings.candidates``): follow-ups that share
#: their question ("And the price?") differ only in their context.
_CANDIDATES = 1
#: Nearest neighbours searched at most to find the candidates that can be served, past stale
#: ones (expired, not yet swept; older than the request's max-age): see ``_servable``.
_DEEPEST = 64
#: Cosine threshold with the guard alone (tuned with it; see guard.DEFAULT_THRESHOLD).
_GUARD_THRESHOLD = 0.8
#: Similarities are float32 dot products: identical texts give 0.99999994, not 1.
_EPSILON = 1e-5
#: Seconds ``close`` waits for its background tasks (the sweeper, the follower) to stop.
_CLOSE_WAIT_S = 5.0

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CacheSettings:
    exact: bool = True
    #: Seconds an entry stays servable: when the request gives no ttl, and the most it may ask
    #: for (a client must not keep an answer past the operator's policy); None: forever.
    ttl: float | None = 7 * 24 * 3600.0
    #: How often expired entries are swept out of the store and the index.
    sweep_interval: float = 60.0


@dataclass(frozen=True, slots=True)
class SemanticSettings:
    """The semantic tier (``cache.semantic`` in YAML)."""

    #: Cosine similarity a stored question needs before it is judged (0 and 1 are valid). With
    #: the verifier it is a recall-oriented pre-filter; None: the verifier's calibrated floor
    #: (0.8, tuned with the guard, when the verifier is off).
    threshold: float | None = None
    guard: bool = True
    #: The answer-equivalence verifier: None (off: the guard decides alone), "bundled" (the
    #: shipped weights) or a model directory (see semantic/verifier.py).
    verifier: str | None = None
    #: What the verifier does: "veto" (the guard decides which candidate may answer, and the
    #: cross-encoder can turn that one down: it runs only on would-be hits) or "decide" (every
    #: candidate past the cosine floor is judged by the cross-encoder combined with the cosine
    #: and the guard's signals; needed for ``context: verify`` and ``max_wrong_rate``).
    verifier_role: Literal["veto", "decide"] = "decide"
    #: The verifier's score a hit needs. None: ``veto``: the shipped veto threshold; ``decide``:
    #: from ``max_wrong_rate`` through the calibration table, or the shipped default.
    verifier_threshold: float | None = None
    #: Target rate of wrong hits among non-equivalent candidates, mapped to a score threshold.
    max_wrong_rate: float | None = None
    #: The guard verifier's acceptance probability; None: the value shipped with its weights.
    guard_min_score: float | None = None
    #: sentence-transformers model directory; None: the bundled all-MiniLM-L6-v2.
    embedding_model: str | None = None
    #: The embedder's forward pass: "torch", "onnx" or "onnx-int8" (see semantic/embedder.py).
    embedder_backend: str = "torch"
    #: The verifier's model call: "torch", "onnx" or "onnx-int8" (see semantic/verifier.py).
    verifier_backend: str = "torch"
    #: Where ONNX exports (the embedder's and the verifier's) are kept; None:
    #: $XDG_CACHE_HOME/cachegate/models.
    export_dir: Path | None = None
    hnsw_threshold: int = 8192
    #: HNSW search beam width (see VectorIndex).
    hnsw_ef_search: int = 32
    #: Where the vector index is saved (restarts load it); None: rebuilt from the store.
    index_path: Path | None = None
    #: Seconds a request may wait for the embedder; past it the lookup skips the semantic
    #: tier (and the answer is stored for exact hits only). The same bound, its own, for the
    #: verifier's worker: past it the lookup is a miss. None: wait as long as it takes.
    max_wait: float | None = None
    #: Nearest candidates the verifier scores (role ``decide``) in one batch: 1, or 3 when
    #: earlier turns are compared (``context: verify``, see ``_CANDIDATES``).
    candidates: int = _CANDIDATES
    #: Whether a conversation's would-be hit also needs its context pair to pass
    #: (``_same_context``); False: the whole pair decides alone.
    context_pair: bool = True


@dataclass(frozen=True, slots=True)
class Lookup:
    """The result of a lookup: a hit (exact or semantic) or a miss."""

    kind: LookupKind
    entry: Entry | None = None
    #: Cosine similarity of the semantic hit (1.0 for exact hits).
    similarity: float | None = None
    #: Seconds since the entry was stored.
    age: float | None = None
    #: The question's embedding, when one was computed (pass it to ``store``).
    vector: np.ndarray | None = None
    #: The guard's (or verifier's) probability for a semantic hit (None: it did not run).
    score: float | None = None
    #: On a miss: the nearest entry the guard turned down, and why (for the dashboard).
    rejected: Rejection | None = None
    #: Why the semantic lookup was skipped, or given up on before a candidate was served
    #: (None: it was not): "overload" (the embedder was overloaded, or the caller) or
    #: "overload_verify" (the verifier was), "loading" (the semantic tier still loads).
    #: Counted in ``semantic_skipped`` by ``lookup``.
    skipped: SkipReason | None = None

    @property
    def overloaded(self) -> bool:
        """The lookup was skipped for overload (pass it to ``store``; a ``vector`` made before
        is still stored). Not one skipped while the tier loaded: its store waits for it."""
        return self.skipped is not None and self.skipped != "loading"


@dataclass(frozen=True, slots=True)
class Rejection:
    """A candidate over the threshold that the precision guard (or verifier) rejected."""

    entry: Entry
    similarity: float
    reason: str
    score: float | None


@dataclass(slots=True)
class _Counters:
    lookups: int = 0
    hits: Counter[str] = field(default_factory=Counter)
    rejections: Counter[str] = field(default_factory=Counter)
    stores: int = 0
    #: answers not stored: the store could not take them (Redis down, a full disk) or a hit
    #: could not serve them back (``unstorable``)
    store_failures: int = 0
    superseded: int = 0  # answers not stored: a flush came after their request began
    evictions: int = 0
    expirations: int = 0
    too_long: int = 0  # questions longer than the embedding model reads: exact hits only
    semantic_errors: int = 0  # semantic lookups that failed (a model or index error): misses
    replay_failures: int = 0  # entries found that could not be served back: dropped, misses
    #: Semantic steps skipped because the embedder or the verifier was overloaded, at most
    #: once per request and reason: "overload" (lookups that skipped the semantic tier, or a
    #: context pair not embedded in time), "overload_verify" (lookups whose candidate the
    #: verifier could not start on in time: misses), "overload_store" (answers stored without
    #: a vector: exact hits only), "loading" (lookups while the semantic tier still loaded:
    #: exact only; their answers are stored once it has).
    skipped: Counter[str] = field(
        default_factory=lambda: Counter(overload=0, overload_verify=0, overload_store=0, loading=0)
    )


class ResponseCache:
    """Exact and semantic response cache over an EntryStore (disk or Redis)."""

    def __init__(
        self,
        store: EntryStore,
        settings: CacheSettings,
        semantic: SemanticSettings | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._semantic = semantic
        self._counters = _Counters()
        self._tasks: list[asyncio.Task[None]] = []
        self._ready = asyncio.Event()
        self._loaded = asyncio.Event()  # the index holds the store's entries
        self._failed: BaseException | None = None
        self._loading = threading.Event()  # (set while a load of the semantic parts runs)
        self.embedder: Embedder | None = None
        self.index: VectorIndex | None = None
        self.guard: Guard | None = None
        self.verifier: PairVerifier | None = None
        #: Resolved at load: the cosine pre-filter and the verifier's score threshold.
        self.cosine_threshold = _GUARD_THRESHOLD
        self.score_threshold: float | None = None

    # -- public ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start loading the semantic parts (in the background) and the expiry sweeps."""
        self._tasks.append(asyncio.create_task(self._sweep_forever(), name="cache-sweeper"))
        if self._semantic is None:
            self._ready.set()
            if self._store.shared:  # no index to keep, but the entry count follows the others
                self._tasks.append(asyncio.create_task(self._store.follow(self), name="follower"))
        else:
            self._tasks.append(asyncio.create_task(self._load_semantic(), name="cache-loader"))

    @property
    def epoch(self) -> int | None:
        """The store's epoch now (a disk store's flush count, Redis's token of its last flush):
        taken when a request begins, passed to ``store`` with its answer, which is not stored
        if a flush (through any replica) came meanwhile."""
        return self._store.epoch

    @property
    def exact(self) -> bool:
        """Whether the exact tier is on (answers are found by the request's exact key)."""
        return self._settings.exact

    @property
    def ready(self) -> bool:
        """False while the embedding model loads and the vector index is restored.

        True again if the semantic tier failed to start: exact hits still work (see ``stats``).
        """
        return self._ready.is_set()

    async def loaded(self) -> None:
        """Wait until ``ready`` (a lookup does not wait: it skips the semantic step)."""
        await self._ready.wait()

    @property
    def loading(self) -> bool:
        """Whether a model load still runs on its thread (which ``close`` does not wait for)."""
        return self._loading.is_set()

    @property
    def available(self) -> bool:
        """False while the store cannot be reached (Redis down): lookups miss, stores skip."""
        return self._store.available

    async def close(self) -> None:
        if self.loading:
            log.warning("the semantic cache is still loading: shutting down without it")
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            # NOTE: bounded: a task whose cancellation a library swallowed (turned into the
            # timeout of a Redis read it then retries) must not hang the shutdown
            done, pending = await asyncio.wait(self._tasks, timeout=_CLOSE_WAIT_S)
            for task in done:
                if not task.cancelled():
                    task.exception()  # (retrieved: a task that failed was logged already)
            if pending:
                log.warning("response cache: %d task(s) did not stop when closed", len(pending))
        if self.index is not None and self._semantic and self._semantic.index_path:
            try:
                await asyncio.to_thread(self.index.save, self._semantic.index_path)
            except Exception:
                log.exception("saving the vector index failed (it is rebuilt at the next start)")
        if self.embedder is not None:
            self.embedder.close()
        await self._store.close()

    async def lookup(
        self,
        key: CacheKey,
        *,
        max_age: float | None = None,
        threshold: float | None = None,
        score_threshold: float | None = None,
        again: Lookup | None = None,
        overloaded: bool = False,
    ) -> Lookup:
        """Find a stored answer for ``key``.

        ``max_age`` (seconds) rejects older entries; ``threshold`` overrides the configured
        semantic similarity threshold for this lookup; ``score_threshold`` the verifier's score
        threshold (role ``decide``; auto-tighten's: the near-duplicate shortcut is off with it,
        every candidate is scored). ``again``: the request's first lookup, when this is a
        second one for it (after waiting for an identical one): not counted as another lookup,
        nor is a skip of the reason that one counted (one skip of a reason per request).
        ``overloaded``: the caller is overloaded (its CPU cannot keep up): unless ``max_wait``
        is None (always wait), the semantic lookup is skipped as when the embedder is busy.
        """
        if again is None:
            self._counters.lookups += 1
        now, max_age = time.time(), self._oldest(max_age)
        if self._settings.exact:
            entry = await self._store.get(entry_id(key.exact))
            if entry is not None and entry.exact == key.exact and _fresh(entry, now, max_age):
                await self._store.record_hit(entry.id)
                self._counters.hits["exact"] += 1
                return Lookup("exact", entry, 1.0, now - entry.created)
        if key.semantic and self._semantic_loading():
            # NOTE: not waited for: a miss waited for the whole load (6-10 s after a start,
            # a shutdown's whole deadline), though the model would have answered in one; its
            # answer's store (off the request's path) still waits, to store its vector
            if again is None:
                self._counters.skipped["loading"] += 1
            return Lookup("miss", skipped="loading")
        if not (key.semantic and await self._semantic_ready()):
            return Lookup("miss")
        assert self.embedder is not None
        if not self.embedder.fits(key.question):
            self._counters.too_long += 1  # exact hits only: see Embedder.fits
            return Lookup("miss")
        try:
            found = await self._lookup_semantic(
                key, now, max_age, threshold, score_threshold, overloaded
            )
        except Exception:
            # NOTE: a cache that fails must not fail the request: the model answers it (an
            # embedder or verifier error, an index bug), counted and logged
            self._counters.semantic_errors += 1
            if self._counters.semantic_errors % 1000 == 1:  # (not a line per request)
                log.exception("semantic lookup failed (%d so far): answered as a miss",
                              self._counters.semantic_errors)  # fmt: skip
            return Lookup("miss")
        if found.skipped is not None and (again is None or again.skipped != found.skipped):
            self._counters.skipped[found.skipped] += 1
        return found

    async def store(
        self,
        key: CacheKey,
        response: dict[str, Any],
        *,
        model: str,
        tenant: str,
        namespace: str,
        ttl: float | None = None,
        vector: np.ndarray | None = None,
        overloaded: bool = False,
        epoch: int | None = None,
    ) -> Entry | None:
        """Store a complete, successful answer (None: the store could not take it, or it
        holds what the store cannot encode, an integer past 64 bits: counted in
        ``store_failures``; or no tier could find it: the exact tier is off and it has no
        vector; or the cache was flushed since ``epoch``, the ``epoch`` when its request
        began). ``ttl`` (the request's) shortens the configured one, never extends it.

        ``overloaded``: the lookup found the embedder overloaded (``Lookup.overloaded``);
        without a ``vector`` the answer is stored for exact hits only, without waiting for the
        embedder again.
        """
        now = time.time()
        ttl = self._ttl(ttl)
        # (waits while it loads: off the request's path, see gateway.pipeline.store_soon)
        semantic = key.semantic and await self._semantic_ready()
        semantic = semantic and self.embedder is not None and self.embedder.fits(key.question)
        if semantic and vector is None:
            vector = None if overloaded else await self._embed_for_store(key.question)
            if overloaded:
                self._counters.skipped["overload_store"] += 1
            semantic = vector is not None
        if not semantic:
            vector = None  # a vector without its model's name could never be searched
            if not self._settings.exact:
                # NOTE: no tier could ever serve it (a completion, a question too long or met
                # while overloaded): stored, it only evicted answers that can be served
                return None
        entry = self._entry(
            key, response, vector, now, ttl, model=model, tenant=tenant, namespace=namespace
        )
        try:
            evicted = await self._store.put(entry, epoch=epoch)
        except Superseded:  # made before a flush: not served after it
            self._counters.superseded += 1
            return None
        except StoreUnavailable:  # (Redis down, a full disk: logged once, not per answer)
            self._counters.store_failures += 1
            return None
        except OverflowError as exc:  # an integer msgpack cannot hold (past 64 bits)
            self._counters.store_failures += 1
            log.warning("an answer of %s could not be stored: %s", model, exc)
            return None
        self._stored([entry], evicted)
        return entry

    async def store_many(
        self,
        answers: Sequence[tuple[CacheKey, dict[str, Any]]],
        *,
        model: str,
        tenant: str,
        namespace: str,
        ttl: float | None = None,
        epoch: int | None = None,
    ) -> int:
        """Store complete answers for exact hits only (an embeddings batch's inputs: their
        keys are not semantic) in a few store writes, not one each; returns how many were
        stored (the others are counted in ``store_failures``; none when the cache was
        flushed since ``epoch``, as for ``store``)."""
        now = time.time()
        ttl = self._ttl(ttl)
        where = {"model": model, "tenant": tenant, "namespace": namespace}
        entries = [self._entry(key, response, None, now, ttl, **where) for key, response in answers]
        try:
            evicted = await self._store.put_many(entries, epoch=epoch)
        except Superseded as exc:  # asked for before a flush: not served after it
            self._counters.superseded += len(entries)
            self._dropped(exc.removed)  # (evicted for the first ones, stored before the flush)
            return 0
        except StoreUnavailable as exc:
            # NOTE: a disk store wrote the first ``stored`` ones; of a shared store's, which
            # may be any, only the count is used (its follower applies the puts)
            self._counters.store_failures += len(entries) - exc.stored
            entries, evicted = entries[: exc.stored], exc.removed
        self._stored(entries, evicted)
        return len(entries)

    def _oldest(self, max_age: float | None) -> float | None:
        """The oldest answer a lookup may serve: ``max_age`` (the request's), and never one
        older than the configured ``ttl``. NOTE: an answer's expiry is set when it is stored:
        after a restart with a lower ``ttl``, those stored under the higher one were served
        until their own expiry (an hour-old answer under ``ttl: 5``)."""
        ttl = self._settings.ttl
        return ttl if max_age is None else max_age if ttl is None else min(max_age, ttl)

    def _ttl(self, ttl: float | None) -> float | None:
        """The TTL of an answer a request asked to keep ``ttl`` seconds (None: it did not say):
        at most the configured one (``x-cache-ttl: 315360000`` kept it 10 years, past a
        ``cache.ttl`` of a day)."""
        if ttl is None or self._settings.ttl is None:
            return self._settings.ttl if ttl is None else ttl
        return min(ttl, self._settings.ttl)

    def _entry(
        self, key: CacheKey, response: dict[str, Any], vector: np.ndarray | None,
        now: float, ttl: float | None, *, model: str, tenant: str, namespace: str,
    ) -> Entry:  # fmt: skip
        return Entry(
            id=entry_id(key.exact),
            exact=key.exact,
            scope=key.scope,
            question=key.question,
            model=model,
            tenant=tenant,
            namespace=namespace,
            response=response,
            created=now,
            expires=None if ttl is None else now + ttl,
            vector=None if vector is None else np.asarray(vector, dtype=np.float32).tobytes(),
            vector_model=self.embedder.model_name if vector is not None and self.embedder else "",
        )

    def _stored(self, entries: Sequence[Entry], evicted: list[int]) -> None:
        """``entries`` were written, evicting ``evicted``."""
        # NOTE: an answer stored again without a vector (semantic off for it) must leave the
        # index too, or a later search finds an entry the guard has no vector for. A shared
        # store's follower applies the put instead, in order with every other write of the id
        # (see ``_dropped``); ``put`` returned once it had, so the next lookup here finds it.
        if not self._store.shared:
            for entry in entries:
                self.on_put(entry.id, entry.scope, entry.vector, entry.vector_model)
        self._dropped(evicted)
        self._counters.stores += len(entries)
        self._counters.evictions += len(evicted)

    async def flush(self, namespace: str | None = None) -> int:
        """Drop every entry (or those of one namespace); returns how many."""
        try:
            ids = await self._store.flush(namespace)
        except StoreUnavailable as exc:
            self._dropped(exc.removed)  # what did go stays gone from the index too
            raise
        self._dropped(ids)
        return len(ids)

    def stats(self) -> dict[str, Any]:
        c = self._counters
        out: dict[str, Any] = {
            # 0 while the store cannot be used (Redis down: answered without it; /readyz
            # "degraded" said so, and nothing an alert on /metrics could read)
            "available": int(self.available),
            "entries": len(self._store),
            "lookups": c.lookups,
            "hits": {"exact": c.hits["exact"], "semantic": c.hits["semantic"]},
            "guard_rejections": sum(c.rejections.values()),
            "guard_rejections_by_reason": dict(c.rejections),
            "stores": c.stores,
            "store_failures": c.store_failures,
            "stores_superseded": c.superseded,
            "evictions": c.evictions,
            "expirations": c.expirations,
            "too_long_for_semantic": c.too_long,
            "semantic_errors": c.semantic_errors,
            "replay_failures": c.replay_failures,
            "semantic_skipped": dict(c.skipped),
            # a shared store's commands skipped because this replica had too many in flight
            "store_skipped_commands": getattr(self._store, "skipped_turns", 0),
            # ... and those given up past the timeout while Redis answered the others
            "store_slow_commands": getattr(self._store, "slow_commands", 0),
            "semantic": _semantic_state(self._semantic, self._ready.is_set(), self._failed),
        }
        if self.embedder is not None:
            emb = self.embedder.stats()
            out["embedder"] = {
                "backend": self.embedder.backend,
                "queued": emb.queued,
                "waits": emb.waits,
                "wait_seconds": emb.wait_seconds,
                "texts_encoded": emb.texts_encoded,
            }
        if self.verifier is not None:
            out["verifier"] = {
                "path": str(self.verifier.path),
                "backend": self.verifier.backend,
                "role": self._semantic.verifier_role if self._semantic else None,
                "combiner": self._decides and self.verifier.combiner is not None,
                "score_threshold": self.score_threshold,
                "cosine_threshold": self.cosine_threshold,
                "vetoes": list(self.verifier.vetoes),
            }
        if self.index is not None:
            index = self.index.stats()
            out["index"] = {
                "entries": index.entries,
                "scopes": index.scopes,
                "hnsw_scopes": index.hnsw_scopes,
                "ef_search": self.index.ef_search,
            }
        return out

    # -- inspection (the admin API) -------------------------------------------------------

    def tenant_entries(self) -> TenantEntries:
        """Entries per tenant, where the store keeps a share per tenant (none otherwise)."""
        counts: Callable[[], TenantEntries] | None = getattr(self._store, "tenant_entries", None)
        return counts() if counts is not None else TenantEntries({})

    async def entries(self) -> AsyncIterator[Entry]:
        """Every live entry, in the store's order (for listing; reads the whole store)."""
        async for entry in self._store.entries():
            yield entry

    async def entry(self, entry_id: int) -> Entry | None:
        """One entry by id (None when absent or expired); not counted as a lookup or a hit.
        StoreUnavailable when the store could not say."""
        entry = await self._store.get(entry_id, strict=True)
        return None if entry is None or entry.expired(time.time()) else entry

    async def delete(self, entry_id: int) -> bool:
        """Drop one entry (and its vector); False when there was none. StoreUnavailable when
        the store could not say, or did not delete it."""
        if await self._store.get(entry_id, strict=True) is None:
            return False
        await self._store.delete([entry_id])
        self._dropped([entry_id])
        return True

    async def drop_unreplayable(self, entry: Entry) -> None:
        """Drop a found entry whose answer could not be served back (stored by an older build
        that stored any complete answer, or a damaged record), from the store and the index,
        and count it; its request is answered as a miss. A store that cannot delete it now
        (Redis down) leaves it: the next hit on it tries again.

        NOTE: only ``entry`` itself, as it was found: ids are fixed per exact key, and a fresh
        answer stored under the same id since the lookup (by another request, here or on
        another replica) must stay, with its vector; it replaces the bad one anyway."""
        self._counters.replay_failures += 1
        try:
            deleted = await self._store.delete_if_unchanged(entry)
        except StoreUnavailable:
            return
        if deleted:
            self._dropped([entry.id])

    def unstorable(self) -> None:
        """Count a complete answer not stored because a hit could not serve it back (the
        gateway's check, before any write): a store failure, as one the store cannot encode."""
        self._counters.store_failures += 1

    # -- StoreListener: index changes (a shared store's follower makes them all, in order) --

    def on_put(self, entry_id: int, scope: str, vector: bytes | None, vector_model: str) -> None:
        if self.index is None:
            return
        if self._searchable(vector, vector_model):
            assert vector is not None
            vec = np.frombuffer(vector, dtype=np.float32)
            self.index.add(entry_id, _index_scope(vector_model, scope), vec)
        else:  # replaced by an entry without a vector of this model: exact hits only
            self.index.remove(entry_id)

    def on_delete(self, ids: list[int]) -> None:
        if self.index is not None:
            for i in ids:
                self.index.remove(i)

    async def on_reset(self) -> None:
        """Reload the whole index from the store (start-up, or after missing events)."""
        if self._semantic is None:
            return  # no index: nothing to list
        items = [
            (e.id, _index_scope(e.vector_model, e.scope), _vector(e))
            async for e in self._store.entries()
            if self._searchable(e.vector, e.vector_model)
        ]
        if self.index is not None:
            await asyncio.to_thread(self.index.rebuild, items)
            log.info("vector index loaded from the store: %d entries", len(items))
        self._loaded.set()

    # -- helpers ---------------------------------------------------------------------------

    async def _lookup_semantic(
        self,
        key: CacheKey,
        now: float,
        max_age: float | None,
        threshold: float | None,
        score_threshold: float | None,
        overloaded: bool,
    ) -> Lookup:
        """``threshold``, ``score_threshold``: the lookup's cosine and verifier score thresholds
        (None: the settings')."""
        assert self.embedder is not None and self.index is not None
        index = self.index
        scope = _index_scope(self.embedder.model_name, key.scope)
        k = self._verified_candidates if self._decides else _CANDIDATES
        from .embedder import EmbedderBusy  # (loaded with the embedder: torch is imported)
        from .verifier import VerifierBusy

        max_wait = self._max_wait
        # the search runs in the embedder's worker, right after the encode (off the event loop)
        try:
            if overloaded and max_wait is not None:  # the caller is: as if the embedder were
                raise EmbedderBusy("the gateway is overloaded")
            vector, hits = await self.embedder.embed_then(
                key.question, lambda vec: index.search(scope, vec, k=k), max_wait=max_wait
            )
        except EmbedderBusy:  # overloaded: a miss now beats a hit seconds later
            return Lookup("miss", skipped="overload")
        limit = (self.cosine_threshold if threshold is None else threshold) - _EPSILON
        candidates = await self._servable(key, scope, vector, hits, k, limit, now, max_age)
        same = self._same_request(key, candidates)
        if same is not None:
            await self._store.record_hit(same.id)
            self._counters.hits["exact"] += 1
            return Lookup("exact", same, 1.0, now - same.created, vector)
        try:
            found, score, rejected = await self._judged(key, vector, candidates, score_threshold)
        except EmbedderBusy:  # (the context pair's turns: see ``_same_context``)
            return Lookup("miss", vector=vector, skipped="overload")
        except VerifierBusy:  # never a hit the verifier did not judge: a miss, as above
            return Lookup("miss", vector=vector, skipped="overload_verify")
        if found is None:
            return Lookup("miss", vector=vector, rejected=rejected)
        hit, entry = found
        await self._store.record_hit(entry.id)
        self._counters.hits["semantic"] += 1
        age = now - entry.created
        return Lookup("semantic", entry, hit.similarity, age, vector, score=score)

    async def _judged(
        self,
        key: CacheKey,
        vector: np.ndarray,
        candidates: list[tuple[Hit, Entry]],
        score_threshold: float | None,
    ) -> _Judged:
        """The candidate that may answer: the verifier decides (role ``decide``), else the
        guard (and the verifier as a veto). EmbedderBusy or VerifierBusy past ``max_wait``."""
        if self._decides:
            return await self._verified(key, vector, candidates, score_threshold)
        return await self._guarded(key, vector, candidates)

    def _same_request(self, key: CacheKey, candidates: list[tuple[Hit, Entry]]) -> Entry | None:
        """A candidate that is this very request (its exact key).

        NOTE: the same request, stored while this one was embedded (identical requests arriving
        together), is an exact hit, not a "semantic" one at similarity 1.0.
        """
        if not self._settings.exact:
            return None
        return next((entry for _, entry in candidates if entry.exact == key.exact), None)

    async def _servable(
        self, key: CacheKey, scope: str, vector: np.ndarray, hits: list[Hit], k: int,
        limit: float, now: float, max_age: float | None,
    ) -> list[tuple[Hit, Entry]]:  # fmt: skip
        """The nearest ``k`` candidates that can be served, from the ``k`` nearest ``hits``.

        NOTE: past entries that cannot be served (expired but not yet swept, older than the
        request's ``max_age``, gone) the search goes deeper: a stale nearest neighbour hid the
        fresh paraphrase behind it (a miss). When the nearest ``k`` can be served, they are
        the candidates, as before (the search is not repeated).
        """
        assert self.index is not None
        index, seen, searched = self.index, {hit.id for hit in hits}, k
        found, complete = await self._candidates(key, hits, limit, now, max_age, k)
        while complete and len(found) < k and len(hits) == searched and searched < _DEEPEST:
            if hits[-1].similarity < limit:
                break  # (no more candidates past the cosine floor)
            searched = min(4 * searched, _DEEPEST)
            hits = await asyncio.to_thread(index.search, scope, vector, searched)
            deeper = [hit for hit in hits if hit.id not in seen]
            seen.update(hit.id for hit in deeper)
            more, complete = await self._candidates(
                key, deeper, limit, now, max_age, k - len(found)
            )
            found += more
        return found

    async def _candidates(
        self, key: CacheKey, hits: list[Hit], limit: float, now: float, max_age: float | None,
        want: int,
    ) -> tuple[list[tuple[Hit, Entry]], bool]:  # fmt: skip
        """The first ``want`` live, fresh entries of ``key``'s scope among ``hits`` at or above
        ``limit``, and False when the store could not be read (do not look further)."""
        out: list[tuple[Hit, Entry]] = []
        for hit in hits:
            if hit.similarity < limit or len(out) >= want:
                break
            try:  # NOTE: strict: a read that could not be made is no proof the entry is gone
                entry = await self._store.get(hit.id, strict=True)
            except StoreUnavailable:
                return out, False  # the store is unreachable or busy: a miss, the vector stays
            if (
                entry is None  # expired or evicted elsewhere
                or entry.scope != key.scope
                or not self._searchable(entry.vector, entry.vector_model)
            ):
                self._dropped([hit.id])
                continue
            if _fresh(entry, now, max_age):
                out.append((hit, entry))
        return out, True

    async def _guarded(
        self, key: CacheKey, vector: np.ndarray, candidates: list[tuple[Hit, Entry]]
    ) -> _Judged:
        """The first candidate the guard accepts and the verifier (role ``veto``) lets through."""
        rejected: Rejection | None = None
        for hit, entry in candidates:
            score: float | None = None
            reason = "ok"
            if self.guard is not None:
                verdict = self.guard.check(
                    key.question, vector, entry.question, _vector(entry), hit.similarity
                )
                score, reason = verdict.score, "ok" if verdict.accept else verdict.reason
            if reason == "ok" and self.verifier is not None:
                assert self.score_threshold is not None
                score = await self.verifier.verify(
                    entry.question, key.question, max_wait=self._max_wait
                )
                reason = "ok" if score >= self.score_threshold else "verifier"
            if reason != "ok":
                self._counters.rejections[reason] += 1
                rejected = Rejection(entry, hit.similarity, reason, score)
                continue
            return (hit, entry), score, rejected
        return None, None, rejected

    @property
    def _max_wait(self) -> float | None:
        """Seconds a lookup waits for the embedder's or the verifier's worker to start on it
        (None: as long as it takes)."""
        return self._semantic.max_wait if self._semantic is not None else None

    @property
    def _verified_candidates(self) -> int:
        return self._semantic.candidates if self._semantic is not None else _CANDIDATES

    @property
    def _decides(self) -> bool:
        """Whether the verifier judges every candidate (role ``decide``) rather than vetoing."""
        settings = self._semantic
        return (
            self.verifier is not None
            and settings is not None
            and settings.verifier_role == "decide"
        )

    async def _verified(
        self,
        key: CacheKey,
        vector: np.ndarray,
        candidates: list[tuple[Hit, Entry]],
        tightened: float | None = None,
    ) -> _Judged:
        """The hard vetoes, then the verifier on the rest in one batch: the best score at or
        above the score threshold (``tightened``, else the configured one) wins. A near
        duplicate the guard vouches for is served without the model
        (``Combiner.near_duplicate``; not in a tightened scope); a pair the cross-encoder could
        not lift to the threshold (the combiner's cheap part is too low) is rejected without
        running it."""
        assert self.verifier is not None and self.score_threshold is not None
        verifier = self.verifier
        threshold = self.score_threshold if tightened is None else tightened
        if threshold >= 1.0:  # auto-tighten's last step: no semantic hits in this scope
            return None, None, None
        judged: list[tuple[Hit, Entry, CandidateSignals]] = []
        rejected: Rejection | None = None
        for hit, entry in candidates:
            signals = verifier.signals(
                entry.question, key.question, _vector(entry), vector, hit.similarity
            )
            if tightened is None and verifier.near_duplicate(signals):  # a trivial rewording
                return (hit, entry), None, None
            veto = verifier.vetoed(signals) if self._semantic and self._semantic.guard else None
            if veto is None and not verifier.can_reach(signals, threshold):
                veto = "verifier"
            if veto is None and not verifier.reads_differences(entry.question, key.question):
                veto = "verifier_unread"  # (what it does not read differs: it cannot judge)
            if veto is None:
                judged.append((hit, entry, signals))
            else:
                self._counters.rejections[veto] += 1
                rejected = rejected or Rejection(entry, hit.similarity, veto, None)
        # NOTE: each pair waits at most ``max_wait`` for the verifier's worker (VerifierBusy:
        # a miss); when one gives up, the others leave its queue too, unscored
        wait = self._max_wait
        calls = [
            asyncio.ensure_future(verifier.verify_logit(e.question, key.question, max_wait=wait))
            for _, e, _ in judged
        ]
        try:
            logits = await asyncio.gather(*calls)
        except Exception:
            for call in calls:  # (done ones: a no-op)
                call.cancel()
            raise
        scores = [verifier.probability(j[2], z) for j, z in zip(judged, logits, strict=True)]
        best = max(zip(scores, range(len(judged)), strict=True), default=None)
        if best is None or best[0] < threshold:
            if best is not None:
                self._counters.rejections["verifier"] += 1
                hit, entry, _ = judged[best[1]]
                rejected = Rejection(entry, hit.similarity, "verifier", float(best[0]))
            return None, None, rejected
        # the best first; a candidate whose own context is another is passed over
        for score, i in sorted(zip(scores, range(len(judged)), strict=True), reverse=True):
            hit, entry, _ = judged[i]
            if score < threshold:
                break
            if await self._same_context(entry.question, key.question, threshold):
                return (hit, entry), float(score), None
            self._counters.rejections["verifier_context"] += 1
            rejected = rejected or Rejection(entry, hit.similarity, "verifier_context", score)
        return None, None, rejected

    async def _same_context(self, stored: str, new: str, threshold: float) -> bool:
        """Whether two conversations' contexts pass as a question pair of their own: the earlier
        user turns their follow-ups refer to (:func:`semantic.keys.context_question`), judged
        as two single questions are (the hard vetoes, the cosine floor, the combiner at
        ``threshold`` or :data:`semantic.verifier.CONTEXT_SCORE`, the lower). True when the two
        turns are the same, or a side has none (a conversation against a single question), or
        the check is off (``context_pair: false``).

        NOTE: the whole pair reads the question and the context as one text, and a follow-up
        that is the same on both sides ("How many days is that?") carried it past a swapped
        context ("from Bob to Fatima" / "from Fatima to Bob"): docs/benchmarks.md, "Context
        pairs". Runs on would-be hits only: one embedding of two short texts and one more pair.
        """
        from .verifier import CONTEXT_SCORE

        assert self.verifier is not None and self.embedder is not None
        if self._semantic is not None and not self._semantic.context_pair:
            return True
        a, b = context_question(stored), context_question(new)
        if a is None or b is None or a == b:
            return True
        verifier = self.verifier
        # NOTE: bounded as the question's embedding is: under overload a miss now beats a hit
        # seconds later (EmbedderBusy: the lookup is a miss, counted as skipped "overload"; the
        # verifier's pair likewise: VerifierBusy, skipped "overload_verify")
        max_wait = self._max_wait
        va, vb = await self.embedder.embed_many([a, b], max_wait=max_wait)
        cosine = float(np.dot(va, vb))
        signals = verifier.signals(a, b, va, vb, cosine)
        if verifier.near_duplicate(signals):
            return True
        vetoed = verifier.vetoed(signals) if self._semantic and self._semantic.guard else None
        if vetoed is not None or cosine < verifier.cosine_floor - _EPSILON:
            return False
        logit = await verifier.verify_logit(a, b, max_wait=max_wait)
        score = verifier.probability(signals, logit)
        return score >= min(threshold, CONTEXT_SCORE)

    async def _embed_for_store(self, question: str) -> np.ndarray | None:
        """The question's vector for storing, or None when the embedder is overloaded."""
        from .embedder import EmbedderBusy

        assert self.embedder is not None and self._semantic is not None
        try:
            return await self.embedder.embed(question, max_wait=self._semantic.max_wait)
        except EmbedderBusy:
            self._counters.skipped["overload_store"] += 1
            return None

    def _dropped(self, ids: list[int]) -> None:
        """The store dropped ``ids`` (evicted, expired, flushed), or a lookup found their
        entries gone or unsearchable: their vectors go too.

        NOTE: not for a shared store: there an id may be stored again (by any replica, or by a
        request here) between the store dropping it (or a lookup reading it) and this call, and
        dropping its vector then would leave a live entry unsearchable here. The follower
        applies the store's del and put events in the order they happened instead, and is the
        only writer of the index; until it does, a vector whose entry is gone is a miss.
        """
        if not self._store.shared:
            self.on_delete(ids)

    def _searchable(self, vector: bytes | None, vector_model: str) -> bool:
        """A stored vector this process can search: made by its embedder, of the index's size.

        Vectors of another model (written before a model change, or by another replica) stay
        in the store for exact hits; comparing them with this model's vectors would be wrong.
        """
        return (
            bool(vector)
            and self.embedder is not None
            and self.index is not None
            and vector_model == self.embedder.model_name
            and len(vector or b"") == 4 * self.index.dim
        )

    def _semantic_loading(self) -> bool:
        """The semantic parts are still loading (the embedder, the verifier, the index)."""
        return self._semantic is not None and self._failed is None and not self._ready.is_set()

    async def _semantic_ready(self) -> bool:
        """Wait for the semantic parts if they are still loading; False when off or broken."""
        if self._semantic is None or self._failed is not None:
            return False
        await self._ready.wait()
        return self._failed is None and self.index is not None

    async def _load_semantic(self) -> None:
        assert self._semantic is not None
        settings = self._semantic
        try:
            from .embedder import Embedder
            from .guard import Guard, GuardConfig
            from .index import IndexFileError, VectorIndex

            self.embedder = await self._load(
                Embedder,
                settings.embedding_model,
                backend=settings.embedder_backend,
                export_dir=settings.export_dir,
            )
            if settings.verifier is not None:
                from .verifier import PairVerifier

                path = None if settings.verifier == "bundled" else settings.verifier
                self.verifier = await self._load(
                    PairVerifier,
                    path,
                    backend=settings.verifier_backend,
                    export_dir=settings.export_dir,
                )
                self.verifier.use_embedder(self.embedder.model_name)
                self.score_threshold = score_threshold(settings, self.verifier)
            if settings.guard and not self._decides:
                config = GuardConfig(enabled=True, min_score=settings.guard_min_score)
                self.guard = Guard(config, embedding_model=self.embedder.model_name)
            self.cosine_threshold = _cosine_threshold(
                settings, self.verifier if self._decides else None
            )
            options: dict[str, Any] = {
                "hnsw_threshold": settings.hnsw_threshold,
                "ef_search": settings.hnsw_ef_search,
            }
            index: VectorIndex | None = None
            if settings.index_path is not None and settings.index_path.exists():
                try:
                    index = await self._load(VectorIndex.load, settings.index_path, **options)
                except IndexFileError as exc:
                    log.warning("%s; rebuilding it from the entry store", exc)
            if index is not None and index.dim == self.embedder.dim:
                self.index = index
                await self._reconcile()
            else:
                self.index = VectorIndex(self.embedder.dim, **options)
                if not self._store.shared:
                    await self.on_reset()
                    # NOTE: the rebuild ran on a thread while requests and admin calls were
                    # served: answers evicted, expired, flushed or deleted meanwhile left only
                    # the index it replaced, and their vectors came back with it
                    self.on_delete(sorted(self.index.ids() - await self._store.ids()))
            self._tasks.append(asyncio.create_task(self._store.follow(self), name="cache-follower"))
            if self._store.shared:
                # NOTE: a shared store's follower loads the index itself (after noting where the
                # change stream stands, so nothing written meanwhile is lost). Do not wait for
                # it forever: with Redis down the gateway serves with an empty index and the
                # follower fills it when Redis returns.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._loaded.wait(), timeout=10)
        except Exception as exc:
            self._failed = exc
            log.exception("the semantic cache could not start; serving exact hits only")
        finally:
            self._ready.set()

    async def _load(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` (a model or index load) on a daemon thread.

        NOTE: not ``asyncio.to_thread``: the interpreter joins its threads at exit, so Ctrl-C
        in the first seconds after a start (the embedder's load; its ONNX export at the first
        start) was held until the load had ended. While one runs, ``cachegate serve`` exits
        with ``os._exit`` (exports are renamed into place only when complete).
        """
        call = functools.partial(fn, *args, **kwargs)
        return await on_daemon_thread(call, name="load-semantic", running=self._loading)

    async def _reconcile(self) -> None:
        """Make a loaded index agree with the store, the source of truth."""
        assert self.index is not None and self.embedder is not None
        # NOTE: vectors of another embedding model (saved before a model change) are never
        # searched: a rebuild leaves them out, and a loaded index held them until they expired
        mine = _index_scope(self.embedder.model_name, "").encode()
        for scope in self.index.scopes():
            if not scope.startswith(mine):
                self.index.remove_scope(scope)
        stored, indexed = await self._store.ids(), self.index.ids()
        self.on_delete(sorted(indexed - stored))
        for missing in stored - indexed:
            entry = await self._store.get(missing)
            if entry is not None:
                self.on_put(entry.id, entry.scope, entry.vector, entry.vector_model)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self._settings.sweep_interval)
            try:
                gone = await self._store.sweep()
                self._dropped(gone)
                self._counters.expirations += len(gone)
            except Exception:  # a failed sweep must not stop later ones
                log.exception("cache sweep failed")


#: A judged lookup: the winning candidate (or None), its score, the rejection to report.
_Judged = tuple[tuple["Hit", Entry] | None, float | None, "Rejection | None"]


def score_threshold(settings: SemanticSettings, verifier: PairVerifier) -> float:
    """The verifier's score threshold: ``verifier_threshold``; else, as a veto, the veto
    threshold shipped with it; else ``max_wrong_rate`` through the verifier's calibration table,
    else the default shipped with it.

    >>> score_threshold(SemanticSettings(max_wrong_rate=0.05), PairVerifier())  # doctest: +SKIP
    """
    if settings.verifier_threshold is not None:
        return settings.verifier_threshold
    if settings.verifier_role == "veto":
        return verifier.veto_threshold
    if settings.max_wrong_rate is not None:
        if verifier.calibration is None:
            raise ValueError(
                f"the verifier at {verifier.path} has no calibration table (meta.json): "
                "set cache.semantic.verifier_threshold instead of max_wrong_rate"
            )
        return verifier.calibration.threshold_for(settings.max_wrong_rate)
    return verifier.default_threshold


def _cosine_threshold(settings: SemanticSettings, verifier: PairVerifier | None) -> float:
    if settings.threshold is not None:
        return settings.threshold
    return verifier.cosine_floor if verifier is not None else _GUARD_THRESHOLD


def _semantic_state(
    settings: SemanticSettings | None, loaded: bool, failed: BaseException | None
) -> str:
    if settings is None:
        return "off"
    if failed is not None:
        return f"failed: {failed!r}"
    return "ready" if loaded else "loading"


def _fresh(entry: Entry, now: float, max_age: float | None) -> bool:
    if entry.expired(now):
        return False
    return max_age is None or now - entry.created <= max_age


def _index_scope(vector_model: str, scope: str) -> str:
    """Index partitions are per scope *and* embedding model: after a model change, old vectors
    stay exact-match-only instead of being compared with vectors from another space."""
    return f"{vector_model}\x1f{scope}"


def _vector(entry: Entry) -> np.ndarray:
    return np.frombuffer(entry.vector or b"", dtype=np.float32)
