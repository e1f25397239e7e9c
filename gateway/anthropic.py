"""Forwarding to the Anthropic Messages API (``backend: anthropic``).

The request body goes upstream as the client sent it (unknown fields untouched), with the
configured ``upstream_model`` and, when ``prompt_caching`` is on, ``cache_control`` breakpoints
placed by gateway.prompt_cache. Connection pooling, admission, retries before the first byte
(connect errors, 429, 5xx and Anthropic's 529 ``overloaded_error``) are those of
``UpstreamBackend``; only the path, the headers and the stream's event format differ:

* ``POST {base_url}/v1/messages`` and ``/v1/messages/count_tokens``;
* ``x-api-key`` (the configured key, or the client's own when none is configured and the
  gateway has no keys) and ``anthropic-version`` (the client's, else the configured one);
  ``anthropic-beta`` as the client sent it;
* a stream's events (``event: message_start`` …) pass through as they arrive; ``message_stop``
  ends it, ``event: error`` is the upstream's error inside it.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import msgspec

from .backend import Answer, Meter, StreamEvent
from .config import AnthropicModelConfig
from .errors import APIError
from .messages import MESSAGE_STOP, encode_event, error_event, versioned
from .prompt_cache import PromptCacher, min_cacheable_tokens
from .requests import GatewayRequest
from .upstream import UpstreamBackend, UpstreamError, UpstreamStream

__all__ = ["AnthropicBackend", "AnthropicStream"]

_decode = msgspec.json.decode
_encode = msgspec.json.encode
#: Where a Messages request's input tokens are counted upstream.
_COUNT_PATH = "v1/messages/count_tokens"


class AnthropicBackend(UpstreamBackend):
    """A configured model served by the Anthropic Messages API."""

    def __init__(self, name: str, config: AnthropicModelConfig, **options: Any) -> None:
        super().__init__(name, config, **options)
        self.anthropic = config
        self.apis = frozenset({"messages"})
        caching = config.prompt_caching
        self.cacher: PromptCacher | None = None
        if caching.enabled:
            minimum = caching.min_tokens or min_cacheable_tokens(config.upstream_model or name)
            self.cacher = PromptCacher(
                min_tokens=minimum, ttl=caching.ttl, max_tenants=caching.max_tenants
            )

    def as_sent(self, request: GatewayRequest) -> GatewayRequest:
        """A Messages request with the configured ``anthropic_version`` when it sends none: the
        version it is answered under is in its cache key (a change of the setting misses what
        was stored under the old one; the client's same version hits it)."""
        if request.kind != "messages":
            return request
        return versioned(request, self.anthropic.anthropic_version)

    async def complete(
        self, request: GatewayRequest, auth: str | None = None, meter: Meter | None = None
    ) -> Answer:
        _only_messages(self.name, request)
        answer = await self._post(request, auth, "v1/messages")
        body = answer.body
        if body.get("type") != "message" or not isinstance(body.get("content"), list):
            raise APIError(502, f"Upstream for model '{self.name}' sent an unexpected body.")
        return answer

    async def open_stream(
        self, request: GatewayRequest, auth: str | None = None
    ) -> AnthropicStream:
        _only_messages(self.name, request)
        response = await self._send(request, stream=True, auth=auth, path="v1/messages")
        stream = AnthropicStream(self.name, response, rate_limits=self.relays_rate_limits,
                                 secret=self._sent_key(auth))  # fmt: skip
        await stream.opened()
        return stream

    async def count_message_tokens(
        self, request: GatewayRequest, auth: str | None = None
    ) -> Answer:
        """``POST /v1/messages/count_tokens`` upstream: the prompt's input tokens, with the
        upstream's headers to relay (its ``request-id``, its rate-limit state), as a message's."""
        answer = await self._post(request, auth, _COUNT_PATH)
        count = answer.body.get("input_tokens")
        if not isinstance(count, int):
            raise APIError(502, f"Upstream for model '{self.name}' sent an unexpected body.")
        return Answer({"input_tokens": count}, answer.headers)

    async def describe(self) -> dict[str, Any]:
        return {"id": self.name, "object": "model", "created": 0, "owned_by": "anthropic"}

    def stats(self) -> dict[str, Any] | None:
        return {"prompt_caching": self.cacher.stats()} if self.cacher is not None else None

    # -- UpstreamBackend hooks -------------------------------------------------------------

    def _payload(self, request: GatewayRequest, stream: bool, path: str | None = None) -> bytes:
        body = dict(request.body)
        body["model"] = self.config.upstream_model or request.model
        if stream:
            body["stream"] = True
        # NOTE: the marks change only what is sent: the cache key was taken from the client's
        # body, so a request with and without them is the same request.
        # (not a count: it writes no prompt cache; one may carry max_tokens, as a create)
        if self.cacher is not None and path != _COUNT_PATH:
            body = self.cacher.prepare(request.tenant, body, now=time.monotonic())
        return _encode(body)

    def _headers(self, request: GatewayRequest, auth: str | None) -> dict[str, str]:
        headers = {
            **self._gateway_headers(request),
            "anthropic-version": self.anthropic.anthropic_version,
            **dict(request.api_headers),  # the client's anthropic-version (as_sent) and -beta
        }
        if self.config.api_key:
            headers["x-api-key"] = self.config.api_key
        elif auth and self._forward_client_auth:
            if auth.startswith("x-api-key "):
                headers["x-api-key"] = auth[len("x-api-key ") :]
            else:
                headers["authorization"] = auth
        return headers

    async def _send(
        self, request: GatewayRequest, *, stream: bool, auth: str | None, path: str | None = None
    ) -> httpx.Response:
        try:
            return await super()._send(request, stream=stream, auth=auth, path=path)
        except UpstreamError as exc:
            if exc.upstream_status == 529:  # Anthropic's "overloaded": the SDKs know it by status
                exc.status, exc.type = 529, "overloaded_error"
            raise

    async def _post(self, request: GatewayRequest, auth: str | None, path: str) -> Answer:
        answer = await self._answer(request, auth, path)
        if answer.body.get("type") == "error":  # an error sent with status 200
            error = answer.body.get("error")
            detail = error.get("message") if isinstance(error, dict) else error
            raise APIError(502, f"Upstream for model '{self.name}' failed: {detail}")
        return answer


class AnthropicStream(UpstreamStream):
    """Events of an upstream Messages stream, as they arrive, each with its ``event:`` name."""

    def _event(self, data: bytes, *, more: bool) -> StreamEvent:
        try:
            event = _decode(data)
        except msgspec.DecodeError:
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            detail = data[:200].decode("utf-8", "replace")
            error = APIError(502, f"Upstream for model '{self._name}' sent an event that is "
                             f"not a Messages event: {detail!r}")  # fmt: skip
            return StreamEvent(error_event(error), None, error=True)
        kind = event["type"]
        if kind == "message_stop":
            self._finished = True
            return StreamEvent(MESSAGE_STOP, event, done=True)
        if kind == "error":
            return StreamEvent(encode_event(event), event, error=True)
        raw = b"event: " + kind.encode() + b"\ndata: " + data.replace(b"\n", b"\ndata: ") + b"\n\n"
        return StreamEvent(raw, event, more=more)


def _only_messages(name: str, request: GatewayRequest) -> None:
    if request.kind != "messages":
        raise APIError(
            400,
            f"The model `{name}` is served by the Anthropic Messages API: use POST /v1/messages.",
            param="model",
            code="unsupported_endpoint",
        )
