"""End to end: the default of ``server.allowed_hosts`` follows the address ``cachegate serve``
binds, ``--host`` included (tests/gateway/test_allowed_hosts.py has the rest)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from tests.e2e.conftest import ServeProcess
from tests.e2e.test_lifecycle import config
from tests.fake_upstream import ThreadedServer


def test_serve_on_every_interface_answers_any_host_and_on_loopback_its_own_names(
    serve: Callable[..., ServeProcess], upstream_server: ThreadedServer, tmp_path: Path
) -> None:
    """The file says 127.0.0.1 and ``--host 0.0.0.0`` overrides it (as the containers run
    it): reached by names it cannot know, the gateway answers them, where the same file
    served on loopback refuses a name that is not its own (a rebound page's)."""

    def text(data: str) -> str:
        settings = config(upstream_server, tmp_path / data)
        return settings.replace("server: {", "server: {host: 127.0.0.1, ")

    everywhere = serve(text("a"), name="everywhere.yaml", host="0.0.0.0")
    loopback = serve(text("b"), name="loopback.yaml")
    for gateway, status in ((everywhere, 200), (loopback, 403)):
        host = f"gw.example:{gateway.port}"
        headers = {"host": host, "origin": f"http://{host}"}
        got = httpx.get(f"{gateway.url}/admin/stats", headers=headers, timeout=30)
        assert got.status_code == status, got.text
        chat = {"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}]}
        answer = httpx.post(
            f"{gateway.url}/v1/chat/completions", json=chat, headers=headers, timeout=30
        )
        assert answer.status_code == status, answer.text
    refused = httpx.get(f"{loopback.url}/metrics", headers={"host": "gw.example"}, timeout=30)
    assert refused.json()["error"]["code"] == "host_not_allowed"
