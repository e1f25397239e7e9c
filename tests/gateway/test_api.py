"""The HTTP API over real HTTP on 127.0.0.1, against the fake upstream."""

from __future__ import annotations

import gzip
import json
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.config import load_config_text
from gateway.requests import tenant_partition
from tests.conftest import Gateway
from tests.fake_upstream import FakeUpstream


def content(response: httpx.Response) -> str:
    return str(response.json()["choices"][0]["message"]["content"])


def sse_chunks(text: str) -> list[Any]:
    events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
    return [e if e == "[DONE]" else json.loads(e) for e in events]


def streamed_text(text: str) -> str:
    out = ""
    for chunk in sse_chunks(text):
        if isinstance(chunk, dict) and chunk.get("choices"):
            out += chunk["choices"][0].get("delta", {}).get("content") or ""
    return out


# -- caching --------------------------------------------------------------------------------


def test_second_identical_request_is_an_exact_hit(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    first = gw.chat("What is the capital of France?")
    second = gw.chat("What is the capital of France?")
    assert first.status_code == second.status_code == 200
    assert first.headers["x-cache"] == "miss"
    assert second.headers["x-cache"] == "exact"
    assert content(first) == content(second)
    assert first.json()["id"] != second.json()["id"]  # a replay is a new response
    assert int(second.headers["x-cache-age"]) >= 0
    assert upstream.stats["chat"] == 1


def test_output_changing_parameters_miss(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    base = [{"role": "user", "content": "Tell me a joke"}]
    variants: list[dict[str, Any]] = [
        {"messages": base},
        {"messages": base, "temperature": 0.3},
        {"messages": base, "max_tokens": 12},
        {"messages": base, "stop": ["\n"]},
        {"messages": base, "seed": 7},
        {
            "messages": base,
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        },
        {"messages": base, "response_format": {"type": "json_object"}},
        {"messages": base, "some_new_provider_field": True},
        {"messages": [{"role": "system", "content": "Be terse."}, *base]},
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                *base,
            ]
        },
    ]
    for body in variants:
        response = gw.http.post("/v1/chat/completions", json={"model": "fake-model", **body})
        assert response.headers["x-cache"] == "miss", body
    assert upstream.stats["chat"] == len(variants)
    for body in variants:  # and each is now an exact hit of its own
        response = gw.http.post("/v1/chat/completions", json={"model": "fake-model", **body})
        assert response.headers["x-cache"] == "exact", body
    assert upstream.stats["chat"] == len(variants)


def test_equivalent_numbers_share_an_entry(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    assert gw.chat("q", temperature=1).headers["x-cache"] == "miss"
    assert gw.chat("q", temperature=1.0).headers["x-cache"] == "exact"
    assert gw.chat("q", temperature=1, stream=False).headers["x-cache"] == "exact"


def test_a_field_sent_as_null_shares_the_entry_of_the_request_without_it(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """Clients that send every field they know (LangChain, LiteLLM) send null for "unset":
    the same request as the SDK's without them (was: a miss, and a second entry)."""
    gw = make_gateway()
    nulls = {"seed": None, "stop": None, "n": None, "tools": None, "tool_choice": None,
             "response_format": None, "logit_bias": None, "top_logprobs": None}  # fmt: skip
    user = [{"role": "user", "content": "q"}]
    for path, body, extra in [
        ("/v1/chat/completions", {"messages": user}, nulls),
        ("/v1/completions", {"prompt": "q"}, {"stop": None, "suffix": None, "echo": None}),
        ("/v1/responses", {"input": "q"}, {"max_tool_calls": None, "prompt": None, "text": None}),
    ]:
        first = gw.http.post(path, json={"model": "fake-model", **body})
        again = gw.http.post(path, json={"model": "fake-model", **body, **extra})
        assert first.headers["x-cache"] == "miss" and again.headers["x-cache"] == "exact", path


def test_a_field_sent_as_its_documented_default_shares_the_entry(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """``n: 1`` (LangChain sends it), ``response_format: {"type": "text"}`` and a stop string
    for the list of it are what every backend reads so (was: a miss, and a second entry);
    ``temperature: 1`` is not (the local model's and vLLM's default is the model's own)."""
    gw = make_gateway()
    sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-client", max_retries=0)
    question: Any = [{"role": "user", "content": "Name a colour"}]
    chat = sdk.chat.completions.with_raw_response.create
    assert chat(model="fake-model", messages=question, stop=["\n"]).headers["x-cache"] == "miss"
    same = chat(model="fake-model", messages=question, stop="\n", n=1,
                response_format={"type": "text"})  # fmt: skip
    assert same.headers["x-cache"] == "exact" and upstream.stats["chat"] == 1
    hot = chat(model="fake-model", messages=question, stop="\n", temperature=1)
    assert hot.headers["x-cache"] == "miss"
    text = sdk.completions.with_raw_response.create
    assert text(model="fake-model", prompt="Once", stop=["."]).headers["x-cache"] == "miss"
    assert text(model="fake-model", prompt="Once", stop=".", n=1).headers["x-cache"] == "exact"


def test_an_answer_sent_back_as_the_sdk_gives_it_is_the_same_conversation(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """The openai SDK's answer sent back in the conversation carries its other fields, null
    (``message.model_dump()``; OpenAI's answer itself, passed as it is, its ``"refusal":
    None`` and ``"annotations": []``): the conversation a client sends with the text alone
    (was: a miss, and a second entry, for every turn after it)."""
    from openai.types.chat import ChatCompletionMessage

    gw = make_gateway()
    sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-client", max_retries=0)
    hi: Any = {"role": "user", "content": "Hi"}
    answer = sdk.chat.completions.create(model="fake-model", messages=[hi]).choices[0].message
    text = answer.content
    plain: Any = [hi, {"role": "assistant", "content": text}, {"role": "user", "content": "And?"}]
    miss = sdk.chat.completions.with_raw_response.create(model="fake-model", messages=plain)
    assert miss.headers["x-cache"] == "miss" and upstream.stats["chat"] == 2
    from_openai = ChatCompletionMessage.model_validate(
        {"role": "assistant", "content": text, "refusal": None, "annotations": []}
    )
    for sent in (answer.model_dump(), from_openai, {**answer.model_dump(), "annotations": []}):
        turns: Any = [{**hi, "name": None}, sent, plain[2]]
        again = sdk.chat.completions.with_raw_response.create(model="fake-model", messages=turns)
        assert again.headers["x-cache"] == "exact", sent
    assert upstream.stats["chat"] == 2


def test_content_of_one_text_part_is_its_text(make_gateway: Any, upstream: FakeUpstream) -> None:
    """``[{"type": "text", "text": "hi"}]`` is the string ``"hi"`` to OpenAI (and to every
    model: nothing is joined), the shape LangChain's content blocks and SDK users' parts
    send (was: a miss, and a second entry); parts that a model joins stay apart."""
    gw = make_gateway()
    sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-client", max_retries=0)

    def ask(system: Any, question: Any) -> str:
        turns: Any = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        reply = sdk.chat.completions.with_raw_response.create(model="fake-model", messages=turns)
        return str(reply.headers["x-cache"])

    def part(text: str) -> dict[str, str]:
        return {"type": "text", "text": text}

    assert ask("Be brief.", "What is the capital of France?") == "miss"
    assert ask([part("Be brief.")], [part("What is the capital of France?")]) == "exact"
    assert ask("Be brief.", [part("What is the capital"), part(" of France?")]) == "miss"
    assert upstream.stats["chat"] == 2


def test_a_field_of_another_api_is_not_answered_from_the_cache(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """A chat request's ``prompt`` (or a completion's ``messages``) is refused by OpenAI and by
    the local model: a hit must not answer it (was: the entry of the request without it)."""
    gw = make_gateway()
    for path, body, other in [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}]}, "prompt"),
        ("/v1/completions", {"prompt": "q"}, "messages"),
    ]:
        assert gw.http.post(path, json={"model": "fake-model", **body}).headers["x-cache"] == "miss"
        extra = {other: "Write a poem" if other == "prompt" else [{"role": "user", "content": "x"}]}
        again = gw.http.post(path, json={"model": "fake-model", **body, **extra})
        assert again.headers["x-cache"] == "miss", path
        assert upstream.last_body[other] == extra[other]  # (the upstream judges it)


def test_no_cache_reaches_upstream_and_refreshes(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    first = content(gw.chat("q1"))
    fresh = gw.chat("q1", headers={"cache-control": "no-cache"})
    assert fresh.headers["x-cache"] == "refresh"
    assert content(fresh) != first  # a new answer (new serial number)
    assert upstream.stats["chat"] == 2
    # the refreshed answer replaced the old one
    assert content(gw.chat("q1")) == content(fresh)


def test_no_store_and_body_extension(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    assert gw.chat("q2", headers={"cache-control": "no-store"}).headers["x-cache"] == "miss"
    assert gw.chat("q2", cache={"no-store": True}).headers["x-cache"] == "miss"
    assert upstream.stats["chat"] == 2
    both = gw.chat("q2", cache={"no-cache": True, "no-store": True})
    assert both.headers["x-cache"] == "bypass"
    # the "cache" extension is not forwarded upstream
    assert "cache" not in upstream.last_body
    assert gw.chat("q2").headers["x-cache"] == "miss"
    assert gw.chat("q2").headers["x-cache"] == "exact"


def test_cache_control_on_several_header_lines(make_gateway: Any, upstream: FakeUpstream) -> None:
    """HTTP lets a list header come as several lines (a proxy may add its own): every line
    counts. A second ``cache-control: no-store`` line was ignored, and the answer stored."""
    gw = make_gateway()
    lines = [("cache-control", "no-cache"), ("cache-control", "no-store")]
    both = gw.http.post("/v1/chat/completions", json=_body("two lines"), headers=lines)
    assert both.headers["x-cache"] == "bypass"
    assert gw.chat("two lines").headers["x-cache"] == "miss"  # nothing was stored
    lines = [("cache-control", "no-store"), ("cache-control", "max-age=-1")]
    refused = gw.http.post("/v1/chat/completions", json=_body("two lines"), headers=lines)
    assert refused.json()["error"]["param"] == "cache-control: max-age"
    assert upstream.stats["chat"] == 2
    # a header of one value on two lines is a 400 naming it (the first line was used, silently)
    for name, values in (("x-cache-namespace", ("a", "b")), ("x-cache-ttl", ("60", "60")),
                         ("x-cache-threshold", ("0.9", "0.5"))):  # fmt: skip
        lines = [(name, value) for value in values]
        twice = gw.http.post("/v1/chat/completions", json=_body("two lines"), headers=lines)
        assert twice.status_code == 400 and twice.json()["error"]["param"] == name
    assert upstream.stats["chat"] == 2


def _body(content: str) -> dict[str, Any]:
    return {"model": "fake-model", "messages": [{"role": "user", "content": content}]}


def test_namespaces_are_isolated(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    gw.chat("q3", headers={"x-cache-namespace": "team-a"})
    assert gw.chat("q3", headers={"x-cache-namespace": "team-b"}).headers["x-cache"] == "miss"
    assert gw.chat("q3", cache={"namespace": "team-a"}).headers["x-cache"] == "exact"
    assert gw.chat("q3").headers["x-cache"] == "miss"


def test_ttl_and_max_age(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    gw.chat("short-lived", headers={"x-cache-ttl": "2"})  # (a loaded machine: not 0.3 s)
    assert gw.chat("short-lived").headers["x-cache"] == "exact"
    time.sleep(2.1)
    assert gw.chat("short-lived").headers["x-cache"] == "miss"
    gw.chat("aged")
    time.sleep(0.3)
    assert gw.chat("aged", headers={"cache-control": "max-age=0"}).headers["x-cache"] == "miss"
    assert gw.chat("aged", headers={"cache-control": "max-age=60"}).headers["x-cache"] == "exact"


def test_a_request_ttl_shortens_cache_ttl_never_extends_it(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """A client kept an answer 10 years with ``x-cache-ttl: 315360000`` on a gateway whose
    operator set ``cache.ttl`` to a day; now the request's TTL is at most ``cache.ttl``."""
    gw = make_gateway("cache: {ttl: 86400}")
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-any")
    ten_years = {"x-cache-ttl": "315360000"}
    chat = [{"role": "user", "content": "keep it"}]
    client.chat.completions.create(model="fake-model", messages=chat, extra_headers=ten_years)
    client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "an hour"}],
        extra_body={"cache": {"ttl": 3600}},
    )  # fmt: skip
    client.embeddings.create(model="fake-model", input="keep it too", extra_headers=ten_years)
    _wait_for(lambda: len(gw.http.get("/admin/cache/entries").json()["data"]) == 3)
    kept = [e["expires"] - e["created"] for e in gw.http.get("/admin/cache/entries").json()["data"]]
    assert sorted(round(ttl) for ttl in kept) == [3600, 86400, 86400]
    hit = client.chat.completions.with_raw_response.create(model="fake-model", messages=chat)
    assert hit.headers["x-cache"] == "exact"  # (still served: only shortened)


def test_tenants_from_api_keys_are_isolated(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway(
        "auth:\n  keys:\n    - {key: key-a, tenant: a}\n    - {key: key-b, tenant: b}\n"
    )
    assert gw.chat("q4").status_code == 401
    assert gw.chat("q4", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert gw.chat("q4", headers={"authorization": "Bearer key-a"}).headers["x-cache"] == "miss"
    assert gw.chat("q4", headers={"authorization": "Bearer key-b"}).headers["x-cache"] == "miss"
    assert gw.chat("q4", headers={"authorization": "Bearer key-a"}).headers["x-cache"] == "exact"
    # the gateway's own key never goes upstream: the configured upstream key does
    assert upstream.last_headers["authorization"] == "Bearer sk-test"


def test_cookies_an_upstream_sets_are_not_sent_on_later_requests(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """One upstream client serves every tenant: a cookie set in one answer stays out of the next
    request (it could be another tenant's)."""
    gw = make_gateway(
        "auth:\n  keys:\n    - {key: key-a, tenant: a}\n    - {key: key-b, tenant: b}\n"
    )
    body = '{"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}'
    cookie = {"set-cookie": "session=tenant-a-secret; Path=/; HttpOnly"}
    raw = {"body": body, "headers": cookie}
    first = gw.chat("cookie please", fake={"raw": raw}, headers={"authorization": "Bearer key-a"})
    assert first.status_code == 200 and "set-cookie" not in first.headers
    assert gw.chat("next", headers={"authorization": "Bearer key-b"}).status_code == 200
    assert upstream.last_headers["authorization"] == "Bearer sk-test"
    assert "cookie" not in upstream.last_headers


def test_rate_limits_of_a_key_all_tenants_share_are_not_relayed(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """``x-ratelimit-*`` describe the key the upstream was called with. With tenants, the
    gateway's own key is every tenant's: its state would tell one tenant how much the others
    use, so it is not relayed (the request id is). One tenant, or the client's own key, gets
    it."""
    question = [{"role": "user", "content": "How much budget is left?"}]

    def ratelimits(headers: Any) -> dict[str, str]:
        return {k: v for k, v in headers.items() if "ratelimit" in k}

    def sdk(gw: Gateway, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0)

    tenants = make_gateway(
        "auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}", "max_retries: 0"
    )
    a = sdk(tenants, "key-a")
    miss = a.chat.completions.with_raw_response.create(model="fake-model", messages=question)
    assert (
        miss.headers["x-cache"] == "miss" and miss.parse()._request_id == f"req_{miss.parse().id}"
    )
    assert ratelimits(miss.headers) == {}
    with a.chat.completions.with_streaming_response.create(
        model="fake-model", messages=question, stream=True, extra_body={"cache": {"no-cache": True}}
    ) as streamed:
        assert streamed.headers["x-request-id"].startswith("req_")
        assert ratelimits(streamed.headers) == {}
    limited = {"x-ratelimit-remaining-tokens": "0", "retry-after": "1"}
    refused = {"raw": {"status": 429, "headers": limited,
                       "body": '{"error": {"message": "Rate limit reached", "type": "tokens"}}'}}  # fmt: skip
    with pytest.raises(openai.RateLimitError) as error:
        a.chat.completions.create(
            model="fake-model", messages=question, extra_body={"fake": refused}
        )
    assert error.value.response.headers["retry-after"] == "1"  # when to retry: still said
    assert ratelimits(error.value.response.headers) == {}
    # one tenant (with two keys), and a client whose own key goes upstream: relayed
    one = make_gateway("auth: {keys: [{key: key-a, tenant: a}, {key: key-a2, tenant: a}]}")
    own = make_gateway(model_yaml="api_key: null")
    for gw, key in ((one, "key-a2"), (own, "sk-client")):
        miss = sdk(gw, key).chat.completions.with_raw_response.create(
            model="fake-model", messages=question
        )
        assert miss.headers["x-cache"] == "miss"
        assert ratelimits(miss.headers) == {"x-ratelimit-remaining-requests": "4999"}
    assert upstream.last_headers["authorization"] == "Bearer sk-client"


def test_cache_disabled_bypasses(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway("cache:\n  enabled: false\n")
    assert gw.chat("q5").headers["x-cache"] == "bypass"
    assert gw.chat("q5").headers["x-cache"] == "bypass"
    assert upstream.stats["chat"] == 2


def test_unknown_fields_and_model_name_are_forwarded(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway(model_yaml="upstream_model: real-name")
    gw.chat("q6", logit_bias={"50256": -100}, x_vendor={"a": [1, 2]})
    assert upstream.last_body["logit_bias"] == {"50256": -100}
    assert upstream.last_body["x_vendor"] == {"a": [1, 2]}
    assert upstream.last_body["model"] == "real-name"


def test_incomplete_answers_are_not_cached(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    gw.chat("filtered", fake={"finish_reason": "content_filter"})
    assert (
        gw.chat("filtered", fake={"finish_reason": "content_filter"}).headers["x-cache"] == "miss"
    )
    assert upstream.stats["chat"] == 2


def test_completions_endpoint_caches_exactly(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    body = {"model": "fake-model", "prompt": "Once upon a time", "max_tokens": 5}
    first = gw.http.post("/v1/completions", json=body)
    second = gw.http.post("/v1/completions", json=body)
    assert first.headers["x-cache"] == "miss" and second.headers["x-cache"] == "exact"
    assert first.json()["choices"][0]["text"] == second.json()["choices"][0]["text"]
    assert second.json()["object"] == "text_completion"
    stream = gw.http.post("/v1/completions", json={**body, "stream": True})
    assert stream.headers["x-cache"] == "exact"
    text = "".join(c["choices"][0]["text"] for c in sse_chunks(stream.text)[:-1] if c["choices"])
    assert text == first.json()["choices"][0]["text"]
    assert upstream.stats["completions"] == 1


def test_completions_take_max_tokens_zero(make_gateway: Any, upstream: FakeUpstream) -> None:
    """OpenAI's completions take ``max_tokens: 0`` (score a prompt with ``echo`` and
    ``logprobs``, generate nothing); chat's minimum stays 1."""
    gw = make_gateway()
    sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-client", max_retries=0)
    scored = sdk.completions.create(
        model="fake-model", prompt="Score me", max_tokens=0, echo=True, logprobs=0
    )  # was: 400 "expected `int` >= 1"
    assert scored.object == "text_completion"
    assert upstream.last_body["max_tokens"] == 0 and upstream.stats["completions"] == 1
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.completions.create(model="fake-model", prompt="Score me", max_tokens=-1)
    assert refused.value.body["param"] == "max_tokens"  # type: ignore[index]
    chat = gw.http.post("/v1/chat/completions", json={
        "model": "fake-model", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0})  # fmt: skip
    assert chat.status_code == 400


def test_completions_take_an_empty_prompt(make_gateway: Any, upstream: FakeUpstream) -> None:
    """OpenAI answers ``prompt: ""`` (the model writes from nothing): so does the gateway, as
    it did ``[""]``; a list of no prompts stays a 400."""
    gw = make_gateway()
    sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-client", max_retries=0)
    reply = sdk.completions.with_raw_response.create(model="fake-model", prompt="", max_tokens=5)
    assert reply.headers["x-cache"] == "miss"  # was: 400 "'prompt' must not be empty."
    assert reply.parse().object == "text_completion" and upstream.last_body["prompt"] == ""
    again = sdk.completions.with_raw_response.create(model="fake-model", prompt="", max_tokens=5)
    assert again.headers["x-cache"] == "exact" and upstream.stats["completions"] == 1
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.completions.create(model="fake-model", prompt=[], max_tokens=5)
    assert refused.value.body["param"] == "prompt"  # type: ignore[index]


# -- streaming ------------------------------------------------------------------------------


def test_a_replayed_stream_carries_each_tokens_logprobs_with_it(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """A model streams a token's logprobs on the chunk with that token: so does a stream
    replayed from the cache (was: the text in one chunk, then every logprob on the last chunk
    with no text), whether the answer was stored from a stream or from a plain request."""
    gw = make_gateway()
    sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-client", max_retries=0)

    def pieces(question: str) -> tuple[str, list[tuple[str | None, list[str] | None]]]:
        raw = sdk.chat.completions.with_raw_response.create(
            model="fake-model", messages=[{"role": "user", "content": question}],
            logprobs=True, stream=True,
        )  # fmt: skip
        seen = []
        for chunk in raw.parse():
            choice = chunk.choices[0]
            tokens = choice.logprobs.content if choice.logprobs else None
            seen.append((choice.delta.content, [t.token for t in tokens] if tokens else None))
        return raw.headers["x-cache"], seen

    live, replayed = pieces("Name a colour."), pieces("Name a colour.")
    assert (live[0], replayed[0]) == ("miss", "exact")
    assert len([p for p in live[1] if p[1]]) == 4  # (the fake's four pieces, a token each)
    assert [p for p in replayed[1] if p[0]] == [p for p in live[1] if p[0]]
    assert all("".join(tokens) == text for text, tokens in replayed[1] if tokens)
    plain = sdk.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "Name a shape."}], logprobs=True
    )
    assert plain.choices[0].logprobs and plain.choices[0].logprobs.content
    hit = pieces("Name a shape.")
    assert hit[0] == "exact" and all(tokens for text, tokens in hit[1] if text)
    assert "".join(text or "" for text, _ in hit[1]) == plain.choices[0].message.content
    assert upstream.stats["chat"] == 2


def test_stream_is_cached_and_replayed(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    first = gw.chat("stream me", stream=True)
    assert first.headers["content-type"].startswith("text/event-stream")
    assert first.headers["x-cache"] == "miss"
    assert sse_chunks(first.text)[-1] == "[DONE]"
    # the client did not ask for usage: the usage chunk the gateway asked for is dropped
    assert all(c == "[DONE]" or c["choices"] for c in sse_chunks(first.text))
    replayed = gw.chat("stream me", stream=True, stream_options={"include_usage": True})
    assert replayed.headers["x-cache"] == "exact"
    chunks = sse_chunks(replayed.text)
    assert chunks[-1] == "[DONE]"
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"]["completion_tokens"] > 0
    assert streamed_text(replayed.text) == streamed_text(first.text)
    # a non-streaming request is answered from the streamed entry too
    plain = gw.chat("stream me")
    assert plain.headers["x-cache"] == "exact"
    assert content(plain) == streamed_text(first.text)
    assert plain.json()["choices"][0]["finish_reason"] == "stop"
    assert upstream.stats["chat"] == 1


def test_streamed_tool_calls_are_assembled(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    gw.chat("weather?", stream=True, fake={"tool_call": "get_weather"})
    hit = gw.chat("weather?", fake={"tool_call": "get_weather"})
    assert hit.headers["x-cache"] == "exact"
    choice = hit.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert call["id"].startswith("call_")


def test_broken_stream_is_reported_and_not_cached(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    broken = gw.chat("cut", stream=True, fake={"break_after": 2})
    assert broken.status_code == 200
    last = sse_chunks(broken.text)[-1]
    assert isinstance(last, dict) and "error" in last
    assert "[DONE]" not in sse_chunks(broken.text)
    again = gw.chat("cut", stream=True, fake={"break_after": 2})
    assert again.headers["x-cache"] == "miss"
    assert upstream.stats["chat"] == 2


def test_error_event_mid_stream_is_forwarded_not_cached(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    failed = gw.chat("err", stream=True, fake={"error_event": 2})
    assert sse_chunks(failed.text)[-1]["error"]["message"] == "fake mid-stream failure"
    assert gw.chat("err", stream=True, fake={"error_event": 2}).headers["x-cache"] == "miss"


def test_stream_passes_events_through_as_they_arrive(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    body = {"model": "fake-model", "stream": True, "fake": {"chunk_delay": 0.3, "chunks": 3},
            "messages": [{"role": "user", "content": "slowly"}]}  # fmt: skip
    started = time.perf_counter()
    with gw.http.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = response.iter_lines()
        first_line = next(lines)
        first_at = time.perf_counter() - started
        rest = list(lines)
    total = time.perf_counter() - started
    assert first_line.startswith("data: ")
    assert total > 1.0  # five events, 0.3 s apart
    assert first_at < total / 2  # not buffered until the end
    assert rest[-2] == "data: [DONE]"


def test_an_answer_streamed_in_many_pieces_is_folded_whole(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    # 1 MB of text in 10,000 pieces, folded into the stored answer (joined once at the end:
    # adding each piece to the text so far took ~8 s of the event loop for 10 MB; measured by
    # hand, not here: timing belongs in bench/)
    gw = make_gateway()
    fake = {"content": "x" * 100, "repeat": 10_000, "chunks": 10_000}
    response = gw.chat("long answer", stream=True, fake=fake)
    assert sse_chunks(response.text)[-1] == "[DONE]"
    again = gw.chat("long answer", fake=fake)
    assert again.headers["x-cache"] == "exact"
    assert again.json()["choices"][0]["message"]["content"] == "x" * 1_000_000


def test_client_disconnect_cancels_upstream_stream(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    body = {"model": "fake-model", "stream": True, "fake": {"chunk_delay": 0.2, "chunks": 20},
            "messages": [{"role": "user", "content": "long"}]}  # fmt: skip
    with gw.http.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = response.iter_lines()
        next(lines)
        next(lines)
    _wait_for(lambda: upstream.stats["streams_cancelled"] == 1)
    assert upstream.stats["streams_completed"] == 0
    assert (
        gw.chat(
            "long",
            stream=True,
            fake={"chunk_delay": 0.2, "chunks": 20},
            headers={"cache-control": "no-store"},
        ).headers["x-cache"]
        == "miss"
    )


def test_client_disconnect_cancels_upstream_request(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    with pytest.raises(httpx.ReadTimeout):
        gw.http.post(
            "/v1/chat/completions",
            json={
                "model": "fake-model",
                "messages": [{"role": "user", "content": "slow"}],
                "fake": {"delay": 5},
            },
            timeout=0.5,
        )
    _wait_for(lambda: upstream.stats["cancelled"] == 1, timeout=3)


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            {
                "model": "fake-model",
                "messages": [{"role": "user", "content": "x"}],
                "temperature": "hot",
            },
            "temperature",
        ),
        (
            {
                "model": "fake-model",
                "messages": [{"role": "user", "content": "x"}],
                "temperature": 3,
            },
            "temperature",
        ),
        (
            {"model": "fake-model", "messages": [{"role": "wizard", "content": "x"}]},
            "messages[0].role",
        ),
        ({"model": "fake-model", "messages": []}, "messages"),
        ({"model": "fake-model", "messages": "hi"}, "messages"),
        ({"model": "fake-model"}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "fake-model", "messages": [{"role": "user", "content": "x"}], "n": 0}, "n"),
        (
            {
                "model": "fake-model",
                "messages": [{"role": "user", "content": "x"}],
                "stop": ["a", "b", "c", "d", "e"],
            },
            "stop",
        ),
        (
            {
                "model": "fake-model",
                "messages": [{"role": "user", "content": "x"}],
                "stream": "yes",
            },
            "stream",
        ),
        (
            {
                "model": "fake-model",
                "messages": [{"role": "user", "content": "x"}],
                "cache": {"threshold": 2},
            },
            "cache.threshold",
        ),
        (
            {
                "model": "fake-model",
                "messages": [{"role": "user", "content": "x"}],
                "cache": {"bogus": 1},
            },
            "cache.bogus",
        ),
    ],
)
def test_invalid_fields_get_400_with_param(
    make_gateway: Any, upstream: FakeUpstream, body: Any, param: str
) -> None:
    gw = make_gateway()
    response = gw.http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"]
    assert upstream.stats["requests"] == 0


def test_stream_options_without_stream_is_400_even_for_a_cached_answer(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """OpenAI and vLLM refuse ``stream_options`` unless ``stream`` is true; it was accepted
    silently, and served from the cache (found by a review)."""
    gw = make_gateway()
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "x"}]}
    assert gw.http.post("/v1/chat/completions", json=body).status_code == 200
    for extra in ({}, {"stream": False}):
        bad = {**body, **extra, "stream_options": {"include_usage": True}}
        response = gw.http.post("/v1/chat/completions", json=bad)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == "stream_options"
    served = gw.http.post("/v1/chat/completions", json={**body, "stream_options": None})
    assert served.status_code == 200 and served.headers["x-cache"] == "exact"
    assert upstream.stats["requests"] == 1


def test_malformed_json_and_bad_headers(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    response = gw.http.post(
        "/v1/chat/completions", content=b'{"model": ', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    response = gw.http.post("/v1/chat/completions", content=b"[1, 2]")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_type"
    for depth in (65, 600, 100_000):  # a 1 KB body 600 deep was a 500 with a 3,000-line trace
        nested = b'{"model": "fake-model", "messages": [], "x": ' + b"[" * depth + b"]" * depth
        response = gw.http.post("/v1/chat/completions", content=nested + b"}")
        assert response.status_code == 400, depth
        assert response.json()["error"]["code"] == "invalid_json"
    # a top-level array nested too deeply is told its depth, as an object is (not its type)
    response = gw.http.post("/v1/chat/completions", content=b"[" * 100 + b"]" * 100)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    assert (
        gw.chat("x", headers={"x-cache-threshold": "high"}).json()["error"]["param"]
        == "x-cache-threshold"
    )
    assert gw.chat("x", headers={"x-cache-ttl": "-5"}).status_code == 400
    for ttl in ("inf", "1e16", "315360001"):  # past MAX_TTL (10 years): Redis cannot expire it
        error = gw.chat("x", headers={"x-cache-ttl": ttl}).json()["error"]
        assert error["param"] == "x-cache-ttl" and "at most 315360000 seconds" in error["message"]
    assert gw.chat("x", cache={"ttl": 1e16}).json()["error"]["param"] == "cache.ttl"
    error = gw.chat("x", headers={"x-cache-namespace": "a b"}).json()["error"]
    assert error["param"] == "x-cache-namespace"
    # the body's namespace is named as the body's (it was named as the header)
    assert gw.chat("x", cache={"namespace": "a b"}).json()["error"]["param"] == "cache.namespace"
    assert upstream.stats["requests"] == 0
    assert gw.chat("deep but fine", x=[[[[{"a": [1]}]]]]).status_code == 200
    assert gw.chat("ten years", headers={"x-cache-ttl": "315360000"}).status_code == 200


def test_a_compressed_body_is_415_naming_its_content_encoding(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """(found by fuzzing: a gzip'd body was a 400 saying it was not valid JSON)"""
    gw = make_gateway()
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "zipped"}]}
    routes = {"/v1/chat/completions": body, "/v1/responses/input_tokens": {**body, "input": "z"},
              "/v1/messages": {**body, "max_tokens": 8}, "/v1/messages/count_tokens": body}  # fmt: skip
    for route, sent in routes.items():
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        response = gw.http.post(route, content=gzip.compress(json.dumps(sent).encode()),
                                headers=headers)  # fmt: skip
        assert response.status_code == 415, (route, response.text)
        assert response.headers["accept-encoding"] == "identity"
        said = response.json()
        error = said["error"]
        assert "Content-Encoding 'gzip' is not supported" in error["message"]
        if route.startswith("/v1/messages"):
            assert said["type"] == "error"
        else:
            assert error["code"] == "unsupported_content_encoding"
    assert upstream.stats["requests"] == 0
    plain = {"content-encoding": "identity"}
    assert gw.http.post("/v1/chat/completions", json=body, headers=plain).status_code == 200


def test_unknown_model_is_404(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    response = gw.http.post(
        "/v1/chat/completions",
        json={"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]},
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


def test_oversized_body_is_413(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway("server:\n  max_body_bytes: 2000\n")
    response = gw.chat("x" * 5000)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert gw.chat("small").status_code == 200


def test_unknown_route_and_method(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    assert gw.http.get("/v2/nothing").json()["error"]["code"] == "not_found"
    response = gw.http.get("/v1/chat/completions")
    assert response.status_code == 405 and "error" in response.json()
    # the methods the route takes (RFC 9110; a 405 said none)
    assert response.headers["allow"].split(", ") == ["POST", "OPTIONS"]
    assert gw.http.options("/v1/chat/completions").status_code < 300  # (so it is taken)
    assert "GET" in gw.http.post("/v1/models").headers["allow"].split(", ")


def test_upstream_5xx_is_retried_then_succeeds(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    response = gw.chat("flaky", fake={"status": 503, "fail_times": 2})
    assert response.status_code == 200
    assert upstream.stats["errors"] == 2 and upstream.stats["chat"] == 3
    metrics = gw.http.get("/metrics").text
    assert 'cachegate_upstream_retries_total{model="fake-model",why="HTTP 503"} 2.0' in metrics


def test_upstream_5xx_exhausted_is_502_and_not_cached(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    response = gw.chat("down", fake={"status": 500})
    assert response.status_code == 502
    assert "HTTP 500" in response.json()["error"]["message"]
    assert upstream.stats["chat"] == 3  # first try + max_retries (2)
    stream = gw.chat("down", stream=True, fake={"status": 500})
    assert stream.status_code == 502 and stream.json()["error"]["type"] == "upstream_error"
    assert upstream.stats["chat"] == 6


def test_upstream_429_honours_retry_after(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway(model_yaml="max_retry_wait: 1")
    started = time.perf_counter()
    assert (
        gw.chat("limited", fake={"status": 429, "fail_times": 1, "retry_after": 0.5}).status_code
        == 200
    )
    assert time.perf_counter() - started >= 0.5
    # a Retry-After longer than max_retry_wait is handed to the client instead of waited for
    response = gw.chat("limited2", fake={"status": 429, "retry_after": 30})
    assert response.status_code == 429
    assert response.headers["retry-after"] == "30"
    assert response.json()["error"]["message"] == "fake failure 429"
    # so is OpenAI's retry-after-ms, read first as its SDKs do (was retried at once, twice)
    calls = upstream.stats["chat"]
    fake = {"status": 429, "retry_after_ms": 30000, "retry_after": 0}
    response = gw.chat("limited3", fake=fake)
    assert response.status_code == 429 and upstream.stats["chat"] == calls + 1
    assert response.headers["retry-after-ms"] == "30000"


def test_upstream_4xx_passes_through(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    response = gw.chat("bad", fake={"status": 400})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "fake failure 400"
    assert upstream.stats["chat"] == 1  # 4xx is not retried


def test_upstream_timeout_is_504(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway(model_yaml="timeout: {read: 0.3}")
    response = gw.chat("slow", fake={"delay": 2})
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"
    assert gw.chat("slow", fake={"delay": 2}).status_code == 504  # nothing was cached


def test_upstream_unreachable_is_502(tmp_path: Any, refused_url: str) -> None:
    config = load_config_text(f"""
data_dir: {tmp_path}
models:
  fake-model: {{backend: openai, base_url: "{refused_url}", retry_backoff: 0.01}}
""")
    gw = Gateway(config)
    try:
        response = gw.chat("anyone?")
        assert response.status_code == 502
        assert response.json()["error"]["code"] == "upstream_unreachable"
    finally:
        gw.stop()


def test_a_base_url_with_a_query_keeps_it_on_every_request(
    make_gateway: Any, upstream: FakeUpstream, upstream_server: Any
) -> None:
    # (Azure's ?api-version=..., a signed URL: the path went after the query, and every
    # request got the upstream's 404)
    gw = make_gateway(model_yaml=f"base_url: '{upstream_server.url}/v1/?api-version=2024-06-01'")
    answer = gw.chat("which version?")
    assert answer.status_code == 200 and answer.headers["x-cache"] == "miss"
    assert upstream.last_query == b"api-version=2024-06-01"
    created = gw.http.post("/v1/responses", json={"model": "fake-model", "input": "keep me"})
    assert created.status_code == 200
    upstream.last_query = b""
    assert gw.http.delete(f"/v1/responses/{created.json()['id']}").json()["deleted"] is True
    assert created.json()["id"] not in upstream.responses
    assert upstream.last_query == b"api-version=2024-06-01"


def test_gateway_whose_upstream_is_itself_answers_508(tmp_path: Any) -> None:
    with (
        socket.socket() as s
    ):  # released just before the gateway binds it: a bind error, not a hang
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = load_config_text(f"""
data_dir: {tmp_path}
cache: {{semantic: {{enabled: false}}}}
models:
  fake-model: {{backend: openai, base_url: "http://127.0.0.1:{port}/v1", retry_backoff: 0.01}}
""")
    gw = Gateway(config, port=port)
    try:
        started = time.perf_counter()
        for stream in (False, True, False):  # and nothing was cached on the way
            response = gw.chat("round and round", stream=stream)
            assert response.status_code == 508
            error = response.json()["error"]
            assert error["code"] == "loop_detected" and "leads back to itself" in error["message"]
        # without the hop count each call hung until the client's timeout (30 s)
        assert time.perf_counter() - started < 20
    finally:
        gw.stop()


def test_hop_count_goes_up_by_one_per_gateway(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Any
) -> None:
    inner = make_gateway()
    outer = Gateway(
        load_config_text(f"""
data_dir: {tmp_path / "outer"}
cache: {{semantic: {{enabled: false}}}}
models:
  fake-model: {{backend: openai, base_url: "{inner.url}/v1"}}
""")
    )
    try:
        assert " to: relayed " in content(outer.chat("relayed"))
        assert upstream.last_headers["x-cachegate-hops"] == "2"
    finally:
        outer.stop()
    assert inner.chat("seven", headers={"x-cachegate-hops": "7"}).status_code == 200
    assert upstream.last_headers["x-cachegate-hops"] == "8"
    looped = inner.chat("eight", headers={"x-cachegate-hops": "8"})
    assert looped.status_code == 508 and looped.json()["error"]["code"] == "loop_detected"
    for bad_value in ("many", "-1", "9" * 5000, "1_000"):  # (Python's 1_000 was 1000)
        bad = inner.chat("nine", headers={"x-cachegate-hops": bad_value})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "x-cachegate-hops"
    assert upstream.stats["chat"] == 2


def test_partition_header_subdivides_the_tenant_and_is_sent_upstream(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway("auth: {keys: [{key: k1, tenant: acme}, {key: k2, tenant: acme/dev}]}")

    def ask(key: str, **headers: str) -> Any:
        return gw.chat("parted", headers={"authorization": f"Bearer {key}", **headers})

    assert ask("k1").headers["x-cache"] == "miss"
    sent = upstream.last_headers["x-cachegate-partition"]
    # an HMAC keyed with the model's api_key: nobody without it can compute a tenant's
    assert sent == tenant_partition("acme", "sk-test") != tenant_partition("acme")
    assert ask("k1").headers["x-cache"] == "exact"
    assert ask("k1", **{"x-cachegate-partition": "front-1"}).headers["x-cache"] == "miss"
    assert ask("k1", **{"x-cachegate-partition": "front-1"}).headers["x-cache"] == "exact"
    assert upstream.last_headers["x-cachegate-partition"] == tenant_partition(
        "acme\x1ffront-1", "sk-test"
    )
    # tenant "acme" + partition "dev" is not tenant "acme/dev"
    assert ask("k2").headers["x-cache"] == "miss"
    assert ask("k1", **{"x-cachegate-partition": "dev"}).headers["x-cache"] == "miss"
    for bad_value in ("", "a b", "x" * 65):
        bad = ask("k1", **{"x-cachegate-partition": bad_value})
        assert bad.status_code == 400, bad_value
        assert bad.json()["error"]["param"] == "x-cachegate-partition"
    assert upstream.stats["chat"] == 4


def test_a_partition_on_two_header_lines_is_refused(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """A proxy that adds its own ``x-cachegate-partition`` line after the client's: only the
    first line was read, so the client's forged one chose the partition, and the client was
    served another partition's cached answers and stored responses."""
    gw = make_gateway("auth: {keys: [{key: k1, tenant: acme}]}")
    alice = [("authorization", "Bearer k1"), ("x-cachegate-partition", "alice")]
    forged = [*alice, ("x-cachegate-partition", "mallory")]
    asked = gw.http.post("/v1/chat/completions", json=_body("salary"), headers=alice)
    assert asked.status_code == 200
    made = gw.http.post("/v1/responses", json={"model": "fake-model", "input": "hi"}, headers=alice)
    for refused in (
        gw.http.post("/v1/chat/completions", json=_body("salary"), headers=forged),
        gw.http.get(f"/v1/responses/{made.json()['id']}", headers=forged),
    ):
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "x-cachegate-partition"
    assert upstream.stats["chat"] == 1


def test_upstream_invalid_json_is_502(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    response = gw.chat("garbled", fake={"invalid_json": True})
    assert response.status_code == 502


# -- other routes ---------------------------------------------------------------------------


def test_readyz_says_null_for_a_response_cache_there_is_none_of(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    # with cache.enabled: false (as on a `cachegate worker`, which has none) /readyz said
    # "cache": true, as if a response cache was open
    ready = make_gateway().http.get("/readyz").json()
    assert ready["ready"] is True and ready["cache"] is True
    off = make_gateway("cache: {enabled: false}").http.get("/readyz")
    assert off.status_code == 200 and off.json()["ready"] is True and off.json()["cache"] is None


def test_health_probes_answer_head_too(make_gateway: Any, upstream: FakeUpstream) -> None:
    # uptime monitors and load balancers often probe with HEAD: it was a 405, which since
    # unknown routes are counted was logged and shown as a client error on every probe
    gw = make_gateway()
    for path in ("/healthz", "/readyz"):
        head = gw.http.head(path)
        assert head.status_code == 200 and head.content == b"", path
    assert gw.http.head("/readyz").headers["x-request-id"].startswith("req_")
    metrics = gw.http.get("/metrics").text
    assert 'route="unknown"' not in metrics


def test_models_health_and_admin(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    models = gw.http.get("/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["fake-model"]
    assert gw.http.get("/v1/models/fake-model").json()["id"] == "fake-model"
    assert gw.http.get("/healthz").json() == {"status": "ok"}
    assert gw.http.get("/readyz").status_code == 200
    gw.chat("a", headers={"x-cache-namespace": "ns1"})
    gw.chat("b", headers={"x-cache-namespace": "ns2"})
    gw.chat("b", headers={"x-cache-namespace": "ns2"})
    stats = gw.http.get("/admin/stats").json()
    assert stats["cache"]["entries"] == 2 and stats["cache"]["hits"]["exact"] == 1
    flushed = gw.http.post("/admin/cache/flush", json={"namespace": "ns1"}).json()
    assert flushed["flushed"] == 1
    assert gw.chat("b", headers={"x-cache-namespace": "ns2"}).headers["x-cache"] == "exact"
    assert gw.chat("a", headers={"x-cache-namespace": "ns1"}).headers["x-cache"] == "miss"
    gw.chat("c")  # the default namespace: "" flushes it alone, not everything
    flushed = gw.http.post("/admin/cache/flush", json={"namespace": ""}).json()
    assert flushed == {
        "flushed": 1,
        "namespace": "",
        "prefix_bytes_freed": 0,
        "abandoned_writes": 0,
    }
    # a misspelt field is refused (was: read as {} and every namespace flushed)
    typo = gw.http.post("/admin/cache/flush", json={"namspace": "ns2"})
    assert typo.status_code == 400 and typo.json()["error"]["param"] == "namspace"
    assert gw.http.get("/admin/stats").json()["cache"]["entries"] == 2
    assert gw.http.post("/admin/cache/flush").json()["flushed"] == 2
    assert gw.http.get("/admin/stats").json()["cache"]["entries"] == 0
    metrics = gw.http.get("/metrics").text
    assert (
        'cachegate_requests_total{cache="exact",model="fake-model",route="/v1/chat/completions",status="200"}'
        in metrics
    )
    assert "cachegate_cache_entries 0.0" in metrics
    assert "<title>cachegate</title>" in gw.http.get("/dashboard").text


def test_admin_key_and_separate_port(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway("admin:\n  api_key: secret\n")
    assert gw.http.get("/admin/stats").status_code == 401
    assert gw.http.get("/metrics", headers={"authorization": "Bearer nope"}).status_code == 401
    assert (
        gw.http.get("/admin/stats", headers={"authorization": "Bearer secret"}).status_code == 200
    )
    assert gw.http.get("/dashboard?key=secret").status_code == 200


def _wait_for(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


# -- found in review --------------------------------------------------------------------------


def test_forwarded_client_keys_partition_the_cache(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway(model_yaml="api_key: null")
    alice, bob = {"authorization": "Bearer sk-alice"}, {"authorization": "Bearer sk-bob"}
    assert gw.chat("secret plan", headers=alice).headers["x-cache"] == "miss"
    assert upstream.last_headers["authorization"] == "Bearer sk-alice"
    # the upstream checks each client's own key: nobody else may read alice's answer
    assert gw.chat("secret plan", headers=bob).headers["x-cache"] == "miss"
    assert gw.chat("secret plan").headers["x-cache"] == "miss"
    assert gw.chat("secret plan", headers=alice).headers["x-cache"] == "exact"
    assert upstream.stats["chat"] == 3
    # the key's organization/project go upstream with it, and partition the cache too
    project = {**alice, "openai-organization": "org-1", "openai-project": "proj_2"}
    assert gw.chat("secret plan", headers=project).headers["x-cache"] == "miss"
    assert upstream.last_headers["openai-organization"] == "org-1"
    assert upstream.last_headers["openai-project"] == "proj_2"
    assert gw.chat("secret plan", headers=project).headers["x-cache"] == "exact"
    # a key that is not ASCII cannot go upstream: a 400 that says so, not a 500
    for odd in ({"authorization": b"Bearer sk-\xe9"}, {**alice, "openai-project": b"p\xe9"}):
        refused = gw.chat("odd key", headers=odd)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_header"


def test_client_organization_is_not_sent_with_the_gateways_key(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()  # the model has its own api_key
    gw.chat("whose bill", headers={"openai-organization": "org-client"})
    assert upstream.last_headers["authorization"] == "Bearer sk-test"
    assert "openai-organization" not in upstream.last_headers


def test_upstream_error_in_a_200_body_is_502(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    response = gw.chat("odd", fake={"error_body": True})
    assert (
        response.status_code == 502 and "fake error in a 200" in response.json()["error"]["message"]
    )
    assert gw.chat("odd", fake={"error_body": True}).status_code == 502  # not cached


def test_answers_missing_choices_are_not_cached(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    for stream in (False, True):
        gw.chat(f"two please {stream}", n=2, stream=stream, fake={"drop_choices": 1})
        again = gw.chat(f"two please {stream}", n=2, stream=stream, fake={"drop_choices": 1})
        assert again.headers["x-cache"] == "miss"
    gw.chat("two fine", n=2)
    assert len(gw.chat("two fine", n=2).json()["choices"]) == 2


def test_unreadable_chunk_ends_the_stream_with_an_error_event(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway()
    response = gw.chat("garble", stream=True, fake={"bad_chunk": 1})
    last = sse_chunks(response.text)[-1]
    # (the upstream's fault: a 502, where it was the gateway's 500 internal_error)
    assert isinstance(last, dict) and last["error"]["code"] == "upstream_error"
    assert gw.chat("garble", stream=True, fake={"bad_chunk": 1}).headers["x-cache"] == "miss"


def test_model_detail_needs_keys_and_admin_is_closed_when_keys_are_configured(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    gw = make_gateway("auth:\n  keys:\n    - {key: key-a, tenant: a}\n")
    assert gw.http.get("/v1/models/fake-model").status_code == 401
    assert (
        gw.http.get("/v1/models/fake-model", headers={"authorization": "Bearer key-a"}).status_code
        == 200
    )
    # tenants and no admin key: the admin routes are closed to every key (docs/security.md)
    assert gw.http.post("/admin/cache/flush").status_code == 403
    stats = gw.http.get("/admin/stats", headers={"authorization": "Bearer key-a"})
    assert stats.status_code == 403 and stats.json()["error"]["code"] == "admin_closed"
    assert gw.http.get("/dashboard?key=key-a").status_code == 403


def test_malformed_text_part_is_400(make_gateway: Any, upstream: FakeUpstream) -> None:
    gw = make_gateway()
    for part in ({"type": "text", "text": 5}, {"type": "text"}, {"text": "no type"}):
        body = {"model": "fake-model", "messages": [{"role": "user", "content": [part]}]}
        response = gw.http.post("/v1/chat/completions", json=body)
        assert response.status_code == 400, part
        assert response.json()["error"]["param"].startswith("messages[0].content")
    assert upstream.stats["requests"] == 0


def test_a_requests_cache_directives_go_upstream(make_gateway: Any, upstream: FakeUpstream) -> None:
    """no-cache / no-store reach the upstream, so a cache behind this one (another cachegate)
    honours them too; a plain request sends none."""
    gw = make_gateway()
    assert gw.chat("directives 1").headers["x-cache"] == "miss"
    assert "cache-control" not in upstream.last_headers
    gw.chat("directives 2", headers={"cache-control": "no-store"})
    assert upstream.last_headers["cache-control"] == "no-store"
    gw.chat("directives 2", headers={"cache-control": "no-cache, no-store"})
    assert upstream.last_headers["cache-control"] == "no-cache, no-store"


@pytest.mark.parametrize("api", ["chat", "embeddings"])
def test_answers_cached_under_another_upstream_model_are_not_served(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Path, api: str
) -> None:
    """A model name that the operator points at another upstream model starts afresh: its
    answers, and its embeddings (another model's vectors live in another space). The cache
    itself outlives a restart with the same settings."""
    data = f"data_dir: '{tmp_path / 'shared'}'"
    for upstream_model, expected in (
        ("model-a", "miss"),
        ("model-a", "exact"),
        ("model-b", "miss"),
    ):
        gw = make_gateway(data, f"upstream_model: {upstream_model}")
        if api == "chat":
            response = gw.chat("Which model answers?")
        else:
            body = {"model": "fake-model", "input": ["alpha"], "encoding_format": "float"}
            response = gw.http.post("/v1/embeddings", json=body)
        assert response.headers["x-cache"] == expected, upstream_model
        gw.stop()
    assert upstream.stats[api] == 2


def test_a_keyless_gateway_refuses_model_calls_from_a_web_page_of_another_origin(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """The API routes read a JSON body whatever its content-type, so a web page the operator's
    browser opened could make model calls through a gateway without keys (on the operator's
    upstream key) with a POST a browser sends without a CORS preflight (text/plain)."""
    gw = make_gateway()
    body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}]})
    page = {"origin": "https://evil.example", "content-type": "text/plain;charset=UTF-8"}
    for origin in ("https://evil.example", "null", f"{gw.url}.evil.example"):
        refused = gw.http.post(
            "/v1/chat/completions", content=body, headers={**page, "origin": origin}
        )
        assert refused.status_code == 403
        error = refused.json()["error"]
        assert error["code"] == "cross_origin" and error["type"] == "permission_error"
    for path in ("/v1/embeddings", "/v1/responses/input_tokens"):
        assert gw.http.post(path, content=body, headers=page).status_code == 403
    assert gw.http.get("/v1/models", headers=page).status_code == 403
    message = {
        "model": "fake-model",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    anthropic = gw.http.post("/v1/messages", content=json.dumps(message), headers=page)
    assert anthropic.status_code == 403 and anthropic.json()["type"] == "error"  # Anthropic's
    assert upstream.stats["requests"] == 0  # no model call was made
    # no Origin (an SDK, curl), and the gateway's own origin, are answered; nothing was cached
    plain = gw.http.post(
        "/v1/chat/completions", content=body, headers={"content-type": "text/plain"}
    )
    assert plain.status_code == 200 and plain.headers["x-cache"] == "miss"
    own = gw.http.post("/v1/chat/completions", content=body, headers={**page, "origin": gw.url})
    assert own.status_code == 200 and own.headers["x-cache"] == "exact"
    sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused")
    assert sdk.models.list().data[0].id == "fake-model"


def test_a_gateway_with_keys_answers_a_keyed_request_from_any_origin(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """With tenant keys a web page cannot send a key without a preflight the gateway never
    grants: the Origin check is for a gateway without keys."""
    gw = make_gateway("auth: {keys: [{key: key-a, tenant: a}]}")
    headers = {"origin": "https://app.example", "authorization": "Bearer key-a"}
    assert gw.chat("Hi", headers=headers).status_code == 200
    anonymous = gw.chat("Hi", headers={"origin": "https://app.example"})
    assert anonymous.status_code == 401
