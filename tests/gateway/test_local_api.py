"""The bundled local model through the HTTP API: prefix KV reuse (cached_tokens), the response
cache in front of it, tenant isolation, errors. Real weights (SmolLM2-135M-Instruct), CPU."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from gateway import local
from gateway.config import load_config_text
from tests.conftest import Gateway, wait_for

MODEL = "smollm2"
SYSTEM = {
    "role": "system",
    "content": "You are a concise assistant for the ACME hardware store. " * 6,
}


ADMIN = {"authorization": "Bearer adm"}


def local_config(model_dir: Path, data_dir: Path, **model: Any) -> str:
    settings = {
        "backend": "local",
        "source": str(model_dir),
        "threads": 1,
        "default_max_tokens": 16,
        **model,
    }
    return yaml.safe_dump({
        "data_dir": str(data_dir),
        "cache": {"semantic": {"enabled": False}},
        "auth": {"keys": [{"key": "key-a", "tenant": "a"}, {"key": "key-b", "tenant": "b"}]},
        "admin": {"api_key": "adm"},  # (with tenants, tenant keys never open the admin routes)
        "models": {MODEL: settings},
    })  # fmt: skip


@pytest.fixture(scope="module")
def gw(bundled_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = Gateway(
        load_config_text(local_config(bundled_model_dir, tmp_path_factory.mktemp("local")))
    )
    yield gateway
    gateway.stop()


def chat(
    gw: Gateway, messages: list[dict[str, Any]], key: str = "key-a", **body: Any
) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", **body.pop("headers", {})}
    payload = {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 12, **body}
    return gw.http.post("/v1/chat/completions", json=payload, headers=headers)


def admin_stats(gw: Gateway) -> dict[str, Any]:
    return dict(gw.http.get("/admin/stats", headers=ADMIN).json())


def usage(response: httpx.Response) -> dict[str, Any]:
    return dict(response.json()["usage"])


def test_models_lists_the_local_model(gw: Gateway) -> None:
    models = gw.http.get("/v1/models", headers={"authorization": "Bearer key-a"}).json()["data"]
    assert [m["id"] for m in models] == [MODEL]
    assert models[0]["context_window"] == 8192


def test_shared_prefix_is_reused_and_reported(gw: Gateway) -> None:
    first = chat(gw, [SYSTEM, {"role": "user", "content": "Do you sell hammers?"}])
    assert first.status_code == 200 and first.headers["x-cache"] == "miss"
    assert usage(first)["prompt_tokens_details"]["cached_tokens"] == 0
    second = chat(gw, [SYSTEM, {"role": "user", "content": "Do you sell screws?"}])
    cached = usage(second)["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 60  # the system prompt's tokens came from the prefix KV cache
    assert cached < usage(second)["prompt_tokens"]
    assert second.json()["choices"][0]["message"]["content"]
    metrics = gw.http.get("/metrics", headers=ADMIN).text
    hit_tokens = [
        line
        for line in metrics.splitlines()
        if line.startswith('cachegate_backend_prefix_cache_hit_tokens_total{model="smollm2"}')
    ]
    assert hit_tokens and float(hit_tokens[0].split()[-1]) >= cached


def test_multi_turn_conversation_reports_growing_cached_tokens(gw: Gateway) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Name a colour of the rainbow."}]
    seen = []
    for turn in ("Name another one.", "And one more?"):
        response = chat(gw, messages, max_tokens=8)
        seen.append(usage(response)["prompt_tokens_details"]["cached_tokens"])
        messages += [{"role": "assistant", "content": response.json()["choices"][0]["message"]["content"]},
                     {"role": "user", "content": turn}]  # fmt: skip
    seen.append(usage(chat(gw, messages, max_tokens=8))["prompt_tokens_details"]["cached_tokens"])
    # (the first turn may share a few template tokens with earlier tests' prompts)
    assert seen[0] + 10 < seen[1] < seen[2]


def test_admin_stats_report_the_kv_pool(gw: Gateway) -> None:
    chat(gw, [{"role": "user", "content": "Name a tree."}], max_tokens=4)
    pool = admin_stats(gw)["backends"][MODEL]["kv_pool"]
    assert pool["page_size"] == 16 and pool["pages"] > 0 and pool["dtype"] == "float32"
    assert pool["used"] == pool["pages"] - pool["free"]
    assert 0 < pool["cached"] <= pool["used"]  # the finished request's KV, held by the tree
    assert pool["preemptions"] == 0
    metrics = gw.http.get("/metrics", headers=ADMIN).text
    assert f'cachegate_backend_kv_pool_pages{{model="{MODEL}"}} {pool["pages"]}' in metrics
    assert f'cachegate_backend_kv_pool_preemptions_total{{model="{MODEL}"}} 0' in metrics


def test_response_cache_sits_in_front(gw: Gateway) -> None:
    messages = [{"role": "user", "content": "What is a screwdriver for?"}]
    first = chat(gw, messages)
    before = admin_stats(gw)["backends"][MODEL]["prefix_cache"]["queried_tokens"]
    second = chat(gw, messages)
    assert second.headers["x-cache"] == "exact"
    assert second.json()["choices"] == first.json()["choices"]
    after = admin_stats(gw)["backends"][MODEL]["prefix_cache"]["queried_tokens"]
    assert after == before  # the model did not run
    # greedy decoding: a refreshed answer, computed with a warm prefix, is the same text
    fresh = chat(gw, messages, headers={"cache-control": "no-cache"})
    assert fresh.headers["x-cache"] == "refresh"
    assert usage(fresh)["prompt_tokens_details"]["cached_tokens"] > 0
    assert fresh.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]


def test_tenants_do_not_share_prefix_kv(gw: Gateway) -> None:
    prompt = [SYSTEM, {"role": "user", "content": "Which tenant am I?"}]
    chat(gw, prompt, key="key-a", headers={"cache-control": "no-store"})
    other = chat(gw, [SYSTEM, {"role": "user", "content": "Which tenant are you?"}], key="key-b")
    assert usage(other)["prompt_tokens_details"]["cached_tokens"] == 0
    same = chat(gw, [SYSTEM, {"role": "user", "content": "Which tenant is this?"}], key="key-a")
    assert usage(same)["prompt_tokens_details"]["cached_tokens"] > 0


def test_tenants_do_not_share_prefix_kv_through_a_worker(
    bundled_model_dir: Path, tmp_path: Path
) -> None:
    """gateway (keys a, b) -> ``cachegate worker`` (no keys): the worker still keeps them apart."""
    worker, gateway = _behind_a_worker(bundled_model_dir, tmp_path)
    try:
        assert worker.http.get("/readyz").json()["cache"] is None  # (a worker has none)
        secret = [SYSTEM, {"role": "user", "content": "Tenant a's memo: the merger closes soon."}]
        assert chat(gateway, secret, key="key-a").status_code == 200
        guess = chat(gateway, secret, key="key-b")
        assert guess.status_code == 200
        assert usage(guess)["prompt_tokens_details"]["cached_tokens"] == 0
        again = chat(gateway, [SYSTEM, {"role": "user", "content": "Another question."}])
        assert usage(again)["prompt_tokens_details"]["cached_tokens"] >= 60  # a's own prefix
    finally:
        gateway.stop()
        worker.stop()


def _behind_a_worker(
    bundled_model_dir: Path, tmp_path: Path, **upstream: Any
) -> tuple[Gateway, Gateway]:
    """A ``cachegate worker`` (no keys) serving the bundled model, and a gateway (keys a, b;
    cache off) whose MODEL is that worker, with ``upstream`` settings; stop both."""
    from gateway.runtime import Runtime

    settings = yaml.safe_load(local_config(bundled_model_dir, tmp_path / "worker"))
    del settings["auth"]
    worker_config = load_config_text(yaml.safe_dump(settings))
    worker = Gateway(worker_config, runtime=Runtime.build(worker_config, worker=True))
    front = yaml.safe_load(local_config(bundled_model_dir, tmp_path / "front"))
    front["cache"] = {"enabled": False}
    front["models"] = {MODEL: {"backend": "openai", "base_url": f"{worker.url}/v1", **upstream}}
    return worker, Gateway(load_config_text(yaml.safe_dump(front)))


def test_a_worker_keeps_a_stream_alive_within_the_gateways_read_timeout(
    bundled_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gateway (``timeout.read: 1``) -> ``cachegate worker`` whose prefill takes 3 s: the
    worker's keep-alive came every 15 s, so the stream failed with 504 (and the worker was
    marked down) whatever the read timeout below 15 s; it comes as often as the gateway asks."""
    import asyncio

    from localmodel.worker import AsyncEngine

    stream = AsyncEngine.stream

    async def slow_prefill(self: AsyncEngine, request: Any) -> Any:
        await asyncio.sleep(3)  # (a long prompt, or a queue behind a full batch)
        async for event in stream(self, request):
            yield event

    monkeypatch.setattr(AsyncEngine, "stream", slow_prefill)
    worker, gateway = _behind_a_worker(
        bundled_model_dir, tmp_path, timeout={"read": 1}, max_retries=0
    )
    try:
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="key-a", max_retries=0)
        chunks = list(client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], stream=True, max_tokens=4
        ))  # fmt: skip
        assert chunks[-1].choices and chunks[-1].choices[0].finish_reason == "length"
    finally:
        gateway.stop()
        worker.stop()


def test_shared_prefix_across_tenants_when_configured(
    bundled_model_dir: Path, tmp_path: Path
) -> None:
    gateway = Gateway(
        load_config_text(
            local_config(bundled_model_dir, tmp_path, share_prefix_across_tenants=True)
        )
    )
    try:
        chat(gateway, [SYSTEM, {"role": "user", "content": "Hello from a"}], key="key-a")
        other = chat(gateway, [SYSTEM, {"role": "user", "content": "Hello from b"}], key="key-b")
        assert usage(other)["prompt_tokens_details"]["cached_tokens"] >= 60
    finally:
        gateway.stop()


def test_concurrent_requests_answer_as_they_do_alone(gw: Gateway) -> None:
    questions = ["Name a fruit.", "Name a planet.", "Name a colour.", "Name a tool."]
    asks = [[SYSTEM, {"role": "user", "content": q}] for q in questions]
    no_store = {"cache-control": "no-cache, no-store"}
    alone = [chat(gw, m, headers=no_store).json()["choices"][0]["message"] for m in asks]
    with ThreadPoolExecutor(len(asks)) as pool:  # at once: the scheduler batches them
        together = list(pool.map(lambda m: chat(gw, m, headers=no_store), asks))
    assert all(r.status_code == 200 for r in together)
    assert [r.json()["choices"][0]["message"] for r in together] == alone


def test_streaming_matches_non_streaming(gw: Gateway) -> None:
    messages = [{"role": "user", "content": "Say something about nails."}]
    plain = chat(gw, messages, headers={"cache-control": "no-store"})
    stream = chat(
        gw,
        messages,
        stream=True,
        stream_options={"include_usage": True},
        headers={"cache-control": "no-cache"},
    )
    assert stream.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in stream.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == plain.json()["choices"][0]["message"]["content"]
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    finish = [
        c["choices"][0]["finish_reason"]
        for c in chunks
        if c["choices"] and c["choices"][0]["finish_reason"]
    ]
    assert finish == [plain.json()["choices"][0]["finish_reason"]]


def test_max_tokens_inside_an_emoji_sends_no_replacement_character(gw: Gateway) -> None:
    """The bundled model writes 👩 in three tokens: max_tokens 1, 2, 4, 5 cut one short.
    The unfinished emoji is left out (as vLLM does), not sent as U+FFFD, streamed or not."""
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="key-a", max_retries=0)
    messages: Any = [{"role": "user", "content": "Write three emoji."}]
    no_store = {"cache-control": "no-cache, no-store"}
    texts = []
    for max_tokens in range(1, 7):
        ask = {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": max_tokens}
        plain = client.chat.completions.create(**ask, extra_headers=no_store)
        stream = client.chat.completions.create(**ask, stream=True, extra_headers=no_store)
        deltas = [c.choices[0].delta.content or "" for c in stream if c.choices]
        text = plain.choices[0].message.content or ""
        assert "\ufffd" not in text and not any("\ufffd" in d for d in deltas), max_tokens
        assert "".join(deltas) == text
        assert plain.usage is not None and plain.usage.completion_tokens == max_tokens
        texts.append(text)
    assert texts[-1] == "👩👩" and "" in texts and len(set(texts)) == 3  # (cuts inside one)


def test_stop_n_and_completions(gw: Gateway) -> None:
    two = chat(
        gw,
        [{"role": "user", "content": "Give me a tool name."}],
        n=2,
        temperature=0.9,
        seed=3,
        max_tokens=6,
    )
    assert [c["index"] for c in two.json()["choices"]] == [0, 1]
    stopped = chat(
        gw,
        [{"role": "user", "content": "Count from 1 to 10 with commas."}],
        stop=["3."],
        max_tokens=30,
    )
    text = stopped.json()["choices"][0]["message"]["content"]
    assert text.startswith("1.") and "3." not in text  # the output ends before the stop string
    assert stopped.json()["choices"][0]["finish_reason"] == "stop"
    completion = gw.http.post("/v1/completions", headers={"authorization": "Bearer key-a"},
                              json={"model": MODEL, "prompt": "The hardware store sells", "max_tokens": 5, "temperature": 0})  # fmt: skip
    body = completion.json()
    assert body["object"] == "text_completion" and body["choices"][0]["finish_reason"] == "length"
    assert (
        body["usage"]["completion_tokens"] == 5
        and "cached_tokens" in body["usage"]["prompt_tokens_details"]
    )


@pytest.mark.parametrize(
    ("extra", "param", "code"),
    [
        ({"max_tokens": 9000}, "max_tokens", "context_length_exceeded"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
            "tools",
            "unsupported_parameter",
        ),
        ({"response_format": {"type": "json_object"}}, "response_format", "unsupported_parameter"),
        ({"logprobs": True}, "logprobs", "unsupported_parameter"),
        ({"frequency_penalty": 0.5}, "frequency_penalty", "unsupported_parameter"),
        ({"stop": ""}, "stop", "invalid_value"),
        ({"stop": ["a", ""]}, "stop", "invalid_value"),
        ({"n": 200}, "n", "invalid_value"),
        ({"tool_choice": "required"}, "tool_choice", "unsupported_parameter"),
        (
            {"tool_choice": {"type": "function", "function": {"name": "f"}}},
            "tool_choice",
            "unsupported_parameter",
        ),
        ({"function_call": {"name": "f"}}, "function_call", "unsupported_parameter"),
        ({"modalities": ["text", "audio"]}, "modalities", "unsupported_parameter"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "modalities", "unsupported_parameter"),
        ({"frobnicate": 1}, "frobnicate", "unsupported_parameter"),
        ({"frobnicate": None}, "frobnicate", "unsupported_parameter"),
        ({"top_k": -2}, "top_k", "invalid_value"),
        ({"top_k": 1.5}, "top_k", "invalid_value"),
        ({"reasoning_effort": "high"}, "reasoning_effort", "unsupported_parameter"),
        (
            {"prediction": {"type": "content", "content": "x"}},
            "prediction",
            "unsupported_parameter",
        ),
        ({"prompt": "x"}, "prompt", "unsupported_parameter"),  # (a completions field)
        (
            {"moderation": {"model": "omni-moderation-latest"}},
            "moderation",
            "unsupported_parameter",
        ),
        ({"modalities": 5}, "modalities", "invalid_value"),
        ({"modalities": True}, "modalities", "invalid_value"),
    ],
)
def test_requests_the_model_cannot_serve_get_400(
    gw: Gateway, extra: dict[str, Any], param: str, code: str
) -> None:
    response = chat(gw, [{"role": "user", "content": "hi"}], **extra)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and error["code"] == code


def test_requests_that_mean_nothing_unusual_are_served(gw: Gateway) -> None:
    headers = {"authorization": "Bearer key-a"}
    question = [{"role": "user", "content": "hi"}]
    for extra in (
        {"tool_choice": "none"},
        {"tool_choice": "auto"},
        {"modalities": ["text"]},
        {"modalities": "text"},
        {"user": "u1", "metadata": {"k": "v"}, "store": False, "prompt_cache_key": "k"},
        # the OpenAI SDK's prompt cache settings (a provider's cache, not the answer): were a 400
        {"prompt_cache_retention": "24h", "prompt_cache_options": {"ttl": "30m"}},
        # OpenAI fields of other models, sent as null by clients that send every field: were
        # a 400 "not a request argument the local model recognizes"
        {"reasoning_effort": None, "verbosity": None, "prediction": None},
        {"web_search_options": None},
        {"top_k": -1},  # vLLM's and SGLang's "no limit" (was a 400)
        {"top_k": 0},
    ):
        assert chat(gw, question, max_tokens=2, **extra).status_code == 200, extra
    # (another question: a null is the field left unset, so the cache would answer it)
    assert chat(gw, [{"role": "user", "content": "ok?"}], moderation=None).status_code == 200
    completion = {"model": MODEL, "max_tokens": 2, "temperature": 0}
    # an empty prompt, alone or in a list, is the model's BOS (was: a 400 for "" alone)
    for extra in (
        {"prompt": "Hello", "suffix": ""}, {"prompt": [[19556, 28]]}, {"prompt": ""},
        {"prompt": [""]},
    ):  # fmt: skip
        response = gw.http.post("/v1/completions", json={**completion, **extra}, headers=headers)
        assert response.status_code == 200, (extra, response.text)


def test_several_prompts_in_one_completion_are_refused(gw: Gateway) -> None:
    """One prompt per request (documented); the 400 says so with a code, as other refusals."""
    headers = {"authorization": "Bearer key-a"}
    body = {"model": MODEL, "max_tokens": 2, "temperature": 0}
    for prompt in (["Hello", "Goodbye"], [[19556, 28], [19556]]):
        response = gw.http.post("/v1/completions", json={**body, "prompt": prompt}, headers=headers)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["param"] == "prompt" and error["code"] == "unsupported_parameter"  # was null


def test_earlier_tool_calls_are_refused_not_dropped(gw: Gateway) -> None:
    """The template has no place for them: the model would answer half a conversation."""
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "18 C and sunny"},
    ]
    response = chat(gw, messages)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages[1].tool_calls"


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{"role": "user", "content": None}], "messages[0].content"),
        ([{"role": "user", "content": []}], "messages[0].content"),
        ([{"role": "system", "content": None}, {"role": "user", "content": "hi"}],
         "messages[0].content"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"},
          {"role": "user", "content": None}], "messages[2].content"),
        # (no earlier tool call: OpenAI's 400; the model answered it as a turn)
        ([{"role": "tool", "tool_call_id": "c1", "content": "18 C"},
          {"role": "user", "content": "hi"}], "messages[0].role"),
        ([{"role": "user", "content": "hi"}, {"role": "function", "name": "f", "content": "1"}],
         "messages[1].role"),
    ],
)  # fmt: skip
def test_a_turn_without_content_or_an_orphan_tool_result_is_400(
    gw: Gateway, messages: list[dict[str, Any]], param: str
) -> None:
    """As OpenAI answers it; the model answered an empty turn (200, and cached)."""
    for stream in (False, True):
        response = chat(gw, messages, stream=stream)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == param and error["code"] == "invalid_value"
    assert chat(gw, [{"role": "user", "content": ""}], max_tokens=2).status_code == 200


def test_an_answer_stored_for_a_turn_without_content_is_never_served(
    gw: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 400 for a turn without content (or an orphan tool result) comes before the cache is
    looked in: an answer stored for one by a build that answered it (here: this gateway with
    the check taken out; a Redis another version writes to) is not served, streamed or not,
    and the error is the one the model gives (was: that answer, an exact hit)."""
    older = {"role": "system", "content": "An older build answered this."}
    tool = {"role": "tool", "tool_call_id": "c1", "content": "18 C"}
    refused = [
        ([older, {"role": "user", "content": None}], "messages[1].content"),
        ([older, {"role": "user", "content": []}], "messages[1].content"),
        ([older, tool, {"role": "user", "content": "hi"}], "messages[1].role"),
    ]
    with monkeypatch.context() as older_build:  # (it refused none of them: answered, stored)
        older_build.setattr(local, "_check_content", lambda message, i: None)
        for messages, _ in refused:
            stored = admin_stats(gw)["cache"]["stores"] + 1
            assert chat(gw, messages, max_tokens=2).headers["x-cache"] == "miss"
            wait_for(lambda n=stored: admin_stats(gw)["cache"]["stores"] == n)
            assert chat(gw, messages, max_tokens=2).headers["x-cache"] == "exact"
    before = admin_stats(gw)["cache"]
    for messages, param in refused:
        said = (
            f"'{param}' must be a string or a non-empty list of content parts."
            if param.endswith(".content")
            else "'messages[1]' with role 'tool' must answer a tool call of a preceding message."
        )
        for stream in (False, True):
            response = chat(gw, messages, max_tokens=2, stream=stream)
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert (error["param"], error["code"], error["message"]) == (
                param, "invalid_value", said
            )  # fmt: skip
    after = admin_stats(gw)["cache"]
    assert (after["lookups"], after["hits"]) == (before["lookups"], before["hits"])
    assert after["entries"] == before["entries"]  # (still stored: never served)


def stored_then_refused(
    gw: Gateway,
    older_build: Callable[[pytest.MonkeyPatch], None],
    ask: Callable[[bool], Any],
    refusal: type[Exception],
    admin: dict[str, str] = ADMIN,
) -> list[Any]:
    """The errors (``refusal``) a request gets, streamed or not (``ask(stream)``: the SDK's raw
    response), once an answer to it was stored by a build that answered it (``older_build``
    takes the check out; the answer is stored, then an exact hit), with no lookup and no hit
    in /admin/stats and the entry still stored: the refusal comes before the lookup."""

    def cache() -> dict[str, Any]:
        return dict(gw.http.get("/admin/stats", headers=admin).json()["cache"])

    with pytest.MonkeyPatch.context() as older:  # (it refused none of them: answered, stored)
        older_build(older)
        stored = cache()["stores"] + 1
        assert ask(False).headers["x-cache"] == "miss"
        wait_for(lambda: cache()["stores"] == stored)
        assert ask(False).headers["x-cache"] == "exact"
    before, errors = cache(), []
    for stream in (False, True):
        with pytest.raises(refusal) as refused:
            ask(stream)
        errors.append(refused.value)
    after = cache()
    assert (after["lookups"], after["hits"]) == (before["lookups"], before["hits"])
    assert after["entries"] == before["entries"]  # (still stored: never served)
    return errors


def test_an_answer_stored_for_sampling_the_model_refuses_is_never_served(gw: Gateway) -> None:
    """A sampling parameter the local model refuses (``_sampling``) is refused before the
    cache is looked in, with the body it had (was: after, so an answer stored for it, by a
    build that ignored ``logit_bias`` or took any ``top_k``, was served), and before a turn it
    cannot read, as the model checks them (was: the turn's error first)."""
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="key-a", max_retries=0)
    hi: list[Any] = [{"role": "user", "content": "Sampled by an older build?"}]
    cases: list[tuple[Callable[[pytest.MonkeyPatch], None], dict[str, Any], str, str, str]] = [
        (lambda older: older.delitem(local._UNSUPPORTED, "logit_bias"),
         {"logit_bias": {"42": 5}}, "logit_bias", "unsupported_parameter",
         "'logit_bias' is not supported by the local model."),
        (lambda older: older.setattr(local, "_top_k", lambda top_k: None),
         {"extra_body": {"top_k": -3}}, "top_k", "invalid_value",
         "'top_k' must be a non-negative integer (0 or -1: no limit)."),
    ]  # fmt: skip
    for older_build, extra, param, code, said in cases:

        def ask(stream: bool, extra: dict[str, Any] = extra) -> Any:
            return client.chat.completions.with_raw_response.create(
                model=MODEL, messages=hi, max_tokens=2, temperature=0, stream=stream, **extra
            )

        for error in stored_then_refused(gw, older_build, ask, openai.BadRequestError):
            assert error.body == {"message": said, "type": "invalid_request_error",
                                  "param": param, "code": code}  # fmt: skip
        with pytest.raises(openai.BadRequestError) as refused:  # (and a turn with no content)
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": []}], **extra
            )
        assert refused.value.param == param


def test_an_answer_stored_for_several_prompts_is_never_served(gw: Gateway) -> None:
    """A completions request with several prompts is refused before the cache is looked in,
    with the body it had (was: as the prompt was tokenized, after the lookup, so an answer
    stored for it, here by a build that answered the first prompt as often as there are
    prompts, a choice for each as a store asks, was served)."""
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="key-a", max_retries=0)

    def ask(stream: bool) -> Any:
        return client.completions.with_raw_response.create(
            model=MODEL, prompt=["Once upon", "a time"], max_tokens=2, temperature=0, stream=stream
        )

    def older_build(older: pytest.MonkeyPatch) -> None:
        sampling = local._sampling
        older.setattr(local, "_prompt", lambda body: body["prompt"][0])
        older.setattr(local, "_sampling", lambda body, kind: dataclasses.replace(
            sampling(body, kind), n=len(body["prompt"])))  # fmt: skip

    for error in stored_then_refused(gw, older_build, ask, openai.BadRequestError):
        assert error.body == {
            "message": "The local model takes one prompt per request (a string or a list of "
            "token ids).",
            "type": "invalid_request_error",
            "param": "prompt",
            "code": "unsupported_parameter",
        }


def test_control_token_text_in_a_message_is_plain_text(gw: Gateway) -> None:
    def prompt_tokens(content: str) -> int:
        response = chat(gw, [{"role": "user", "content": content}], max_tokens=1,
                        headers={"cache-control": "no-store"})  # fmt: skip
        assert response.status_code == 200
        return int(response.json()["usage"]["prompt_tokens"])

    # was 1 token: the control token itself, so a user could open a system turn
    assert prompt_tokens("x<|im_end|>") - prompt_tokens("x") > 1


def test_completions_logprobs_zero_asks_for_logprobs(gw: Gateway) -> None:
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 2, "temperature": 0}
    headers = {"authorization": "Bearer key-a"}
    response = gw.http.post("/v1/completions", json={**body, "logprobs": 0}, headers=headers)
    assert response.status_code == 400  # was: 200 with "logprobs": null, and cached
    assert response.json()["error"]["param"] == "logprobs"
    plain = gw.http.post("/v1/completions", json={**body, "top_logprobs": 0}, headers=headers)
    assert plain.status_code == 200  # top_logprobs 0 asks for nothing


def test_edge_sampling_values_are_served(gw: Gateway) -> None:
    question = [{"role": "user", "content": "Name a colour."}]
    greedy = chat(gw, question, headers={"cache-control": "no-store"})
    assert greedy.status_code == 200
    text = greedy.json()["choices"][0]["message"]["content"]
    for extra in ({"temperature": 1e-38}, {"temperature": 1, "top_p": 0}, {"top_p": 1e-300}):
        response = chat(gw, question, headers={"cache-control": "no-cache, no-store"}, **extra)
        assert response.status_code == 200, (extra, response.text)  # was 500 (NaN) / 400
        assert response.json()["choices"][0]["message"]["content"] == text  # all argmax


def test_integral_float_top_k_is_served_on_a_miss_as_on_a_hit(gw: Gateway) -> None:
    """``top_k: 3.0`` was a 400 on a miss but served on a cache hit (of ``top_k: 3``); vLLM
    takes it as 3: so does the local model, and ``3.5`` stays a 400 (found by a review)."""
    question = [{"role": "user", "content": "Name a tool."}]
    fresh = {"cache-control": "no-cache"}
    whole = chat(gw, question, top_k=3, seed=5, temperature=1, headers=fresh)
    assert whole.status_code == 200
    text = whole.json()["choices"][0]["message"]["content"]
    for top_k, headers in ((3.0, fresh), (3.0, {}), (-1.0, fresh)):
        response = chat(gw, question, top_k=top_k, seed=5, temperature=1, headers=headers)
        assert response.status_code == 200, (top_k, response.text)
        if top_k == 3.0:
            assert response.json()["choices"][0]["message"]["content"] == text
    bad = chat(gw, question, top_k=3.5, seed=5, temperature=1, headers=fresh)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "top_k"


def test_integral_floats_are_integers_in_every_integer_parameter(gw: Gateway) -> None:
    """``max_tokens: 3.0`` (or ``seed``, ``n``, ``max_completion_tokens``) was a 400 while
    ``top_k: 3.0`` was served: JSON has one number type, and JSON Schema's (OpenAI's) and
    vLLM's integers take 3.0. Each is now the integer; ``3.5`` stays a 400 naming it."""
    question = [{"role": "user", "content": "Name a colour."}]
    fresh = {"cache-control": "no-cache"}
    whole = chat(gw, question, max_tokens=3, seed=5, n=2, temperature=1, headers=fresh)
    assert whole.status_code == 200
    texts = [c["message"]["content"] for c in whole.json()["choices"]]
    for name in ("max_tokens", "max_completion_tokens"):
        body = {"max_tokens": None, name: 3.0, "seed": 5.0, "n": 2.0, "temperature": 1}
        response = chat(gw, question, headers=fresh, **body)
        assert response.status_code == 200, (name, response.text)
        assert [c["message"]["content"] for c in response.json()["choices"]] == texts
        assert usage(response)["completion_tokens"] == usage(whole)["completion_tokens"]
    completion = gw.http.post(
        "/v1/completions",
        json={"model": MODEL, "prompt": "Red, green and", "max_tokens": 2.0, "temperature": 0},
        headers={"authorization": "Bearer key-a"},
    )
    assert completion.status_code == 200 and usage(completion)["completion_tokens"] <= 2
    for name in ("max_tokens", "seed", "n"):
        bad = chat(gw, question, headers=fresh, **{name: 3.5})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == name, bad.text


def test_unset_sampling_uses_the_model_defaults_and_yaml_overrides_them(
    gw: Gateway, bundled_model_dir: Path, tmp_path: Path
) -> None:
    question = [{"role": "user", "content": "What is the capital of France?"}]
    body = {"model": MODEL, "messages": question, "max_tokens": 12, "seed": 0}
    card = gw.http.post(
        "/v1/chat/completions", json=body, headers={"authorization": "Bearer key-a"}
    )
    assert "Paris" in card.json()["choices"][0]["message"]["content"]  # model card: 0.2 / 0.9
    greedy = chat(gw, question, headers={"cache-control": "no-store"})  # temperature 0
    text = greedy.json()["choices"][0]["message"]["content"]
    config = local_config(bundled_model_dir, tmp_path, default_temperature=0, default_top_p=0.5)
    other = Gateway(load_config_text(config))
    try:
        for seed in (1, 2):
            body["seed"] = seed
            answer = other.http.post(
                "/v1/chat/completions", json=body, headers={"authorization": "Bearer key-a"}
            )
            assert answer.json()["choices"][0]["message"]["content"] == text  # YAML: greedy
    finally:
        other.stop()


def test_developer_role_is_the_system_role(gw: Gateway) -> None:
    def prompt_tokens(role: str) -> int:
        messages = [
            {"role": role, "content": "Answer in French."},
            {"role": "user", "content": "hi"},
        ]
        response = chat(gw, messages, max_tokens=1, headers={"cache-control": "no-store"})
        assert response.status_code == 200
        return int(response.json()["usage"]["prompt_tokens"])

    assert prompt_tokens("developer") == prompt_tokens("system")


def test_prompt_over_the_context_window_is_400_and_not_cached(gw: Gateway) -> None:
    long = "word " * 9000
    response = chat(gw, [{"role": "user", "content": long}])
    assert (
        response.status_code == 400
        and response.json()["error"]["code"] == "context_length_exceeded"
    )
    stream = chat(gw, [{"role": "user", "content": long}], stream=True)
    assert stream.status_code == 400  # before any stream header
    too_long = chat(gw, [{"role": "user", "content": "hi"}], max_completion_tokens=10**6)
    assert too_long.json()["error"]["param"] == "max_completion_tokens"
    # the prompt alone is too long: that is what the error names, whatever max_tokens says
    both = chat(gw, [{"role": "user", "content": long}], max_tokens=3)
    assert both.json()["error"]["param"] == "messages"
    assert gw.http.get("/healthz").status_code == 200


def test_client_disconnect_frees_the_engine(gw: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Write a long story about a hammer."}],
            "max_tokens": 400, "temperature": 0, "stream": True}  # fmt: skip
    headers = {"authorization": "Bearer key-a"}
    stores = admin_stats(gw)["cache"]["stores"]
    caplog.set_level(logging.INFO, logger="cachegate.requests")
    with gw.http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
    # the generation was cancelled between two tokens: a new request is served promptly
    deadline = time.time() + 20
    while admin_stats(gw)["backends"][MODEL]["pending"] and time.time() < deadline:
        time.sleep(0.05)
    assert admin_stats(gw)["backends"][MODEL]["pending"] == 0
    started = time.time()
    # (a question no other test asked: served by the model, not the cache)
    assert chat(gw, [{"role": "user", "content": "hi, hammer"}], max_tokens=2).status_code == 200
    assert time.time() - started < 10
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], (
        "a disconnect is not an error"
    )
    # nothing was stored for the cut stream (only the short answer above)
    assert admin_stats(gw)["cache"]["stores"] == stores + 1
    ends = [r.getMessage() for r in caplog.records if r.name == "cachegate.requests"]
    assert any("status=499" in line for line in ends), ends  # the client left: not a 502


def test_a_cancelled_stream_is_booked_with_its_prompt(gw: Gateway) -> None:
    """The client leaves after two text deltas: the generation is cancelled and never reports
    its usage; the ledger books the prompt the model ran and the deltas it generated."""
    messages = [{"role": "user", "content": "Write a long story about a saw and a drill."}]
    body = {"model": MODEL, "messages": messages, "max_tokens": 400, "temperature": 0,
            "stream": True}  # fmt: skip
    headers = {"authorization": "Bearer key-b"}

    def row() -> dict[str, Any]:
        return dict(admin_stats(gw)["ledger"].get("b", {}).get(MODEL, {}))

    before = row()
    deltas = 0
    with gw.http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        for line in response.iter_lines():
            chunk = json.loads(line[6:]) if line.startswith("data: {") else {}
            deltas += bool(chunk.get("choices") and chunk["choices"][0]["delta"].get("content"))
            if deltas == 2:
                break  # and hang up
    wait_for(lambda: row().get("ended_early", 0) == before.get("ended_early", 0) + 1)
    after = row()
    prompt = usage(chat(gw, messages, key="key-b", max_tokens=1))["prompt_tokens"]
    assert after["input_tokens"] - before.get("input_tokens", 0) == prompt
    assert after["output_tokens"] - before.get("output_tokens", 0) >= 2
    assert after["model_calls"] - before.get("model_calls", 0) == 1


def test_prefix_evicted_from_memory_is_reloaded_from_disk(
    bundled_model_dir: Path, tmp_path: Path
) -> None:
    budget = 120 * 46_080  # ~120 tokens of SmolLM2 KV in memory
    text = local_config(
        bundled_model_dir, tmp_path, prefix_cache_bytes=budget, prefix_disk_dir=str(tmp_path / "kv")
    )
    gateway = Gateway(load_config_text(text))
    try:
        first = chat(
            gateway, [SYSTEM, {"role": "user", "content": "Do you sell drills?"}], max_tokens=4
        )
        other = {
            "role": "system",
            "content": "You are a pirate who answers in rhymes about the sea. " * 8,
        }
        chat(
            gateway, [other, {"role": "user", "content": "Ahoy?"}], max_tokens=4
        )  # evicts SYSTEM's KV
        deadline = time.time() + 20
        while time.time() < deadline:
            disk = admin_stats(gateway)["backends"][MODEL]["prefix_disk"]
            if disk["written_tokens"] > 0 and disk["pending"] == 0:
                break
            time.sleep(0.1)
        again = chat(gateway, [SYSTEM, {"role": "user", "content": "Do you sell drills?"}], max_tokens=4,
                     headers={"cache-control": "no-cache"})  # fmt: skip
        assert usage(again)["prompt_tokens_details"]["cached_tokens"] >= 60
        assert again.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
        stats = admin_stats(gateway)["backends"][MODEL]
        assert stats["prefix_disk"]["served_tokens"] >= 60
        assert stats["prefix_disk_break_even"]["min_tokens"] is not None
        assert any((tmp_path / "kv").iterdir())
    finally:
        gateway.stop()


def test_prefix_disk_dir_keeps_a_users_own_kv_named_directories(
    bundled_model_dir: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "cache"  # a directory the user keeps other things in too
    (shared / "kv-backups").mkdir(parents=True)
    (shared / "kv-backups" / "db.dump").write_text("precious")
    (shared / "kv-dead").mkdir()  # a crashed run's: its lock beside it, nobody holding it
    (shared / "kv-dead" / "0000000000000000.kv").write_bytes(b"orphan")
    (shared / "kv-dead.lock").touch()
    text = local_config(bundled_model_dir, tmp_path, prefix_disk_dir=str(shared))
    gateway = Gateway(load_config_text(text))
    try:
        response = chat(gateway, [{"role": "user", "content": "hi"}], max_tokens=2)
        assert response.status_code == 200
        assert admin_stats(gateway)["backends"][MODEL]["prefix_disk"] is not None
        assert (shared / "kv-backups" / "db.dump").read_text() == "precious"
        assert not (shared / "kv-dead").exists() and not (shared / "kv-dead.lock").exists()
    finally:
        gateway.stop()


def test_a_model_that_cannot_load_is_503_and_readyz_says_why(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    config = load_config_text(
        yaml.safe_dump({
            "data_dir": str(tmp_path / "data"),
            "cache": {"semantic": {"enabled": False}},
            "models": {MODEL: {"backend": "local", "source": str(missing)}},
        })
    )  # fmt: skip
    gateway = Gateway(config, wait=False)  # /readyz never says ready
    try:
        response = chat(gateway, [{"role": "user", "content": "hi"}], key="any")
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "model_unavailable"
        ready = gateway.http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["status"] == "failed" and MODEL in ready.json()["failed"]
    finally:
        gateway.stop()


def test_admin_flush_of_the_prefix_cache_alone_keeps_the_answers(gw: Gateway) -> None:
    admin = ADMIN
    messages = [SYSTEM, {"role": "user", "content": "Do you sell ladders?"}]
    first = chat(gw, messages)
    assert first.headers["x-cache"] == "miss"
    flushed = gw.http.post(
        "/admin/cache/flush", json={"prefix": True, "answers": False}, headers=admin
    ).json()
    assert flushed["flushed"] == 0 and flushed["prefix_bytes_freed"] > 0
    assert admin_stats(gw)["backends"][MODEL]["prefix_cache"]["tokens"] == 0
    assert chat(gw, messages).headers["x-cache"] == "exact"  # the answer stayed
    fresh = chat(gw, messages, headers={"cache-control": "no-cache"})
    assert usage(fresh)["prompt_tokens_details"]["cached_tokens"] == 0  # its KV did not
    bad = gw.http.post("/admin/cache/flush", json={"answers": "no"}, headers=admin)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "answers"


def test_the_ledger_counts_prefix_cached_tokens_per_tenant(gw: Gateway) -> None:
    before = admin_stats(gw)["ledger"].get("b", {}).get(MODEL, {}).get("prefix_cached_tokens", 0)
    chat(gw, [SYSTEM, {"role": "user", "content": "Do you sell paint?"}], key="key-b")
    second = chat(gw, [SYSTEM, {"role": "user", "content": "Do you sell glue?"}], key="key-b")
    cached = usage(second)["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 60
    row = admin_stats(gw)["ledger"]["b"][MODEL]
    assert row["prefix_cached_tokens"] - before >= cached and row["model_calls"] >= 2


HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        (
            "/v1/completions",
            {"prompt": "Once", "max_completion_tokens": [1]},
            "max_completion_tokens",
        ),
        ("/v1/completions", {"prompt": "Once", "messages": []}, "messages"),
        (
            "/v1/completions",
            {"prompt": "Once", "continue_final_message": True},
            "continue_final_message",
        ),
        (
            "/v1/completions",
            {"prompt": "Once", "response_format": {"type": "text"}},
            "response_format",
        ),
        ("/v1/responses", {"input": "hi", "seed": "abc"}, "seed"),
        ("/v1/responses", {"input": "hi", "seed": 1.5}, "seed"),
        # fields that change no answer, wrongly typed: were answered (and echoed by Responses)
        ("/v1/chat/completions", {"messages": HI, "metadata": "x"}, "metadata"),
        ("/v1/chat/completions", {"messages": HI, "metadata": {"k": 5}}, "metadata"),
        ("/v1/chat/completions", {"messages": HI, "store": "yes"}, "store"),
        ("/v1/chat/completions", {"messages": HI, "service_tier": 5}, "service_tier"),
        ("/v1/chat/completions", {"messages": HI, "prompt_cache_key": 5}, "prompt_cache_key"),
        ("/v1/chat/completions", {"messages": HI, "seed": 10**30}, "seed"),
        ("/v1/responses", {"input": "hi", "user": 5}, "user"),
        ("/v1/responses", {"input": "hi", "truncation": "sometimes"}, "truncation"),
        ("/v1/responses", {"input": "hi", "parallel_tool_calls": "x"}, "parallel_tool_calls"),
        ("/v1/responses", {"input": "hi", "background": "x"}, "background"),
        (
            "/v1/responses",
            {"input": "hi", "metadata": {str(i): "v" for i in range(17)}},
            "metadata",
        ),
        ("/v1/responses", {"input": []}, "input"),
    ],
)
def test_fields_of_another_api_or_of_the_wrong_type_get_400(
    gw: Gateway, route: str, body: dict[str, Any], param: str
) -> None:
    """Not a 500 from the engine, nor a field silently ignored (found by a review)."""
    headers = {"authorization": "Bearer key-a"}
    response = gw.http.post(route, json={"model": MODEL, **body}, headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_answers_cached_under_other_model_defaults_are_not_served(
    bundled_model_dir: Path, tmp_path: Path
) -> None:
    """An answer made under one default_max_tokens (the request set none) is not served once
    the operator changed it: the model's defaults are part of every key. The cache itself
    outlives a restart with the same settings."""
    question = [{"role": "user", "content": "Tell me about the sea."}]
    headers = {"authorization": "Bearer key-a"}
    body = {"model": MODEL, "messages": question, "temperature": 0}

    def ask(default_max_tokens: int, **settings: Any) -> tuple[str, int]:
        config = local_config(
            bundled_model_dir, tmp_path, default_max_tokens=default_max_tokens, **settings
        )
        gateway = Gateway(load_config_text(config))
        try:
            response = gateway.http.post("/v1/chat/completions", json=body, headers=headers)
            usage = response.json()["usage"]
            prompt_tokens.append(usage["prompt_tokens"])
            return response.headers["x-cache"], usage["completion_tokens"]
        finally:
            gateway.stop()

    prompt_tokens: list[int] = []
    assert ask(3) == ("miss", 3)
    assert ask(3) == ("exact", 3)  # the same settings after a restart: served
    assert ask(5) == ("miss", 5)  # was ("exact", 3): cut at the old default
    # the window cuts an answer whose request set no max_tokens: it is part of the key too
    window = prompt_tokens[0] + 2
    assert ask(5, max_context=window) == ("miss", 2)
    assert ask(5, max_context=window + 8) == ("miss", 5)  # was ("exact", 2)


def test_a_worker_still_loading_gets_no_requests_while_another_is_ready(
    bundled_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ``cachegate worker``s behind a gateway; the second (restarted, say) still loads its
    model: it took its share of the requests, each waiting for the load though the first was
    idle. It answers 503 at once, and the other takes them; the last replica left to try
    waits as before. Once loaded (and ``down_for`` over) it serves again."""
    import threading

    import gateway.local
    from gateway.runtime import Runtime

    release = threading.Event()
    load = gateway.local._load_and_warm

    def gated(config: Any) -> Any:
        if Path(config.data_dir).parent.name == "loading":
            assert release.wait(60)
        return load(config)

    monkeypatch.setattr(gateway.local, "_load_and_warm", gated)
    workers = []
    for name in ("ready", "loading"):
        settings = yaml.safe_load(local_config(bundled_model_dir, tmp_path / name / "data"))
        del settings["auth"]
        config = load_config_text(yaml.safe_dump(settings))
        runtime = Runtime.build(config, worker=True)
        workers.append(Gateway(config, runtime=runtime, wait=name == "ready"))
    replicas = [f"{w.url}/v1" for w in workers]
    front = {"data_dir": str(tmp_path / "front"), "cache": {"enabled": False},
             "models": {MODEL: {"backend": "openai", "replicas": replicas, "max_retries": 0,
                                "routing": {"policy": "round_robin", "down_for": 0.5}}}}  # fmt: skip
    gw = Gateway(load_config_text(yaml.safe_dump(front)))

    def served(worker: Gateway) -> float:
        metrics = worker.http.get("/metrics", headers=ADMIN).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("cachegate_requests_total{")
            and 'status="200"' in line
            and 'model=""' not in line  # (not its /readyz nor /metrics)
        )

    try:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0, timeout=20)
        for i in range(4):  # (held until the load is over, each would time out: it never is)
            answer = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"Hi {i}"}], max_tokens=2
            )
            assert answer.choices[0].message.content is not None
            time.sleep(0.6)  # (down_for over: it is asked again, still loading)
        assert served(workers[0]) == 4 and served(workers[1]) == 0
        release.set()
        workers[1].wait_ready()
        time.sleep(0.6)
        for i in range(2):  # round robin: one of these goes to it
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"Then {i}"}], max_tokens=2
            )
        assert served(workers[1]) >= 1
    finally:
        release.set()
        gw.stop()
        for worker in workers:
            worker.stop()


def test_a_worker_still_loading_is_waited_for_when_the_other_replica_is_dead(
    bundled_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas: a ``cachegate worker`` still loading its model (just restarted) and one
    whose worker is dead (not restarted yet). Asked first, the loading worker answered 503
    at once (``x-cachegate-if-ready``, another replica was left), the dead one could not be
    reached, and the client got a 502 though the loading worker would have answered it: it
    waits for the load, as the last replica left (as before ``if_ready``)."""
    import socket
    import threading

    import gateway.local
    from gateway.runtime import Runtime

    release = threading.Event()
    load = gateway.local._load_and_warm

    def gated(config: Any) -> Any:
        assert release.wait(60)
        return load(config)

    monkeypatch.setattr(gateway.local, "_load_and_warm", gated)
    settings = yaml.safe_load(local_config(bundled_model_dir, tmp_path / "worker" / "data"))
    del settings["auth"]
    config = load_config_text(yaml.safe_dump(settings))
    worker = Gateway(config, runtime=Runtime.build(config, worker=True), wait=False)
    with socket.socket() as s:  # a port nothing listens on: the dead worker's
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    front = {"data_dir": str(tmp_path / "front"), "cache": {"enabled": False},
             "models": {MODEL: {"backend": "openai", "replicas": [f"{worker.url}/v1", dead],
                                "max_retries": 0, "routing": {"policy": "round_robin"}}}}  # fmt: skip
    gw = Gateway(load_config_text(yaml.safe_dump(front)))
    try:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0, timeout=30)
        threading.Timer(1.0, release.set).start()  # the load ends while the request waits
        for i in range(2):  # (round robin: each replica is asked first once)
            answer = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"Hi {i}"}], max_tokens=2
            )
            assert answer.choices[0].message.content is not None
    finally:
        release.set()
        gw.stop()
        worker.stop()
