"""Entries in Redis, shared by several gateway replicas (any Redis ≥ 6 or Valkey; no modules).

Keys (``P`` = the configured key prefix):

    P e:{id}     the msgpack-encoded Entry, with a Redis expiry (PX) when the entry has a TTL
    P lru        sorted set id → last use (unix time); evicts the least recently used past max
    P exp        sorted set id → expiry time; sweeps announce expired ids to the other replicas
    P hits       hash id → hit count
    P tenant     hash id → its tenant (whose share it counts in; absent: stored by a version
                 before tenant shares, not counted until a reload adopts it: ``_ADOPT``)
    P t:{tenant} sorted set id → last use, of one tenant's entries (``max_entries_per_tenant``)
    P x:{tenant} sorted set id → expiry time, of one tenant's entries with a TTL
    P by-tenant  sorted set tenant → its entries (``/admin/stats``: the top by ZREVRANGE, the
                 total by ZCARD and ``tenant``'s HLEN, bounded whatever the number of tenants)
    P tenants    (a hash tenant → its entries, by the version that brought shares to Redis:
                 moved to ``by-tenant`` by the next reload, see ``_RECOUNT``; while a replica
                 of it runs, its stores are recounted as they come, its drops at a reload)
    P epoch      a random token, new at each flush: a put names the epoch its request began
                 in, and is dropped when a flush (of any replica) came since
    P events     stream of changes: put (id, scope, vector), del (ids: packed int64 ``ids``
                 or a comma-separated ``idlist``) and epoch (a flush began); a put or del
                 of this version says ``tenanted`` (its tenant records changed with it)

Every replica keeps its own vector index in memory and ``follow``s the events stream to add and
drop vectors as other replicas store and evict answers — its own changes too, in stream order:
the follower is the only writer of the index, so a late local change can never undo a newer
event. ``put`` returns once this replica's follower has applied its event (waiting at most
``_APPLY_WAIT`` command timeouts), so an answer stored here is found here by the next lookup.
A replica that (re)connects after missing events — or finds the stream trimmed past where it
was — reloads everything (``on_reset``).

Storing with eviction, sweeping expired entries and deleting are Lua scripts (EVAL), so no
failure or other replica can come between reading which ids go and deleting them, nor leave a
tenant's share counting an entry that is gone. Whole-store listings (flush, index reloads) read
the ``lru`` set in ZSCAN pages, each one command well inside the command timeout however large
the cache.

When Redis is unreachable the store fails fast: the ``RedisStore.available`` flag drops, and
reads miss and writes are skipped, so requests keep being answered (by the model) with no added
latency; it recovers on its own: every ``retry_after`` seconds (0.1) a PING of its own tries
Redis, and the first one answered turns the flag back on.

A Redis restart (an upgrade, a failover) leaves every pooled connection dead. Each command that
fails with a connection error is retried once on a fresh connection before Redis is declared
unavailable, so a restart costs only the commands in flight at that moment; the follower polls
for Redis every ``_RECONNECT_S`` once its own retries give up, and reloads the index as soon as
Redis answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import msgspec
import numpy as np
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .store import (
    TENANTS_SHOWN,
    Entry,
    StoreListener,
    StoreUnavailable,
    Superseded,
    TenantEntries,
)

__all__ = ["RedisStore", "StoreUnavailable", "Superseded"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_STREAM_MAXLEN = 200_000  # events kept; a replica further behind than this reloads everything
_BATCH = 500  # ids per command (ZSCAN page, MGET, delete, sweep)
_BLOCK_MS = 1000  # how long one XREAD of the follower waits for news
_CONNECTIONS = 64  # commands in flight at once, per replica
#: How long a command may wait for its turn (in multiples of the command timeout) before it is
#: skipped; a skip is this replica's congestion, not Redis failing, and does not mark Redis down.
_TURN_WAIT = 4
#: What a read that could not be made returns inside ``get`` (not None: that is "no entry").
_UNKNOWN = object()
#: The epoch a request begins in while this replica does not know Redis's yet: no epoch is
#: negative, so every put refuses its answer (see ``epoch``).
_NO_EPOCH = -1
_TRIM_CHECK_S = 1.0  # how often the follower checks that no event it had not read was trimmed
_RECONNECT_S = 0.1  # how often the follower tries Redis again while it is unreachable
_REFUSED_S = 1.0  # how long the follower waits after Redis refused one of its commands
#: The longest Redis expiry set (100 years); a longer TTL is kept in the entry and ``exp`` only.
_MAX_PX = 100 * 365 * 24 * 3600 * 1000
#: Puts of one ``put_many`` in flight at once (an embeddings batch holds up to 2,048).
_PUTS_AT_ONCE = 16
#: How long ``put`` waits for the follower to apply its event, in multiples of the command
#: timeout (normally one round trip: Redis wakes the follower's blocked XREAD at once).
_APPLY_WAIT = 2

# Lua shared by the scripts: an entry out of its tenant's sets (``p``: the key prefix), and drop
# entries (keys, expiry, hits, tenant) and announce them, 500 ids per command and event.
# NOTE: ids stay strings in Lua: its numbers are doubles and would round int64 ids. And Lua's
# unpack() fails past ~8000 values, after the script's earlier writes (scripts do not roll
# back): so never unpack a whole list of victims, which lowering max_entries can make long.
# NOTE: every script that adds or removes an ``lru`` member keeps the tenant's sets in step in
# the same step, so a replica's share never counts what another replica dropped.
_DROP = """
local function recount(tenant, p)
  local n = redis.call('ZCARD', p .. 't:' .. tenant)
  if n > 0 then
    redis.call('ZADD', p .. 'by-tenant', n, tenant)
  else
    redis.call('ZREM', p .. 'by-tenant', tenant)
  end
end
local function untenant(id, p)
  local tenant = redis.call('HGET', p .. 'tenant', id)
  if not tenant then return false end
  redis.call('HDEL', p .. 'tenant', id)
  redis.call('ZREM', p .. 't:' .. tenant, id)
  redis.call('ZREM', p .. 'x:' .. tenant, id)
  recount(tenant, p)
  return true
end
local function drop(ids, prefix, exp, hits, events, maxlen, p)
  for _, id in ipairs(ids) do untenant(id, p) end
  for first = 1, #ids, 500 do
    local chunk, keys = {}, {}
    for i = first, math.min(first + 499, #ids) do
      chunk[#chunk + 1] = ids[i]
      keys[#keys + 1] = prefix .. ids[i]
    end
    redis.call('DEL', unpack(keys))
    redis.call('ZREM', exp, unpack(chunk))
    redis.call('HDEL', hits, unpack(chunk))
    redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'op', 'del',
               'idlist', table.concat(chunk, ','), 'tenanted', '1')
  end
end
"""

# Lua of the put: record an entry in its tenant's sets (``p``: the key prefix), and take a
# tenant past its share back to it: its expired entries first, then its least recently used.
# Returns the ids taken out of ``lru`` (to drop); a tenant set's member no longer in ``lru``
# (dropped by a version before tenant shares, during an upgrade) leaves the set uncounted.
_SHARE = """
local function entenant(id, tenant, now, expires, p)
  if redis.call('HGET', p .. 'tenant', id) ~= tenant then
    untenant(id, p)  -- (stored again, for another tenant)
    redis.call('HSET', p .. 'tenant', id, tenant)
  end
  redis.call('ZADD', p .. 't:' .. tenant, now, id)
  recount(tenant, p)
  if expires == '' then
    redis.call('ZREM', p .. 'x:' .. tenant, id)
  else
    redis.call('ZADD', p .. 'x:' .. tenant, expires, id)
  end
end
local function shed(tenant, share, now, lru, p)
  local gone = {}
  local function take(ids)
    for _, id in ipairs(ids) do
      if redis.call('ZREM', lru, id) == 1 then gone[#gone + 1] = id end
      untenant(id, p)
    end
  end
  local own = p .. 't:' .. tenant
  local over = redis.call('ZCARD', own) - share
  if over <= 0 then return gone end
  take(redis.call('ZRANGEBYSCORE', p .. 'x:' .. tenant, '-inf', now, 'LIMIT', 0, over))
  over = redis.call('ZCARD', own) - share
  if over > 0 then take(redis.call('ZRANGE', own, 0, over - 1)) end
  return gone
end
"""

# KEYS: entry, lru, exp, hits, events, epoch. ARGV: blob, px ('' = none), now, expires ('' =
# none), id, scope, vector, vector model, max entries, entry key prefix, stream maxlen, the epoch
# the answer's request began in ('' = unchecked), a new epoch (set when Redis has none), the
# entry's tenant (its share's), max entries per tenant ('' = no share), key prefix.
# Returns {entries left, the put's event id, epoch, evicted id...}, or {-1, epoch} when a flush
# came since the request began: nothing written. NOTE: SET is the first write: if it fails
# nothing is written (but the new epoch). Past its tenant's share, the tenant's expired entries
# go first, then its least recently used; past max_entries, expired entries go before live
# ones, then the least recently used.
# NOTE: an epoch missing (Redis lost its data: a restart without persistence, a failover) is
# a new one, never '0': a request begun before the loss then is refused, as after a flush.
_PUT = (
    _DROP
    + _SHARE
    + """
local epoch = redis.call('GET', KEYS[6])
if not epoch then
  epoch = ARGV[13]
  redis.call('SET', KEYS[6], epoch)
end
if ARGV[12] ~= '' and ARGV[12] ~= epoch then
  return {-1, epoch}
end
if ARGV[2] == '' then
  redis.call('SET', KEYS[1], ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[5])
if ARGV[4] == '' then
  redis.call('ZREM', KEYS[3], ARGV[5])
else
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[5])
end
redis.call('HDEL', KEYS[4], ARGV[5])
entenant(ARGV[5], ARGV[14], ARGV[3], ARGV[4], ARGV[16])
local event = redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[11], '*', 'op', 'put',
                         'id', ARGV[5], 'scope', ARGV[6], 'vector', ARGV[7], 'vmodel', ARGV[8],
                         'tenanted', '1')
local out = {0, event, epoch}
if ARGV[15] ~= '' then  -- (first: its own expired and least recently used go, not others')
  local own = shed(ARGV[14], tonumber(ARGV[15]), ARGV[3], KEYS[2], ARGV[16])
  drop(own, ARGV[10], KEYS[3], KEYS[4], KEYS[5], ARGV[11], ARGV[16])
  for _, id in ipairs(own) do out[#out + 1] = id end
end
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[9])
local gone = {}
if over > 0 then
  local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[3], 'LIMIT', 0, over)
  for _, id in ipairs(due) do
    if redis.call('ZREM', KEYS[2], id) == 1 then gone[#gone + 1] = id end
  end
  if #gone < over then
    local popped = redis.call('ZPOPMIN', KEYS[2], over - #gone)
    for i = 1, #popped, 2 do gone[#gone + 1] = popped[i] end
  end
  drop(gone, ARGV[10], KEYS[3], KEYS[4], KEYS[5], ARGV[11], ARGV[16])
end
out[1] = redis.call('ZCARD', KEYS[2])
for _, id in ipairs(gone) do out[#out + 1] = id end
return out
"""
)

# ARGV: key prefix, tenant... Each tenant's count (of a store written by a version that kept
# them in a hash, ``P tenants``, by HINCRBY) into ``by-tenant``, out of the hash.
# NOTE: read again from the tenant's own set, not copied: the scripts keep that set with the
# entries' records, so a replica of the older version still writing the hash cannot make it wrong.
_RECOUNT = (
    _DROP
    + """
for i = 2, #ARGV do
  recount(ARGV[i], ARGV[1])
  redis.call('HDEL', ARGV[1] .. 'tenants', ARGV[i])
end
"""
)

# Tenant records that an older version left out of step (``_tidy_tenants``). A version before
# tenant shares wrote entries with none (so they counted in no share, bounded by max_entries
# alone), and dropped entries without their records (counted for good, never swept: they left
# only at a shed of their tenant, and never without a share). ``_FORGET`` (ARGV: key prefix,
# id...) drops the records of ids no longer in ``lru``; ``_ADOPT`` (ARGV: key prefix, then id
# and tenant for each entry read) records the tenant of entries in ``lru`` with none, ranked by
# their last use, with their expiry as ``exp`` has it now (the entry read may have been stored
# again since, with another TTL). Each returns how many it changed.
# NOTE: the version that counted tenants in the hash ``P tenants`` keeps the records but not
# ``by-tenant``: ``_ADOPT`` recounts the tenant of an entry already recorded (such a version's
# put); its drops name no tenant once done, and are recounted by a reload (``_recount_all``).
_FORGET = (
    _DROP
    + """
local forgotten = 0
for i = 2, #ARGV do
  if not redis.call('ZSCORE', ARGV[1] .. 'lru', ARGV[i]) and untenant(ARGV[i], ARGV[1]) then
    forgotten = forgotten + 1
  end
end
return forgotten
"""
)
_ADOPT = (
    _DROP
    + _SHARE
    + """
local adopted = 0
for i = 2, #ARGV, 2 do
  local used = redis.call('ZSCORE', ARGV[1] .. 'lru', ARGV[i])
  local owner = used and redis.call('HGET', ARGV[1] .. 'tenant', ARGV[i])
  if owner then
    recount(owner, ARGV[1])
  elseif used then
    local expires = redis.call('ZSCORE', ARGV[1] .. 'exp', ARGV[i]) or ''
    entenant(ARGV[i], ARGV[i + 1], used, expires, ARGV[1])
    adopted = adopted + 1
  end
end
return adopted
"""
)

# KEYS: epoch, events. ARGV: stream maxlen, the new epoch. A flush begins: the puts of answers
# whose requests began before it are dropped from now on, on every replica.
# NOTE: a random token, not a count of flushes: a Redis that lost its data counted from 0
# again, and its first flush brought back the epoch a request still at the model had begun in
# (its answer, made before that flush, was stored after it).
_NEW_EPOCH = """
redis.call('SET', KEYS[1], ARGV[2])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*', 'op', 'epoch', 'epoch', ARGV[2])
"""

# KEYS: lru, hits, tenant. ARGV: now, id, key prefix. Only an entry still in the LRU is touched:
# a hit on an entry evicted or deleted meanwhile would otherwise add its LRU member and hit
# count back for good. Its rank in its tenant's share moves with its rank in ``lru``.
_HIT = """
if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
  redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
  local tenant = redis.call('HGET', KEYS[3], ARGV[2])
  if tenant then redis.call('ZADD', ARGV[3] .. 't:' .. tenant, ARGV[1], ARGV[2]) end
end
"""

# KEYS: lru, exp, hits, events. ARGV: entry key prefix, stream maxlen, key prefix, id...
# Deletes entries (and their LRU ranks and tenants) and announces it, all or nothing; returns
# the entries left.
_DELETE = (
    _DROP
    + """
local ids = {}
for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
for first = 1, #ids, 500 do
  redis.call('ZREM', KEYS[1], unpack(ids, first, math.min(first + 499, #ids)))
end
drop(ids, ARGV[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3])
return redis.call('ZCARD', KEYS[1])
"""
)

# KEYS: entry, lru, exp, hits, events. ARGV: id, the record's ``created`` field as msgpack
# encodes it (see ``_created_field``), entry key prefix, stream maxlen, key prefix. Deletes the
# entry (as ``_DELETE``) only while its record is still the one read, the one holding that
# field: an answer stored again under the id since (by any replica) is kept, and no del event
# is sent. Returns {1 deleted or 0, entries left}.
# NOTE: the bytes are searched, not the record decoded: Redis's cmsgpack cannot read msgpack's
# bin type, which the record's vector is.
_DELETE_IF = (
    _DROP
    + """
local raw = redis.call('GET', KEYS[1])
if not (raw and string.find(raw, ARGV[2], 1, true)) then
  return {0, redis.call('ZCARD', KEYS[2])}
end
redis.call('ZREM', KEYS[2], ARGV[1])
drop({ARGV[1]}, ARGV[3], KEYS[3], KEYS[4], KEYS[5], ARGV[4], ARGV[5])
return {1, redis.call('ZCARD', KEYS[2])}
"""
)

# KEYS: entry, hits, lru, exp, events. ARGV: id, entry key prefix, stream maxlen, now, key prefix.
# Returns {blob, hits} or {}. NOTE: an entry whose key is gone while ``lru`` still ranks it, and
# not because it expired (the sweep drops, announces and counts those), was dropped by Redis
# itself (a maxmemory eviction: `volatile-lru` picks entry keys, which carry the TTL; a DEL by
# hand). No event said so: every replica kept its vector (a nearest neighbour never served,
# hiding the live ones behind it) and counted it, until its TTL's sweep. Dropped and announced
# here, in one step with the read, so no put of the same id can come between.
_GET = (
    _DROP
    + """
local raw = redis.call('GET', KEYS[1])
if raw then
  return {raw, redis.call('HGET', KEYS[2], ARGV[1])}
end
local expires = redis.call('ZSCORE', KEYS[4], ARGV[1])
if expires and tonumber(expires) <= tonumber(ARGV[4]) + 1 then
  return {}  -- expired (PX may end its key a moment before): the sweep's
end
if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then
  drop({ARGV[1]}, ARGV[2], KEYS[4], KEYS[2], KEYS[5], ARGV[3], ARGV[5])
end
return {}
"""
)

# KEYS: lru, exp, hits, events. ARGV: now, batch, entry key prefix, stream maxlen, key prefix.
# Returns {entries left, swept id...}: ids whose expiry is still due when the script runs.
_SWEEP = (
    _DROP
    + """
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
if #due > 0 then
  redis.call('ZREM', KEYS[1], unpack(due))
  drop(due, ARGV[3], KEYS[2], KEYS[3], KEYS[4], ARGV[4], ARGV[5])
end
local out = {redis.call('ZCARD', KEYS[1])}
for i, id in ipairs(due) do out[i + 1] = id end
return out
"""
)


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
        retry_after: float = 0.1,
        max_entries_per_tenant: int | None = None,
        tenant_of: Callable[[str], str] = str,
    ) -> None:
        # Typed Any: redis-py's annotations do not follow decode_responses=False (bytes replies).
        # NOTE: a blocking pool: past _CONNECTIONS commands in flight, the next waits (up to
        # ``timeout``) for a connection; the default pool raises at once, which read as Redis
        # being down and switched the cache off for everyone under a burst of requests. (Live
        # requests' commands queue for a turn first, in ``_call``; the background listings may
        # still wait here.)
        # NOTE: after a Redis restart every pooled connection is dead, and a command on one
        # fails at once with a connection error. Without a retry each of the 64 connections,
        # when next used, switched the cache off for ``retry_after`` (issue 16: 118 of 257
        # answers never stored after a restart). One retry, on a fresh socket, with no backoff;
        # a timeout is not retried (Redis answered too slowly: waiting twice helps nobody).
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            retry=_retry_once(),
            max_connections=_CONNECTIONS,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            decode_responses=False,
        )
        self._redis: Any = aioredis.Redis(connection_pool=pool)
        # The follower blocks on XREAD for up to _BLOCK_MS: it needs its own, patient connection.
        # NOTE: it keeps redis-py's default retry (10 tries, jittered backoff up to 1 s), which
        # rides out a restart; Retry(NoBackoff(), 1) here made a cancelled XREAD hang on close.
        self._follower: Any = aioredis.Redis.from_url(
            url,
            socket_timeout=_BLOCK_MS / 1000 + timeout,
            socket_connect_timeout=timeout,
            decode_responses=False,
        )
        # One connection of its own asks Redis, after a command timed out with no answer from
        # Redis meanwhile, whether Redis answers at all (``_redis_answers``).
        # (retried once as the pool's commands are: after a Redis restart its socket is dead,
        # and the recheck's first PING then failed, keeping the cache off a second longer)
        self._prober: Any = aioredis.Redis.from_url(
            url,
            retry=_retry_once(),
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            single_connection_client=True,
            decode_responses=False,
        )
        self._probe: asyncio.Future[bool] | None = None
        self._recheck: asyncio.Task[None] | None = None  # PINGs Redis while it is marked down
        self._p = key_prefix
        #: Redis's epoch as last seen (a put's reply, a flush, the follower); None: unknown
        self._epoch: int | None = None
        self._timeout = timeout
        self._max_entries = max_entries
        self._per_tenant = max_entries_per_tenant
        self._tenant_of = tenant_of
        #: Entries per tenant as the follower last read them (kept only with a per-tenant cap).
        self._tenant_counts = TenantEntries({})
        self._retry_after = retry_after
        self._down_until = 0.0
        # NOTE: commands queue here for one of the pooled connections, so the timeout below
        # measures Redis alone. It used to cover the queue too: a burst of 300 lookups on a cold
        # pool (64 connects with their handshakes on a busy loop) took 0.4-0.9 s, and the queued
        # lookups' deadlines marked a healthy Redis down for everyone (a CI failure).
        self._turns = asyncio.Semaphore(_CONNECTIONS)
        #: commands skipped because they waited too long for a connection (this replica's burst)
        self.skipped_turns = 0
        #: commands that ran past ``timeout`` while Redis answered others (or a probe right
        #: after): given up, Redis up
        self.slow_commands = 0
        self._answered_at = 0.0  # when a command last came back from Redis
        self._count = 0
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(Entry)
        #: Where the follower stands (the last event applied to its listener); None while it
        #: is not following (not started, reloading, or reconnecting): nothing to wait for.
        self._applied: tuple[int, int] | None = None
        self._progress = asyncio.Event()  # set (and replaced) whenever ``_applied`` changes
        self._put_script = self._redis.register_script(_PUT)
        self._sweep_script = self._redis.register_script(_SWEEP)
        self._hit_script = self._redis.register_script(_HIT)
        self._get_script = self._redis.register_script(_GET)
        self._epoch_script = self._redis.register_script(_NEW_EPOCH)
        self._delete_script = self._redis.register_script(_DELETE)
        self._delete_if_script = self._redis.register_script(_DELETE_IF)
        self._recount_script = self._redis.register_script(_RECOUNT)
        self._forget_script = self._redis.register_script(_FORGET)
        self._adopt_script = self._redis.register_script(_ADOPT)

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    @property
    def epoch(self) -> int | None:
        """Redis's epoch as this replica knows it; ``_NO_EPOCH`` while it does not (it has not
        read it yet: the follower of a replica that just started waits for its embedding model).

        NOTE: it was None, which a put does not check: an answer to a request begun then, made
        before a flush through another replica, was stored after that flush. Unknown, the
        answer is not stored; the first lookup (``get``) or put learns the epoch.
        """
        return _NO_EPOCH if self._epoch is None else self._epoch

    # -- EntryStore ------------------------------------------------------------------------

    async def get(self, entry_id: int, *, strict: bool = False) -> Entry | None:
        """The entry, or None when Redis has none. A read that could not be made (Redis down,
        slow to give a turn, or refusing the command) is None too, unless ``strict``: then
        StoreUnavailable, so a caller never takes "unknown" for "gone"."""

        async def op() -> Entry | None:
            if self._epoch is None:  # (a replica that just started: see ``epoch``)
                epoch = await self._redis.get(self._p + "epoch")
                if epoch is not None and self._epoch is None:
                    self._epoch = int(epoch)
            reply = await self._get_script(
                keys=[self._key(entry_id), *self._keys("hits", "lru", "exp", "events")],
                args=[entry_id, self._p + "e:", _STREAM_MAXLEN, repr(time.time()), self._p],
            )
            if not reply:  # (and if ``lru`` still had it, its removal is announced)
                return None
            raw, hits = reply
            entry = self._decode(raw)
            if entry is not None:
                entry.hits = int(hits or 0)
            return entry

        got = await self._call(op, default=_UNKNOWN)
        if got is _UNKNOWN:
            if strict:
                raise StoreUnavailable("Redis could not be read: the entry's state is unknown")
            return None
        return cast(Entry | None, got)

    async def put(self, entry: Entry, *, epoch: int | None = None) -> list[int]:
        """Store ``entry``; returns the ids evicted for room, once this replica's follower has
        applied the put (see ``_until_applied``). Superseded, nothing stored, when a flush
        (through any replica) came since ``epoch``: the answer was made before it.

        NOTE: a flush used to wait only for this replica's writes in progress: another
        replica's answer, asked for before the flush and stored after it (a slow model), was
        served from the flushed cache (after a model change, the old model's answer)."""

        async def op() -> tuple[list[int], bytes]:
            now = time.time()
            # NOTE: a non-finite expiry (never validated away here) means "never": int(inf)
            # would raise, and Redis refuses an expiry past its range.
            expires = entry.expires
            if expires is not None and not math.isfinite(expires):
                expires = None
            px = "" if expires is None else min(max(int((expires - now) * 1000), 1), _MAX_PX)
            reply = await self._put_script(
                keys=[self._key(entry.id), *self._keys("lru", "exp", "hits", "events", "epoch")],
                args=[
                    self._encoder.encode(entry),
                    px,
                    repr(now),
                    "" if expires is None else repr(expires),
                    entry.id,
                    entry.scope,
                    entry.vector or b"",
                    entry.vector_model,
                    self._max_entries,
                    self._p + "e:",
                    _STREAM_MAXLEN,
                    "" if epoch is None else epoch,
                    _new_epoch(),
                    self._tenant_of(entry.tenant),
                    "" if self._per_tenant is None else self._per_tenant,
                    self._p,
                ],
            )
            if int(reply[0]) < 0:  # a flush came since ``epoch``: nothing was written
                self._epoch = int(reply[1])
                return [], b""
            self._count, self._epoch = int(reply[0]), int(reply[2])
            return [int(member) for member in reply[3:]], bytes(reply[1])

        done: tuple[list[int], bytes] | None = await self._call(op)
        if done is None:
            raise StoreUnavailable("Redis failed: the answer was not stored")
        evicted, event = done
        if not event:
            raise Superseded("a flush came after the answer's request began: not stored")
        await self._until_applied(event)
        return evicted

    async def put_many(self, entries: Sequence[Entry], *, epoch: int | None = None) -> list[int]:
        """``put`` each, ``_PUTS_AT_ONCE`` at a time (each waits for Redis, not holding the
        event loop; the pool and its follower are not flooded); StoreUnavailable (``stored``:
        how many were, ``removed``: the ids evicted for them) when some were not; Superseded
        when a flush came since ``epoch`` (as ``put``)."""
        gate = asyncio.Semaphore(_PUTS_AT_ONCE)

        async def one(entry: Entry) -> list[int]:
            async with gate:
                return await self.put(entry, epoch=epoch)

        done = await asyncio.gather(*(one(e) for e in entries), return_exceptions=True)
        for outcome in done:
            if isinstance(outcome, BaseException) and not isinstance(outcome, StoreUnavailable):
                raise outcome
        evicted = [i for outcome in done if isinstance(outcome, list) for i in outcome]
        stored = sum(isinstance(outcome, list) for outcome in done)
        if stored < len(entries):
            raise StoreUnavailable("Redis failed: answers were not stored", evicted, stored=stored)
        return evicted

    async def delete(self, ids: list[int]) -> None:
        if ids and not await self._delete(ids):
            raise StoreUnavailable("Redis failed: nothing was deleted")

    async def delete_if_unchanged(self, entry: Entry) -> bool:
        """Delete ``entry`` only while Redis still holds it (the same ``created``), in one
        script: an answer another request (of any replica) stored under its id since it was
        read is kept, with its vector (no del event). StoreUnavailable when Redis failed."""

        async def op() -> bool:
            deleted, self._count = await self._delete_if_script(
                keys=[self._key(entry.id), *self._keys("lru", "exp", "hits", "events")],
                args=[entry.id, _created_field(entry), self._p + "e:", _STREAM_MAXLEN, self._p],
            )
            return bool(deleted)

        deleted = await self._call(op)
        if deleted is None:
            raise StoreUnavailable("Redis failed: nothing was deleted")
        return deleted

    async def record_hit(self, entry_id: int) -> None:
        async def op() -> None:
            await self._hit_script(
                keys=self._keys("lru", "hits", "tenant"),
                args=[repr(time.time()), entry_id, self._p],
            )

        await self._call(op)

    async def sweep(self) -> list[int]:
        async def batch() -> list[int]:
            # NOTE: the script reads and removes in one step: an entry stored again since it
            # expired has a later expiry by then, and stays.
            reply = await self._sweep_script(
                keys=self._keys("lru", "exp", "hits", "events"),
                args=[repr(time.time()), _BATCH, self._p + "e:", _STREAM_MAXLEN, self._p],
            )
            self._count = int(reply[0])
            return [int(member) for member in reply[1:]]

        gone: list[int] = []
        while True:  # one command (and one deadline) per batch
            swept = await self._call(batch, default=[])
            gone += swept
            if len(swept) < _BATCH:
                return gone

    async def flush(self, namespace: str | None = None) -> list[int]:
        """Delete every entry (or a namespace's); raises StoreUnavailable if Redis fails."""
        if not self.available:
            raise StoreUnavailable("Redis is unavailable: nothing was flushed.")
        try:
            # first: an answer stored from now on was asked for after the flush began
            epoch = _new_epoch()
            await self._epoch_script(keys=self._keys("epoch", "events"),
                                     args=[_STREAM_MAXLEN, epoch])  # fmt: skip
            self._epoch = epoch
            if namespace is None:
                ids = [i async for page in self._lru_pages() for i in page]
            else:
                ids = [entry.id async for entry in self.entries() if entry.namespace == namespace]
        except (TimeoutError, RedisError, OSError, StoreUnavailable) as exc:
            raise StoreUnavailable(
                f"Redis failed listing the entries: nothing was flushed ({exc!r})."
            ) from exc
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
        the follower reloads as soon as Redis answers again.

        NOTE: a failure here does not mark Redis down: a listing is many commands in the
        background, and one slow page says little about the lookups and stores of live requests.
        """
        try:
            async for page in self._lru_pages():
                # (a small set comes in one page whatever COUNT says: read it in batches)
                for start in range(0, len(page), _BATCH):
                    batch = page[start : start + _BATCH]
                    blobs = await self._redis.mget([self._key(i) for i in batch])
                    now = time.time()
                    for blob in blobs:
                        entry = self._decode(blob) if blob is not None else None
                        if entry is not None and not entry.expired(now):
                            yield entry
        except (TimeoutError, RedisError, OSError) as exc:
            raise StoreUnavailable(f"Redis failed while listing entries: {exc!r}") from exc

    async def ids(self) -> set[int]:
        """Ids of every stored entry; empty when Redis fails (without marking it down)."""
        try:
            return {i async for page in self._lru_pages() for i in page}
        except (TimeoutError, RedisError, OSError) as exc:
            log.warning("response cache: listing the Redis entries failed (%r)", exc)
            return set()

    async def follow(self, listener: StoreListener) -> None:
        """Apply the store's changes to ``listener``, every replica's (this one's too) in stream
        order, until cancelled (reconnecting as needed).

        NOTE: XREAD from a position the stream was trimmed past answers the oldest events left,
        without an error; so about once a second the follower checks that the stream still
        holds where it stood at its previous check, and reloads if not.
        """
        try:
            await self._follow(listener)
        finally:
            self._stand_at(None)

    def __len__(self) -> int:
        return self._count

    def tenant_entries(self) -> TenantEntries:
        """Entries per tenant (``tenant_of`` their tenant; those stored before tenant shares are
        not counted until a reload adopts them), as the follower read them last (about once a
        second); none without a per-tenant cap."""
        return self._tenant_counts

    def _decode(self, blob: bytes) -> Entry | None:
        """An entry, or None (logged) for a value this version cannot read (written by
        another version or deployment under the same prefix): a miss, never a 500."""
        try:
            return self._decoder.decode(blob)
        except msgspec.DecodeError:
            log.warning("response cache: a stored entry could not be decoded; skipped")
            return None

    async def close(self) -> None:
        await self._redis.aclose(close_connection_pool=True)  # (a pool it does not own else)
        await self._follower.aclose()
        for task in (self._probe, self._recheck):
            if task is not None:
                task.cancel()
        await self._prober.aclose()

    # -- helpers ---------------------------------------------------------------------------

    async def _follow(self, listener: StoreListener) -> None:
        last: bytes | None = None
        checked = b"0-0"  # where the follower stood at its previous trim check
        check_at = 0.0
        while True:
            try:
                if last is None:
                    self._stand_at(None)  # puts meanwhile are in the reload, or after its point
                    last = checked = await self._reload_point()
                    await listener.on_reset()
                    self._stand_at(last)
                    check_at = 0.0  # the reload may have been slow: check right away
                if time.monotonic() >= check_at:
                    if await self._trimmed_since(checked):
                        log.warning(
                            "response-cache event stream trimmed past this replica; reloading"
                        )
                        last = None
                        continue
                    checked, check_at = last, time.monotonic() + _TRIM_CHECK_S
                    await self._count_entries()  # (also catches changes made without events)
                    await self._count_tenants()
                reply = await self._follower.xread(
                    {self._p + "events": last}, block=_BLOCK_MS, count=_BATCH
                )
                if reply:
                    last = _apply_all(listener, reply, last)
                    self._epoch = _last_epoch(reply, self._epoch)
                    self._stand_at(last)
                    await self._tidy_after(reply)
                    await self._count_entries()  # other replicas' stores and evictions
            except ResponseError as exc:  # (NOPERM, WRONGTYPE: it may answer so every time)
                log.warning("response-cache event stream: %s; reloading", exc)
                last = None
                self._stand_at(None)
                await asyncio.sleep(_REFUSED_S)  # not a hot loop of full reloads
                continue
            except (TimeoutError, RedisError, OSError, StoreUnavailable) as exc:
                if _cancelling():  # a cancellation that arrived as the read's timeout
                    raise asyncio.CancelledError from exc
                if last is not None:
                    log.warning("response-cache event stream lost (%r); will reload", exc)
                last = None  # events may be lost while disconnected: reload on return
                self._stand_at(None)
                await asyncio.sleep(_RECONNECT_S)
                continue
            except Exception:  # NOTE: a follower that stopped would leave the index behind
                log.exception("response-cache event stream: an event could not be applied")
                last = None  # reload: the index agrees with Redis again
                self._stand_at(None)
                await asyncio.sleep(1.0)  # (not a hot loop, should it fail every time)
                continue

    def _stand_at(self, position: bytes | None) -> None:
        """The follower has applied every event up to ``position`` (None: it is not following
        now, and will reload): wake the puts waiting for it."""
        self._applied = None if position is None else _stream_id(position)
        self._progress.set()
        self._progress = asyncio.Event()

    async def _until_applied(self, event: bytes) -> None:
        """Wait until the follower has applied ``event`` (a put's), at most ``_APPLY_WAIT``
        command timeouts; at once when no follower is following.

        NOTE: the follower is the only writer of a shared store's index: a local change made
        after awaiting Redis could undo a newer event the follower already applied (the same id
        stored again, evicted, stored without a vector). Waiting here instead keeps an answer
        stored on this replica findable by the next lookup here. A follower that is slow only
        delays that: it applies the event when it gets to it.
        """
        target = _stream_id(event)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._timeout * _APPLY_WAIT):
                while self._applied is not None and self._applied < target:
                    await self._progress.wait()

    async def _delete(self, ids: list[int]) -> bool:
        """Delete entries with their LRU ranks; False when Redis failed (nothing deleted)."""

        async def op() -> bool:
            await self._remove(ids)
            return True

        return bool(await self._call(op, default=False))

    def _key(self, entry_id: int) -> str:
        return f"{self._p}e:{entry_id}"

    def _keys(self, *names: str) -> list[str]:
        return [self._p + name for name in names]

    async def _remove(self, ids: list[int]) -> None:
        """Delete entries with their LRU ranks and tenants, and announce it, all or nothing.

        NOTE: a script, not a MULTI: which tenant's share each entry leaves is read in Redis."""
        self._count = int(
            await self._delete_script(
                keys=self._keys("lru", "exp", "hits", "events"),
                args=[self._p + "e:", _STREAM_MAXLEN, self._p, *ids],
            )
        )

    async def _lru_pages(self) -> AsyncIterator[list[int]]:
        """The ids in ``lru``, one short ZSCAN per page, each id once.

        NOTE: ZSCAN returns every member present from the first page to the last (ZRANGE by
        rank could skip one whose score a hit moved meanwhile) but may return a member twice.
        """
        seen: set[bytes] = set()
        cursor = 0
        while True:
            cursor, page = await self._redis.zscan(self._p + "lru", cursor, count=_BATCH)
            fresh = [member for member, _score in page if member not in seen]
            seen.update(fresh)
            if fresh:
                yield [int(member) for member in fresh]
            if cursor == 0:
                return

    async def _count_entries(self) -> None:
        """Refresh the entry count from Redis (one ZCARD on the follower's connection).

        NOTE: a replica that only reads learns of the others' stores through events, which
        carry no count: without this its ``len()`` changed only with its own writes.
        """
        self._count = int(await self._follower.zcard(self._p + "lru"))

    async def _count_tenants(self) -> None:
        """Refresh the entries per tenant: the ``TENANTS_SHOWN`` holding the most by name, the
        totals of all (three short commands; only with a per-tenant cap).

        NOTE: it was one HGETALL of every tenant's count, on every replica about once a second:
        with a tenant per client key, a reply of tens of thousands of them for the 100 shown.
        """
        if self._per_tenant is None:
            return
        counts = self._p + "by-tenant"
        async with self._follower.pipeline(transaction=True) as pipe:  # (one moment's counts)
            pipe.zrevrange(counts, 0, TENANTS_SHOWN - 1, withscores=True)
            pipe.zcard(counts)
            pipe.hlen(self._p + "tenant")  # (the entries of every tenant's set, together)
            top, tenants, entries = await pipe.execute()
        shown = {bytes(tenant).decode(): int(n) for tenant, n in top}
        self._tenant_counts = TenantEntries(shown, int(tenants), int(entries))

    async def _tidy_tenants(self) -> None:
        """Bring the tenant records of a store an older version wrote (or still writes, during
        an upgrade) in step with its entries, at each reload: the counts of a hash moved, the
        records of entries it dropped forgotten, entries it stored without one adopted.

        NOTE: a whole-store pass (pages of ``_BATCH``, as the reload's own listing); one that
        Redis refuses is logged and skipped: retried at every reload, it would stop the follower.
        """
        try:
            await self._upgrade_counts()
            await self._recount_all()
            forgotten = await self._forget_dropped()
            adopted = await self._adopt_untenanted()
        except ResponseError as exc:
            log.warning("response cache: the tenant records could not be tidied (%s)", exc)
            return
        if forgotten or adopted:
            log.info("response cache: tenant records of an older version: %d entries dropped"
                     " forgotten, %d adopted", forgotten, adopted)  # fmt: skip

    async def _tidy_after(self, reply: Any) -> None:
        """Tidy the tenant records of the entries that events of an older version (without
        ``tenanted``: a replica not yet upgraded, storing and dropping entries meanwhile) name,
        as ``_tidy_tenants`` does for the whole store; none once every replica is upgraded."""
        stored, dropped = _untenanted(reply)
        try:
            for start in range(0, len(dropped), _BATCH):
                args: list[str | int] = [self._p, *dropped[start : start + _BATCH]]
                await self._forget_script(args=args, client=self._follower)
            for start in range(0, len(stored), _BATCH):
                await self._adopt(stored[start : start + _BATCH])
        except ResponseError as exc:  # (as _tidy_tenants: not a reason to reload)
            log.warning("response cache: the tenant records could not be tidied (%s)", exc)

    async def _forget_dropped(self) -> int:
        """Drop the tenant records of entries no longer in ``lru``; returns how many."""
        forgotten = 0
        async for ids in self._scanned(self._p + "tenant"):
            args: list[str | bytes] = [self._p, *ids]
            forgotten += int(await self._forget_script(args=args, client=self._follower))
        return forgotten

    async def _adopt_untenanted(self) -> int:
        """Record the tenant of entries in ``lru`` that have none, read from the entries
        themselves; returns how many."""
        adopted = 0
        async for page in self._lru_pages():
            for start in range(0, len(page), _BATCH):
                batch = page[start : start + _BATCH]
                owners = await self._follower.hmget(self._p + "tenant", batch)
                orphans = [i for i, owner in zip(batch, owners, strict=True) if owner is None]
                if orphans:
                    adopted += await self._adopt(orphans)
        return adopted

    async def _adopt(self, ids: list[int]) -> int:
        """``_ADOPT`` the entries ``ids`` (their tenants read from the entries themselves);
        returns how many had no tenant record."""
        args: list[Any] = [self._p]
        blobs = await self._follower.mget([self._key(i) for i in ids])
        for entry_id, blob in zip(ids, blobs, strict=True):
            entry = self._decode(blob) if blob is not None else None
            if entry is not None:  # (gone meanwhile, or unreadable: not this pass's to drop)
                args += [entry_id, self._tenant_of(entry.tenant)]
        return int(await self._adopt_script(args=args, client=self._follower)) if args[1:] else 0

    async def _upgrade_counts(self) -> None:
        """Move the counts of a store written when ``P tenants`` was a hash to ``by-tenant``,
        ``_BATCH`` tenants a command (at each reload; one TYPE once there is none)."""
        old = self._p + "tenants"
        if await self._follower.type(old) != b"hash":
            return
        async for tenants in self._scanned(old):
            await self._recount_script(args=[self._p, *tenants], client=self._follower)

    async def _recount_all(self) -> None:
        """Recount every tenant in ``by-tenant`` from its own set, ``_BATCH`` a command (at each
        reload): the version that counted them in a hash dropped entries without changing these
        counts, and its del events name no tenant (a tenant left with none was shown for good).
        """
        async for tenants in self._scanned(self._p + "by-tenant", zset=True):
            await self._recount_script(args=[self._p, *tenants], client=self._follower)

    async def _scanned(self, key: str, *, zset: bool = False) -> AsyncIterator[list[bytes]]:
        """The fields of the hash ``key`` (the members of the sorted set, ``zset``), one short
        HSCAN (ZSCAN) a page on the follower's connection; one may come twice."""
        cursor = 0
        while True:
            if zset:
                cursor, scored = await self._follower.zscan(key, cursor, count=_BATCH)
                page = [member for member, _score in scored]
            else:
                cursor, fields = await self._follower.hscan(key, cursor, count=_BATCH)
                page = list(fields)
            if page:
                yield page
            if cursor == 0:
                return

    async def _reload_point(self) -> bytes:
        """The stream position a reload starts from (and the entry count, refreshed)."""
        try:
            info = await self._follower.xinfo_stream(self._p + "events")
            tail = bytes(info["last-generated-id"])
        except ResponseError:  # no stream yet
            tail = b"0-0"
        await self._count_entries()
        await self._tidy_tenants()
        await self._follower.set(self._p + "epoch", _new_epoch(), nx=True)  # (see _PUT)
        self._epoch = int(await self._follower.get(self._p + "epoch"))
        return tail

    async def _trimmed_since(self, position: bytes) -> bool:
        """Whether events after ``position`` may have been trimmed from the stream unread.

        Trimming drops the oldest events first, so that is when the event at ``position`` is
        gone: the stream's first event lies past it. (A reload may then be one too many, when
        the trim stopped right after ``position``; it is right whenever events were lost.)
        """
        try:
            info = await self._follower.xinfo_stream(self._p + "events")
        except ResponseError:  # no stream: nothing was trimmed
            return False
        if position == b"0-0":  # the stream did not exist when the follower started
            added = info.get("entries-added")  # Redis ≥ 7; Redis 6 cannot tell
            return added is not None and int(added) > int(info["length"])
        first = info.get("first-entry")
        return (
            first is not None
            and first[0] is not None
            and _stream_id(first[0]) > _stream_id(position)
        )

    async def _call(self, op: Callable[[], Awaitable[T]], default: Any = None) -> T:
        if not self.available:
            return default
        try:
            async with asyncio.timeout(self._timeout * _TURN_WAIT):
                await self._turns.acquire()
        except TimeoutError:
            self.skipped_turns += 1
            log.debug("response cache: a Redis command waited too long for a connection")
            return default
        started = time.monotonic()
        try:
            if not self.available:  # Redis failed while this command waited
                return default
            async with asyncio.timeout(self._timeout):  # Redis's time alone, not the queue's
                result = await op()
            self._answered_at = time.monotonic()
            return result
        except ResponseError as exc:  # Redis answered, refusing this command: it is not down
            self._answered_at = time.monotonic()
            log.warning("response cache: Redis refused a command (%s)", exc)
            return default
        except (TimeoutError, RedisError, OSError) as exc:
            # NOTE: a command that timed out while others came back from Redis meanwhile met
            # this replica's congestion (a burst's connects on a busy loop: a CI failure), not
            # a Redis that stopped answering; switching the cache off for everyone for
            # ``retry_after`` would be the wrong answer to it. So did one that timed out with
            # no answer meanwhile when a probe right after is answered: the burst's first 64
            # commands, each opening its connection, can all pass ``timeout`` together on a
            # starved loop (another CI failure). A Redis that hangs answers neither: it is
            # marked down within one more ``timeout`` (the probe's).
            if isinstance(exc, (TimeoutError, RedisTimeoutError)) and (
                self._answered_at > started or await self._redis_answers()
            ):
                self.slow_commands += 1
                log.debug("response cache: a Redis command was slow while Redis answered others")
            else:
                self._mark_down(exc)
            return default
        finally:
            self._turns.release()

    async def _redis_answers(self) -> bool:
        """Whether Redis answers a PING on the probe's own connection within ``timeout`` (or
        answers another command meanwhile). Commands that time out together share one probe."""
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._ping())
        return await asyncio.shield(self._probe)

    async def _ping(self) -> bool:
        started = time.monotonic()
        try:
            async with asyncio.timeout(self._timeout):
                await self._prober.ping()
        except (TimeoutError, RedisError, OSError):
            return self._answered_at > started
        self._answered_at = time.monotonic()
        return True

    def _mark_down(self, exc: BaseException) -> None:
        """Switch Redis off until a PING every ``retry_after`` is answered (``_until_up``).

        NOTE: it was off for ``retry_after`` only, after which live commands tried Redis again:
        when Redis hangs (SIGSTOP, a network partition) each of them then waited a timeout and
        the probe's, and lookups waited for the stores in flight in their scope: a hung Redis
        added 2 x ``timeout`` to most requests every ``retry_after``.
        NOTE: ``retry_after`` was 1 s, kept from then, when each retry cost requests a wait:
        a PING of its own costs none, and the cache stayed off up to a second after Redis came
        back (misses, stores skipped: up to a second of model calls the cache would have saved).
        A hung Redis stays off as before: each PING waits ``timeout`` for its answer.
        """
        if self.available:
            log.warning("response cache: Redis unavailable (%r); answering without it", exc)
        self._down_until = math.inf
        if self._recheck is None or self._recheck.done():
            self._recheck = asyncio.get_running_loop().create_task(self._until_up())

    async def _until_up(self) -> None:
        """PING Redis every ``retry_after`` until it answers, then switch it back on."""
        while True:
            await asyncio.sleep(self._retry_after)
            try:
                if await self._redis_answers():
                    self._down_until = 0.0
                    log.warning("response cache: Redis answers again; answering with it")
                    return
            except Exception:  # NOTE: a recheck that stopped would leave the cache off for good
                log.exception("response cache: trying Redis again failed")


def _new_epoch() -> int:
    """A flush's epoch: random, so no two flushes (nor a Redis that lost its data) share one
    (62 bits: a replica of an older version, which counts up with INCR, cannot overflow it)."""
    return secrets.randbits(62)


def _created_field(entry: Entry) -> bytes:
    """``entry``'s ``created`` as its msgpack record holds it: the map key, then the float64
    (unix time to the microsecond or finer: another store of the id has another one)."""
    return msgspec.msgpack.encode("created") + msgspec.msgpack.encode(float(entry.created))


def _retry_once() -> Retry:
    """Retry a command once, at once, on a fresh connection after a connection error."""
    return Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))


def _apply_all(listener: StoreListener, reply: Any, last: bytes) -> bytes:
    """Apply an XREAD reply's events in order; returns the position of the last one."""
    for _stream, events in reply:
        for event_id, fields in events:
            last = event_id
            try:
                _apply(listener, fields)
            except Exception:  # one bad event must not stop the replica following
                log.exception("response-cache event %r could not be applied", event_id)
    return last


def _last_epoch(reply: Any, epoch: int | None) -> int | None:
    """The epoch of an XREAD reply's last epoch event (a flush began), else ``epoch``."""
    for _stream, events in reply:
        for _event_id, fields in events:
            if fields.get(b"op") == b"epoch":
                epoch = int(fields[b"epoch"])
    return epoch


def _stream_id(value: bytes | str) -> tuple[int, int]:
    ms, _, seq = (value.decode() if isinstance(value, bytes) else value).partition("-")
    return int(ms), int(seq or 0)


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
        listener.on_delete(_deleted(fields))


def _deleted(fields: dict[bytes, bytes]) -> list[int]:
    """The ids a del event names."""
    if b"idlist" in fields:  # written by the Lua scripts
        return [int(i) for i in fields[b"idlist"].split(b",") if i]
    return cast(list[int], np.frombuffer(fields[b"ids"], dtype="<i8").tolist())  # (packed)


def _untenanted(reply: Any) -> tuple[list[int], list[int]]:
    """The ids that an XREAD reply's puts and dels without ``tenanted`` name (an older
    version's, whose scripts leave the tenant records as they were): stored, dropped."""
    stored: list[int] = []
    dropped: list[int] = []
    for _stream, events in reply:
        for event_id, fields in events:
            if b"tenanted" in fields:
                continue
            try:
                if fields.get(b"op") == b"put":
                    stored.append(int(fields[b"id"]))
                elif fields.get(b"op") == b"del":
                    dropped += _deleted(fields)
            except (KeyError, ValueError):  # (logged by _apply_all, which skipped it too)
                log.debug("response-cache event %r names no ids", event_id)
    return stored, dropped


def _cancelling() -> bool:
    """Whether the current task has been asked to stop (its cancellation may have been
    turned into another exception by the call it interrupted)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
