"""End to end with the bundled model: the openai SDK → `cachegate serve` → local engine, and
a gateway in front of a `cachegate worker` (the model as its own service)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from tests.e2e.conftest import ServeProcess

SYSTEM = {
    "role": "system",
    "content": "You answer questions about the solar system in one sentence. " * 5,
}


def local(model_dir: Path) -> dict[str, Any]:
    return {"backend": "local", "source": str(model_dir), "threads": 1, "default_max_tokens": 12}


def test_sdk_against_the_local_model(serve: Any, bundled_model_dir: Path, tmp_path: Path) -> None:
    gateway: ServeProcess = serve(yaml.safe_dump({
        "data_dir": str(tmp_path / "data"), "models": {"smollm2": local(bundled_model_dir)},
    }))  # fmt: skip
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    first = client.chat.completions.create(
        model="smollm2",
        messages=[SYSTEM, {"role": "user", "content": "What is Mars?"}],
        temperature=0,
        max_tokens=10,
    )
    assert first.choices[0].message.content and first.usage is not None
    assert first.usage.prompt_tokens_details is not None
    streamed = client.chat.completions.create(
        model="smollm2",
        messages=[SYSTEM, {"role": "user", "content": "What is Venus?"}],
        temperature=0,
        max_tokens=10,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(streamed)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    final = chunks[-1].usage
    assert final is not None and final.prompt_tokens_details is not None
    assert final.prompt_tokens_details.cached_tokens >= 60  # the shared system prompt
    again = client.chat.completions.with_raw_response.create(
        model="smollm2",
        messages=[SYSTEM, {"role": "user", "content": "What is Venus?"}],
        temperature=0,
        max_tokens=10,
    )
    assert again.headers["x-cache"] == "exact" and again.parse().choices[0].message.content == text
    log = gateway.log.read_text()  # one line per event: no progress bar drawn by transformers
    assert "local model smollm2 loaded" in log and "Loading weights" not in log


def test_gateway_in_front_of_a_worker(serve: Any, bundled_model_dir: Path, tmp_path: Path) -> None:
    worker: ServeProcess = serve(
        yaml.safe_dump(
            {"data_dir": str(tmp_path / "w"), "models": {"smollm2": local(bundled_model_dir)}}
        ),
        name="worker.yaml",
        command="worker",
    )
    gateway: ServeProcess = serve(yaml.safe_dump({
        "data_dir": str(tmp_path / "g"),
        "cache": {"semantic": {"enabled": False}},
        "models": {"smollm2": {"backend": "openai", "base_url": f"{worker.url}/v1"}},
    }), name="gateway.yaml")  # fmt: skip
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    ask = [SYSTEM, {"role": "user", "content": "What is Jupiter?"}]
    client.chat.completions.create(model="smollm2", messages=[SYSTEM, {"role": "user", "content": "What is Saturn?"}],
                                   temperature=0, max_tokens=8)  # fmt: skip
    raw = client.chat.completions.with_raw_response.create(
        model="smollm2", messages=ask, temperature=0, max_tokens=8
    )
    assert raw.headers["x-cache"] == "miss"
    usage = raw.parse().usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens >= 60  # reported by the worker, passed through
    hit = client.chat.completions.with_raw_response.create(
        model="smollm2", messages=ask, temperature=0, max_tokens=8
    )
    assert hit.headers["x-cache"] == "exact"
    # the worker itself has no response cache
    direct = openai.OpenAI(base_url=f"{worker.url}/v1", api_key="unused", max_retries=0)
    raw_direct = direct.chat.completions.with_raw_response.create(
        model="smollm2", messages=ask, temperature=0, max_tokens=8
    )
    assert raw_direct.headers["x-cache"] == "bypass"
    assert raw_direct.parse().choices[0].message.content == hit.parse().choices[0].message.content


def converting(serve: Any, data: Path, command: str = "serve") -> ServeProcess:
    """``cachegate serve`` (or ``worker``) of the bundled model into ``data``, once its first
    start's conversion has begun."""
    process: ServeProcess = serve(yaml.safe_dump({
        "data_dir": str(data), "cache": {"semantic": {"enabled": False}},
        "models": {"smollm2": {"backend": "local", "source": "bundled", "threads": 1}},
    }), name=f"{command}.yaml", command=command, ready_timeout=None)  # fmt: skip
    process.wait_logged("converting bundled", timeout=60)
    time.sleep(0.5)  # (into the conversion)
    return process


@pytest.mark.parametrize(("command", "sig"), [("serve", "SIGINT"), ("worker", "SIGTERM")])
def test_a_signal_while_the_bundled_model_converts_stops_at_once(
    serve: Any, tmp_path: Path, command: str, sig: str
) -> None:
    """Ctrl-C (or a stop) during the first start's conversion (up to a minute) was held until
    the conversion and the load had ended; the model's directory is not half-written."""
    data = tmp_path / "data"
    process = converting(serve, data, command)
    process.proc.send_signal(getattr(signal, sig))
    code = process.proc.wait(timeout=30)  # (not held for the conversion: it says so below)
    log = process.log.read_text(errors="replace")
    assert code == (0 if sig == "SIGINT" else -15), log  # (as after a clean shutdown)
    assert "local model smollm2 is still loading: shutting down without it" in log
    assert "Traceback" not in log and "FATAL" not in log
    assert not (data / "models" / "smollm2-135m-instruct").exists()


def test_the_next_start_removes_what_a_stopped_conversion_left(serve: Any, tmp_path: Path) -> None:
    """A conversion stopped midway (the gateway stopped without waiting for it, or was killed)
    left its temp dir, up to 500 MB, for an hour, whatever the starts in between."""
    models = tmp_path / "data" / "models"
    first = converting(serve, tmp_path / "data")
    first.proc.terminate()
    assert first.proc.wait(timeout=15) == -15
    [left] = temp_dirs(models)
    second = converting(serve, tmp_path / "data")  # the next start, after the first had gone
    second.proc.kill()
    assert second.proc.wait(timeout=15) == -9
    assert not left.exists()
    assert len(temp_dirs(models)) == 1  # the second's own


def temp_dirs(models: Path) -> list[Path]:
    return [p for p in models.glob(".smollm2-135m-instruct.tmp-*") if p.is_dir()]
