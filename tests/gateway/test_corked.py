"""gateway.corked: what uvicorn writes in one turn of the loop leaves in one send."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from gateway.corked import _Corked
from tests.conftest import Gateway


class Recording:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str) -> Any:
        return name


async def test_writes_of_one_turn_leave_together_and_close_sends_what_is_held() -> None:
    inner = Recording()
    corked = _Corked(inner)  # type: ignore[arg-type]
    corked.write(b"HTTP/1.1 200 OK\r\n\r\n")
    corked.write(b"")
    corked.write(b"{}")
    assert inner.writes == [] and corked.get_write_buffer_size() == 21
    await asyncio.sleep(0)
    assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\n{}"]
    corked.write(b"last")
    corked.close()
    assert inner.writes[-1] == b"last" and inner.closed
    await asyncio.sleep(0)
    assert len(inner.writes) == 2  # nothing sent twice, nothing after the close
    assert corked.get_extra_info("peername") == "peername"


def test_json_and_streams_through_the_corked_protocol(make_gateway: Any) -> None:
    """The gateway's tests run on it (tests/conftest.py); one of each, read by a client."""
    gw: Gateway = make_gateway()
    assert gw.chat("corked?").json()["choices"][0]["message"]["content"]
    body = {"model": "fake-model", "stream": True,
            "messages": [{"role": "user", "content": "corked stream?"}]}  # fmt: skip
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", json=body) as r:
        text = r.read().decode()
    assert r.status_code == 200 and text.rstrip().endswith("data: [DONE]")
