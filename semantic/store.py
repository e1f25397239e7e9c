"""Entry stores: where cached answers live (embedded diskcache here; Redis in semantic.redis_store).

A store holds ``Entry`` objects keyed by their int64 id (``keys.entry_id(exact)``), enforces a
maximum entry count with least-recently-used eviction and per-entry expiry, and tells its caller
which ids it dropped so the vector index can follow.

>>> store = DiskStore("/tmp/cachegate-doc", max_entries=1000)
>>> evicted = await store.put(entry)          # [] until the store is full
>>> await store.get(entry.id)                 # the entry, or None once expired
"""

from __future__ import annotations

import asyncio
import fcntl
import heapq
import logging
import sqlite3
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import diskcache
import msgspec

log = logging.getLogger(__name__)

__all__ = [
    "TENANTS_SHOWN",
    "DiskStore",
    "Entry",
    "EntryStore",
    "StoreListener",
    "StoreOpenError",
    "StoreUnavailable",
    "Superseded",
    "TenantEntries",
]

#: Tenants whose entry counts a store lists by name (those holding the most): with client keys
#: as tenants there can be one per entry, and ``/admin/stats`` is polled every 2 s.
TENANTS_SHOWN = 100


class Entry(msgspec.Struct, kw_only=True):
    """One cached answer."""

    id: int
    exact: str  # keys.CacheKey.exact
    scope: str  # keys.CacheKey.scope
    question: str  # the last user message ("" for exact-only entries)
    model: str
    tenant: str
    namespace: str
    #: The complete response object (chat.completion / text_completion) as first served.
    response: dict[str, Any]
    created: float  # unix time
    expires: float | None  # unix time, None: never
    #: float32 embedding of ``question`` (so the index can be rebuilt without the model).
    vector: bytes | None = None
    #: The embedding model that made ``vector``: vectors of other models are never compared.
    vector_model: str = ""
    hits: int = 0
    #: Unix time of the last hit (0: none yet); DiskStore restores its LRU order from it.
    used: float = 0.0

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires


class TenantEntries(msgspec.Struct, frozen=True):
    """Entries per tenant (with ``max_entries_per_tenant``), for ``/admin/stats``."""

    top: dict[str, int]  # the ``TENANTS_SHOWN`` tenants holding the most entries, by name
    tenants: int = 0  # tenants holding entries, all of them
    entries: int = 0  # entries counted in a tenant's share, all of them

    @classmethod
    def of(cls, counts: dict[str, int]) -> TenantEntries:
        """From every tenant's count (a store that holds them all in memory)."""
        top = heapq.nlargest(TENANTS_SHOWN, counts.items(), key=lambda kv: kv[1])
        return cls(dict(top), len(counts), sum(counts.values()))


class StoreUnavailable(Exception):
    """The store could not be reached; ``removed`` lists what an interrupted flush did drop,
    ``stored`` how many entries an interrupted ``put_many`` did store (its first ones)."""

    def __init__(self, message: str, removed: list[int] | None = None, stored: int = 0) -> None:
        super().__init__(message)
        self.removed = removed or []
        self.stored = stored


class Superseded(Exception):
    """A flush came after the answer's request began (its ``epoch`` is not the store's now):
    the answer, made before the flush, is not stored; ``removed``: the ids a ``put_many``
    evicted for the answers it stored before the flush (which the flush then dropped)."""

    def __init__(self, message: str, removed: list[int] | None = None) -> None:
        super().__init__(message)
        self.removed = removed or []


class StoreOpenError(Exception):
    """The store could not be opened (a directory in use, unwritable, not a directory...)."""


class StoreListener(Protocol):
    """Told about changes made elsewhere (another replica), so a local index can follow."""

    def on_put(
        self, entry_id: int, scope: str, vector: bytes | None, vector_model: str
    ) -> None: ...
    def on_delete(self, ids: list[int]) -> None: ...
    async def on_reset(self) -> None: ...  # state was lost: reload everything from entries()


class EntryStore(Protocol):
    """What ResponseCache needs from a store. Every method is safe on the event loop."""

    # strict: raise StoreUnavailable when the store could not say (else None: a miss)
    async def get(self, entry_id: int, *, strict: bool = False) -> Entry | None: ...
    # returns the ids evicted for room; Superseded when ``epoch`` (the store's when the answer's
    # request began; None: unchecked) is no longer the store's: a flush came meanwhile
    async def put(self, entry: Entry, *, epoch: int | None = None) -> list[int]: ...
    async def put_many(  # (fewer writes; ``epoch`` as for ``put``)
        self, entries: Sequence[Entry], *, epoch: int | None = None
    ) -> list[int]: ...
    async def delete(self, ids: list[int]) -> None: ...
    # delete ``entry`` only while the store still holds that very entry (the same
    # ``created``), in one step: False when it holds another (stored again since) or none
    async def delete_if_unchanged(self, entry: Entry) -> bool: ...
    async def record_hit(self, entry_id: int) -> None: ...
    async def sweep(self) -> list[int]: ...  # drop expired entries, return their ids
    async def flush(self, namespace: str | None = None) -> list[int]: ...
    def entries(self) -> AsyncIterator[Entry]: ...  # every live entry (start-up restore)
    async def ids(self) -> set[int]: ...  # ids of every stored entry
    async def follow(self, listener: StoreListener) -> None: ...  # runs until cancelled

    #: Several processes write this store: ``follow`` loads the listener and keeps it current.
    shared: bool

    @property
    def epoch(self) -> int | None: ...  # changes with each flush (as this process knows it now)

    @property
    def available(self) -> bool: ...  # False while unreachable: a None from get proves nothing

    def __len__(self) -> int: ...  # entries (may lag a little for shared stores)
    async def close(self) -> None: ...


@dataclass(slots=True)
class _Meta:
    expires: float | None
    namespace: str
    hits: int
    used: float  # unix time of the last store or hit
    tenant: str = ""  # whose share the entry counts in (``DiskStore``'s ``tenant_of``)
    dirty: bool = False


#: Entries a bulk operation (sweep, flush, sync) handles per SQLite transaction; between two
#: batches the event loop serves requests (100k entries at once stalled it for seconds).
_BATCH = 256


def _expire(expires: float | None) -> float | None:
    """diskcache's ``expire`` (seconds from now, at least a moment) for an entry's ``expires``."""
    return None if expires is None else max(expires - time.time(), 0.001)


async def _yield_to_requests(total: int) -> None:
    if total > _BATCH:  # (a small operation runs at once, as before)
        await asyncio.sleep(0)


class DiskStore:
    """Entries in a diskcache directory; survives restarts.

    NOTE: diskcache's own eviction is off: it would drop entries without telling the vector
    index. LRU order and hit counts are kept in memory (rebuilt at start from the stored entries'
    last use) and hit counts and last use are written back by ``sync()``, never on the hit path.
    Past ``max_entries``, expired entries not yet swept go first, then the least recently used.
    Past ``max_entries_per_tenant`` entries of one tenant (``tenant_of`` an entry's tenant: the
    tenant a front gateway's partitions subdivide), that tenant's expired entries not yet swept
    go first, then its least recently used: one tenant storing many answers cannot push every
    other tenant's out.
    """

    shared = False

    @property
    def available(self) -> bool:
        return True  # a local directory

    @property
    def epoch(self) -> int:
        return self._epoch

    def __init__(
        self,
        directory: str | Path,
        *,
        max_entries: int,
        max_entries_per_tenant: int | None = None,
        tenant_of: Callable[[str], str] = str,
    ) -> None:
        # NOTE: one process per directory: the LRU order and counts live in this process's
        # memory, so a second writer would overwrite entries and a flush would clear both.
        # The lock (released by close, or when the process dies) makes a second one refuse
        # to start instead.
        directory = Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._lock = open(directory / ".lock", "a")  # noqa: SIM115 (held until close)
        except OSError as exc:
            raise StoreOpenError(f"{directory}: cannot use it: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            raise StoreOpenError(
                f"{directory} is in use by another cachegate process (one process per "
                "data_dir; several replicas share a cache through Redis)"
            ) from None
        try:
            self._cache = diskcache.Cache(
                str(directory), eviction_policy="none", size_limit=2**62, cull_limit=0
            )
        except (OSError, sqlite3.Error) as exc:
            self._lock.close()
            raise StoreOpenError(f"{directory}: cannot open the cache there: {exc}") from None
        self._max_entries = max_entries
        self._per_tenant = max_entries_per_tenant
        self._tenant_of = tenant_of
        #: Each tenant's entries, least recently used first (kept only with a per-tenant cap).
        self._by_tenant: dict[str, OrderedDict[int, None]] = {}
        #: (expires, id) of each tenant's entries with a TTL, soonest first (likewise).
        self._tenant_expiries: dict[str, list[tuple[float, int]]] = {}
        self._epoch = 0  # flushes since start (see ``put``)
        self._refusing = False  # the last write failed (logged once until one succeeds)
        self._unreadable = False  # the last read failed (likewise)
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(Entry)
        self._meta: OrderedDict[int, _Meta] = OrderedDict()
        #: (expires, id) of entries with a TTL, soonest first; stale pairs are skipped.
        self._expiries: list[tuple[float, int]] = []
        try:
            self._restore_meta()
        except (OSError, sqlite3.Error) as exc:  # e.g. "database disk image is malformed"
            self._cache.close()
            self._lock.close()
            raise StoreOpenError(
                f"{directory}: cannot read the cache there: {exc} (a damaged cache: move the "
                "directory away to start with an empty one)"
            ) from None

    # -- EntryStore ------------------------------------------------------------------------

    async def get(self, entry_id: int, *, strict: bool = False) -> Entry | None:
        meta = self._meta.get(entry_id)
        if meta is None:
            return None
        try:
            raw = self._cache.get(entry_id)
            if raw is None:  # expired inside diskcache (its rows expire with the entry)
                # NOTE: not forgotten here: the sweep (or an eviction) drops it and says so, so
                # its vector leaves the index; forgotten on a read (a lookup, `cachegate cache
                # show`), it was never announced and its vector stayed for good
                return None
            entry = self._decoder.decode(raw)
        except (OSError, sqlite3.Error, msgspec.DecodeError) as exc:
            # NOTE: a read the disk refuses (a damaged database, an I/O error) is a miss, as a
            # Redis read that fails: the model answers, the request does not fail with a 500
            if not self._unreadable:
                log.warning("the cache directory cannot be read, answered as misses: %s", exc)
            self._unreadable = True
            if strict:
                raise StoreUnavailable(f"cannot read the cached answer: {exc}") from None
            return None
        if self._unreadable:
            log.info("the cache directory can be read again")
            self._unreadable = False
        entry.hits = meta.hits
        return entry

    async def put(self, entry: Entry, *, epoch: int | None = None) -> list[int]:
        """StoreUnavailable when the disk refuses the write (full, read-only): the entry is
        not stored, and the first refusal of a run of them is logged. Superseded when a flush
        came since ``epoch``."""
        return await self.put_many((entry,), epoch=epoch)

    async def put_many(self, entries: Sequence[Entry], *, epoch: int | None = None) -> list[int]:
        """``put`` each of ``entries`` (an embeddings batch's inputs): one SQLite transaction
        for each ``_BATCH`` of them, not a commit each, and requests are served between two.
        StoreUnavailable (``stored``: how many were; ``removed``: the ids evicted for them)
        when the disk refuses a batch; Superseded when a flush came since ``epoch`` (the
        batches written before it were in the flush's list: deleted)."""
        evicted: list[int] = []
        for start in range(0, len(entries), _BATCH):
            if epoch is not None and epoch != self._epoch:  # (also between two batches)
                raise Superseded("flushed since the answers' request began: not stored", evicted)
            batch = entries[start : start + _BATCH]
            try:
                with self._cache.transact():
                    for entry in batch:
                        raw = self._encoder.encode(entry)
                        self._cache.set(entry.id, raw, expire=_expire(entry.expires))
            except (OSError, sqlite3.Error) as exc:
                self._refused(exc, "answers are not stored")
                raise StoreUnavailable(
                    f"cannot store the answers: {exc}", evicted, stored=start
                ) from None
            self._taking_writes()
            victims = [victim for entry in batch for victim in self._admit(entry)]
            if victims:
                self._delete_on_disk(victims)
            evicted += victims
            await _yield_to_requests(len(entries))
        return evicted

    def _admit(self, entry: Entry) -> list[int]:
        """A written ``entry`` into the memory view; returns the ids to evict for room (gone
        from the view: the caller deletes them on disk)."""
        now = time.time()
        tenant = self._tenant_of(entry.tenant)
        self._remember(entry.id, _Meta(entry.expires, entry.namespace, entry.hits, now, tenant))
        if entry.expires is not None:
            heapq.heappush(self._expiries, (entry.expires, entry.id))
        evicted: list[int] = []
        own = self._by_tenant.get(tenant)
        while own and self._per_tenant is not None and len(own) > self._per_tenant:
            # NOTE: its expired entries first, as past max_entries: one never served again
            # held the share while a live one went (and its next request missed)
            victim = self._pop_expired(now, self._tenant_expiries.get(tenant, []))
            if victim is None:
                victim = next(iter(own))  # the tenant's least recently used
                self._forget(victim)
            evicted.append(victim)
        while len(self._meta) > self._max_entries:
            victim = self._pop_expired(now)
            if victim is None:
                victim = next(iter(self._meta))  # the least recently used
                self._forget(victim)
            evicted.append(victim)
        return evicted

    async def delete(self, ids: list[int]) -> None:
        """Delete ``ids``; StoreUnavailable (``removed``: what did go) when the disk refuses.

        NOTE: an entry leaves the memory view only once its batch is committed: forgotten here
        but left on disk (a full disk rolls the batch back), it came back at the next start.
        """
        done: list[int] = []
        for start in range(0, len(ids), _BATCH):
            batch = ids[start : start + _BATCH]
            try:
                self._delete_on_disk(batch)
            except (OSError, sqlite3.Error) as exc:
                removed = [i for i in done if i not in self._meta]
                raise StoreUnavailable(f"cannot delete cached answers: {exc}", removed) from None
            for entry_id in batch:
                self._forget(entry_id)
            done += batch
            await _yield_to_requests(len(ids))

    async def delete_if_unchanged(self, entry: Entry) -> bool:
        """Delete ``entry`` only while the directory still holds it (the same ``created``):
        an answer stored again under its id since it was read is kept. Read and deleted in one
        SQLite transaction, with no await between (this process is the directory's only
        writer). StoreUnavailable when the disk refuses (nothing deleted)."""
        try:
            with self._cache.transact():
                if not self._holds(entry):
                    return False
                self._cache.delete(entry.id)
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(f"cannot delete the cached answer: {exc}") from None
        self._forget(entry.id)
        return True

    def _holds(self, entry: Entry) -> bool:
        """Whether the database holds ``entry`` as it was read (not another stored since)."""
        raw = self._cache.get(entry.id)
        if raw is None:
            return False
        try:
            return self._decoder.decode(raw).created == entry.created
        except msgspec.DecodeError:  # (not the entry read: that one could be decoded)
            return False

    def _delete_on_disk(self, ids: list[int]) -> None:
        """Delete ``ids`` (a batch) from the database: one SQLite transaction, not one each."""
        with self._cache.transact():
            for entry_id in ids:
                self._cache.delete(entry_id)

    async def record_hit(self, entry_id: int) -> None:
        meta = self._meta.get(entry_id)
        if meta is not None:
            meta.hits += 1
            meta.used = time.time()
            meta.dirty = True
            self._meta.move_to_end(entry_id)
            own = self._by_tenant.get(meta.tenant)
            if own is not None:
                own.move_to_end(entry_id)

    async def sweep(self) -> list[int]:
        """Delete expired entries, in batches between which requests are served.

        NOTE: each batch checks expiry again: an entry stored anew since the sweep began
        (requests run between batches) has a later expiry and stays.
        """
        due = [
            i for i, m in self._meta.items() if m.expires is not None and time.time() >= m.expires
        ]
        gone: list[int] = []
        for start in range(0, len(due), _BATCH):
            now = time.time()
            batch = [i for i in due[start : start + _BATCH] if self._expired(i, now)]
            await self.delete(batch)
            gone += batch
            await _yield_to_requests(len(due))
        self._cache.expire()
        await self.sync()
        self._reheap()
        return [i for i in gone if i not in self._meta]  # (not those stored again meanwhile)

    async def flush(self, namespace: str | None = None) -> list[int]:
        """Delete every entry (or a namespace's), in batches between which requests are served."""
        self._epoch += 1  # (answers whose requests began before it are not stored: ``put``)
        ids = [i for i, m in self._meta.items() if namespace is None or m.namespace == namespace]
        await self.delete(ids)
        self._reheap()
        # NOTE: requests ran between the batches: an answer stored again after its batch was
        # deleted is live, and its vector must stay in the index (the caller drops the rest)
        return [i for i in ids if i not in self._meta]

    async def entries(self) -> AsyncIterator[Entry]:
        """Every live entry; StoreUnavailable when the disk refuses a read (a damaged
        database, an I/O error): a partial list must not pass for the whole store, and the
        admin listing answered a 500 where showing one entry answered ``cache_unavailable``."""
        try:
            for entry in self._live_entries():
                yield entry
        except (OSError, sqlite3.Error, msgspec.DecodeError) as exc:
            raise StoreUnavailable(f"cannot read the cached answers: {exc}") from None

    async def ids(self) -> set[int]:
        return set(self._meta)

    async def follow(self, listener: StoreListener) -> None:
        """Nothing to follow: this process is the only writer of its directory."""

    def _live_entries(self) -> Iterator[Entry]:
        now = time.time()
        for entry_id in list(self._meta):
            raw = self._cache.get(entry_id)
            if raw is None:
                continue
            entry = self._decoder.decode(raw)
            if not entry.expired(now):
                entry.hits = self._meta[entry_id].hits
                yield entry

    def __len__(self) -> int:
        return len(self._meta)

    def tenant_entries(self) -> TenantEntries:
        """Entries per tenant (``tenant_of`` their tenant); none without a per-tenant cap."""
        return TenantEntries.of({tenant: len(own) for tenant, own in self._by_tenant.items()})

    async def close(self) -> None:
        try:
            await self.sync()
            self._cache.close()
        finally:
            self._lock.close()  # releases the lock

    # -- helpers ---------------------------------------------------------------------------

    async def sync(self) -> None:
        """Write changed hit counts and last use back into the stored entries (in batches).

        A disk that refuses the writes (full, read-only) leaves them to a later sync: logged
        once, as for ``put``, and never an error (at shutdown it stopped the close).
        """
        dirty = [i for i, m in self._meta.items() if m.dirty]
        for start in range(0, len(dirty), _BATCH):
            batch = dirty[start : start + _BATCH]
            try:
                self._write_back(batch)
            except (OSError, sqlite3.Error) as exc:
                self._refused(exc, "hit counts wait")
                return
            for entry_id in batch:  # (written: the transaction committed)
                meta = self._meta.get(entry_id)
                if meta is not None:
                    meta.dirty = False
            self._taking_writes()
            await _yield_to_requests(len(dirty))

    def _refused(self, exc: BaseException, what: str) -> None:
        """A write failed: logged once until one succeeds (``_taking_writes``)."""
        if not self._refusing:
            log.warning("the cache directory refuses writes, %s: %s", what, exc)
        self._refusing = True

    def _taking_writes(self) -> None:
        """A write succeeded: the next refusal is logged again."""
        if self._refusing:
            log.info("the cache directory takes writes again")
            self._refusing = False

    def _write_back(self, ids: list[int]) -> None:
        """Hit counts and last use of ``ids`` (a batch) into their entries: one transaction."""
        with self._cache.transact():
            for entry_id in ids:
                meta = self._meta.get(entry_id)
                raw = self._cache.get(entry_id) if meta is not None else None
                if meta is None or raw is None:
                    continue
                entry = self._decoder.decode(raw)
                entry.hits, entry.used = meta.hits, meta.used
                self._cache.set(
                    entry_id, self._encoder.encode(entry), expire=_expire(entry.expires)
                )

    def _remember(self, entry_id: int, meta: _Meta) -> None:
        """``entry_id`` (stored or restored) into the memory view, as the most recently used."""
        self._forget(entry_id)  # (stored again: it may have counted for another tenant)
        self._meta[entry_id] = meta
        if self._per_tenant is not None:
            self._by_tenant.setdefault(meta.tenant, OrderedDict())[entry_id] = None
            if meta.expires is not None:
                expiries = self._tenant_expiries.setdefault(meta.tenant, [])
                heapq.heappush(expiries, (meta.expires, entry_id))

    def _forget(self, entry_id: int) -> None:
        """``entry_id`` out of the memory view (and its tenant's count)."""
        meta = self._meta.pop(entry_id, None)
        own = None if meta is None else self._by_tenant.get(meta.tenant)
        if meta is not None and own is not None:
            own.pop(entry_id, None)
            if not own:
                del self._by_tenant[meta.tenant]
                self._tenant_expiries.pop(meta.tenant, None)

    def _reheap(self) -> None:
        """Rebuild the expiry heaps from the live entries (drops the stale pairs)."""
        self._expiries = [(m.expires, i) for i, m in self._meta.items() if m.expires is not None]
        self._tenant_expiries = {}
        if self._per_tenant is not None:
            for pair in self._expiries:
                self._tenant_expiries.setdefault(self._meta[pair[1]].tenant, []).append(pair)
            for expiries in self._tenant_expiries.values():
                heapq.heapify(expiries)
        heapq.heapify(self._expiries)

    def _expired(self, entry_id: int, now: float) -> bool:
        meta = self._meta.get(entry_id)
        return meta is not None and meta.expires is not None and now >= meta.expires

    def _restore_meta(self) -> None:
        now = time.time()
        found: list[tuple[float, int, _Meta]] = []
        unreadable = 0
        for key in self._cache.iterkeys():
            raw = self._cache.get(key)
            if not isinstance(key, int) or raw is None:
                continue
            try:
                entry = self._decoder.decode(raw)
            except msgspec.DecodeError:
                self._cache.delete(key)  # written by an incompatible version: drop it
                unreadable += 1
                continue
            if entry.expired(now):
                self._cache.delete(key)
                continue
            used = max(entry.created, entry.used)
            tenant = self._tenant_of(entry.tenant)
            meta = _Meta(entry.expires, entry.namespace, entry.hits, used, tenant)
            found.append((used, key, meta))
        if unreadable:  # (dropped with no word: a damaged store looked like a smaller one)
            log.warning("response cache: %d stored answers could not be read (damaged, or "
                        "written by an incompatible version): dropped", unreadable)  # fmt: skip
        # Least recently used first, so they are still evicted first after a restart.
        found.sort(key=lambda t: t[0])
        # NOTE: max_entries (or max_entries_per_tenant) may have been lowered since: the excess
        # goes now (in batches), not all at once under the next answer stored (~1 s per 20k
        # deletes, on the event loop)
        kept, excess = self._within_limits(found)
        for start in range(0, len(excess), _BATCH):
            self._delete_on_disk(excess[start : start + _BATCH])
        for _, key, meta in kept:
            self._remember(key, meta)
            if meta.expires is not None:
                self._expiries.append((meta.expires, key))
        heapq.heapify(self._expiries)

    def _within_limits(
        self, found: list[tuple[float, int, _Meta]]
    ) -> tuple[list[tuple[float, int, _Meta]], list[int]]:
        """Of restored entries (least recently used first), the most recently used that fit
        ``max_entries`` and each tenant's ``max_entries_per_tenant``, in order, and the ids of
        the others."""
        kept: list[tuple[float, int, _Meta]] = []
        excess: list[int] = []
        counts: Counter[str] = Counter()
        for item in reversed(found):
            tenant = item[2].tenant
            full = self._per_tenant is not None and counts[tenant] >= self._per_tenant
            if full or len(kept) >= self._max_entries:
                excess.append(item[1])
                continue
            counts[tenant] += 1
            kept.append(item)
        kept.reverse()
        return kept, excess

    def _pop_expired(
        self, now: float, expiries: list[tuple[float, int]] | None = None
    ) -> int | None:
        """Forget and return an entry whose TTL has passed, if any (soonest expiry first), of
        ``expiries`` (a tenant's) or else of all entries."""
        expiries = self._expiries if expiries is None else expiries
        while expiries and expiries[0][0] <= now:
            expires, entry_id = heapq.heappop(expiries)
            meta = self._meta.get(entry_id)
            if meta is not None and meta.expires == expires:  # else: deleted or stored again
                self._forget(entry_id)
                return entry_id
        return None
