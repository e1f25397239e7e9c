"""Entries in Redis, shared by several gateway replicas (any Redis ≥ 6 or Valkey; no modules).

Keys (``P`` = the configured key prefix):

    P e:{id}     the msgpack-encoded Entry, with a Redis expiry (PX) when the entry has a TTL
    P lru        sorted set id → last use (unix time); evicts the least recently used past max
    P exp        sorted set id → expiry time; sweeps announce expired ids to the other replicas
    P hits       hash id → hit count
    P events     stream of changes: put (id, scope, vector) and del (packed ids)

Every replica keeps its own vector index in memory and ``follow``s the events stream to add and
drop vectors as other replicas store and evict answers. A replica that (re)connects after missing
events — or finds the stream trimmed past where it was — reloads everything (``on_reset``).

When Redis is unreachable the store fails fast: the ``RedisStore.available`` flag drops for
``retry_after`` seconds, during which reads miss and writes are skipped, so requests keep being
answered (by the model) with no added latency; it recovers on its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from .store import Entry, StoreListener, StoreUnavailable

__all__ = ["RedisStore", "StoreUnavailable"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_STREAM_MAXLEN = 200_000  # events kept; a replica further behind than this reloads everything
_BATCH = 500
_BLOCK_MS = 1000  # how long one XREAD of the follower waits for news


class RedisStore:
    """The EntryStore protocol on Redis, with a change feed for the other replicas."""

    shared = True

    def __init__(
        self,
        url: str,
        *,
        max_entries: int,
        key_prefix: str = "cachegate:",
        timeout: float = 0.5,
        retry_after: float = 1.0,
    ) -> None:
        # Typed Any: redis-py's annotations do not follow decode_responses=False (bytes replies).
        self._redis: Any = aioredis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=False
        )
        # The follower blocks on XREAD for up to _BLOCK_MS: it needs its own, patient connection.
        self._follower: Any = aioredis.Redis.from_url(
            url,
            socket_timeout=_BLOCK_MS / 1000 + timeout,
            socket_connect_timeout=timeout,
            decode_responses=False,
        )
        self._p = key_prefix
        self._max_entries = max_entries
        self._retry_after = retry_after
        self._down_until = 0.0
        self._count = 0
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(Entry)

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    # -- EntryStore ------------------------------------------------------------------------

    async def get(self, entry_id: int) -> Entry | None:
        async def op() -> Entry | None:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.get(self._key(entry_id))
                pipe.hget(self._p + "hits", entry_id)
                raw, hits = await pipe.execute()
            if raw is None:
                return None
            entry = self._decoder.decode(raw)
            entry.hits = int(hits or 0)
            return entry

        return await self._call(op)

    async def put(self, entry: Entry) -> list[int]:
        async def op() -> list[int]:
            now = time.time()
            async with self._redis.pipeline(transaction=True) as pipe:
                ttl_ms = (
                    None if entry.expires is None else max(int((entry.expires - now) * 1000), 1)
                )
                pipe.set(self._key(entry.id), self._encoder.encode(entry), px=ttl_ms)
                pipe.zadd(self._p + "lru", {entry.id: now})
                if entry.expires is not None:
                    pipe.zadd(self._p + "exp", {entry.id: entry.expires})
                else:
                    pipe.zrem(self._p + "exp", entry.id)
                pipe.hdel(self._p + "hits", entry.id)
                event = {
                    b"op": b"put",
                    b"id": str(entry.id),
                    b"scope": entry.scope,
                    b"vector": entry.vector or b"",
                    b"vmodel": entry.vector_model,
                }
                pipe.xadd(self._p + "events", event, maxlen=_STREAM_MAXLEN, approximate=True)
                pipe.zcard(self._p + "lru")
                results = await pipe.execute()
            self._count = int(results[-1])
            if self._count <= self._max_entries:
                return []
            # NOTE: ZPOPMIN is atomic, so when several replicas evict at once each id goes once.
            popped = await self._redis.zpopmin(self._p + "lru", self._count - self._max_entries)
            evicted = [int(member) for member, _ in popped]
            await self._remove(evicted)
            return evicted

        return await self._call(op, default=[])

    async def delete(self, ids: list[int]) -> None:
        if ids:
            await self._delete(ids)

    async def record_hit(self, entry_id: int) -> None:
        async def op() -> None:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zadd(self._p + "lru", {entry_id: time.time()}, xx=True)
                pipe.hincrby(self._p + "hits", entry_id, 1)
                await pipe.execute()

        await self._call(op)

    async def sweep(self) -> list[int]:
        async def op() -> list[int]:
            due = await self._redis.zrangebyscore(self._p + "exp", "-inf", time.time())
            gone: list[int] = []
            for member in due:
                # Only the replica whose ZREM removed the id announces it, so it goes out once.
                if await self._redis.zrem(self._p + "exp", member):
                    gone.append(int(member))
            if gone:
                await self._remove(gone, lru=True)
            self._count = int(await self._redis.zcard(self._p + "lru"))
            return gone

        return await self._call(op, default=[])

    async def flush(self, namespace: str | None = None) -> list[int]:
        """Delete every entry (or a namespace's); raises StoreUnavailable if Redis fails."""
        if namespace is None:
            members = await self._call(lambda: self._redis.zrange(self._p + "lru", 0, -1))
            if members is None:
                raise StoreUnavailable("Redis is unavailable: nothing was flushed.")
            ids = [int(m) for m in members]
        else:
            ids = [entry.id async for entry in self.entries() if entry.namespace == namespace]
        for start in range(0, len(ids), _BATCH):
            if not await self._delete(ids[start : start + _BATCH]):
                raise StoreUnavailable(
                    f"Redis failed during the flush: {start} of {len(ids)} entries were dropped.",
                    removed=ids[:start],
                )
        return ids

    async def entries(self) -> AsyncIterator[Entry]:
        """Every live entry; raises StoreUnavailable when Redis fails part-way (a partial list
        must not pass for the whole store). It tries Redis even while ``available`` is down:
        the follower reloads as soon as Redis answers again."""
        try:
            members = await self._redis.zrange(self._p + "lru", 0, -1)
            for start in range(0, len(members), _BATCH):
                batch = [int(m) for m in members[start : start + _BATCH]]
                blobs = await self._redis.mget([self._key(i) for i in batch])
                now = time.time()
                for blob in blobs:
                    if blob is not None:
                        entry = self._decoder.decode(blob)
                        if not entry.expired(now):
                            yield entry
        except (TimeoutError, RedisError, OSError) as exc:
            self._mark_down(exc)
            raise StoreUnavailable(f"Redis failed while listing entries: {exc!r}") from exc

    async def ids(self) -> set[int]:
        members = await self._call(lambda: self._redis.zrange(self._p + "lru", 0, -1), default=[])
        return {int(m) for m in members}

    async def follow(self, listener: StoreListener) -> None:
        """Apply other replicas' changes to ``listener`` until cancelled (reconnecting as needed)."""
        last: bytes | None = None
        while True:
            try:
                if last is None:
                    last = await self._stream_tail()
                    await listener.on_reset()
                reply = await self._follower.xread(
                    {self._p + "events": last}, block=_BLOCK_MS, count=_BATCH
                )
            except ResponseError as exc:  # e.g. stream trimmed: start over
                log.warning("response-cache event stream: %s; reloading", exc)
                last = None
                continue
            except (TimeoutError, RedisError, OSError, StoreUnavailable) as exc:
                if last is not None:
                    log.warning("response-cache event stream lost (%r); will reload", exc)
                last = None  # events may be lost while disconnected: reload on return
                await asyncio.sleep(self._retry_after)
                continue
            for _stream, events in reply or ():
                for event_id, fields in events:
                    last = event_id
                    try:
                        _apply(listener, fields)
                    except Exception:  # one bad event must not stop the replica following
                        log.exception("response-cache event %r could not be applied", event_id)

    def __len__(self) -> int:
        return self._count

    async def close(self) -> None:
        await self._redis.aclose()
        await self._follower.aclose()

    # -- helpers ---------------------------------------------------------------------------

    async def _delete(self, ids: list[int]) -> bool:
        """Delete entries with their LRU ranks; False when Redis failed (nothing deleted)."""

        async def op() -> bool:
            await self._remove(ids, lru=True)
            return True

        return bool(await self._call(op, default=False))

    def _key(self, entry_id: int) -> str:
        return f"{self._p}e:{entry_id}"

    async def _remove(self, ids: list[int], *, lru: bool = False) -> None:
        """Delete entries and announce it, all or nothing (``lru``: their LRU ranks too)."""
        async with self._redis.pipeline(transaction=True) as pipe:
            if lru:
                pipe.zrem(self._p + "lru", *ids)
            pipe.delete(*(self._key(i) for i in ids))
            pipe.zrem(self._p + "exp", *ids)
            pipe.hdel(self._p + "hits", *ids)
            packed = np.asarray(ids, dtype="<i8").tobytes()
            pipe.xadd(
                self._p + "events",
                {b"op": b"del", b"ids": packed},
                maxlen=_STREAM_MAXLEN,
                approximate=True,
            )
            await pipe.execute()

    async def _stream_tail(self) -> bytes:
        newest = await self._follower.xrevrange(self._p + "events", count=1)
        return bytes(newest[0][0]) if newest else b"0-0"

    async def _call(self, op: Callable[[], Awaitable[T]], default: Any = None) -> T:
        if not self.available:
            return default
        try:
            return await op()
        except (TimeoutError, RedisError, OSError) as exc:
            self._mark_down(exc)
            return default

    def _mark_down(self, exc: BaseException) -> None:
        if self.available:
            log.warning("response cache: Redis unavailable (%r); answering without it", exc)
        self._down_until = time.monotonic() + self._retry_after


def _apply(listener: StoreListener, fields: dict[bytes, bytes]) -> None:
    op = fields.get(b"op")
    if op == b"put":
        vector_model = fields.get(b"vmodel", b"").decode()
        listener.on_put(
            int(fields[b"id"]),
            fields[b"scope"].decode(),
            fields.get(b"vector") or None,
            vector_model,
        )
    elif op == b"del":
        listener.on_delete(np.frombuffer(fields[b"ids"], dtype="<i8").tolist())
