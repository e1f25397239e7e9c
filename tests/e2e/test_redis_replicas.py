"""Two `cachegate serve` processes sharing one real Redis: hits cross replicas, late joiners
see earlier entries, TTLs hold everywhere, and a Redis outage costs cache hits, never errors."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import RedisServer
from tests.e2e.conftest import ServeProcess
from tests.fake_upstream import FakeUpstream, ThreadedServer


def config(
    upstream_url: str, redis_url: str, data_dir: Path, timeout: float = 1.0, **cache: Any
) -> str:
    """A gateway's config whose cache is the Redis at ``redis_url`` (``cache`` merged in)."""
    return yaml.safe_dump({
        "data_dir": str(data_dir),
        "cache": {"backend": "redis", "redis": {"url": redis_url, "timeout": timeout}, **cache},
        "models": {"fake-model": {"backend": "openai", "base_url": f"{upstream_url}/v1", "api_key": "sk"}},
    })  # fmt: skip


@pytest.fixture
def replicas_config(
    upstream_server: ThreadedServer,
    upstream: FakeUpstream,
    redis_server: RedisServer,
    tmp_path: Path,
) -> str:
    """The config of replicas that share ``redis_server`` (the fake upstream's counters reset)."""
    return config(upstream_server.url, redis_server.url, tmp_path)


def ask(replica: ServeProcess, question: str, **headers: str) -> httpx.Response:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": question}]}
    return httpx.post(f"{replica.url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def eventually(check: Any, timeout: float = 5.0) -> Any:
    """The value of ``check()`` once truthy, within ``timeout`` seconds."""
    deadline = time.time() + timeout
    while True:
        value = check()
        if value or time.time() > deadline:
            return value
        time.sleep(0.05)


def stored(replica: ServeProcess, n: int = 1) -> bool:
    """Whether ``replica`` has stored ``n`` answers (it stores just after it answers: asked at
    once, another replica could miss and call the model itself)."""
    return bool(
        eventually(
            lambda: (
                httpx.get(f"{replica.url}/admin/stats", timeout=10).json()["cache"]["stores"] >= n
            )
        )
    )


def ask_slowly(replica: ServeProcess, delay: float = 1.5) -> httpx.Response:
    """ "What is 2+2?", answered by the fake model after ``delay`` seconds."""
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "What is 2+2?"}],
            "fake": {"delay": delay}}  # fmt: skip
    return httpx.post(f"{replica.url}/v1/chat/completions", json=body, timeout=30)


def flushed_while_at_the_model(
    upstream: FakeUpstream, replica: ServeProcess, flush: Any, delay: float = 1.5,
    timeout: float = 5.0,
) -> httpx.Response:  # fmt: skip
    """:func:`ask_slowly` of ``replica``; ``flush()`` once the request is at the model (within
    ``timeout``); the request's answer."""
    with ThreadPoolExecutor(1) as pool:
        before = pool.submit(ask_slowly, replica, delay)
        assert eventually(lambda: upstream.stats["chat"] == 1, timeout=timeout)
        flush()
        return before.result()


def flush_of(replica: ServeProcess) -> Any:
    """A ``flush`` for :func:`flushed_while_at_the_model`: the whole cache, through ``replica``."""

    def flush() -> None:
        assert (
            httpx.post(f"{replica.url}/admin/cache/flush", json={}, timeout=30).status_code == 200
        )

    return flush


def test_replicas_share_the_cache(serve: Any, upstream: FakeUpstream, replicas_config: str) -> None:
    a = serve(replicas_config, name="a.yaml")
    b = serve(replicas_config, name="b.yaml")
    first = ask(a, "How do I change a flat tyre?")
    assert first.headers["x-cache"] == "miss" and stored(a)
    exact = eventually(
        lambda: (r := ask(b, "How do I change a flat tyre?")).headers["x-cache"] == "exact" and r
    )
    assert exact, "no exact hit on the other replica within 5 s"
    assert (
        exact.json()["choices"][0]["message"]["content"]
        == first.json()["choices"][0]["message"]["content"]
    )
    semantic = eventually(
        lambda: (
            (r := ask(b, "How can I change a flat tyre?")).headers["x-cache"] == "semantic" and r
        )
    )
    assert semantic, "no semantic hit on the other replica within 5 s"
    assert upstream.stats["chat"] == 1

    # a replica started later loads every live entry
    c = serve(replicas_config, name="c.yaml")
    assert ask(c, "How do I change a flat tyre?").headers["x-cache"] == "exact"
    assert ask(c, "What is the way to change a flat tyre?").headers["x-cache"] == "semantic"

    # a flush through one replica empties the cache for all
    assert httpx.post(f"{a.url}/admin/cache/flush", json={}).json()["flushed"] >= 1
    assert eventually(lambda: ask(c, "How can I change a flat tyre?").headers["x-cache"] == "miss")


def test_ttl_expiry_across_replicas(serve: Any, replicas_config: str) -> None:
    a = serve(replicas_config, name="a.yaml")
    b = serve(replicas_config, name="b.yaml")
    ask(a, "When was the Colosseum built?", **{"x-cache-ttl": "3"})
    assert stored(a)
    expired_at = time.monotonic() + 3.1  # (stored before this moment)
    assert eventually(lambda: ask(b, "When was the Colosseum built?").headers["x-cache"] == "exact")
    assert eventually(
        lambda: ask(b, "In what year was the Colosseum built?").headers["x-cache"] == "semantic"
    )
    time.sleep(max(0.0, expired_at - time.monotonic()))
    no_store = {"cache-control": "no-store"}
    assert ask(a, "In what year was the Colosseum built?", **no_store).headers["x-cache"] == "miss"
    assert ask(b, "In what year was the Colosseum built?", **no_store).headers["x-cache"] == "miss"
    assert ask(b, "When was the Colosseum built?", **no_store).headers["x-cache"] == "miss"


def test_redis_outage_means_misses_not_errors(
    serve: Any, redis_server: RedisServer, replicas_config: str
) -> None:
    a = serve(replicas_config, name="a.yaml")
    b = serve(replicas_config, name="b.yaml")
    ask(a, "What is the speed of light?")
    assert eventually(lambda: ask(b, "What is the speed of light?").headers["x-cache"] == "exact")
    redis_server.stop()
    for replica in (a, b):
        for question in ("What is the speed of light?", "What is the speed of sound?"):
            started = time.perf_counter()
            response = ask(replica, question)
            assert response.status_code == 200 and response.headers["x-cache"] == "miss"
            assert time.perf_counter() - started < 2.0
    assert httpx.get(f"{a.url}/healthz").status_code == 200
    flush = httpx.post(f"{a.url}/admin/cache/flush", json={}, timeout=10)
    assert flush.status_code == 503  # was 200 {"flushed": 0}: a flush that did nothing
    assert flush.json()["error"]["code"] == "cache_unavailable"
    redis_server.start()  # back, empty
    ask(a, "What is the boiling point of water?")
    assert eventually(
        lambda: ask(a, "What is the boiling point of water?").headers["x-cache"] == "exact",
        timeout=5,
    )
    assert eventually(
        lambda: ask(b, "What is the boiling point of water?").headers["x-cache"] == "exact",
        timeout=5,
    )
    assert eventually(
        lambda: ask(b, "What's the boiling point of water?").headers["x-cache"] == "semantic",
        timeout=5,
    )


def test_a_hung_redis_is_marked_down_once_and_skipped_until_it_answers(
    serve: Any,
    upstream_server: ThreadedServer,
    upstream: FakeUpstream,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """A Redis that stops answering (SIGSTOP: a partition, a stuck host) is marked down once
    and stays down until a PING of the gateway's own is answered; requests skip it meanwhile.
    Before, it was switched back on every second, and every request in flight then tried it,
    waiting two timeouts (0.5 s here) each time: marked down again and again (its warning in
    the log each time). Checked by what the gateway did, not by timing requests."""
    text = config(upstream_server.url, redis_server.url, tmp_path, timeout=0.25,
                  semantic={"enabled": False})  # fmt: skip
    gateway = serve(text)
    assert ask(gateway, "What is the speed of light?").headers["x-cache"] == "miss"
    assert stored(gateway)
    assert redis_server.process is not None
    redis_server.process.send_signal(signal.SIGSTOP)
    try:
        assert ask(gateway, "What is the speed of light?").headers["x-cache"] == "miss"
        ends = time.monotonic() + 3.5  # (retry every 1 s: two or three tries)

        def client() -> None:
            with httpx.Client(timeout=30) as http:
                body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
                while time.monotonic() < ends:
                    response = http.post(f"{gateway.url}/v1/chat/completions", json=body)
                    assert response.status_code == 200

        clients = [threading.Thread(target=client) for _ in range(6)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        assert available(gateway) == 0  # (what an alert reads; /readyz says "degraded")
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
    downs = gateway.log.read_text().count("Redis unavailable")
    assert downs == 1, f"Redis was switched back on and marked down again: {downs} times"
    assert eventually(  # and the cache is back on its own
        lambda: ask(gateway, "What is the speed of light?").headers["x-cache"] == "exact"
    )
    assert available(gateway) == 1  # and says so, once, in the log too (it said nothing)
    assert gateway.log.read_text().count("Redis answers again; answering with it") == 1


def available(replica: ServeProcess) -> float:
    """The ``cachegate_cache_available`` gauge of ``replica``'s /metrics."""
    metrics = httpx.get(f"{replica.url}/metrics", timeout=10).text
    line = next(x for x in metrics.splitlines() if x.startswith("cachegate_cache_available "))
    return float(line.split()[1])


def test_an_answer_asked_for_before_a_flush_is_not_stored_after_it(
    serve: Any,
    upstream_server: ThreadedServer,
    upstream: FakeUpstream,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """Replica B waits for a slow model when replica A is flushed (say, after a model change).
    B's answer, made before the flush, used to be stored after it: both replicas then served it
    from the flushed cache as an exact hit."""
    text = config(upstream_server.url, redis_server.url, tmp_path, semantic={"enabled": False})
    a = serve(text, name="a.yaml")
    b = serve(text, name="b.yaml")
    old = flushed_while_at_the_model(upstream, b, flush_of(a))
    assert old.headers["x-cache"] == "miss"
    after = ask_slowly(b)  # (a lookup on B waits for B's write in progress)
    assert after.headers["x-cache"] == "miss", "an answer made before the flush was served"
    assert after.json()["choices"] != old.json()["choices"]  # a new answer, from the model
    assert stored(b)  # an answer asked for after the flush is stored: a hit through A
    assert eventually(lambda: ask_slowly(a).headers["x-cache"] == "exact")


def test_readyz_says_the_cache_is_degraded_while_redis_is_down(
    serve: Any,
    upstream_server: ThreadedServer,
    upstream: FakeUpstream,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """While Redis is down the replica stays ready (it answers, as misses: failing every
    replica's readiness at once would take the deployment down with Redis), but /readyz no
    longer says "cache": true as if the cache worked."""
    text = config(upstream_server.url, redis_server.url, tmp_path, semantic={"enabled": False})
    gateway = serve(text)
    assert httpx.get(f"{gateway.url}/readyz").json()["cache"] is True
    redis_server.stop()
    assert ask(gateway, "What is the speed of light?").headers["x-cache"] == "miss"
    ready = httpx.get(f"{gateway.url}/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert ready.json()["cache"] == "degraded"
    redis_server.start()
    assert eventually(lambda: httpx.get(f"{gateway.url}/readyz").json()["cache"] is True)


def test_the_cache_is_back_when_redis_is(
    serve: Any,
    upstream_server: ThreadedServer,
    upstream: FakeUpstream,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """A replica that found Redis down PINGs it (every 0.1 s: it was once a second, and for up
    to a second after Redis was back every request missed and nothing was stored; how soon is
    not checked here, only that it comes back) and uses it again, and /readyz says so."""
    text = config(upstream_server.url, redis_server.url, tmp_path, semantic={"enabled": False})
    gateway = serve(text)
    redis_server.stop()
    assert ask(gateway, "What is the speed of light?").headers["x-cache"] == "miss"  # down
    assert httpx.get(f"{gateway.url}/readyz").json()["cache"] == "degraded"
    redis_server.start()
    assert eventually(lambda: httpx.get(f"{gateway.url}/readyz").json()["cache"] is True)
    assert ask(gateway, "What is the speed of sound?").headers["x-cache"] == "miss"
    assert eventually(
        lambda: ask(gateway, "What is the speed of sound?").headers["x-cache"] == "exact"
    )


def test_a_flush_after_redis_lost_its_data_still_drops_an_answer_asked_for_before_it(
    serve: Any,
    upstream_server: ThreadedServer,
    upstream: FakeUpstream,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """The epoch was a count of flushes: a Redis restarted without its data (no persistence, a
    failover to an empty replica) counted from 0 again, and the first flush after it brought
    the count back to the one a request still at the model had begun with. Its answer, made
    before that flush, was stored after it and served as an exact hit."""
    text = config(upstream_server.url, redis_server.url, tmp_path, semantic={"enabled": False})
    gateway = serve(text)
    flush_of(gateway)()

    def restart_empty_and_flush() -> None:
        redis_server.stop()
        redis_server.start()  # back, empty
        flush_of(gateway)()

    old = flushed_while_at_the_model(upstream, gateway, restart_empty_and_flush, delay=3)
    assert old.headers["x-cache"] == "miss"
    after = ask_slowly(gateway)  # (a lookup waits for the gateway's write in progress)
    assert after.headers["x-cache"] == "miss", "an answer made before the flush was served"


def test_a_replica_still_loading_does_not_store_an_answer_asked_for_before_a_flush(
    serve: Any,
    upstream_server: ThreadedServer,
    upstream: FakeUpstream,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """A replica learnt the epoch when its follower started, once its embedding model had
    loaded (seconds): a request it took meanwhile began in no epoch (unchecked), and its
    answer, made before a flush through another replica, was stored after that flush and
    served as an exact hit."""
    a = serve(config(upstream_server.url, redis_server.url, tmp_path, semantic={"enabled": False}),
              name="a.yaml")  # fmt: skip
    b = serve(config(upstream_server.url, redis_server.url, tmp_path), name="b.yaml",
              ready_timeout=None)  # fmt: skip

    def loading() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{b.url}/readyz", timeout=5).json()["cache"] is False
        return False

    assert eventually(loading, timeout=60), "the replica was not seen loading its model"
    # (B's lookup waits for its model to load before the request reaches the model)
    old = flushed_while_at_the_model(upstream, b, flush_of(a), timeout=60)
    assert old.headers["x-cache"] == "miss"
    after = ask_slowly(b)  # (a lookup on B waits for B's write in progress)
    assert after.headers["x-cache"] == "miss", "an answer made before the flush was served"


def test_a_tenants_flood_through_one_replica_pushes_out_only_its_answers_everywhere(
    serve: Any,
    upstream_server: ThreadedServer,
    upstream: FakeUpstream,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """With ``cache.max_entries_per_tenant`` on Redis, tenant b's flood through replica two
    pushes out b's own least recently used answers, never a's, and replica one's vector index
    drops them too (it was a config error: Redis evicted in one LRU for every tenant)."""
    settings = yaml.safe_load(config(upstream_server.url, redis_server.url, tmp_path,
                                     max_entries=10, max_entries_per_tenant=3))  # fmt: skip
    settings["auth"] = {"keys": [{"key": "key-a", "tenant": "a"}, {"key": "key-b", "tenant": "b"}]}
    settings["admin"] = {"api_key": "adm"}
    one = serve(yaml.safe_dump(settings), name="one.yaml")
    two = serve(yaml.safe_dump(settings), name="two.yaml")
    tenant_a, tenant_b = {"authorization": "Bearer key-a"}, {"authorization": "Bearer key-b"}

    def cache(replica: ServeProcess) -> dict[str, Any]:
        stats = httpx.get(f"{replica.url}/admin/stats", headers={"authorization": "Bearer adm"})
        return dict(stats.json()["cache"])

    for question in ("What is the capital of France?", "Who painted the Mona Lisa?"):
        assert ask(one, question, **tenant_a).headers["x-cache"] == "miss"
    assert ask(one, "How tall is Mount Everest?", **tenant_b).headers["x-cache"] == "miss"
    assert eventually(lambda: cache(one)["stores"] == 3)  # (stored just after answering)
    flood = ("How do vaccines work?", "What is the boiling point of water?",
             "Why is the sky blue?", "How many legs does a spider have?")  # fmt: skip
    for question in flood:
        assert ask(two, question, **tenant_b).headers["x-cache"] == "miss"

    for replica in (one, two):  # b's first two answers went, in Redis and in both indexes
        assert eventually(
            lambda r=replica: (
                (c := cache(r))["entries_by_tenant"] == {"a": 2, "b": 3}
                and c["entries"] == c["index"]["entries"] == 5
            )
        ), cache(replica)
    no_store = {"cache-control": "no-store"}
    assert (
        ask(one, "What's the capital of France?", **tenant_a, **no_store).headers["x-cache"]
        == "semantic"
    )
    assert ask(one, "Who painted the Mona Lisa?", **tenant_a).headers["x-cache"] == "exact"
    assert (
        ask(one, "How tall is Mount Everest?", **tenant_b, **no_store).headers["x-cache"] == "miss"
    )
    assert ask(two, flood[-1], **tenant_b).headers["x-cache"] == "exact"
