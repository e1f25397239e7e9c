"""Shared fixtures: a fake OpenAI-compatible upstream and live gateways on 127.0.0.1."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.app import create_app
from gateway.config import Config, load_config_text
from gateway.corked import CorkedHttpToolsProtocol
from tests.fake_upstream import FakeUpstream, ThreadedServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: Converted model weights live outside the repository, so a CI run converts the GGUF once.
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cachegate"


@pytest.fixture(scope="session")
def bundled_model_dir() -> Path:
    """The bundled SmolLM2-135M-Instruct as a Hugging Face directory (converted on first use)."""
    from localmodel.loader import convert_bundled

    return convert_bundled(CACHE_DIR)


@pytest.fixture(scope="session")
def upstream_server() -> Iterator[ThreadedServer]:
    server = ThreadedServer(FakeUpstream()).start()
    yield server
    server.stop()


@pytest.fixture
def upstream(upstream_server: ThreadedServer) -> FakeUpstream:
    """The fake upstream, with its counters reset for this test."""
    app: FakeUpstream = upstream_server.app
    app.reset()
    return app


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A base URL on 127.0.0.1 where every connection is refused, for the whole test.

    The port stays bound (not listening) until the test ends. A port that is only picked and
    released can be handed to the next server that binds port 0, such as the gateway under
    test, which then forwards to itself until the client times out (this failed once in CI).
    """
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


class Gateway:
    """A gateway app served by uvicorn in a thread, and an httpx client for it."""

    def __init__(self, config: Config, *, port: int = 0, wait: bool = True, **kwargs: Any) -> None:
        self.config = config
        self.app = create_app(config, **kwargs)
        # (the protocol `cachegate serve` runs)
        self.server = ThreadedServer(
            self.app, port=port, lifespan="on", http=CorkedHttpToolsProtocol
        ).start()
        self.url = self.server.url
        self.http = httpx.Client(base_url=self.url, timeout=30)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = 120) -> None:
        """Wait for /readyz (models loaded, embedder loaded, vector index restored)."""
        import time

        deadline = time.time() + timeout
        while self.http.get("/readyz").status_code != 200:
            if time.time() > deadline:
                raise RuntimeError(f"gateway not ready: {self.http.get('/readyz').text}")
            time.sleep(0.05)

    @property
    def runtime(self) -> Any:
        return self.app.state.runtime

    def chat(self, content: str = "hello", **body: Any) -> httpx.Response:
        headers = body.pop("headers", None)
        payload = {
            "model": "fake-model",
            "messages": [{"role": "user", "content": content}],
            **body,
        }
        return self.http.post("/v1/chat/completions", json=payload, headers=headers)

    def stop(self) -> None:
        self.http.close()
        self.server.stop()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def make_gateway(
    upstream_server: ThreadedServer, tmp_path: Path
) -> Iterator[Callable[..., Gateway]]:
    """Build a gateway whose model ``fake-model`` is the fake upstream.

    ``extra_yaml`` is merged over the base config, ``model_yaml`` over the model's settings.
    The semantic tier is off unless ``semantic=True`` (loading the embedder takes seconds).
    """
    started: list[Gateway] = []

    def make(
        extra_yaml: str = "", model_yaml: str = "", *, semantic: bool = False, **kwargs: Any
    ) -> Gateway:
        config: dict[str, Any] = {
            "data_dir": str(tmp_path / f"data{len(started)}"),
            # NOTE: an in-process gateway shares the GIL with the test's own client threads, so
            # its event loop's lag measures the test as much as the gateway: admission is off
            # here unless a test turns it on (tests/gateway/test_admission.py); the gateways
            # that tests start as processes (`cachegate serve`) run with the default.
            "server": {"admission_max_lag_ms": None},
            "cache": {"semantic": {"enabled": semantic}},
            "models": {
                "fake-model": {
                    "backend": "openai",
                    "base_url": f"{upstream_server.url}/v1",
                    "api_key": "sk-test",
                    "retry_backoff": 0.01,
                    **(yaml.safe_load(model_yaml) or {}),
                }
            },
        }
        _merge(config, yaml.safe_load(extra_yaml) or {})
        gateway = Gateway(load_config_text(yaml.safe_dump(config)), **kwargs)
        started.append(gateway)
        return gateway

    yield make
    for gateway in started:
        gateway.stop()


#: A Gemma-style chat template: no system role (``raise_exception`` in the template).
NO_SYSTEM = (
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture
def no_system_gateway(bundled_model_dir: Path, tmp_path: Path) -> Iterator[Gateway]:
    """A gateway whose one model, ``tiny``, is a tiny random local Llama with the bundled
    tokenizer and a chat template that refuses a system turn (:data:`NO_SYSTEM`)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir)
    tokenizer.chat_template = NO_SYSTEM
    tiny = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=256, tie_word_embeddings=True)  # fmt: skip
    LlamaForCausalLM(tiny).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    settings = {"backend": "local", "source": str(tmp_path / "tiny"), "threads": 1}
    text = yaml.safe_dump({"data_dir": str(tmp_path / "data"), "models": {"tiny": settings},
                           "cache": {"semantic": {"enabled": False}}})  # fmt: skip
    with Gateway(load_config_text(text)) as gateway:
        yield gateway


def wait_for(condition: Callable[[], Any], timeout: float = 15.0) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "condition not met in time"
        time.sleep(0.05)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


class RedisServer:
    """A real ``redis-server`` (Debian's package) on a free port, for the tests that share a cache.

    ``make test`` and ``.ci/run`` install redis-server when it is missing; a missing binary is a
    failure here, never a skip.
    """

    def __init__(self, directory: Path, *, appendonly: bool = False) -> None:
        import shutil
        import socket

        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed (make test installs it: apt-get install redis-server)"
            )
        self.binary = binary
        self.directory = directory
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.appendonly = appendonly  # AOF with appendfsync everysec, as deployment.md advises
        self.process: Any = None

    def start(self) -> RedisServer:
        import subprocess
        import time

        import redis

        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes" if self.appendonly else "no",
                "--appendfsync",
                "everysec",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        deadline = time.time() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        client.close()
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def kill(self) -> None:
        """``kill -9``: no shutdown, no final save (AOF keeps what was written)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def flushall(self) -> None:
        import redis

        client = redis.Redis(port=self.port)
        client.flushall()
        client.close()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()
