"""Prefix-affinity routing over replicas: the policy, and through the API with two upstreams."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import openai
import pytest

from gateway.config import load_config_text
from gateway.router import PrefixRouter, prompt_text
from tests.conftest import Gateway, wait_for
from tests.fake_upstream import FakeUpstream, ThreadedServer, send_json

SYSTEM_A = "system\x1fYou are a support agent for ACME Corp. Be polite and precise.\x1e"
SYSTEM_B = "system\x1fYou translate English into French, word for word.\x1e"


def replicated(tmp_path: Path, urls: list[str], settings: str = "", top: str = "") -> Gateway:
    """A gateway whose fake-model has ``urls`` as replicas (max_retries 0, cache off);
    ``top``: more top-level settings."""
    replicas = ", ".join(f'"{u}"' for u in urls)
    if "max_retries" not in settings:  # (a key given twice is a config error)
        settings = f"max_retries: 0, {settings}"
    return Gateway(
        load_config_text(f"""{top}
data_dir: {tmp_path}
cache: {{enabled: false}}
models:
  fake-model: {{backend: openai, replicas: [{replicas}], {settings}}}
""")
    )


@contextlib.contextmanager
def with_a_second(
    upstream_server: ThreadedServer, tmp_path: Path, settings: str = "", *, top: str = "",
    more: tuple[str, ...] = (),
) -> Iterator[tuple[Gateway, ThreadedServer]]:  # fmt: skip
    """A gateway (``replicated``) over the shared fake upstream and a second one it starts,
    then ``more`` URLs; both stopped at the end."""
    second = ThreadedServer(FakeUpstream()).start()
    urls = [f"{upstream_server.url}/v1", f"{second.url}/v1", *more]
    gw = replicated(tmp_path, urls, settings, top=top)
    try:
        yield gw, second
    finally:
        gw.stop()
        second.stop()


def routing_stats(gw: Gateway, admin_key: str | None = None) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {admin_key}"} if admin_key else None
    reply = gw.http.get("/admin/stats", headers=headers).json()
    stats: dict[str, Any] = reply["backends"]["fake-model"]["routing"]
    return stats


SUPPORT = {"role": "system", "content": "You are the ACME support bot. " * 5}


def ask_support(gw: Gateway, n: int, *, streams: bool = False) -> None:
    """``n`` questions sharing one long system prompt (every other one streamed): all 200."""
    for i in range(n):
        body = {
            "model": "fake-model",
            "messages": [SUPPORT, {"role": "user", "content": f"question {i}"}],
            "stream": streams and i % 2 == 1,
        }
        assert gw.http.post("/v1/chat/completions", json=body).status_code == 200


def test_same_prefix_goes_to_the_same_replica() -> None:
    router = PrefixRouter(["r0", "r1", "r2"], min_match=0.5)
    first_a = router.choose(SYSTEM_A + "user\x1fhi\x1e")
    router.release(first_a.replica)
    first_b = router.choose(SYSTEM_B + "user\x1fhello\x1e")
    router.release(first_b.replica)
    assert first_a.replica != first_b.replica  # idle replicas share new prefixes
    for user in ("where is my order", "refund please", "hi again"):
        route = router.choose(SYSTEM_A + f"user\x1f{user}\x1e")
        router.release(route.replica)
        assert route.replica == first_a.replica and route.reason == "prefix"
        assert route.matched >= len(SYSTEM_A)


def test_a_conversations_next_turn_stays_where_its_answer_was_made() -> None:
    """Turn 2 is turn 1's prompt, the answer the replica made (its prefix cache holds it too)
    and a new question: only the prompt was remembered, so a long answer put the match under
    ``min_match`` and turn 2 went to the other, idle replica. Chat and Responses turns."""
    for turns in (
        [{"role": "assistant", "content": "Hello! " * 20}],
        [{"type": "reasoning", "summary": []},
         {"type": "function_call", "name": "f", "arguments": '{"q": "' + "x" * 80 + '"}'},
         {"type": "function_call_output", "output": "done"}],
    ):  # fmt: skip
        router = PrefixRouter(["r0", "r1"], min_match=0.5)
        kind = "chat" if turns[0].get("role") else "responses"
        field = "messages" if kind == "chat" else "input"
        first = [{"role": "user", "content": "Hi"}]
        one = router.choose(prompt_text({field: first}, kind))
        router.release(one.replica)
        then = [*first, *turns, {"role": "user", "content": "More?"}]
        two = router.choose(prompt_text({field: then}, kind))
        router.release(two.replica)
        assert (two.replica, two.reason) == (one.replica, "prefix"), kind
    # nor is a match that is only the start of a longer prompt sent to the other replica (a
    # shared opening): the answer is the one made where that opening ended (a review's)
    router = PrefixRouter(["r0", "r1"], min_match=0.5, max_imbalance=0)
    x = router.choose(prompt_text({"messages": [{"role": "user", "content": "Hi"},
                                                {"role": "user", "content": "there"}]}))  # fmt: skip
    y = router.choose(prompt_text({"messages": [{"role": "user", "content": "Hi"}]}))  # (x busy)
    router.release(x.replica)
    router.release(y.replica)
    assert x.replica != y.replica
    then = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! " * 20},
            {"role": "user", "content": "More?"}]  # fmt: skip
    assert router.choose(prompt_text({"messages": then})).replica == y.replica
    # a turn the replica did not make after the match (the client's own) is no such credit
    router = PrefixRouter(["r0", "r1"], min_match=0.5)
    one = router.choose(prompt_text({"messages": [{"role": "user", "content": "Hi"}]}))
    router.release(one.replica)
    other = [{"role": "user", "content": "Hi"}, {"role": "user", "content": "y" * 200}]
    assert router.choose(prompt_text({"messages": other})).reason == "least_loaded"


def test_short_matches_and_busy_replicas_fall_back_to_least_loaded() -> None:
    router = PrefixRouter(["r0", "r1"], min_match=0.9, max_imbalance=1)
    a = router.choose(SYSTEM_A + "user\x1fq1\x1e")
    router.release(a.replica)
    # shares the system prompt but is much longer: below min_match, so least loaded
    long_user = "user\x1f" + "x" * 500 + "\x1e"
    assert router.choose(SYSTEM_A + long_user).reason == "least_loaded"
    router = PrefixRouter(["r0", "r1"], min_match=0.1, max_imbalance=1)
    first = router.choose(SYSTEM_A + "user\x1fq\x1e")  # stays in flight
    second = router.choose(SYSTEM_A + "user\x1fq2\x1e")  # imbalance 1: still affinity
    assert second.replica == first.replica and second.reason == "prefix"
    third = router.choose(SYSTEM_A + "user\x1fq3\x1e")  # imbalance would be 2: least loaded
    assert third.replica != first.replica and third.reason == "least_loaded"
    assert router.stats()["replicas"][first.replica]["in_flight"] == 2


def test_a_replica_marked_down_forgets_every_tenants_prefixes() -> None:
    router = PrefixRouter(["r0", "r1"])
    for tenant in ("a", "b"):
        router.release(router.choose(SYSTEM_A, tenant=tenant).replica)
    held = [r["remembered_bytes"] for r in router.stats()["replicas"]]
    assert sum(held) == 2 * (len(SYSTEM_A) + 1)
    for replica in (0, 1):
        router.mark_down(replica, 60)
    assert [r["remembered_bytes"] for r in router.stats()["replicas"]] == [0, 0]


def test_round_robin_exclusion_and_down_replicas() -> None:
    router = PrefixRouter(["r0", "r1", "r2"], policy="round_robin")
    picks = [router.choose("same prompt").replica for _ in range(6)]
    assert sorted(picks) == [0, 0, 1, 1, 2, 2]
    router = PrefixRouter(["r0", "r1"])
    assert router.choose("p", exclude=frozenset({0})).replica == 1
    router.mark_down(1, 60)
    assert {router.choose(f"p{i}").replica for i in range(4)} == {0}
    assert router.stats()["replicas"][1]["down"]


def test_stats_hide_credentials_in_replica_urls() -> None:
    router = PrefixRouter(["https://user:s3cret@w1/v1", "http://w2:8081/v1"])
    urls = [r["url"] for r in router.stats()["replicas"]]
    assert urls == ["https://user:***@w1/v1", "http://w2:8081/v1"]


def test_prompt_text_orders_messages() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": [{"type": "text", "text": "U"}]},
        ]
    }
    assert prompt_text(body) == "system\x1fS\x1euser\x1fU\x1e"
    assert prompt_text({"prompt": "Once"}) == "Once"


def test_prompt_text_of_a_responses_request() -> None:
    body = {
        "instructions": "S",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "U"}]},
            {"type": "function_call_output", "call_id": "c", "output": "42"},
        ],
    }
    assert (
        prompt_text(body, "responses")
        == "system\x1fS\x1euser\x1fU\x1efunction_call_output\x1f42\x1e"
    )
    assert prompt_text({"input": "hi"}, "responses") == "system\x1f\x1euser\x1fhi\x1e"
    assert prompt_text({"input": "hi"}, "embedding") == ""


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_follow_up_goes_to_the_replica_that_holds_its_previous_response(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path, stream: bool
) -> None:
    with with_a_second(upstream_server, tmp_path) as (gw, second):
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
        previous = None
        for turn in range(4):  # each turn on its own would go to the other (idle) replica
            asked = {
                "model": "fake-model",
                "input": f"turn {turn}",
                "previous_response_id": previous,
            }
            if stream:
                with client.responses.stream(**asked) as events:
                    previous = events.get_final_response().id
            else:
                previous = client.responses.create(**asked).id
        made = sorted([upstream.stats["responses"], second.app.stats["responses"]])
        assert made == [0, 4]
        assert routing_stats(gw)["routed"]["pinned"] == 3
        client.responses.delete(previous)  # at the replica that holds it, and only there
        deleted = [upstream.stats["responses_delete"], second.app.stats["responses_delete"]]
        assert sorted(deleted) == [0, 1]
        assert deleted.index(1) == [
            upstream.stats["responses"],
            second.app.stats["responses"],
        ].index(4)


def test_a_previous_response_made_elsewhere_is_asked_of_each_replica(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    with with_a_second(upstream_server, tmp_path) as (gw, second):
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
        for replica in (upstream_server, second):  # (made by another gateway, say)
            direct = openai.OpenAI(base_url=f"{replica.url}/v1", api_key="k", max_retries=0)
            made = direct.responses.create(model="fake-model", input="first").id
            for _ in range(2):  # whichever replica the router picks first
                follow_up = client.responses.create(
                    model="fake-model", input="then", previous_response_id=made
                )
                assert follow_up.previous_response_id == made


def test_replicas_through_the_api(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path, refused_url: str
) -> None:
    with with_a_second(
        upstream_server, tmp_path, "routing: {min_match: 0.3}", more=(refused_url,)
    ) as (gw, second):
        ask_support(gw, 6)
        counts = sorted([upstream.stats["chat"], second.app.stats["chat"]])
        assert counts == [0, 6]  # one live replica served the whole shared-prefix conversation
        other = {"role": "system", "content": "Translate to German, please. " * 5}
        for i in range(4):
            body = {
                "model": "fake-model",
                "messages": [other, {"role": "user", "content": f"q{i}"}],
                "stream": True,
            }
            assert gw.http.post("/v1/chat/completions", json=body).status_code == 200
        assert upstream.stats["chat"] + second.app.stats["chat"] == 10
        assert (
            upstream.stats["chat"] > 0 and second.app.stats["chat"] > 0
        )  # the new prefix went elsewhere
        stats = routing_stats(gw)
        assert [r["in_flight"] for r in stats["replicas"]] == [0, 0, 0]
        metrics = gw.http.get("/metrics").text
        assert "# TYPE cachegate_backend_routing_routed_prefix_total counter" in metrics
        assert 'cachegate_backend_routing_routed_prefix_total{model="fake-model"}' in metrics


def test_one_tenants_prompts_do_not_draw_anothers_requests(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    keys = "auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}\nadmin: {api_key: adm}"
    with with_a_second(upstream_server, tmp_path, top=keys) as (gw, _):
        body = {"model": "fake-model", "messages": [SUPPORT, {"role": "user", "content": "hi"}]}
        for key in ("key-a", "key-a", "key-b", "key-b"):
            headers = {"authorization": f"Bearer {key}"}
            assert (
                gw.http.post("/v1/chat/completions", json=body, headers=headers).status_code == 200
            )
        # was {"prefix": 3, "least_loaded": 1}: b's first request followed a's prefix, to a
        # replica (a cachegate worker) that keeps a's KV from b
        assert routing_stats(gw, "adm")["routed"] == {
            "prefix": 2, "least_loaded": 2, "round_robin": 0, "pinned": 0
        }  # fmt: skip
        remembered = [r["remembered_bytes"] for r in routing_stats(gw, "adm")["replicas"]]
        assert sum(remembered) == 2 * (len(prompt_text(body)) + 1)  # one tree per tenant


def test_dead_replica_fails_over(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path, refused_url: str
) -> None:
    urls = [refused_url, f"{upstream_server.url}/v1"]
    gw = replicated(tmp_path, urls, "retry_backoff: 5, routing: {policy: round_robin}")
    try:
        started = time.perf_counter()
        for i in range(4):
            assert gw.chat(f"q{i}").status_code == 200
            assert gw.chat(f"s{i}", stream=True).status_code == 200
        # max_retries 0 does not stop failover, and a dead replica costs a connect, not a backoff
        assert time.perf_counter() - started < 4.5  # (one backoff alone would be 5 s)
        assert upstream.stats["chat"] == 8
        replicas = routing_stats(gw)["replicas"]
        assert replicas[0]["down"] and not replicas[1]["down"]
        # the failover the dead replica cost is counted with the retries (once: then it is down)
        failovers = 'cachegate_upstream_retries_total{model="fake-model",why="failover"} 1.0'
        assert failovers in gw.http.get("/metrics").text
    finally:
        gw.stop()


class Replica:
    """An ASGI app that reads each request whole, counts it (``calls``) and sends ``answer``."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.calls += 1
        while (await receive()).get("more_body"):
            pass
        await self.answer(send)

    async def answer(self, send: Any) -> None:
        raise NotImplementedError


class Unavailable(Replica):
    """A replica whose model failed to load: it answers 503 to every request."""

    async def answer(self, send: Any) -> None:
        error = {"message": "model not loaded", "code": "model_unavailable"}
        await send_json(send, 503, {"error": error})


def test_replica_answering_503_is_avoided_and_its_requests_fail_over(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    broken = ThreadedServer(Unavailable()).start()
    gw = replicated(tmp_path, [f"{broken.url}/v1", f"{upstream_server.url}/v1"])
    try:
        ask_support(gw, 6, streams=True)
        # tried once, then avoided for down_for: affinity no longer sends the prompt there
        assert broken.app.calls == 1 and upstream.stats["chat"] == 6
        replicas = routing_stats(gw)["replicas"]
        assert replicas[0]["down"] and not replicas[1]["down"]
    finally:
        gw.stop()
        broken.stop()


class Dying(Replica):
    """A worker killed mid-answer: a stream's first event, then its connection cut; asked
    ``GET /models`` then (``dead``), it answers 503 (a process gone refuses it; a fake can't)."""

    dead = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            await send_json(send, 503 if self.dead else 200, {"id": "fake-model"})
            return
        await super().__call__(scope, receive, send)

    async def answer(self, send: Any) -> None:
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]}  # fmt: skip
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
        await send({"type": "http.response.body", "body": b"data: " + msgspec.json.encode(chunk)
                    + b"\n\n", "more_body": True})  # fmt: skip
        raise RuntimeError("killed")  # (the server closes the connection mid-answer)


def test_a_replica_that_dies_mid_stream_is_avoided_at_once(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A stream cut off (a killed worker) marked nothing: the next request went to the dead
    replica first, was refused, and only then failed over. A replica whose stream broke but
    that still answers ``GET /models`` is not marked down."""
    dying = Dying()
    server = ThreadedServer(dying).start()
    gw = replicated(tmp_path, [f"{server.url}/v1", f"{upstream_server.url}/v1"],
                    "routing: {policy: round_robin}")  # fmt: skip
    try:
        for dead in (False, True):
            dying.dead = dead
            while True:  # (round robin: until the dying replica took one)
                calls = dying.calls
                assert gw.chat(f"cut {dead} {calls}", stream=True).status_code == 200
                if dying.calls > calls:
                    break
            if dead:  # (asked in the background: the client's error does not wait for it)
                wait_for(lambda: routing_stats(gw)["replicas"][0]["down"], timeout=5)
            else:
                time.sleep(0.3)
                assert not routing_stats(gw)["replicas"][0]["down"]
    finally:
        gw.stop()
        server.stop()


class ShuttingDown(Replica):
    """A cachegate worker at its shutdown deadline: a 503 ``shutting_down`` body, or a stream
    whose first event is that error."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.stream = (b"accept", b"text/event-stream") in scope.get("headers", [])
        self.responses = scope.get("path", "").endswith("/responses")
        await super().__call__(scope, receive, send)

    async def answer(self, send: Any) -> None:
        error = {"message": "The gateway is shutting down; send the request again.",
                 "type": "api_error", "param": None, "code": "shutting_down"}  # fmt: skip
        body = msgspec.json.encode({"error": error})
        if self.stream and self.responses:  # the Responses API's error event
            event = {k: error[k] for k in ("code", "message", "param")}
            body = msgspec.json.encode({"type": "error", **event, "sequence_number": 0})
        media = b"text/event-stream" if self.stream else b"application/json"
        headers = [(b"content-type", media)]
        await send({"type": "http.response.start", "status": 200 if self.stream else 503,
                    "headers": headers, "trailers": False})  # fmt: skip
        await send(
            {
                "type": "http.response.body",
                "body": b"data: " + body + b"\n\n" if self.stream else body,
            }
        )


def test_a_replica_shutting_down_hands_its_requests_to_another(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A worker's shutdown deadline ("The gateway is shutting down") reached the clients of
    the gateway in front, stream or not, though another replica could answer (a stream's
    first event is not an answer yet); with no other replica, a 503 in its own words."""
    dying = ThreadedServer(ShuttingDown()).start()
    alone = replicated(tmp_path / "alone", [f"{dying.url}/v1"])
    try:
        for stream in (False, True):
            gw = replicated(tmp_path / str(stream), [f"{dying.url}/v1", f"{upstream_server.url}/v1"],
                            "routing: {policy: round_robin}")  # fmt: skip
            try:
                answer = gw.chat("hi", stream=stream)
                assert answer.status_code == 200 and "answer #" in answer.text
                assert "shutting down" not in answer.text
                assert routing_stats(gw)["replicas"][0]["down"]
            finally:
                gw.stop()
            refused = alone.chat("hi", stream=stream)
            message = "Upstream for model 'fake-model' is shutting down; send the request again."
            if stream:  # (one upstream: its stream is relayed from its headers on)
                error = json.loads(refused.text.removeprefix("data: "))["error"]
            else:
                assert refused.status_code == 503, refused.text
                error = refused.json()["error"]
            assert error["message"] == message and error["code"] == "upstream_unavailable"
        assert dying.app.calls == 4
    finally:
        alone.stop()
        dying.stop()


def test_a_replica_shutting_down_hands_its_responses_stream_to_another(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    # a Responses stream's error event has the Responses shape ({"type": "error", "code": ...})
    dying = ThreadedServer(ShuttingDown()).start()
    gw = replicated(tmp_path, [f"{dying.url}/v1", f"{upstream_server.url}/v1"],
                    "routing: {policy: round_robin}")  # fmt: skip
    try:
        body = {"model": "fake-model", "input": "hi", "stream": True}
        events = gw.http.post("/v1/responses", json=body).text
        assert "response.completed" in events and "shutting down" not in events
        assert dying.app.calls == 1 and routing_stats(gw)["replicas"][0]["down"]
    finally:
        gw.stop()
        dying.stop()


class Described(Replica):
    """A cachegate worker's model listing: ``GET /v1/models/{id}`` with its context window
    (``window=None``: an upstream whose entry has none, as OpenAI's)."""

    def __init__(self, window: int | None = 8192) -> None:
        super().__init__()
        self.window = window

    async def answer(self, send: Any) -> None:
        entry = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "cachegate"}
        if self.window is not None:
            entry["context_window"] = self.window
        await send_json(send, 200, entry)


class WebPage(Replica):
    """A base URL that is a web app's: every path a 200 HTML page."""

    async def answer(self, send: Any) -> None:
        headers = [(b"content-type", b"text/html; charset=utf-8")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"<!doctype html><p>Welcome</p>"})


@pytest.mark.parametrize("kind", ["no window", "a web page"])
def test_an_upstream_that_gives_no_context_window_is_asked_a_few_times_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # (a worker still loading gives none: it is asked again, but OpenAI never gives one, and
    # every listing asking it would cost each client a round trip to it; a 200 that is no
    # JSON (a web page) was asked again every 10 s forever)
    import gateway.upstream

    monkeypatch.setattr(gateway.upstream, "_WINDOW_RETRY_S", 0.0)
    openai = ThreadedServer(Described(window=None) if kind == "no window" else WebPage()).start()
    gw = replicated(tmp_path, [f"{openai.url}/v1"])
    try:
        for _ in range(10):
            assert "context_window" not in gw.http.get("/v1/models").json()["data"][0]
        assert openai.app.calls == gateway.upstream._WINDOW_ASKS < 10
    finally:
        gw.stop()
        openai.stop()


def test_models_give_the_context_window_the_workers_give(
    upstream_server: ThreadedServer, tmp_path: Path, refused_url: str
) -> None:
    """/v1/models of a gateway in front of workers had no ``context_window``, which the
    workers' own listing (a local model's) has: it is asked of them, the first replica that
    answers; an upstream that gives none (the fake, as OpenAI) leaves it out."""
    worker = ThreadedServer(Described()).start()
    replicas = replicated(tmp_path / "r", [refused_url, f"{worker.url}/v1"])
    single = replicated(tmp_path / "s", [f"{worker.url}/v1"])
    plain = replicated(tmp_path / "p", [f"{upstream_server.url}/v1"])
    try:
        for gw in (replicas, single):
            listed = gw.http.get("/v1/models").json()["data"]
            assert [m.get("context_window") for m in listed] == [8192]
            assert gw.http.get("/v1/models/fake-model").json()["context_window"] == 8192
        assert "context_window" not in plain.http.get("/v1/models/fake-model").json()
    finally:
        for gw in (replicas, single, plain):
            gw.stop()
        worker.stop()


class BusyDescribed(Described):
    """A worker that describes its model at once while each chat request holds its
    connection for 3 s (then gets that description: no answer)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            self.calls += 1
            await asyncio.sleep(3)
        await super().__call__(scope, receive, send)


def test_models_give_the_context_window_while_every_connection_is_in_use(
    tmp_path: Path,
) -> None:
    """``max_connections: 1``, in use by a long request: ``/v1/models`` asked the worker for
    its context window behind it, waited for a connection (``timeout.pool``) in vain, and
    listed the model without one, as the liveness check (``answers``) had been held."""
    worker = ThreadedServer(BusyDescribed()).start()
    gw = replicated(tmp_path, [f"{worker.url}/v1"], "max_connections: 1, timeout: {pool: 1}")
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            held = pool.submit(gw.chat, "a long answer")
            wait_for(lambda: worker.app.calls == 1)
            assert gw.http.get("/v1/models/fake-model").json().get("context_window") == 8192
            held.result()
    finally:
        gw.stop()
        worker.stop()


class SignedDescribed(Described):
    """A worker behind a signed URL: only a request with its ``?sig=`` is answered (403)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("query_string") != b"sig=s3cret":
            await send({"type": "http.response.start", "status": 403, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        await super().__call__(scope, receive, send)


def test_models_ask_a_signed_base_url_for_the_context_window_with_its_query(
    tmp_path: Path,
) -> None:
    """A base URL's query (a signed ?sig=, Azure's ?api-version=) goes on every request,
    the model description too: without it the worker refused, and the listing had no
    ``context_window``."""
    worker = ThreadedServer(SignedDescribed()).start()
    gw = replicated(tmp_path, [f"{worker.url}/v1?sig=s3cret"])
    try:
        assert gw.http.get("/v1/models/fake-model").json().get("context_window") == 8192
    finally:
        gw.stop()
        worker.stop()


def test_replica_that_accepts_but_never_answers_is_avoided(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as hung:  # the kernel accepts connections; nobody ever answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)
        urls = [f"http://127.0.0.1:{hung.getsockname()[1]}/v1", f"{upstream_server.url}/v1"]
        gw = replicated(tmp_path, urls, "max_retries: 1, timeout: {read: 0.5}")
        try:
            ask_support(gw, 6)
            # one read timeout, failed over; then the hung replica is down for down_for
            assert upstream.stats["chat"] == 6
            assert routing_stats(gw)["replicas"][0]["down"]
        finally:
            gw.stop()


def a_novel(url: str, content: str = "write a novel") -> openai.APIStatusError:
    """The error the openai SDK (its 2 retries on) raises for a 2 s generation asked of the
    gateway at ``url`` (one slower than the ``timeout.read`` these tests set)."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=2)
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": content}],
            extra_body={"fake": {"delay": 2}},
        )  # fmt: skip
    return failed.value


def test_a_generation_longer_than_the_read_timeout_marks_no_replica_down(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A non-streamed answer sends nothing until it is done: one slower than ``timeout.read``
    times out on a replica that answers ``GET /models``: slow, not hung. It marked every
    replica down, and each forgot its prefixes; then it failed over, so the generation ran
    (and was billed) on two replicas, and its client waited two read timeouts for the 504.
    Nor does the openai SDK send it again: the 504 says ``x-should-retry: false`` (it had
    none on a first try, and each of the SDK's retries ran the generation once more)."""
    with with_a_second(upstream_server, tmp_path, "max_retries: 1, timeout: {read: 0.5}") as (
        gw, second,
    ):  # fmt: skip
        ask_support(gw, 1)  # (remembered by one replica)
        timed_out = a_novel(gw.url)
        assert timed_out.status_code == 504
        assert timed_out.code == "upstream_timeout"
        assert timed_out.response.headers.get("x-should-retry") == "false"
        assert upstream.stats["chat"] + second.app.stats["chat"] == 2  # (no failover, no retry)
        replicas = routing_stats(gw)["replicas"]
        assert [r["down"] for r in replicas] == [False, False]
        assert sum(r["remembered_bytes"] for r in replicas) > 0


def test_a_gateway_in_front_sends_a_slow_replicas_504_no_more_than_the_sdk_does(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """front gateway (``max_retries: 2``) -> a gateway over two replicas, one slower than its
    ``timeout.read``: that gateway's 504 says ``x-should-retry: false`` (the generation still
    runs there), which the front obeys as the openai SDK does, and says on to its own client.
    It retried the 504 twice, and the slow replica ran the generation three times."""
    with with_a_second(upstream_server, tmp_path, "timeout: {read: 0.5}") as (gw, second):
        front = Gateway(load_config_text(f"""
data_dir: {tmp_path / "front"}
cache: {{enabled: false}}
models:
  fake-model: {{backend: openai, base_url: "{gw.url}/v1", retry_backoff: 0.01}}
"""))  # fmt: skip
        try:
            failed = a_novel(front.url)
        finally:
            front.stop()
        assert "HTTP 504" in failed.message, failed
        assert failed.response.headers.get("x-should-retry") == "false"
        assert upstream.stats["chat"] + second.app.stats["chat"] == 1  # (sent once, in all)


def test_a_slow_replica_whose_connections_are_all_in_use_is_not_taken_for_hung(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A generation longer than ``timeout.read`` on a replica whose ``max_connections`` are all
    in use, another request waiting for one: the freed connection goes to that request, and
    the ``GET /models`` that tells slow from hung waited behind it for ``timeout.pool`` in
    vain. The replica (it answers at once) was marked down, forgot its prefixes, and the
    request failed over and ran on the other replica too."""
    settings = "max_retries: 1, max_connections: 2, timeout: {read: 1, pool: 3}"
    talk = [{"role": "user", "content": "Tell me about the ACME support plans, at length."}]
    endless = {"fake": {"endless": True, "chunk_delay": 0.2}}
    with with_a_second(upstream_server, tmp_path, settings) as (gw, second), \
            concurrent.futures.ThreadPoolExecutor(2) as pool:  # fmt: skip
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)

        def chat(**options: Any) -> Any:
            return client.chat.completions.create(model="fake-model", messages=talk, **options)

        def called() -> int:
            return int(upstream.stats["chat"] + second.app.stats["chat"])

        held = chat(stream=True, extra_body=endless)  # one connection, held
        next(iter(held))
        slow = pool.submit(chat, extra_body={"fake": {"delay": 5}})  # the other
        wait_for(lambda: called() == 2)
        waiting = pool.submit(chat, stream=True, extra_body=endless)  # (same replica: prefix)
        with pytest.raises(openai.InternalServerError) as timed_out:
            slow.result()
        assert timed_out.value.status_code == 504
        assert timed_out.value.code == "upstream_timeout"
        waiting.result().close()
        held.close()
        assert called() == 3  # (the slow one ran once: no failover)
        assert not any(r["down"] for r in routing_stats(gw)["replicas"])


def test_a_slow_replicas_timeout_after_a_failover_tells_the_sdk_not_to_retry(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """A hung replica, then (failed over) a live one slower than ``timeout.read``: the 504
    comes after the gateway's own retry, so it says ``x-should-retry: false``, as when the
    last replica was hung too. Without it the openai SDK sent the request twice more, and
    the slow replica ran the generation three times. The failover's log line says the hung
    one timed out (it said ``HTTP 504``, an answer that replica never sent)."""
    import logging
    import socket

    caplog.set_level(logging.INFO, logger="gateway.upstream")

    with socket.socket() as hung:  # the kernel accepts connections; nobody ever answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)
        urls = [f"http://127.0.0.1:{hung.getsockname()[1]}/v1", f"{upstream_server.url}/v1"]
        settings = "max_retries: 1, timeout: {read: 0.5}, routing: {policy: round_robin}"
        gw = replicated(tmp_path, urls, settings)
        try:
            timed_out = a_novel(gw.url, "a novel")
            assert timed_out.status_code == 504
            assert timed_out.response.headers.get("x-should-retry") == "false"
            assert upstream.stats["chat"] == 1  # (failed over to once; not retried by the SDK)
            assert [r["down"] for r in routing_stats(gw)["replicas"]] == [True, False]
            assert "replica 0 failed (upstream_timeout); trying another" in caplog.text
        finally:
            gw.stop()


def test_a_slow_follow_up_is_not_run_again_on_another_replica(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A ``previous_response_id`` follow-up slower than ``timeout.read`` on the (live) replica
    that made its previous response: a 504, not the conversation sent to the other replica
    as though that one had died (it ran there too)."""
    with with_a_second(upstream_server, tmp_path, "timeout: {read: 0.5}") as (gw, second):
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
        made = client.responses.create(model="fake-model", input="start").id
        before = upstream.stats["responses"] + second.app.stats["responses"]
        with pytest.raises(openai.APIStatusError) as timed_out:
            client.responses.create(model="fake-model", input="then", previous_response_id=made,
                                    extra_body={"fake": {"delay": 2}})  # fmt: skip
        assert timed_out.value.status_code == 504
        assert upstream.stats["responses"] + second.app.stats["responses"] == before + 1
        assert not any(r["down"] for r in routing_stats(gw)["replicas"])


def test_readyz_stays_200_with_every_replica_down(tmp_path: Path, refused_url: str) -> None:
    """Every gateway replica sees the same workers: a 503 would pull them all from the load
    balancer at once, cache hits and other models too (as Redis down keeps it 200)."""
    import socket

    with socket.socket() as other:  # (bound, not listening: refused)
        other.bind(("127.0.0.1", 0))
        urls = [refused_url, f"http://127.0.0.1:{other.getsockname()[1]}/v1"]
        gw = replicated(tmp_path, urls)
        try:
            failed = gw.chat("anyone there?")
            assert failed.status_code == 502 and "upstream_unreachable" in failed.text
            assert [r["down"] for r in routing_stats(gw)["replicas"]] == [True, True]
            ready = gw.http.get("/readyz")
            assert ready.status_code == 200 and ready.json()["status"] == "ready"
        finally:
            gw.stop()


def test_an_error_not_retried_does_not_tell_clients_to_stop(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path, refused_url: str
) -> None:
    """A refused replica, then a 429 with a long Retry-After, max_retries 0: the 429 was
    never retried, so the client's SDK may wait it out (no x-should-retry: false)."""
    gw = replicated(
        tmp_path, [refused_url, f"{upstream_server.url}/v1"], "routing: {policy: round_robin}"
    )
    try:
        response = gw.chat("busy", fake={"status": 429, "retry_after": "30"})
        assert response.status_code == 429 and response.headers["retry-after"] == "30"
        assert "x-should-retry" not in response.headers
    finally:
        gw.stop()


def test_a_replica_with_every_connection_busy_hands_the_request_to_another(
    upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    """max_connections 1: while a slow answer holds the replica that prefix affinity picks,
    the next request with that prefix waits ``timeout.pool`` for it, then goes to the other
    replica (it was never sent) instead of failing 503 ``upstream_busy``."""
    other = ThreadedServer(FakeUpstream()).start()
    urls = [f"{upstream_server.url}/v1", f"{other.url}/v1"]
    gw = replicated(tmp_path, urls, "max_connections: 1, timeout: {pool: 0.3}")
    try:

        def ask(question: str, **fake: Any) -> httpx.Response:
            body = {"model": "fake-model", "fake": fake,
                    "messages": [SUPPORT, {"role": "user", "content": question}]}  # fmt: skip
            return gw.http.post("/v1/chat/completions", json=body)

        assert ask("warm").status_code == 200  # the prefix now routes to one replica

        def arrived() -> int:
            return int(upstream_server.app.stats["chat"] + other.app.stats["chat"])

        before = arrived()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            slow = pool.submit(ask, "slow", delay=3)
            # until the slow answer holds its replica's one connection
            wait_for(lambda: arrived() > before, timeout=2.5)
            assert arrived() == before + 1
            quick = ask("quick")
            assert quick.status_code == 200, quick.text
            assert slow.result().status_code == 200
        assert 'why="failover"} 1.0' in gw.http.get("/metrics").text
        assert not any(r["down"] for r in routing_stats(gw)["replicas"])  # busy is not down
    finally:
        gw.stop()
        other.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_a_follow_up_whose_replica_died_goes_on_with_the_conversation_elsewhere(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path, stream: bool
) -> None:
    with with_a_second(upstream_server, tmp_path) as (gw, second):
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
        made = question = ""
        for n in range(8):  # until one is made by the second replica (new prompts alternate)
            question = f"topic {n}" * 20
            made = client.responses.create(model="fake-model", input=question).id
            if second.app.stats["responses"]:
                break
        assert second.app.stats["responses"] == 1
        second.stop()  # (a killed worker: it holds the earlier response no more)
        for turn in ("then", "and then"):  # the second: with that replica known to be down
            asked = {"model": "fake-model", "input": turn, "previous_response_id": made}
            if stream:
                with client.responses.stream(**asked) as events:
                    follow_up = events.get_final_response()
            else:
                follow_up = client.responses.create(**asked)
            assert follow_up.output_text  # not a 502: the other replica answered
            sent = upstream.last_body  # with the conversation this gateway holds
            assert "previous_response_id" not in sent
            assert question in str(sent["input"]) and turn in str(sent["input"])
        assert routing_stats(gw)["replicas"][1]["down"]


def test_deleting_a_response_whose_replica_died_is_a_503_to_send_again(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """The replica that made it cannot say whether it still holds it: nothing is deleted, and
    the SDK may retry (it was a 502 with ``x-should-retry: false``); once the worker is back
    (holding no responses), the delete goes through."""
    with with_a_second(upstream_server, tmp_path, "routing: {down_for: 7}") as (gw, second):
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
        second.app._serial = 10**6  # (the fakes number their ids alike: resp_1, ...)
        made = ""
        for n in range(8):  # until one is made by the second replica (new prompts alternate)
            made = client.responses.create(model="fake-model", input=f"topic {n}" * 20).id
            if second.app.stats["responses"]:
                break
        assert second.app.stats["responses"] == 1
        second.stop()  # (a killed worker)
        with pytest.raises(openai.APIStatusError) as refused:
            client.responses.delete(made)
        error = refused.value
        assert error.status_code == 503 and error.code == "upstream_unavailable"
        assert "nothing was deleted" in error.message and made in error.message
        assert error.response.headers["retry-after"] == "7"
        assert "x-should-retry" not in error.response.headers
        assert client.responses.retrieve(made).id == made  # kept here too
        second = ThreadedServer(FakeUpstream(), port=second.port).start()  # restarted, empty
        try:
            client.responses.delete(made)
            with pytest.raises(openai.NotFoundError):
                client.responses.retrieve(made)
        finally:
            second.stop()


def test_a_pinned_follow_up_whose_replica_fails_gets_that_failure_without_the_conversation(
    tmp_path: Path,
) -> None:
    first, second = ThreadedServer(FakeUpstream()).start(), ThreadedServer(FakeUpstream()).start()
    gw = replicated(tmp_path, [f"{first.url}/v1", f"{second.url}/v1"])
    try:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
        direct = openai.OpenAI(base_url=f"{second.url}/v1", api_key="k", max_retries=0)
        elsewhere = direct.responses.create(model="fake-model", input="made elsewhere").id
        # made by the second replica (the only one that holds `elsewhere`), on a conversation
        # whose start this gateway does not hold
        made = client.responses.create(
            model="fake-model", input="then", previous_response_id=elsewhere
        ).id
        second.stop()
        with pytest.raises(openai.APIStatusError) as failed:  # not the other replica's 400
            client.responses.create(model="fake-model", input="then", previous_response_id=made)
        assert failed.value.status_code == 502
    finally:
        gw.stop()
        first.stop()


class HungAfterHeaders(Replica):
    """A replica that sends a stream's headers at once, then nothing (a worker whose engine
    hangs: vLLM and cachegate workers send the headers before the first token)."""

    async def answer(self, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await asyncio.sleep(3600)


def test_a_replica_whose_streams_hang_after_their_headers_is_avoided(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    hung = ThreadedServer(HungAfterHeaders()).start()
    urls = [f"{hung.url}/v1", f"{upstream_server.url}/v1"]
    gw = replicated(tmp_path, urls, "max_retries: 1, timeout: {read: 0.5}")
    try:
        for i in range(4):  # each would go where the first went: the prefix is remembered
            body = {"model": "fake-model", "stream": True,
                    "messages": [SUPPORT, {"role": "user", "content": f"question {i}"}]}  # fmt: skip
            response = gw.http.post("/v1/chat/completions", json=body)
            assert response.status_code == 200 and response.text.endswith("data: [DONE]\n\n")
        # its first stream failed over before any byte reached the client; then it is down
        # (the second call: the GET /models that found it hung, not slow)
        assert upstream.stats["chat"] == 4 and hung.app.calls <= 2
        assert routing_stats(gw)["replicas"][0]["down"]
    finally:
        gw.stop()
        hung.stop()


class StallsAfterItsFirstEvent(Replica):
    """A replica whose engine hangs after a stream's first event: nothing more comes, and its
    ``GET /models`` hangs the same way."""

    async def answer(self, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        first = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]}  # fmt: skip
        event = b"data: " + json.dumps(first).encode() + b"\n\n"
        await send({"type": "http.response.body", "body": event, "more_body": True})
        await asyncio.sleep(3600)


def test_a_replica_whose_stream_stalls_after_its_first_event_is_avoided(
    upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    hung = ThreadedServer(StallsAfterItsFirstEvent()).start()
    urls = [f"{hung.url}/v1", f"{upstream_server.url}/v1"]
    gw = replicated(tmp_path, urls, "timeout: {read: 0.5}, routing: {policy: round_robin}")
    try:
        stalled = gw.chat("stall", stream=True)  # (round robin: the first replica first)
        assert '"code":"upstream_timeout"' in stalled.text  # (the client had its first event)
        assert [r["down"] for r in routing_stats(gw)["replicas"]] == [True, False]
    finally:
        gw.stop()
        hung.stop()


def test_a_live_replica_whose_stream_stalls_after_its_first_event_is_not_avoided(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A stream quiet for ``timeout.read`` after its first event, from a replica that answers
    ``GET /models``: slow, not hung, as for a request that times out before it (``_down``). It
    was marked down without asking, and forgot its prefixes."""
    with with_a_second(upstream_server, tmp_path, "timeout: {read: 0.5}") as (gw, _):
        ask_support(gw, 1)  # (remembered by one replica)
        stalled = gw.chat("stall", stream=True, fake={"chunk_delay": 3})
        assert '"code":"upstream_timeout"' in stalled.text  # (the client had its first event)
        replicas = routing_stats(gw)["replicas"]
        assert [r["down"] for r in replicas] == [False, False]
        assert sum(r["remembered_bytes"] for r in replicas) > 0


def test_a_replica_that_is_not_loading_is_not_asked_twice(tmp_path: Path, refused_url: str) -> None:
    """A replica whose 503 is not ``model_loading`` (here a worker whose model failed to load,
    as an upstream overloaded) is not the loading worker that is asked again, without
    ``x-cachegate-if-ready``, when every other replica failed too: each request asked it twice
    (max_retries 0), one more call to a replica that could not take it."""
    broken = ThreadedServer(Unavailable()).start()
    gw = replicated(tmp_path, [f"{broken.url}/v1", refused_url], "routing: {policy: round_robin}")
    try:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
        for i in range(2):  # (round robin: each replica is asked first once)
            with pytest.raises(openai.APIStatusError):
                client.chat.completions.create(
                    model="fake-model", messages=[{"role": "user", "content": f"q{i}"}]
                )
        assert broken.app.calls == 2  # once a request
    finally:
        gw.stop()
        broken.stop()
