"""Many clients at once on a local model, through the HTTP API with the official openai SDK:
each request's prompt and answer are its own. A tiny random Llama with the bundled tokenizer
(the plumbing is the point, not the text)."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from gateway.config import load_config_text
from tests.conftest import Gateway, wait_for
from tests.fake_upstream import ThreadedServer

MODEL = "tiny"
ONE = "tiny-one-at-a-time"  # the same model with max_batch: 1


@pytest.fixture(scope="module")
def tiny_dir(bundled_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (a 4096-token window) with the bundled tokenizer, saved."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tmp = tmp_path_factory.mktemp("concurrency")
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp / "tiny")
    tokenizer.save_pretrained(tmp / "tiny")
    return tmp / "tiny"


@pytest.fixture(scope="module")
def gw(tiny_dir: Path) -> Iterator[Gateway]:
    settings = {"backend": "local", "source": str(tiny_dir), "threads": 1,
                "prefix_cache_bytes": 8 * 2**20}  # fmt: skip
    text = yaml.safe_dump({
        "data_dir": str(tiny_dir.parent / "data"),
        "cache": {"enabled": False, "semantic": {"enabled": False}},
        "models": {MODEL: settings, ONE: {**settings, "max_batch": 1}},
    })  # fmt: skip
    gateway = Gateway(load_config_text(text))
    yield gateway
    gateway.stop()


def test_max_context_past_the_models_window_is_capped_and_logged(
    tiny_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # (it was capped without a word: the operator learnt it from the first long request's 400)
    settings = {"backend": "local", "source": str(tiny_dir), "threads": 1, "max_context": 100_000,
                "prefix_cache_bytes": 2**20, "kv_pool_bytes": 8 * 2**20}  # fmt: skip
    text = yaml.safe_dump({"data_dir": str(tmp_path), "models": {"wide": settings},
                           "cache": {"enabled": False, "semantic": {"enabled": False}}})  # fmt: skip
    with (
        caplog.at_level(logging.WARNING, logger="localmodel"),
        Gateway(load_config_text(text)) as gw,
    ):
        assert gw.http.get("/v1/models").json()["data"][0]["context_window"] == 4096
    assert "max_context 100000 is past the model's own window: capped at 4096" in caplog.text


@pytest.fixture
def sdk(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0, timeout=60)


def test_prompts_encoded_at_once_are_each_encoded_as_alone(sdk: openai.OpenAI) -> None:
    """A message that types a control token's text (``<|im_end|>``) is encoded with the
    tokenizer's special tokens split, and that setting is the tokenizer's own: requests
    encoded at the same moment on other threads must not see it (their template's control
    tokens would become plain text) nor reset it under this one (its typed ``<|im_end|>``
    would become a real end of turn)."""
    words = "the lighthouse keeper counted ships " * 200
    contents = {"plain": words, "literal": words + "<|im_end|> typed by the user"}

    def prompt_tokens(kind: str) -> int:
        answer = sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": contents[kind]}],
            max_tokens=1,
            temperature=0,
        )
        assert answer.usage is not None
        return answer.usage.prompt_tokens

    alone = {kind: prompt_tokens(kind) for kind in contents}
    assert alone["literal"] > alone["plain"]
    kinds = list(contents) * 40
    with ThreadPoolExecutor(16) as pool:
        seen = Counter(zip(kinds, pool.map(prompt_tokens, kinds), strict=True))
    assert seen == Counter({(kind, n): 40 for kind, n in alone.items()})


def backend_stats(gw: Gateway, model: str) -> dict[str, Any]:
    return dict(gw.http.get("/admin/stats").json()["backends"][model])


def ledger_row(gw: Gateway) -> dict[str, Any]:
    """The default tenant's account of the one-at-a-time model."""
    ledger = gw.http.get("/admin/stats").json()["ledger"]
    return dict(ledger.get("default", {}).get(ONE, {}))


def observed(gw: Gateway) -> int:
    """Answers the history counts in a tier (once their request ended, the ledger's books
    included)."""
    points = gw.http.get("/admin/history").json()["points"]
    return sum(sum(point["tiers"].values()) for point in points)


def test_requests_whose_clients_left_the_queue_stop_counting_as_pending(
    gw: Gateway, sdk: openai.OpenAI
) -> None:
    """With every batch slot taken, requests wait; a client that gives up waiting is gone
    from ``pending`` at once, not only when a slot frees (``cachegate_backend_pending``)."""
    running = sdk.completions.create(
        model=ONE, prompt="Once upon a time", max_tokens=4000, temperature=0, stream=True
    )
    next(iter(running))  # it decodes: the one slot is taken
    impatient = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0,
                              timeout=0.25)  # fmt: skip
    for i in range(3):
        with pytest.raises(openai.APITimeoutError):
            impatient.completions.create(model=ONE, prompt=f"waiting {i}", max_tokens=4)
    wait_for(lambda: backend_stats(gw, ONE)["pending"] == 1, timeout=3)
    running.close()
    wait_for(lambda: backend_stats(gw, ONE)["pending"] == 0)
    answer = sdk.completions.create(model=ONE, prompt="next", max_tokens=3, temperature=0)
    assert answer.choices[0].finish_reason == "length"

    def no_page_held_by_a_request() -> bool:  # (the answer may arrive just before its release)
        pool = backend_stats(gw, ONE)["kv_pool"]
        return bool(pool["used"] == pool["cached"])

    wait_for(no_page_held_by_a_request, timeout=3)


@contextlib.contextmanager
def behind_a_front(
    tiny_dir: Path, tmp_path: Path, *others: str, read: float | None = None
) -> Iterator[tuple[Gateway, Gateway]]:
    """A ``cachegate worker`` of the tiny model (one batch slot), and a front gateway whose
    model is that worker: its one upstream, or its first replica before ``others`` (round
    robin, no retries); ``read``: the front's ``timeout.read``."""
    from gateway.runtime import Runtime

    settings = {"backend": "local", "source": str(tiny_dir), "threads": 1, "max_batch": 1,
                "prefix_cache_bytes": 8 * 2**20}  # fmt: skip
    text = yaml.safe_dump({"data_dir": str(tmp_path / "worker"), "models": {ONE: settings},
                           "cache": {"enabled": False, "semantic": {"enabled": False}}})  # fmt: skip
    worker_config = load_config_text(text)
    worker = Gateway(worker_config, runtime=Runtime.build(worker_config, worker=True))
    upstream: dict[str, Any] = {"backend": "openai", "max_retries": 0}
    if read is not None:
        upstream["timeout"] = {"read": read}
    if others:
        upstream["replicas"] = [f"{worker.url}/v1", *others]
        upstream["routing"] = {"policy": "round_robin"}
    else:
        upstream["base_url"] = f"{worker.url}/v1"
    try:
        front = Gateway(load_config_text(yaml.safe_dump({
            "data_dir": str(tmp_path / "front"), "models": {ONE: upstream},
            "cache": {"enabled": False, "semantic": {"enabled": False}},
        })))  # fmt: skip
        try:
            yield worker, front
        finally:
            front.stop()
    finally:
        worker.stop()


def answers_ready(url: str) -> bool:
    """Whether the process at ``url`` (a worker started as a subprocess) answers ``/readyz`` 200."""
    try:
        return httpx.get(f"{url}/readyz").status_code == 200
    except httpx.TransportError:
        return False


@contextlib.contextmanager
def queued_in_the_worker(
    worker: Gateway, front: Gateway, *, stream: bool = True
) -> Iterator[Future[str]]:
    """The worker's one slot taken by a stream of its own, and a completion (streamed, its
    ``: queued`` comment sent, unless ``stream`` is false) sent through ``front`` that waits in
    the worker's queue: the text the front's client gets, once it ends."""
    direct = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="unused", max_retries=0)
    running = direct.completions.create(
        model=ONE, prompt="Once upon a time", max_tokens=4000, temperature=0, stream=True
    )
    next(iter(running))  # it decodes: the worker's one slot is taken
    sdk = openai.OpenAI(base_url=f"{front.url}/v1", api_key="unused", max_retries=0)

    def ask() -> str:
        asked = sdk.completions.create(
            model=ONE, prompt="waiting for a slot", max_tokens=4, stream=stream
        )
        if isinstance(asked, openai.types.Completion):
            return asked.choices[0].text
        return "".join(c.choices[0].text for c in asked if c.choices)

    try:
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(ask)
            wait_for(lambda: backend_stats(worker, ONE)["pending"] == 2)
            time.sleep(0.3)  # queued in the worker (its `: queued` comment sent)
            yield answer
    finally:
        running.close()


def test_a_stream_cancelled_while_queued_is_no_model_call(gw: Gateway, sdk: openai.OpenAI) -> None:
    """A streaming client that leaves while its request waits for a batch slot: the model
    never ran it, so the ledger books no model call for it (it booked its whole prompt, then
    0 tokens but still one request, one model call and one ``ended_early``)."""

    running = sdk.completions.create(
        model=ONE, prompt="Once upon a time", max_tokens=4000, temperature=0, stream=True
    )
    next(iter(running))  # it decodes: the one slot is taken
    before, seen = ledger_row(gw), observed(gw)
    body = {"model": ONE, "prompt": "waiting for a slot " * 20, "max_tokens": 4, "stream": True}
    with gw.http.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        time.sleep(0.3)  # queued behind `running`; then the client hangs up
    wait_for(lambda: observed(gw) == seen + 1)
    # `running` still runs; the other leaves the queue at the scheduler's next step
    wait_for(lambda: backend_stats(gw, ONE)["pending"] == 1)
    assert ledger_row(gw) == before  # (/metrics' cachegate_ledger_* series are these counts)
    running.close()
    wait_for(lambda: backend_stats(gw, ONE)["pending"] == 0)
    wait_for(lambda: ledger_row(gw).get("model_calls") == before.get("model_calls", 0) + 1)


def test_a_non_streamed_request_whose_client_left_mid_decode_is_booked(
    gw: Gateway, sdk: openai.OpenAI
) -> None:
    """The SDK gives up (``timeout``) on a long non-streamed generation: the model had run its
    prompt and decoded some tokens, and the ledger books that call as a streamed one whose
    client left: one model call with its prompt, ``ended_early`` (it booked nothing)."""

    prompt = "a prompt the model runs before it gives up " * 5
    counted = sdk.completions.create(model=ONE, prompt=prompt, max_tokens=1, temperature=0)
    assert counted.usage is not None
    before, seen = ledger_row(gw), observed(gw)
    impatient = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0,
                              timeout=1.0)  # fmt: skip
    with pytest.raises(openai.APITimeoutError):
        impatient.completions.create(model=ONE, prompt=prompt, max_tokens=4000, temperature=0)
    wait_for(lambda: ledger_row(gw).get("requests", 0) == before["requests"] + 1)
    assert observed(gw) == seen  # no answer: in no tier of the history (an error only)
    after = ledger_row(gw)
    assert after["model_calls"] - before["model_calls"] == 1
    assert after["ended_early"] - before.get("ended_early", 0) == 1
    assert after["input_tokens"] - before["input_tokens"] == counted.usage.prompt_tokens
    assert after["output_tokens"] - before["output_tokens"] >= 1
    wait_for(lambda: backend_stats(gw, ONE)["pending"] == 0)


def test_a_non_streamed_request_whose_client_left_mid_decode_counts_as_the_miss_it_was(
    tiny_dir: Path, tmp_path: Path
) -> None:
    """The model ran a non-streamed request (a cache miss) whose client then gave up:
    ``/metrics`` counts it as the access log writes it (``cache=miss status=499``), under
    ``cache="miss"`` (it was counted under ``cache="bypass"``, as a request the cache let by)."""
    from tests.gateway.test_metrics import sample

    settings = {"backend": "local", "source": str(tiny_dir), "threads": 1, "max_batch": 1,
                "prefix_cache_bytes": 8 * 2**20}  # fmt: skip
    text = yaml.safe_dump({"data_dir": str(tmp_path), "models": {ONE: settings},
                           "cache": {"semantic": {"enabled": False}}})  # fmt: skip
    with Gateway(load_config_text(text)) as gw:
        sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
        sdk.completions.create(model=ONE, prompt="warm up", max_tokens=1)  # (a cold first step)
        impatient = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0,
                                  timeout=1.0)  # fmt: skip
        with pytest.raises(openai.APITimeoutError):
            impatient.completions.create(model=ONE, prompt="a long story", max_tokens=4000)

        def left() -> float:
            metrics = gw.http.get("/metrics").text
            return sample(metrics, "cachegate_requests_total", model=ONE, status="499")

        wait_for(lambda: left() == 1)
        assert ledger_row(gw)["ended_early"] == 1  # (the model ran it)
        metrics = gw.http.get("/metrics").text
        assert sample(metrics, "cachegate_requests_total", cache="miss", status="499") == 1


def test_behind_a_front_gateway_a_stream_cancelled_while_queued_is_no_model_call(
    tiny_dir: Path, tmp_path: Path
) -> None:
    """gateway -> ``cachegate worker`` (one batch slot): a streaming client that leaves while
    its request waits for the slot. The worker never ran it, and the front gateway books no
    model call for it either, as a gateway whose model runs in-process does (it booked one,
    with 0 tokens, ``ended_early``)."""
    with behind_a_front(tiny_dir, tmp_path) as (_worker, front):
        sdk = openai.OpenAI(base_url=f"{front.url}/v1", api_key="unused", max_retries=0)
        running = sdk.completions.create(
            model=ONE, prompt="Once upon a time", max_tokens=4000, temperature=0, stream=True
        )
        next(iter(running))  # it decodes: the worker's one slot is taken
        seen = observed(front)
        body = {"model": ONE, "prompt": "waiting for a slot " * 20, "max_tokens": 4,
                "stream": True}  # fmt: skip
        with front.http.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            time.sleep(0.3)  # queued behind `running` in the worker; then the client hangs up
        wait_for(lambda: observed(front) == seen + 1)
        assert ledger_row(front) == {}  # no request booked yet: `running` still runs
        running.close()
        wait_for(lambda: ledger_row(front).get("requests") == 1)
        assert (ledger_row(front)["model_calls"], ledger_row(front)["ended_early"]) == (1, 1)


def test_a_prompt_is_reused_while_its_first_request_still_decodes(sdk: openai.OpenAI) -> None:
    """A request whose system prompt another request has prefilled maps that KV, even while
    the first one still decodes: before, the prompt went to the prefix tree only when its
    request finished, so users sharing a long system prompt who came meanwhile each
    prefilled it again (``cached_tokens`` 0, a whole prefill of TTFT)."""
    system: Any = {"role": "system", "content": "You answer for the harbour office. " * 40}

    def ask(question: str, **kwargs: Any) -> Any:
        return sdk.chat.completions.create(
            model=MODEL, messages=[system, {"role": "user", "content": question}],
            temperature=0, **kwargs,
        )  # fmt: skip

    running = ask("Tell me about the tides.", max_tokens=3000, stream=True)
    next(iter(running))  # its prompt is prefilled; it decodes
    answer = ask("When does the office open?", max_tokens=1)
    running.close()
    assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
    assert answer.usage.prompt_tokens_details.cached_tokens >= 200  # (the system prompt's)


def test_behind_a_front_gateway_a_queued_stream_fails_over_when_its_worker_shuts_down(
    tiny_dir: Path, tmp_path: Path, upstream_server: ThreadedServer
) -> None:
    """gateway -> two replicas, a ``cachegate worker`` (one batch slot, taken) first: a stream
    that waits in the worker's queue, where the worker's shutdown deadline ends it before its
    first token. Nothing but ``: queued`` comments reached the front, so another replica
    answers (the client got the worker's "shutting down" error event mid-stream: the front
    handed the stream on at its first comment, too late to fail over)."""
    other = f"{upstream_server.url}/v1"
    with (
        behind_a_front(tiny_dir, tmp_path, other) as (worker, front),
        queued_in_the_worker(worker, front) as answer,
    ):
        waiting = next(iter(worker.runtime.connections.in_flight))
        waiting.get_loop().call_soon_threadsafe(worker.runtime.abort_in_flight)
        assert "answer #" in answer.result(timeout=30)


def test_behind_a_front_gateway_a_stream_ended_while_queued_is_no_model_call(
    tiny_dir: Path, tmp_path: Path
) -> None:
    """gateway -> ``cachegate worker`` (one batch slot, taken): a stream that waits in the
    worker's queue until the worker's shutdown deadline ends it with an error event. The
    model never ran it: the front books no model call for it (it booked one, with 0 tokens:
    the error event's data made it forget the worker's ``: queued``)."""
    with behind_a_front(tiny_dir, tmp_path) as (worker, front):
        direct = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="unused", max_retries=0)
        running = direct.completions.create(
            model=ONE, prompt="Once upon a time", max_tokens=4000, temperature=0, stream=True
        )
        next(iter(running))  # it decodes: the worker's one slot is taken
        sdk = openai.OpenAI(base_url=f"{front.url}/v1", api_key="unused", max_retries=0)
        seen = observed(front)
        with ThreadPoolExecutor(1) as pool:
            queued = sdk.completions.create(
                model=ONE, prompt="waiting for a slot", max_tokens=4, stream=True
            )
            reading = pool.submit(lambda: list(queued))
            wait_for(lambda: backend_stats(worker, ONE)["pending"] == 2)
            time.sleep(0.3)  # queued in the worker (its `: queued` comment sent)
            waiting = next(iter(worker.runtime.connections.in_flight))
            waiting.get_loop().call_soon_threadsafe(worker.runtime.abort_in_flight)
            with pytest.raises(openai.APIError, match="shutting down"):
                reading.result(timeout=30)
        running.close()
        wait_for(lambda: observed(front) == seen + 1)  # (its books included)
        assert ledger_row(front).get("model_calls", 0) == 0, ledger_row(front)


def test_behind_a_front_gateway_a_queued_stream_fails_over_when_its_worker_is_killed(
    tiny_dir: Path, tmp_path: Path, upstream_server: ThreadedServer
) -> None:
    """gateway -> two replicas, a ``cachegate worker`` process (one batch slot, taken) first:
    a stream that waits in the worker's queue when the worker is killed. Its last word was
    ``: queued`` (its model never ran the request), so another replica answers (the client
    got a 502 "broke off": a break may come after the upstream did the work)."""
    import signal
    import socket
    import subprocess
    import sys

    settings = {"backend": "local", "source": str(tiny_dir), "threads": 1, "max_batch": 1,
                "prefix_cache_bytes": 8 * 2**20}  # fmt: skip
    config = tmp_path / "worker.yaml"
    config.write_text(yaml.safe_dump({"data_dir": str(tmp_path / "worker"), "models": {ONE: settings},
                           "cache": {"enabled": False, "semantic": {"enabled": False}}}))  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = subprocess.Popen([sys.executable, "-m", "gateway", "worker", "--config", str(config),
                               "--host", "127.0.0.1", "--port", str(port)])  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    replicas = [f"{url}/v1", f"{upstream_server.url}/v1"]
    upstream = {"backend": "openai", "replicas": replicas, "max_retries": 0,
                "routing": {"policy": "round_robin"}}  # fmt: skip
    front = Gateway(load_config_text(yaml.safe_dump({
        "data_dir": str(tmp_path / "front"), "models": {ONE: upstream},
        "cache": {"enabled": False, "semantic": {"enabled": False}},
    })))  # fmt: skip
    try:
        wait_for(lambda: answers_ready(url), timeout=60)
        direct = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        running = direct.completions.create(
            model=ONE, prompt="Once upon a time", max_tokens=4000, temperature=0, stream=True
        )
        next(iter(running))  # it decodes: the worker's one slot is taken
        sdk = openai.OpenAI(base_url=f"{front.url}/v1", api_key="unused", max_retries=0)
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(
                lambda: sdk.completions.create(
                    model=ONE, prompt="waiting for a slot", max_tokens=4, stream=True
                )
            )
            wait_for(
                lambda: httpx.get(f"{url}/admin/stats").json()["backends"][ONE]["pending"] == 2
            )
            time.sleep(0.3)  # queued in the worker (its `: queued` comment sent)
            worker.send_signal(signal.SIGKILL)
            text = "".join(c.choices[0].text for c in answer.result(timeout=30) if c.choices)
        assert "answer #" in text
    finally:
        front.stop()
        worker.kill()
        worker.wait(timeout=30)


def test_behind_a_front_gateway_a_queued_stream_fails_over_when_its_workers_engine_fails(
    tiny_dir: Path, tmp_path: Path, upstream_server: ThreadedServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """gateway -> two replicas, a ``cachegate worker`` (one batch slot, taken) first: a stream
    that waits in the worker's queue when a step of the worker's engine fails (which fails
    every request it holds). The model never ran the queued one, so another replica answers
    (the client got the worker's error event)."""
    from localmodel.scheduler import Scheduler

    failing = {"now": False}
    step = Scheduler.step

    def failing_step(self: Any) -> Any:
        if failing["now"]:
            failing["now"] = False
            raise RuntimeError("a kernel failed")
        return step(self)

    monkeypatch.setattr(Scheduler, "step", failing_step)
    other = f"{upstream_server.url}/v1"
    with (
        behind_a_front(tiny_dir, tmp_path, other) as (worker, front),
        queued_in_the_worker(worker, front) as answer,
    ):
        failing["now"] = True
        assert "answer #" in answer.result(timeout=30)


@contextlib.contextmanager
def a_hanging_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Every local engine's steps hang, once the event this yields is set, until the end of
    the block (its process alive, a step that does not end: then the engine goes on)."""
    from localmodel.scheduler import Scheduler

    hanging, released = threading.Event(), threading.Event()
    step = Scheduler.step

    def hung_step(self: Any) -> Any:
        if hanging.is_set():
            released.wait()
        return step(self)

    monkeypatch.setattr(Scheduler, "step", hung_step)
    try:
        yield hanging
    finally:
        released.set()  # (the worker's engine goes on: it can shut down)


def test_behind_a_front_gateway_a_stream_queued_on_a_hung_engine_times_out(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gateway (``timeout.read: 2``) -> ``cachegate worker`` (one batch slot, taken) whose
    engine then hangs (its process alive, a step that never ends): the stream that waits in
    its queue ends with the front's read timeout. The worker sent ``: queued`` for ever (the
    front's read timeout never fired): its client waited with no end."""
    with (
        behind_a_front(tiny_dir, tmp_path, read=2) as (worker, front),
        a_hanging_engine(monkeypatch) as hanging,
        queued_in_the_worker(worker, front) as answer,
    ):
        hanging.set()
        with pytest.raises(openai.APIError, match="timed out"):
            answer.result(timeout=60)


def wait_stalled(worker: Any) -> None:
    """Until the worker's ``/readyz`` says its engine is stalled (one step past its bound: 5 s
    at least, whatever the front's ``timeout.read``), 30 s at most."""
    deadline = time.monotonic() + 30
    while worker.http.get("/readyz").status_code != 503:
        assert time.monotonic() < deadline, "the worker never said its engine is stalled"
        time.sleep(0.2)


def test_behind_a_front_gateway_a_worker_whose_engine_hangs_is_skipped(
    tiny_dir: Path, tmp_path: Path, upstream_server: ThreadedServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """gateway (``timeout.read: 2``) -> two replicas, a ``cachegate worker`` (one batch slot,
    taken) first, whose engine then hangs: once a stream queued there timed out, the worker
    is skipped and new requests go to the other replica; its ``/readyz`` says why. It still
    answered ``GET /models`` (slow, not hung: never skipped) and ``/readyz`` 200, so each new
    request sent there waited ``timeout.read`` for a 504, never going to the other replica.
    It is skipped from that timeout on, before its own 5 s stall bound has passed: its
    keep-alives stopped, which they do only while one step runs past the interval asked for,
    and the error says it is stalled (it was a plain timeout, and the worker taken for slow
    until a new request found it stalled)."""
    other = f"{upstream_server.url}/v1"
    with (
        behind_a_front(tiny_dir, tmp_path, other, read=2) as (worker, front),
        a_hanging_engine(monkeypatch) as hanging,
        queued_in_the_worker(worker, front) as answer,
    ):
        hanging.set()
        with pytest.raises(openai.APIError, match="timed out") as timed_out:
            answer.result(timeout=60)
        assert "stalled" in timed_out.value.message
        routing = front.http.get("/admin/stats").json()["backends"][ONE]["routing"]
        assert routing["replicas"][0]["down"], routing
        wait_stalled(worker)
        sdk = openai.OpenAI(base_url=f"{front.url}/v1", api_key="unused", max_retries=0)
        for i in range(2):  # (round robin: each replica would be first once)
            made = sdk.completions.create(model=ONE, prompt=f"a new request {i}", max_tokens=4)
            assert "answer #" in made.choices[0].text
        routing = front.http.get("/admin/stats").json()["backends"][ONE]["routing"]
        assert routing["replicas"][0]["down"]
        ready = worker.http.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert ready.json()["status"] == "stalled" and ONE in ready.json()["stalled"]
        described = worker.http.get(f"/v1/models/{ONE}")
        assert described.status_code == 503
        assert described.json()["error"]["code"] == "engine_stalled"


@pytest.mark.parametrize(
    "stuck", [(0.0, 100.0), (100.0, 0.0)], ids=["the step crosses the bound", "the step ends"]
)
def test_readyz_reads_an_engine_once_per_answer(
    gw: Gateway, monkeypatch: pytest.MonkeyPatch, stuck: tuple[float, float]
) -> None:
    """Each ``/readyz`` answer reads how long the engine's step has run once, so its status
    and its body agree whenever a step crosses the stall bound (5 s at least) or ends. It
    was read twice (ready, then why stalled): a 200 "ready" with a ``stalled`` key, or a 503
    "loading" for a loaded engine that was not stalled. (The values stand in for the clock.)"""
    values = iter(stuck)
    monkeypatch.setattr(gw.runtime.backends[ONE]._engine, "stuck_for", lambda: next(values, 0.0))
    for seconds in stuck:
        ready = gw.http.get("/readyz")
        body = ready.json()
        if seconds < 5:
            assert ready.status_code == 200 and body["status"] == "ready", ready.text
            assert body["models"][ONE] is True and "stalled" not in body, ready.text
        else:
            assert ready.status_code == 503 and body["status"] == "stalled", ready.text
            assert body["models"][ONE] is False, ready.text
            assert f"{seconds:.1f} s" in body["stalled"][ONE], ready.text
    assert next(values, None) is None  # (each answer read it once: none read it twice)


def test_behind_a_front_gateway_with_a_short_read_timeout_a_queued_worker_is_not_stalled(
    tiny_dir: Path, tmp_path: Path, upstream_server: ThreadedServer
) -> None:
    """gateway (``timeout.read: 0.4``) -> two replicas, a ``cachegate worker`` (one batch
    slot, taken) first, whose engine is healthy: a stream that waits in its queue times out,
    as the worker's keep-alives come 0.5 s apart at the least, whatever the front asks. That
    silence shows no stall: the worker is judged by its ``GET /models`` (slow, not hung), as
    after any timeout. It was said stalled, and skipped for ``routing.down_for``."""
    other = f"{upstream_server.url}/v1"
    with behind_a_front(tiny_dir, tmp_path, other, read=0.4) as (worker, front):
        direct = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="unused", max_retries=0)
        running = direct.completions.create(
            model=ONE, prompt="Once upon a time", max_tokens=4000, temperature=0, stream=True
        )
        next(iter(running))  # it decodes: the worker's one slot is taken
        sdk = openai.OpenAI(base_url=f"{front.url}/v1", api_key="unused", max_retries=0)
        try:
            with pytest.raises(openai.APIStatusError) as timed_out:
                sdk.completions.create(model=ONE, prompt="waiting for a slot", max_tokens=4,
                                       stream=True)  # fmt: skip
        finally:
            running.close()
        assert timed_out.value.status_code == 504, timed_out.value
        assert "timed out" in timed_out.value.message
        assert "stalled" not in timed_out.value.message
        routing = front.http.get("/admin/stats").json()["backends"][ONE]["routing"]
        assert not routing["replicas"][0]["down"], routing


def test_a_clients_keepalive_header_cannot_make_a_slow_step_look_hung(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any client of a gateway's own local model can send ``x-cachegate-keepalive`` (meant for
    a gateway in front); at 0.5 s it made a step of 1 s (a long prefill on a loaded CPU) count
    as hung: /readyz 503 and every new request refused until the step ended. The bound is 5 s
    at least, whatever the header says."""
    with (
        behind_a_front(tiny_dir, tmp_path) as (worker, _),
        ThreadPoolExecutor(1) as pool,  # (left after the step is let go: its request ends)
        a_hanging_engine(monkeypatch) as hanging,
    ):
        hanging.set()  # (the step this request starts does not end until the block's end)
        direct = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="unused", max_retries=0)
        pool.submit(direct.completions.create, model=ONE, prompt="a slow step", max_tokens=2,
                    extra_headers={"x-cachegate-keepalive": "0.5"})  # fmt: skip
        wait_for(lambda: backend_stats(worker, ONE)["pending"] == 1)
        time.sleep(1.5)  # (one step that long: past twice the 0.5 s the client asked for)
        ready = worker.http.get("/readyz")
        assert ready.status_code == 200, ready.text


def test_behind_a_front_gateway_a_worker_whose_engine_hangs_is_marked_down_by_its_timeout(
    tiny_dir: Path, tmp_path: Path, upstream_server: ThreadedServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """gateway (``timeout.read: 8``: a stall bound of 5.3 s, past which its request times
    out) -> two replicas, the first a ``cachegate worker`` whose engine hangs: the request
    queued there times out, and the liveness check asked then (``GET /models/{model}``, which
    the stalled worker answers 503) marks that worker down before any new request is sent.
    The other hung-engine tests (``read: 2``, under the 5 s bound) only saw it marked down by
    the ``engine_stalled`` of a new request: the liveness check's 503 was never exercised.
    (Not streamed: a stream whose keep-alives stopped is stalled without asking.)"""
    other = f"{upstream_server.url}/v1"
    with (
        behind_a_front(tiny_dir, tmp_path, other, read=8) as (worker, front),
        a_hanging_engine(monkeypatch) as hanging,
        queued_in_the_worker(worker, front, stream=False) as answer,
    ):
        hanging.set()
        with pytest.raises(openai.APIError, match="timed out"):
            answer.result(timeout=60)
        assert worker.http.get("/readyz").json()["status"] == "stalled"
        routing = front.http.get("/admin/stats").json()["backends"][ONE]["routing"]
        assert routing["replicas"][0]["down"], routing


def test_behind_a_front_gateway_a_worker_whose_engine_hangs_refuses_new_requests(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gateway (``timeout.read: 2``) -> its one ``cachegate worker`` (one batch slot, taken),
    whose engine then hangs: a new request is refused at once (the worker's 503
    ``engine_stalled``) instead of waiting ``timeout.read`` in its queue for a 504; once the
    step ends, the worker is ready and answers again."""
    with behind_a_front(tiny_dir, tmp_path, read=2) as (worker, front):
        sdk = openai.OpenAI(base_url=f"{front.url}/v1", api_key="unused", max_retries=0)
        with (
            a_hanging_engine(monkeypatch) as hanging,
            queued_in_the_worker(worker, front) as answer,
        ):
            hanging.set()
            with pytest.raises(openai.APIError, match="timed out"):
                answer.result(timeout=60)
            wait_stalled(worker)
            with pytest.raises(openai.APIStatusError, match="stalled") as refused:
                sdk.completions.create(model=ONE, prompt="a new request", max_tokens=4)
            assert refused.value.status_code == 502  # (an upstream's 503, as always)
            ready = worker.http.get("/readyz")
            assert ready.status_code == 503 and ONE in ready.json()["stalled"], ready.text
        worker.wait_ready(timeout=30)  # the step ended
        made = sdk.completions.create(model=ONE, prompt="a new request", max_tokens=4)
        assert made.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_worker_whose_engine_hangs_exits_on_a_signal(
    tiny_dir: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    """A ``cachegate worker`` process whose engine hangs (a step that never ends) mid-stream,
    then stopped (SIGTERM, Ctrl-C): it exits, leaving that step behind. Its shutdown waited
    for the engine's thread: the process never exited (only SIGKILL, or a third signal,
    ended it)."""
    import socket
    import subprocess
    import sys

    hang, config, log = tmp_path / "hang", tmp_path / "worker.yaml", tmp_path / "worker.log"
    settings = {"backend": "local", "source": str(tiny_dir), "threads": 1, "max_batch": 1,
                "prefix_cache_bytes": 8 * 2**20}  # fmt: skip
    config.write_text(yaml.safe_dump({"data_dir": str(tmp_path / "worker"), "models": {ONE: settings},
                                      "server": {"shutdown_timeout": 1},
                                      "cache": {"enabled": False, "semantic": {"enabled": False}}}))  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launcher = "\n".join([  # the CLI, with every step hanging while `hang` exists
        "import os, sys, time",
        "from localmodel.scheduler import Scheduler",
        "step = Scheduler.step",
        "def hung_step(self):",
        f"    while os.path.exists({str(hang)!r}):",
        "        time.sleep(0.05)",
        "    return step(self)",
        "Scheduler.step = hung_step",
        "import gateway.cli as cli",
        f"sys.exit(cli.main(['worker', '--config', {str(config)!r}, '--host', '127.0.0.1', "
        f"'--port', '{port}']))",
    ])  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        worker = subprocess.Popen([sys.executable, "-c", launcher], stdout=out, stderr=out)
    try:
        wait_for(lambda: answers_ready(url), timeout=60)
        direct = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        running = direct.completions.create(  # (as a gateway in front with timeout.read 1.5)
            model=ONE, prompt="Once upon a time", max_tokens=4000, temperature=0, stream=True,
            extra_headers={"x-cachegate-keepalive": "0.5"},
        )  # fmt: skip
        next(iter(running))  # it decodes
        hang.touch()
        wait_for(lambda: httpx.get(f"{url}/readyz").json()["status"] == "stalled")
        worker.send_signal(sig)
        code = worker.wait(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)
        hang.unlink(missing_ok=True)
    said = log.read_text(errors="replace")
    assert code == (-sig if sig == signal.SIGTERM else 0), said  # (SIGTERM: uvicorn re-raises it)
    assert "shutting down without it" in said and "Traceback" not in said, said


def test_behind_a_front_gateway_a_stream_cancelled_mid_answer_is_booked_with_its_prompt(
    tiny_dir: Path, tmp_path: Path
) -> None:
    """gateway -> ``cachegate worker``: a streaming client that leaves before the end (no
    usage chunk came). The worker ran the prompt: the front books it with the prompt's tokens,
    as the worker does (it booked 0 input tokens: an upstream's usage comes only at the end)."""
    with behind_a_front(tiny_dir, tmp_path) as (worker, front):
        direct = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="unused", max_retries=0)
        prompt = "a prompt the worker runs before its client leaves " * 5
        counted = direct.completions.create(model=ONE, prompt=prompt, max_tokens=1)
        assert counted.usage is not None and counted.usage.prompt_tokens > 0
        sdk = openai.OpenAI(base_url=f"{front.url}/v1", api_key="unused", max_retries=0)
        stream = sdk.completions.create(model=ONE, prompt=prompt, max_tokens=4000, stream=True)
        next(iter(stream))  # its first token: then the client leaves
        stream.close()
        wait_for(lambda: ledger_row(front).get("requests") == 1)
        booked = ledger_row(front)
        assert (booked["model_calls"], booked["ended_early"]) == (1, 1)
        assert booked["input_tokens"] == counted.usage.prompt_tokens
