"""A headless Debian ``chromium`` driven over the DevTools protocol (CDP), for dashboard tests.

    >>> with Browser(tmp_path) as browser:
    ...     page = browser.open("http://127.0.0.1:8080/dashboard")
    ...     page.wait_for("document.querySelectorAll('path').length > 0")
    ...     assert page.errors == []

``make test`` and ``.ci/run`` install ``chromium`` when it is missing; a missing binary is a
failure, never a skip. Nothing is downloaded: the browser is the distribution's.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

__all__ = ["Browser", "Page"]

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1200",
    "--remote-debugging-port=0",
)


class Browser:
    """A chromium process with a fresh profile in ``directory``; closed with the context.
    ``flags``: more command-line switches (``--host-resolver-rules=MAP name 127.0.0.1``)."""

    def __init__(self, directory: Path, flags: tuple[str, ...] = ()) -> None:
        binary = shutil.which("chromium") or shutil.which("chromium-browser")
        if binary is None:
            raise RuntimeError(
                "chromium is not installed (make test installs it: apt-get install chromium)"
            )
        self.profile = directory / "chromium-profile"
        self.profile.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [binary, *FLAGS, *flags, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.port = self._wait_for_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self, url: str) -> Page:
        """A new tab that loads ``url``, recording console errors and uncaught exceptions."""
        target = httpx.put(f"http://127.0.0.1:{self.port}/json/new?about:blank", timeout=10).json()
        page = Page(self, target["webSocketDebuggerUrl"])
        page.start(url)
        return page

    def run(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _wait_for_port(self) -> int:
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.time() + 60
        while time.time() < deadline:
            if port_file.exists() and port_file.read_text().strip():
                return int(port_file.read_text().split()[0])
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with status {self.process.returncode}")
            time.sleep(0.1)
        raise RuntimeError("chromium did not open its DevTools port")


class Page:
    """One tab: ``evaluate`` JavaScript, ``wait_for`` a condition, ``screenshot``."""

    def __init__(self, browser: Browser, ws_url: str) -> None:
        self._browser = browser
        self._ws_url = ws_url
        self._ws: ClientConnection | None = None
        self._next = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.errors: list[str] = []  # console errors, uncaught exceptions, failed loads

    def start(self, url: str) -> None:
        self._browser.run(self._start(url))

    def evaluate(self, expression: str) -> Any:
        reply = self._browser.run(
            self._send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        )
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30) -> None:
        """Poll ``expression`` until it holds. One that throws is tried again: ``open`` returns
        once the navigation started, and the page may not have its elements yet (a CI run
        read ``about:blank``'s document: "Cannot read properties of null")."""
        deadline = time.time() + timeout
        while True:
            try:
                if self.evaluate(expression):
                    return
                failed = None
            except RuntimeError as exc:
                failed = exc
            if time.time() > deadline:
                raise TimeoutError(f"the page never had: {expression}") from failed
            time.sleep(0.2)

    def screenshot(self, path: Path) -> None:
        reply = self._browser.run(
            self._send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        )
        path.write_bytes(base64.b64decode(reply["data"]))

    # -- helpers ---------------------------------------------------------------------------

    async def _start(self, url: str) -> None:
        self._ws = await connect(self._ws_url, max_size=64 * 2**20)
        asyncio.get_running_loop().create_task(self._read())
        for domain in ("Runtime", "Log", "Page"):
            await self._send(f"{domain}.enable", {})
        await self._send("Page.navigate", {"url": url})

    async def _send(self, method: str, params: dict[str, Any]) -> Any:
        assert self._ws is not None
        self._next += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[self._next] = future
        await self._ws.send(json.dumps({"id": self._next, "method": method, "params": params}))
        return await future

    async def _read(self) -> None:
        assert self._ws is not None
        async for raw in self._ws:
            message = json.loads(raw)
            if "id" in message:
                future = self._pending.pop(message["id"], None)
                if future is not None and not future.done():
                    if "error" in message:
                        future.set_exception(RuntimeError(str(message["error"])))
                    else:
                        future.set_result(message.get("result", {}))
                continue
            self._note(message.get("method", ""), message.get("params", {}))

    def _note(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(
                " ".join(str(a.get("value", a.get("description"))) for a in params.get("args", []))
            )
        elif method == "Runtime.exceptionThrown":
            self.errors.append(
                str(params.get("exceptionDetails", {}).get("exception", {}).get("description"))
            )
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"{entry.get('text')} ({entry.get('url', '')})")
