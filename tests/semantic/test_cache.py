"""ResponseCache in-process: the index never compares vectors of different embedding models."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from semantic import redis_store
from semantic.cache import CacheSettings, ResponseCache, SemanticSettings
from semantic.embedder import Embedder
from semantic.keys import CacheKey, chat_key, entry_id
from semantic.redis_store import RedisStore
from semantic.store import DiskStore, Entry, EntryStore
from tests.conftest import RedisServer
from tests.semantic.test_redis_store import wait_for


def ask(question: str) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": question}]}


async def test_vectors_of_another_embedding_model_are_never_compared(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, max_entries=100)
    cache = ResponseCache(store, CacheSettings(), SemanticSettings(guard=False))
    await cache.start()
    await cache.loaded()  # (a lookup does not wait for the load)
    assert await cache.lookup(chat_key("t", "", "m", ask("warm up"))) is not None
    assert cache.embedder is not None
    stored = chat_key("t", "", "m", ask("How do I reset my password?"))
    vector = cache.embedder.encode([stored.question])[0]
    # an entry written while another (same-dimension) model was configured
    foreign = Entry(id=entry_id(stored.exact), exact=stored.exact, scope=stored.scope, question=stored.question,
                    model="m", tenant="t", namespace="", response={"choices": []}, created=time.time(),
                    expires=None, vector=vector.astype(np.float32).tobytes(), vector_model="another-model")  # fmt: skip
    await store.put(foreign)
    await cache.on_reset()
    paraphrase = chat_key("t", "", "m", ask("How can I reset my password?"))
    assert (await cache.lookup(paraphrase)).kind == "miss"
    assert (await cache.lookup(stored)).kind == "exact"  # exact hits do not depend on vectors
    # the same entry made by the configured model is a semantic hit
    await cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="")
    assert (await cache.lookup(paraphrase)).kind == "semantic"
    await cache.close()


async def test_an_answer_stored_while_the_model_loads_is_found_by_meaning(
    tmp_path: Path, embedder: Embedder
) -> None:
    cache = ResponseCache(
        DiskStore(tmp_path, max_entries=100), CacheSettings(), SemanticSettings(guard=False)
    )
    await cache.start()  # the embedder loads in the background...
    stored = chat_key("t", "", "m", ask("How do I reset my password?"))
    vector = embedder.encode([stored.question])[0]  # ...while a vector made elsewhere is stored
    await cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="", vector=vector)
    paraphrase = chat_key("t", "", "m", ask("How can I reset my password?"))
    assert (await cache.lookup(paraphrase)).kind == "semantic"
    await cache.close()


async def test_vectors_of_another_size_leave_the_semantic_tier_running(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, max_entries=100)
    old = chat_key("t", "", "m", ask("How do I reset my password?"))
    # written while a model with 8-dimensional vectors was configured
    small = np.full(8, 8**-0.5, dtype=np.float32)
    await store.put(Entry(id=entry_id(old.exact), exact=old.exact, scope=old.scope, question=old.question,
                          model="m", tenant="t", namespace="", response={"choices": []},
                          created=time.time(), expires=None, vector=small.tobytes(),
                          vector_model="small-model"))  # fmt: skip
    cache = ResponseCache(store, CacheSettings(), SemanticSettings())
    await cache.start()
    await cache.loaded()  # (a lookup does not wait for the load)
    paraphrase = chat_key("t", "", "m", ask("How can I reset my password?"))
    assert (await cache.lookup(paraphrase)).kind == "miss"
    assert cache.stats()["semantic"] == "ready"  # was: failed: ValueError(... 384 floats ...)
    assert (await cache.lookup(old)).kind == "exact"
    await cache.store(old, {"choices": []}, model="m", tenant="t", namespace="")
    assert (await cache.lookup(paraphrase)).kind == "semantic"
    await cache.close()


async def test_an_entry_without_its_vector_is_never_a_semantic_candidate(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, max_entries=100)
    cache = ResponseCache(store, CacheSettings(), SemanticSettings())  # guard on
    await cache.start()
    stored = chat_key("t", "", "m", ask("How do I reset my password?"))
    paraphrase = chat_key("t", "", "m", ask("How can I reset my password?"))
    await cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="")
    assert (await cache.lookup(paraphrase)).kind == "semantic"
    # stored again where only an exact hit is safe: the index must forget its old vector
    await cache.store(
        dataclasses.replace(stored, semantic=False), {"choices": []}, model="m", tenant="t",
        namespace="",
    )  # fmt: skip
    assert (await cache.lookup(paraphrase)).kind == "miss"
    assert (await cache.lookup(stored)).kind == "exact"
    # the same, written behind the cache's back (another process, or before a restart)
    await cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="")
    entry = await store.get(entry_id(stored.exact))
    assert entry is not None and cache.index is not None and len(cache.index.ids()) == 1
    await store.put(msgspec.structs.replace(entry, vector=None, vector_model=""))
    assert (await cache.lookup(paraphrase)).kind == "miss"  # was: ValueError in the guard
    assert len(cache.index.ids()) == 0
    await cache.close()


async def password_question_on_redis(
    redis_server: RedisServer, **store_options: float
) -> tuple[RedisStore, ResponseCache, CacheKey, CacheKey]:
    """A started cache on Redis holding one question; its paraphrase is a semantic hit."""
    store = RedisStore(redis_server.url, max_entries=100, **store_options)
    return (store, *await password_question(store))


async def password_question(store: EntryStore) -> tuple[ResponseCache, CacheKey, CacheKey]:
    """A started cache on ``store`` holding one question; its paraphrase is a semantic hit."""
    cache = ResponseCache(store, CacheSettings(), SemanticSettings())
    await cache.start()
    stored = chat_key("t", "", "m", ask("How do I reset my password?"))
    paraphrase = chat_key("t", "", "m", ask("How can I reset my password?"))
    await cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="")
    assert (await cache.lookup(paraphrase)).kind == "semantic"
    return cache, stored, paraphrase


async def test_a_redis_blip_does_not_drop_vectors_from_the_index(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    store, cache, _stored, paraphrase = await password_question_on_redis(
        redis_server, retry_after=0.2
    )
    store._mark_down(ConnectionError("blip"))  # what a timed-out Redis call does
    assert (await cache.lookup(paraphrase)).kind == "miss"  # the store cannot say: a miss
    await asyncio.sleep(0.25)
    assert (await cache.lookup(paraphrase)).kind == "semantic"  # was: a miss for good
    await cache.close()


async def test_a_read_skipped_under_load_does_not_drop_vectors_from_the_index(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that waited too long for a connection (this replica busy, Redis fine) is a
    miss for that lookup; the entry's vector stays, so the next lookup finds it."""
    # a short wait for a turn (0.05 s); the commands themselves keep the default timeout
    monkeypatch.setattr(redis_store, "_TURN_WAIT", 0.1)
    store, cache, _stored, paraphrase = await password_question_on_redis(redis_server)
    for _ in range(64):  # every connection busy with other requests' commands
        await store._turns.acquire()
    assert (await cache.lookup(paraphrase)).kind == "miss"
    assert store.available and store.skipped_turns >= 1
    for _ in range(64):
        store._turns.release()
    assert (await cache.lookup(paraphrase)).kind == "semantic"  # was: a miss for good
    await cache.close()


async def test_an_answer_stored_again_during_a_flush_keeps_its_vector(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, cache, stored, paraphrase = await password_question_on_redis(redis_server)
    real_flush = store.flush

    async def flush_while_a_request_stores_again(namespace: str | None = None) -> list[int]:
        ids = await real_flush(namespace)  # the question is gone, and a request stores it anew
        await cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="")
        return ids

    monkeypatch.setattr(store, "flush", flush_while_a_request_stores_again)
    assert await cache.flush() == 1
    deadline = time.time() + 3  # the follower applies the flush's del, then the new put
    while (found := (await cache.lookup(paraphrase)).kind) != "semantic" and time.time() < deadline:
        await asyncio.sleep(0.05)
    assert found == "semantic"  # was: the flush dropped the live entry's vector here for good
    monkeypatch.undo()
    await cache.flush()
    assert (await cache.lookup(paraphrase)).kind == "miss"
    await cache.close()


@pytest.mark.parametrize("where", ["disk", "redis"])
async def test_dropping_an_unservable_answer_keeps_a_fresh_one_stored_since(
    where: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hit found an answer it cannot serve back; before it drops it, another request (here,
    or on another replica) stores a fresh answer under the same id (ids are fixed per exact
    key). The drop leaves the fresh answer and its vector (it deleted both, by id)."""
    if where == "redis":
        server = request.getfixturevalue("redis_server")
        _store, cache, stored, paraphrase = await password_question_on_redis(server)
    else:
        cache, stored, paraphrase = await password_question(DiskStore(tmp_path, max_entries=100))
    applied = applied_events(monkeypatch)  # (Redis: what the follower applies to the index)
    bad = await cache.lookup(stored)
    assert bad.kind == "exact" and bad.entry is not None
    fresh = await cache.store(
        stored, {"choices": [], "fresh": 1}, model="m", tenant="t", namespace=""
    )
    assert fresh is not None and fresh.id == bad.entry.id and fresh.created != bad.entry.created
    await cache.drop_unreplayable(bad.entry)
    assert cache.stats()["replay_failures"] == 1
    other = chat_key("t", "", "m", ask("What is the capital of France?"))
    await cache.store(
        other, {"choices": []}, model="m", tenant="t", namespace=""
    )  # (applied after)
    assert (b"del", False) not in applied and cache.index is not None and fresh.id in cache.index
    for key, kind in ((stored, "exact"), (paraphrase, "semantic")):
        found = await cache.lookup(key)
        assert found.kind == kind and found.entry is not None, key
        assert found.entry.response.get("fresh") == 1  # was: a miss, the fresh answer deleted
    # the fresh one, found unservable in its turn (still stored as found), is dropped
    found = await cache.lookup(stored)
    assert found.entry is not None
    await cache.drop_unreplayable(found.entry)
    assert (await cache.lookup(stored)).kind == "miss"
    await wait_for(lambda: fresh.id not in cache.index)  # (Redis: once the follower applied it)
    assert (await cache.lookup(paraphrase)).kind == "miss"
    assert cache.stats()["replay_failures"] == 2
    await cache.close()


def applied_events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, bool]]:
    """The events the follower applies from now on: (op, whether it carries a vector)."""
    applied: list[tuple[bytes, bool]] = []
    real_apply = redis_store._apply

    def apply(listener: redis_store.StoreListener, fields: dict[bytes, bytes]) -> None:
        real_apply(listener, fields)
        applied.append((fields[b"op"], bool(fields.get(b"vector"))))

    monkeypatch.setattr(redis_store, "_apply", apply)
    return applied


async def test_a_lookup_that_read_its_candidate_gone_keeps_it_once_stored_again(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup reads its candidate just after another replica evicted it; while Redis's
    answer (none) travels back, a request stores the question again and the follower applies
    the del, then the put. The lookup leaves the live entry's vector (it used to remove it)."""
    store, cache, stored, paraphrase = await password_question_on_redis(redis_server)
    applied = applied_events(monkeypatch)
    real_get, read = store.get, []

    async def get_as_it_is_evicted_and_stored_again(
        entry_id: int, *, strict: bool = False
    ) -> Entry | None:
        if not strict or read:  # (the candidate's read is the strict one)
            return await real_get(entry_id, strict=strict)
        await store.delete([entry_id])  # evicted just before the read reaches Redis...
        read.append(await real_get(entry_id, strict=True))
        # ...and stored again, the follower applying both, before the lookup goes on
        await cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="")
        await wait_for(lambda: applied[-2:] == [(b"del", False), (b"put", True)])
        return read[0]

    monkeypatch.setattr(store, "get", get_as_it_is_evicted_and_stored_again)
    assert (await cache.lookup(paraphrase)).kind == "miss"  # its candidate was gone
    assert read == [None]
    monkeypatch.undo()
    assert (await cache.lookup(paraphrase)).kind == "semantic"  # was: a miss for good
    await cache.close()


async def test_an_older_store_answered_last_keeps_the_newer_ones_vector(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stores of one question, the first for exact hits only (the embedder was overloaded),
    the second with its vector, Redis's answer to the first arriving last: the index follows
    Redis, where the newer entry has its vector (the first's late local put used to drop it)."""
    store, cache, stored, paraphrase = await password_question_on_redis(redis_server)
    applied = applied_events(monkeypatch)
    real_put = store.put
    first_written, second_stored = asyncio.Event(), asyncio.Event()

    async def put_answered_late_without_a_vector(entry: Entry, **kwargs: Any) -> list[int]:
        evicted = await real_put(entry, **kwargs)
        if not entry.vector:  # the first store: its answer comes back after the second's
            first_written.set()
            await second_stored.wait()
        return evicted

    monkeypatch.setattr(store, "put", put_answered_late_without_a_vector)
    first = asyncio.create_task(
        cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="", overloaded=True)
    )
    await first_written.wait()
    await cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="")
    await wait_for(lambda: applied[-2:] == [(b"put", False), (b"put", True)])
    second_stored.set()
    assert await first is not None
    monkeypatch.undo()
    found = await store.get(entry_id(stored.exact))
    assert found is not None and found.vector  # Redis holds the newer entry, with its vector
    assert (await cache.lookup(paraphrase)).kind == "semantic"  # was: a miss for good
    await cache.close()


async def test_the_same_request_found_by_meaning_is_labelled_exact(tmp_path: Path) -> None:
    """Identical requests arriving together: the second's exact lookup ran before the first
    stored, its semantic lookup after; it is an exact hit, not semantic at 1.0 (issue 12.8)."""
    store = DiskStore(tmp_path, max_entries=100)
    cache = ResponseCache(store, CacheSettings(), SemanticSettings(guard=False))
    await cache.start()
    key = chat_key("t", "", "m", ask("How do I reset my password?"))
    await cache.store(key, {"choices": []}, model="m", tenant="t", namespace="")
    real_get, raced = store.get, []

    async def get_before_the_store(entry_id: int, *, strict: bool = False) -> Entry | None:
        if not raced:  # the exact lookup, as it ran before the identical request stored
            raced.append(entry_id)
            return None
        return await real_get(entry_id, strict=strict)

    store.get = get_before_the_store  # type: ignore[method-assign]
    found = await cache.lookup(key)
    assert raced and (found.kind, found.similarity) == ("exact", 1.0)
    assert cache.stats()["hits"] == {"exact": 1, "semantic": 0}
    await cache.close()


async def test_an_overloaded_lookup_stores_for_exact_hits_without_embedding_again(
    tmp_path: Path,
) -> None:
    cache = ResponseCache(
        DiskStore(tmp_path, max_entries=100), CacheSettings(), SemanticSettings(guard=False)
    )
    await cache.start()
    await cache.loaded()  # (a lookup does not wait for the load)
    assert await cache.lookup(chat_key("t", "", "m", ask("warm up"))) is not None
    assert cache.embedder is not None
    embedded: list[str] = []
    real_embed = cache.embedder.embed

    async def counting_embed(text: str, **kwargs: object) -> object:
        embedded.append(text)
        return await real_embed(text, **kwargs)  # type: ignore[arg-type]

    cache.embedder.embed = counting_embed  # type: ignore[method-assign]
    stored = chat_key("t", "", "m", ask("How do I reset my password?"))
    await cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="", overloaded=True)
    assert embedded == []  # no second wait for the embedder
    assert cache.stats()["semantic_skipped"]["overload_store"] == 1
    assert (await cache.lookup(stored)).kind == "exact"
    paraphrase = chat_key("t", "", "m", ask("How can I reset my password?"))
    assert (await cache.lookup(paraphrase)).kind == "miss"  # stored for exact hits only
    # the same answer stored by a lookup that was not overloaded is embedded as before
    await cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="")
    assert embedded == [stored.question]
    assert (await cache.lookup(paraphrase)).kind == "semantic"
    await cache.close()


async def test_a_request_counts_one_overload_skip_however_many_lookups_it_makes(
    tmp_path: Path,
) -> None:
    """A request's second lookup (a coalesced follower's, ``again``: its first lookup) does
    not count a skip of the reason its first one counted (were: one per lookup, so skips
    outnumbered lookups); one its first lookup did not count is counted."""
    cache = ResponseCache(DiskStore(tmp_path, max_entries=100), CacheSettings(),
                          SemanticSettings(guard=False, max_wait=1.0))  # fmt: skip
    await cache.start()
    await cache.loaded()  # (a lookup does not wait for the load)
    key = chat_key("t", "", "m", ask("How do I reset my password?"))
    first = await cache.lookup(key, overloaded=True)
    assert first.kind == "miss" and first.skipped == "overload" and first.overloaded
    again = await cache.lookup(key, again=first, overloaded=True)
    assert again.kind == "miss" and again.skipped == "overload"
    stats = cache.stats()
    assert (stats["lookups"], stats["semantic_skipped"]["overload"]) == (1, 1)  # was (1, 2)
    other = chat_key("t", "", "m", ask("How do I renew my passport in Canada?"))
    first = await cache.lookup(other)  # (the embedder was free)
    assert first.kind == "miss" and first.skipped is None and not first.overloaded
    assert (await cache.lookup(other, again=first, overloaded=True)).skipped == "overload"
    stats = cache.stats()
    assert (stats["lookups"], stats["semantic_skipped"]["overload"]) == (2, 2)
    await cache.close()


async def test_close_does_not_wait_forever_for_a_task_that_will_not_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from semantic import cache as cache_module

    monkeypatch.setattr(cache_module, "_CLOSE_WAIT_S", 0.2)
    cache = ResponseCache(DiskStore(tmp_path, max_entries=10), CacheSettings(), None)
    await cache.start()
    stubborn = asyncio.Event()

    async def ignores_cancel() -> None:
        while not stubborn.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(10)

    cache._tasks.append(asyncio.create_task(ignores_cancel()))
    await asyncio.sleep(0)
    await asyncio.wait_for(cache.close(), 3)  # bounded, not forever
    assert "did not stop" in caplog.text
    stubborn.set()
    cache._tasks[-1].cancel()
