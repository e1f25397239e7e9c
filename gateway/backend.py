"""What the tier walk needs from a model backend (an upstream API or the local model).

A backend answers a canonical ``GatewayRequest`` with an ``Answer`` (body + headers to relay)
or opens a ``BackendStream`` (events + headers to relay). Everything a caller uses is declared
here, so mypy checks every backend against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from .canonical import Answer, BackendStream, GatewayRequest, Meter, StreamEvent

__all__ = [
    "OPENAI_SAMPLING",
    "Answer",
    "Backend",
    "BackendStream",
    "Meter",
    "StreamEvent",
    "relayed",
]

_RELAYED = ("x-request-id", "openai-processing-ms", "openai-version", "request-id")
_RATE_LIMITS = ("x-ratelimit-", "anthropic-ratelimit-")


def relayed(headers: Mapping[str, str], *, rate_limits: bool) -> dict[str, str]:
    """The headers of an upstream answer worth passing on: its request id (the OpenAI SDKs'
    ``_request_id``, Anthropic's ``request-id``), processing time and, with ``rate_limits``,
    its rate-limit state. Nothing else (no cookies).

    NOTE: the rate-limit state is the upstream key's: the client's own when it went upstream,
    else the gateway's, which every tenant's requests draw on. Relayed to a tenant, it would
    tell how much the others use (and describe a budget that tenant does not have), so a
    backend relays it only when the key is the client's or the gateway serves one tenant
    (``UpstreamBackend.relays_rate_limits``).
    """
    return {
        k.lower(): _sendable(v)
        for k, v in headers.items()
        if k.lower() in _RELAYED or (rate_limits and k.lower().startswith(_RATE_LIMITS))
    }


def _sendable(value: str) -> str:
    """A header value as it can be sent again: the bytes the upstream sent.

    NOTE: httpx reads header bytes that are valid UTF-8 as UTF-8; a character beyond Latin-1
    (an ``x-request-id`` of ``req-€``) cannot be written to a response, which was a 500 for
    an answer the upstream gave (and a stream's upstream connection never given back).
    """
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8").decode("latin-1")
    return value


#: The sampling the OpenAI API applies to a request that sets none (what it echoes).
OPENAI_SAMPLING = {"temperature": 1.0, "top_p": 1.0}


class Backend(Protocol):
    """A model behind the gateway. Errors before the first byte raise ``APIError``."""

    name: str
    #: The client's own Authorization goes upstream (no key configured, no gateway keys): the
    #: upstream decides who may see an answer, so the cache must be partitioned by that key.
    forwards_client_auth: bool
    #: The APIs (``GatewayRequest.kind``) it speaks. Another API is served through the
    #: adapter's chat ``Bridge`` when it has one and the backend speaks ``chat``.
    apis: frozenset[str]
    #: What its answers depend on besides the request (``semantic.keys.salted``): part of every
    #: response-cache key of this model, so that answers cached before the operator changed it
    #: (a local model's default_max_tokens, an upstream_model) are not served after.
    cache_salt: str

    def check(self, request: GatewayRequest) -> None:
        """A 400 for a request of an API it speaks that it refuses by what the request
        carries (the local model: a sampling parameter, a chat turn with no content, several
        completions prompts), raised before the cache is looked in (pipeline._bridge), also
        for a bridged request's chat form: no answer stored for it (before it was refused) is
        served."""
        ...

    def as_sent(self, request: GatewayRequest) -> GatewayRequest:
        """``request`` with what the backend fills in where the client sent nothing and that
        changes the answer (an Anthropic upstream: the configured ``anthropic-version``), as
        ``Pipeline.route`` hands it on: its cache key holds what the model answers under."""
        ...

    async def complete(
        self, request: GatewayRequest, auth: str | None = None, meter: Meter | None = None
    ) -> Answer:
        """The whole answer; ``meter``: what the call has done so far, for the ledger should
        its client leave first (a backend that counts nothing leaves it alone)."""
        ...

    async def open_stream(
        self, request: GatewayRequest, auth: str | None = None
    ) -> BackendStream: ...

    async def describe(self) -> dict[str, Any]: ...  # the /v1/models entry

    async def start(self) -> None: ...  # open or load what it needs (in the app's lifespan)

    async def ready(self) -> bool:
        """Whether it has started (a local model: loaded), a stall aside: ``/readyz`` reads
        ``stalled`` once, beside it, so that its status and its body agree."""
        ...

    @property
    def failure(self) -> str | None:
        """Why the backend can never become ready (None: it is, or still may)."""
        ...

    @property
    def stalled(self) -> str | None:
        """Why the backend, ready before, cannot serve now (None: it can): a local model whose
        engine is stuck in one step (``LocalBackend.stalled``)."""
        ...

    def stats(self) -> dict[str, Any] | None: ...  # for /admin/stats and /metrics

    def flush_prefix_cache(self) -> int: ...  # bytes of prefix KV dropped (admin flush)

    def hidden(self, answer: dict[str, Any], auth: str | None) -> dict[str, Any]:
        """A streamed ``answer`` as assembled for the cache, with the key the request went
        upstream with (``auth``: see ``complete``) replaced by ``***``, as in every event and
        every non-streamed answer: a key split over several events was in none of them whole,
        and the stored answer served it whole to each later hit."""
        ...

    def sampling_defaults(self) -> dict[str, float]:
        """``temperature`` and ``top_p`` of a request that sets neither, as a Responses object
        echoes them: the local model's own; OpenAI's 1.0 for an upstream, whose are not
        visible here."""
        ...

    async def close(self) -> None: ...
