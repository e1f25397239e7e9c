"""POST /v1/messages with the official anthropic SDK: an Anthropic upstream (the fake in
tests/fake_anthropic.py) and an OpenAI one through the chat bridge; the response cache, errors,
automatic prompt caching, cross-API scopes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import msgspec
import openai
import pydantic
import pytest
import yaml

from gateway import messages_bridge
from gateway.cli import main
from gateway.config import load_config_text
from gateway.messages import encode_event
from gateway.requests import tenant_partition
from tests.browser import Browser
from tests.conftest import Gateway, wait_for
from tests.fake_anthropic import FakeAnthropic
from tests.fake_upstream import FakeUpstream, ThreadedServer, read_body, send_json

SYSTEM = "You answer questions about the ACME hardware store. Prices include VAT. " * 12


@pytest.fixture(scope="module")
def fake_server() -> Iterator[ThreadedServer]:
    server = ThreadedServer(FakeAnthropic(min_cacheable=50)).start()
    yield server
    server.stop()


@pytest.fixture
def fake(fake_server: ThreadedServer) -> FakeAnthropic:
    app: FakeAnthropic = fake_server.app
    app.reset()
    return app


def config(fake_url: str, openai_url: str, data_dir: Path, **extra: Any) -> str:
    claude = {"backend": "anthropic", "base_url": fake_url, "api_key": "sk-ant-test",
              "upstream_model": "claude-sonnet-4-5", "retry_backoff": 0.01,
              "prompt_caching": {"min_tokens": 50}}  # fmt: skip
    models = {
        "claude": claude,
        "claude-plain": {**claude, "prompt_caching": {"enabled": False}},
        "claude-client-key": {**claude, "api_key": None},
        "gpt": {"backend": "openai", "base_url": f"{openai_url}/v1", "api_key": "sk-test"},
    }
    return yaml.safe_dump({"data_dir": str(data_dir), "models": models,
                           "cache": {"semantic": {"enabled": False}}, **extra})  # fmt: skip


@pytest.fixture
def gw(
    fake_server: ThreadedServer, upstream_server: ThreadedServer, tmp_path: Path
) -> Iterator[Gateway]:
    with Gateway(
        load_config_text(config(fake_server.url, upstream_server.url, tmp_path))
    ) as gateway:
        yield gateway


@pytest.fixture
def client(gw: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key="sk-ant-test", max_retries=0)


def ask(client: anthropic.Anthropic, question: str, **kwargs: Any) -> Any:
    """``messages.create`` with the raw response, so the x-cache header can be read."""
    params = {"model": "claude", "max_tokens": 64, **kwargs}
    params.setdefault("messages", [{"role": "user", "content": question}])
    return client.messages.with_raw_response.create(**params)


def invalid_request(message: str) -> dict[str, Any]:
    """The body of an Anthropic ``invalid_request_error`` that says ``message``."""
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def test_create_then_exact_hit_never_reaches_upstream(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    first = ask(client, "Do you sell hammers?")
    assert first.headers["x-cache"] == "miss"
    message = first.parse()
    text = message.content[0].text
    assert text.startswith("answer #") and text.endswith(" to: Do you sell hammers?")
    assert message.stop_reason == "end_turn" and message.usage.output_tokens > 0
    assert fake.bodies[-1]["model"] == "claude-sonnet-4-5"  # upstream_model
    sent_version = first.http_request.headers["anthropic-version"]
    assert fake.headers[-1]["anthropic-version"] == sent_version  # the client's own
    # a cachegate in the upstream's place keeps this gateway's tenants apart by it
    partition = fake.headers[-1]["x-cachegate-partition"]
    assert partition == tenant_partition("default", "sk-ant-test")
    assert "cache-control" not in fake.headers[-1]
    second = ask(client, "Do you sell hammers?")
    assert second.headers["x-cache"] == "exact"
    again = second.parse()
    assert again.content[0].text == message.content[0].text and again.id != message.id
    assert fake.stats["/v1/messages"] == 1


def test_stream_is_relayed_cached_and_replayed_as_messages_events(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    params = {"model": "claude", "max_tokens": 64,
              "messages": [{"role": "user", "content": "Opening hours?"}]}  # fmt: skip
    with client.messages.stream(**params) as stream:
        streamed = "".join(stream.text_stream)
        fresh = stream.get_final_message()
    assert streamed == fresh.content[0].text and fresh.stop_reason == "end_turn"
    with client.messages.with_streaming_response.create(**params, stream=True) as raw:
        assert raw.headers["x-cache"] == "exact"
        lines = [line for line in raw.iter_lines() if line.startswith("event: ")]
    assert lines[0] == "event: message_start" and lines[-1] == "event: message_stop"
    assert {"event: content_block_delta", "event: message_delta", "event: ping"} <= set(lines)
    with client.messages.stream(**params) as stream:
        replayed = stream.get_final_message()
    assert replayed.content[0].text == streamed and replayed.stop_reason == "end_turn"
    assert replayed.usage.output_tokens == fresh.usage.output_tokens
    assert ask(client, "Opening hours?").headers["x-cache"] == "exact"  # JSON from a stream
    assert fake.stats["/v1/messages"] == 1


def test_null_counts_in_a_message_delta_keep_those_of_message_start(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    """``message_delta``'s usage counts are nullable (the SDK keeps ``message_start``'s for a
    null one): the stored message, and a hit replayed as JSON or as a stream, has the counts
    the client's SDK assembled from the original stream (was: null input tokens on a hit)."""
    nulls = {"input_tokens": None, "cache_read_input_tokens": None,
             "cache_creation_input_tokens": None, "server_tool_use": None}  # fmt: skip
    params: dict[str, Any] = {"model": "claude-plain", "max_tokens": 64,
              "messages": [{"role": "user", "content": "Opening hours?"}],
              "extra_body": {"fake": {"delta_usage": nulls}}}  # fmt: skip
    with client.messages.stream(**params) as stream:
        fresh = stream.get_final_message()
    assert stream.response.headers["x-cache"] == "miss"
    assert fresh.usage.input_tokens > 0 and fresh.usage.cache_read_input_tokens == 0
    with client.messages.stream(**params) as stream:
        replayed = stream.get_final_message()
    assert stream.response.headers["x-cache"] == "exact"
    usage = fresh.usage.model_dump()
    assert replayed.usage.model_dump() == usage
    hit = client.messages.with_raw_response.create(**params)
    assert hit.headers["x-cache"] == "exact" and hit.parse().usage.model_dump() == usage
    assert fake.stats["/v1/messages"] == 1


def test_a_message_deltas_context_management_is_stored_and_replayed(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    """The context editing beta reports the edits it applied in ``message_delta``'s own
    ``context_management`` (beside ``delta`` and ``usage``): a hit, streamed or JSON, reports
    them as the original stream did (was: left out of the stored message)."""
    applied = {"applied_edits": [{"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2,
                                  "cleared_input_tokens": 900}]}  # fmt: skip
    params: dict[str, Any] = {"model": "claude-plain", "max_tokens": 64,
              "messages": [{"role": "user", "content": "Opening hours?"}],
              "betas": ["context-management-2025-06-27"],
              "extra_body": {"fake": {"context_management": applied}}}  # fmt: skip
    finals = []
    for expected in ("miss", "exact"):
        with client.beta.messages.stream(**params) as stream:
            finals.append(stream.get_final_message())
        assert stream.response.headers["x-cache"] == expected
    hit = client.beta.messages.with_raw_response.create(**params)
    assert hit.headers["x-cache"] == "exact"
    for final in (*finals, hit.parse()):
        assert final.context_management is not None
        assert final.context_management.model_dump() == applied
    assert fake.stats["/v1/messages"] == 1


def test_a_message_streamed_in_many_pieces_is_folded_whole(
    fake_server: ThreadedServer, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    # 1 MB of text in 10,000 pieces (the fake streams a word a piece), folded into the stored
    # message (joined once at the end; timing is measured by hand, not here)
    with Gateway(load_config_text(config(fake_server.url, upstream_server.url, tmp_path))) as gw:
        text = " ".join(["x" * 99] * 10_000)
        body = {"model": "claude", "max_tokens": 64, "stream": True, "fake": {"content": text},
                "messages": [{"role": "user", "content": "long answer"}]}  # fmt: skip
        response = gw.http.post("/v1/messages", json=body)
        assert response.status_code == 200, response.text
        assert "event: message_stop" in response.text
        again = gw.http.post("/v1/messages", json={**body, "stream": False})
        assert again.headers["x-cache"] == "exact"
        assert again.json()["content"][0]["text"] == text


def test_tool_use_streams_and_replays_whole(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    tools = [{"name": "weather", "description": "Weather in a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]  # fmt: skip
    params = {"model": "claude", "max_tokens": 64, "tools": tools,
              "messages": [{"role": "user", "content": "Weather in Paris?"}],
              "extra_body": {"fake": {"tool_use": "weather"}}}  # fmt: skip
    for expected in ("miss", "exact"):
        with client.messages.stream(**params) as stream:
            final = stream.get_final_message()
        assert final.stop_reason == "tool_use"
        call = final.content[-1]
        assert (
            call.type == "tool_use" and call.name == "weather" and call.input == {"city": "Paris"}
        )
        assert stream.response.headers["x-cache"] == expected
    result = [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]
    follow = ask(client, "", tools=tools, messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [b.model_dump() for b in final.content]},
        {"role": "user", "content": result}])  # fmt: skip
    assert follow.headers["x-cache"] == "miss"
    assert fake.bodies[-1]["messages"][2]["content"][0]["tool_use_id"] == call.id


def test_validation_errors_use_anthropics_body(gw: Gateway, fake: FakeAnthropic) -> None:
    cases = [
        ({"model": "claude", "messages": [{"role": "user", "content": "x"}]},
         "max_tokens: Field required"),
        ({"model": "claude", "max_tokens": 5, "messages": [{"role": "bot", "content": "x"}]},
         "messages.0.role: Input should be 'user' or 'assistant'"),
        ({"model": "claude", "max_tokens": 5, "temperature": 1.5,
          "messages": [{"role": "user", "content": "x"}]},
         "temperature: Input should be between 0 and 1"),
        ({"model": "claude", "max_tokens": 5,
          "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
         "messages.0.content.0.tool_use_id: Field required"),
        ({"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": "yes"}]}]},
         "messages.0.content.0.is_error: Input should be a valid boolean"),  # (was accepted)
        # (was answered with an empty system prompt in place of the model's own, and stored)
        ({"model": "claude", "max_tokens": 5, "system": [{"type": "text", "text": ""}],
          "messages": [{"role": "user", "content": "x"}]},
         "system: text content blocks must be non-empty"),
        # (the chat bridge refused it as "'messages[0]' with role 'tool' …")
        ({"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12 C"}]}]},
         ORPHAN.format(0, "toolu_1")),
        ({"model": "claude", "max_tokens": 5, "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [CALL]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
            {"role": "assistant", "content": "Anything else?"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}]},
         ORPHAN.format(4, "toolu_1")),  # (a call two turns back is not the previous message)
    ]  # fmt: skip
    for body, message in cases:
        counted = ("/v1/messages/count_tokens",) if "max_tokens" in body else ()  # (takes none)
        for path in ("/v1/messages", *counted):
            response = gw.http.post(path, json=body)
            assert response.status_code == 400
            assert response.json() == invalid_request(message)
    # count_tokens takes no max_tokens; one sent is checked (was Python's int() error, or 200)
    for bad in ("x", "10", 5.5, True):
        body = {
            "model": "claude",
            "max_tokens": bad,
            "messages": [{"role": "user", "content": "x"}],
        }
        response = gw.http.post("/v1/messages/count_tokens", json=body)
        assert response.json() == invalid_request("max_tokens: Input should be a valid integer")
    response = gw.http.post("/v1/messages", content=b"{nope")
    assert response.status_code == 400 and response.json()["type"] == "error"
    assert fake.stats["/v1/messages"] == fake.stats["/v1/messages/count_tokens"] == 0
    # a tool's type of any JSON is its upstream's to judge: keying it was a 500 (a fuzzer's)
    for kind in ([], {}, ["x"], None, 3):
        body = {"model": "claude", "max_tokens": 5, "tools": [{"type": kind}],
                "messages": [{"role": "user", "content": f"tool typed {kind!r}"}]}  # fmt: skip
        response = gw.http.post("/v1/messages", json=body)
        assert response.status_code in (200, 400), response.text  # (the fake takes some)


#: Anthropic's refusal of a tool result that answers no call of the message before it.
ORPHAN = ("messages.{}.content.0: unexpected `tool_use_id` found in `tool_result` blocks: {}. "
          "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
          "message.")  # fmt: skip
CALL = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}


def test_integral_floats_are_integers(gw: Gateway, fake: FakeAnthropic) -> None:
    """``max_tokens: 64.0`` (or ``top_k: 3.0``) is the integer, as chat's integer fields take
    it since f9fa8f6 and Anthropic's validation reads it (was a 400 "Input should be a valid
    integer"); sent on as ``64``. ``64.5`` stays a 400."""
    body = {"model": "claude", "messages": [{"role": "user", "content": "x"}]}
    response = gw.http.post("/v1/messages", json={**body, "max_tokens": 64.0, "top_k": 3.0})
    assert response.status_code == 200, response.text
    sent = fake.bodies[-1]
    assert (sent["max_tokens"], sent["top_k"]) == (64, 3) and type(sent["max_tokens"]) is int
    assert gw.http.post("/v1/messages", json={**body, "max_tokens": 64.5}).status_code == 400


def test_sdk_errors_not_found_and_overloaded(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        ask(client, "hi", model="claude-nope")
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        ask(client, "hi", extra_body={"fake": {"status": 529}})
    assert overloaded.value.status_code == 529
    assert overloaded.value.response.headers["x-should-retry"] == "false"  # retried already
    assert fake.stats["/v1/messages"] == 3  # one try and max_retries (2) by the gateway


def test_an_overloaded_upstreams_retry_after_reaches_the_client(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    """A ``529 overloaded_error`` carries the upstream's ``retry-after`` to the client, as a
    ``429`` does (was: dropped, so the SDK retried within a second however long the upstream
    asked it to wait): here one longer than ``max_retry_wait``, not waited for here."""
    overloaded = {"status": 529, "retry_after": 30, "headers": {"request-id": "req_busy"}}
    with pytest.raises(anthropic.OverloadedError) as error:
        ask(client, "Busy?", model="claude-plain", extra_body={"fake": overloaded})
    assert error.value.status_code == 529
    assert error.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    headers = error.value.response.headers
    assert headers["retry-after"] == "30" and headers["request-id"] == "req_busy"
    assert "x-should-retry" not in headers  # not retried here: the client may
    streamed = {"model": "claude-plain", "max_tokens": 8, "extra_body": {"fake": overloaded},
                "messages": [{"role": "user", "content": "Busy?"}]}  # fmt: skip
    with pytest.raises(anthropic.OverloadedError) as error, client.messages.stream(**streamed):
        pass  # (refused before the stream opens, alike)
    assert error.value.response.headers["retry-after"] == "30"
    assert fake.stats["/v1/messages"] == 2


def test_the_sdk_retries_an_overload_when_its_retry_after_says(
    fake_server: ThreadedServer,
    upstream_server: ThreadedServer,
    tmp_path: Path,
    fake: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model that does not retry (``max_retries: 0``) passes the ``529`` on with its
    ``retry-after``: the anthropic SDK waits what it says (not its own backoff, about half a
    second) and sends the request again, which the upstream then answers."""
    settings = yaml.safe_load(config(fake_server.url, upstream_server.url, tmp_path))
    settings["models"]["claude-once"] = {**settings["models"]["claude-plain"], "max_retries": 0}
    waits: list[float] = []
    with Gateway(load_config_text(yaml.safe_dump(settings))) as gateway:
        sdk = anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-test", max_retries=2)
        planned = sdk._calculate_retry_timeout

        def noted(*args: Any, **kwargs: Any) -> float:  # the wait the SDK chose, then sleeps
            waits.append(planned(*args, **kwargs))
            return waits[-1]

        monkeypatch.setattr(sdk, "_calculate_retry_timeout", noted)
        once = {"status": 529, "fail_times": 1, "retry_after": 1}
        answered = ask(sdk, "Busy now?", model="claude-once", extra_body={"fake": once})
    assert answered.parse().content[0].text.endswith(" to: Busy now?")
    assert waits == [1.0]  # the upstream's retry-after, as the gateway relayed it
    assert fake.stats["/v1/messages"] == 2  # the overload, then the SDK's retry


def test_routes_the_gateway_lacks_answer_in_anthropics_body(
    gw: Gateway, client: anthropic.Anthropic
) -> None:
    """A route under /v1/messages the gateway does not serve (Message Batches), or any the
    anthropic SDK asks for: Anthropic's error body, which its SDK reads (was OpenAI's)."""
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.batches.list()
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    assert "/v1/messages/batches" in missing.value.message
    for method, path in (("POST", "/v1/messages/nope"), ("GET", "/v1/messages/count_tokens/x")):
        response = gw.http.request(method, path, json={})
        assert response.status_code == 404
        body = response.json()
        assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
        assert body["error"]["message"] == f"Unknown route: {method} {path}"
    refused = gw.http.get("/v1/messages")
    assert refused.status_code == 405 and refused.json()["type"] == "error"
    assert gw.http.get("/v2/nothing").json()["error"]["code"] == "not_found"  # OpenAI's still


def test_failed_or_refused_answers_are_never_stored(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    params = {"model": "claude", "max_tokens": 64,
              "messages": [{"role": "user", "content": "Tell me"}]}  # fmt: skip
    for fault in ({"error_after": 3}, {"break_after": 3}):
        with (
            pytest.raises(anthropic.APIError),
            client.messages.stream(**params, extra_body={"fake": fault}) as stream,
        ):
            stream.get_final_message()
    refusal = {"fake": {"stop_reason": "refusal"}}
    assert ask(client, "Tell me", extra_body=refusal).parse().stop_reason == "refusal"
    assert ask(client, "Tell me", extra_body=refusal).headers["x-cache"] == "miss"
    assert fake.stats["/v1/messages"] == 4


def test_a_stop_reason_of_unexpected_type_is_relayed_and_not_stored(
    gw: Gateway, fake: FakeAnthropic
) -> None:
    """(found by fuzzing: a list, unhashable, was a 500 ``internal_error``)"""
    body = {"model": "claude", "max_tokens": 8, "messages": [{"role": "user", "content": "odd"}],
            "fake": {"stop_reason": ["end_turn"]}}  # fmt: skip
    for _ in range(2):
        response = gw.http.post("/v1/messages", json=body)
        assert response.status_code == 200 and response.headers["x-cache"] == "miss"
        assert response.json()["stop_reason"] == ["end_turn"]
    assert fake.stats["/v1/messages"] == 2


def test_a_broken_stream_is_booked_with_the_input_tokens_it_reported(
    client: anthropic.Anthropic, fake: FakeAnthropic, gw: Gateway
) -> None:
    """Cut after its first text delta: ``message_start`` reported the input tokens, the
    output is estimated from the 40 characters streamed (its ``message_delta`` never came)."""
    messages = [{"role": "user", "content": "Tell me about hammers"}]
    cut = {"fake": {"content": "abcd" * 10, "break_after": 4}}  # start, block, ping, delta
    with (
        pytest.raises(anthropic.APIError),
        client.messages.stream(
            model="claude-plain", max_tokens=64, messages=messages, extra_body=cut
        ) as stream,
    ):
        stream.get_final_message()
    prompt = client.messages.count_tokens(model="claude-plain", messages=messages).input_tokens
    assert prompt > 0

    def row() -> dict[str, Any]:
        ledger = gw.http.get("/admin/stats").json()["ledger"]
        return dict(ledger.get("default", {}).get("claude-plain", {}))

    wait_for(lambda: row().get("ended_early") == 1)
    assert (row()["model_calls"], row()["input_tokens"], row()["output_tokens"]) == (1, prompt, 10)


def test_unknown_fields_and_headers_go_upstream_untouched(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    ask(client, "hi", extra_body={"custom": {"a": [1, 2]}},
        extra_headers={"anthropic-beta": "some-feature-2026"})  # fmt: skip
    assert fake.bodies[-1]["custom"] == {"a": [1, 2]}
    assert fake.headers[-1]["anthropic-beta"] == "some-feature-2026"
    assert fake.headers[-1]["x-api-key"] == "sk-ant-test"


def test_anthropic_beta_on_several_lines_is_one_list(gw: Gateway, fake: FakeAnthropic) -> None:
    """Lines of a list header combine (RFC 9110 5.3): the first alone went upstream and into
    the key, so a request naming only that beta hit an answer made under both."""
    body = {"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "b"}]}
    sent = [("x-api-key", "sk-ant-test"), ("anthropic-version", "2023-06-01")]

    def post(*betas: str) -> httpx.Response:
        lines = sent + [("anthropic-beta", beta) for beta in betas]
        return gw.http.post("/v1/messages", json=body, headers=lines)

    assert post("beta-one", "beta-two").headers["x-cache"] == "miss"
    assert fake.headers[-1]["anthropic-beta"] == "beta-one,beta-two"
    assert post("beta-one, beta-two").headers["x-cache"] == "exact"  # (the same list)
    assert post("beta-one").headers["x-cache"] == "miss"
    assert fake.headers[-1]["anthropic-beta"] == "beta-one"
    twice = gw.http.post("/v1/messages", json=body,
                         headers=[*sent, ("anthropic-version", "2023-06-01")])  # fmt: skip
    assert twice.status_code == 400 and twice.json()["type"] == "error"
    assert "anthropic-version" in twice.json()["error"]["message"]


def test_output_changing_fields_and_headers_are_in_the_scope(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    """Each variation changes what the answer may be: each must reach the upstream."""
    base: dict[str, Any] = {"system": "Be brief."}
    variations: list[dict[str, Any]] = [
        {}, {"system": "Be verbose."}, {"extra_body": {"top_k": 5}},  # (no SDK argument)
        {"extra_body": {"temperature": 0.5}}, {"max_tokens": 9},
        {"output_config": {"effort": "low"}},
        {"stop_sequences": ["\n"]}, {"tool_choice": {"type": "none"}, "tools": []},
        {"extra_headers": {"anthropic-beta": "x"}}, {"extra_headers": {"x-cache-namespace": "n"}},
        {"messages": [{"role": "user", "content": "Earlier"},
                      {"role": "assistant", "content": "Ok"},
                      {"role": "user", "content": "Same question"}]},
        {"extra_body": {"thinking": {"type": "disabled"}}},
    ]  # fmt: skip
    for variation in variations:
        params = {**base, **variation}
        assert ask(client, "Same question", **params).headers["x-cache"] == "miss", variation
    assert fake.stats["/v1/messages"] == len(variations)
    assert ask(client, "Same question", **base).headers["x-cache"] == "exact"


def test_openai_only_fields_are_in_the_scope_of_a_messages_request(
    client: anthropic.Anthropic, fake: FakeAnthropic, upstream: FakeUpstream
) -> None:
    """``user``, ``store``, ``stream_options``, ``safety_identifier`` and ``prompt_cache_key``
    change no chat answer, but the Messages API has no such fields: the chat bridge refuses
    them, as Anthropic does. A hit must not answer them (was: an exact hit of the entry of the
    request without them, where a miss is a 400); ``metadata`` is this API's own."""
    foreign: list[dict[str, Any]] = [
        {"user": "bob"}, {"store": True}, {"stream_options": {"include_usage": True}},
        {"safety_identifier": "bob"}, {"prompt_cache_key": "k"},
    ]  # fmt: skip
    assert ask(client, "Same question", model="gpt").headers["x-cache"] == "miss"
    for extra in foreign:
        with pytest.raises(anthropic.BadRequestError) as refused:
            ask(client, "Same question", model="gpt", extra_body=extra)
        assert f"'{next(iter(extra))}' is not supported" in refused.value.message
    assert upstream.stats["chat"] == 1
    assert ask(client, "Same question").headers["x-cache"] == "miss"
    for extra in foreign:
        assert ask(client, "Same question", extra_body=extra).headers["x-cache"] == "miss", extra
    owned = ask(client, "Same question", metadata={"user_id": "u1"}, service_tier="auto")
    assert owned.headers["x-cache"] == "exact"
    assert fake.stats["/v1/messages"] == 1 + len(foreign)


def test_metadata_and_service_tier_are_checked_on_a_hit_as_on_a_miss(
    client: anthropic.Anthropic, fake: FakeAnthropic, upstream: FakeUpstream
) -> None:
    """``metadata`` and ``service_tier`` are outside the cache key, and the chat bridge sends
    neither: values Anthropic refuses are a 400 in its words for every model, not an exact hit
    of the entry of the request without them (was: a 200 from the cache, or from the bridge)."""
    refused: list[tuple[dict[str, Any], str]] = [
        ({"service_tier": "bogus"}, "service_tier: Input should be 'auto' or 'standard_only'"),
        ({"metadata": {"user_id": 5}}, "metadata.user_id: Input should be a valid string"),
        ({"metadata": {"user_id": "u" * 257}},
         "metadata.user_id: String should have at most 256 characters"),
        ({"metadata": "u1"}, "metadata: Input should be a valid dictionary"),
        # (only user_id: was an exact hit, or the bridge's 200, for what Anthropic refuses)
        ({"metadata": {"user_id": "u1", "session_id": "s1"}},
         "metadata.session_id: Extra inputs are not permitted"),
    ]  # fmt: skip
    for model in ("claude", "gpt"):
        assert ask(client, "Same question", model=model).headers["x-cache"] == "miss"
        for extra, message in refused:
            with pytest.raises(anthropic.BadRequestError) as error:
                ask(client, "Same question", model=model, extra_body=extra)
            assert error.value.body == invalid_request(message), (model, extra)
        kept = {"metadata": {"user_id": "u" * 256}, "service_tier": "standard_only"}
        assert ask(client, "Same question", model=model, **kept).headers["x-cache"] == "exact"
    assert fake.stats["/v1/messages"] == upstream.stats["chat"] == 1


EMPTY = "all messages must have non-empty content except for the optional final assistant message"


def test_empty_turns_are_refused_but_a_final_assistant_one_for_every_model(
    client: anthropic.Anthropic, fake: FakeAnthropic, upstream: FakeUpstream
) -> None:
    """Anthropic refuses a turn whose content is ``""`` or ``[]`` but the final assistant one
    (a prefill): so does the gateway for every model, before the cache and the upstream (was:
    the chat bridge read ``[]`` as ``""`` and its backend answered, and the answer was
    stored); an empty final assistant turn is answered, as Anthropic answers it."""
    hi, again = {"role": "user", "content": "Hi"}, {"role": "user", "content": "Again?"}
    refused: list[tuple[list[dict[str, Any]], int]] = []
    for empty in ("", []):
        refused += [
            ([{"role": "user", "content": empty}], 0),
            ([hi, {"role": "assistant", "content": empty}, again], 1),
            ([hi, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": empty}], 2),
            ([{"role": "user", "content": empty}, {"role": "assistant", "content": "Hello"}], 0),
        ]  # fmt: skip
    for model in ("claude", "gpt"):
        for messages, index in refused:
            with pytest.raises(anthropic.BadRequestError) as error:
                ask(client, "", model=model, messages=messages)
            assert error.value.body == invalid_request(f"messages.{index}: {EMPTY}"), messages
        streamed = {"model": model, "max_tokens": 8, "messages": refused[1][0]}
        with pytest.raises(anthropic.BadRequestError) as error, client.messages.stream(**streamed):
            pass  # (streamed alike)
        assert error.value.body == invalid_request(f"messages.1: {EMPTY}")
    with pytest.raises(anthropic.BadRequestError) as error:
        client.messages.count_tokens(model="claude", messages=refused[0][0])
    assert error.value.body == invalid_request(f"messages.0: {EMPTY}")
    assert not fake.stats and upstream.stats["requests"] == 0
    for model in ("claude", "gpt"):
        for empty in ("", []):
            prefill = [hi, {"role": "assistant", "content": empty}]
            answered = ask(client, "", model=model, messages=prefill)
            assert answered.headers["x-cache"] == "miss", (model, empty)
            assert answered.parse().content[0].text
    assert fake.bodies[-1]["messages"][-1] == {"role": "assistant", "content": []}
    assert upstream.last_body["messages"][-1] == {"role": "assistant", "content": ""}
    assert fake.stats["/v1/messages"] == upstream.stats["chat"] == 2


BLANK = "messages: text content blocks must contain non-whitespace text"
NO_TEXT = "messages: text content blocks must be non-empty"
TRAILING = "messages: final assistant content cannot end with trailing whitespace"


def blank_turns() -> list[tuple[list[dict[str, Any]], str]]:
    """Turns Anthropic refuses for their text, each with the message it says (no index)."""
    hi = {"role": "user", "content": "Hi"}

    def text(*texts: str) -> list[dict[str, Any]]:
        return [{"type": "text", "text": t} for t in texts]

    return [
        ([{"role": "user", "content": text("")}], NO_TEXT),
        ([{"role": "user", "content": text("Hi", "")}], NO_TEXT),
        ([hi, {"role": "assistant", "content": text("")}], NO_TEXT),  # (even a prefill)
        ([{"role": "user", "content": text(" ")}], BLANK),
        ([{"role": "user", "content": " \n"}], BLANK),
        ([hi, {"role": "assistant", "content": text("\n", "\t")}, hi], BLANK),
        ([hi, {"role": "assistant", "content": "Hello "}], TRAILING),
        ([hi, {"role": "assistant", "content": text("Hello", "there\n")}], TRAILING),
    ]


def test_empty_or_blank_text_and_a_prefill_ending_in_whitespace_are_refused(
    client: anthropic.Anthropic, fake: FakeAnthropic, upstream: FakeUpstream
) -> None:
    """Anthropic refuses an empty text block, a turn whose text is only whitespace and a
    prefill that ends with whitespace: so does the gateway for every model, streamed or not
    and in count_tokens, before the cache and the upstream (was: the chat bridge answered
    them, 200, and stored the answer). Whitespace beside other text is answered."""
    for model in ("claude", "gpt"):
        for messages, said in blank_turns():
            with pytest.raises(anthropic.BadRequestError) as error:
                ask(client, "", model=model, messages=messages)
            assert error.value.body == invalid_request(said), (model, messages)
            streamed = {"model": model, "max_tokens": 8, "messages": messages}
            with (
                pytest.raises(anthropic.BadRequestError) as error,
                client.messages.stream(**streamed),
            ):
                pass
            assert error.value.body == invalid_request(said), (model, messages)
            with pytest.raises(anthropic.BadRequestError) as error:
                client.messages.count_tokens(model=model, messages=messages)
            assert error.value.body == invalid_request(said), (model, messages)
    assert not fake.stats and upstream.stats["requests"] == 0
    spaced = [{"type": "text", "text": " "}, {"type": "text", "text": "Hi"}]
    for model in ("claude", "gpt"):
        answered = ask(client, "", model=model, messages=[{"role": "user", "content": spaced}])
        assert answered.headers["x-cache"] == "miss" and answered.parse().content[0].text
    assert fake.stats["/v1/messages"] == upstream.stats["chat"] == 1
    call = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}
    beside = [  # whitespace beside a tool call: no quoted refusal, left to the upstream
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": [{"type": "text", "text": "\n"}, call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": "12 C"}]},
    ]  # fmt: skip
    assert ask(client, "", model="claude", messages=beside).headers["x-cache"] == "miss"
    assert fake.stats["/v1/messages"] == 2


def test_documented_fields_sent_as_null_share_the_entry_of_those_left_out(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    """A client that sends every field it knows, null when unset (or a text block of an answer
    back with its ``"citations": null``), asks what one that leaves them out asks: an exact
    hit (was a miss). A null inside a tool's input, or an unknown field's, still differs."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}
    turns: list[Any] = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."}, call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "12 C"}]}]},
    ]  # fmt: skip
    assert ask(client, "", model="claude-plain", messages=turns).headers["x-cache"] == "miss"
    nulls = {field: None for field in ("system", "stop_sequences", "temperature", "top_p",
                                       "top_k", "tools", "tool_choice", "metadata")}  # fmt: skip
    text = {"type": "text", "text": "Checking.", "citations": None, "cache_control": None}
    result = {**turns[2]["content"][0], "cache_control": None,
              "content": [{"type": "text", "text": "12 C", "citations": None}]}  # fmt: skip
    same = [turns[0], {"role": "assistant", "content": [text, {**call, "cache_control": None}]},
            {"role": "user", "content": [result]}]  # fmt: skip
    hit = ask(client, "", model="claude-plain", messages=same, extra_body=nulls)
    assert hit.headers["x-cache"] == "exact"
    other = {**call, "input": {"city": None}}
    differs = [turns[0], {"role": "assistant", "content": [turns[1]["content"][0], other]},
               turns[2]]  # fmt: skip
    assert ask(client, "", model="claude-plain", messages=differs).headers["x-cache"] == "miss"
    unknown = ask(client, "", model="claude-plain", messages=turns, extra_body={"custom": None})
    assert unknown.headers["x-cache"] == "miss"
    assert fake.stats["/v1/messages"] == 3


def test_an_output_config_of_nulls_shares_the_entry_of_none(
    client: anthropic.Anthropic, fake: FakeAnthropic, upstream: FakeUpstream
) -> None:
    """``output_config``'s ``format`` and ``effort`` are nullable: a client that sends them as
    null (or an empty ``output_config``) asks for the defaults, as one that sends none: an exact
    hit (was: a miss, and a second entry). A format that is set still differs."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
              "additionalProperties": False}  # fmt: skip
    for model in ("claude-plain", "gpt"):
        assert ask(client, "Same question", model=model).headers["x-cache"] == "miss", model
        for config in ({"format": None}, {"format": None, "effort": None}, {}):
            same = ask(client, "Same question", model=model, output_config=config)
            assert same.headers["x-cache"] == "exact", (model, config)
        schema_format: Any = {"type": "json_schema", "schema": schema}
        other = ask(client, "Same question", model=model, output_config={"format": schema_format})
        assert other.headers["x-cache"] == "miss", model
    assert fake.stats["/v1/messages"] == upstream.stats["chat"] == 2


def test_one_text_block_for_a_system_or_a_tool_result_shares_the_entry_of_its_string(
    client: anthropic.Anthropic, fake: FakeAnthropic, upstream: FakeUpstream
) -> None:
    """Anthropic documents a string ``system`` or tool result ``content`` as one text block
    (the Vercel AI SDK sends a ``system`` of blocks, the anthropic SDK's examples a string),
    and the chat bridge reads both alike: one request (was: a miss, and a second entry), with
    a ``cache_control`` mark on it too (it changes no answer). Two blocks stay apart."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}
    tools = [{"name": "weather", "input_schema": {"type": "object"}}]

    def turns(result: Any) -> list[Any]:
        return [{"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": [call]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                              "content": result}]}]  # fmt: skip

    block = {"type": "text", "text": "12 C"}
    for model in ("claude-plain", "gpt"):
        first = ask(
            client, "", model=model, system="Be brief.", tools=tools, messages=turns("12 C")
        )
        assert first.headers["x-cache"] == "miss", model
        blocks = [{"type": "text", "text": "Be brief."}]
        same = ask(client, "", model=model, system=blocks, tools=tools, messages=turns([block]))
        assert same.headers["x-cache"] == "exact", model
        marked = [{**blocks[0], "cache_control": {"type": "ephemeral"}}]
        also = ask(client, "", model=model, system=marked, tools=tools, messages=turns("12 C"))
        assert also.headers["x-cache"] == "exact", model
        two = turns([block, {"type": "text", "text": "Sunny"}])
        both = ask(client, "", model=model, system="Be brief.", tools=tools, messages=two)
        assert both.headers["x-cache"] == "miss", model
    assert fake.stats["/v1/messages"] == upstream.stats["chat"] == 2


MARK = {"type": "ephemeral"}
TOOLS = [{"name": "weather", "description": "Weather now", "input_schema": {"type": "object"}}]


def conversation(marks: dict[str, Any]) -> dict[str, Any]:
    """A two-turn conversation with tools and a system prompt; ``marks``: the ``cache_control``
    of each marked place (``tools``, ``system``, ``earlier``, ``last``), none when absent."""

    def block(text: str, where: str) -> dict[str, Any]:
        mark = {"cache_control": marks[where]} if where in marks else {}
        return {"type": "text", "text": text, **mark}

    tools = [{**TOOLS[0], **({"cache_control": marks["tools"]} if "tools" in marks else {})}]
    return {
        "tools": tools,
        "system": [block("Be brief.", "system")],
        "messages": [
            {"role": "user", "content": [block("Weather in Oslo?", "earlier")]},
            {"role": "assistant", "content": "Cold."},
            {"role": "user", "content": [block("And in Bergen?", "last")]},
        ],
    }


def streamed_hit(client: anthropic.Anthropic, text: str, **params: Any) -> None:
    """The request, streamed to ``claude-plain``, is an exact hit that answers ``text``."""
    with client.messages.stream(model="claude-plain", max_tokens=64, **params) as stream:
        assert stream.get_final_message().content[0].text == text
    assert stream.response.headers["x-cache"] == "exact"


def test_cache_control_marks_share_the_entry_of_the_unmarked_request(
    client: anthropic.Anthropic, fake: FakeAnthropic, upstream: FakeUpstream
) -> None:
    """Prompt caching marks ask Anthropic to cache a prefix, never for another answer, and
    agents (Claude Code) move theirs every turn: with them or without, wherever they are, one
    entry, streamed or not (was: a miss each). The upstream still gets them as sent. Marks the
    API refuses (a fifth, a ``1h`` after a ``5m``) are no hit: the upstream refuses them."""
    hour = {**MARK, "ttl": "1h"}
    sent = conversation({"tools": hour, "system": MARK, "last": MARK})
    first = ask(client, "", model="claude-plain", **sent)
    assert first.headers["x-cache"] == "miss"
    assert fake.bodies[-1]["tools"] == sent["tools"] and fake.bodies[-1]["system"] == sent["system"]
    assert fake.bodies[-1]["messages"] == sent["messages"]  # (the marks as the client sent them)
    text = first.parse().content[0].text
    for marks in ({}, {"earlier": MARK}, {"system": hour, "earlier": MARK, "last": MARK}):
        same = ask(client, "", model="claude-plain", **conversation(marks))
        assert (same.headers["x-cache"], same.parse().content[0].text) == ("exact", text), marks
    automatic = ask(client, "", model="claude-plain", cache_control=MARK, **conversation({}))
    assert automatic.headers["x-cache"] == "exact"
    streamed_hit(client, text, **conversation({"last": MARK}))
    assert fake.stats["/v1/messages"] == 1
    refused = [
        conversation({"tools": MARK, "system": MARK, "earlier": MARK, "last": MARK}),
        conversation({"system": MARK, "last": hour}),
    ]
    with pytest.raises(anthropic.BadRequestError):  # (a fifth mark: the top-level one)
        ask(client, "", model="claude-plain", cache_control=MARK, **refused[0])
    with pytest.raises(anthropic.BadRequestError):
        ask(client, "", model="claude-plain", **refused[1])
    assert fake.stats["/v1/messages"] == 3  # (both reached the upstream)
    other = conversation({"last": MARK})
    other["messages"][-1]["content"][0]["text"] = "And in Tromso?"
    assert ask(client, "", model="claude-plain", **other).headers["x-cache"] == "miss"
    # the chat bridge sends no mark: one entry there too
    assert ask(client, "", model="gpt", **conversation({})).headers["x-cache"] == "miss"
    bridged = ask(client, "", model="gpt", **conversation({"system": MARK, "last": MARK}))
    assert bridged.headers["x-cache"] == "exact" and upstream.stats["chat"] == 1


def test_temperature_one_shares_the_entry_of_none_where_anthropic_defaults_it(
    client: anthropic.Anthropic, fake: FakeAnthropic, upstream: FakeUpstream
) -> None:
    """Under ``anthropic-version: 2023-06-01`` Anthropic's ``temperature`` defaults to 1.0:
    sent as 1, streamed or not, the request of none (was: a miss). Not under ``2026-10-21``,
    which refuses it at any value; not beside ``top_p`` (recent models refuse the two together,
    even at their defaults); not through the chat bridge, whose backends sample unset requests
    their own way; and never another value."""
    old = {"anthropic-version": "2023-06-01"}
    first = ask(client, "Weather?", model="claude-plain", extra_headers=old,
                extra_body={"temperature": 1})  # fmt: skip
    assert first.headers["x-cache"] == "miss" and fake.bodies[-1]["temperature"] == 1
    text = first.parse().content[0].text
    for extra in ({}, {"temperature": 1.0}, {"temperature": None}):
        same = ask(client, "Weather?", model="claude-plain", extra_headers=old, extra_body=extra)
        assert (same.headers["x-cache"], same.parse().content[0].text) == ("exact", text), extra
    streamed_hit(
        client, text, extra_headers=old, messages=[{"role": "user", "content": "Weather?"}]
    )
    assert fake.stats["/v1/messages"] == 1
    misses: list[dict[str, Any]] = [
        {"extra_headers": old, "extra_body": {"temperature": 0.5}},
        {"extra_headers": old, "extra_body": {"top_p": 0.9}},
        {"extra_headers": old, "extra_body": {"temperature": 1, "top_p": 0.9}},
        {},  # (the SDK's own anthropic-version: 2026-10-21)
        {"extra_body": {"temperature": 1}},
    ]
    for variation in misses:
        assert ask(client, "Weather?", model="claude-plain", **variation).headers["x-cache"] == (
            "miss"
        ), variation
    assert fake.stats["/v1/messages"] == 1 + len(misses)
    assert ask(client, "Weather?", model="gpt", extra_headers=old).headers["x-cache"] == "miss"
    one = ask(client, "Weather?", model="gpt", extra_headers=old, extra_body={"temperature": 1})
    assert one.headers["x-cache"] == "miss" and upstream.last_body["temperature"] == 1


def versioned_config(fake_url: str, openai_url: str, data_dir: Path, version: str) -> Any:
    """``config`` with ``claude-plain`` configured for ``anthropic_version: version``."""
    settings = yaml.safe_load(config(fake_url, openai_url, data_dir))
    settings["models"]["claude-plain"]["anthropic_version"] = version
    return load_config_text(yaml.safe_dump(settings))


def test_a_request_without_anthropic_version_is_keyed_under_the_configured_one(
    fake_server: ThreadedServer, upstream_server: ThreadedServer, tmp_path: Path,
    fake: FakeAnthropic,
) -> None:  # fmt: skip
    """A request sending no ``anthropic-version`` goes upstream under the model's
    ``anthropic_version``, and is keyed so: it shares the entry of one sending that version,
    streamed or not, and a ``temperature: 1`` that version defaults (was: a miss each). Once
    the setting changes (the gateway restarted on the same data), it misses what was stored
    under the old one (was: served), which a request naming the old version still hits."""
    unversioned = {"anthropic-version": anthropic.Omit()}
    old, older = {"anthropic-version": "2023-06-01"}, {"anthropic-version": "2023-01-01"}
    urls = fake_server.url, upstream_server.url, tmp_path
    with Gateway(versioned_config(*urls, "2023-06-01")) as gateway:
        sdk = anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-test", max_retries=0)
        first = ask(sdk, "Which version?", model="claude-plain", extra_headers=unversioned)
        assert "anthropic-version" not in first.http_request.headers
        assert first.headers["x-cache"] == "miss"
        assert fake.headers[-1]["anthropic-version"] == "2023-06-01"
        text = first.parse().content[0].text
        for headers, extra in ((old, {}), (unversioned, {"temperature": 1}), (old, {})):
            same = ask(sdk, "Which version?", model="claude-plain", extra_headers=headers,
                       extra_body=extra)  # fmt: skip
            assert (same.headers["x-cache"], same.parse().content[0].text) == ("exact", text)
        streamed_hit(sdk, text, extra_headers=unversioned,
                     messages=[{"role": "user", "content": "Which version?"}])  # fmt: skip
        assert fake.stats["/v1/messages"] == 1
        other = ask(sdk, "Which version?", model="claude-plain", extra_headers=older)
        assert other.headers["x-cache"] == "miss"  # (another version: another answer)
    with Gateway(versioned_config(*urls, "2026-10-21")) as gateway:
        sdk = anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-test", max_retries=0)
        fresh = ask(sdk, "Which version?", model="claude-plain", extra_headers=unversioned)
        assert fresh.headers["x-cache"] == "miss"
        assert fake.headers[-1]["anthropic-version"] == "2026-10-21"
        assert fresh.parse().content[0].text != text
        kept = ask(sdk, "Which version?", model="claude-plain", extra_headers=old)
        assert (kept.headers["x-cache"], kept.parse().content[0].text) == ("exact", text)
        # the SDK's own version is now the configured one: the new entry
        sent = ask(sdk, "Which version?", model="claude-plain")
        assert sent.http_request.headers["anthropic-version"] == "2026-10-21"
        assert (sent.headers["x-cache"], sent.parse().content[0].text) == (
            "exact", fresh.parse().content[0].text,
        )  # fmt: skip
        assert fake.stats["/v1/messages"] == 3


def test_tool_choice_auto_shares_the_entry_of_none_when_tools_are_given(
    client: anthropic.Anthropic, fake: FakeAnthropic, upstream: FakeUpstream
) -> None:
    """With tools, Anthropic's ``tool_choice`` defaults to ``auto``: sent so (or with
    ``disable_parallel_tool_use: false``), streamed or not, the request of none (was: a
    miss). ``disable_parallel_tool_use: true`` asks for one call at most, ``any`` for a call:
    misses, as is ``auto`` through the chat bridge (an OpenAI-compatible server's default
    may be another)."""
    auto = {"type": "auto"}
    first = ask(client, "Weather?", model="claude-plain", tools=TOOLS, tool_choice=auto)
    assert first.headers["x-cache"] == "miss" and fake.bodies[-1]["tool_choice"] == auto
    text = first.parse().content[0].text
    for choice in (None, {"type": "auto", "disable_parallel_tool_use": False}):
        extra = {} if choice is None else {"tool_choice": choice}
        same = ask(client, "Weather?", model="claude-plain", tools=TOOLS, **extra)
        assert (same.headers["x-cache"], same.parse().content[0].text) == ("exact", text), choice
    streamed_hit(client, text, tools=TOOLS, messages=[{"role": "user", "content": "Weather?"}])
    assert fake.stats["/v1/messages"] == 1
    for choice in ({"type": "auto", "disable_parallel_tool_use": True}, {"type": "any"}):
        other = ask(client, "Weather?", model="claude-plain", tools=TOOLS, tool_choice=choice)
        assert other.headers["x-cache"] == "miss", choice
    assert fake.stats["/v1/messages"] == 3
    assert ask(client, "Weather?", model="gpt", tools=TOOLS).headers["x-cache"] == "miss"
    bridged = ask(client, "Weather?", model="gpt", tools=TOOLS, tool_choice=auto)
    assert bridged.headers["x-cache"] == "miss" and upstream.last_body["tool_choice"] == "auto"


def test_a_tool_results_is_error_sent_as_null_shares_the_entry_of_one_left_out(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    """``is_error: null`` is accepted as unset (d970055), so it keys as left out too, as the
    other documented fields of a block sent as null do (was: a miss, and a second entry)."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12 C"}
    turns: list[Any] = [{"role": "user", "content": "Weather in Oslo?"},
                        {"role": "assistant", "content": [call]},
                        {"role": "user", "content": [result]}]  # fmt: skip
    assert ask(client, "", model="claude-plain", messages=turns).headers["x-cache"] == "miss"
    nulled = [*turns[:2], {"role": "user", "content": [{**result, "is_error": None}]}]
    assert ask(client, "", model="claude-plain", messages=nulled).headers["x-cache"] == "exact"
    failed = [*turns[:2], {"role": "user", "content": [{**result, "is_error": True}]}]
    assert ask(client, "", model="claude-plain", messages=failed).headers["x-cache"] == "miss"
    assert fake.stats["/v1/messages"] == 2


def test_messages_and_chat_completions_never_share_an_answer(
    gw: Gateway, client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    """The same question to the same OpenAI-upstream model through both APIs: two answers."""
    chat = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
    first = chat.chat.completions.with_raw_response.create(
        model="gpt", max_tokens=64, messages=[{"role": "user", "content": "Same?"}])  # fmt: skip
    assert first.headers["x-cache"] == "miss"
    via_messages = ask(client, "Same?", model="gpt")  # the chat bridge to the same upstream
    assert via_messages.headers["x-cache"] == "miss"
    message = via_messages.parse()
    assert message.content[0].text.startswith("answer #") and message.stop_reason == "end_turn"
    assert upstream.last_body["messages"] == [{"role": "user", "content": "Same?"}]
    assert upstream.stats["chat"] == 2
    assert ask(client, "Same?", model="gpt").headers["x-cache"] == "exact"
    again = chat.chat.completions.with_raw_response.create(
        model="gpt", max_tokens=64, messages=[{"role": "user", "content": "Same?"}])  # fmt: skip
    assert again.headers["x-cache"] == "exact"
    assert again.parse().choices[0].message.content == first.parse().choices[0].message.content
    assert upstream.stats["chat"] == 2


def test_other_apis_of_an_anthropic_model_point_to_messages(
    gw: Gateway, fake: FakeAnthropic
) -> None:
    """The openai SDK asking a `backend: anthropic` model: 400 unsupported_endpoint (as
    docs/configuration.md says), naming the route that serves it; nothing goes upstream."""
    chat = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
    calls = [
        lambda: chat.chat.completions.create(
            model="claude", messages=[{"role": "user", "content": "Hi"}]),
        lambda: chat.completions.create(model="claude", prompt="Hi"),
        lambda: chat.responses.create(model="claude", input="Hi"),
    ]  # fmt: skip
    for call in calls:
        with pytest.raises(openai.BadRequestError) as raised:
            call()
        error = raised.value.body
        assert isinstance(error, dict) and error["code"] == "unsupported_endpoint"
        assert error["param"] == "model" and "POST /v1/messages" in error["message"]
    assert not fake.bodies


def test_bridged_answers_say_why_they_stopped(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    """Through the chat bridge (an OpenAI upstream): the stop sequence that matched, and a
    tool call, JSON and streamed, fresh and replayed from the cache."""
    # the fake, like vLLM, ends its answer ("answer #N to: ...") before a stop string in it and
    # names that string in the choice's stop_reason
    stopped = ask(client, "Which aisle?", model="gpt", stop_sequences=["zzz", "to:"]).parse()
    assert upstream.last_body["stop"] == ["zzz", "to:"]
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "to:"
    assert stopped.content[0].text.startswith("answer #") and "to:" not in stopped.content[0].text
    params = {"model": "gpt", "max_tokens": 64, "stop_sequences": ["shelf"],
              "messages": [{"role": "user", "content": "Which shelf?"}]}  # fmt: skip
    for expected in ("miss", "exact"):  # fresh, then replayed as events
        with client.messages.stream(**params) as stream:
            final = stream.get_final_message()
        assert stream.response.headers["x-cache"] == expected
        assert final.stop_reason == "stop_sequence" and final.stop_sequence == "shelf"
        assert final.content[0].text.endswith("to: Which ")
    hit = ask(client, "Which shelf?", model="gpt", stop_sequences=["shelf"])  # JSON from a stream
    assert hit.headers["x-cache"] == "exact"
    assert (hit.parse().stop_reason, hit.parse().stop_sequence) == ("stop_sequence", "shelf")
    assert ask(client, "Plain?", model="gpt", stop_sequences=["zzz"]).parse().stop_reason == (
        "end_turn"
    )
    # a tool the request names: OpenAI answers finish_reason "stop"; Messages says tool_use
    tool = {"name": "weather", "description": "Weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}  # fmt: skip
    forced = {"tools": [tool], "tool_choice": {"type": "tool", "name": "weather"}}
    called = ask(client, "Weather in Paris?", model="gpt", **forced).parse()
    assert called.stop_reason == "tool_use" and called.stop_sequence is None
    assert called.content[-1].type == "tool_use" and called.content[-1].input == {"city": "Paris"}
    with client.messages.stream(model="gpt", max_tokens=64, **forced,
                                messages=[{"role": "user", "content": "Weather in Rome?"}]) as stream:  # fmt: skip
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].name == "weather"
    # a tool call cut off by max_tokens: its arguments are not JSON, and a tool_use block
    # can only carry an object, so the client gets {} and the cache keeps nothing
    for _ in range(2):
        cut = ask(client, "Weather in Oslo?", model="gpt", max_tokens=5, **forced)
        assert upstream.last_body["max_tokens"] == 5
        assert cut.headers["x-cache"] == "miss"
        assert cut.parse().stop_reason == "max_tokens" and cut.parse().content[-1].input == {}


def test_an_empty_bridged_answer_has_no_content_block_json_or_streamed(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    """An answer with no text (here a stop sequence at its very start) is ``content: []``,
    as Anthropic answers and as the bridged stream, with no block, always was (the JSON
    answer had a ``{"type": "text", "text": ""}`` block), fresh and replayed alike."""
    params: dict[str, Any] = {"model": "gpt", "max_tokens": 64, "stop_sequences": ["answer"]}
    for expected in ("miss", "exact"):
        fresh = ask(client, "Empty?", **params)
        assert fresh.headers["x-cache"] == expected
        message = fresh.parse()
        assert message.content == [] and message.stop_reason == "stop_sequence"
        with client.messages.stream(
            **params, messages=[{"role": "user", "content": "Empty, streamed?"}]
        ) as stream:
            final = stream.get_final_message()
        assert stream.response.headers["x-cache"] == expected
        assert final.content == [] and final.stop_sequence == "answer"
    replayed = ask(client, "Empty, streamed?", **params).parse()  # JSON from a stream
    streamed = client.messages.stream(**params, messages=[{"role": "user", "content": "Empty?"}])
    with streamed as stream:  # a stream from JSON
        assert replayed.content == stream.get_final_message().content == []
    assert upstream.stats["chat"] == 2


async def send_chat_chunks(send: Any, model: str, chunks: list[dict[str, Any]]) -> None:
    """Answers a chat stream as an upstream does: each of ``chunks`` (a choice's ``delta`` and
    ``finish_reason``) in a ``chat.completion.chunk`` event, then ``[DONE]``."""
    events = [{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": model,
               "choices": [{"index": 0, "finish_reason": None, **chunk}]}
              for chunk in chunks]  # fmt: skip
    body = b"".join(b"data: " + msgspec.json.encode(e) + b"\n\n" for e in events)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
    await send({"type": "http.response.body", "body": body + b"data: [DONE]\n\n"})


@contextmanager
def bridged_client(app: Any, model: str, data_dir: Path) -> Iterator[anthropic.Anthropic]:
    """An anthropic client of a gateway whose one model, ``model``, is the chat upstream
    ``app`` (served for the while)."""
    server = ThreadedServer(app).start()
    upstream = {"backend": "openai", "base_url": f"{server.url}/v1", "api_key": "sk-test"}
    text = yaml.safe_dump({"data_dir": str(data_dir), "models": {model: upstream},
                           "cache": {"semantic": {"enabled": False}}})  # fmt: skip
    try:
        with Gateway(load_config_text(text)) as gw:
            yield anthropic.Anthropic(base_url=gw.url, api_key="sk-ant-test", max_retries=0)
    finally:
        server.stop()


def ask_for_two_calls(client: anthropic.Anthropic, model: str) -> tuple[str, Any]:
    """Asks ``model`` in a stream for the weather in two cities, with a weather tool: the
    answer's ``x-cache`` and its final message."""
    tool: Any = {"name": "weather", "input_schema": {"type": "object"}}
    with client.messages.stream(
        model=model, max_tokens=64, tools=[tool],
        messages=[{"role": "user", "content": "Weather in Paris and Rome?"}],
    ) as stream:  # fmt: skip
        final = stream.get_final_message()
    return stream.response.headers["x-cache"], final


class GeminiStream:
    """An upstream that streams two tool calls as Gemini's OpenAI-compatible API does: each
    call whole in one chunk, with its own id and no ``index``."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await read_body(receive)
        calls = [{"id": f"call_{name}", "type": "function",
                  "function": {"name": "weather", "arguments": f'{{"city": "{name}"}}'}}
                 for name in ("Paris", "Rome")]  # fmt: skip
        chunks: list[dict[str, Any]] = [
            {"delta": {"role": "assistant", "tool_calls": [call]}} for call in calls
        ]
        chunks.append({"delta": {}, "finish_reason": "stop"})  # (Gemini's finish for calls)
        await send_chat_chunks(send, "g", chunks)


def test_streamed_tool_calls_without_an_index_stay_apart(tmp_path: Path) -> None:
    """Two calls that a chat upstream streams without ``index`` (Gemini) are two ``tool_use``
    blocks, not the second's arguments run on into the first's (and its call lost)."""
    with bridged_client(GeminiStream(), "gemini", tmp_path) as client:
        for expected in ("miss", "exact"):  # fresh, then replayed from the cache
            cache, final = ask_for_two_calls(client, "gemini")
            assert cache == expected
            calls = [(b.id, b.input) for b in final.content if b.type == "tool_use"]
            assert calls == [("call_Paris", {"city": "Paris"}), ("call_Rome", {"city": "Rome"})]
            assert final.stop_reason == "tool_use"


class InterleavedStream:
    """An upstream that streams two indexed tool calls with their argument deltas interleaved
    (the chat protocol allows it: each delta names its call's index)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await read_body(receive)
        deltas = [
            {"index": 0, "id": "call_Paris", "type": "function",
             "function": {"name": "weather", "arguments": '{"city": '}},
            {"index": 1, "id": "call_Rome", "type": "function",
             "function": {"name": "weather", "arguments": '{"city": '}},
            {"index": 0, "function": {"arguments": '"Paris"}'}},
            {"index": 1, "function": {"arguments": '"Rome"}'}},
        ]  # fmt: skip
        chunks: list[dict[str, Any]] = [{"delta": {"tool_calls": [d]}} for d in deltas]
        chunks.append({"delta": {}, "finish_reason": "tool_calls"})
        await send_chat_chunks(send, "v", chunks)


def test_interleaved_streamed_tool_calls_stay_whole(tmp_path: Path) -> None:
    """Two indexed calls whose deltas a chat upstream interleaves are two whole ``tool_use``
    blocks: not the first cut at its first piece and the rest of each in a nameless block."""
    with bridged_client(InterleavedStream(), "v", tmp_path) as client:
        for expected in ("miss", "exact"):
            cache, final = ask_for_two_calls(client, "v")
            assert cache == expected
            calls = [(b.id, b.name, b.input) for b in final.content]
            assert calls == [("call_Paris", "weather", {"city": "Paris"}),
                             ("call_Rome", "weather", {"city": "Rome"})]  # fmt: skip


class Reasoning:
    """A chat upstream that streams its reasoning (``reasoning_content``, as vLLM, DeepSeek
    and others do) in three chunks, then the answer ``Hi``."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await read_body(receive)
        chunks: list[dict[str, Any]] = [
            {"delta": {"role": "assistant", "reasoning_content": f"Step {i}. "}} for i in range(3)
        ]
        chunks += [{"delta": {"content": "Hi"}}, {"delta": {}, "finish_reason": "stop"}]
        await send_chat_chunks(send, "r", chunks)


def test_a_bridged_stream_pings_while_the_model_reasons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a chat upstream streams only reasoning, which a Messages answer without thinking
    does not show (JSON or streamed), the client gets ``ping`` events (here: one a chunk, as
    if each took the ping interval) rather than nothing until the first text (was: nothing,
    for as long as the model reasoned: a read timeout could end the stream)."""
    monkeypatch.setattr(messages_bridge, "_PING_EVERY", 0.0)
    with bridged_client(Reasoning(), "r", tmp_path) as client:
        params: Any = {"model": "r", "max_tokens": 64,
                       "messages": [{"role": "user", "content": "Think, then greet."}]}  # fmt: skip
        with client.messages.with_streaming_response.create(**params, stream=True) as raw:
            events = [line[7:] for line in raw.iter_lines() if line.startswith("event: ")]
        assert events[: events.index("content_block_start")] == ["message_start"] + ["ping"] * 3
        with client.messages.stream(**params) as stream:
            final = stream.get_final_message()  # (the same request: from the cache)
        assert stream.response.headers["x-cache"] == "exact"
        assert [(b.type, getattr(b, "text", None)) for b in final.content] == [("text", "Hi")]


def test_disable_parallel_tool_use_reaches_a_bridged_upstream(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    """``tool_choice.disable_parallel_tool_use`` asks for at most one tool call: a chat
    upstream is asked the same with ``parallel_tool_calls: false`` (not left to call several)."""
    tool = {"name": "weather", "description": "Weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}  # fmt: skip
    for kind in ("auto", "any"):
        choice = {"type": kind, "disable_parallel_tool_use": True}
        ask(client, f"Weather in Paris and Rome ({kind})?", model="gpt", tools=[tool],
            tool_choice=choice)  # fmt: skip
        assert upstream.last_body["parallel_tool_calls"] is False, kind
    ask(client, "Weather in Oslo and Rome?", model="gpt", tools=[tool],
        tool_choice={"type": "auto"})  # fmt: skip
    assert "parallel_tool_calls" not in upstream.last_body  # the upstream's default


def test_a_strict_tool_is_strict_for_a_bridged_upstream(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    """A tool's ``strict: true`` (its inputs must follow its schema) reaches a chat upstream
    as the function's ``strict`` (was dropped: the upstream was free to call it with any
    arguments); a tool without it is sent none."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"], "additionalProperties": False}  # fmt: skip
    tool: Any = {"name": "weather", "input_schema": schema}
    for strict in (True, None):
        tools = [{**tool, "strict": strict}] if strict else [tool]
        ask(client, f"Weather in Paris ({strict})?", model="gpt", tools=tools)
        assert upstream.last_body["tools"][0]["function"].get("strict") is strict


def test_tool_fields_a_bridged_upstream_cannot_honour_are_refused(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    """A tool's ``input_examples`` (examples the model is shown), ``defer_loading: true`` (the
    tool is not shown until a tool search finds it) and ``allowed_callers`` without
    ``direct`` (the model may not call it itself) change the answer, and a chat function has
    no such field: a 400 naming it, as for any request field the bridge cannot honour (was:
    dropped, and answered as if never sent). Their defaults, ``eager_input_streaming`` (how
    the input streams) and ``cache_control`` are no request for anything: answered."""
    tool: Any = {"name": "weather", "input_schema": {"type": "object"}}
    refused = [({"input_examples": [{"city": "Paris"}]}, "input_examples"),
               ({"defer_loading": True}, "defer_loading"),
               ({"allowed_callers": ["code_execution_20250825"]}, "allowed_callers")]  # fmt: skip
    for extra, field in refused:
        with pytest.raises(anthropic.BadRequestError) as error:
            ask(client, "Weather in Paris?", model="gpt", tools=[{**tool, **extra}])
        assert error.value.body == invalid_request(
            f"A tool's '{field}' is not supported by this model."
        )
    assert upstream.stats["chat"] == 0
    accepted: Any = {**tool, "input_examples": [], "defer_loading": False,
                     "allowed_callers": ["direct"], "eager_input_streaming": True,
                     "cache_control": {"type": "ephemeral"}}  # fmt: skip
    ask(client, "Weather in Paris?", model="gpt", tools=[accepted])
    assert upstream.last_body["tools"] == [
        {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
    ]


def test_tool_choice_without_tools_is_not_sent_to_a_bridged_upstream(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    """Clients that fill in every field send ``tool_choice`` ``auto`` or ``none`` with no tools
    or ``tools: []``; OpenAI refuses a chat ``tool_choice`` without tools (was sent, a 400)."""
    for tools in ({}, {"tools": []}):
        for kind in ("auto", "none"):
            ask(client, f"Hello ({kind}, {tools})", model="gpt", tool_choice={"type": kind},
                **tools)  # fmt: skip
            assert "tool_choice" not in upstream.last_body, (kind, tools)
            assert "tools" not in upstream.last_body


def test_automatic_cache_control_is_no_refusal_for_a_bridged_upstream(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    """A top-level ``cache_control`` (Anthropic's automatic caching) changes only what is
    cached of the prompt, as a block's own: accepted, not sent (was: a 400 "not supported")."""
    answer = ask(client, "Hello (cached)", model="gpt",
                 extra_body={"cache_control": {"type": "ephemeral"}})  # fmt: skip
    assert answer.parse().content[0].text
    assert "cache_control" not in upstream.last_body


def test_a_failed_tool_result_reaches_a_bridged_upstream_as_an_error(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    """``tool_result``'s ``is_error: true`` (a chat ``tool`` message has no such flag): the
    tool message says so, instead of reading as the tool's answer."""
    tool: Any = {"name": "weather", "input_schema": {"type": "object"}}
    call = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}
    results = (
        {"content": "city not found", "is_error": True},
        {"content": [{"type": "text", "text": "no such city"}], "is_error": True},
        {"is_error": True},
        {"content": "12 C", "is_error": False},
    )
    sent = []
    for result in results:
        ask(client, "", model="gpt", tools=[tool], messages=[
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                          **result}]},
        ])  # fmt: skip
        sent.append(upstream.last_body["messages"][-1])
    assert [m["role"] for m in sent] == ["tool"] * 4
    assert [m["content"] for m in sent] == [
        "Error: city not found",
        "Error: no such city",
        "Error",
        "12 C",
    ]


def test_top_k_is_not_sent_to_a_bridged_upstream(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    """``top_k`` is a Messages field OpenAI's chat API does not have (it answers 400
    "Unrecognized request argument"): a ``backend: openai`` model is not sent it."""
    for stream in (False, True):
        answer = ask(client, f"Top k ({stream})?", model="gpt", stream=stream,
                     extra_body={"temperature": 0.5, "top_k": 5})  # fmt: skip
        assert answer.status_code == 200
        assert "top_k" not in upstream.last_body and upstream.last_body["temperature"] == 0.5
    assert upstream.stats["chat"] == 2


def test_thinking_disabled_is_no_request_for_thinking_through_the_bridge(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    """``thinking: {"type": "disabled"}`` asks for the default: a chat upstream answers it (it
    is not forwarded); thinking enabled is still a 400, as any field a chat model cannot honour."""
    plain = ask(client, "Think?", model="gpt", thinking={"type": "disabled"})
    assert plain.parse().stop_reason == "end_turn"
    assert "thinking" not in upstream.last_body and upstream.stats["chat"] == 1
    with pytest.raises(anthropic.BadRequestError) as refused:
        ask(client, "Think?", model="gpt", max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024})  # fmt: skip
    assert "thinking" in refused.value.message
    assert upstream.stats["chat"] == 1


class OneAnswer:
    """A chat upstream that answers every request with one assistant ``message`` (and
    ``finish_reason: "stop"``), JSON or streamed (each field of the message a delta), and
    keeps the bodies it was sent."""

    def __init__(self, message: dict[str, Any]) -> None:
        self.message = message
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = msgspec.json.decode(await read_body(receive))
        self.bodies.append(body)
        if body.get("stream"):
            chunks = [{"delta": {"role": "assistant", **self.message}}]
            return await send_chat_chunks(
                send, "m", [*chunks, {"delta": {}, "finish_reason": "stop"}]
            )
        usage = {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16}
        choice = {"index": 0, "message": {"role": "assistant", "content": None, **self.message},
                  "finish_reason": "stop"}  # fmt: skip
        await send_json(send, 200, {"id": "c", "object": "chat.completion", "created": 1,
                                    "model": "m", "choices": [choice], "usage": usage})  # fmt: skip


class Item(pydantic.BaseModel):
    name: str
    price: int


def test_structured_outputs_reach_a_bridged_upstream_as_a_json_schema(tmp_path: Path) -> None:
    """The anthropic SDK's ``messages.parse(output_format=...)`` sends ``output_config.format``
    (a JSON schema): a chat upstream is asked for it as ``response_format`` (was a 400
    "'output_config' is not supported"), and the schema is part of the cache key."""
    app = OneAnswer({"content": '{"name": "hammer", "price": 12}'})
    with bridged_client(app, "gpt", tmp_path) as client:
        params: Any = {"model": "gpt", "max_tokens": 64, "output_format": Item,
                       "messages": [{"role": "user", "content": "Your cheapest item?"}]}  # fmt: skip
        parsed = client.messages.parse(**params)
        assert parsed.parsed_output == Item(name="hammer", price=12)
        sent = app.bodies[-1]["response_format"]
        assert sent["type"] == "json_schema" and sent["json_schema"]["name"]
        assert sent["json_schema"]["schema"]["required"] == ["name", "price"]
        with client.messages.stream(**params) as stream:  # the same request: from the cache
            assert stream.get_final_message().parsed_output == Item(name="hammer", price=12)
        assert stream.response.headers["x-cache"] == "exact" and len(app.bodies) == 1

        class Named(pydantic.BaseModel):
            name: str

        other = client.messages.parse(**{**params, "output_format": Named})
        assert other.parsed_output == Named(name="hammer") and len(app.bodies) == 2
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(model="gpt", max_tokens=64, output_config={"effort": "low"},
                                   messages=[{"role": "user", "content": "Hi"}])  # fmt: skip
        assert refused.value.body == invalid_request(
            "'output_config.effort' is not supported by this model."
        )


class Priced(pydantic.BaseModel):
    item: Item
    tags: list[str]


class Noted(pydantic.BaseModel):
    name: str
    note: str = ""  # (a default: the SDK leaves it out of "required")


def test_structured_outputs_are_strict_for_a_bridged_upstream_when_openai_can_be(
    tmp_path: Path,
) -> None:
    """Anthropic's structured outputs always follow the schema; OpenAI's only with ``strict``
    (was: never sent, so the upstream was free to answer other JSON). It is sent when OpenAI's
    strict mode takes the schema (every object closed, every property required, nested ones
    too), and left out when not, as for a field with a default, which OpenAI would refuse."""
    item = {"name": "hammer", "price": 12}
    answers: list[tuple[type[pydantic.BaseModel], Any, bool]] = [
        (Item, item, True), (Priced, {"item": item, "tags": []}, True),
        (Noted, {"name": "hammer"}, False),
    ]  # fmt: skip
    app = OneAnswer({})
    with bridged_client(app, "gpt", tmp_path) as client:
        question = [{"role": "user", "content": "Your cheapest item?"}]
        for output_format, answer, strict in answers:
            app.message = {"content": msgspec.json.encode(answer).decode()}
            parsed = client.messages.parse(model="gpt", max_tokens=64, messages=question,
                                           output_format=output_format)  # fmt: skip
            assert parsed.parsed_output == output_format.model_validate(answer)
            sent = app.bodies[-1]["response_format"]["json_schema"]
            assert sent.get("strict", False) is strict, output_format.__name__
        assert len(app.bodies) == 3


def test_a_schema_strict_mode_cannot_read_reaches_a_bridged_upstream_not_strict(
    tmp_path: Path,
) -> None:
    """A structured-outputs schema whose ``required``/``anyOf`` is no list of names/schemas
    (a hand-written one) goes to the upstream as sent, without ``strict``, for it to judge;
    reading it for strict mode was a 500 (``TypeError``) that never reached the upstream."""
    app = OneAnswer({"content": '{"name": "hammer"}'})
    name = {"type": "string"}
    schemas: list[dict[str, Any]] = [
        {"required": [{"name": True}]}, {"required": "name"}, {"required": ["name"], "anyOf": 1},
    ]  # fmt: skip
    with bridged_client(app, "gpt", tmp_path) as client:
        for extra in schemas:
            schema = {"type": "object", "properties": {"name": name},
                      "additionalProperties": False, **extra}  # fmt: skip
            output_config = {"format": {"type": "json_schema", "schema": schema}}
            answer = client.messages.create(
                model="gpt", max_tokens=64, messages=[{"role": "user", "content": str(extra)}],
                extra_body={"output_config": output_config},
            )  # fmt: skip
            assert answer.content[0].type == "text", extra
            sent = app.bodies[-1]["response_format"]["json_schema"]
            assert sent["schema"] == schema and "strict" not in sent
        assert len(app.bodies) == len(schemas)


def test_a_schema_with_an_array_without_items_reaches_a_bridged_upstream_not_strict(
    tmp_path: Path,
) -> None:
    """OpenAI's strict mode refuses an ``array`` without ``items`` (Anthropic takes it): such a
    schema (a plain or a nullable array) is sent without ``strict``, as any other schema strict
    mode cannot take; it went strict, and the client got the upstream's 400. With its items,
    strict."""
    app = OneAnswer({"content": '{"tags": []}'})
    arrays: list[tuple[dict[str, Any], bool]] = [
        ({"type": "array"}, False), ({"type": ["array", "null"]}, False),
        ({"type": "array", "items": {"type": "string"}}, True),
    ]  # fmt: skip
    with bridged_client(app, "gpt", tmp_path) as client:
        for tags, strict in arrays:
            schema = {"type": "object", "properties": {"tags": tags}, "required": ["tags"],
                      "additionalProperties": False}  # fmt: skip
            answer = client.messages.create(
                model="gpt", max_tokens=64, messages=[{"role": "user", "content": str(tags)}],
                extra_body={"output_config": {"format": {"type": "json_schema", "schema": schema}}},
            )  # fmt: skip
            assert answer.content[0].type == "text", tags
            sent = app.bodies[-1]["response_format"]["json_schema"]
            assert sent["schema"] == schema and sent.get("strict", False) is strict, tags
        assert len(app.bodies) == len(arrays)


def test_a_bridged_upstreams_refusal_is_a_refusal_json_and_streamed(tmp_path: Path) -> None:
    """A chat answer's ``refusal`` (OpenAI's model declined; ``finish_reason: "stop"``) is
    the answer's text with ``stop_reason: "refusal"``, as Anthropic reports a refusal (was an
    empty ``end_turn`` answer, stored and served again from the cache); like Anthropic's own,
    never stored."""
    app = OneAnswer({"refusal": "I can't help with that."})
    with bridged_client(app, "gpt", tmp_path) as client:
        for _ in range(2):
            answer = ask(client, "Pick the lock?", model="gpt")
            assert answer.headers["x-cache"] == "miss"
            message = answer.parse()
            assert message.stop_reason == "refusal"
            assert [b.text for b in message.content] == ["I can't help with that."]  # type: ignore[union-attr]
            with client.messages.stream(
                model="gpt", max_tokens=64, messages=[{"role": "user", "content": "Pick it?"}]
            ) as stream:
                assert "".join(stream.text_stream) == "I can't help with that."
                final = stream.get_final_message()
            assert stream.response.headers["x-cache"] == "miss"
            assert final.stop_reason == "refusal" and final.content[0].type == "text"
        assert len(app.bodies) == 4


def test_what_a_bridged_model_cannot_read_is_named_in_a_plain_400(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    image = {"type": "image",
             "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}  # fmt: skip
    with pytest.raises(anthropic.BadRequestError) as refused:
        ask(client, "", model="gpt",
            messages=[{"role": "user", "content": [image, {"type": "text", "text": "What?"}]}])  # fmt: skip
    assert refused.value.body == invalid_request(
        "Content blocks of type 'image' are not supported by this model."
    )
    assert upstream.stats["chat"] == 0


def test_a_bridged_upstreams_400_names_the_clients_own_turn(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    """An upstream's 400 names a message of the chat form (OpenAI refuses a tool call id over
    40 characters): the client's turn 3 is chat message 5 there, after the system prompt and
    turn 2's tool result and text, and its tool call 1 is the turn's block 3. The error names
    turn 3's block (was ``messages[5]``, then ``messages[3].tool_calls[1]``)."""
    tool: Any = {"name": "weather", "input_schema": {"type": "object"}}
    long_id = "toolu_" + "x" * 44

    def call(tool_id: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": tool_id, "name": "weather", "input": {}}

    def result(tool_id: str) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": tool_id, "content": "12 C"}

    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": [call("toolu_1")]},
        {"role": "user", "content": [result("toolu_1"), {"type": "text", "text": "And Rome?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Oslo, then Rome."},
                                          call("toolu_2"), {"type": "text", "text": "Rome:"},
                                          call(long_id)]},
        {"role": "user", "content": [result("toolu_2"), result(long_id)]},
    ]  # fmt: skip
    for stream in (False, True):
        with pytest.raises(anthropic.BadRequestError) as refused:
            ask(client, "", model="gpt", system="Be brief.", tools=[tool], messages=messages,
                stream=stream)  # fmt: skip
        assert refused.value.body == invalid_request(
            "Invalid 'messages[3].content[3].id': string too long. Expected a string with "
            "maximum length 40, but got a string with length 50 instead."
        )
    assert upstream.stats["chat"] == 2


def test_a_bridged_upstreams_400_names_the_clients_tool_field(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    """OpenAI refuses a function description over 1024 characters, which Anthropic takes (long
    tool descriptions are what its docs ask for): the error names the client's tool field,
    ``tools[1].description`` (was ``tools[1].function.description``, a field it never sent)."""
    tools: Any = [{"name": "ls", "description": "Lists files.", "input_schema": {"type": "object"}},
                  {"name": "bash", "description": "Runs a shell command. " * 60,
                   "input_schema": {"type": "object"}}]  # fmt: skip
    for stream in (False, True):
        with pytest.raises(anthropic.BadRequestError) as refused:
            ask(client, "List the files.", model="gpt", tools=tools, stream=stream)
        assert refused.value.body == invalid_request(
            "Invalid 'tools[1].description': string too long. Expected a string with "
            "maximum length 1024, but got a string with length 1320 instead."
        )
    assert upstream.stats["chat"] == 2


def test_automatic_cache_control_turns_into_cache_reads(
    gw: Gateway, client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    """A conversation with a long system prompt: turn 2 reads what turn 1 wrote."""
    turn1 = [{"role": "user", "content": "Do you sell hammers? " * 10}]
    first = ask(client, "", system=SYSTEM, messages=turn1).parse()
    assert first.usage.cache_creation_input_tokens > 0 and first.usage.cache_read_input_tokens == 0
    sent = fake.bodies[-1]
    assert sent["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert sent["messages"][0]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    turn2 = [*turn1, {"role": "assistant", "content": first.content[0].text},
             {"role": "user", "content": "And nails?"}]  # fmt: skip
    second = ask(client, "", system=SYSTEM, messages=turn2).parse()
    prompt1 = first.usage.cache_creation_input_tokens + first.usage.input_tokens
    assert second.usage.cache_read_input_tokens == prompt1  # all of turn 1's prompt
    plain = ask(client, "", model="claude-plain", system=SYSTEM, messages=turn2).parse()
    assert plain.usage.cache_read_input_tokens == 0
    assert "cache_control" not in str(fake.bodies[-1])
    counters = gw.http.get("/admin/stats").json()["backends"]["claude"]["prompt_caching"]
    assert counters["requests"] == 2 and counters["marks_added"] == 4
    metrics = gw.http.get("/metrics").text  # counts that only go up are counters
    assert "# TYPE cachegate_backend_prompt_caching_requests_total counter" in metrics
    assert 'cachegate_backend_prompt_caching_marks_added_total{model="claude"} 4' in metrics


def test_the_ledger_counts_anthropic_cache_reads_and_writes(
    fake_server: ThreadedServer, upstream_server: ThreadedServer, tmp_path: Path,
    fake: FakeAnthropic,  # (reset: its prompt cache starts empty)
) -> None:  # fmt: skip
    """Through HTTP with the anthropic SDK: a cache write (JSON), a read of it and a new write
    (streamed), a response-cache hit; /admin/stats and /metrics account each as its usage
    said, at the configured prices."""
    prices = {"claude": {"input": 3.0, "cached_input": 0.3, "cache_write": 3.75, "output": 15.0}}
    text = config(fake_server.url, upstream_server.url, tmp_path, prices=prices)
    gw = Gateway(load_config_text(text))
    try:
        client = anthropic.Anthropic(base_url=gw.url, api_key="sk-ant-test", max_retries=0)
        turn1 = [{"role": "user", "content": "Do you sell hammers? " * 10}]
        first = ask(client, "", system=SYSTEM, messages=turn1).parse().usage
        turn2 = [*turn1, {"role": "assistant", "content": "Yes."},
                 {"role": "user", "content": "And nails? " * 10}]  # fmt: skip
        with client.messages.stream(model="claude", max_tokens=64, system=SYSTEM,
                                    messages=turn2) as stream:  # fmt: skip
            second = stream.get_final_message().usage
        assert ask(client, "", system=SYSTEM, messages=turn1).headers["x-cache"] == "exact"
        row = gw.http.get("/admin/stats").json()["ledger"]["default"]["claude"]
        metrics = gw.http.get("/metrics").text
    finally:
        gw.stop()
    assert first.cache_creation_input_tokens > 0 and first.cache_read_input_tokens == 0
    assert second.cache_read_input_tokens > 0 and second.cache_creation_input_tokens > 0
    calls = [first, second]
    prompt = [u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
              for u in calls]  # fmt: skip
    assert (row["requests"], row["model_calls"], row["calls_avoided"]) == (3, 2, 1)
    assert row["input_tokens"] == sum(prompt)
    assert row["output_tokens"] == first.output_tokens + second.output_tokens
    assert row["provider_cached_tokens"] == second.cache_read_input_tokens
    writes = first.cache_creation_input_tokens + second.cache_creation_input_tokens
    assert row["cache_write_tokens"] == writes
    assert row["unread_write_tokens"] == 0  # (turn 2's write is younger than 5 minutes)
    assert (row["avoided_input_tokens"], row["avoided_output_tokens"]) == (
        prompt[0], first.output_tokens)  # fmt: skip
    spent = sum(u.input_tokens * 3.0 + u.cache_read_input_tokens * 0.3
                + u.cache_creation_input_tokens * 3.75 + u.output_tokens * 15.0
                for u in calls) / 1e6  # fmt: skip
    assert row["spent_usd"] == pytest.approx(spent)
    assert row["saved_provider_cache_usd"] == pytest.approx(
        second.cache_read_input_tokens * 2.7 / 1e6)  # fmt: skip
    assert row["write_premium_usd"] == pytest.approx(writes * 0.75 / 1e6)
    hit_saved = (
        first.input_tokens * 3.0
        + first.cache_read_input_tokens * 0.3  # as it cost
        + first.cache_creation_input_tokens * 3.75
        + first.output_tokens * 15.0
    ) / 1e6
    assert row["saved_response_cache_usd"] == pytest.approx(hit_saved, abs=1e-6)  # (rounded)
    assert row["saved_usd"] == pytest.approx(
        hit_saved + row["saved_provider_cache_usd"] - row["write_premium_usd"], abs=1e-6)  # fmt: skip
    labels = '{model="claude",tenant="default"}'
    read = float(second.cache_read_input_tokens)
    assert f"cachegate_ledger_provider_cached_tokens_total{labels} {read}" in metrics
    assert f"cachegate_ledger_cache_write_tokens_total{labels} {float(writes)}" in metrics


def test_cachegate_stats_says_an_unpriced_models_money_is_unknown_and_a_loss_is_negative(
    fake_server: ThreadedServer, upstream_server: ThreadedServer, tmp_path: Path,
    fake: FakeAnthropic, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """``cachegate stats`` printed "$0.0000" for a model without a price (counted at $0: it
    read as free) and a net loss (a cache write never read) as "$-0.0012"."""
    prices = {"claude": {"input": 3.0, "cached_input": 0.3, "cache_write": 3.75, "output": 15.0}}
    text = config(fake_server.url, upstream_server.url, tmp_path, prices=prices)
    gw = Gateway(load_config_text(text))
    try:
        client = anthropic.Anthropic(base_url=gw.url, api_key="sk-ant-test", max_retries=0)
        turn = [{"role": "user", "content": "Do you sell hammers? " * 10}]
        assert (
            ask(client, "", system=SYSTEM, messages=turn).parse().usage.cache_creation_input_tokens
        )
        assert gw.chat("Do you sell nails?", model="gpt").status_code == 200
        stats = gw.http.get("/admin/stats").json()
        assert main(["stats", "--url", gw.url]) == 0
        with Browser(tmp_path) as browser:  # (the dashboard printed the loss as "$-0.0001")
            page = browser.open(f"{gw.url}/dashboard")
            page.wait_for("document.querySelectorAll('#ledger tr').length === 3")
            shown = page.evaluate("""Object.fromEntries([...document.querySelectorAll('#ledger tr')]
              .slice(1).map(r => [r.cells[1].innerText, r.cells[r.cells.length - 1].innerText]))""")
            assert page.errors == []
    finally:
        gw.stop()
    assert stats["priced"] == ["claude"]
    saved = stats["ledger"]["default"]["claude"]["saved_usd"]
    assert saved < 0  # (the write's premium, never read)
    out = capsys.readouterr().out
    rows = {
        line.split()[1]: line.split() for line in out.splitlines() if line.startswith("default")
    }
    loss = f"-${-saved:.4f}"
    assert loss != "-$0.0000" and rows["claude"][-3:] == ["0", "($0.0000)", loss], out
    assert rows["gpt"][-3:] == ["0", "(unknown)", "unknown"], out
    assert "unknown: no price set for the model" in out
    assert shown == {"claude": loss, "gpt": "—"}


def test_client_breakpoints_are_kept_and_the_total_stays_four(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    mark = {"type": "ephemeral"}
    blocks = [{"type": "text", "text": f"part {i} " * 60, "cache_control": mark} for i in range(3)]
    ask(client, "", system=SYSTEM, messages=[{"role": "user", "content": blocks},
                                             {"role": "assistant", "content": "ok"},
                                             {"role": "user", "content": "next " * 60}])  # fmt: skip
    sent = fake.bodies[-1]
    assert [b.get("cache_control") for b in sent["messages"][0]["content"]] == [mark] * 3
    assert str(sent).count("cache_control") == 4  # the fake refuses a fifth with 400


def test_added_marks_suit_automatic_caching_asked_for_an_hour(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    """Automatic caching (a top-level ``cache_control``) with the 1-hour TTL: the API puts
    that mark on the last block itself, so the gateway adds none there, and the marks it adds
    before it are 1-hour ones (a 1-hour mark after a 5-minute one is refused with a 400)."""
    automatic = {"type": "ephemeral", "ttl": "1h"}
    question = "Do you sell hammers? " * 10
    reply = ask(client, question, system=SYSTEM, extra_body={"cache_control": automatic})
    sent = fake.bodies[-1]
    assert sent["cache_control"] == automatic
    assert sent["system"][0]["cache_control"] == automatic
    assert "cache_control" not in str(sent["messages"])
    written = reply.parse().usage.cache_creation_input_tokens
    assert written == len(SYSTEM) // 4 + 1 + len(question) // 4 + 1  # up to the last block


def test_count_tokens(client: anthropic.Anthropic, fake: FakeAnthropic) -> None:
    counted = client.messages.count_tokens(
        model="claude", system=SYSTEM, messages=[{"role": "user", "content": "hi"}])  # fmt: skip
    assert counted.input_tokens == len(SYSTEM) // 4 + 1 + 1
    assert fake.stats["/v1/messages/count_tokens"] == 1
    # a count writes no prompt cache: no marks, though it carries max_tokens as a create does
    # (it got them, and the cacher's history took it for a request that wrote them)
    client.messages.count_tokens(model="claude", system=SYSTEM, messages=[
        {"role": "user", "content": "hi"}], extra_body={"max_tokens": 5})  # fmt: skip
    assert fake.stats["/v1/messages/count_tokens"] == 2
    assert "cache_control" not in str(fake.bodies[-1])
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model="gpt", messages=[{"role": "user", "content": "hi"}])


def test_count_tokens_relays_the_upstreams_headers(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    """An Anthropic upstream's count carries its ``request-id`` and ``anthropic-ratelimit-*``
    headers to the client, as its message does (were: dropped), and its error its
    ``retry-after`` too (one tenant: the rate-limit state is the client's own)."""
    said = {"request-id": "req_count_7", "anthropic-ratelimit-requests-remaining": "41",
            "anthropic-ratelimit-tokens-reset": "2026-12-06T01:00:00Z"}  # fmt: skip
    messages = [{"role": "user", "content": "hi"}]
    raw = client.messages.with_raw_response.count_tokens(
        model="claude", messages=messages, extra_body={"fake": {"headers": said}}
    )
    assert raw.parse().input_tokens == 1 and fake.stats["/v1/messages/count_tokens"] == 1
    assert {name: raw.headers.get(name) for name in said} == said
    assert raw.parse()._request_id == "req_count_7"  # what the SDK reads as the request's id
    limited = {"status": 429, "retry_after": 30, "headers": said}  # (not waited: > 20 s)
    with pytest.raises(anthropic.RateLimitError) as error:
        client.messages.count_tokens(
            model="claude", messages=messages, extra_body={"fake": limited}
        )
    relayed = error.value.response.headers
    assert {name: relayed.get(name) for name in said} == said
    assert relayed["retry-after"] == "30" and error.value.request_id == "req_count_7"


def test_client_key_is_forwarded_and_partitions_the_cache(gw: Gateway, fake: FakeAnthropic) -> None:
    good = anthropic.Anthropic(base_url=gw.url, api_key="sk-ant-test", max_retries=0)
    bad = anthropic.Anthropic(base_url=gw.url, api_key="sk-ant-wrong", max_retries=0)
    assert ask(good, "hi", model="claude-client-key").headers["x-cache"] == "miss"
    assert fake.headers[-1]["authorization"] == "Bearer sk-ant-test"  # as the SDK sent it
    with pytest.raises(anthropic.AuthenticationError):  # never the other key's cached answer
        ask(bad, "hi", model="claude-client-key")
    assert ask(good, "hi", model="claude-client-key").headers["x-cache"] == "exact"
    by_header = httpx.post(f"{gw.url}/v1/messages", headers={"x-api-key": "sk-ant-test"},
                           json={"model": "claude-client-key", "max_tokens": 64,
                                 "messages": [{"role": "user", "content": "x-api-key"}]})  # fmt: skip
    assert by_header.status_code == 200
    assert fake.headers[-1]["x-api-key"] == "sk-ant-test"


class QuotingAnthropic:
    """An Anthropic upstream that quotes the key it was sent in an error: in a 200 body, in
    an ``event: error`` of a stream, or as its JSON answer to a stream request."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = msgspec.json.decode(await read_body(receive))
        key = dict(scope["headers"]).get(b"x-api-key", b"").decode()
        error = {"type": "error", "error": {"type": "invalid_request_error",
                                            "message": f"Bad key {key} for this model"}}  # fmt: skip
        start = {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "c", "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 0}}}  # fmt: skip
        streamed = body.get("stream") and body["messages"][0]["content"] == "event"
        events = [start, error] if streamed else [error]
        answer = (
            b"".join(encode_event(e) for e in events) if streamed else msgspec.json.encode(error)
        )
        kind = b"text/event-stream" if streamed else b"application/json"
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", kind)]})  # fmt: skip
        await send({"type": "http.response.body", "body": answer})


def test_an_anthropic_upstreams_error_quoting_the_gateways_key_reaches_nobody_with_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An error sent with status 200, an ``event: error`` mid-stream, a JSON answer to a
    stream request: each quoting the model's ``x-api-key`` reached the client as it came."""
    server = ThreadedServer(QuotingAnthropic()).start()
    claude = {"backend": "anthropic", "base_url": server.url, "api_key": "sk-ant-shared-key"}
    text = yaml.safe_dump({"data_dir": str(tmp_path), "models": {"claude": claude},
                           "cache": {"semantic": {"enabled": False}}})  # fmt: skip
    seen = []
    try:
        with Gateway(load_config_text(text)) as gw:
            client = anthropic.Anthropic(base_url=gw.url, api_key="sk-ant-test", max_retries=0)
            for stream, question in ((False, "body"), (True, "body"), (True, "event")):
                with pytest.raises(anthropic.APIError) as caught:
                    answer = client.messages.create(
                        model="claude", max_tokens=64, stream=stream,
                        messages=[{"role": "user", "content": question}])  # fmt: skip
                    list(answer) if stream else None
                seen.append(f"{caught.value.message} {caught.value.body}")
    finally:
        server.stop()
    assert all("Bad key ***" in said for said in seen), seen
    assert not any("sk-ant-shared" in said for said in seen), seen
    assert "sk-ant-shared" not in caplog.text


def test_a_bridged_openai_model_gets_the_client_key_as_a_bearer_token(
    fake_server: ThreadedServer, upstream_server: ThreadedServer, tmp_path: Path,
    upstream: FakeUpstream,
) -> None:  # fmt: skip
    """A ``backend: openai`` model without a key of its own, asked through /v1/messages with
    ``x-api-key``: the chat upstream gets that key as ``Authorization: Bearer``."""
    settings = yaml.safe_load(config(fake_server.url, upstream_server.url, tmp_path))
    settings["models"]["gpt-client-key"] = {**settings["models"]["gpt"], "api_key": None}
    gw = Gateway(load_config_text(yaml.safe_dump(settings)))
    try:
        body = {"model": "gpt-client-key", "max_tokens": 64,
                "messages": [{"role": "user", "content": "Whose key?"}]}  # fmt: skip
        answer = httpx.post(f"{gw.url}/v1/messages", headers={"x-api-key": "sk-client"}, json=body)
    finally:
        gw.stop()
    assert answer.status_code == 200 and answer.json()["type"] == "message"
    assert upstream.last_headers["authorization"] == "Bearer sk-client"
    assert "x-api-key" not in upstream.last_headers


def test_gateway_keys_accept_x_api_key(
    fake_server: ThreadedServer, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    auth = {"auth": {"keys": [{"key": "gw-key", "tenant": "a"}]}}
    gateway = Gateway(
        load_config_text(config(fake_server.url, upstream_server.url, tmp_path, **auth))
    )
    try:
        ok = anthropic.Anthropic(base_url=gateway.url, api_key="gw-key", max_retries=0)
        assert ask(ok, "hi").parse().content[0].text
        bearer = anthropic.Anthropic(base_url=gateway.url, auth_token="gw-key", max_retries=0)
        assert ask(bearer, "hi").headers["x-cache"] == "exact"
        response = httpx.post(f"{gateway.url}/v1/messages", headers={"x-api-key": "nope"},
                              json={"model": "claude", "max_tokens": 5, "messages": []})  # fmt: skip
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"
    finally:
        gateway.stop()


def test_another_tenants_container_is_never_forwarded(
    fake_server: ThreadedServer, upstream_server: ThreadedServer, tmp_path: Path,
    fake: FakeAnthropic,
) -> None:  # fmt: skip
    """The upstream, called with the model's key (every tenant's), runs code execution in any
    container made with that key, whoever names it (it was forwarded for anyone: tenant b's
    code read tenant a's files): one an upstream made for a (streamed too), or a named and an
    upstream ran in, is Anthropic's 404 for b, never forwarded, while a goes on using it."""
    keys = [{"key": "key-a", "tenant": "a"}, {"key": "key-b", "tenant": "b"}]
    settings = config(fake_server.url, upstream_server.url, tmp_path, auth={"keys": keys})
    coding = {"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}
    with Gateway(load_config_text(settings)) as gw:
        a, b = (anthropic.Anthropic(base_url=gw.url, api_key=k, max_retries=0)
                for k in ("key-a", "key-b"))  # fmt: skip
        made = ask(a, "Analyse my sales.csv.", **coding).parse()
        question = [{"role": "user", "content": "Plot my sales.csv."}]
        with a.messages.stream(model="claude", max_tokens=64, messages=question, **coding) as s:
            streamed = s.get_final_message()
        ask(a, "Run it in my own container.", container="container_of_a", **coding)
        containers = {made.container.id, streamed.container.id}
        assert len(containers) == 2
        asked = fake.stats["/v1/messages"]
        for container in (*containers, "container_of_a"):
            for named in (container, {"id": container}):
                with pytest.raises(anthropic.NotFoundError) as refused:
                    ask(b, "cat /mnt/data/*", container=named, **coding)
                assert refused.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
            with pytest.raises(anthropic.NotFoundError):  # streamed: refused before it starts
                b.messages.create(model="claude", max_tokens=64, messages=question,
                                  container=container, stream=True, **coding)  # fmt: skip
        assert fake.stats["/v1/messages"] == asked  # none of them was forwarded
        for container in containers:  # a's own: forwarded
            again = ask(a, f"Again, in {container}.", container=container, **coding).parse()
            assert again.container.id == container
        assert fake.stats["/v1/messages"] == asked + 2
        hit = ask(a, "Analyse my sales.csv.", **coding)  # a's own answer, a's container
        assert hit.headers["x-cache"] == "exact" and hit.parse().container.id == made.container.id
        own = ask(b, "Analyse my sales.csv.", **coding)  # never a's cached answer
        assert own.headers["x-cache"] == "miss" and own.parse().container.id not in containers


def test_a_request_naming_a_container_is_never_served_from_nor_stored_in_the_cache(
    client: anthropic.Anthropic, fake: FakeAnthropic
) -> None:
    """The files in a code execution container change between requests (the code run in it,
    files uploaded into it), and are no part of the key: an answer read from them was stored
    and served again (x-cache: exact) for the same request, never run in the container as it
    now is. An answer in a new container (none named) is cached as any answer."""
    coding = {"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}
    for named in ("container_of_a", "container_of_a", {"id": "container_of_a"}):
        answer = ask(client, "What is in /mnt/data now?", container=named, **coding)
        assert answer.headers["x-cache"] == "bypass"
        assert answer.parse().container.id == "container_of_a"
    assert fake.stats["/v1/messages"] == 3
    made = ask(client, "Make me a chart.", **coding).parse()
    hit = ask(client, "Make me a chart.", **coding)
    assert hit.headers["x-cache"] == "exact" and hit.parse().container.id == made.container.id


def test_semantic_hits_stay_inside_the_messages_scope(
    fake_server: ThreadedServer, upstream_server: ThreadedServer, tmp_path: Path,
    fake: FakeAnthropic,  # (reset: its prompt cache starts empty)
) -> None:  # fmt: skip
    """A paraphrase is a semantic hit through /v1/messages, streamed or not, with prompt
    caching marks or a default ``temperature`` too (the semantic scope is keyed as the exact
    key); a different system prompt or temperature, or the chat API, never gets it."""
    text = config(fake_server.url, upstream_server.url, tmp_path)
    text = text.replace("semantic:\n    enabled: false", "semantic:\n    enabled: true")
    gateway = Gateway(load_config_text(text))
    try:
        sdk = anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-test", max_retries=0)
        first = ask(sdk, "How do I reset my password?", system="Support desk.")
        hit = ask(sdk, "How can I reset my password?", system="Support desk.")
        assert (first.headers["x-cache"], hit.headers["x-cache"]) == ("miss", "semantic")
        assert hit.parse().content[0].text == first.parse().content[0].text
        assert float(hit.headers["x-cache-similarity"]) > 0.8
        with sdk.messages.stream(model="claude", max_tokens=64, system="Support desk.",
                                 messages=[{"role": "user",
                                            "content": "How can I reset my password?"}]) as s:  # fmt: skip
            assert s.get_final_message().content[0].text == first.parse().content[0].text
        assert s.response.headers["x-cache"] == "semantic"
        other = ask(sdk, "How can I reset my password?", system="Sales desk.")
        assert other.headers["x-cache"] == "miss"
        assert fake.stats["/v1/messages"] == 2
        old = {"anthropic-version": "2023-06-01"}
        stored = ask(sdk, "How do I change my email address?", system="Support desk.",
                     extra_headers=old)  # fmt: skip
        marked = [{"type": "text", "text": "Support desk.", "cache_control": MARK}]
        variant = ask(sdk, "How can I change my email address?", system=marked,
                      extra_headers=old, extra_body={"temperature": 1})  # fmt: skip
        assert (stored.headers["x-cache"], variant.headers["x-cache"]) == ("miss", "semantic")
        assert variant.parse().content[0].text == stored.parse().content[0].text
        warmer = ask(sdk, "How can I change my email address?", system=marked,
                     extra_headers=old, extra_body={"temperature": 0.5})  # fmt: skip
        assert warmer.headers["x-cache"] == "miss"
        assert fake.stats["/v1/messages"] == 4
    finally:
        gateway.stop()


def test_gateway_timeouts_and_busy_upstreams_get_anthropics_types() -> None:
    from gateway.messages import _anthropic_type
    from gateway.upstream import UpstreamError

    timeout = UpstreamError(504, "The upstream did not answer in time.", code="upstream_timeout")
    assert _anthropic_type(timeout) == "timeout_error"
    assert _anthropic_type(UpstreamError(502, "Bad gateway.")) == "api_error"
    assert _anthropic_type(UpstreamError(529, "Overloaded.")) == "overloaded_error"


def test_citations_fold_into_a_text_block_whose_start_says_null() -> None:
    """A ``content_block_start`` may carry ``"citations": null`` (the SDK reads it as none):
    the citations that follow are folded in, not a crash of the relay."""
    from gateway.messages import MessageFold, message_events

    citation = {"type": "char_location", "cited_text": "Paris", "document_index": 0,
                "document_title": None, "start_char_index": 0, "end_char_index": 5}  # fmt: skip
    head = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 1}}  # fmt: skip
    events = [
        {"type": "message_start", "message": head},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "text", "text": "", "citations": None}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "text_delta", "text": "Paris."}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "citations_delta", "citation": citation}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    ]  # fmt: skip
    fold = MessageFold()
    for event in events:
        fold.add(event)
    message = fold.result()
    assert message is not None
    assert message["content"] == [{"type": "text", "text": "Paris.", "citations": [citation]}]
    replay = MessageFold()
    for event in message_events(message):
        replay.add(event)
    assert replay.result() == message


def test_the_anthropic_sdk_lists_and_retrieves_the_models(
    fake_server: ThreadedServer, upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    """``client.models.list()`` of the anthropic SDK (its key as ``x-api-key``): Anthropic's
    list and errors (it got a 401 with gateway keys, and OpenAI's list without them); the
    openai SDK still gets OpenAI's."""
    keys = {"auth": {"keys": [{"key": "key-a", "tenant": "a"}]}}
    text = config(fake_server.url, upstream_server.url, tmp_path, **keys)
    with Gateway(load_config_text(text)) as gw:
        client = anthropic.Anthropic(base_url=gw.url, api_key="key-a", max_retries=0)
        page = client.models.list()
        ids = [m.id for m in page.data]
        assert sorted(ids) == ["claude", "claude-client-key", "claude-plain", "gpt"]
        assert all(m.type == "model" and m.display_name == m.id for m in page.data)
        assert page.first_id == ids[0] and page.last_id == ids[-1] and not page.has_more
        # pages (limit, after_id, before_id: the SDK's `limit=1` got every model, no more)
        one = client.models.list(limit=1)
        assert [m.id for m in one.data] == ids[:1] and one.has_more
        assert [m.id for m in client.models.list(limit=1)] == ids  # (the SDK pages on)
        assert [m.id for m in client.models.list(after_id=ids[1]).data] == ids[2:]
        back = client.models.list(before_id=ids[3], limit=2)
        assert [m.id for m in back.data] == ids[1:3] and back.has_more
        for bad in ({"limit": 0}, {"limit": 1001}, {"limit": "²"}, {"after_id": "no-such-model"},
                    {"after_id": ids[0], "before_id": ids[2]}):  # fmt: skip
            with pytest.raises(anthropic.BadRequestError) as wrong:
                client.models.list(**bad)  # type: ignore[arg-type]
            assert wrong.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        model = client.models.retrieve("gpt")
        assert model.id == "gpt" and model.created_at.year == 1970  # (an upstream's: unknown)
        with pytest.raises(anthropic.NotFoundError) as missing:
            client.models.retrieve("no-such-model")
        assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
        with pytest.raises(anthropic.AuthenticationError) as refused:
            anthropic.Anthropic(base_url=gw.url, api_key="wrong", max_retries=0).models.list()
        assert refused.value.body["type"] == "error"  # type: ignore[index]
        listed = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="key-a").models.list()
        assert [m.id for m in listed.data] == ids and listed.data[0].object == "model"


def test_a_reasoning_model_upstream_gets_max_completion_tokens(
    upstream_server: ThreadedServer, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Messages through the chat bridge to an OpenAI reasoning model (which refuses
    ``max_tokens`` and asks for ``max_completion_tokens``): every request failed with that
    400; it is sent again once with the newer name, JSON and streamed."""
    models = {"o": {"backend": "openai", "base_url": f"{upstream_server.url}/v1",
                    "api_key": "sk-test", "upstream_model": "o-mini"}}  # fmt: skip
    text = yaml.safe_dump({"data_dir": str(tmp_path), "models": models,
                           "cache": {"semantic": {"enabled": False}}})  # fmt: skip
    with Gateway(load_config_text(text)) as gw:
        client = anthropic.Anthropic(base_url=gw.url, api_key="k", max_retries=0)
        message = ask(client, "Think hard.", model="o", max_tokens=32).parse()
        assert message.content[0].text.startswith("answer #") and message.stop_reason == "end_turn"
        assert upstream.last_body["max_completion_tokens"] == 32
        assert "max_tokens" not in upstream.last_body
        params = {"model": "o", "max_tokens": 16,
                  "messages": [{"role": "user", "content": "Think again."}]}  # fmt: skip
        with client.messages.stream(**params) as stream:
            assert "".join(stream.text_stream).startswith("answer #")
        assert upstream.last_body["max_completion_tokens"] == 16
        assert upstream.stats["chat"] == 4  # each refused once, then answered
        # the upstream's refusal of the value names the field the client sent (was: a
        # max_completion_tokens it never sent)
        with pytest.raises(anthropic.BadRequestError) as refused:
            ask(client, "Think long.", model="o", max_tokens=128000, timeout=30)
        assert refused.value.body["error"]["message"] == (
            "max_tokens is too large: 128000. This model supports at most 100000 completion "
            "tokens, whereas you provided 128000.")  # fmt: skip
        # a chat client's own max_tokens is its own: passed on, and the refusal with it
        chat = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            chat.chat.completions.create(
                model="o", max_tokens=8, messages=[{"role": "user", "content": "Hi"}])  # fmt: skip
        assert refused.value.body["param"] == "max_tokens"  # type: ignore[index]
