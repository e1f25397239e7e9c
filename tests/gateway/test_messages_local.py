"""POST /v1/messages served by the bundled local model (real weights, CPU) through its chat path,
with the official anthropic SDK: answers, streaming, prefix KV reuse turn after turn reported as
``cache_read_input_tokens``, the response cache, count_tokens, a prefill continued, unsupported
input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import yaml

from gateway import local
from gateway.config import load_config_text
from tests.conftest import Gateway
from tests.gateway.test_local_api import stored_then_refused
from tests.gateway.test_messages_api import EMPTY, blank_turns, invalid_request

MODEL = "smollm2"
SYSTEM = "You are a concise assistant for the ACME hardware store. " * 6


@pytest.fixture(scope="module")
def gw(bundled_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    settings = {"backend": "local", "source": str(bundled_model_dir), "threads": 1}
    text = yaml.safe_dump({
        "data_dir": str(tmp_path_factory.mktemp("messages-local")),
        "cache": {"semantic": {"enabled": False}},
        "models": {MODEL: settings},
    })  # fmt: skip
    with Gateway(load_config_text(text)) as gateway:
        yield gateway


@pytest.fixture
def client(gw: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0)


def create(client: anthropic.Anthropic, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    extra = {"temperature": 0, **kwargs.pop("extra_body", {})}  # greedy: reproducible
    return client.messages.with_raw_response.create(
        model=MODEL, max_tokens=12, system=SYSTEM, messages=messages, extra_body=extra, **kwargs
    )


def test_create_and_prefix_reuse_turn_after_turn(client: anthropic.Anthropic) -> None:
    turn1 = [{"role": "user", "content": "Do you sell hammers?"}]
    first = create(client, turn1)
    assert first.headers["x-cache"] == "miss"
    message = first.parse()
    assert message.type == "message" and message.role == "assistant" and message.model == MODEL
    assert message.content[0].type == "text" and message.content[0].text.strip()
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 60 and message.usage.cache_read_input_tokens == 0
    turn2 = [*turn1, {"role": "assistant", "content": message.content[0].text},
             {"role": "user", "content": "And nails?"}]  # fmt: skip
    second = create(client, turn2).parse()
    # turn 1's prompt, and its answer, came from the prefix KV cache
    assert second.usage.cache_read_input_tokens >= message.usage.input_tokens
    assert create(client, turn2).headers["x-cache"] == "exact"


def test_stream_matches_create_and_is_cached(client: anthropic.Anthropic) -> None:
    messages = [{"role": "user", "content": "What colour is the sky?"}]
    reference = create(client, messages, extra_headers={"cache-control": "no-store"}).parse()
    with client.messages.stream(
        model=MODEL, max_tokens=12, system=SYSTEM, messages=messages,
        extra_body={"temperature": 0},
    ) as stream:  # fmt: skip
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert stream.response.headers["x-cache"] == "miss"
    assert streamed == final.content[0].text == reference.content[0].text
    assert final.stop_reason == reference.stop_reason
    assert final.usage.output_tokens == reference.usage.output_tokens
    hit = create(client, messages)
    assert hit.headers["x-cache"] == "exact"
    assert hit.parse().content[0].text == streamed


def test_stop_reasons_max_tokens_and_the_stop_sequence_that_matched(
    client: anthropic.Anthropic,
) -> None:
    """Greedy answers to one question: cut by max_tokens, and by a stop sequence taken from
    the uncut answer (JSON and streamed), which the model never shows."""
    question = [{"role": "user", "content": "Describe the ACME hardware store in detail."}]
    params: dict[str, Any] = {"model": MODEL, "system": SYSTEM, "messages": question,
                              "extra_body": {"temperature": 0},  # greedy: reproducible
                              "extra_headers": {"cache-control": "no-store"}}  # fmt: skip
    reference = client.messages.create(max_tokens=12, **params)
    text = reference.content[0].text
    words = text.split()
    assert len(words) >= 3  # so the answer did not end within its first two tokens
    cut = client.messages.create(max_tokens=2, **params)
    assert cut.stop_reason == "max_tokens" and cut.stop_sequence is None
    assert text.startswith(cut.content[0].text) and cut.usage.output_tokens == 2
    stop = " " + words[1]  # its first occurrence ends the answer
    others = [f"zz{n}" for n in range(5)]  # more than chat's 4: Messages sets no such limit
    stopped = client.messages.create(max_tokens=12, stop_sequences=[*others, stop], **params)
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == stop
    assert stopped.content[0].text == text[: text.index(stop)]
    with client.messages.stream(max_tokens=12, stop_sequences=[stop], **params) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop
    assert final.content[0].text == stopped.content[0].text


def test_count_tokens_counts_the_chat_prompt(client: anthropic.Anthropic) -> None:
    messages = [{"role": "user", "content": "Count me, please."}]
    counted = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=messages)
    usage = create(client, messages, extra_headers={"cache-control": "no-cache"}).parse().usage
    assert counted.input_tokens == usage.input_tokens + usage.cache_read_input_tokens


def test_a_final_assistant_turn_is_continued_not_answered_anew(
    client: anthropic.Anthropic, gw: Gateway, bundled_model_dir: Path
) -> None:
    """A prefill: the prompt ends with the assistant's text (no end of turn, no new header),
    the answer is only what follows it, the cache replays it, count_tokens counts that prompt;
    a chat request answers the same turns anew unless it asks vLLM's continue_final_message."""
    from transformers import AutoTokenizer

    question = {"role": "user", "content": "List the first five prime numbers, comma separated."}
    prefilled = [question, {"role": "assistant", "content": "2, 3,"}]
    counted = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=prefilled)
    alone = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=[question])
    prefill_ids = AutoTokenizer.from_pretrained(bundled_model_dir).encode("2, 3,")
    # [question]'s prompt ends with the new turn's header; the prefill's text follows it
    assert counted.input_tokens == alone.input_tokens + len(prefill_ids)
    fresh = create(client, prefilled)
    assert fresh.headers["x-cache"] == "miss"
    message = fresh.parse()
    usage = message.usage
    assert usage.input_tokens + usage.cache_read_input_tokens == counted.input_tokens
    text = message.content[0].text
    assert "5, 7" in text and not text.lstrip().startswith("2")  # continued, not repeated
    replay = create(client, prefilled)
    assert replay.headers["x-cache"] == "exact"
    assert replay.parse().content[0].text == text
    assert replay.parse().stop_reason == message.stop_reason
    with client.messages.stream(
        model=MODEL, max_tokens=12, system=SYSTEM, messages=prefilled,
        extra_body={"temperature": 0}, extra_headers={"cache-control": "no-cache"},  # (the model's)
    ) as stream:  # fmt: skip
        streamed = "".join(stream.text_stream)
    assert stream.response.headers["x-cache"] == "refresh" and streamed == text
    chat = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
    asked: dict[str, Any] = {"model": MODEL, "max_tokens": 12, "temperature": 0,
                             "messages": [{"role": "system", "content": SYSTEM}, *prefilled]}  # fmt: skip
    anew = chat.chat.completions.create(**asked)
    assert anew.choices[0].message.content != text  # OpenAI's rule: a new turn
    continued = chat.chat.completions.create(**asked, extra_body={"continue_final_message": True})
    assert continued.choices[0].message.content == text
    assert continued.usage is not None and continued.usage.prompt_tokens == counted.input_tokens


def test_empty_turns_are_refused_but_an_empty_prefill_is_answered(
    client: anthropic.Anthropic,
) -> None:
    """Anthropic's rule: no turn may have empty content (``""`` or ``[]``) but the final
    assistant one. Was: ``[]`` read as ``""`` and answered by the local model (and stored)."""
    hi = {"role": "user", "content": "Do you sell hammers?"}
    refused = [
        ([{"role": "user", "content": []}], 0),
        ([hi, {"role": "assistant", "content": ""}, {"role": "user", "content": "Nails?"}], 1),
    ]  # fmt: skip
    for messages, index in refused:
        expected = invalid_request(f"messages.{index}: {EMPTY}")
        with pytest.raises(anthropic.BadRequestError) as error:
            create(client, messages)
        assert error.value.status_code == 400 and error.value.body == expected
        with pytest.raises(anthropic.BadRequestError) as error:
            client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=messages)
        assert error.value.body == expected
    alone = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=[hi])
    for empty in ("", []):
        prefill = [hi, {"role": "assistant", "content": empty}]
        counted = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=prefill)
        assert counted.input_tokens == alone.input_tokens  # (the assistant's header, opened)
        message = create(client, prefill).parse()
        assert message.content[0].text.strip()
        assert message.usage.input_tokens + message.usage.cache_read_input_tokens == (
            alone.input_tokens
        )


def test_empty_or_blank_text_and_a_prefill_ending_in_whitespace_are_refused(
    client: anthropic.Anthropic,
) -> None:
    """Anthropic's rules for text: no empty text block, no turn of only whitespace, no
    prefill ending in whitespace. Was: the local model answered them (and they were stored)."""
    for messages, said in blank_turns():
        with pytest.raises(anthropic.BadRequestError) as error:
            create(client, messages)
        assert error.value.status_code == 400 and error.value.body == invalid_request(said)
        with pytest.raises(anthropic.BadRequestError) as error:
            client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=messages)
        assert error.value.body == invalid_request(said)
    spaced = [{"type": "text", "text": "\n"}, {"type": "text", "text": "Do you sell nails?"}]
    answered = create(client, [{"role": "user", "content": spaced}])
    assert answered.headers["x-cache"] == "miss" and answered.parse().content[0].text.strip()


def test_continue_final_message_is_refused_where_it_cannot_hold(gw: Gateway) -> None:
    """vLLM's rules: not together with a generation prompt, only for a final assistant turn."""
    chat = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
    prefilled: list[Any] = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hel"},
    ]
    for turns, extra in (
        (prefilled, {"continue_final_message": True, "add_generation_prompt": True}),
        (prefilled, {"add_generation_prompt": False}),  # a closed turn and no new one
        (prefilled[:1], {"continue_final_message": True}),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            chat.chat.completions.create(
                model=MODEL, max_tokens=2, messages=turns, extra_body=extra
            )
        assert refused.value.code == "invalid_value"


def test_continue_final_message_null_is_unset(gw: Gateway) -> None:
    """null means unset, as for every other field (was a 400 "Set exactly one ...")."""
    chat = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
    prefilled: list[Any] = [
        {"role": "user", "content": "List the first five prime numbers, comma separated."},
        {"role": "assistant", "content": "2, 3,"},
    ]
    asked: dict[str, Any] = {"model": MODEL, "max_tokens": 6, "temperature": 0,
                             "messages": prefilled, "extra_headers": {"cache-control": "no-store"}}  # fmt: skip
    anew = chat.chat.completions.create(**asked).usage
    same = chat.chat.completions.create(**asked, extra_body={"continue_final_message": None})
    assert same.usage is not None and anew is not None
    assert same.usage.prompt_tokens == anew.prompt_tokens  # a new turn, as without the field
    continued = chat.chat.completions.create(**asked, extra_body={"continue_final_message": True})
    also = {"continue_final_message": True, "add_generation_prompt": None}
    again = chat.chat.completions.create(**asked, extra_body=also)
    assert again.usage is not None and continued.usage is not None
    assert again.usage.prompt_tokens == continued.usage.prompt_tokens != anew.prompt_tokens


def test_turns_the_chat_template_refuses_are_a_400_when_counted_too(
    no_system_gateway: Gateway,
) -> None:
    client = anthropic.Anthropic(base_url=no_system_gateway.url, api_key="unused", max_retries=0)
    asked: dict[str, Any] = {"model": "tiny", "system": "Be brief.",
                             "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    with pytest.raises(anthropic.BadRequestError) as counted:
        client.messages.count_tokens(**asked)
    with pytest.raises(anthropic.BadRequestError) as created:
        client.messages.create(max_tokens=4, **asked)
    for refused in (counted, created):
        assert "System role not supported" in refused.value.message
        assert refused.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]


def test_what_the_local_model_cannot_do_is_a_400(client: anthropic.Anthropic) -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
    }
    with pytest.raises(anthropic.BadRequestError) as refused:
        create(client, [{"role": "user", "content": [image]}])
    assert refused.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "image" in refused.value.message
    with pytest.raises(anthropic.BadRequestError):
        create(client, [{"role": "user", "content": "hi"}], extra_body={"container": "c"})
    with pytest.raises(anthropic.BadRequestError) as refused:  # the engine's own bound
        create(client, [{"role": "user", "content": "hi"}], stop_sequences=["z"] * 65)
    assert "stop" in refused.value.message and "64" in refused.value.message


#: A conversation that used a tool (a ``tool_use`` block and its result): the local model has
#: no tools, so it refuses it.
TOOL_TURNS: list[Any] = [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12 C"}]},
]  # fmt: skip


def test_the_local_models_refusals_name_the_fields_the_client_sent(
    client: anthropic.Anthropic,
) -> None:
    """The local model checks the chat form of the request; its 400 names the Messages field
    (was "stop takes up to 64 …" for stop_sequences, "'messages[1].tool_calls'" for a
    tool_use block, "'response_format'" for structured outputs), JSON and streamed alike."""
    hi = [{"role": "user", "content": "hi"}]
    cases: list[tuple[list[Any], dict[str, Any], str]] = [
        (hi, {"stop_sequences": ["z"] * 65}, "stop_sequences takes up to 64 non-empty strings"),
        (hi, {"stop_sequences": [""]}, "stop_sequences takes up to 64 non-empty strings"),
        (TOOL_TURNS, {}, "'tool_use' is not supported by the local model."),
        (hi, {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
         "'output_config.format' other than text is not supported by the local model."),
    ]  # fmt: skip
    for messages, extra, message in cases:
        for stream in (False, True):
            with pytest.raises(anthropic.BadRequestError) as refused:
                create(client, messages, stream=stream, **extra)
            assert refused.value.body == invalid_request(message)


def test_an_answer_stored_for_a_tool_use_turn_is_never_served(
    gw: Gateway, client: anthropic.Anthropic
) -> None:
    """A conversation that used a tool (``tool_use``, ``tool_result``), which the local model
    cannot read, is refused before the cache is looked in, with the body it had (was: as the
    prompt was tokenized, after the lookup, so an answer stored for it by a build that
    rendered the turns anyway was served, streamed or not)."""
    turns = [{"role": "user", "content": "Weather in Oslo, stored by an older build?"},
             *TOOL_TURNS[1:]]  # fmt: skip

    def older_build(older: pytest.MonkeyPatch) -> None:
        older.setattr(local, "_check_messages", lambda messages: None)

    def ask(stream: bool) -> Any:
        return create(client, turns, stream=stream)

    for error in stored_then_refused(gw, older_build, ask, anthropic.BadRequestError, admin={}):
        assert error.body == invalid_request("'tool_use' is not supported by the local model.")


def test_count_tokens_refusals_name_the_fields_the_client_sent(
    client: anthropic.Anthropic,
) -> None:
    """``count_tokens`` refuses what a create refuses, in the same words (was "stop takes up
    to 64 …" and "'messages[1].tool_calls' …": the chat form's fields)."""
    hi = [{"role": "user", "content": "hi"}]
    cases: list[tuple[list[Any], dict[str, Any], str]] = [
        (hi, {"stop_sequences": ["z"] * 65}, "stop_sequences takes up to 64 non-empty strings"),
        (TOOL_TURNS, {}, "'tool_use' is not supported by the local model."),
    ]
    for messages, extra, message in cases:
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.count_tokens(
                model=MODEL, system=SYSTEM, messages=messages, extra_body=extra
            )
        assert refused.value.body == invalid_request(message)


def test_message_start_reports_the_prompts_tokens(client: anthropic.Anthropic) -> None:
    """As Anthropic's streams do, ``message_start`` says how many input tokens the prompt has
    (was 0 until ``message_delta``), split as the final usage splits them: those read from the
    prefix cache (``cache_read_input_tokens``) and the rest (was: all of them as
    ``input_tokens`` there, fewer in ``message_delta``)."""
    messages = [{"role": "user", "content": "Name a tool for cutting wood."}]
    counted = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=messages)
    reads = []
    for _ in range(2):  # the second one reads its prompt from the prefix cache
        events = list(create(client, messages, stream=True,
                             extra_headers={"cache-control": "no-store"}).parse())  # fmt: skip
        start = events[0]
        assert start.type == "message_start"
        first = start.message.usage
        final = [e for e in events if e.type == "message_delta"][-1].usage
        assert final.input_tokens is not None and final.cache_read_input_tokens is not None
        assert final.input_tokens + final.cache_read_input_tokens == counted.input_tokens
        assert first.input_tokens == final.input_tokens
        assert first.cache_read_input_tokens == final.cache_read_input_tokens
        assert first.cache_creation_input_tokens == 0
        reads.append(final.cache_read_input_tokens)
    assert reads[1] > 0


def test_top_k_reaches_the_local_model(client: anthropic.Anthropic) -> None:
    """The local model honours a Messages request's ``top_k`` (not sent in the chat body, as
    an OpenAI upstream refuses it): ``top_k: 1`` at temperature 1 answers as greedy decoding."""
    messages = [{"role": "user", "content": "Name a kind of screwdriver."}]
    plain = {"extra_headers": {"cache-control": "no-store"}}
    greedy = create(client, messages, **plain).parse()
    for _ in range(3):
        asked = {"temperature": 1.0, "top_k": 1}
        sampled = create(client, messages, extra_body=asked, **plain).parse()
        assert sampled.content[0].text == greedy.content[0].text
