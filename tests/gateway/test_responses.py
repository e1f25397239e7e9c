"""``/v1/responses`` through the official openai SDK, against the fake upstream (which speaks
the Responses API as OpenAI's reference describes it): caching, scope, streaming, stored
responses, ``previous_response_id``, tenants, and what is never served across APIs."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
import yaml
from openai.types.responses import ResponseErrorEvent

from gateway.stored import ResponseStore, StoredResponse
from tests.conftest import Gateway
from tests.fake_upstream import FakeUpstream, ThreadedServer

MODEL = "fake-model"
EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def sdk(gw: Gateway, key: str = "sk-anything") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0)


def create(c: openai.OpenAI, **body: Any) -> Any:
    """(response, x-cache) of a non-streaming create."""
    raw = c.responses.with_raw_response.create(model=MODEL, **body)
    return raw.parse(), raw.headers["x-cache"]


def stream(c: openai.OpenAI, **body: Any) -> tuple[list[Any], str]:
    with c.responses.with_streaming_response.create(model=MODEL, stream=True, **body) as raw:
        return list(raw.parse()), raw.headers["x-cache"]


def distinct_types(events: list[Any]) -> list[str]:
    """Event types in order, repeated deltas folded into one."""
    out: list[str] = []
    for event in events:
        if not out or out[-1] != event.type:
            out.append(event.type)
    return out


@pytest.fixture
def gw(make_gateway: Callable[..., Gateway]) -> Gateway:
    return make_gateway()


def test_create_miss_then_exact_hit_as_a_new_response(gw: Gateway, upstream: FakeUpstream) -> None:
    c = sdk(gw)
    first, cache1 = create(c, input="What is the tallest mountain?", instructions="Be brief.")
    second, cache2 = create(c, input="What is the tallest mountain?", instructions="Be brief.")
    assert (cache1, cache2) == ("miss", "exact")
    assert (
        first.output_text.startswith("answer #") and "instructions=Be brief." in first.output_text
    )
    assert second.output_text == first.output_text
    assert second.id != first.id and second.status == "completed"
    assert second.usage is not None and second.usage.output_tokens > 0
    assert upstream.stats["responses"] == 1
    assert upstream.last_body["input"] == "What is the tallest mountain?"  # forwarded as sent


def test_a_hit_completes_when_it_is_created(gw: Gateway) -> None:
    """A hit's ``completed_at`` is its own, as its ``created_at`` is (it kept the stored
    answer's: a response completed before it was created, a negative latency for a client
    that measures one), and a replayed stream opens, as OpenAI's does, with none yet (its
    ``response.created`` said it had completed while ``in_progress``)."""
    c = sdk(gw)
    first, _ = create(c, input="When did this finish?")
    assert first.completed_at is not None and first.completed_at >= first.created_at
    time.sleep(1.1)  # (whole seconds: the hit's second is a later one)
    hit, cache = create(c, input="When did this finish?")
    assert cache == "exact" and hit.created_at > first.created_at
    assert hit.completed_at is not None and hit.completed_at >= hit.created_at
    events, cache = stream(c, input="When did this finish?")
    assert cache == "exact" and events[0].response.completed_at is None
    assert events[-1].response.completed_at >= events[-1].response.created_at
    replayed = list(c.responses.retrieve(first.id, stream=True))
    assert replayed[0].response.completed_at is None  # type: ignore[union-attr]
    assert replayed[-1].response.completed_at == first.completed_at  # type: ignore[union-attr]


def test_the_api_defaults_sent_share_the_entry_of_a_request_that_leaves_them_out(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """A request that spells out the Responses API's defaults (``truncation: "disabled"``,
    ``include: []``, ``parallel_tool_calls: true``, ``tool_choice: "auto"``, ...) asks what
    one that leaves them out asks: an exact hit (was: a miss and an upstream call each); any
    other value of those fields stays a scope of its own."""
    c = sdk(gw)
    _, cache = create(c, input="Name a prime number.")
    assert cache == "miss"
    defaults: dict[str, Any] = {
        "truncation": "disabled", "include": [], "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [], "text": {"format": {"type": "text"}},
        "extra_body": {"background": False},
    }  # fmt: skip
    for name, value in defaults.items():
        _, cache = create(c, input="Name a prime number.", **{name: value})
        assert cache == "exact", name
    _, cache = create(c, input="Name a prime number.", **defaults)
    assert cache == "exact" and upstream.stats["responses"] == 1
    others: list[dict[str, Any]] = [
        {"truncation": "auto"}, {"include": ["message.output_text.logprobs"]},
        {"parallel_tool_calls": False}, {"tool_choice": "none"},
    ]  # fmt: skip
    for other in others:
        _, cache = create(c, input="Name a prime number.", **other)
        assert cache == "miss", other
    assert upstream.stats["responses"] == 1 + len(others)


def test_nested_nulls_share_the_entry_of_the_fields_left_out(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """A nested field OpenAI documents as optional, sent as null (``text.format``,
    ``reasoning.effort``, a function tool's ``description``: what clients that send back a
    Response's echo send), is the field left out: an exact hit (was: a miss and an upstream
    call each). A value there, or a null that is a value (a JSON schema's ``default``), keys
    apart."""
    c = sdk(gw)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    tool = {"type": "function", "name": "weather", "parameters": schema, "strict": None}
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"text": {"format": None}}, {}),
        ({"text": {"verbosity": None}}, {}),
        ({"text": {"format": {"type": "text"}, "verbosity": None}}, {}),
        ({"extra_body": {"reasoning": {"effort": None, "summary": None}}}, {}),
        ({"tools": [{**tool, "description": None}]}, {"tools": [tool]}),
        ({"text": {"format": {"type": "json_object"}, "verbosity": None}},
         {"text": {"format": {"type": "json_object"}}}),
    ]  # fmt: skip
    for i, (nulls, absent) in enumerate(pairs):
        question = f"Name a river, take {i}."
        _, cache = create(c, input=question, **nulls)
        assert cache == "miss", nulls
        sent = nulls.get("extra_body", nulls)  # (the nulls went out as sent)
        assert all(upstream.last_body.get(k) == v for k, v in sent.items()), nulls
        _, cache = create(c, input=question, **absent)
        assert cache == "exact", nulls
    calls = upstream.stats["responses"]
    typed = {**schema, "properties": {"city": {"type": ["string", "null"], "default": None}}}
    apart: list[dict[str, Any]] = [
        {"text": {"verbosity": "low"}},
        {"extra_body": {"reasoning": {"effort": "low", "summary": None}}},
        {"tools": [{**tool, "description": "The weather in a city."}]},
        {"tools": [{**tool, "parameters": typed}]},  # (a schema's null is a value)
        {"tools": [{**tool, "strict": True}]},
    ]
    for variant in apart:
        _, cache = create(c, input="Name a river, take 4.", **variant)
        assert cache == "miss", variant
    assert upstream.stats["responses"] == calls + len(apart)


def test_include_in_another_order_shares_the_entry(gw: Gateway, upstream: FakeUpstream) -> None:
    """``include`` is a set of what to add to the answer: its order asks nothing (was: a miss
    for each order); another set keys apart."""
    c = sdk(gw)
    both: list[Any] = ["message.output_text.logprobs", "reasoning.encrypted_content"]
    _, cache = create(c, input="Name a lake.", include=both)
    assert cache == "miss"
    hit, cache = create(c, input="Name a lake.", include=both[::-1])
    assert cache == "exact" and hit.output[0].content[0].logprobs  # type: ignore[union-attr]
    _, cache = create(c, input="Name a lake.", include=both[:1])
    assert cache == "miss" and upstream.stats["responses"] == 2


def test_output_items_sent_back_with_their_nulls_share_the_entry_of_those_without(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """The function-calling loop sends a Response's output back as input: ``model_dump()``
    keeps its optional fields as null (a reasoning item's ``encrypted_content``, a function
    call's ``namespace``, a message's ``phase``, an image part's ``file_id``), ``exclude_none``
    leaves them out. The same conversation: an exact hit (was: a miss). A value there keys
    apart."""
    c = sdk(gw)
    tools = [{"type": "function", "name": "weather", "parameters": {"type": "object"}}]
    fake = {"fake": {"tool_call": "weather", "reasoning": True}}
    question = {"role": "user", "content": "Weather in Oslo?"}
    ask, _ = create(c, input=[question], tools=tools, extra_body=fake)
    said, _ = create(c, input="Say something.")
    for output in (ask.output, said.output):
        nulls = [i.model_dump() for i in output]
        assert any(v is None for i in nulls for v in i.values())  # (what the loop sends)
        follow = {"role": "user", "content": f"And then ({output[0].type})?"}
        _, cache = create(c, input=[question, *nulls, follow], tools=tools)
        assert cache == "miss"
        bare = [i.model_dump(exclude_none=True) for i in output]
        _, cache = create(c, input=[question, *bare, follow], tools=tools)
        assert cache == "exact", output[0].type
    image = {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"}
    for part in ({**image, "file_id": None}, image):  # (a listed input item's model_dump())
        look = {"role": "user", "content": [{"type": "input_text", "text": "What is it?"}, part]}
        _, cache = create(c, input=[look])
        assert cache == ("miss" if "file_id" in part else "exact")
    valued = [{**i.model_dump(exclude_none=True), "namespace": "tools"} for i in ask.output]
    follow = {"role": "user", "content": "And then (reasoning)?"}
    _, cache = create(c, input=[question, *valued, follow], tools=tools)
    assert cache == "miss"


def test_an_image_part_whose_detail_is_null_keys_apart_from_one_without(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """An image part's ``detail`` is required and never null (left out, OpenAI reads
    ``auto``; null is no value it takes): ``detail: null`` keys as sent (was: as the part
    without it, so a hit answered what a miss would refuse). ``file_id: null`` is its
    optional field left out: the same entry."""
    c = sdk(gw)
    image = {"type": "input_image", "image_url": "https://example.com/b.png"}
    ask = {"type": "input_text", "text": "What is in it?"}
    _, cache = create(c, input=[{"role": "user", "content": [ask, image]}])
    assert cache == "miss"
    nulled = {**image, "detail": None}
    _, cache = create(c, input=[{"role": "user", "content": [ask, nulled]}])
    assert cache == "miss" and upstream.last_body["input"][0]["content"][1] == nulled
    _, cache = create(c, input=[{"role": "user", "content": [ask, {**image, "file_id": None}]}])
    assert cache == "exact" and upstream.stats["responses"] == 2


def test_every_output_changing_parameter_is_in_the_scope(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    c = sdk(gw)
    tool = {"type": "function", "name": "weather", "parameters": {"type": "object"}}
    variants: list[dict[str, Any]] = [
        {},
        {"instructions": "Answer in French."},
        {"instructions": "Answer in German."},
        {"tools": [tool]},
        {"tools": [tool], "tool_choice": "required"},
        {"text": {"format": {"type": "json_object"}}},
        {"temperature": 0.3},
        {"top_p": 0.5},
        {"max_output_tokens": 64},
        {"extra_body": {"reasoning": {"effort": "low"}}},  # unknown to cachegate: in scope too
    ]
    for variant in variants:
        _, cache = create(c, input="Tell me about Paris.", **variant)
        assert cache == "miss", variant
    assert upstream.stats["responses"] == len(variants)
    _, cache = create(c, input="Tell me about Paris.", metadata={"run": "2"}, store=True)
    assert cache == "exact"  # metadata and store do not change the answer


def test_streaming_has_the_real_event_sequence_and_replays_from_the_cache(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    c = sdk(gw)
    events, cache = stream(c, input="Stream me a haiku.")
    assert cache == "miss" and distinct_types(events) == EVENTS
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-1].response.output_text == text and text.startswith("answer #")
    replayed, cache = stream(c, input="Stream me a haiku.")
    assert cache == "exact" and distinct_types(replayed) == EVENTS
    assert [e.sequence_number for e in replayed] == list(range(len(replayed)))
    assert replayed[-1].response.output_text == text
    assert replayed[-1].response.id != events[-1].response.id
    whole, cache = create(c, input="Stream me a haiku.")  # the stored stream serves JSON too
    assert cache == "exact" and whole.output_text == text
    assert upstream.stats["responses"] == 1


def sdk_stream(c: openai.OpenAI, **body: Any) -> list[Any]:
    """The events of ``client.responses.stream`` (the SDK's helper), checked by it."""
    with c.responses.stream(model=MODEL, **body) as events:
        return list(events)


def seen(events: list[Any]) -> list[dict[str, Any]]:
    """What an app reads of each event, but the ids and numbers a hit makes anew."""
    out = []
    for event in events:
        fields = event.model_dump(exclude={"sequence_number", "item_id", "response"})
        fields.get("item", {}).pop("id", None)
        out.append(fields)
    return out


@pytest.mark.parametrize("first", ["stream", "json"])
def test_a_stream_hit_sends_the_refusal_logprobs_and_citations_a_fresh_stream_sends(
    gw: Gateway, upstream: FakeUpstream, first: str
) -> None:
    """Stored streamed or as JSON, a hit streams what a fresh stream of one piece does. It
    sent the text's delta with ``logprobs: []`` (the answer's were lost), its annotations in
    the opening part and none in ``response.output_text.annotation.added``, and a refusal in
    no event at all (an app that shows ``response.refusal.delta`` showed nothing)."""
    c = sdk(gw)
    text = {"content": "Paris is the capital.", "citation": "https://example.com/p", "chunks": 1}
    for fake in (text, {"refusal": "I can't help with that.", "chunks": 1}):
        ask: dict[str, Any] = {"input": f"Tell me {fake} {first}", "extra_body": {"fake": fake},
                               "include": ["message.output_text.logprobs"], "top_logprobs": 2,
                               "extra_headers": {"cache-control": "no-store"}}  # fmt: skip
        fresh = sdk_stream(c, **ask)  # (not stored)
        del ask["extra_headers"]
        create(c, **ask) if first == "json" else sdk_stream(c, **ask)
        asked = upstream.stats["responses"]
        hit = sdk_stream(c, **ask)
        assert upstream.stats["responses"] == asked  # a hit
        assert seen(hit) == seen(fresh)


@pytest.mark.parametrize("first", ["stream", "json"])
def test_a_stream_hit_sends_the_reasoning_summary_a_fresh_stream_sends(
    gw: Gateway, upstream: FakeUpstream, first: str
) -> None:
    """A hit streamed a reasoning item whole in ``response.output_item.added``, with no
    ``response.reasoning_summary_*`` event: an app that shows the summary as it streams
    (``response.reasoning_summary_text.delta``) showed nothing."""
    c = sdk(gw)
    fake = {"reasoning": "The user asks for a capital.", "content": "Paris.", "chunks": 1}
    ask: dict[str, Any] = {"input": f"Capital of France? {first}", "extra_body": {"fake": fake}}
    fresh = sdk_stream(c, **ask, extra_headers={"cache-control": "no-store"})  # (not stored)
    create(c, **ask) if first == "json" else sdk_stream(c, **ask)
    asked = upstream.stats["responses"]
    hit = sdk_stream(c, **ask)
    assert upstream.stats["responses"] == asked  # a hit
    assert "response.reasoning_summary_text.delta" in [e.type for e in hit]
    assert seen(hit) == seen(fresh)


def test_a_stream_that_ends_with_an_empty_output_is_stored_with_the_items_it_streamed(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """An upstream that ends its stream with ``"output": []`` (its items streamed before):
    the answer was stored with no output, and every hit, streamed or JSON, answered nothing,
    as did a follow-up's conversation."""
    c = sdk(gw)
    ask: dict[str, Any] = {"input": "Capital of France?", "extra_body": {"fake": {
        "content": "Paris.", "empty_output": True}}}  # fmt: skip
    events = sdk_stream(c, **ask)
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Paris."
    hit = sdk_stream(c, **ask)
    assert "".join(e.delta for e in hit if e.type == "response.output_text.delta") == "Paris."
    assert hit[-1].response.output_text == "Paris."
    whole, cache = create(c, **ask)
    assert cache == "exact" and whole.output_text == "Paris."
    assert upstream.stats["responses"] == 1
    later, _ = create(c, input="And of Spain?", previous_response_id=whole.id)
    sent = upstream.last_body["input"]  # the hit's conversation, inlined
    assert [i.get("role") for i in sent] == ["user", "assistant", "user"]
    assert later.output_text.startswith("answer #") and "turns=3" in later.output_text


@pytest.mark.parametrize(
    "fake", [{"incomplete": True}, {"failed": True}, {"break_after": 4}, {"error_event": 3}]
)
def test_incomplete_failed_or_broken_answers_are_never_stored(
    gw: Gateway, upstream: FakeUpstream, fake: dict[str, Any]
) -> None:
    c = sdk(gw)
    for streamed in (True, False):
        for _ in range(2):
            body = {"model": MODEL, "input": f"Fail {fake} {streamed}", "fake": fake}
            if streamed:
                with gw.http.stream("POST", "/v1/responses", json={**body, "stream": True}) as r:
                    assert r.status_code == 200
                    "".join(r.iter_text())
            elif "break_after" not in fake and "error_event" not in fake:
                reply = gw.http.post("/v1/responses", json=body)
                assert reply.status_code == 200 and reply.json()["status"] != "completed"
    asked = upstream.stats["responses"]
    assert asked == (4 if "break_after" not in fake and "error_event" not in fake else 2)
    assert c is not None


def test_a_mid_stream_error_reaches_the_sdk_as_an_error_event(gw: Gateway) -> None:
    """The gateway's own error in a Responses stream is OpenAI's ``error`` event, numbered
    after the events before it: the SDK's typed ``ResponseErrorEvent`` (was ``{"error": ...}``,
    no type nor sequence_number, which the SDK raised as a bare APIError)."""
    c = sdk(gw)
    events: list[Any] = list(c.responses.create(model=MODEL, input="x", stream=True,
                                     extra_body={"fake": {"break_after": 3}}))  # fmt: skip
    error = events[-1]
    assert isinstance(error, ResponseErrorEvent) and error.code == "upstream_error"
    assert error.message and [e.sequence_number for e in events] == list(range(len(events)))


def test_an_upstream_event_that_is_no_responses_event_ends_with_an_error_event(
    gw: Gateway,
) -> None:
    """An upstream's malformed event becomes the Responses API's ``error`` event, numbered
    after the upstream's own (was ``{"error": ...}`` with no ``event:`` line)."""
    started = {"type": "response.created", "sequence_number": 0,
               "response": {"id": "resp_1", "object": "response", "output": []}}  # fmt: skip
    body = f"event: response.created\ndata: {json.dumps(started)}\n\ndata: not json\n\n"
    fake = {"raw": {"body": body, "content_type": "text/event-stream"}}
    events: list[Any] = list(sdk(gw).responses.create(model=MODEL, input="x", stream=True,
                                           extra_body={"fake": fake}))  # fmt: skip
    assert [e.type for e in events] == ["response.created", "error"]
    assert (events[1].sequence_number, events[1].code) == (1, "upstream_error")
    assert "not a Responses event" in events[1].message


def test_previous_response_id_is_resolved_into_the_conversation(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    c = sdk(gw)
    first, _ = create(c, input="My name is Ann.")
    follow, cache = create(c, input="What is my name?", previous_response_id=first.id)
    assert cache == "miss" and "turns=3" in follow.output_text
    # the upstream answered `first` itself: it gets the id, as sent
    assert upstream.last_body["previous_response_id"] == first.id
    # the same first turn again is a cache hit: a new id that only the gateway knows ...
    again, cache = create(c, input="My name is Ann.")
    assert cache == "exact" and again.id != first.id
    # ... and the same follow-up on it is the same conversation: a hit, whatever the id
    hit, cache = create(c, input="What is my name?", previous_response_id=again.id)
    assert cache == "exact" and hit.output_text == follow.output_text
    assert hit.previous_response_id == again.id
    # a new follow-up on it goes upstream with the conversation inlined (no unknown id)
    other, cache = create(c, input="How do you spell it?", previous_response_id=again.id)
    assert cache == "miss" and "turns=3" in other.output_text
    assert "previous_response_id" not in upstream.last_body
    assert [i.get("role") for i in upstream.last_body["input"]] == ["user", "assistant", "user"]
    assert upstream.stats["responses"] == 3


def test_an_id_the_gateway_does_not_hold_is_forwarded_as_an_exact_key(
    gw: Gateway, upstream: FakeUpstream, upstream_server: ThreadedServer
) -> None:
    c = sdk(gw)
    with pytest.raises(openai.BadRequestError) as refused:
        create(c, input="Hi", previous_response_id="resp_nobody")
    assert refused.value.code == "previous_response_not_found"
    assert refused.value.param == "previous_response_id"
    # a response the upstream holds but this gateway never saw
    made = httpx.post(f"{upstream_server.url}/v1/responses",
                      json={"model": MODEL, "input": "Remember 42."}).json()  # fmt: skip
    first, cache = create(
        c, input="What did I ask you to remember?", previous_response_id=made["id"]
    )
    assert cache == "miss" and "turns=3" in first.output_text
    second, cache = create(
        c, input="What did I ask you to remember?", previous_response_id=made["id"]
    )
    assert cache == "exact" and second.output_text == first.output_text
    assert upstream.last_body["previous_response_id"] == made["id"]  # forwarded as sent
    # the hit has an id only the gateway knows: a follow-up on it continues the upstream chain
    more, cache = create(c, input="And why?", previous_response_id=second.id)
    assert cache == "miss" and "turns=5" in more.output_text
    assert upstream.last_body["previous_response_id"] == made["id"]
    assert [i["role"] for i in upstream.last_body["input"]] == ["user", "assistant", "user"]
    with pytest.raises(openai.BadRequestError):  # another unknown id: the upstream's 400
        create(c, input="What did I ask you to remember?", previous_response_id="resp_1x")
    assert upstream.stats["responses"] == 5  # two unknown ids, the direct one, two misses


def test_a_follow_up_on_another_upstream_model_gets_the_conversation(
    make_gateway: Callable[..., Gateway], upstream: FakeUpstream
) -> None:
    """OpenAI lets a follow-up change the model; the other model's upstream never saw the id
    (it was forwarded there: 400 previous_response_not_found), so it gets the conversation."""
    other = ThreadedServer(FakeUpstream()).start()
    other.app._serial = 1000  # (its ids are not the first upstream's: real ones are random)
    try:
        models = {"other-model": {"backend": "openai", "base_url": f"{other.url}/v1",
                                  "api_key": "sk-other"}}  # fmt: skip
        c = sdk(make_gateway(yaml.safe_dump({"models": models})))
        first, _ = create(c, input="My name is Ann.")
        then = c.responses.create(model="other-model", input="What is my name?",
                                  previous_response_id=first.id)  # fmt: skip
        assert "turns=3" in then.output_text
        sent = other.app.last_body
        assert "previous_response_id" not in sent
        assert [i.get("role") for i in sent["input"]] == ["user", "assistant", "user"]
        # the model that made it still gets the id, as sent
        again, _ = create(c, input="And my surname?", previous_response_id=first.id)
        assert "turns=3" in again.output_text
        assert upstream.last_body["previous_response_id"] == first.id
    finally:
        other.stop()


def test_a_follow_up_on_a_hit_sends_the_upstream_no_id_it_never_stored(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """A hit is a Response only the gateway knows, its items with the gateway's ids. A
    follow-up on it sends the conversation in full: without those ids (OpenAI answers an
    input item id it did not store with a 400) and without the reasoning item (found by id
    only, it cannot be sent without one)."""
    c = sdk(gw)
    ask = {"input": "Plan a trip.", "extra_body": {"fake": {"reasoning": True}}}
    first, cache = create(c, **ask)
    assert cache == "miss" and [i.type for i in first.output] == ["reasoning", "message"]
    hit, cache = create(c, **ask)
    assert cache == "exact" and hit.output[0].id.startswith("rs_")
    assert hit.output[0].id != first.output[0].id
    more, cache = create(c, input="Shorter.", previous_response_id=hit.id)
    assert cache == "miss" and "turns=3" in more.output_text
    sent = upstream.last_body["input"]
    assert [i.get("role") for i in sent] == ["user", "assistant", "user"]
    assert all("id" not in i for i in sent)


def test_a_follow_up_sent_with_its_conversation_echoes_its_previous_response_id(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """A follow-up on a response the upstream never saw (a hit's) goes with its conversation
    inlined and no id, and the upstream's Response echoed ``previous_response_id: null``
    (JSON, stream, stored copy); OpenAI echoes the id the request named, as a hit does."""
    c = sdk(gw)
    create(c, input="My name is Ann.")
    hit, cache = create(c, input="My name is Ann.")
    assert cache == "exact"
    follow, cache = create(c, input="What is my name?", previous_response_id=hit.id)
    assert cache == "miss" and "previous_response_id" not in upstream.last_body
    assert follow.previous_response_id == hit.id
    assert c.responses.retrieve(follow.id).previous_response_id == hit.id
    events, cache = stream(c, input="How do you spell it?", previous_response_id=hit.id)
    assert cache == "miss" and "previous_response_id" not in upstream.last_body
    echoed = [e.response.previous_response_id for e in events if hasattr(e, "response")]
    assert echoed == [hit.id] * 3  # created, in_progress, completed
    assert c.responses.retrieve(events[-1].response.id).previous_response_id == hit.id
    replayed, cache = stream(c, input="How do you spell it?", previous_response_id=hit.id)
    assert cache == "exact" and replayed[-1].response.previous_response_id == hit.id


def test_the_output_of_a_hit_sent_back_as_input_reaches_the_upstream_without_our_ids(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """The function-calling loop of OpenAI's guide keeps the history itself (``input +=
    response.output``). After a hit, that output has ids only the gateway made, which the
    upstream answered with a 400 (an item id it did not store); its own ids stay."""
    c = sdk(gw)
    tools = [{"type": "function", "name": "weather", "parameters": {"type": "object"}}]
    fake = {"fake": {"tool_call": "weather", "reasoning": True}}
    question = {"role": "user", "content": "Weather in Paris?"}
    for turn in ("miss", "exact"):  # (a miss: the upstream's ids; a hit: the gateway's)
        ask, cache = create(c, input=[question], tools=tools, extra_body=fake)
        assert cache == turn and [i.type for i in ask.output] == ["reasoning", "function_call"]
        output = [i.model_dump(exclude_none=True) for i in ask.output]
        answer = {"type": "function_call_output", "call_id": ask.output[1].call_id,
                  "output": f"sunny ({turn})"}  # fmt: skip
        then, cache = create(c, input=[question, *output, answer], tools=tools)
        assert cache == "miss" and then.output_text.startswith("answer #")
        sent = upstream.last_body["input"]
        if turn == "miss":  # the upstream's own ids, as sent
            assert [i.get("id") for i in sent[1:3]] == [o["id"] for o in output]
        else:  # ours left out; the reasoning item, found by id only, with it
            kinds = [i.get("type", "message") for i in sent]
            assert kinds == ["message", "function_call", "function_call_output"]
            assert all("id" not in i for i in sent)


def test_an_item_reference_to_an_item_of_a_hit_reaches_the_upstream_as_that_item(
    make_gateway: Callable[..., Gateway], upstream: FakeUpstream
) -> None:
    """A hit's output items have ids only the gateway made: an ``item_reference`` to one is
    sent as the item it names (the upstream, which never saw the id, answered 404), for its
    owner only; another tenant's reference to it is unknown, never forwarded."""
    gw = make_gateway("auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}")
    a, b = sdk(gw, "key-a"), sdk(gw, "key-b")
    create(a, input="Name a colour.")
    hit, cache = create(a, input="Name a colour.")
    assert cache == "exact"
    follow = [
        {"type": "item_reference", "id": hit.output[0].id},
        {"role": "user", "content": "Why?"},
    ]
    then, cache = create(a, input=follow)
    assert cache == "miss" and "turns=2" in then.output_text
    sent = upstream.last_body["input"]
    assert [i.get("type") for i in sent] == ["message", None]  # was: the item_reference
    assert sent[0]["content"][0]["text"] == hit.output_text and "id" not in sent[0]
    asked = upstream.stats["responses"]
    with pytest.raises(openai.NotFoundError) as refused:
        create(b, input=follow)
    assert refused.value.body["param"] == "input"  # type: ignore[index]
    assert upstream.stats["responses"] == asked


def test_input_tokens_are_counted_upstream_with_the_conversation_resolved(
    make_gateway: Callable[..., Gateway], upstream: FakeUpstream
) -> None:
    """``client.responses.input_tokens.count`` (was a 404): the upstream counts, no model
    call, nothing cached; a chain through a cache hit is sent inlined, another tenant's id is
    refused as for a create."""
    gw = make_gateway("auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}")
    a, b = sdk(gw, "key-a"), sdk(gw, "key-b")
    counted = a.responses.input_tokens.count(
        model=MODEL, input="How many words are here?", instructions="Be brief"
    )
    assert counted.object == "response.input_tokens" and counted.input_tokens == 7
    assert upstream.stats["input_tokens"] == 1 and upstream.stats["responses"] == 0
    assert upstream.last_headers["authorization"] != "Bearer key-a"  # (the gateway's keys)
    first, _ = create(a, input="My name is Ann.")
    again, cache = create(a, input="My name is Ann.")  # a hit: an id only the gateway knows
    assert cache == "exact"
    follow = a.responses.input_tokens.count(
        model=MODEL, input="What is my name?", previous_response_id=again.id
    )
    assert "previous_response_id" not in upstream.last_body  # the conversation, inlined
    assert [i.get("role") for i in upstream.last_body["input"]] == ["user", "assistant", "user"]
    answer = len(first.output_text.split())
    assert follow.input_tokens == 4 + answer + 4
    upstream_made = a.responses.input_tokens.count(
        model=MODEL, input="And now?", previous_response_id=first.id
    )  # the upstream's own id: sent as is, it resolves it
    assert upstream.last_body["previous_response_id"] == first.id
    assert upstream_made.input_tokens == 4 + answer + 2
    with pytest.raises(openai.BadRequestError):  # never forwarded for another tenant
        b.responses.input_tokens.count(model=MODEL, input="x", previous_response_id=first.id)
    with pytest.raises(openai.NotFoundError):
        a.responses.input_tokens.count(model="no-such-model", input="x")
    with pytest.raises(openai.BadRequestError):
        a.responses.input_tokens.count(model=MODEL, input=5)  # type: ignore[arg-type]
    malformed = gw.http.post("/v1/responses/input_tokens", content=b"{not json",
                             headers={"authorization": "Bearer key-a"})  # fmt: skip
    assert malformed.status_code == 400 and malformed.json()["error"]["type"]
    unauthorized = gw.http.post("/v1/responses/input_tokens", json={"model": MODEL, "input": "x"})
    assert unauthorized.status_code == 401
    assert upstream.stats["input_tokens"] == 3 and upstream.stats["responses"] == 1


def test_input_tokens_relay_the_upstreams_headers(
    make_gateway: Callable[..., Gateway], upstream: FakeUpstream
) -> None:
    """An upstream's count carries its ``x-request-id`` (the SDK's ``_request_id``) and
    ``openai-processing-ms`` to the client, as a create's answer does (were: dropped), and its
    ``x-ratelimit-*`` by the same rule: only where that key's budget is the client's own (one
    tenant here; not with two tenants sharing the gateway's key). Never its cookies."""
    one = make_gateway()
    tenants = make_gateway("auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}")
    for gw, key, limits in ((one, "sk-x", {"x-ratelimit-remaining-requests": "4999"}),
                            (tenants, "key-a", {})):  # fmt: skip
        raw = sdk(gw, key).responses.input_tokens.with_raw_response.count(
            model=MODEL, input="How many words are here?"
        )
        n = upstream.stats["input_tokens"]
        assert raw.parse().input_tokens == 5 and raw.parse()._request_id == f"req_count_{n}"
        assert raw.headers["x-request-id"] == f"req_count_{n}"
        assert raw.headers["openai-processing-ms"] == "7" and "set-cookie" not in raw.headers
        assert {k: v for k, v in raw.headers.items() if "ratelimit" in k} == limits
    said = {"x-request-id": "req_limited", "x-ratelimit-remaining-tokens": "0", "retry-after": "1"}
    refused = {"raw": {"status": 429, "headers": said,
                       "body": '{"error": {"message": "Rate limit reached", "type": "tokens"}}'}}  # fmt: skip
    with pytest.raises(openai.RateLimitError) as error:
        sdk(one, "sk-x").responses.input_tokens.count(
            model=MODEL, input="x", extra_body={"fake": refused}
        )
    assert {k: error.value.response.headers.get(k) for k in said} == said
    assert error.value.request_id == "req_limited"


def test_input_tokens_of_a_follow_up_the_upstream_lost_are_counted_as_a_create_sends_it(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """The upstream no longer holds the response (deleted there, expired, a restarted worker):
    a create sends the conversation the gateway holds, and so does a count (was a 400)."""
    c = sdk(gw)
    first, _ = create(c, input="The locker code is 4471.")
    del upstream.responses[first.id]  # the upstream lost it; the gateway still holds it
    then, _ = create(c, input="What is the code?", previous_response_id=first.id)
    assert then.usage is not None and "turns=3" in then.output_text
    counted = c.responses.input_tokens.count(
        model=MODEL, input="What is the code?", previous_response_id=first.id
    )
    assert "previous_response_id" not in upstream.last_body  # the conversation, inlined
    assert counted.input_tokens == 5 + len(first.output_text.split()) + 4


def test_get_input_items_and_delete_a_stored_response(
    gw: Gateway, upstream_server: ThreadedServer, upstream: FakeUpstream
) -> None:
    c = sdk(gw)
    made, _ = create(c, input=[{"role": "user", "content": "Keep this."}], metadata={"k": "v"})
    got = c.responses.retrieve(made.id)
    assert got.id == made.id and got.output_text == made.output_text and got.metadata == {"k": "v"}
    items = c.responses.input_items.list(made.id)
    assert [i.type for i in items.data] == ["message"]
    assert items.data[0].content[0].text == "Keep this."  # type: ignore[union-attr]
    c.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(made.id)
    # the upstream that made it stored it too: deleted there as well
    assert upstream.stats["responses_delete"] == 1
    assert httpx.get(f"{upstream_server.url}/v1/responses/{made.id}").status_code == 404
    unstored, _ = create(c, input="Forget this.", store=False)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(unstored.id)


def test_input_items_pages_by_cursor_and_refuse_an_unknown_one(gw: Gateway) -> None:
    """The SDK's auto-pagination walks a response's input items in either order, ``before``
    pages back from an item as OpenAI's lists do (it was ignored: the first page again), and
    a cursor no item of the response has is a 400 naming it (``after`` gave an empty page,
    which a client reads as the end of the list)."""
    c = sdk(gw)
    made, _ = create(c, input=[{"role": "user", "content": f"m{i}"} for i in range(5)])
    asc = [i.id for i in c.responses.input_items.list(made.id, order="asc")]
    assert [i.id for i in c.responses.input_items.list(made.id, limit=2, order="asc")] == asc
    assert [i.id for i in c.responses.input_items.list(made.id, limit=2)] == asc[::-1]
    back = c.responses.input_items.list(made.id, limit=2, order="asc",
                                        extra_query={"before": asc[3]})  # fmt: skip
    assert [i.id for i in back.data] == asc[1:3] and back.has_more
    assert (back.first_id, back.last_id) == (asc[1], asc[2])
    first = c.responses.input_items.list(made.id, order="asc", extra_query={"before": asc[1]})
    assert [i.id for i in first.data] == asc[:1] and not first.has_more
    between = c.responses.input_items.list(made.id, order="desc", after=asc[4],
                                           extra_query={"before": asc[1]})  # fmt: skip
    assert [i.id for i in between.data] == asc[3:1:-1] and not between.has_more
    for cursor in ("after", "before"):
        with pytest.raises(openai.BadRequestError) as refused:
            c.responses.input_items.list(made.id, extra_query={cursor: "msg_unknown"})
        assert refused.value.body["param"] == cursor  # type: ignore[index]
        assert "msg_unknown" in refused.value.body["message"]  # type: ignore[index]


def test_an_item_sent_twice_is_paged_once_each_time(gw: Gateway) -> None:
    """An output item a client sends back twice (a cache hit's: its id is the gateway's, so
    the upstream gets it without) is stored as two input items, the later one with an id of
    its own: paged by cursor, every item comes once (was: the SDK's auto-paging returned the
    first copy's page again and again, forever)."""
    c = sdk(gw)
    create(c, input="Pick a colour.")
    hit, cache = create(c, input="Pick a colour.")
    assert cache == "exact"
    echoed = hit.output[0].model_dump(exclude_none=True)
    sent = [{"role": "user", "content": "Pick a colour."}, echoed, echoed,
            {"role": "user", "content": "Another one?"}]  # fmt: skip
    made, _ = create(c, input=sent)
    for order in ("asc", "desc"):
        paged = list(
            itertools.islice(c.responses.input_items.list(made.id, limit=1, order=order), 8)
        )
        assert len(paged) == 4 and len({i.id for i in paged}) == 4, order
        roles = [getattr(i, "role", None) for i in paged]
        assert roles == ["user", "assistant", "assistant", "user"], order
    assert paged[2].id == echoed["id"]  # (desc: the first copy keeps the id it was sent with)


def paged_both_ways(c: openai.OpenAI, response_id: str, count: int) -> dict[str, list[Any]]:
    """A response's input items paged one at a time by ``after`` (the SDK's auto-paging), in
    each order; at most ``count`` + 4 of them (a loop is cut, not hung)."""
    return {
        order: list(
            itertools.islice(
                c.responses.input_items.list(response_id, limit=1, order=order), count + 4
            )
        )
        for order in ("asc", "desc")
    }


def test_an_item_named_twice_by_reference_is_paged_once_each_time(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """Two ``item_reference``s to one item, or the item and a reference to it, listed two
    items with one id: paging ``after`` it looped (or skipped). Now a reference the gateway
    holds the item of is listed as that item (OpenAI lists items, never references), and an
    id listed twice is the first's only: the later one gets an id of its own."""
    c = sdk(gw)
    kept, _ = create(c, input="Pick a colour.")  # the upstream's own ids: held here too
    gone, _ = create(c, input="Pick a shape.", store=False)  # held by nobody here
    item, ref = kept.output[0], {"type": "item_reference", "id": kept.output[0].id}
    unheld = {"type": "item_reference", "id": gone.output[0].id}
    question = {"role": "user", "content": "Another one?"}
    inputs: list[list[dict[str, Any]]] = [
        [ref, ref, question],
        [item.model_dump(exclude_none=True), ref, question],
        [ref, item.model_dump(exclude_none=True), question],
        [unheld, unheld, question],
    ]
    for sent in inputs:
        made, cache = create(c, input=sent)
        assert cache == "miss" and upstream.last_body["input"] == sent  # forwarded as sent
        for order, paged in paged_both_ways(c, made.id, len(sent)).items():
            assert len(paged) == 3 and len({i.id for i in paged}) == 3, (order, sent)
            kinds = [i.type for i in paged][:: 1 if order == "asc" else -1]
            held = sent[0] is not unheld  # (listed as the item it names)
            assert kinds == ["message" if held else "item_reference"] * 2 + ["message"]
            first = paged[0 if order == "asc" else 2]
            assert first.id == sent[0]["id"], (order, sent)  # the first keeps its id
    asked = upstream.stats["responses"]
    with pytest.raises(openai.NotFoundError):  # (the second's id names no item: never sent)
        create(c, input=[{"type": "item_reference", "id": paged[1].id}, question])
    assert upstream.stats["responses"] == asked


def test_cancel_answers_as_openai_for_responses_not_running_in_the_background(
    make_gateway: Callable[..., Gateway], upstream: FakeUpstream
) -> None:
    """``client.responses.cancel(id)`` got a 404 for every id (no such route). OpenAI cancels
    only ``background: true`` responses, and the gateway keeps none still running: the
    caller's own stored response gets OpenAI's 400 (a finished background one is answered as
    it is); another tenant's, an unknown id or a running background one (left to the
    upstream, not kept here) a 404, as ``GET`` answers them."""
    gw = make_gateway("auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}")
    a, b = sdk(gw, "key-a"), sdk(gw, "key-b")
    made, _ = create(a, input="Write a haiku.")
    with pytest.raises(openai.BadRequestError) as refused:
        a.responses.cancel(made.id)
    assert refused.value.body == {"message": "Cannot cancel a synchronous response.",
                                  "type": "invalid_request_error", "param": None, "code": None}  # fmt: skip
    queued, _ = create(a, input="Write a long report.", background=True)
    for c, response_id in ((b, made.id), (a, "resp_nobody"), (a, queued.id)):
        with pytest.raises(openai.NotFoundError):
            c.responses.cancel(response_id)
    assert a.responses.retrieve(made.id).status == "completed"  # untouched
    store, owner = gw.runtime.responses.store, gw.runtime.responses.owner("a", {})
    finished = {**store.get(owner, made.id).response, "id": "resp_bg", "background": True}
    store.put(StoredResponse(owner, finished, [], [], upstream=True))
    assert a.responses.cancel("resp_bg").status == "completed"


def test_a_stored_response_is_retrieved_as_a_stream(gw: Gateway) -> None:
    """``GET /v1/responses/{id}?stream=true`` (the SDKs' ``responses.stream(response_id=)``,
    ``retrieve(stream=True)``) replays the stored response's events, not its JSON (which the
    SDK read as an empty stream); ``starting_after`` resumes after that event."""
    c = sdk(gw)
    made, _ = create(c, input="Stream this back.")
    with c.responses.stream(response_id=made.id) as resumed:
        final = resumed.get_final_response()
    assert final.id == made.id and final.output_text == made.output_text
    events = list(c.responses.retrieve(made.id, stream=True))
    assert distinct_types(events) == EVENTS
    assert [e.sequence_number for e in events] == list(range(len(events)))
    later = list(c.responses.retrieve(made.id, stream=True, starting_after=3))
    assert [e.sequence_number for e in later] == list(range(4, len(events)))
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve("resp_unknown", stream=True)
    bad = httpx.get(
        f"{gw.url}/v1/responses/{made.id}?stream=true&starting_after=x",
        headers={"authorization": "Bearer sk-anything"},
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "starting_after"


@pytest.mark.parametrize("after", ["--1", "\u00b2", "1.0"])
def test_a_replay_from_a_position_that_is_no_integer_is_a_400(gw: Gateway, after: str) -> None:
    """``starting_after`` that no integer spells is the client's error (``--1`` and ``²`` were
    a 500: they passed the check and ``int()`` then refused them)."""
    made, _ = create(sdk(gw), input="Stream this back.")
    bad = httpx.get(
        f"{gw.url}/v1/responses/{made.id}",
        params={"stream": "true", "starting_after": after},
        headers={"authorization": "Bearer sk-anything"},
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "starting_after"


def test_a_delete_the_upstream_fails_keeps_the_stored_response(
    make_gateway: Callable[..., Gateway],
) -> None:
    """An upstream that cannot say whether it deleted its copy (here: gone) keeps both: a
    retryable 503 with ``Retry-After``, as with ``replicas`` (it was a 502 with
    ``x-should-retry: false``, though the gateway had not retried: the SDKs gave up at once).
    Once the upstream is back, the delete goes through."""
    other = ThreadedServer(FakeUpstream()).start()
    gw = make_gateway(model_yaml=f"{{base_url: '{other.url}/v1', routing: {{down_for: 3}}}}")
    c = sdk(gw)
    made, _ = create(c, input="Keep this safe.")
    other.stop()  # the upstream is gone: its copy cannot be deleted now
    with pytest.raises(openai.APIStatusError) as failed:
        c.responses.delete(made.id)
    error = failed.value
    assert error.status_code == 503 and error.code == "upstream_unavailable"
    assert "nothing was deleted" in error.message and made.id in error.message
    assert error.response.headers["retry-after"] == "3"
    assert "x-should-retry" not in error.response.headers
    assert c.responses.retrieve(made.id).id == made.id  # both copies kept: the client may retry
    back = ThreadedServer(FakeUpstream(), port=other.port).start()
    try:
        c.responses.delete(made.id)  # (the restarted upstream holds none: deleted here)
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(made.id)
    finally:
        back.stop()


def test_a_background_response_still_running_is_left_to_the_upstream(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """``background: true`` answers ``queued``: a copy kept here would say so forever, so the
    gateway keeps none, and a follow-up naming it goes upstream as a reference."""
    c = sdk(gw)
    queued, cache = create(c, input="Write a long report.", background=True)
    assert (queued.status, cache) == ("queued", "miss")
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(queued.id)
    _, cache = create(c, input="Write a long report.", background=True)
    assert cache == "miss"  # (not complete: never cached either)
    _, cache = create(c, input="Shorter, please.", previous_response_id=queued.id)
    assert cache == "miss" and upstream.last_body["previous_response_id"] == queued.id
    assert upstream.last_body["input"] == "Shorter, please."  # as sent, not resolved here


def test_one_tenant_never_reads_anothers_response(
    make_gateway: Callable[..., Gateway], upstream: FakeUpstream
) -> None:
    gw = make_gateway("auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}")
    a, b = sdk(gw, "key-a"), sdk(gw, "key-b")
    made, _ = create(a, input="Tenant a's secret plan.")
    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        b.responses.delete(made.id)
    with pytest.raises(openai.BadRequestError):  # not forwarded: the upstream would resolve it
        create(b, input="What was the plan?", previous_response_id=made.id)
    assert a.responses.retrieve(made.id).id == made.id
    _, cache = create(b, input="Tenant a's secret plan.")
    assert cache == "miss"


def test_another_owners_id_stays_refused_once_its_response_is_gone(
    make_gateway: Callable[..., Gateway], upstream: FakeUpstream
) -> None:
    """The upstream, called with the gateway's key, continues any id it made, whoever names it:
    an id answered for tenant a is refused to b after the gateway's copy is gone (pushed out
    here), or when it never kept one (a background response, a stream cut short), while a
    itself still continues it upstream."""
    gw = make_gateway("auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}")
    gw.runtime.responses.store = ResponseStore(max_entries=1)  # a's next response pushes out
    a, b = sdk(gw, "key-a"), sdk(gw, "key-b")
    made, _ = create(a, input="Tenant a's secret plan.")
    create(a, input="Something else.")
    with pytest.raises(openai.NotFoundError):  # forgotten here; the upstream still holds it
        a.responses.retrieve(made.id)
    queued, _ = create(a, input="Write a long report.", background=True)
    events: list[Any] = list(a.responses.create(model=MODEL, input="Draft the memo.", stream=True,
                                     extra_body={"fake": {"break_after": 2}}))  # fmt: skip
    assert events[-1].type == "error"
    cut = events[0].response.id
    asked = upstream.stats["responses"]
    for previous in (made.id, queued.id, cut):
        with pytest.raises(openai.BadRequestError) as refused:
            create(b, input="What was the plan?", previous_response_id=previous)
        assert refused.value.code == "previous_response_not_found"
    assert upstream.stats["responses"] == asked  # none of them was forwarded
    for previous in (made.id, queued.id, cut):  # their owner continues them upstream
        follow, cache = create(a, input="What was the plan?", previous_response_id=previous)
        assert cache == "miss" and upstream.last_body["previous_response_id"] == previous
    assert "turns=3" in follow.output_text


def test_another_tenants_conversation_is_never_forwarded(
    make_gateway: Callable[..., Gateway], upstream: FakeUpstream
) -> None:
    """The upstream, called with the gateway's key, continues any conversation made with that
    key, whoever names it (it was forwarded for anyone): one an upstream answered in for
    tenant a (streamed too) is a 404 for b, never forwarded, while a goes on in it."""
    gw = make_gateway("auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}")
    a, b = sdk(gw, "key-a"), sdk(gw, "key-b")
    _, cache = create(a, input="Tenant a's secret plan.", conversation="conv_a")
    assert cache == "bypass" and upstream.last_body["conversation"] == "conv_a"
    stream(a, input="Tenant a's second secret.", conversation={"id": "conv_s"})
    asked = upstream.stats["responses"]
    for conversation in ("conv_a", {"id": "conv_a"}, {"id": "conv_s"}):
        with pytest.raises(openai.NotFoundError) as refused:
            create(b, input="What was the plan?", conversation=conversation)
        assert refused.value.body["param"] == "conversation"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        b.responses.input_tokens.count(model=MODEL, input="The plan?", conversation="conv_a")
    assert upstream.stats["responses"] == asked  # none of them was forwarded
    _, cache = create(a, input="What was the plan?", conversation="conv_a")
    assert cache == "bypass" and upstream.stats["responses"] == asked + 1
    _, cache = create(b, input="My own plan.", conversation="conv_b")  # b's own: forwarded
    assert cache == "bypass" and upstream.last_body["conversation"] == "conv_b"


def test_a_follow_up_on_a_response_in_a_conversation_keys_on_that_conversation(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """A response made in a ``conversation`` the upstream keeps continues turns the gateway
    never saw: a follow-up naming it (``previous_response_id``) was keyed as its visible turns
    only, and its answer (from the conversation's hidden history) served to anyone who sent
    those turns inline, another client of the open gateway too. Now it keys on the id, exact
    only, as any turns only the upstream holds."""
    a, b = sdk(gw, "sk-client-a"), sdk(gw, "sk-client-b")
    asked, cache = create(a, input="What is my secret?", conversation="conv_private")
    assert cache == "bypass"
    follow, cache = create(a, input="Spell it out.", previous_response_id=asked.id)
    assert cache == "miss" and upstream.last_body["previous_response_id"] == asked.id
    seen = [{"role": "user", "content": "What is my secret?"},
            {"role": "assistant", "content": asked.output_text},
            {"role": "user", "content": "Spell it out."}]  # fmt: skip
    inline, cache = create(b, input=seen)  # (the visible turns, none of the history)
    assert cache == "miss" and inline.output_text != follow.output_text
    own, cache = create(a, input=seen)  # (its entry: the inline conversation's answer)
    assert cache == "exact" and own.output_text == inline.output_text
    again, cache = create(a, input="Spell it out.", previous_response_id=asked.id)
    assert cache == "exact" and again.output_text == follow.output_text


def test_another_tenants_container_is_never_forwarded(
    make_gateway: Callable[..., Gateway], upstream: FakeUpstream
) -> None:
    """The upstream, called with the gateway's key, runs a ``code_interpreter`` tool in any
    container made with that key, whoever names it (it was forwarded for anyone: tenant b's
    code read tenant a's files): one an upstream made for a (streamed too), or a named and an
    upstream ran in, is a 404 for b, never forwarded, while a goes on using it."""
    gw = make_gateway("auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}")
    a, b = sdk(gw, "key-a"), sdk(gw, "key-b")

    def tools(container: Any) -> dict[str, Any]:
        return {"tools": [{"type": "code_interpreter", "container": container}],
                "extra_body": {"fake": {"code_interpreter": True}}}  # fmt: skip

    made, _ = create(a, input="Analyse my sales.csv.", **tools({"type": "auto"}))
    streamed, _ = stream(a, input="Plot my sales.csv.", **tools({"type": "auto"}))
    create(a, input="Run it in my own container.", **tools("cntr_of_a"))
    containers = {made.output[0].container_id, streamed[-1].response.output[0].container_id}
    assert len(containers) == 2
    asked = upstream.stats["responses"]
    for container in (*containers, "cntr_of_a"):
        with pytest.raises(openai.NotFoundError) as refused:
            create(b, input="cat /mnt/data/*", **tools(container))
        assert refused.value.body["param"] == "tools[0].container"  # type: ignore[index]
    assert upstream.stats["responses"] == asked  # none of them was forwarded
    for container in containers:  # a's own: forwarded
        again, _ = create(a, input=f"Again, in {container}.", **tools(container))
        assert again.output[0].container_id == container
    assert upstream.stats["responses"] == asked + 2


def test_a_tenants_flood_spread_over_partitions_pushes_out_its_own(
    make_gateway: Callable[..., Gateway], upstream: FakeUpstream
) -> None:
    """Each ``x-cachegate-partition`` of a tenant is an owner of its own (a front gateway's
    tenants), but a full store and a full record of claims are shared out by tenant first:
    tenant b's responses under many partitions, each holding fewer than a, push out b's own,
    never a's (a's responses stay readable, and its ids refused to b once they are gone)."""
    gw = make_gateway("auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}")
    a, b = sdk(gw, "key-a"), sdk(gw, "key-b")

    def flood(stage: str) -> list[str]:
        made = [create(a, input=f"Tenant a's plan {n} ({stage}).")[0].id for n in range(3)]
        for n in range(5):  # (each a miss: a response and an item claimed for b)
            create(b, input=stage, extra_headers={"x-cachegate-partition": f"team-{n}"})
        return made

    gw.runtime.responses.store = ResponseStore(max_entries=6)
    made = flood("the store")
    assert [a.responses.retrieve(i).id for i in made] == made
    gw.runtime.responses.store = ResponseStore(max_entries=1, max_claims=14)
    made = flood("the claims")  # (all gone from the store: only their claims are left)
    asked = upstream.stats["responses"]
    for previous in made:
        with pytest.raises(openai.BadRequestError):
            create(b, input="What was the plan?", previous_response_id=previous)
    assert upstream.stats["responses"] == asked  # none of them was forwarded


def test_another_owners_output_items_are_never_referenced_upstream(
    make_gateway: Callable[..., Gateway], upstream: FakeUpstream
) -> None:
    """The upstream, called with the gateway's key, resolves an input item by its id (an
    ``item_reference``, or a reasoning item sent without its content) in whoever's request
    names it: the ids of the items an upstream answered for tenant a (in a stream cut short
    too) are refused to b as unknown ones, never forwarded, while a still references them."""
    gw = make_gateway("auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}")
    a, b = sdk(gw, "key-a"), sdk(gw, "key-b")
    made, _ = create(a, input="Tenant a's secret plan.", extra_body={"fake": {"reasoning": True}})
    # cut short (an error event last): its items reached the client all the same
    events: list[Any] = list(a.responses.create(model=MODEL, input="Tenant a's second secret.",
                                     stream=True, extra_body={"fake": {"break_after": 4}}))  # fmt: skip
    assert events[-1].type == "error"
    streamed = next(e.item.id for e in events if e.type == "response.output_item.added")
    reasoning, message = made.output[0].id, made.output[1].id
    asked = upstream.stats["responses"]
    for item in (
        {"type": "item_reference", "id": message},
        {"id": streamed},  # (an item reference may leave its type out)
        {"type": "reasoning", "id": reasoning, "summary": []},
    ):
        with pytest.raises(openai.NotFoundError) as refused:
            create(b, input=[item, {"role": "user", "content": "Repeat that."}])
        assert refused.value.body["param"] == "input"  # type: ignore[index]
    assert upstream.stats["responses"] == asked  # none of them was forwarded
    _, cache = create(
        a, input=[{"type": "item_reference", "id": message}, {"role": "user", "content": "Go."}]
    )
    assert cache == "miss" and upstream.last_body["input"][0]["id"] == message


def test_a_responses_answer_is_never_served_to_chat_and_back(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    c = sdk(gw)
    question = "Which planet is the largest?"
    create(c, input=question)
    chat = c.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": question}]
    )
    assert chat.headers["x-cache"] == "miss"
    c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi there"}])
    _, cache = create(c, input="Hi there")
    assert cache == "miss"
    assert upstream.stats["responses"] == 2 and upstream.stats["chat"] == 2


def test_bad_requests_get_an_openai_error(gw: Gateway) -> None:
    for body, param in [
        ({"model": MODEL}, "input"),
        ({"input": "x"}, "model"),
        ({"model": MODEL, "input": "x", "temperature": 3}, "temperature"),
        ({"model": MODEL, "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"model": MODEL, "input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
        # (was a 500 once an upstream that took them had answered: the answer never came)
        ({"model": MODEL, "input": [{"type": ["message"], "role": "user"}]}, "input[0].type"),
        ({"model": MODEL, "input": [{"type": "item_reference", "id": ["x"]}]}, "input[0].id"),
        ({"model": MODEL, "input": [{"role": "user", "content": "x", "id": 7}]}, "input[0].id"),
    ]:
        reply = gw.http.post("/v1/responses", json=body)
        assert reply.status_code == 400, body
        assert reply.json()["error"]["param"] == param
        assert reply.json()["error"]["type"] == "invalid_request_error"
    missing = gw.http.post("/v1/responses", json={"model": "nope", "input": "x"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_a_prompt_cache_key_per_tenant_and_prefix_when_configured(
    make_gateway: Callable[..., Gateway], upstream: FakeUpstream
) -> None:
    gw = make_gateway(
        "auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}",
        "prompt_cache_key: true",
    )
    a, b = sdk(gw, "key-a"), sdk(gw, "key-b")

    def sent(c: openai.OpenAI, instructions: str, question: str, **body: Any) -> Any:
        create(c, instructions=instructions, input=question, **body)
        return upstream.last_body.get("prompt_cache_key")

    first = sent(a, "You are a tax advisor.", "What is VAT?")
    assert first.startswith("cg-")
    assert sent(a, "You are a tax advisor.", "What is a deduction?") == first  # same prefix
    assert sent(a, "You are a chef.", "What is VAT?") != first  # another prefix
    assert sent(b, "You are a tax advisor.", "What is VAT?") != first  # another tenant
    assert sent(a, "You are a tax advisor.", "Mine?", prompt_cache_key="mine") == "mine"
    a.chat.completions.create(model=MODEL, messages=[
        {"role": "system", "content": "You are a tax advisor."},
        {"role": "user", "content": "What is VAT?"},
    ])  # fmt: skip
    assert upstream.last_body["prompt_cache_key"].startswith("cg-")


@pytest.mark.parametrize(
    ("field", "question"),
    [("prompt_cache_key", "What is VAT?"), ("safety_identifier", "What is GST?")],
)
def test_fields_that_do_not_change_the_answer_are_not_part_of_the_response_cache_key(
    gw: Gateway, upstream: FakeUpstream, field: str, question: str
) -> None:
    """``prompt_cache_key`` picks the provider's prompt cache, ``safety_identifier`` (OpenAI's
    successor of ``user``) names the end user: neither is the answer. Requests that differ
    only in one share a stored answer (they were all misses), each echoing its own."""
    c = sdk(gw)
    first, cache = create(c, input=question, **{field: "conversation-1"})
    assert cache == "miss" and upstream.last_body[field] == "conversation-1"
    again = c.responses.with_raw_response.create(
        model=MODEL, input=question, **{field: "conversation-2"}
    )
    assert again.headers["x-cache"] == "exact" and upstream.stats["responses"] == 1
    assert again.parse().output_text == first.output_text
    assert getattr(again.parse(), field) == "conversation-2"  # its own, not the stored one's
    chat = {"model": MODEL, "messages": [{"role": "user", "content": question}]}
    plain = c.chat.completions.with_raw_response.create(**chat, **{field: "a"})
    keyed = c.chat.completions.with_raw_response.create(**chat, **{field: "b"})
    assert (plain.headers["x-cache"], keyed.headers["x-cache"]) == ("miss", "exact")


def test_a_chat_messages_field_is_not_answered_from_the_cache(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """A Responses request with chat's ``messages`` beside its ``input`` is refused by OpenAI
    ("Unknown parameter") and by the local model: a hit must not answer it (was: the entry of
    the request without it, its ``messages`` overwritten by the turns in the key)."""
    c = sdk(gw)
    assert create(c, input="What is the capital of Peru?")[1] == "miss"
    turns = [{"role": "user", "content": "Write a poem."}]
    again = create(c, input="What is the capital of Peru?", extra_body={"messages": turns})
    assert again[1] == "miss" and upstream.last_body["messages"] == turns  # (it judges it)
    assert upstream.stats["responses"] == 2


def test_integral_floats_are_integers(gw: Gateway, upstream: FakeUpstream) -> None:
    """``max_output_tokens: 64.0`` is the integer, as chat's ``max_tokens`` takes it since
    f9fa8f6 (was a 400 "Expected `int`, got `float`"); sent on as ``64``. ``64.5`` stays a
    400 naming it."""
    c = sdk(gw)
    assert create(c, input="What is VAT?", max_output_tokens=64.0)[0].status == "completed"
    sent = upstream.last_body["max_output_tokens"]
    assert sent == 64 and type(sent) is int
    with pytest.raises(openai.BadRequestError) as refused:
        create(c, input="What is VAT?", max_output_tokens=64.5)
    assert refused.value.body["param"] == "max_output_tokens"  # type: ignore[index]


def test_no_prompt_cache_key_unless_configured(gw: Gateway, upstream: FakeUpstream) -> None:
    create(sdk(gw), input="What is VAT?")
    assert "prompt_cache_key" not in upstream.last_body


def test_prompt_templates_item_references_and_conversations_are_told_apart(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    c = sdk(gw)
    # a stored prompt template (id, variables) is in the scope (chat's own `prompt` is not)
    paris = {"id": "pmpt_A", "variables": {"city": "Paris"}}
    for prompt in (paris, {"id": "pmpt_A", "variables": {"city": "Rome"}}, {"id": "pmpt_B"}):
        assert create(c, input="Plan my day.", prompt=prompt)[1] == "miss", prompt
    assert create(c, input="Plan my day.", prompt=paris)[1] == "exact"
    # an item reference names an item the upstream holds: its id tells requests apart
    follow = {"role": "user", "content": "And then?"}
    for ref in ("msg_A", "msg_B"):
        assert create(c, input=[{"type": "item_reference", "id": ref}, follow])[1] == "miss"
    assert upstream.last_body["input"][0] == {"type": "item_reference", "id": "msg_B"}  # as sent
    assert create(c, input=[{"id": "msg_A"}, follow])[1] == "exact"  # (its type may be left out)
    # a conversation the upstream keeps grows with every turn: never cached
    calls = upstream.stats["responses"]
    for _ in range(2):
        assert create(c, input="Continue.", extra_body={"conversation": "conv_1"})[1] == "bypass"
    assert upstream.stats["responses"] == calls + 2
    assert create(c, input="Continue.")[1] == "miss"  # nothing was stored for it either


def test_a_prompt_template_may_hold_all_the_input(gw: Gateway, upstream: FakeUpstream) -> None:
    """``responses.create(model=..., prompt={...})`` with no ``input``, as OpenAI's prompting
    guide calls a stored prompt (was a 400 asking for ``input``): sent as asked, cached by its
    template and variables, and continued along ``previous_response_id``."""
    c = sdk(gw)
    prompt = {"id": "pmpt_A", "version": "2", "variables": {"city": "Paris"}}
    first, cache = create(c, prompt=prompt)
    assert cache == "miss" and first.output_text and "input" not in upstream.last_body
    again, cache = create(c, prompt=prompt)
    assert cache == "exact" and again.output_text == first.output_text
    assert create(c, prompt={**prompt, "variables": {"city": "Rome"}})[1] == "miss"
    create(c, prompt=prompt, previous_response_id=again.id)  # a hit's id: the conversation
    assert "previous_response_id" not in upstream.last_body
    assert [i["role"] for i in upstream.last_body["input"]] == ["assistant"]
    failed = {"id": "resp_f", "object": "response", "status": "failed", "model": MODEL,
              "output": [], "error": {"code": "server_error", "message": "boom"}}  # fmt: skip
    made, _ = create(c, prompt=prompt, extra_body={"fake": {"raw": {"body": json.dumps(failed)}}})
    assert made.status == "failed"  # kept: a conversation of no turn at all, continued
    assert create(c, prompt=prompt, previous_response_id=made.id)[0].output_text
    assert gw.http.post("/v1/responses", json={"model": MODEL}).status_code == 400  # (no input)


def test_a_follow_up_on_a_prompt_templates_response_keys_on_the_prompt_it_sends(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """A stored prompt's messages are the response's ``instructions`` (what a Response
    echoes), which ``previous_response_id`` never carries over: a follow-up on an upstream's
    response made with one reads its visible turns and its own ``prompt``, the key's. So a
    client sending those turns inline with no prompt, or another one, misses; with the same
    prompt, or a follow-up sent without one, shares the entry: the upstream reads the same."""
    a, b = sdk(gw, "sk-client-a"), sdk(gw, "sk-client-b")
    prompt = {"id": "pmpt_B", "version": "1", "variables": {"city": "Oslo"}}
    first, cache = create(a, prompt=prompt, input="Plan my day.")
    assert cache == "miss"
    follow, cache = create(a, prompt=prompt, input="Shorter.", previous_response_id=first.id)
    assert cache == "miss" and upstream.last_body["previous_response_id"] == first.id
    assert upstream.last_body["prompt"] == prompt
    seen = [{"role": "user", "content": "Plan my day."},
            {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "Shorter."}]  # fmt: skip
    other = {**prompt, "variables": {"city": "Rome"}}
    answers = []
    for sent in ({}, {"prompt": other}):
        asked = upstream.stats["responses"]
        made, cache = create(b, input=seen, **sent)
        assert cache == "miss" and upstream.stats["responses"] == asked + 1, sent
        answers.append(made.output_text)
    same, cache = create(b, input=seen, prompt=prompt)
    assert cache == "exact" and same.output_text == follow.output_text
    bare, cache = create(a, input="Shorter.", previous_response_id=first.id)
    assert cache == "exact" and bare.output_text == answers[0]  # (b's: no prompt read)


def test_content_parts_that_are_not_objects_get_a_400(gw: Gateway) -> None:
    reply = gw.http.post(
        "/v1/responses", json={"model": MODEL, "input": [{"role": "user", "content": ["hi"]}]}
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "input[0].content[0]"
    # a text part whose text is not a string, and a role that is not one, are 400s too
    for text in (None, 123, ["a"]):
        part = {"type": "input_text", "text": text}
        item = {"role": "user", "content": [{"type": "text", "text": "ok"}, part]}
        reply = gw.http.post("/v1/responses", json={"model": MODEL, "input": [item]})
        assert reply.status_code == 400, text
        assert reply.json()["error"]["param"] == "input[0].content[1].text"
    for role in ([], {"a": 1}, 1):
        item = {"role": role, "content": "hi"}
        reply = gw.http.post("/v1/responses", json={"model": MODEL, "input": [item]})
        assert (reply.status_code, reply.json()["error"]["param"]) == (400, "input[0].role")
