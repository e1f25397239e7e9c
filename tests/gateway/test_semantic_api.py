"""The semantic tier through the HTTP API: paraphrase hits, guard rejections, scope isolation,
TTL, eviction, restart persistence, streamed replay. Real embedding model, real HTTP."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.config import load_config_text
from semantic.embedder import default_model_path
from semantic.index import VectorIndex
from tests.conftest import Gateway, wait_for
from tests.fake_upstream import FakeUpstream, ThreadedServer


def config_text(upstream_url: str, data_dir: Path, **cache: Any) -> str:
    model = {"backend": "openai", "base_url": f"{upstream_url}/v1", "api_key": "sk"}
    return yaml.safe_dump({
        "data_dir": str(data_dir),
        "cache": {"semantic": {"enabled": True}, **cache},  # a "semantic" key replaces the first
        "models": {"fake-model": model, "other-model": model},
    })  # fmt: skip


@pytest.fixture(scope="module")
def gw(
    upstream_server: ThreadedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    text = config_text(upstream_server.url, tmp_path_factory.mktemp("sem"))
    with Gateway(load_config_text(text)) as gateway:
        yield gateway


def ask(
    gw: Gateway, question: str, *, ns: str, model: str = "fake-model", **body: Any
) -> httpx.Response:
    headers = {"x-cache-namespace": ns, **body.pop("headers", {})}
    messages = body.pop("messages", None) or [{"role": "user", "content": question}]
    return gw.http.post(
        "/v1/chat/completions", json={"model": model, "messages": messages, **body}, headers=headers
    )


def answer(response: httpx.Response) -> str:
    return str(response.json()["choices"][0]["message"]["content"])


def test_paraphrase_is_a_semantic_hit(gw: Gateway, upstream: FakeUpstream) -> None:
    first = ask(gw, "How do I reset my password?", ns="para")
    assert first.headers["x-cache"] == "miss"
    hit = ask(gw, "How can I reset my password?", ns="para")
    assert hit.headers["x-cache"] == "semantic"
    similarity = hit.headers["x-cache-similarity"]
    assert 0.8 <= float(similarity) < 1.0 and len(similarity.split(".")[1]) == 4
    assert int(hit.headers["x-cache-age"]) >= 0
    assert answer(hit) == answer(first)
    assert upstream.stats["chat"] == 1
    # the exact question is an exact hit, not a semantic one
    assert ask(gw, "How do I reset my password?", ns="para").headers["x-cache"] == "exact"


def test_a_question_longer_than_the_embedder_reads_is_exact_only(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """The embedder reads 256 tokens: two prompts equal up to there got one vector (1.0)."""
    document = "The quarterly report lists revenue, costs and staff for every region. " * 40
    first = ask(gw, document + "Summarise it in one line.", ns="long")
    assert first.headers["x-cache"] == "miss"
    other = ask(gw, document + "Translate it into German.", ns="long")
    assert other.headers["x-cache"] == "miss"  # was "semantic" with similarity 1.0000
    assert ask(gw, document + "Summarise it in one line.", ns="long").headers["x-cache"] == "exact"
    assert upstream.stats["chat"] == 2
    assert gw.http.get("/admin/stats").json()["cache"]["too_long_for_semantic"] >= 2


@pytest.mark.parametrize(
    ("stored", "asked"),
    [
        ("What is the capital of France?", "What is the capital of Germany?"),
        ("Is the pharmacy open on Sunday?", "Is the pharmacy closed on Sunday?"),
        ("How many calories are in 2 eggs?", "How many calories are in 3 eggs?"),
        ("Who won the World Cup in 2014?", "Who won the World Cup in 2018?"),
        ("How do I convert 5 miles to kilometers?", "How do I convert 5 kilometers to miles?"),
    ],
)
def test_guard_rejects_near_misses(
    gw: Gateway, upstream: FakeUpstream, stored: str, asked: str
) -> None:
    ns = f"guard-{abs(hash(stored))}"
    before = gw.http.get("/admin/stats").json()["cache"]["guard_rejections"]
    ask(gw, stored, ns=ns)
    # threshold 0: every neighbour passes the similarity test, so only the guard can refuse
    response = ask(gw, asked, ns=ns, headers={"x-cache-threshold": "0"})
    assert response.headers["x-cache"] == "miss"
    assert answer(response) != answer(ask(gw, stored, ns=ns))
    assert upstream.stats["chat"] == 2
    assert gw.http.get("/admin/stats").json()["cache"]["guard_rejections"] > before


def test_scope_isolation(gw: Gateway, upstream: FakeUpstream) -> None:
    base = "What is the best way to learn Python?"
    para = "What's the best way to learn Python?"
    ask(gw, base, ns="scope")
    assert ask(gw, para, ns="scope").headers["x-cache"] == "semantic"
    history = [
        {"role": "user", "content": "I know Java."},
        {"role": "assistant", "content": "Great."},
    ]
    other_history = [
        {"role": "user", "content": "I am a child."},
        {"role": "assistant", "content": "OK."},
    ]
    misses = [
        ask(gw, para, ns="scope", model="other-model"),
        ask(gw, para, ns="scope", temperature=0.5),
        ask(gw, para, ns="scope", max_tokens=7),
        ask(
            gw,
            para,
            ns="scope",
            messages=[
                {"role": "system", "content": "Answer as a pirate."},
                {"role": "user", "content": para},
            ],
        ),
        ask(gw, para, ns="scope", messages=[*history, {"role": "user", "content": para}]),
        ask(gw, para, ns="scope-b"),
    ]
    assert [r.headers["x-cache"] for r in misses] == ["miss"] * len(misses)
    # the same follow-up under different earlier turns: each conversation keeps its own answer
    third = "What is the best way to learn Python?"  # a rewording of `para`
    assert (
        ask(
            gw, third, ns="scope", messages=[*other_history, {"role": "user", "content": third}]
        ).headers["x-cache"]
        == "miss"
    )
    assert (
        ask(gw, third, ns="scope", messages=[*history, {"role": "user", "content": third}]).headers[
            "x-cache"
        ]
        == "semantic"
    )


def test_threshold_per_request(gw: Gateway, upstream: FakeUpstream) -> None:
    ask(gw, "How do I boil an egg?", ns="thr")
    strict = ask(gw, "How should I boil an egg?", ns="thr", headers={"x-cache-threshold": "1"})
    assert strict.headers["x-cache"] == "miss"
    loose = ask(gw, "How do you boil an egg?", ns="thr", cache={"threshold": 0.5})
    assert loose.headers["x-cache"] == "semantic"
    # threshold 1 still allows exact hits; and an identical text reaches similarity 1
    assert (
        ask(gw, "How do I boil an egg?", ns="thr", headers={"x-cache-threshold": "1"}).headers[
            "x-cache"
        ]
        == "exact"
    )


def test_streamed_replay_of_a_semantic_hit(gw: Gateway, upstream: FakeUpstream) -> None:
    first = ask(gw, "Which planet is the largest in our solar system?", ns="stream", stream=True)
    original = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in first.text.splitlines()
        if line.startswith("data: {")
    )
    replay = ask(gw, "What is the largest planet in our solar system?", ns="stream", stream=True)
    assert replay.headers["x-cache"] == "semantic"
    replayed = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in replay.text.splitlines()
        if line.startswith("data: {")
    )
    assert replayed == original and replay.text.rstrip().endswith("data: [DONE]")
    plain = ask(gw, "Which is the largest planet in the solar system?", ns="stream")
    assert plain.headers["x-cache"] == "semantic" and answer(plain) == original


def test_ttl_expiry_and_controls(gw: Gateway, upstream: FakeUpstream) -> None:
    ask(gw, "How tall is the Eiffel Tower?", ns="ttl", headers={"x-cache-ttl": "3"})
    assert (
        ask(gw, "What is the height of the Eiffel Tower?", ns="ttl").headers["x-cache"]
        == "semantic"
    )
    time.sleep(3.2)  # (3 s, not 1: the semantic lookup above may take a while on a busy machine)
    assert ask(gw, "What is the height of the Eiffel Tower?", ns="ttl").headers["x-cache"] == "miss"
    assert (
        ask(
            gw, "How high is the Eiffel Tower?", ns="ttl", headers={"cache-control": "no-cache"}
        ).headers["x-cache"]
        == "refresh"
    )


def test_a_stale_nearest_answer_does_not_hide_a_fresh_paraphrase(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    # Only the nearest stored question was a candidate: when it could not be served (expired
    # before the sweep, or older than the request's max-age) the request was a miss, though a
    # fresh stored paraphrase a little further away would have answered it.
    nearest, further = "How do I reset my password?", "What is the way to reset my password?"
    ask(gw, nearest, ns="stale-ttl", headers={"x-cache-ttl": "3"})
    ask(gw, nearest, ns="stale-age")
    time.sleep(3.2)
    store = {"cache-control": "no-cache"}  # (stored, not answered by the nearest)
    fresh = {
        ns: answer(ask(gw, further, ns=ns, headers=store)) for ns in ("stale-ttl", "stale-age")
    }
    asked = "How can I reset my password?"
    expired = ask(gw, asked, ns="stale-ttl", headers={"cache-control": "no-store"})
    assert expired.headers["x-cache"] == "semantic"
    assert answer(expired) == fresh["stale-ttl"]
    too_old = ask(gw, asked, ns="stale-age", headers={"cache-control": "max-age=3, no-store"})
    assert too_old.headers["x-cache"] == "semantic"
    assert answer(too_old) == fresh["stale-age"]
    # the nearest, when it can be served, is still the one that answers
    assert answer(ask(gw, asked, ns="stale-age")) == answer(ask(gw, nearest, ns="stale-age"))
    assert upstream.stats["chat"] == 4


def test_flush_namespace_and_stats(gw: Gateway, upstream: FakeUpstream) -> None:
    ask(gw, "How do I make cold brew coffee?", ns="flush")
    assert ask(gw, "How can I make cold brew coffee?", ns="flush").headers["x-cache"] == "semantic"
    assert gw.http.post("/admin/cache/flush", json={"namespace": "flush"}).json()["flushed"] >= 1
    assert ask(gw, "How can I make cold brew coffee?", ns="flush").headers["x-cache"] == "miss"
    stats = gw.http.get("/admin/stats").json()["cache"]
    assert stats["hits"]["semantic"] >= 1 and stats["index"]["entries"] >= 1


def test_eviction_keeps_index_and_store_consistent(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    gateway = Gateway(load_config_text(config_text(upstream_server.url, tmp_path, max_entries=2)))
    try:
        ask(gateway, "How do I cook rice?", ns="ev")
        ask(gateway, "How do I cook pasta?", ns="ev")
        assert (
            ask(gateway, "How can I cook rice?", ns="ev").headers["x-cache"] == "semantic"
        )  # rice is recent now
        ask(gateway, "How do I cook quinoa?", ns="ev")  # evicts pasta, the least recently used
        assert ask(gateway, "How can I cook pasta?", ns="ev").headers["x-cache"] == "miss"
        stats = gateway.http.get("/admin/stats").json()["cache"]
        assert stats["entries"] == 2 and stats["index"]["entries"] == 2
    finally:
        gateway.stop()


def test_an_expired_answer_read_before_the_sweep_still_leaves_the_index(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    # Reading an expired answer (`cachegate cache show`, an exact lookup) made the disk store
    # forget it without saying so: no sweep or eviction ever dropped its vector, and
    # /admin/stats counted 3 vectors for 2 answers until a paraphrase ran into it.
    gateway = Gateway(load_config_text(config_text(upstream_server.url, tmp_path, max_entries=2)))
    try:
        ask(gateway, "How do I cook rice?", ns="exp", headers={"x-cache-ttl": "1"})
        ask(gateway, "Who painted the Mona Lisa?", ns="exp")
        expired = gateway.http.get("/admin/cache/entries").json()["data"][1]["id"]
        time.sleep(1.2)
        assert gateway.http.get(f"/admin/cache/entries/{expired}").status_code == 404
        ask(gateway, "Why is the sky blue?", ns="exp")  # room: the expired answer goes first
        stats = gateway.http.get("/admin/stats").json()["cache"]
        assert stats["entries"] == 2 and stats["index"]["entries"] == 2
        assert stats["evictions"] == 1
    finally:
        gateway.stop()


def test_sweep_interval_from_yaml(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    # Expired answers were swept every 60 s, a fixed interval: /admin/stats counted them as
    # entries (and in the vector index) for up to a minute, whatever the TTLs.
    text = config_text(upstream_server.url, tmp_path, sweep_interval=0.2)
    gateway = Gateway(load_config_text(text))
    try:
        ask(gateway, "How do I cook rice?", ns="sweep", headers={"x-cache-ttl": "1"})
        ask(gateway, "Who painted the Mona Lisa?", ns="sweep")
        wait_for(lambda: gateway.http.get("/admin/stats").json()["cache"]["expirations"] >= 1)
        stats = gateway.http.get("/admin/stats").json()["cache"]
        assert stats["entries"] == 1 and stats["index"]["entries"] == 1
    finally:
        gateway.stop()


def test_without_the_exact_tier_only_answers_it_can_find_are_stored(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    # With exact.enabled: false a completion (a prompt matches exactly only) was stored all
    # the same: never served, it took a place and evicted the answers semantic lookups find.
    text = config_text(upstream_server.url, tmp_path, max_entries=2, exact={"enabled": False})
    gateway = Gateway(load_config_text(text))
    try:
        ask(gateway, "How do I cook rice?", ns="noexact")
        for prompt in ("Once upon a time", "Roses are red"):
            completion = {"model": "fake-model", "prompt": prompt}
            assert gateway.http.post("/v1/completions", json=completion).status_code == 200
        hit = ask(gateway, "How can I cook rice?", ns="noexact")
        assert hit.headers["x-cache"] == "semantic"
        stats = gateway.http.get("/admin/stats").json()["cache"]
        assert stats["entries"] == stats["index"]["entries"] == 1 and stats["evictions"] == 0
    finally:
        gateway.stop()


def test_restart_restores_entries_and_rebuilds_a_corrupt_index(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    text = config_text(upstream_server.url, tmp_path)
    first = Gateway(load_config_text(text))
    ask(first, "How do I renew my passport?", ns="restart")
    first.stop()
    index_file = tmp_path / "response-cache" / "vector-index.npz"
    assert index_file.exists()
    second = Gateway(load_config_text(text))
    try:
        assert (
            ask(second, "How can I renew my passport?", ns="restart").headers["x-cache"]
            == "semantic"
        )
    finally:
        second.stop()
    index_file.write_bytes(b"not an index")
    third = Gateway(load_config_text(text))
    try:
        assert (
            ask(third, "How do I renew a passport?", ns="restart").headers["x-cache"] == "semantic"
        )
        assert upstream.stats["chat"] == 1
    finally:
        third.stop()


def test_a_ttl_lowered_across_a_restart_holds_for_answers_stored_before(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """An answer's expiry was fixed when it was stored: restarted with a lower ``cache.ttl``,
    the answers stored under the higher one were served, exact and semantic, until their
    own expiry (an operator review: 21 s old under ``ttl: 5``)."""
    first = Gateway(load_config_text(config_text(upstream_server.url, tmp_path)))
    ask(first, "How do I renew my passport?", ns="ttl")
    first.stop()
    second = Gateway(load_config_text(config_text(upstream_server.url, tmp_path, ttl=1)))
    try:
        time.sleep(1.2)
        for question in ("How do I renew my passport?", "How can I renew my passport?"):
            asked = ask(second, question, ns="ttl", headers={"cache-control": "no-store"})
            assert asked.headers["x-cache"] == "miss", question
        assert upstream.stats["chat"] == 3
    finally:
        second.stop()


def test_answers_flushed_while_the_index_is_rebuilt_stay_out_of_it(
    upstream_server: ThreadedServer,
    upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Without a saved index (a crash) a start rebuilds it from the stored answers on a thread,
    # while requests and admin calls are served. What a flush (or an eviction, a sweep)
    # dropped meanwhile came back with the rebuilt index: /admin/stats said 0 entries and 3
    # vectors, for good.
    text = config_text(upstream_server.url, tmp_path)
    with Gateway(load_config_text(text)) as first:
        for question in ("How do I cook rice?", "Who wrote Hamlet?", "Why is the sky blue?"):
            ask(first, question, ns="rebuild")
    (tmp_path / "response-cache" / "vector-index.npz").unlink()
    started, flushed = threading.Event(), threading.Event()
    rebuild = VectorIndex.rebuild

    def after_the_flush(index: VectorIndex, items: Any) -> None:
        started.set()
        flushed.wait(30)
        rebuild(index, items)

    monkeypatch.setattr(VectorIndex, "rebuild", after_the_flush)
    second = Gateway(load_config_text(text), wait=False)
    try:
        assert started.wait(60)
        assert second.http.post("/admin/cache/flush", json={}).json()["flushed"] == 3
        flushed.set()
        second.wait_ready()
        stats = second.http.get("/admin/stats").json()["cache"]
        assert stats["entries"] == 0 and stats["index"]["entries"] == 0
    finally:
        flushed.set()
        second.stop()


def test_a_saved_index_keeps_no_vectors_of_another_embedding_model(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    # After a change of cache.semantic.embedding_model the old answers are exact-only: a
    # rebuilt index leaves their vectors out, but the saved one, loaded at the next start,
    # kept them all in memory (and in /admin/stats) until they expired, a week by default.
    with Gateway(load_config_text(config_text(upstream_server.url, tmp_path))) as first:
        for question in ("How do I cook rice?", "Who wrote Hamlet?"):
            ask(first, question, ns="model")
    # another model's directory (the bundled weights, linked: the same dimension)
    semantic = {"enabled": True, "embedding_model": str(_linked_copy(tmp_path / "other"))}
    text = config_text(upstream_server.url, tmp_path, semantic=semantic)
    with Gateway(load_config_text(text)) as second:
        stats = second.http.get("/admin/stats").json()["cache"]
        assert stats["entries"] == 2 and stats["index"]["entries"] == 0
        assert ask(second, "How can I cook rice?", ns="model").headers["x-cache"] == "miss"
        assert ask(second, "Who wrote Hamlet?", ns="model").headers["x-cache"] == "exact"
        assert second.http.get("/admin/stats").json()["cache"]["index"]["entries"] == 1


def test_the_bundled_embedder_named_by_its_path_is_the_bundled_one(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    # cache.semantic.embedding_model set to the bundled model's directory was taken for
    # another model: the verifier's combiner was dropped (the cross-encoder decided alone and
    # turned down plain rewordings), and the answers stored with `bundled` were exact-only
    with Gateway(load_config_text(config_text(upstream_server.url, tmp_path))) as first:
        ask(first, "How do I cook rice?", ns="named")
    semantic = {"enabled": True, "embedding_model": f"{default_model_path()}/"}
    text = config_text(upstream_server.url, tmp_path, semantic=semantic)
    with Gateway(load_config_text(text)) as second:
        stats = second.http.get("/admin/stats").json()["cache"]
        assert stats["verifier"]["combiner"] is True and stats["index"]["entries"] == 1
        assert ask(second, "How can I cook rice?", ns="named").headers["x-cache"] == "semantic"
        ask(second, "How do I bake bread?", ns="named")
        assert ask(second, "How can I bake bread?", ns="named").headers["x-cache"] == "semantic"


def _linked_copy(directory: Path) -> Path:
    """A directory of links to the bundled embedder's files: the same model, another path."""
    directory.mkdir()
    for item in Path(default_model_path()).iterdir():
        (directory / item.name).symlink_to(item)
    return directory


def test_guard_min_score_from_yaml(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    strict = Gateway(
        load_config_text(
            config_text(
                upstream_server.url,
                tmp_path,
                semantic={"enabled": True, "verifier": "off", "guard_min_score": 1.0},
            )
        )
    )
    try:
        ask(strict, "How do I reset my password?", ns="strict")
        # (guard_min_score is the guard's, used with verifier: off) the guard's MLP never
        # reaches probability 1: only exact hits remain
        assert ask(strict, "How can I reset my password?", ns="strict").headers["x-cache"] == "miss"
        assert ask(strict, "How do I reset my password?", ns="strict").headers["x-cache"] == "exact"
    finally:
        strict.stop()


def test_hnsw_ef_search_from_yaml(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    semantic = {"enabled": True, "hnsw_ef_search": 48, "hnsw_threshold": 2}
    gateway = Gateway(
        load_config_text(config_text(upstream_server.url, tmp_path, semantic=semantic))
    )
    try:
        ask(gateway, "How do I reset my password?", ns="ef")
        ask(gateway, "What is the capital of France?", ns="ef")
        # past hnsw_threshold the scope is searched by HNSW, with the configured beam width
        assert (
            ask(gateway, "How can I reset my password?", ns="ef").headers["x-cache"] == "semantic"
        )
        index = gateway.http.get("/admin/stats").json()["cache"]["index"]
        assert index["ef_search"] == 48
    finally:
        gateway.stop()


def test_semantic_failure_degrades_to_exact_hits(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    broken = {"enabled": True, "embedding_model": str(tmp_path / "no-such-model")}
    gateway = Gateway(load_config_text(config_text(upstream_server.url, tmp_path, semantic=broken)))
    try:
        assert gateway.http.get("/readyz").status_code == 200  # still serving
        assert gateway.http.get("/admin/stats").json()["cache"]["semantic"].startswith("failed")
        ask(gateway, "How do I reset my password?", ns="deg")
        assert ask(gateway, "How do I reset my password?", ns="deg").headers["x-cache"] == "exact"
        assert ask(gateway, "How can I reset my password?", ns="deg").headers["x-cache"] == "miss"
    finally:
        gateway.stop()


def test_a_request_while_the_semantic_tier_loads_does_not_wait_for_it(
    upstream_server: ThreadedServer,
    upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A miss waited for the whole load (6-10 s after a start; a shutdown's whole deadline
    while its model would have answered in one): it skips the semantic step instead
    (``semantic_skipped{reason="loading"}``), and its answer is stored once the tier is up."""
    from semantic.cache import ResponseCache

    loaded = threading.Event()
    load = ResponseCache._load_semantic

    async def held(self: ResponseCache) -> None:
        await asyncio.to_thread(loaded.wait, 60)
        await load(self)

    monkeypatch.setattr(ResponseCache, "_load_semantic", held)
    gateway = Gateway(load_config_text(config_text(upstream_server.url, tmp_path)), wait=False)
    try:
        wait_for(lambda: gateway.http.get("/healthz").status_code == 200)
        first = ask(gateway, "How do I reset my password?", ns="load")  # (old: waited 60 s)
        assert first.status_code == 200 and first.headers["x-cache"] == "miss"
        assert gateway.http.get("/readyz").status_code == 503  # (still loading)
        skipped = gateway.http.get("/admin/stats").json()["cache"]["semantic_skipped"]
        assert skipped["loading"] == 1 and skipped["overload_store"] == 0
        loaded.set()
        wait_for(lambda: gateway.http.get("/readyz").status_code == 200, timeout=60)
        wait_for(lambda: gateway.http.get("/admin/stats").json()["cache"]["stores"] == 1)
        again = ask(gateway, "How do I reset my password?", ns="load")
        assert again.headers["x-cache"] == "exact"
        reworded = ask(gateway, "How can I reset my password?", ns="load")  # (its vector too)
        assert reworded.headers["x-cache"] == "semantic"
    finally:
        loaded.set()
        gateway.stop()


@pytest.mark.parametrize(
    ("backend", "graph"),
    [("onnx-int8", "model.int8.onnx"), ("onnx-int8-block", "model.int8-block.onnx")],
)
def test_embedder_backend_from_yaml_serves_hits(
    upstream_server: ThreadedServer,
    upstream: FakeUpstream,
    tmp_path: Path,
    backend: str,
    graph: str,
) -> None:
    """`cache.semantic.embedder_backend: onnx-int8` (or `onnx-int8-block`) exports into
    `embedder_export_dir` at start, is the backend the gateway reports, and serves paraphrases
    as before."""
    text = config_text(upstream_server.url, tmp_path / "data")
    config = yaml.safe_load(text)
    config["cache"]["semantic"].update(
        embedder_backend=backend, embedder_export_dir=str(tmp_path / "exports")
    )
    gateway = Gateway(load_config_text(yaml.safe_dump(config)))
    try:
        assert list((tmp_path / "exports").glob(f"embedder-*/{graph}"))
        embedder = gateway.http.get("/admin/stats").json()["cache"]["embedder"]
        assert embedder["backend"] == backend
        first = ask(gateway, "How do I reset my password?", ns="int8")
        assert first.headers["x-cache"] == "miss"
        hit = ask(gateway, "How can I reset my password?", ns="int8")
        assert hit.headers["x-cache"] == "semantic" and answer(hit) == answer(first)
        assert (
            ask(gateway, "What is the capital of France?", ns="int8").headers["x-cache"] == "miss"
        )
        assert upstream.stats["chat"] == 2
        metrics = gateway.http.get("/metrics").text
        assert f'cachegate_embedder_backend_info{{backend="{backend}"}} 1' in metrics
    finally:
        gateway.stop()


def test_a_failing_semantic_tier_is_a_miss_not_an_error(
    gw: Gateway, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The semantic tier is a cache: when its model fails (an ONNX Runtime error, a bug), the
    request goes to the model as a miss, and the failure is counted and logged."""
    cache = gw.runtime.cache
    assert cache is not None and cache.embedder is not None
    first = ask(gw, "Which plans include phone support?", ns="broken")
    assert first.headers["x-cache"] == "miss"

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("onnxruntime: a kernel failed")

    before = cache.stats()["semantic_errors"]
    calls = upstream.stats["chat"]
    monkeypatch.setattr(cache.embedder, "embed_then", broken)
    again = ask(gw, "Which plans come with phone support?", ns="broken")
    assert again.status_code == 200 and again.headers["x-cache"] == "miss"
    assert upstream.stats["chat"] == calls + 1
    assert cache.stats()["semantic_errors"] == before + 1
    metrics = gw.http.get("/metrics").text
    assert "cachegate_cache_semantic_errors_total" in metrics
    exact = ask(gw, "Which plans include phone support?", ns="broken")
    assert exact.headers["x-cache"] == "exact"  # exact hits do not need the embedder
