"""Responses the gateway stored (``store: true``, the Responses API's default).

They serve ``GET`` / ``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``
and ``previous_response_id``: a follow-up that names a stored response continues its
conversation, which the gateway resolves itself.

Each response belongs to its owner (the tenant that created it; see ``responses.owner``):
looking up another owner's id finds nothing, exactly as an id that never existed.

    store = ResponseStore()
    store.put(StoredResponse(owner, response, input_items, conversation, upstream=False))
    store.get(owner, "resp_...")        # None for another owner, an unknown or expired id

NOTE: the store lives in the gateway process's memory (bounded, least recently used go
first, and for ``STORE_TTL`` at most): a restart forgets it, and replicas do not share it.
A follow-up naming an id this gateway does not hold is forwarded upstream as it is.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

__all__ = ["STORE_MAX", "STORE_TTL", "ResponseStore", "StoredResponse"]

#: Responses held at most (the least recently used are dropped first).
STORE_MAX = 10_000
#: Seconds a stored response stays (OpenAI keeps them 30 days).
STORE_TTL = 30 * 86_400.0


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

    @property
    def id(self) -> str:
        return str(self.response["id"])


class ResponseStore:
    """Stored responses by (owner, id), bounded in count and age."""

    def __init__(self, max_entries: int = STORE_MAX, ttl: float = STORE_TTL) -> None:
        self._max = max_entries
        self._ttl = ttl
        self._items: OrderedDict[tuple[str, str], StoredResponse] = OrderedDict()
        self._ids: dict[str, int] = {}  # id -> how many owners hold it (ids are random: one)

    def __len__(self) -> int:
        return len(self._items)

    def put(self, stored: StoredResponse) -> None:
        key = (stored.owner, stored.id)
        if key not in self._items:
            self._ids[stored.id] = self._ids.get(stored.id, 0) + 1
        self._items[key] = stored
        self._items.move_to_end(key)
        while len(self._items) > self._max:
            self._forget(next(iter(self._items)))

    def held(self, response_id: str) -> bool:
        """Whether any owner holds ``response_id`` (for refusing it to the others)."""
        return response_id in self._ids

    def get(self, owner: str, response_id: str) -> StoredResponse | None:
        key = (owner, response_id)
        stored = self._items.get(key)
        if stored is None:
            return None
        if time.time() - stored.stored_at > self._ttl:
            self._forget(key)
            return None
        self._items.move_to_end(key)
        return stored

    def delete(self, owner: str, response_id: str) -> bool:
        """Forget a response; False when the owner holds no such id."""
        if self.get(owner, response_id) is None:
            return False
        self._forget((owner, response_id))
        return True

    def _forget(self, key: tuple[str, str]) -> None:
        del self._items[key]
        left = self._ids.pop(key[1]) - 1
        if left:
            self._ids[key[1]] = left
