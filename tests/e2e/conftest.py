"""End-to-end fixtures: ``cachegate serve`` as a real process on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

CACHEGATE = str(Path(sys.executable).parent / "cachegate")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServeProcess:
    """``cachegate serve --config FILE --host HOST --port PORT`` in a subprocess, reached on
    127.0.0.1 (``ready_timeout`` None: started, not waited for)."""

    def __init__(
        self,
        config: Path,
        *,
        command: str = "serve",
        ready_timeout: float | None = 60,
        host: str = "127.0.0.1",
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = config.with_suffix(f".{self.port}.log")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            [
                CACHEGATE,
                command,
                "--config",
                str(config),
                "--host",
                host,
                "--port",
                str(self.port),
            ],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )
        if ready_timeout is not None:
            self.wait_ready(ready_timeout)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cachegate exited early:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"cachegate not ready after {timeout}s:\n{self.log.read_text()}")

    def wait_logged(self, text: str, timeout: float) -> None:
        """Wait until the process has logged ``text``."""
        deadline = time.time() + timeout
        while text not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"cachegate never logged {text!r}:\n{self.log.read_text()}")
            time.sleep(0.1)

    def stop(self) -> int:
        self.proc.terminate()
        try:
            code = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._log_file.close()
        return code


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    """Start ``cachegate serve`` with the given YAML text; stopped after the test."""
    started: list[ServeProcess] = []

    def start(yaml_text: str, name: str = "cachegate.yaml", **kwargs: object) -> ServeProcess:
        path = tmp_path / name
        path.write_text(yaml_text)
        for attempt in range(3):
            try:
                process = ServeProcess(path, **kwargs)  # type: ignore[arg-type]
            except RuntimeError as exc:
                # NOTE: the free port is bound only after the app's startup (seconds of model
                # loading): another process on the machine may take it meanwhile; a new one
                if "address already in use" not in str(exc) or attempt == 2:
                    raise
                continue
            started.append(process)
            return process
        raise AssertionError("unreachable")

    yield start
    for process in started:
        process.stop()
