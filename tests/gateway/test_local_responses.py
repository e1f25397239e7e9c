"""``/v1/responses`` served by the bundled local model (real weights, CPU) through the openai
SDK: converted through its chat path, so the prefix KV cache serves each next turn."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from gateway import responses
from gateway.config import load_config_text
from tests.conftest import Gateway
from tests.fake_upstream import ThreadedServer
from tests.gateway.test_local_api import MODEL, admin_stats, local_config, stored_then_refused
from tests.gateway.test_responses import EVENTS, distinct_types

INSTRUCTIONS = "You are a concise assistant for the ACME hardware store. " * 6


@pytest.fixture(scope="module")
def gw(bundled_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    text = local_config(bundled_model_dir, tmp_path_factory.mktemp("local-responses"))
    gateway = Gateway(load_config_text(text))
    yield gateway
    gateway.stop()


def sdk(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key="key-a", max_retries=0)


def create(c: openai.OpenAI, **body: Any) -> tuple[Any, str]:
    raw = c.responses.with_raw_response.create(
        model=MODEL, temperature=0, max_output_tokens=12, **body
    )
    return raw.parse(), raw.headers["x-cache"]


def test_turn_after_turn_reuses_the_prefix_kv(gw: Gateway) -> None:
    c = sdk(gw)
    first, cache = create(c, instructions=INSTRUCTIONS, input="Do you sell hammers?")
    assert cache == "miss" and first.status in ("completed", "incomplete")
    assert first.output_text and first.usage is not None and first.usage.output_tokens > 0
    second, cache = create(
        c, instructions=INSTRUCTIONS, input="And nails?", previous_response_id=first.id
    )
    assert cache == "miss" and second.output_text
    assert second.usage is not None and second.usage.input_tokens > first.usage.input_tokens
    # the instructions and the whole first turn came from the prefix KV cache
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    # (both of the SDK's required fields: cache_write_tokens read None when left out)
    assert second.usage.input_tokens_details.cache_write_tokens == 0
    assert c.responses.retrieve(second.id).output_text == second.output_text


def test_input_tokens_are_what_a_create_reads(gw: Gateway) -> None:
    """``responses.input_tokens.count`` on the local model: its tokenizer over the chat form,
    the previous response's conversation included: what the answer's usage then says."""
    c = sdk(gw)
    first, _ = create(c, instructions="Be brief.", input="Do you sell saws?")
    assert first.usage is not None
    alone = c.responses.input_tokens.count(
        model=MODEL, instructions="Be brief.", input="Do you sell saws?"
    )
    assert alone.input_tokens == first.usage.input_tokens
    follow = c.responses.input_tokens.count(
        model=MODEL, instructions="Be brief.", input="And drills?", previous_response_id=first.id
    )
    second, _ = create(
        c, instructions="Be brief.", input="And drills?", previous_response_id=first.id
    )
    assert second.usage is not None and follow.input_tokens == second.usage.input_tokens
    with pytest.raises(openai.BadRequestError):  # as a create: the local model has no tools
        c.responses.input_tokens.count(
            model=MODEL, input="x", tools=[{"type": "function", "name": "f", "parameters": {}}]
        )


def test_streaming_from_the_local_model_then_a_replay(gw: Gateway) -> None:
    c = sdk(gw)
    body: dict[str, Any] = {"model": MODEL, "input": "Name one tool.", "temperature": 0,
                            "max_output_tokens": 64}  # fmt: skip
    with c.responses.with_streaming_response.create(stream=True, **body) as raw:
        assert raw.headers["x-cache"] == "miss"
        events = list(raw.parse())
    assert distinct_types(events) == EVENTS
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert text and final.output_text == text and final.status == "completed"
    assert events[0].response.id == final.id  # one response: the id response.created gave
    assert c.responses.retrieve(events[0].response.id).output_text == text
    with c.responses.with_streaming_response.create(stream=True, **body) as raw:
        assert raw.headers["x-cache"] == "exact"
        replayed = list(raw.parse())
    assert distinct_types(replayed) == EVENTS
    assert replayed[-1].response.output_text == text
    usage = replayed[-1].response.usage
    assert usage is not None and usage.input_tokens_details.cache_write_tokens == 0


def test_what_the_local_model_cannot_do_is_a_400(gw: Gateway) -> None:
    c = sdk(gw)
    tool = {"type": "function", "name": "weather", "parameters": {"type": "object"}}
    for body, param in [
        ({"text": {"format": {"type": "json_object"}}}, "text.format"),
        ({"text": {"format": "json_object"}}, "text.format"),  # not an object: a 400 too
        ({"text": "json"}, "text"),
        ({"tools": [tool]}, "tools"),
        ({"previous_response_id": "resp_unknown"}, "previous_response_id"),
        ({"extra_body": {"frobnicate": 1}}, "frobnicate"),
        ({"background": True}, "background"),
        ({"reasoning": {"effort": "low"}}, "reasoning"),
    ]:
        with pytest.raises(openai.BadRequestError) as refused:
            create(c, input="Hello", **body)
        assert refused.value.param == param


def test_a_message_without_content_is_a_400_as_in_chat(gw: Gateway) -> None:
    """A message item with ``content: []`` (but an assistant's) gets the ``400`` a chat turn
    with none gets, naming the item as the client sent it, streamed, counted or not, before
    the cache is looked in (was: read as ``""``, the model answered an empty turn, and the
    answer was stored)."""
    c = sdk(gw)
    hi = {"role": "user", "content": "Hi"}
    refused: list[tuple[list[dict[str, Any]], str]] = [
        ([{"role": "user", "content": []}], "input[0].content"),
        ([{"role": "developer", "content": []}, hi], "input[0].content"),
        ([hi, {"role": "assistant", "content": "Hello!"}, {"type": "message", "role": "user",
                                                            "content": []}], "input[2].content"),
    ]  # fmt: skip
    before = admin_stats(gw)["cache"]
    for items, param in refused:
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as error:
                c.responses.create(model=MODEL, input=items, max_output_tokens=4, stream=stream)
            assert (error.value.param, error.value.code) == (param, "invalid_value"), items
            said = f"'{param}' must be a string or a non-empty list of content parts."
            assert error.value.body["message"] == said  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as error:
            c.responses.input_tokens.count(model=MODEL, input=items)
        assert (error.value.param, error.value.code) == (param, "invalid_value")
    after = admin_stats(gw)["cache"]
    assert (after["lookups"], after["stores"]) == (before["lookups"], before["stores"])
    # an assistant's may be empty, as in chat (its turn is the model's: nothing to answer)
    answered, cache = create(c, input=[hi, {"role": "assistant", "content": []}, hi])
    assert cache == "miss" and answered.output_text


def test_an_answer_stored_for_an_item_the_local_model_cannot_read_is_never_served(
    gw: Gateway,
) -> None:
    """An item the chat form cannot carry (a ``function_call``) is refused before the cache is
    looked in, with the body it had (was: as the request was turned into chat, after the
    lookup, so an answer stored for it, by a build that read the call as the assistant's
    text, was served, streamed or not)."""
    c = sdk(gw)
    call = {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{}"}
    items: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}, call,
                        {"role": "user", "content": "Name one tool."}]  # fmt: skip
    read = responses._chat_message

    def older_build(older: pytest.MonkeyPatch) -> None:
        def as_a_turn(index: int, item: dict[str, Any]) -> dict[str, Any]:
            if item.get("type") == "message":
                return read(index, item)
            return {"role": "assistant", "content": f"{item['name']}({item['arguments']})"}

        older.setattr(responses, "_chat_message", as_a_turn)

    def ask(stream: bool) -> Any:
        return c.responses.with_raw_response.create(
            model=MODEL, input=items, temperature=0, max_output_tokens=64, stream=stream
        )

    for error in stored_then_refused(gw, older_build, ask, openai.BadRequestError):
        assert error.body == {
            "message": "'input[1]' of type 'function_call' is not supported by the local model.",
            "type": "invalid_request_error",
            "param": "input[1]",
            "code": "unsupported_parameter",
        }


def test_a_provider_prompt_cache_setting_is_no_refusal(gw: Gateway) -> None:
    # a client made for OpenAI and the local model alike (was: a 400, "not a request argument")
    for extra in ({"prompt_cache_retention": "24h"}, {"prompt_cache_options": {}}):
        answer, _ = create(sdk(gw), input="Hello", prompt_cache_key="acme", extra_body=extra)
        assert answer.status in ("completed", "incomplete") and answer.output_text


def test_the_no_op_values_clients_send_are_no_refusal(gw: Gateway) -> None:
    # a client that sets them for every model, "the default" (was: a 400 on each)
    for extra in ({"reasoning": {"effort": None}}, {"reasoning": {"effort": None, "summary": None}},
                  {"background": False}):  # fmt: skip
        answer, _ = create(sdk(gw), input="Hello", **extra)
        assert answer.status in ("completed", "incomplete") and answer.output_text
    # Responses fields sent as null by clients that send every field they know, or as the
    # value that asks for nothing (was: a 400 "not a request argument the local model ...")
    unset = {"max_tool_calls": None, "top_logprobs": None, "conversation": None, "prompt": None,
             "context_management": None, "moderation": None}  # fmt: skip
    # (a question no other request asked: the model answers it, not the cache)
    for extra in (unset, {"top_logprobs": 0, "max_tool_calls": 3}):
        answer, _ = create(sdk(gw), input="Hello, nulls", extra_body=extra)
        assert answer.status in ("completed", "incomplete") and answer.output_text


def test_what_the_local_model_cannot_do_is_refused_when_set(gw: Gateway) -> None:
    for body, param in [
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    ]:
        with pytest.raises(openai.BadRequestError) as refused:
            create(sdk(gw), input="Hello", extra_body=body)
        assert refused.value.param == param and refused.value.code == "unsupported_parameter"


def test_an_item_the_local_model_cannot_read_is_named_as_the_client_sent_it(
    bundled_model_dir: Path, tmp_path: Path, upstream_server: ThreadedServer
) -> None:
    """A follow-up's ``input`` is the conversation's end: its items are named by their index in
    the client's ``input`` (was: in the whole conversation, ``input[2]`` for a one-item input),
    and an item only the previous response's conversation holds (another model's, which calls a
    tool) by the ``previous_response_id`` (was: ``input[1]``, which the client never sent)."""
    settings = yaml.safe_load(local_config(bundled_model_dir, tmp_path))
    settings["models"]["gpt"] = {"backend": "openai", "base_url": f"{upstream_server.url}/v1",
                                 "api_key": "sk-test"}  # fmt: skip
    gateway = Gateway(load_config_text(yaml.safe_dump(settings)))
    try:
        c = sdk(gateway)
        first, _ = create(c, input="Hello")
        result = {"type": "function_call_output", "call_id": "call_1", "output": "12 C"}
        for count in (False, True):
            with pytest.raises(openai.BadRequestError) as refused:
                if count:
                    c.responses.input_tokens.count(
                        model=MODEL, input=[result], previous_response_id=first.id
                    )
                else:
                    create(c, input=[result], previous_response_id=first.id)
            assert refused.value.param == "input[0]"
            error: Any = refused.value.body
            assert error["message"].startswith("'input[0]' of type 'function_call_output'")
        call = {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{}"}
        made = c.responses.create(model="gpt", input=[{"role": "user", "content": "Oslo?"},
                                                      call, result])  # fmt: skip
        with pytest.raises(openai.BadRequestError) as refused:
            create(c, input="Thanks.", previous_response_id=made.id)
        assert refused.value.param == "previous_response_id"
        assert "an item of type 'function_call'" in refused.value.message  # (not the client's)
        empty = c.responses.create(model="gpt", input=[{"role": "user", "content": []}])
        with pytest.raises(openai.BadRequestError) as refused:  # (its turn: no chat turn here)
            create(c, input="Thanks.", previous_response_id=empty.id)
        assert refused.value.param == "previous_response_id"
        assert refused.value.message.endswith("cannot read: a message with no content.")
    finally:
        gateway.stop()


def test_a_chat_template_refusal_names_the_input_when_counted_too(
    no_system_gateway: Gateway,
) -> None:
    """A local model whose chat template refuses the turns (Gemma's: no system role, which
    ``instructions`` become): its 400 names ``input``, a Responses field, for an
    ``input_tokens`` count as for a create (was ``messages``, the chat form's field)."""
    c = sdk(no_system_gateway)
    asked: dict[str, Any] = {"model": "tiny", "instructions": "Be brief.", "input": "hi"}
    with pytest.raises(openai.BadRequestError) as counted:
        c.responses.input_tokens.count(**asked)
    with pytest.raises(openai.BadRequestError) as created:
        c.responses.create(max_output_tokens=4, **asked)
    for refused in (counted, created):
        assert "System role not supported" in refused.value.message
        assert refused.value.param == "input"


def test_an_answer_cut_at_max_output_tokens_is_incomplete_with_its_message(gw: Gateway) -> None:
    c = sdk(gw)
    cut = c.responses.create(model=MODEL, input="Write a long story about a lighthouse.",
                             temperature=0, max_output_tokens=3)  # fmt: skip
    assert cut.status == "incomplete" and cut.incomplete_details is not None
    assert [item.status for item in cut.output] == ["incomplete"]
    events = list(c.responses.create(model=MODEL, input="Write a long story about a harbour.",
                                     temperature=0, max_output_tokens=3, stream=True))  # fmt: skip
    done = [e.item.status for e in events if e.type == "response.output_item.done"]
    last = events[-1]
    assert last.type == "response.incomplete" and done == ["incomplete"]
    assert [item.status for item in last.response.output] == ["incomplete"]


def test_a_local_response_says_when_it_completed_and_its_service_tier(gw: Gateway) -> None:
    """The local model's Response carries ``completed_at`` (a completed one's; null while in
    progress and when cut short) and ``service_tier``, as an upstream's does, streamed or
    not, and so does a hit of it (were: left out, so ``completed_at`` was None even on a
    completed answer and on its hits)."""
    c = sdk(gw)
    body: dict[str, Any] = {"model": MODEL, "input": "Name one fruit.", "temperature": 0,
                            "max_output_tokens": 64}  # fmt: skip
    raw = c.responses.with_raw_response.create(**body)
    made = raw.parse()
    assert raw.headers["x-cache"] == "miss" and made.status == "completed"
    assert made.completed_at is not None and made.completed_at >= made.created_at
    assert made.service_tier == "default"
    raw = c.responses.with_raw_response.create(**body)
    hit = raw.parse()
    assert raw.headers["x-cache"] == "exact" and hit.completed_at is not None
    assert hit.service_tier == "default"
    events = list(c.responses.create(**{**body, "input": "Name one vegetable."}, stream=True))
    assert events[0].response.completed_at is None  # type: ignore[union-attr]
    final = events[-1].response  # type: ignore[union-attr]
    assert final.status == "completed" and final.completed_at is not None
    assert final.service_tier == "default"
    cut = c.responses.create(**{**body, "max_output_tokens": 1})
    assert cut.status == "incomplete" and cut.completed_at is None
    assert cut.service_tier == "default"


def test_a_local_response_was_created_when_it_was_asked_for(
    gw: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local Response that was not streamed said it was created when it had completed: its
    ``created_at`` and ``completed_at`` were one reading of the clock, taken once the answer was
    generated (a latency of 0, however long the model took; a streamed one's ``created_at`` is
    its start). Here the local backend's clock reads a minute earlier than the Response
    adapter's, as it does when it starts a generation that takes a minute."""
    import gateway.local

    class Earlier:
        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        def time(self) -> float:
            return time.time() - 60

    monkeypatch.setattr(gateway.local, "time", Earlier())
    raw = sdk(gw).responses.with_raw_response.create(
        model=MODEL, input="Name one colour.", temperature=0, max_output_tokens=64
    )
    made = raw.parse()
    assert raw.headers["x-cache"] == "miss" and made.status == "completed"
    assert made.completed_at is not None
    assert made.completed_at - made.created_at >= 59  # was 0: both read at the end


def test_unset_sampling_echoes_what_the_model_applied(gw: Gateway) -> None:
    """A Response echoes its temperature and top_p: those the request left unset are the
    model's own (the bundled model card's 0.2 / 0.9), not OpenAI's 1.0, streamed or not."""
    c = sdk(gw)
    body: dict[str, Any] = {"model": MODEL, "input": "Name one tool.", "max_output_tokens": 2,
                            "extra_headers": {"cache-control": "no-store"}}  # fmt: skip
    unset = c.responses.create(**body)
    assert (unset.temperature, unset.top_p) == (0.2, 0.9)  # was (1.0, 1.0)
    assert c.responses.retrieve(unset.id).temperature == 0.2  # as stored
    greedy = c.responses.create(temperature=0, **body)
    assert (greedy.temperature, greedy.top_p) == (0, 0.9)
    with c.responses.with_streaming_response.create(stream=True, top_p=0.5, **body) as raw:
        events = list(raw.parse())
    assert (events[0].response.temperature, events[0].response.top_p) == (0.2, 0.5)
    assert (events[-1].response.temperature, events[-1].response.top_p) == (0.2, 0.5)


def test_a_streamed_response_cut_short_can_be_retrieved_and_continued(gw: Gateway) -> None:
    """An ``incomplete`` Response is kept as OpenAI keeps it, streamed or not: the client can
    fetch it and continue after it (it was neither, streamed: 404 and 400 not found)."""
    c = sdk(gw)
    body: dict[str, Any] = {"model": MODEL, "input": "Write a long story about a mill.",
                            "temperature": 0, "max_output_tokens": 3}  # fmt: skip
    for streamed in (False, True):
        if streamed:
            with c.responses.with_streaming_response.create(stream=True, **body) as raw:
                cut = list(raw.parse())[-1].response
        else:
            cut = c.responses.create(**body)
        assert cut.status == "incomplete"
        assert c.responses.retrieve(cut.id).output_text == cut.output_text
        then = c.responses.create(**{**body, "input": "Go on."}, previous_response_id=cut.id)
        assert then.previous_response_id == cut.id and then.output_text


def test_truncation_auto_leaves_out_the_oldest_turns_until_the_input_fits(
    bundled_model_dir: Path, tmp_path: Path
) -> None:
    """``truncation: "auto"``: the oldest input items are left out until the input fits the
    context window, never the instructions (was: a 400, as ``disabled`` still is)."""
    config = local_config(bundled_model_dir, tmp_path, max_context=256)
    gateway = Gateway(load_config_text(config))
    try:
        c = sdk(gateway)
        turns = [{"role": "user", "content": "word " * 60}, {"role": "assistant", "content": "ok"}]
        body: dict[str, Any] = {"instructions": INSTRUCTIONS, "input": [*turns * 3, *turns[:1]]}
        with pytest.raises(openai.BadRequestError) as refused:
            create(c, truncation="disabled", **body)
        assert refused.value.code == "context_length_exceeded"
        fitted, _ = create(c, truncation="auto", **body)
        assert fitted.status in ("completed", "incomplete") and fitted.truncation == "auto"
        assert fitted.usage is not None and fitted.usage.input_tokens + 12 <= 256
        counted = c.responses.input_tokens.count(model=MODEL, truncation="auto", **body)
        assert counted.input_tokens == fitted.usage.input_tokens  # what a create reads
        kept = [c.responses.input_tokens.count(model=MODEL, instructions=INSTRUCTIONS,
                                               input=body["input"][-n:]).input_tokens
                for n in range(1, len(body["input"]))]  # fmt: skip
        assert fitted.usage.input_tokens in kept  # the instructions and the newest items
    finally:
        gateway.stop()


def test_truncation_auto_of_a_long_conversation_encodes_it_a_few_times(
    bundled_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``truncation: "auto"`` keeps the newest items that fit; it encoded the whole prompt
    again after each item it left out (quadratic in a long conversation's items), and now
    halves its way to how many to leave out: the same items kept, a few encodings."""
    config = local_config(bundled_model_dir, tmp_path, max_context=256)
    gateway = Gateway(load_config_text(config))
    try:
        c = sdk(gateway)
        turns = [{"role": "user", "content": "word " * 9}, {"role": "assistant", "content": "ok"}]
        items = [*turns * 40, turns[0]]
        body: dict[str, Any] = {"instructions": "Be brief.", "input": items}
        kept = [c.responses.input_tokens.count(model=MODEL, instructions="Be brief.",
                                               input=items[-n:]).input_tokens
                for n in range(1, len(items) + 1)]  # fmt: skip
        fits = [count for count in kept if count + 12 <= 256]
        assert 1 < len(fits) < len(kept)  # (some items are left out, not all)
        engine = gateway.runtime.backends[MODEL]._engine.engine
        encode, encodings = engine.encode_chat, []

        def counted(*args: Any, **kwargs: Any) -> list[int]:
            encodings.append(args)
            return list(encode(*args, **kwargs))

        monkeypatch.setattr(engine, "encode_chat", counted)
        fitted, _ = create(c, truncation="auto", **body)
        assert fitted.usage is not None and fitted.usage.input_tokens == fits[-1]
        assert len(encodings) <= 2 + (len(items) - 1).bit_length()  # (was one per item left out)
    finally:
        gateway.stop()


def start_worker(model_dir: Path, tmp_path: Path, port: int = 0) -> Gateway:
    """A ``cachegate worker`` on ``port`` (0: any free one)."""
    from gateway.runtime import Runtime

    settings = yaml.safe_load(local_config(model_dir, tmp_path / "worker"))
    del settings["auth"]
    config = load_config_text(yaml.safe_dump(settings))
    return Gateway(config, port=port, runtime=Runtime.build(config, worker=True))


def in_front(worker: Gateway, tmp_path: Path) -> Gateway:
    """A gateway in front of ``worker`` with no keys (each client key is a tenant, forwarded)
    and no response cache."""
    front = {"data_dir": str(tmp_path / "front"), "cache": {"enabled": False},
             "models": {MODEL: {"backend": "openai", "base_url": f"{worker.url}/v1"}}}  # fmt: skip
    return Gateway(load_config_text(yaml.safe_dump(front)))


def test_a_response_deleted_through_a_gateway_is_gone_from_its_worker(
    bundled_model_dir: Path, tmp_path: Path
) -> None:
    """The worker stores the Response too: the gateway's delete reaches that copy, so nobody
    can continue after it."""
    worker = start_worker(bundled_model_dir, tmp_path)
    gateway = in_front(worker, tmp_path)
    try:
        c = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="client-key", max_retries=0)
        made, _ = create(c, input="The locker code is 4471. Say ok.")
        c.responses.delete(made.id)
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(made.id)
        with pytest.raises(openai.BadRequestError):  # (the worker's copy would answer it)
            create(c, input="What is the locker code?", previous_response_id=made.id)
    finally:
        gateway.stop()
        worker.stop()


def test_a_conversation_goes_on_after_its_worker_restarted(
    bundled_model_dir: Path, tmp_path: Path
) -> None:
    """The worker keeps its Responses in memory: restarted, it holds none. The gateway holds
    the conversation, and sends it in place of the id the worker no longer knows."""
    worker = start_worker(bundled_model_dir, tmp_path)
    gateway = in_front(worker, tmp_path)
    try:
        c = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="client-key", max_retries=0)
        made, _ = create(c, input="Do you sell hammers?")
        alone, _ = create(c, input="And nails?")
        assert made.usage is not None and alone.usage is not None
        worker.stop()
        worker = start_worker(bundled_model_dir, tmp_path / "again", port=worker.server.port)
        body: dict[str, Any] = {"model": MODEL, "input": "And nails?", "temperature": 0,
                                "max_output_tokens": 8, "previous_response_id": made.id}  # fmt: skip
        with c.responses.with_streaming_response.create(stream=True, **body) as raw:
            streamed = list(raw.parse())[-1].response
        then = c.responses.create(**body)
        for answer in (streamed, then):
            assert answer.status in ("completed", "incomplete") and answer.output_text
            assert answer.usage is not None  # the first turn was sent again, answer and all
            assert answer.usage.input_tokens > alone.usage.input_tokens + made.usage.output_tokens
    finally:
        gateway.stop()
        worker.stop()
