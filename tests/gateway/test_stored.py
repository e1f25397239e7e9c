"""The stored Responses (gateway.stored): per owner, bounded in count, bytes and age, and one
owner's flood pushes out its own responses, not the others'."""

from __future__ import annotations

from typing import Any, ClassVar

from gateway.stored import ResponseStore, StoredResponse


def stored(owner: str, n: int, text: str = "") -> StoredResponse:
    response: dict[str, Any] = {"id": f"resp_{owner}{n}", "object": "response", "output": []}
    items = [{"type": "message", "role": "user", "content": text or f"q{n}"}]
    return StoredResponse(owner, response, items, items, upstream=False)


def test_an_owner_past_the_count_gives_up_its_own_least_recently_used() -> None:
    store = ResponseStore(max_entries=10)
    for n in range(3):
        store.put(stored("a", n))
    for n in range(20):  # a flood (cache hits cost it nothing)
        store.put(stored("b", n))
    assert [store.get("a", f"resp_a{n}") is not None for n in range(3)] == [True] * 3
    assert len(store) == 10
    assert store.get("b", "resp_b12") is None and store.get("b", "resp_b19") is not None
    assert not store.held("resp_b12") and store.held("resp_b19")


def test_the_store_is_bounded_in_bytes_too() -> None:
    store = ResponseStore(max_bytes=20_000)
    store.put(stored("a", 0))
    for n in range(50):
        store.put(stored("b", n, text="x" * 3000))  # ~3 kB each
    assert store.bytes <= 20_000 and store.get("a", "resp_a0") is not None
    assert 4 <= len(store) <= 7
    store.delete("a", "resp_a0")
    assert store.get("a", "resp_a0") is None and not store.held("resp_a0")


def test_one_owner_alone_keeps_its_most_recently_used() -> None:
    store = ResponseStore(max_entries=3)
    for n in range(3):
        store.put(stored("a", n))
    assert store.get("a", "resp_a0") is not None  # used: now the most recent
    store.put(stored("a", 3))
    assert store.get("a", "resp_a1") is None
    assert all(store.get("a", f"resp_a{n}") is not None for n in (0, 2, 3))
    store.put(stored("a", 3))  # the same id again: replaced, not counted twice
    assert len(store) == 3


def test_who_an_id_belongs_to_outlives_its_response() -> None:
    """An upstream called with the gateway's key continues any id it made: once the response
    is pushed out here, its claim still says whose it is."""
    store = ResponseStore(max_entries=1)
    store.put(stored("a", 0))
    store.claim("a", "resp_a0")
    store.put(stored("a", 1))  # pushes resp_a0 out
    assert store.get("a", "resp_a0") is None and not store.held("resp_a0")
    assert store.foreign("b", "resp_a0") and not store.foreign("a", "resp_a0")
    assert store.foreign("b", "resp_a1") and not store.foreign("a", "resp_a1")  # held, unclaimed
    assert not store.foreign("b", "resp_nobody")  # (an id nobody here was answered)
    store.claim("b", "resp_a0")  # the first owner keeps it
    assert store.foreign("b", "resp_a0") and not store.foreign("a", "resp_a0")


def test_one_owners_flood_of_claims_pushes_out_its_own() -> None:
    store = ResponseStore(max_claims=10)
    for n in range(3):
        store.claim("a", f"resp_a{n}")
    for n in range(50):  # a flood of upstream calls, to push a's claims out
        store.claim("b", f"resp_b{n}")
    assert all(store.foreign("b", f"resp_a{n}") for n in range(3))
    assert store.foreign("a", "resp_b49") and not store.foreign("a", "resp_b42")
    assert sum(store.foreign("a", f"resp_b{n}") for n in range(50)) == 7
    for n in range(3, 13):  # an owner below its share takes from the one holding the most
        store.claim("a", f"resp_a{n}")
    assert sum(store.foreign("b", f"resp_a{n}") for n in range(13)) == 5
    assert sum(store.foreign("a", f"resp_b{n}") for n in range(50)) == 5


def test_a_tenant_counts_all_its_owners_and_its_owners_stay_apart() -> None:
    """A tenant's partitions (owners ``tenant\\x1fpartition``) are counted together against
    the other tenants first; inside one tenant (an open gateway's client keys, a worker's
    front tenants) the owner holding the most gives up its own."""
    store = ResponseStore(max_entries=8, max_claims=8)
    for n in range(3):
        store.put(stored("a", n))
        store.claim("a", f"resp_a{n}")
    for n in range(6):  # tenant b, one response per partition
        store.put(stored(f"b\x1fp{n}", 0))
        store.claim(f"b\x1fp{n}", f"resp_b{n}")
    assert all(store.get("a", f"resp_a{n}") is not None for n in range(3))
    assert all(store.foreign("b\x1fp0", f"resp_a{n}") for n in range(3))
    assert len(store) == 8 and store.get("b\x1fp0", "resp_b\x1fp00") is None
    store = ResponseStore(max_entries=4, max_claims=4)
    store.put(stored("default\x1fkey-1", 0))
    store.claim("default\x1fkey-1", "resp_1")
    for n in range(6):  # one client key's flood, in the one tenant of an open gateway
        store.put(stored("default\x1fkey-2", n))
        store.claim("default\x1fkey-2", f"resp_2{n}")
    assert store.get("default\x1fkey-1", "resp_default\x1fkey-10") is not None
    assert store.foreign("default\x1fkey-2", "resp_1")


def test_an_item_is_found_for_its_owner_while_its_response_is_kept() -> None:
    store = ResponseStore(ttl=60)
    kept = stored("a", 0)
    kept.input_items[0]["id"] = "msg_in"
    kept.response["output"] = [{"type": "message", "id": "msg_out", "content": []}]
    store.put(kept)
    assert store.item("a", "msg_in") == kept.input_items[0]
    assert store.item("a", "msg_out") == kept.response["output"][0]
    assert store.item("b", "msg_out") is None and store.item("a", "msg_other") is None
    store.put(StoredResponse("a", {**kept.response, "id": "resp_old"}, [], [], upstream=False,
                             stored_at=kept.stored_at - 61))  # fmt: skip
    store.delete("a", kept.id)
    assert store.item("a", "msg_out") is None  # (only in an expired one now)


class _Watched(dict[str, Any]):
    """A Response that records each read of its output (in ``reads``)."""

    reads: ClassVar[list[str]] = []

    def get(self, key: str, default: Any = None) -> Any:
        if key == "output":
            self.reads.append(self["id"])
        return super().get(key, default)


def message(n: int) -> dict[str, Any]:
    return {"type": "message", "id": f"msg_{n}", "role": "assistant", "content": []}


def test_an_item_is_found_by_its_id_not_by_a_scan_of_the_owners_responses() -> None:
    """``item`` (an ``item_reference`` to an item the gateway made) read every response of
    its owner for each reference; it reads only those that hold the id, still answers only
    their owner, newest first, and nothing once they are gone (deleted or pushed out)."""
    store = ResponseStore(max_entries=300)
    for n in range(300):
        response = _Watched(id=f"resp_a{n}", object="response", output=[message(n)])
        store.put(StoredResponse("a", response, [], [], upstream=False))
    _Watched.reads.clear()
    assert store.item("a", "msg_7") == message(7) and _Watched.reads == ["resp_a7"]
    assert store.item("b", "msg_7") is None and store.item("a", "msg_nobody") is None
    sent = {**message(7), "status": "completed"}  # sent back as input of a newer response
    store.put(StoredResponse("a", {"id": "resp_b", "output": []}, [sent], [sent], upstream=False))
    assert store.item("a", "msg_0") is None  # resp_a0 was pushed out (least recently used)
    assert store.item("a", "msg_7") == sent  # the newest response that holds it first
    store.delete("a", "resp_b")
    assert store.item("a", "msg_7") == message(7)
    store.delete("a", "resp_a7")
    assert store.item("a", "msg_7") is None
