"""The response cache (tier 1): exact lookup, then semantic lookup, and storing answers.

    >>> cache = ResponseCache(DiskStore(path, max_entries=100_000), CacheSettings())
    >>> found = await cache.lookup(key)              # Lookup(kind="exact"|"semantic"|"miss", ...)
    >>> if found.entry is None:
    ...     response = run_the_model()
    ...     await cache.store(key, response, model=..., tenant=..., namespace=...)

The cache knows nothing about HTTP or models: it is given a ``CacheKey`` (see keys.py) and
the complete response object, and gives back stored response objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from .keys import CacheKey, entry_id
from .store import Entry, EntryStore

__all__ = ["CacheSettings", "Lookup", "ResponseCache"]

log = logging.getLogger(__name__)

LookupKind = Literal["exact", "semantic", "miss"]


@dataclass(frozen=True, slots=True)
class CacheSettings:
    exact: bool = True
    #: Seconds an entry stays servable when the request gives no ttl; None: forever.
    ttl: float | None = 7 * 24 * 3600.0
    #: How often expired entries are swept out of the store and the index.
    sweep_interval: float = 60.0


@dataclass(frozen=True, slots=True)
class Lookup:
    """The result of a lookup: a hit (exact or semantic) or a miss."""

    kind: LookupKind
    entry: Entry | None = None
    #: Cosine similarity of the semantic hit (1.0 for exact hits).
    similarity: float | None = None
    #: Seconds since the entry was stored.
    age: float | None = None


@dataclass(slots=True)
class _Counters:
    lookups: int = 0
    hits: Counter[str] = field(default_factory=Counter)
    stores: int = 0
    evictions: int = 0
    expirations: int = 0


class ResponseCache:
    """Exact (and, when configured, semantic) response cache over an EntryStore."""

    def __init__(self, store: EntryStore, settings: CacheSettings) -> None:
        self._store = store
        self._settings = settings
        self._counters = _Counters()
        self._sweeper: asyncio.Task[None] | None = None

    # -- public ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the periodic sweep of expired entries."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="cache-sweeper")

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        await self._store.close()

    async def lookup(
        self, key: CacheKey, *, max_age: float | None = None, threshold: float | None = None
    ) -> Lookup:
        """Find a stored answer for ``key``.

        ``max_age`` (seconds) rejects older entries; ``threshold`` overrides the configured
        semantic similarity threshold for this lookup.
        """
        self._counters.lookups += 1
        now = time.time()
        if self._settings.exact:
            entry = await self._store.get(entry_id(key.exact))
            if entry is not None and entry.exact == key.exact and self._fresh(entry, now, max_age):
                await self._store.record_hit(entry.id)
                self._counters.hits["exact"] += 1
                return Lookup("exact", entry, 1.0, now - entry.created)
        return Lookup("miss")

    async def store(
        self,
        key: CacheKey,
        response: dict[str, Any],
        *,
        model: str,
        tenant: str,
        namespace: str,
        ttl: float | None = None,
    ) -> Entry:
        """Store a complete, successful answer. ``ttl`` overrides the configured one."""
        now = time.time()
        ttl = self._settings.ttl if ttl is None else ttl
        entry = Entry(
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
        )
        evicted = await self._store.put(entry)
        self._counters.stores += 1
        self._counters.evictions += len(evicted)
        return entry

    async def flush(self, namespace: str | None = None) -> int:
        """Drop every entry (or those of one namespace); returns how many."""
        return len(await self._store.flush(namespace))

    def stats(self) -> dict[str, Any]:
        c = self._counters
        return {
            "entries": len(self._store),
            "lookups": c.lookups,
            "hits": {"exact": c.hits["exact"], "semantic": c.hits["semantic"]},
            "stores": c.stores,
            "evictions": c.evictions,
            "expirations": c.expirations,
        }

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _fresh(entry: Entry, now: float, max_age: float | None) -> bool:
        if entry.expired(now):
            return False
        return max_age is None or now - entry.created <= max_age

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self._settings.sweep_interval)
            try:
                gone = await self._store.sweep()
                self._counters.expirations += len(gone)
            except Exception:  # a failed sweep must not stop later ones
                log.exception("cache sweep failed")
