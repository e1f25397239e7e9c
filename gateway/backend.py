"""What the pipeline needs from a model backend (an upstream API or the local model)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from .requests import GatewayRequest

__all__ = ["RELAYED_HEADERS", "Backend", "BackendStream", "StreamEvent", "relayed"]

#: Where a backend leaves the headers of its upstream's answer that the gateway's client should
#: see too (the pipeline sets a dict for each request it sends to a backend; the backend's task
#: inherits the context and fills it in).
RELAYED_HEADERS: ContextVar[dict[str, str] | None] = ContextVar("relayed_headers", default=None)
_RELAYED = ("x-request-id", "openai-processing-ms", "openai-version", "request-id")


def relayed(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of an upstream answer worth passing on: its request id (the OpenAI SDKs'
    ``_request_id``, Anthropic's ``request-id``), processing time and rate-limit state.
    Nothing else (no cookies)."""
    return {
        k.lower(): v
        for k, v in headers.items()
        if k.lower() in _RELAYED or k.lower().startswith(("x-ratelimit-", "anthropic-ratelimit-"))
    }


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One server-sent event of a response stream."""

    raw: bytes  # the event exactly as it goes to the client: b"data: ...\n\n"
    chunk: dict[str, Any] | None  # the parsed chunk (None for [DONE] and comments)
    done: bool = False  # the ``data: [DONE]`` terminator
    error: bool = False  # an ``{"error": ...}`` event: the answer failed mid-stream
    #: More events arrived with this one: the relay may send them to the client together.
    more: bool = False


class BackendStream(Protocol):
    """An opened stream: the backend accepted the request (status 200 is decided)."""

    def __aiter__(self) -> AsyncIterator[StreamEvent]: ...

    async def aclose(self) -> None: ...


class Backend(Protocol):
    """A model behind the gateway. Errors before the first byte raise ``APIError``."""

    name: str
    #: The client's own Authorization goes upstream (no key configured, no gateway keys): the
    #: upstream decides who may see an answer, so the cache must be partitioned by that key.
    forwards_client_auth: bool

    async def complete(
        self, request: GatewayRequest, auth: str | None = None
    ) -> dict[str, Any]: ...

    async def open_stream(
        self, request: GatewayRequest, auth: str | None = None
    ) -> BackendStream: ...

    def describe(self) -> dict[str, Any]: ...  # the /v1/models entry

    async def ready(self) -> bool: ...

    async def close(self) -> None: ...
