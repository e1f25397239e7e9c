"""What the tier walk needs from a model backend (an upstream API or the local model).

A backend answers a canonical ``GatewayRequest`` with an ``Answer`` (body + headers to relay)
or opens a ``BackendStream`` (events + headers to relay). Everything a caller uses is declared
here, so mypy checks every backend against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from .canonical import Answer, BackendStream, GatewayRequest, StreamEvent

__all__ = ["Answer", "Backend", "BackendStream", "StreamEvent", "relayed"]

_RELAYED = ("x-request-id", "openai-processing-ms", "openai-version")


def relayed(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of an upstream answer worth passing on: its request id (the OpenAI SDKs'
    ``_request_id``), processing time and rate-limit state. Nothing else (no cookies)."""
    return {
        k.lower(): v
        for k, v in headers.items()
        if k.lower() in _RELAYED or k.lower().startswith("x-ratelimit-")
    }


class Backend(Protocol):
    """A model behind the gateway. Errors before the first byte raise ``APIError``."""

    name: str
    #: The client's own Authorization goes upstream (no key configured, no gateway keys): the
    #: upstream decides who may see an answer, so the cache must be partitioned by that key.
    forwards_client_auth: bool
    #: ``POST /v1/embeddings`` can be sent to it.
    serves_embeddings: bool

    async def complete(self, request: GatewayRequest, auth: str | None = None) -> Answer: ...

    async def open_stream(
        self, request: GatewayRequest, auth: str | None = None
    ) -> BackendStream: ...

    def describe(self) -> dict[str, Any]: ...  # the /v1/models entry

    async def start(self) -> None: ...  # open or load what it needs (in the app's lifespan)

    async def ready(self) -> bool: ...

    @property
    def failure(self) -> str | None:
        """Why the backend can never become ready (None: it is, or still may)."""
        ...

    def stats(self) -> dict[str, Any] | None: ...  # for /admin/stats and /metrics

    def flush_prefix_cache(self) -> int: ...  # bytes of prefix KV dropped (admin flush)

    async def close(self) -> None: ...
