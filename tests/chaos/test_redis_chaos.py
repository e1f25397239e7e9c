"""What operators do to a shared cache, done for real: Redis restarted and ``kill -9``-ed (AOF
everysec) under load, a replica ``kill -9``-ed under write load, flushes and evictions seen by
the other replica. Each test asserts that no acknowledged answer is lost, no wrong answer is
served, and that from one second after Redis answers again every store lands and every stored
answer hits on both replicas (issue 16)."""

from __future__ import annotations

import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import redis

from tests.chaos.conftest import Answer, Load, ask, config, right
from tests.conftest import RedisServer
from tests.e2e.conftest import ServeProcess
from tests.fake_upstream import ThreadedServer

PARAPHRASE = ("How do I change a flat tyre?", "How can I change a flat tyre?")


def test_redis_restart_and_kill_9_under_load(
    serve: Any, upstream_server: ThreadedServer, aof_redis: RedisServer, tmp_path: Path
) -> None:
    # b runs the semantic tier (its follower must reload the index); a, exact only, starts fast
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(
            lambda args: serve(config(upstream_server.url, aof_redis.url, tmp_path,
                                      semantic=args[1]), name=args[0]),
            [("a.yaml", False), ("b.yaml", True)],
        )  # fmt: skip
    stored = [ask(b, PARAPHRASE[0])] + [ask(b, f"Stored question {i}?") for i in range(4)]
    assert all(x.cache == "miss" and right(x) for x in stored)
    # (Redis went, Redis answers again + 1.5 s: a replica that saw a refusal just before the
    # restart switches Redis off for 1 s from when it handled it, later on a loaded machine)
    outages: list[tuple[float, float]] = []
    with Load([a, b], "restart") as load:
        time.sleep(1.0)
        for how, stop in (("restart", aof_redis.stop), ("kill -9", aof_redis.kill)):
            went = time.monotonic()
            stop()
            time.sleep(0.5)  # away, under load
            aof_redis.start()  # returns once Redis answers PING
            outages.append((went, time.monotonic() + 1.5))
            time.sleep(1.5)
            for replica in (a, b):  # every stored answer hits on both replicas, unchanged
                for old in stored:
                    got = ask(replica, old.question)
                    assert (got.cache, got.content) == ("exact", old.content), (how, replica.url)
            got = ask(b, PARAPHRASE[1])  # b's follower reloaded its index
            assert got.cache == "semantic" and got.content == stored[0].content, how
            fresh = [ask((a, b)[i % 2], f"Stored after the {how} {i}?") for i in range(4)]
            assert all(x.cache == "miss" and right(x) for x in fresh), how
            for i, x in enumerate(fresh):  # every store landed: the other replica has it
                other = ask((b, a)[i % 2], x.question)
                assert (other.cache, other.content) == ("exact", x.content), how
            stored += fresh
        time.sleep(0.5)
    assert not load.errors
    assert load.answers and all(right(x) for x in load.answers)  # never a wrong answer
    assert_no_acknowledged_answer_lost(load.answers, outages, [a, b])


def test_replica_kill_9_under_write_load(
    serve: Any, upstream_server: ThreadedServer, aof_redis: RedisServer, tmp_path: Path
) -> None:
    text = config(upstream_server.url, aof_redis.url, tmp_path, semantic=False)
    a, b = serve(text, name="a.yaml"), serve(text, name="b.yaml")
    with Load([a, b], "replica") as load:
        time.sleep(1.5)
        b.proc.kill()  # kill -9: no shutdown, requests in flight cut
        b.proc.wait()
        time.sleep(1.0)
    assert {url for url, _error in load.errors} <= {b.url}  # only the dead one failed
    assert all(right(x) for x in load.answers)
    c = serve(text, name="c.yaml")  # a replacement replica loads everything stored
    assert_no_acknowledged_answer_lost(load.answers, [], [a, c])
    stats = httpx.get(f"{c.url}/admin/stats").json()["cache"]
    assert stats["entries"] == redis.Redis.from_url(aof_redis.url).zcard("cachegate:lru")


def test_flush_eviction_and_entry_counts_seen_by_the_other_replica(
    serve: Any, upstream_server: ThreadedServer, aof_redis: RedisServer, tmp_path: Path
) -> None:
    text = config(upstream_server.url, aof_redis.url, tmp_path, semantic=False, max_entries=5)
    a, b = serve(text, name="a.yaml"), serve(text, name="b.yaml")
    answers = [ask(a, f"Evicted or kept {i}?") for i in range(8)]  # b only reads
    assert eventually(lambda: entries(b) == 5), entries(b)  # was stale: b's own stores only
    assert "cachegate_cache_entries 5.0" in httpx.get(f"{b.url}/metrics").text
    for old in answers[:3]:  # evicted: a miss on b (asked without storing it again)
        assert peek(b, old.question) == "miss"
    for kept in answers[3:]:
        assert ask(b, kept.question).content == kept.content
    assert httpx.post(f"{b.url}/admin/cache/flush", json={}).json()["flushed"] == 5
    assert eventually(lambda: entries(a) == 0), entries(a)
    assert all(peek(a, x.question) == "miss" for x in answers)


# -- helpers -------------------------------------------------------------------------------


def assert_no_acknowledged_answer_lost(
    answers: list[Answer], outages: list[tuple[float, float]], replicas: list[ServeProcess]
) -> None:
    """Every fresh answer served while Redis was up (outside ``outages``) is an exact hit on
    every replica, with the same content, and was served fresh only once."""
    fresh: dict[str, list[Answer]] = defaultdict(list)
    for x in answers:
        if x.cache == "miss" and not any(went <= x.at <= back for went, back in outages):
            fresh[x.question].append(x)
    assert fresh
    twice = {q: len(xs) for q, xs in fresh.items() if len(xs) > 1}
    assert not twice, f"stored answers that missed later: {twice}"
    for replica in replicas:
        for question, (x,) in fresh.items():
            got = ask(replica, question)
            assert (got.cache, got.content) == ("exact", x.content), (replica.url, question)


def entries(replica: ServeProcess) -> int:
    return int(httpx.get(f"{replica.url}/admin/stats").json()["cache"]["entries"])


def peek(replica: ServeProcess, question: str) -> str:
    """The x-cache of ``question`` asked with no-store (a miss stores nothing)."""
    body = {"model": "fake-model", "messages": [{"role": "user", "content": question}]}
    r = httpx.post(
        f"{replica.url}/v1/chat/completions", json=body, headers={"cache-control": "no-store"}
    )
    return r.headers["x-cache"]


def eventually(check: Any, timeout: float = 3.0) -> Any:
    deadline = time.time() + timeout
    while not (value := check()) and time.time() < deadline:
        time.sleep(0.05)
    return value
