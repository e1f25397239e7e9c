"""A stored answer that cannot be served back (stored by a build before answers were checked
at store time, or a damaged record) is dropped at its first hit, which is answered as a miss.

It used to answer every hit on it with a 500 ``internal_error`` (or, streamed, a replay that
broke after its first events) until its TTL ran out. The tests write the bad entry straight
into the store, as the older build (or the damage) left it: the cache directory's database,
or the Redis key.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import diskcache
import msgspec
import pytest
import redis

from semantic.cache import ResponseCache
from semantic.store import Entry
from tests.conftest import Gateway, wait_for
from tests.fake_upstream import FakeUpstream, embedding_of
from tests.gateway.test_metrics import sample

Spoil = Callable[[dict[str, Any]], None]
_ENCODE, _DECODE = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(Entry)


def _bad_usage(response: dict[str, Any]) -> None:
    response["usage"] = "x"


def _bad_content(response: dict[str, Any]) -> None:
    response["output"][0]["content"] = "x"  # (a Response's message: parts are a list)


def _spoil_on_disk(gw: Gateway, entry_id: int, spoil: Spoil) -> None:
    """Rewrite the entry in the cache directory's database (as an older build left it)."""
    with diskcache.Cache(str(Path(gw.config.data_dir) / "response-cache")) as cache:
        entry = _DECODE.decode(cache.get(entry_id))
        spoil(entry.response)
        cache.set(entry_id, _ENCODE.encode(entry))


def _spoil_in_redis(url: str) -> Callable[[Gateway, int, Spoil], None]:
    def spoil_it(gw: Gateway, entry_id: int, spoil: Spoil) -> None:
        client = redis.Redis.from_url(url)
        key = f"cachegate:e:{entry_id}"
        entry = _DECODE.decode(client.get(key))
        spoil(entry.response)
        client.set(key, _ENCODE.encode(entry), keepttl=True)
        client.close()

    return spoil_it


def _stored(gw: Gateway, route: str, body: dict[str, Any]) -> int:
    """Ask once (a miss, stored), then again (a hit): the entry's id."""
    assert gw.http.post(route, json=body).headers["x-cache"] == "miss"
    hit = gw.http.post(route, json=body)
    assert hit.headers["x-cache"] == "exact", hit.text
    return int(hit.headers["x-cache-entry"])


def _answered_as_a_miss(
    gw: Gateway, route: str, body: dict[str, Any], entry_id: int, caplog: pytest.LogCaptureFixture
) -> Any:
    """The next request after the entry was spoiled: a miss the model answers, the entry gone
    (a fresh answer in its place), one warning and the counter; then a hit on the fresh one."""
    with caplog.at_level(logging.WARNING, logger="gateway.pipeline"):
        fresh = gw.http.post(route, json=body)
    assert fresh.status_code == 200, fresh.text
    assert fresh.headers["x-cache"] == "miss"
    warned = [r for r in caplog.records if "cannot be served back" in r.getMessage()]
    assert len(warned) == 1 and f"answer {entry_id} " in warned[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    metrics = gw.http.get("/metrics").text
    assert sample(metrics, "cachegate_cache_replay_failures_total") == 1
    assert gw.http.get("/admin/stats").json()["cache"]["replay_failures"] == 1
    again = gw.http.post(route, json=body)
    assert again.status_code == 200 and again.headers["x-cache"] == "exact", again.text
    return fresh, again


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_answer_that_cannot_be_served_back_is_a_miss_and_dropped(
    make_gateway: Any, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    gw = make_gateway("admin: {show_text: true}")
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "bad usage"}]}
    entry_id = _stored(gw, "/v1/chat/completions", body)
    _spoil_on_disk(gw, entry_id, _bad_usage)
    calls = upstream.stats["chat"]
    asked = {**body, "stream": stream}
    fresh, again = _answered_as_a_miss(gw, "/v1/chat/completions", asked, entry_id, caplog)
    assert upstream.stats["chat"] == calls + 1  # the model answered it
    if stream:
        events = [line for line in fresh.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and again.text.rstrip().endswith("data: [DONE]")
        assert json.loads(events[-2][6:])["choices"][0]["finish_reason"] == "stop"
        assert "error" not in fresh.text
    else:
        assert fresh.json()["choices"][0]["message"]["content"]
        assert isinstance(fresh.json()["usage"], dict)
        assert again.json()["choices"] == fresh.json()["choices"]
    # the bad entry is gone: the one the hit serves is the fresh answer, stored in its place
    shown = gw.http.get(f"/admin/cache/entries/{again.headers['x-cache-entry']}").json()
    assert isinstance(shown["response"]["usage"], dict) and shown["hits"] == 1
    assert gw.http.get("/admin/stats").json()["cache"]["entries"] == 1


def test_a_response_whose_stream_breaks_mid_replay_is_a_miss_and_dropped(
    make_gateway: Any, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """(a Response's replay failed at its message's content, after its first events were sent:
    the client got a broken stream)"""
    gw = make_gateway()
    body = {"model": "fake-model", "input": "bad content", "store": False}
    entry_id = _stored(gw, "/v1/responses", body)
    _spoil_on_disk(gw, entry_id, _bad_content)
    calls = upstream.stats["requests"]
    fresh, again = _answered_as_a_miss(
        gw, "/v1/responses", {**body, "stream": True}, entry_id, caplog
    )
    assert upstream.stats["requests"] == calls + 1
    assert "response.completed" in fresh.text and "event: error" not in fresh.text
    assert "response.completed" in again.text
    json_hit = gw.http.post("/v1/responses", json=body)
    assert json_hit.headers["x-cache"] == "exact"
    assert json_hit.json()["output"][0]["content"][0]["text"]


def test_a_fresh_answer_stored_before_the_drop_stays(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between a hit's lookup of a bad entry and its drop, another request (or replica) stores
    a fresh answer under the same id (ids are fixed per exact key): the drop keeps it (it
    deleted it by id), and the next request is a hit on it."""
    gw = make_gateway()
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "stored again"}]}
    entry_id = _stored(gw, "/v1/chat/completions", body)
    directory = str(Path(gw.config.data_dir) / "response-cache")
    with diskcache.Cache(directory) as cache:
        good = _DECODE.decode(cache.get(entry_id))
    _spoil_on_disk(gw, entry_id, _bad_usage)
    real_drop = ResponseCache.drop_unreplayable

    async def stored_again_first(self: ResponseCache, entry: Entry) -> None:
        with diskcache.Cache(directory) as cache:  # a fresh answer, stored after the lookup
            fresh = msgspec.structs.replace(good, created=entry.created + 1)
            cache.set(entry_id, _ENCODE.encode(fresh))
        await real_drop(self, entry)

    monkeypatch.setattr(ResponseCache, "drop_unreplayable", stored_again_first)
    # (no-store: the model's answer to it is not stored in the entry's place)
    miss = gw.http.post("/v1/chat/completions", json=body, headers={"cache-control": "no-store"})
    assert miss.status_code == 200 and miss.headers["x-cache"] == "miss", miss.text
    monkeypatch.undo()
    assert gw.http.get("/admin/stats").json()["cache"]["replay_failures"] == 1
    calls = upstream.stats["chat"]
    hit = gw.http.post("/v1/chat/completions", json=body)
    assert hit.headers["x-cache"] == "exact", hit.text  # was: a miss, the fresh answer deleted
    assert hit.json()["choices"] == good.response["choices"] and upstream.stats["chat"] == calls
    assert isinstance(hit.json()["usage"], dict)


def test_a_bad_entry_in_redis_is_dropped_from_it(
    make_gateway: Any,
    upstream: FakeUpstream,
    redis_server: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    gw = make_gateway(f"cache: {{backend: redis, redis: {{url: '{redis_server.url}'}}}}")
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "bad in redis"}]}
    entry_id = _stored(gw, "/v1/chat/completions", body)
    _spoil_in_redis(redis_server.url)(gw, entry_id, _bad_usage)
    calls = upstream.stats["chat"]
    fresh, again = _answered_as_a_miss(gw, "/v1/chat/completions", body, entry_id, caplog)
    assert upstream.stats["chat"] == calls + 1
    assert again.json()["choices"] == fresh.json()["choices"]
    raw = redis.Redis.from_url(redis_server.url).get(f"cachegate:e:{entry_id}")
    assert isinstance(_DECODE.decode(raw).response["usage"], dict)  # (the fresh one)


def test_a_bad_entry_leaves_the_semantic_tier_too(
    make_gateway: Any, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """A semantic hit on a bad entry: a miss, and its vector leaves the index (else the next
    similar question found it again, a lookup each time)."""
    gw = make_gateway(semantic=True)
    stored = {"model": "fake-model", "messages": [{"role": "user", "content": "What is the "
              "capital city of France?"}]}  # fmt: skip
    entry_id = _stored(gw, "/v1/chat/completions", stored)
    _spoil_on_disk(gw, entry_id, _bad_usage)
    asked = {**stored, "messages": [{"role": "user", "content": "What's the capital city of "
             "France?"}]}  # fmt: skip
    calls = upstream.stats["chat"]
    fresh = gw.http.post("/v1/chat/completions", json=asked)
    assert fresh.status_code == 200 and fresh.headers["x-cache"] == "miss", fresh.text
    assert upstream.stats["chat"] == calls + 1
    assert gw.http.get(f"/admin/cache/entries/{entry_id}").status_code == 404
    wait_for(lambda: gw.http.get("/admin/stats").json()["cache"]["entries"] == 1)  # (fresh)
    stats = gw.http.get("/admin/stats").json()["cache"]
    assert stats["replay_failures"] == 1 and stats["index"]["entries"] == 1
    hit = gw.http.post("/v1/chat/completions", json=stored)  # the fresh answer: semantic hit
    assert hit.headers["x-cache"] == "semantic" and hit.json()["choices"] == fresh.json()["choices"]


def test_an_embedding_that_cannot_be_served_back_is_a_miss_and_dropped(
    make_gateway: Any, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """An embeddings input's entry without its vector (a damaged record) failed every batch
    holding that input with a 500 until its TTL ran out: it is asked upstream again instead."""
    gw = make_gateway()
    body = {"model": "fake-model", "input": ["alpha", "beta"], "encoding_format": "float"}
    assert gw.http.post("/v1/embeddings", json=body).headers["x-cache-inputs"] == "0/2"
    wait_for(lambda: gw.http.get("/admin/stats").json()["cache"]["entries"] == 2)
    with diskcache.Cache(str(Path(gw.config.data_dir) / "response-cache")) as cache:
        entries = [_DECODE.decode(cache.get(i)) for i in cache.iterkeys()]
    alpha = next(e for e in entries if e.response["embedding"] == embedding_of("alpha"))
    _spoil_on_disk(gw, alpha.id, lambda response: response.pop("embedding"))
    calls = upstream.stats["embeddings"]
    with caplog.at_level(logging.WARNING, logger="gateway.embeddings"):
        fresh = gw.http.post("/v1/embeddings", json=body)
    assert fresh.status_code == 200, fresh.text
    assert fresh.headers["x-cache"] == "miss" and fresh.headers["x-cache-inputs"] == "1/2"
    assert upstream.stats["embeddings"] == calls + 1 and upstream.last_body["input"] == ["alpha"]
    assert [d["embedding"] for d in fresh.json()["data"]] == [
        embedding_of("alpha"),
        embedding_of("beta"),
    ]
    assert any("cannot be served back" in r.getMessage() for r in caplog.records)
    assert gw.http.get("/admin/stats").json()["cache"]["replay_failures"] == 1
    wait_for(lambda: gw.http.get("/admin/stats").json()["cache"]["entries"] == 2)  # (fresh)
    again = gw.http.post("/v1/embeddings", json=body)
    assert again.headers["x-cache"] == "exact" and again.json()["data"] == fresh.json()["data"]
