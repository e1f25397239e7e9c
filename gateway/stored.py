"""Responses the gateway stored (``store: true``, the Responses API's default).

They serve ``GET`` / ``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``
and ``previous_response_id``: a follow-up that names a stored response continues its
conversation, which the gateway resolves itself.

Each response belongs to its owner (the tenant that created it; see ``responses.owner``):
looking up another owner's id finds nothing, exactly as an id that never existed.

    store = ResponseStore()
    store.put(StoredResponse(owner, response, input_items, conversation, upstream=False))
    store.get(owner, "resp_...")        # None for another owner, an unknown or expired id

NOTE: the store lives in the gateway process's memory, bounded in count (``STORE_MAX``), in
bytes (``STORE_BYTES``) and in age (``STORE_TTL``): a restart forgets it, and replicas do
not share it. A follow-up naming an id this gateway does not hold is forwarded upstream as
it is. When the store is full, the owner holding the most (bytes, or responses) of the tenant
holding the most gives up its least recently used one: owners share the store, and one that
stores a flood of responses (cache hits cost it nothing) pushes out its own, not the others';
a tenant's owners are counted together first, as a tenant may spread a flood over many of them
(each ``x-cachegate-partition`` is an owner of its own).

Who an id belongs to outlives the response (:meth:`ResponseStore.claim`): an upstream called
with the gateway's own key resolves any id made with that key, whoever names it, so an id
answered for one owner must stay refused to the others after its response has expired or
was pushed out (and for a ``background`` one never kept at all). Each claim is two 16-byte
digests (id, owner), about 100 bytes, ``CLAIMS_MAX`` of them at most (100 times the
responses: ~100 MB when full); past it, the tenant holding more than its share (or else the
most) gives up its biggest owner's oldest, so one owner's flood of upstream calls cannot push
out another's claims, nor one tenant's (spread over its partitions) another tenant's.
``foreign`` reads both:

    store.claim(owner, "resp_...")      # an upstream answered this id for owner
    store.foreign(other, "resp_...")    # True: never resolved nor forwarded for other
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import msgspec

from .requests import unpartitioned

__all__ = [
    "CLAIMS_MAX",
    "STORE_BYTES",
    "STORE_MAX",
    "STORE_TTL",
    "ResponseStore",
    "StoredResponse",
]

#: Responses held at most.
STORE_MAX = 10_000
#: Bytes of responses held at most (each counted as its JSON: the Response and its input).
STORE_BYTES = 256 * 2**20
#: Seconds a stored response stays (OpenAI keeps them 30 days).
STORE_TTL = 30 * 86_400.0
#: Response ids whose owner is remembered at most (after their responses are gone).
CLAIMS_MAX = 100 * STORE_MAX


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One stored response, with what a follow-up needs to continue its conversation."""

    owner: str
    response: dict[str, Any]  # the Response object as the client received it
    input_items: list[dict[str, Any]]  # this request's input, as items with ids
    #: Every item of the conversation up to and including this response's output, in order
    #: (what ``previous_response_id`` stands for; instructions are not carried over).
    conversation: list[dict[str, Any]]
    #: The upstream answered (and stores) this very id: a follow-up may name it there.
    upstream: bool
    stored_at: float = field(default_factory=time.time)
    model: str = ""  # the configured model that answered (where an upstream copy is deleted)

    @property
    def id(self) -> str:
        return str(self.response["id"])

    def size(self) -> int:
        """Bytes it holds of its own, roughly: its Response and input as JSON.

        NOTE: ``conversation`` refers to the earlier turns' items, which the responses
        before it in the chain hold (counted there), plus its own input and output."""
        return len(msgspec.json.encode(self.response)) + len(msgspec.json.encode(self.input_items))


class _Owner:
    __slots__ = ("bytes", "items", "made")

    def __init__(self) -> None:
        self.items: OrderedDict[str, tuple[StoredResponse, int]] = OrderedDict()  # by id
        self.bytes = 0
        #: Item id -> the ids of the responses holding an item of that id, oldest first (a
        #: client sends an item back as input: its id is then in more than one).
        self.made: dict[str, list[str]] = {}


class _Claimant:
    __slots__ = ("ids", "owner")

    def __init__(self, owner: bytes) -> None:
        self.owner = owner  # the owner's digest
        self.ids: deque[bytes] = deque()  # digests of the ids claimed for it, oldest first


class _Claimants:
    """The claims of one tenant's owners (see ``requests.unpartitioned``)."""

    __slots__ = ("count", "key", "owners")

    def __init__(self, key: bytes) -> None:
        self.key = key  # the tenant's digest
        self.owners: dict[bytes, _Claimant] = {}  # owner digest -> its claims
        self.count = 0  # claims of all its owners


class ResponseStore:
    """Stored responses by (owner, id), bounded in count, bytes and age; and the owner of each
    id an upstream answered, for longer (``claim``)."""

    def __init__(
        self,
        max_entries: int = STORE_MAX,
        ttl: float = STORE_TTL,
        max_bytes: int = STORE_BYTES,
        max_claims: int = CLAIMS_MAX,
    ) -> None:
        self._max = max_entries
        self._max_bytes = max_bytes
        self._ttl = ttl
        self._max_claims = max_claims
        self._owners: dict[str, _Owner] = {}
        self._ids: dict[str, int] = {}  # id -> how many owners hold it (ids are random: one)
        self._count = 0
        self._bytes = 0
        self._claims: dict[bytes, _Claimant] = {}  # id digest -> its owner's claims
        self._tenants: dict[bytes, _Claimants] = {}  # tenant digest -> its owners' claims

    def __len__(self) -> int:
        return self._count

    @property
    def bytes(self) -> int:
        return self._bytes

    def put(self, stored: StoredResponse) -> None:
        owner = self._owners.setdefault(stored.owner, _Owner())
        if stored.id in owner.items:
            self._forget(stored.owner, stored.id)
            owner = self._owners.setdefault(stored.owner, _Owner())
        size = stored.size()
        owner.items[stored.id] = (stored, size)
        for item_id in _item_ids(stored):
            owner.made.setdefault(item_id, []).append(stored.id)
        owner.bytes += size
        self._count += 1
        self._bytes += size
        self._ids[stored.id] = self._ids.get(stored.id, 0) + 1
        while self._count > self._max or (self._bytes > self._max_bytes and self._count > 1):
            name = self._biggest(self._bytes > self._max_bytes)
            self._forget(name, next(iter(self._owners[name].items)))

    def _biggest(self, by_bytes: bool) -> str:
        """The owner holding the most (bytes, or responses) of the tenant holding the most.

        NOTE: the tenant first: its owners may be many (a front gateway's partitions), each
        holding little, and together more than another tenant's single owner."""

        def held(owner: _Owner) -> int:
            return owner.bytes if by_bytes else len(owner.items)

        tenants: dict[str, int] = {}
        for name, owner in self._owners.items():
            tenants[unpartitioned(name)] = tenants.get(unpartitioned(name), 0) + held(owner)
        tenant = max(tenants, key=tenants.__getitem__)
        return max((n for n in self._owners if unpartitioned(n) == tenant),
                   key=lambda n: held(self._owners[n]))  # fmt: skip

    def held(self, response_id: str) -> bool:
        """Whether any owner holds ``response_id`` (for refusing it to the others)."""
        return response_id in self._ids

    def claim(self, owner: str, response_id: str) -> None:
        """Remember that ``response_id`` was answered for ``owner`` (see the module); the first
        owner an id is claimed for keeps it."""
        key = _digest(response_id)
        if key in self._claims:
            return
        tenant_key, owner_key = _digest(unpartitioned(owner)), _digest(owner)
        tenant = self._tenants.get(tenant_key)
        if tenant is None:
            tenant = self._tenants[tenant_key] = _Claimants(tenant_key)
        claimant = tenant.owners.get(owner_key)
        if claimant is None:
            claimant = tenant.owners[owner_key] = _Claimant(owner_key)
        claimant.ids.append(key)
        tenant.count += 1
        self._claims[key] = claimant
        if len(self._claims) > self._max_claims:
            self._unclaim(tenant, claimant)

    def _unclaim(self, tenant: _Claimants, claimant: _Claimant) -> None:
        """Forget the oldest claim of the owner holding the most of the tenant holding the most.

        NOTE: a tenant past its fair share gives up a claim at once, from the owner that just
        claimed when that one holds its tenant's share or more (a flood pays O(1)); else the
        tenant holding the most is found in O(tenants), its biggest owner in O(its owners).
        The tenant first: its owners may be many (partitions), each holding little."""
        if tenant.count * len(self._tenants) <= self._max_claims:
            tenant = max(self._tenants.values(), key=lambda t: t.count)
        if claimant.owner not in tenant.owners or (
            len(claimant.ids) * len(tenant.owners) < tenant.count
        ):
            claimant = max(tenant.owners.values(), key=lambda c: len(c.ids))
        del self._claims[claimant.ids.popleft()]
        tenant.count -= 1
        if not claimant.ids:
            del tenant.owners[claimant.owner]
            if not tenant.owners:
                del self._tenants[tenant.key]

    def foreign(self, owner: str, response_id: str) -> bool:
        """Whether ``response_id`` is another owner's: held here for another, or claimed for
        another (its response may be gone). An id nobody claimed is nobody's here."""
        mine = self._owners.get(owner)
        if response_id in self._ids and (mine is None or response_id not in mine.items):
            return True
        claimant = self._claims.get(_digest(response_id))
        return claimant is not None and claimant.owner != _digest(owner)

    def get(self, owner: str, response_id: str) -> StoredResponse | None:
        held = self._owners.get(owner)
        found = held.items.get(response_id) if held is not None else None
        if held is None or found is None:
            return None
        if time.time() - found[0].stored_at > self._ttl:
            self._forget(owner, response_id)
            return None
        held.items.move_to_end(response_id)
        return found[0]

    def item(self, owner: str, item_id: str) -> dict[str, Any] | None:
        """The input or output item ``item_id`` of one of ``owner``'s responses (None when it
        holds none), newest response first: for an ``item_reference`` to an item this gateway
        made, which no upstream ever saw. Found by its id (``_Owner.made``), not by a scan
        of the owner's responses."""
        held, now = self._owners.get(owner), time.time()
        if held is None:
            return None
        for response_id in reversed(held.made.get(item_id, ())):
            stored = held.items[response_id][0]
            if now - stored.stored_at > self._ttl:
                continue  # expired (``get`` forgets it)
            for item in _items(stored):
                if item.get("id") == item_id:
                    return item
        return None

    def delete(self, owner: str, response_id: str) -> bool:
        """Forget a response; False when the owner holds no such id."""
        if self.get(owner, response_id) is None:
            return False
        self._forget(owner, response_id)
        return True

    def _forget(self, owner: str, response_id: str) -> None:
        held = self._owners[owner]
        stored, size = held.items.pop(response_id)
        for item_id in _item_ids(stored):
            holders = held.made[item_id]
            holders.remove(response_id)
            if not holders:
                del held.made[item_id]
        held.bytes -= size
        self._count -= 1
        self._bytes -= size
        if not held.items:
            del self._owners[owner]
        left = self._ids.pop(response_id) - 1
        if left:
            self._ids[response_id] = left


def _items(stored: StoredResponse) -> list[dict[str, Any]]:
    """A response's output items, then its input items."""
    items = (*(stored.response.get("output") or ()), *stored.input_items)
    return [item for item in items if isinstance(item, dict)]


def _item_ids(stored: StoredResponse) -> set[str]:
    """The ids of a response's items (each once)."""
    return {i["id"] for i in _items(stored) if isinstance(i.get("id"), str)}


def _digest(text: str) -> bytes:
    """16 bytes that stand for an id or an owner in the claims (a collision needs ~2**64 tries)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
