"""``kv_dtype``, ``weights`` and ``context_overflow`` from the YAML to the engine, and a
conversation past the context window through the HTTP API with the official openai SDK
(bundled model, CPU)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import yaml

from gateway.config import ConfigError, LocalModelConfig, load_config_text
from gateway.local import LocalBackend, available_cpus
from tests.conftest import Gateway

STORY = (
    "The lighthouse keeper wrote down every ship that passed, the weather of each morning, "
    "and the colour of the sea at dusk. "
) * 5
WINDOW = 96
SMOLLM2_PAGE_BYTES = 30 * 3 * 16 * 64 * 2 * 4  # layers · kv heads · page · head dim · K, V · fp32


def _model(model_dir: Path, **settings: object) -> dict[str, object]:
    return {"backend": "local", "source": str(model_dir), "threads": 1, "max_context": WINDOW,
            "default_max_tokens": 8, **settings}  # fmt: skip


@pytest.fixture(scope="module")
def gw(bundled_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    text = yaml.safe_dump({
        "data_dir": str(tmp_path_factory.mktemp("overflow")),
        "cache": {"semantic": {"enabled": False}, "exact": {"enabled": False}},
        "models": {
            "strict": _model(bundled_model_dir),
            "sliding": _model(bundled_model_dir, context_overflow="sinks", kv_dtype="int8"),
            "half": _model(bundled_model_dir, weights="float16"),
            "int8w": _model(bundled_model_dir, weights="int8"),
            "bf16w": _model(bundled_model_dir, weights="bfloat16"),
            "int8pages": _model(bundled_model_dir, kv_dtype="int8"),
            "smallpool": _model(bundled_model_dir, kv_pool_bytes=5 * SMOLLM2_PAGE_BYTES),
        },
    })  # fmt: skip
    gateway = Gateway(load_config_text(text))
    yield gateway
    gateway.stop()


def test_yaml_reaches_the_engine_config() -> None:
    config = load_config_text(
        "models: {m: {backend: local, kv_dtype: int8, context_overflow: sinks, sink_tokens: 8,"
        " weights: int8}}"
    )
    model = config.models["m"]
    assert isinstance(model, LocalModelConfig)
    engine_config = LocalBackend.from_config("m", model, config).engine_config
    assert (engine_config.kv_dtype, engine_config.weights) == ("int8", "int8")
    assert (engine_config.context_overflow, engine_config.sink_tokens) == ("sinks", 8)
    paged = load_config_text("models: {m: {backend: local, kv_pool_bytes: 8388608, page_size: 32}}")
    paged_model = paged.models["m"]
    assert isinstance(paged_model, LocalModelConfig)
    paged_config = LocalBackend.from_config("m", paged_model, paged).engine_config
    assert (paged_config.kv_pool_bytes, paged_config.page_size) == (8 * 2**20, 32)
    default = load_config_text("models: {m: {backend: local}}").models["m"]
    assert isinstance(default, LocalModelConfig)
    assert (default.kv_pool_bytes, default.page_size) == (None, 16)
    assert (default.kv_dtype, default.context_overflow, default.weights) == (
        "auto",
        "error",
        "auto",
    )


@pytest.mark.parametrize(
    ("setting", "where"),
    [
        ("kv_dtype: int4", "models.m.kv_dtype"),
        ("context_overflow: truncate", "models.m.context_overflow"),
        ("sink_tokens: 0", "models.m.sink_tokens"),
        ("kv_pool_bytes: 0", "models.m.kv_pool_bytes"),
        ("page_size: 0", "models.m.page_size"),
        ("weights: int4", "models.m.weights"),
        ("weights: float16, dtype: bfloat16", "models.m"),
        ("weights: float16, device: cuda", "models.m"),
        ("weights: int8, dtype: float16", "models.m"),
        ("weights: bfloat16, device: cuda", "models.m"),
        ("weights: native, device: cuda", "models.m"),
        ("weights: onednn, dtype: bfloat16", "models.m"),
    ],
)
def test_bad_values_are_config_errors(setting: str, where: str) -> None:
    with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
        load_config_text(f"models: {{m: {{backend: local, {setting}}}}}")


def test_config_check_refuses_sink_tokens_past_half_of_max_context(tmp_path: Path) -> None:
    # (`cachegate config check` passed it; the model then failed to load at start, its
    # error naming neither setting's value)
    path = tmp_path / "sinks.yaml"
    path.write_text(
        "models: {m: {backend: local, context_overflow: sinks, max_context: 96, sink_tokens: 48}}"
    )
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "config", "check", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout
    assert "models.m: sink_tokens (48) must be below half of max_context (96)" in result.stderr
    assert "Traceback" not in result.stderr
    load_config_text("models: {m: {backend: local, max_context: 96, sink_tokens: 48}}")  # (unused)
    load_config_text(
        "models: {m: {backend: local, context_overflow: sinks, max_context: 96, sink_tokens: 47}}"
    )


def test_a_kv_pool_below_one_page_fails_the_load_and_says_why(
    bundled_model_dir: Path, tmp_path: Path
) -> None:
    # kv_pool_bytes: 1000 was taken: the pool got one page anyway (720 KiB, past the budget),
    # the context window was capped at 16 tokens, /readyz said ready, and every chat was a
    # 400 context_length_exceeded, a log warning the only sign of the setting
    text = yaml.safe_dump({
        "data_dir": str(tmp_path / "data"),
        "cache": {"semantic": {"enabled": False}},
        "models": {"tiny": _model(bundled_model_dir, kv_pool_bytes=SMOLLM2_PAGE_BYTES - 1)},
    })  # fmt: skip
    gateway = Gateway(load_config_text(text), wait=False)
    try:
        said = (
            f"kv_pool_bytes ({SMOLLM2_PAGE_BYTES - 1:,}) is less than one page of this model's "
            f"KV ({SMOLLM2_PAGE_BYTES:,} bytes: page_size 16 tokens, kv_dtype auto)"
        )
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}]
            )
        assert refused.value.status_code == 503 and said in refused.value.message
        ready = gateway.http.get("/readyz")
        assert ready.status_code == 503 and said in ready.json()["failed"]["tiny"]
    finally:
        gateway.stop()


def test_local_models_that_disagree_on_threads_are_a_config_error() -> None:
    # (torch's CPU threads are one per process: both models ran on the threads of whichever
    # loaded last, in no fixed order)
    with pytest.raises(ConfigError, match=r"models: .*`threads`.*\(small: 1, big: null\)"):
        load_config_text("models: {small: {backend: local, threads: 1}, big: {backend: local}}")
    load_config_text("models: {a: {backend: local, threads: 2}, b: {backend: local, threads: 2}}")


def test_past_the_window_error_is_400_and_sinks_answer(gw: Gateway) -> None:
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": STORY + "What did the keeper write down?"}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="strict", messages=messages, temperature=0)  # type: ignore[arg-type]
    assert info.value.code == "context_length_exceeded" and info.value.param == "messages"
    with pytest.raises(openai.BadRequestError) as info:  # the error names the Responses field
        client.responses.create(model="strict", input=messages[0]["content"])
    assert info.value.code == "context_length_exceeded" and info.value.param == "input"
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="strict", input="Hi", max_output_tokens=WINDOW)
    assert info.value.param == "max_output_tokens"
    with pytest.raises(openai.BadRequestError) as info:  # n choices need all of it in the window
        client.chat.completions.create(model="sliding", messages=messages, n=2)  # type: ignore[arg-type]
    assert info.value.param == "n"
    answer = client.chat.completions.create(
        model="sliding",
        messages=messages,
        temperature=0,
        max_tokens=6,  # type: ignore[arg-type]
    )
    assert answer.usage is not None and answer.usage.prompt_tokens > WINDOW
    assert answer.choices[0].message.content
    # streamed, and past the window during decode (a plain-text continuation runs on)
    stream = client.completions.create(
        model="sliding",
        prompt=STORY[:200],
        temperature=0,
        max_tokens=72,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens + usage.completion_tokens > WINDOW + 10
    assert "".join(c.choices[0].text for c in chunks if c.choices)


@pytest.mark.parametrize("model", ["sliding", "int8pages"])  # int8 pages, with sinks or not
def test_int8_kv_serves_prefix_hits_over_http(gw: Gateway, model: str) -> None:
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
    system = {"role": "system", "content": "You answer in one short sentence. " * 4}
    for question, cached in (("What is a ship?", 0), ("What is a lighthouse?", 30)):
        answer = client.chat.completions.create(
            model=model,
            messages=[system, {"role": "user", "content": question}],  # type: ignore[list-item]
            temperature=0,
            max_tokens=4,
        )
        details = answer.usage.prompt_tokens_details if answer.usage else None
        assert details is not None and (details.cached_tokens or 0) >= cached


def test_admin_stats_report_what_the_kv_pool_pages_hold(gw: Gateway) -> None:
    backends = gw.http.get("/admin/stats").json()["backends"]
    assert backends["int8pages"]["kv_pool"]["dtype"] == "int8"
    assert backends["strict"]["kv_pool"]["dtype"] == "float32"
    assert backends["sliding"]["kv_pool"]["dtype"] == "int8"  # sinks page into the pool too
    int8, fp32 = backends["int8pages"]["kv_pool"], backends["strict"]["kv_pool"]
    assert fp32["page_bytes"] / int8["page_bytes"] >= 3.5


def test_float16_weights_answer_what_the_float32_model_answers(gw: Gateway) -> None:
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
    for question in ("What is the capital of Japan?", "Name a colour."):  # (no near tie)
        answers = [
            client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": question}],
                temperature=0,
                max_tokens=10,
            )
            .choices[0]
            .message.content
            for model in ("strict", "half")
        ]
        assert answers[0] and answers[0] == answers[1]
    backends = gw.http.get("/admin/stats").json()["backends"]
    # weights: auto: the native kernel, each call on the engine's threads (all CPUs but one)
    assert backends["strict"]["weights"] == "native"
    threads = max(1, available_cpus() - 1)
    assert backends["strict"]["threads"] == backends["strict"]["kernel_threads"] == threads
    assert backends["half"]["weights"] == "float16"
    assert backends["half"]["threads"] == threads and backends["half"]["kernel_threads"] is None
    # (native weights: every layer as localmodel.lean runs it, decode steps in one call each)
    assert backends["strict"]["layers"] == {"decoder": 30, "lean": 30, "one_call": 30}
    assert backends["half"]["layers"] == {"decoder": 30, "lean": 0, "one_call": 0}


@pytest.mark.parametrize(
    ("model", "reported"), [("int8w", "int8"), ("bf16w", "onednn-packed bfloat16")]
)
def test_int8_and_bfloat16_weights_answer_over_http(gw: Gateway, model: str, reported: str) -> None:
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
    answers = [
        client.chat.completions.create(
            model=name,
            messages=[{"role": "user", "content": "What is the capital of Japan?"}],
            temperature=0,
            max_tokens=10,
        )
        .choices[0]
        .message.content
        for name in ("strict", model)
    ]
    # (Japan, not France: France's first token is a near tie that rounded weights may flip)
    assert answers[0] and "Tokyo" in answers[0] and answers[0] == answers[1]
    assert gw.http.get("/admin/stats").json()["backends"][model]["weights"] == reported


def test_a_prompt_that_fills_the_pool_is_served_again_from_its_cached_prefix(gw: Gateway) -> None:
    """A pool that caps the window: a prompt ending part-way into the pool's last page, sent
    twice. The second maps every page from the tree and must write into the partly filled
    last one, with no page free to copy it to: the tree gives that page up (it was a 500)."""
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
    models = gw.http.get("/v1/models").json()["data"]
    (described,) = [m for m in models if m["id"] == "smallpool"]
    prompt = list(range(1000, 1000 + described["context_window"] - 5))  # token ids
    assert len(prompt) % 16 and described["context_window"] % 16 == 0
    answers = [
        client.completions.create(model="smallpool", prompt=prompt, temperature=0, max_tokens=3)
        for _ in range(2)
    ]
    assert answers[0].choices[0].text == answers[1].choices[0].text
    usage = answers[1].usage
    details = usage.prompt_tokens_details if usage else None
    assert details is not None and details.cached_tokens == len(prompt) - 1
    n2 = client.completions.create(
        model="smallpool", prompt=prompt[:-1], temperature=0, max_tokens=4, n=2
    )  # the second choice writes into the prompt's last page once the tree shares it
    assert [c.finish_reason for c in n2.choices] == ["length", "length"]


def test_a_long_prompt_after_two_that_share_its_prefix_gets_every_page(gw: Gateway) -> None:
    """A 20-token prompt, one that continues it (its prefix hit copies the partly filled
    second page), then one that continues that and needs all five pages of the pool: the
    first prompt's node keeps that second page while the second's node, on the running
    request's pages, hangs from it; running alone, the request evicts them (it was a 500)."""
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
    first = list(range(4000, 4020))
    second = first + list(range(5000, 5030))
    third = second + list(range(6000, 6020))  # 70 tokens + 8: 5 pages of 16
    for prompt, max_tokens in ((first, 1), (second, 1), (third, 8)):
        answer = client.completions.create(
            model="smallpool", prompt=prompt, temperature=0, max_tokens=max_tokens
        )
        assert answer.usage is not None and answer.usage.completion_tokens == max_tokens
    details = answer.usage.prompt_tokens_details
    assert details is not None and details.cached_tokens == len(second)
