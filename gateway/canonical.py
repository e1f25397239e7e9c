"""The canonical request and answer: what every API adapter maps its wire format to and from.

This is a leaf module (it imports nothing from ``gateway``), so adapters, the tier walk and
backends can all share its types without importing each other.

One request travels through four files::

    api.py        route → adapter.parse(body) → GatewayRequest           (wire → canonical)
    pipeline.py   the tier walk over the GatewayRequest: lookup, coalesce, backend, store
    backend.py    Backend.complete / open_stream → Answer / BackendStream  (+ headers to relay)
    chat.py ...   adapter.fresh / replay / fold render the answer back     (canonical → wire)

The walk never looks at a wire format: whatever depends on one (the cache key, whether an
answer is complete, how a stream folds into an answer, how a stored answer is replayed and
how an error is written) is a method of the request's :class:`Adapter`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from semantic.cache import Lookup
    from semantic.keys import CacheKey, ContextMode

    from .audit import AuditJob
    from .errors import APIError
    from .ledger import Usage

__all__ = [
    "Adapter",
    "Answer",
    "BackendStream",
    "Bridge",
    "ByteStream",
    "CacheControl",
    "CacheState",
    "Fold",
    "GatewayRequest",
    "Kind",
    "Meter",
    "Reply",
    "StreamEvent",
    "StreamOutcome",
    "Wire",
]

#: The wire format (API) of a request; part of every cache scope.
Kind = Literal["chat", "completion", "embedding", "responses", "messages"]
CacheState = Literal["exact", "semantic", "miss", "bypass", "refresh"]


@dataclass(frozen=True, slots=True)
class CacheControl:
    """Per-request cache controls, from headers or the body's ``cache`` object."""

    no_cache: bool = False  # do not read the cache (still store the fresh answer)
    no_store: bool = False  # do not store the answer
    namespace: str = ""  # a separate cache partition inside the tenant
    threshold: float | None = None  # semantic threshold for this request
    ttl: float | None = None  # seconds the stored answer stays servable
    max_age: float | None = None  # serve only answers stored at most this many seconds ago


@dataclass(frozen=True, slots=True)
class GatewayRequest:
    """A validated request, ready for the tier walk."""

    kind: Kind
    model: str
    #: The JSON body as received minus the ``cache`` extension; forwarded upstream as is.
    body: dict[str, Any]
    stream: bool
    include_usage: bool
    tenant: str
    control: CacheControl
    hops: int = 0  # gateways this request passed before this one (``x-cachegate-hops``)
    #: The front gateway's tenant (``x-cachegate-partition``), already part of ``tenant``.
    partition: str = ""
    #: Seconds within which the gateway in front must hear from a stream
    #: (``x-cachegate-keepalive``); None: no gateway in front asked.
    keepalive: float | None = None
    #: Not worth waiting for a model still loading (``x-cachegate-if-ready``): the gateway in
    #: front has other replicas to send it to.
    if_ready: bool = False
    #: The client's ``OpenAI-Organization`` / ``OpenAI-Project`` headers: sent upstream with
    #: the client's own key (when the gateway forwards it), never with the gateway's.
    account: tuple[tuple[str, str], ...] = ()
    #: The whole conversation in the API's own item form, earlier turns resolved (the
    #: Responses API's ``previous_response_id``; earlier turns only an upstream holds are a
    #: reference item); None where the body holds all there is (chat).
    turns: tuple[dict[str, Any], ...] | None = None
    #: How many of ``turns`` came from earlier responses (the rest are this request's input).
    earlier: int = 0
    #: The earlier response this request continues, as the client named it (the Responses
    #: API's ``previous_response_id``; the forwarded body may carry its turns instead).
    previous: str | None = None
    #: Who may read what this request leaves behind (a stored response): see the adapter.
    owner: str = ""
    #: Headers of the client's API that go upstream and are part of the cache scope
    #: (Anthropic's ``anthropic-version`` and ``anthropic-beta``).
    api_headers: tuple[tuple[str, str], ...] = ()
    #: A chat request whose final assistant message is continued, not answered with a new
    #: turn (a Messages prefill, through the bridge). Not in the body: an OpenAI upstream
    #: would refuse vLLM's ``continue_final_message``; a backend that cannot honour it
    #: ignores it (OpenAI answers with a new turn, as it does for such a chat request).
    continue_final: bool = False
    #: A bridged request's ``top_k`` (Messages). Not in the body: OpenAI refuses the field;
    #: the local model honours it, an upstream is not sent it.
    top_k: int | None = None
    #: A chat request whose oldest messages (never a system or developer one, nor the last)
    #: may be left out until it fits the context window (the Responses API's ``truncation:
    #: "auto"``, through the bridge); a backend with no window to fit ignores it.
    truncate: bool = False
    #: The body that carries the whole conversation in place of the earlier response it names
    #: upstream (the Responses API's ``previous_response_id``), when this gateway holds it: sent
    #: instead when the upstream answers that it holds no such response (a restarted worker).
    standalone: dict[str, Any] | None = None
    #: False: never retried, whatever the model's ``max_retries`` (the semantic audit's call:
    #: optional work, which must not add retries to the load on a failing upstream).
    retries: bool = True


@dataclass(frozen=True, slots=True)
class Answer:
    """A backend's complete answer, and the headers of it the client should see too."""

    body: dict[str, Any]
    #: e.g. the upstream's ``x-request-id`` and rate-limit state (see ``backend.relayed``).
    headers: Mapping[str, str] = field(default_factory=dict)
    #: False: the answer was converted with a loss (a bridge could not carry part of it,
    #: e.g. tool arguments that are not JSON): the client gets it, the cache must not.
    lossless: bool = True


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One server-sent event of a response stream."""

    raw: bytes  # the event exactly as it goes to the client: b"data: ...\n\n"
    chunk: dict[str, Any] | None  # the parsed chunk (None for [DONE] and comments)
    done: bool = False  # the stream's last event: the answer is complete (``data: [DONE]``)
    error: bool = False  # an error event (the API's own shape): the answer failed mid-stream
    #: More events arrived with this one: the relay may send them to the client together.
    more: bool = False


class BackendStream(Protocol):
    """An opened stream: the backend accepted the request (status 200 is decided)."""

    @property
    def headers(self) -> Mapping[str, str]:
        """Headers of the backend's answer to relay to the client (known once opened)."""
        ...

    def counted(self) -> dict[str, Any] | None:
        """The usage the backend counted itself so far, as a chat ``usage`` object (None: it
        counts nothing; an upstream's usage comes only in its stream). The ledger books it
        when the stream ends before reporting its usage: the local model knows its prompt.
        NOTE: no ``prompt_tokens`` counted means the backend never ran the request (a local
        model's, cancelled while it waited for the engine): no model call to book."""
        ...

    def __aiter__(self) -> AsyncIterator[StreamEvent]: ...

    async def aclose(self) -> None: ...


@dataclass(slots=True)
class Meter:
    """What a non-streamed model call has done so far, should its client leave before the
    answer (the ledger books it as a stream whose client left, ``BackendStream.counted``).

    A backend that counts its own work (the local model) sets ``counted`` once it has the
    call; None: it counts nothing (an upstream's usage comes only in its answer).
    """

    counted: Callable[[], dict[str, Any] | None] | None = None


class ByteStream(Protocol):
    """What the HTTP layer sends as an SSE body; ``aclose`` must be safe to call at any time
    (unstarted, running elsewhere or finished) and frees what the stream holds."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


@dataclass(slots=True)
class StreamOutcome:
    """How a stream from a model ended, as far as the relay knows."""

    #: The code of the error event sent instead of the answer's end (None: no error).
    error: str | None = None
    #: The answer's last event was sent (what follows is only cleanup).
    finished: bool = False
    #: What the model call cost, for the ledger, once the stream has ended: the usage it
    #: reported when it finished; else what is known (``ledger.partial_usage``). None: a
    #: finished stream that reported no usage (booked with 0 tokens).
    usage: Usage | None = None
    #: The number the stream's next event takes, in an API that numbers its events (the
    #: Responses API's ``sequence_number``): an error event the gateway adds continues them.
    sequence: int = 0
    #: False: the stream ended before the backend ran the request at all (its client left
    #: while a local model's request still waited for the engine): no model call was made.
    ran: bool = True


@dataclass(slots=True)
class Reply:
    """What the HTTP layer sends: a JSON body or an SSE stream, plus headers."""

    cache: CacheState
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    stream: ByteStream | None = None
    #: Completion tokens answered without running a model (cache hits).
    saved_tokens: int = 0
    #: Served the answer of an identical request that was in flight (coalescing).
    coalesced: bool = False
    #: How a stream from a model ended, once it has (``None`` for a JSON body or a replay);
    #: a reply with neither body nor stream: a non-streamed call the client left (``Meter``).
    outcome: StreamOutcome | None = None
    #: The response-cache lookup: the hit served, or a miss (with any guard rejection).
    lookup: Lookup | None = None
    #: The request's cache key (None: the cache was bypassed).
    key: CacheKey | None = None
    #: A sampled semantic hit's audit, for the auditor once the response is sent.
    audit: AuditJob | None = None
    #: Usage the inputs answered from the cache would have cost (embeddings: each input is
    #: cached on its own, so one request can be part hit, part model call).
    avoided: dict[str, Any] | None = None


class Fold(Protocol):
    """Folds a stream's events into the complete answer the cache stores."""

    def add(self, chunk: dict[str, Any]) -> bool:
        """Take one parsed event; False when the client did not ask to see it."""
        ...

    def result(self) -> dict[str, Any] | None:
        """The complete answer, or None when the stream did not complete it."""
        ...

    def usage(self) -> dict[str, Any] | None:
        """The usage the stream reported, complete or not (the ledger counts it either way).

        NOTE: kept even by a fold that does not assemble its answer (``cached=False``).
        """
        ...

    def streamed(self) -> int:
        """Characters of generated text (content, tool-call arguments, reasoning) among the
        events taken so far: a stream that ends before reporting its usage is booked with at
        least the output tokens they amount to. Kept whether or not the fold assembles."""
        ...


class Wire(Protocol):
    """One wire format (API) at the HTTP edge: its requests and its errors."""

    @property
    def kind(self) -> Kind: ...

    def parse(self, raw: bytes, headers: Mapping[str, str], tenant: str) -> GatewayRequest: ...

    def error_json(self, error: APIError) -> bytes: ...

    def error_event(self, error: APIError, sequence: int = 0) -> bytes:
        """An error inside a stream that has started (the status line is gone); ``sequence``:
        the number it takes in a stream that numbers its events (the Responses API's)."""
        ...


class Bridge(Protocol):
    """Serves an API through a backend that speaks only Chat Completions (the local model):
    the request in chat form, the chat answer or stream rendered back into the API's."""

    def check(self, request: GatewayRequest) -> None:
        """A 400 for what the request's chat form may not carry, raised before the cache is
        looked in (pipeline._bridge): no answer stored for it (before it was refused) is
        served."""
        ...

    def to_chat(self, request: GatewayRequest) -> GatewayRequest: ...

    #: ``sampling``: the backend's ``sampling_defaults`` (what it applied to a request that
    #: set no ``temperature`` or ``top_p``), for an API whose answer echoes them.
    def from_chat(
        self, request: GatewayRequest, answer: Answer, sampling: Mapping[str, float]
    ) -> Answer: ...

    def from_chat_stream(
        self, request: GatewayRequest, stream: BackendStream, sampling: Mapping[str, float]
    ) -> BackendStream: ...


class Adapter(Wire, Protocol):
    """A wire format whose answers go through the tier walk: judge and render its answers.

    The tier walk calls only these methods, so a new API is a new adapter, not a new branch
    in the walk. Cached answers are stored in the adapter's own wire format, which is why the
    API (``kind``) is part of every cache scope.
    """

    def key(self, request: GatewayRequest, context_turns: int | None,
            context: ContextMode = "exact", *, native: bool = False) -> CacheKey:  # fmt: skip
        """The request's response-cache key. ``native``: the backend speaks the API itself (no
        chat ``Bridge``), so a field sent as the default the API documents is the field unset
        where the adapter knows such defaults (the Messages API's)."""
        ...

    def complete(self, request: GatewayRequest, answer: dict[str, Any]) -> bool:
        """Whether ``answer`` is complete and successful (only such answers are stored)."""
        ...

    def fold(self, request: GatewayRequest, *, cached: bool) -> Fold:
        """A fold for one stream; ``cached``: its answer goes to the response cache (else a
        fold whose adapter keeps nothing else may skip assembling it: ``result`` None)."""
        ...

    def fresh(self, request: GatewayRequest, stored: dict[str, Any]) -> dict[str, Any]:
        """A stored answer as a new response (a fresh id and creation time)."""
        ...

    def replay(self, request: GatewayRequest, stored: dict[str, Any]) -> Iterator[bytes]:
        """A stored answer as this API's SSE events, as a fresh answer would stream."""
        ...

    def saved_tokens(self, stored: dict[str, Any]) -> int:
        """Output tokens a cache hit of ``stored`` avoided generating."""
        ...

    def text(self, answer: dict[str, Any]) -> str:
        """What an answer says, as a reader sees it: its text and tool calls (``name(args)``),
        one part a line. The semantic audit compares two answers by it."""
        ...

    @property
    def bridge(self) -> Bridge | None:
        """How a chat-only backend serves this API (None: only backends that speak it)."""
        ...

    def delivered(self, request: GatewayRequest, answer: dict[str, Any], *, upstream: bool) -> None:
        """An answer reached the client (fresh, ``upstream``: from a backend that speaks the
        API itself; or from the cache): e.g. keep it for a later ``previous_response_id``."""
        ...
