"""Chaos fixtures: real redis-server processes, real ``cachegate serve`` replicas and the fake
upstream, all on 127.0.0.1; a load that records every answer, and the checks every chaos test
makes of what was served."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import RedisServer
from tests.e2e.conftest import ServeProcess, serve

__all__ = ["Answer", "Load", "ask", "config", "serve"]


def config(
    upstream_url: str, redis_url: str, data_dir: Path, *, semantic: bool, **cache: Any
) -> str:
    return yaml.safe_dump({
        "data_dir": str(data_dir),
        "cache": {"backend": "redis", "redis": {"url": redis_url, "timeout": 1.0},
                  # (no overload skips here: a loaded CI machine must not turn hits to misses)
                  "semantic": {"enabled": semantic, "max_wait_ms": None}, **cache},
        "models": {"fake-model": {"backend": "openai", "base_url": f"{upstream_url}/v1",
                                  "api_key": "sk", "retry_backoff": 0.01}},
    })  # fmt: skip


@dataclass(frozen=True, slots=True)
class Answer:
    question: str
    status: int
    cache: str
    content: str
    at: float  # time.monotonic() when the answer arrived


def ask(replica: ServeProcess, question: str, timeout: float = 10.0) -> Answer:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": question}]}
    r = httpx.post(f"{replica.url}/v1/chat/completions", json=body, timeout=timeout)
    content = r.json()["choices"][0]["message"]["content"] if r.status_code == 200 else r.text
    return Answer(question, r.status_code, r.headers.get("x-cache", ""), content, time.monotonic())


def right(answer: Answer) -> bool:
    """The fake upstream's answer names its question: any other is a wrong answer."""
    return answer.status == 200 and f" to: {answer.question} [" in answer.content


@dataclass
class Load:
    """Threads asking fresh and repeated questions of the replicas until stopped."""

    replicas: list[ServeProcess]
    tag: str
    threads: int = 3
    answers: list[Answer] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (replica url, error)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        for n in range(self.threads):
            worker = threading.Thread(target=self._run, args=(n,), daemon=True)
            worker.start()
            self._workers.append(worker)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=30)

    def _run(self, n: int) -> None:
        i = 0
        while not self._stop.is_set():
            replica = self.replicas[(n + i) % len(self.replicas)]
            # every third question repeats an earlier one of this thread: hits under load
            k = i - 2 if i % 3 == 2 else i
            try:
                self.answers.append(ask(replica, f"Load question {self.tag}-{n}-{k}?"))
            except (httpx.HTTPError, KeyError, ValueError) as exc:
                self.errors.append((replica.url, repr(exc)))
            i += 1
            time.sleep(0.02)


@pytest.fixture
def aof_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """Redis with AOF (appendfsync everysec), as docs/deployment.md recommends."""
    server = RedisServer(tmp_path / "redis", appendonly=True)
    server.directory.mkdir()
    server.start()
    yield server
    server.stop()
