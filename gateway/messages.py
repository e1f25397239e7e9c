"""The Anthropic Messages wire format: parse a request, render an answer (JSON and SSE), errors.

A request is validated only in the fields cachegate reasons about (``model``, ``max_tokens``,
``messages`` and their content blocks, ``system``, sampling parameters, ``tools``,
``tool_choice``, ``metadata``, ``service_tier``, ``stream``); every other field is kept as sent and forwarded
untouched. Errors use Anthropic's body and status codes::

    {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"}}

A stream is Anthropic's event sequence, each event named after its ``type``::

    event: message_start         {"type": "message_start", "message": {... "content": []}}
    event: content_block_start   {"index": 0, "content_block": {"type": "text", "text": ""}}
    event: ping
    event: content_block_delta   {"index": 0, "delta": {"type": "text_delta", "text": "Hi"}}
    event: content_block_stop    {"index": 0}
    event: message_delta         {"delta": {"stop_reason": "end_turn"}, "usage": {...}}
    event: message_stop

``MessageFold`` folds such events back into the message the response cache stores, and
``message_events`` replays a stored message as a fresh stream.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import msgspec

from semantic.keys import CacheKey, ContextMode, chat_key

from .canonical import Bridge, GatewayRequest
from .errors import APIError
from .prompt_cache import marks_accepted
from .requests import decode_body, gateway_request, integral, list_header, one_header
from .stored import ResponseStore

__all__ = [
    "ANTHROPIC_HEADERS",
    "COMPLETE_STOPS",
    "MESSAGE_STOP",
    "MessageFold",
    "MessagesAdapter",
    "client_credential",
    "complete_message",
    "encode_event",
    "error_event",
    "error_json",
    "fresh_message_id",
    "message_events",
    "messages_key",
    "parse_count_tokens",
    "parse_messages",
    "versioned",
]

#: Client headers of the Messages API that go upstream and into the cache scope (the version
#: and beta features change what an answer may hold).
ANTHROPIC_HEADERS = ("anthropic-version", "anthropic-beta")
#: Stop reasons of a complete answer; ``refusal``, ``pause_turn`` (a server tool's turn that
#: must be continued) or none at all are never stored.
COMPLETE_STOPS = frozenset({"end_turn", "max_tokens", "stop_sequence", "tool_use"})

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.decode

#: The last event of a complete stream, byte for byte as cachegate sends it.
MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'

#: Who owns what a request makes upstream, from its tenant and its ``Authorization``
#: (``responses.ResponsesAdapter.owner``: the tenant, or without gateway keys the client's key).
Owner = Callable[[str, Mapping[str, str]], str]


class MessagesAdapter:
    """The Messages API as the tier walk sees it (gateway.canonical.Adapter).

    Stored answers are Messages ``message`` objects; the API is part of every scope (see
    ``messages_key``), so they are only ever replayed through this adapter.

    ``owners`` (``owned``): the code execution containers an upstream answered in are claimed
    for their owner in the Responses API's store, and another owner's is a 404, never forwarded.
    """

    kind: Literal["messages"] = "messages"

    def __init__(
        self, bridge: Bridge | None = None, owners: tuple[ResponseStore, Owner] | None = None
    ) -> None:
        self._bridge = bridge
        self._owners = owners

    def owned(self, store: ResponseStore, owner: Owner) -> MessagesAdapter:
        """This adapter, keeping who owns each container in ``store`` (by ``owner``'s rule)."""
        return MessagesAdapter(self._bridge, (store, owner))

    def parse(self, raw: bytes, headers: Mapping[str, str], tenant: str) -> GatewayRequest:
        request = parse_messages(raw, headers, tenant)
        if self._owners is None:
            return request
        store, owner_of = self._owners
        checked, _ = client_credential(headers)  # (x-api-key too: one owner per client key)
        owner = owner_of(request.tenant, {"authorization": checked or ""})
        # NOTE: the upstream, called with the model's key (every tenant's), runs code execution
        # in any container made with that key, whoever names it: its code reads the files there
        container_id = _container_id(request.body.get("container"))
        if container_id is not None and store.foreign(owner, container_id):
            raise APIError(404, f"Container with id '{container_id}' not found.",
                           type="not_found_error")  # fmt: skip
        return dataclasses.replace(request, owner=owner)

    def key(self, request: GatewayRequest, context_turns: int | None,
            context: ContextMode = "exact", *, native: bool = False) -> CacheKey:  # fmt: skip
        return messages_key(request, context_turns, context, native=native)

    def complete(self, request: GatewayRequest, answer: dict[str, Any]) -> bool:
        return complete_message(answer)

    def fold(self, request: GatewayRequest, *, cached: bool) -> MessageFold:
        # (always assembled: its usage is spread over two events); the containers are claimed
        # as they arrive (a stream cut short may leave one upstream)
        self._claim(request, request.body.get("container"))  # (the upstream took it)
        return MessageFold(lambda container: self._claim(request, container))

    @property
    def bridge(self) -> Bridge | None:
        """How chat-only backends serve it (messages_bridge.MESSAGES has the bridge)."""
        return self._bridge

    def delivered(self, request: GatewayRequest, answer: dict[str, Any], *, upstream: bool) -> None:
        """Claim for its owner the container an upstream answered in (and the one the request
        named, which it ran in); nothing else is kept beyond the response cache."""
        if upstream:
            self._claim(request, request.body.get("container"))
            self._claim(request, answer.get("container"))

    def _claim(self, request: GatewayRequest, container: Any) -> None:
        container_id = _container_id(container)
        if self._owners is not None and container_id is not None and request.owner:
            self._owners[0].claim(request.owner, container_id)

    def fresh(self, request: GatewayRequest, stored: dict[str, Any]) -> dict[str, Any]:
        return {**stored, "id": fresh_message_id()}

    def replay(self, request: GatewayRequest, stored: dict[str, Any]) -> Iterator[bytes]:
        return map(encode_event, message_events(stored, message_id=fresh_message_id()))

    def saved_tokens(self, stored: dict[str, Any]) -> int:
        return int((stored.get("usage") or {}).get("output_tokens") or 0)

    def text(self, answer: dict[str, Any]) -> str:
        parts: list[str] = []
        for block in answer.get("content") or ():
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                parts.append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                parts.append(f"{block.get('name')}({_encode(block.get('input')).decode()})")
        return "\n".join(p for p in parts if p)

    def error_json(self, error: APIError) -> bytes:
        return error_json(error)

    def error_event(self, error: APIError, sequence: int = 0) -> bytes:
        return error_event(error)


def parse_messages(raw: bytes, headers: Mapping[str, str], tenant: str) -> GatewayRequest:
    """Decode and validate a ``POST /v1/messages`` body; raises APIError(400) on bad input."""
    body = _body(raw)
    _require(body, "max_tokens")
    _check_messages_body(body, count=False)
    request = _request(body, headers, tenant, stream=body.get("stream") is True)
    if _container_id(body.get("container")) is not None:
        # NOTE: the files in a code execution container the upstream keeps change with the
        # code run in it (and the files uploaded into it), which no key holds: an answer read
        # from them is neither served from nor stored in the cache (a new container's is)
        control = dataclasses.replace(request.control, no_cache=True, no_store=True)
        request = dataclasses.replace(request, control=control)
    return request


def parse_count_tokens(raw: bytes, headers: Mapping[str, str], tenant: str) -> GatewayRequest:
    """Decode and validate a ``POST /v1/messages/count_tokens`` body (no ``max_tokens``)."""
    body = _body(raw)
    _check_messages_body(body, count=True)
    return _request(body, headers, tenant, stream=False)


def messages_key(
    request: GatewayRequest,
    context_turns: int | None = None,
    context: ContextMode = "exact",
    *,
    native: bool = False,
) -> CacheKey:
    """The response-cache key of a Messages request.

    The scope is the chat scope's rule applied to this API: tenant, namespace, the API itself
    (``messages``: no answer is shared with /v1/chat/completions, whose requests differ in
    what they can ask), model, every body field but the turns (``system``, ``tools``,
    ``tool_choice``, ``max_tokens``, ``stop_sequences``, ``top_k``, unknown ones …) and the
    ``anthropic-version`` / ``anthropic-beta`` headers (the version an Anthropic upstream
    answers under: one sending none carries the configured one, see ``versioned``); the last
    user turn's text is the question compared by meaning, the earlier turns are scope. A
    documented field sent as null is the field left out, and an ``output_config`` left empty
    so is left out too, and so are ``cache_control`` marks the API takes (see ``_keyed``).
    ``native``: the model speaks this API itself (an Anthropic upstream, not the chat bridge),
    so a field sent as the default Anthropic documents for it is the field left out (see
    ``_defaults_unset``).
    """
    # NOTE: the headers go into the API's name, not the body: no body field can collide.
    api = "messages" + "".join(f"\n{h}: {v}" for h, v in request.api_headers)
    ns = request.control.namespace
    body = _keyed(request.body)
    if native:
        body = _defaults_unset(body, dict(request.api_headers).get("anthropic-version"))
    return chat_key(
        request.tenant, ns, request.model, body, context_turns, context, api=api,
        non_scope=_NON_SCOPE,
    )  # fmt: skip


def versioned(request: GatewayRequest, version: str) -> GatewayRequest:
    """``request`` under ``anthropic-version: version`` when it sends none (the version an
    Anthropic upstream answers it under: its key then holds it as the client's own)."""
    sent = dict(request.api_headers)
    if sent.get("anthropic-version"):
        return request
    api_headers = _api_headers({"anthropic-version": version, **sent})
    return dataclasses.replace(request, api_headers=api_headers)


def client_credential(headers: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(the ``Authorization`` the gateway checks, the credential to forward upstream).

    The anthropic SDK sends its key as ``x-api-key``; Claude Code with a token sends
    ``Authorization: Bearer``. Either authenticates a gateway key. Forwarded upstream (when the
    model has no key of its own) as the client sent it: ``"x-api-key <key>"`` or the
    ``Authorization`` value.
    """
    authorization = headers.get("authorization")
    key = headers.get("x-api-key")
    if authorization:
        return authorization, authorization
    if key:
        return f"Bearer {key}", f"x-api-key {key}"
    return None, None


def error_json(exc: APIError) -> bytes:
    """Anthropic's error body for ``exc`` (sent with ``exc.status``)."""
    kind = _anthropic_type(exc)
    return _encode({"type": "error", "error": {"type": kind, "message": exc.message}})


def error_event(exc: APIError) -> bytes:
    """An error inside a stream that has already started: ``event: error``."""
    kind = _anthropic_type(exc)
    return encode_event({"type": "error", "error": {"type": kind, "message": exc.message}})


def encode_event(event: dict[str, Any]) -> bytes:
    """One SSE event, named after its ``type``."""
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + _encode(event) + b"\n\n"


def fresh_message_id() -> str:
    return "msg_" + secrets.token_hex(12)


def complete_message(message: Any) -> bool:
    """A finished, successful answer: the only kind the response cache stores."""
    return (
        isinstance(message, dict)
        and message.get("type") == "message"
        and isinstance(message.get("content"), list)
        and isinstance(message.get("stop_reason"), str)  # (a list: unhashable)
        and message["stop_reason"] in COMPLETE_STOPS
    )


def message_events(
    message: dict[str, Any], *, message_id: str | None = None
) -> Iterator[dict[str, Any]]:
    """The events of a stream that delivers ``message`` (a replay of a stored answer)."""
    usage = dict(message.get("usage") or {})
    head = {
        k: v for k, v in message.items() if k not in ("content", "stop_reason", "stop_sequence")
    }
    head.update(
        id=message_id or message.get("id"), content=[], stop_reason=None, stop_sequence=None
    )
    head["usage"] = {**usage, "output_tokens": min(int(usage.get("output_tokens") or 0), 1)}
    yield {"type": "message_start", "message": head}
    yield {"type": "ping"}
    for index, block in enumerate(message.get("content") or ()):
        start, deltas = _block_deltas(block)
        yield {"type": "content_block_start", "index": index, "content_block": start}
        for delta in deltas:
            yield {"type": "content_block_delta", "index": index, "delta": delta}
        yield {"type": "content_block_stop", "index": index}
    stop = {
        "stop_reason": message.get("stop_reason"),
        "stop_sequence": message.get("stop_sequence"),
    }
    yield {"type": "message_delta", "delta": stop, "usage": usage}
    yield {"type": "message_stop"}


class MessageFold:
    """Folds a stream's events into the message they describe (what the cache stores)."""

    def __init__(self, claim: Callable[[Any], None] | None = None) -> None:
        #: Called with each ``container`` the stream names (``MessagesAdapter.fold``).
        self._claim = claim
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}  # input_json_delta pieces of tool_use blocks
        #: Text pieces by (block index, field), joined in ``result``. NOTE: each piece added to
        #: a string copied the text so far: quadratic in the pieces, on the event loop.
        self._texts: dict[tuple[int, str], list[str]] = {}
        self._stopped = False
        self._streamed = 0  # characters of generated text (see streamed)
        #: Something arrived that this assembler cannot fold: the answer is not stored.
        self.unjoinable: str | None = None

    def add(self, event: dict[str, Any]) -> bool:
        """Take one event (every event goes to the client too)."""
        self._add(event)
        return True

    def _add(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if self._claim is not None and kind in ("message_start", "message_delta"):
            held = event.get("message" if kind == "message_start" else "delta")
            self._claim(held.get("container") if isinstance(held, dict) else None)
        if kind == "message_start" and isinstance(event.get("message"), dict):
            self._message = dict(event["message"])
            self._message["usage"] = dict(self._message.get("usage") or {})
        elif kind == "content_block_start":
            index = int(event.get("index", 0))
            self._blocks[index] = dict(event.get("content_block") or {})
            self._texts = {k: v for k, v in self._texts.items() if k[0] != index}  # (a new one)
        elif kind == "content_block_delta":
            self._delta(int(event.get("index", 0)), event.get("delta") or {})
        elif kind == "message_delta" and self._message is not None:
            for field, value in (event.get("delta") or {}).items():
                self._message[field] = value
            # the message's fields the event holds beside its delta (the beta's
            # context_management, input_transformations): a null one leaves message_start's
            for field, value in event.items():
                if field not in ("type", "delta", "usage") and value is not None:
                    self._message[field] = value
            # NOTE: its counts are nullable, and a null one leaves message_start's (as the
            # SDKs read it): was a stored answer with null input tokens, and a booking of none
            usage = event.get("usage") or {}
            self._message["usage"].update({k: v for k, v in usage.items() if v is not None})
        elif kind == "message_stop":
            self._stopped = True

    def usage(self) -> dict[str, Any] | None:
        """``message_start``'s usage updated by ``message_delta``'s (complete or not)."""
        return dict(self._message["usage"]) if self._message is not None else None

    def streamed(self) -> int:
        return self._streamed

    def result(self) -> dict[str, Any] | None:
        """The whole message, or None when the stream did not finish or cannot be joined."""
        if self._message is None or not self._stopped or self.unjoinable is not None:
            return None
        for (index, field), pieces in self._texts.items():
            self._blocks[index][field] = "".join(pieces)
        for index, parts in self._json.items():
            text = "".join(parts)
            try:
                self._blocks[index]["input"] = _decode(text) if text else {}
            except msgspec.DecodeError:
                return None
        content = [self._blocks[i] for i in sorted(self._blocks)]
        return {**self._message, "content": content}

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self._blocks.get(index)
        kind = delta.get("type")
        text = delta.get(_GENERATED.get(str(kind), ""))
        self._streamed += len(text) if isinstance(text, str) else 0
        if block is None:
            self.unjoinable = "delta without a block"
            return
        field = _DELTA_FIELDS.get(str(kind))
        if kind == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json") or ""))
        elif kind == "citations_delta":  # (a start may say "citations": null)
            block["citations"] = [*(block.get("citations") or ()), delta.get("citation")]
        elif field is not None:
            pieces = self._texts.setdefault((index, field[1]), [str(block.get(field[1]) or "")])
            pieces.append(str(delta.get(field[0]) or ""))
        else:
            self.unjoinable = f"delta {kind!r}"


# ---------------------------------------------------------------------------------------------
# helpers

#: The field of each content delta that holds generated text (what ``streamed`` counts).
_GENERATED = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "input_json_delta": "partial_json",
}
#: delta type -> (its field, the block field it extends)
_DELTA_FIELDS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
    "signature_delta": ("signature", "signature"),
}

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_ANTHROPIC_TYPES = frozenset({*_TYPES.values(), "api_error", "billing_error", "timeout_error"})


#: The Messages fields that never change the answer (the chat side's ``NON_SCOPE_FIELDS``):
#: ``metadata`` holds only a user id, ``service_tier`` picks capacity. OpenAI's others
#: (``user``, ``store``, ``stream_options``, ``prompt_cache_key`` …) are unknown to this API,
#: refused by Anthropic and by the chat bridge: they stay in the scope, as any unknown field.
_NON_SCOPE = frozenset({"model", "stream", "metadata", "service_tier"})
#: The values of ``service_tier``, and the longest ``metadata.user_id``, Anthropic accepts.
_SERVICE_TIERS = ("auto", "standard_only")
_USER_ID_MAX = 256
#: Documented optional fields of a Messages request that read as unset when null (the chat
#: side's rule, semantic.keys): those cachegate checks, and those Anthropic's API reference
#: marks nullable. Clients that send every field they know (null when unset) then share the
#: entry of those that send none; an unknown field stays, as a backend may refuse it.
_NULL_IS_UNSET = frozenset({
    "system", "stop_sequences", "temperature", "top_p", "top_k", "tools", "tool_choice",
    "metadata", "stream", "cache_control", "container", "inference_geo", "speed",
})  # fmt: skip
#: The same for ``output_config``, which is left out when nothing else is in it.
_CONFIG_NULL_IS_UNSET = frozenset({"effort", "format"})
#: The same for a content block (a turn's, a tool result's, a system block) by its type, and
#: a custom tool (``type`` absent or null): e.g. the anthropic SDK sends a text block of an
#: answer back with the ``"citations": null`` it got.
_BLOCK_NULL_IS_UNSET = {
    "text": frozenset({"cache_control", "citations"}),
    "document": frozenset({"cache_control", "citations", "context", "title"}),
    "tool_result": frozenset({"cache_control", "is_error"}),  # (null accepted as unset)
    **dict.fromkeys(("image", "tool_use", "custom", None), frozenset({"cache_control"})),
}
#: The ``anthropic-version`` under which ``temperature`` defaults to 1.0 (``_defaults_unset``).
_DEFAULT_VERSION = "2023-06-01"


def _keyed(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as its cache key reads it: less the documented fields that are null, in it and
    in its blocks (never inside a tool's ``input`` or ``input_schema``, where null is a value),
    and less its ``cache_control`` marks (top-level, on tools, system and content blocks) when
    the API takes them (``prompt_cache.marks_accepted``).

    NOTE: a mark asks Anthropic to cache the prompt up to it, never for another answer, and
    agents (Claude Code) move theirs every turn; but a request with marks the API refuses (a
    fifth one, a ``1h`` after a ``5m``, one on a thinking block) keeps them, so no hit answers
    what a miss refuses."""
    unmark = marks_accepted(body)
    keyed = {k: v for k, v in body.items() if not (v is None and k in _NULL_IS_UNSET)}
    if unmark:
        keyed.pop("cache_control", None)
    if isinstance(keyed.get("output_config"), dict):  # (e.g. the SDK's {"format": None})
        config = {k: v for k, v in keyed.pop("output_config").items()
                  if not (v is None and k in _CONFIG_NULL_IS_UNSET)}  # fmt: skip
        keyed.update({"output_config": config} if config else {})  # ({}: the defaults)
    for field in ("system", "tools"):
        if isinstance(keyed.get(field), list):
            keyed[field] = [_block_keyed(b, unmark) for b in keyed[field]]
    if isinstance(keyed.get("system"), list):
        keyed["system"] = _as_text(keyed["system"])
    if isinstance(keyed.get("messages"), list):
        keyed["messages"] = [
            {**m, "content": [_block_keyed(b, unmark) for b in m["content"]]}
            if isinstance(m, dict) and isinstance(m.get("content"), list)
            else m
            for m in keyed["messages"]
        ]
    return keyed


def _block_keyed(block: Any, unmark: bool) -> Any:
    if not isinstance(block, dict):
        return block
    kind = block.get("type")  # (any JSON: a tool's is not checked here, its upstream judges it)
    unset = _BLOCK_NULL_IS_UNSET.get(kind, frozenset()) if isinstance(kind, str) else frozenset()
    keyed = {k: v for k, v in block.items() if not (v is None and k in unset)}
    if unmark:
        keyed.pop("cache_control", None)
    if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
        keyed["content"] = _as_text([_block_keyed(b, unmark) for b in block["content"]])
    return keyed


def _defaults_unset(body: dict[str, Any], version: str | None) -> dict[str, Any]:
    """``body`` (``_keyed``) less the fields an Anthropic upstream reads as left unset:
    ``tool_choice: {"type": "auto"}`` with tools (auto is the default then; not with
    ``disable_parallel_tool_use: true``, which asks for one call at most), and ``temperature:
    1`` under ``anthropic-version: 2023-06-01`` (documented as the default there) without a
    ``top_p``.

    NOTE: only where a miss takes both alike: ``2026-10-21`` refuses ``temperature`` at any
    value, 1 too; recent models refuse ``temperature`` beside ``top_p``, even at the defaults;
    a request sent with no ``anthropic-version`` is keyed under the model's configured one
    (``versioned``, before its key is taken). And only for an Anthropic upstream: the chat bridge's backends apply
    their own defaults (the local model its generation config's temperature)."""
    keyed = dict(body)
    tools = keyed.get("tools")
    if isinstance(tools, list) and tools and _is_auto(keyed.get("tool_choice")):
        del keyed["tool_choice"]
    temperature = keyed.get("temperature")
    one = isinstance(temperature, int | float) and not isinstance(temperature, bool)
    if one and temperature == 1 and version == _DEFAULT_VERSION and "top_p" not in keyed:
        del keyed["temperature"]
    return keyed


def _is_auto(choice: Any) -> bool:
    """``{"type": "auto"}``, with ``disable_parallel_tool_use`` left false at most."""
    return (
        isinstance(choice, dict)
        and choice.get("type") == "auto"
        and choice.keys() <= {"type", "disable_parallel_tool_use"}
        and choice.get("disable_parallel_tool_use", False) is False
    )


def _as_text(blocks: list[Any]) -> Any:
    """``blocks`` (a ``system`` or a tool result's content, null fields left out) as its key
    reads them: one text block is its text, as Anthropic documents a string there (and the chat
    bridge reads both alike; the SDKs send either: the Vercel AI SDK a ``system`` of blocks).
    NOTE: not an empty text, which a string may be and a text block may not."""
    block = blocks[0] if len(blocks) == 1 else None
    if isinstance(block, dict) and block.keys() == {"type", "text"} and block["type"] == "text":
        return block["text"] if isinstance(block["text"], str) and block["text"] else blocks
    return blocks


def _container_id(container: Any) -> str | None:
    """The id a request's or an answer's ``container`` names: the id, or ``{"id": ...}``."""
    if isinstance(container, dict):
        container = container.get("id")
    return container if isinstance(container, str) and container else None


def _anthropic_type(exc: APIError) -> str:
    """NOTE: an upstream's own Anthropic error type (``overloaded_error`` …) is kept; statuses
    the gateway uses that Anthropic does not (499, 502, 508) are typed by their class."""
    # (OpenAI calls a 404 or 422 an invalid_request_error too; Anthropic names them by status)
    if exc.type in _ANTHROPIC_TYPES and not (exc.type == _TYPES[400] and exc.status != 400):
        return exc.type
    if exc.status in _TYPES:
        return _TYPES[exc.status]
    return "api_error" if exc.status >= 500 else "invalid_request_error"


def _body(raw: bytes) -> dict[str, Any]:
    try:
        body = decode_body(raw)
    except APIError as exc:  # the same checks, in Anthropic's words
        raise _invalid(exc.message) from None
    integral(body, ("max_tokens", "top_k"))  # (3.0 is 3, as in chat: requests.integral)
    return body


def _request(
    body: dict[str, Any], headers: Mapping[str, str], tenant: str, *, stream: bool
) -> GatewayRequest:
    extension = body.pop("cache", None)
    request = gateway_request("messages", body, headers, tenant, extension, stream=stream)
    return dataclasses.replace(request, api_headers=_api_headers(headers), account=())


def _api_headers(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``ANTHROPIC_HEADERS`` of ``headers`` that are set, in that order (the key's).

    NOTE: ``anthropic-beta`` is a list: its lines are joined, as HTTP combines them (the
    first alone went upstream and into the key: a hit made under two betas answered one);
    ``anthropic-version`` takes one value (given twice: a 400).
    """
    betas = (b.strip() for b in list_header(headers, "anthropic-beta").split(","))
    found = {"anthropic-version": one_header(headers, "anthropic-version"),
             "anthropic-beta": ",".join(b for b in betas if b)}  # fmt: skip
    return tuple((h, value) for h in ANTHROPIC_HEADERS if (value := found[h]))


def _check_messages_body(body: dict[str, Any], *, count: bool) -> None:
    _require(body, "model")
    _require(body, "messages")
    _typed(body, "model", str)
    # (count_tokens takes none; one that is sent is checked as here, not read raw later)
    _integer(body, "max_tokens", 1, optional=count)
    _check_list(body, "messages", _check_message)
    if not body["messages"]:
        raise _invalid("messages: at least one message is required")
    _check_not_empty(body["messages"])
    _check_tool_results(body["messages"])
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        if not isinstance(system, list):
            raise _invalid("system: Input should be a valid string or a list of text blocks")
        for i, block in enumerate(system):
            _check_block(block, f"system.{i}", allowed=("text",))
        # NOTE: an empty block was answered with an empty system prompt in place of the
        # model's own (where ``""`` and ``[]`` keep it) and the answer stored: refused as
        # Anthropic refuses an empty text block in a turn
        if any(block["text"] == "" for block in system):
            raise _invalid("system: text content blocks must be non-empty")
    for name, high in (("temperature", 1.0), ("top_p", 1.0)):
        _number(body, name, 0.0, high)
    _integer(body, "top_k", 0, optional=True)
    _typed(body, "stream", bool, optional=True)
    _check_metadata(body)
    stops = body.get("stop_sequences")
    if stops is not None and not (
        isinstance(stops, list) and all(isinstance(s, str) for s in stops)
    ):
        raise _invalid("stop_sequences: Input should be a valid list of strings")
    _check_list(body, "tools", _check_tool, optional=True)
    if body.get("tool_choice") is not None:
        _check_tool_choice(body["tool_choice"])


def _check_metadata(body: dict[str, Any]) -> None:
    """``metadata`` and ``service_tier`` as Anthropic checks them. NOTE: neither is in the
    cache key (see ``_NON_SCOPE``), so a hit, like the bridge, which sends neither, would
    answer what Anthropic refuses: they are checked here, the same for a hit and a miss."""
    _typed(body, "metadata", dict, optional=True)
    metadata = body.get("metadata") or {}
    for field in metadata:  # (Anthropic's holds only a user id)
        if field != "user_id":
            raise _invalid(f"metadata.{field}: Extra inputs are not permitted")
    _typed(metadata, "user_id", str, optional=True, path="metadata")
    if len(metadata.get("user_id") or "") > _USER_ID_MAX:
        raise _invalid(f"metadata.user_id: String should have at most {_USER_ID_MAX} characters")
    if body.get("service_tier") not in (None, *_SERVICE_TIERS):
        raise _invalid("service_tier: Input should be 'auto' or 'standard_only'")


def _check_message(message: Any, path: str) -> None:
    if not isinstance(message, dict):
        raise _invalid(f"{path}: Input should be a valid dictionary")
    if message.get("role") not in ("user", "assistant"):
        raise _invalid(f"{path}.role: Input should be 'user' or 'assistant'")
    content = message.get("content")
    if "content" not in message:
        raise _invalid(f"{path}.content: Field required")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _invalid(f"{path}.content: Input should be a valid string or a list of blocks")
    for i, block in enumerate(content):
        _check_block(block, f"{path}.content.{i}")


def _check_not_empty(messages: list[dict[str, Any]]) -> None:
    """Anthropic refuses a turn with no content (``""`` or ``[]``) but the final assistant one
    (a prefill of nothing), empty or blank text, and a prefill ending in whitespace. NOTE:
    checked here, not left to the upstream, so every backend and a cache hit answer it alike
    (the chat bridge read ``[]`` as ``""`` and the local model or an OpenAI upstream answered
    it, and the answer was stored)."""
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if message["content"] in ("", []) and not (i == last and message["role"] == "assistant"):
            raise _invalid(f"messages.{i}: all messages must have non-empty content except for "
                           "the optional final assistant message")  # fmt: skip
    for message in messages:
        _check_texts(message["content"])
    _check_prefill(messages[-1])


def _check_tool_results(messages: list[dict[str, Any]]) -> None:
    """Anthropic refuses a ``tool_result`` whose ``tool_use_id`` no ``tool_use`` block of the
    message just before it holds, in its words. NOTE: checked here for every backend (the chat
    bridge refused it in the chat form's words, a ``tool`` message the client never sent)."""
    for i, message in enumerate(messages):
        if isinstance(message["content"], str):
            continue
        before = messages[i - 1]["content"] if i else []
        called = (
            {block["id"] for block in before if block["type"] == "tool_use"}
            if isinstance(before, list) and messages[i - 1]["role"] == "assistant"
            else set()
        )
        for j, block in enumerate(message["content"]):
            if block["type"] == "tool_result" and block["tool_use_id"] not in called:
                raise _invalid(
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {block['tool_use_id']}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )


def _check_texts(content: str | list[dict[str, Any]]) -> None:
    """Anthropic refuses an empty text block anywhere, and a turn of text alone that is all
    whitespace (a string, or text blocks none of which holds more; ``[" ", "Hi"]`` is
    answered), in its words (with no index). NOTE: checked here for every backend, before the cache (the bridge
    and the local model answered them, and the answer was stored)."""
    texts = [content] if isinstance(content, str) else [
        block["text"] for block in content if block["type"] == "text"
    ]  # fmt: skip
    if isinstance(content, list) and "" in texts:
        raise _invalid("messages: text content blocks must be non-empty")
    # (a turn that holds other blocks too, a tool call or result beside a "\n": no quoted
    # refusal shows Anthropic refusing it, so it is left to the upstream)
    only_text = isinstance(content, str) or len(texts) == len(content)
    blank = any(text and not text.strip() for text in texts) and not any(t.strip() for t in texts)
    if only_text and blank:
        raise _invalid("messages: text content blocks must contain non-whitespace text")


def _check_prefill(message: dict[str, Any]) -> None:
    """Anthropic refuses a final assistant turn (a prefill) whose text, or last block's text,
    ends with whitespace: the model would continue after it (in its words, no index)."""
    last = message["content"]
    last = last[-1] if isinstance(last, list) and last else last
    if isinstance(last, dict) and last["type"] == "text":
        last = last["text"]
    if message["role"] == "assistant" and isinstance(last, str) and last != last.rstrip():
        raise _invalid("messages: final assistant content cannot end with trailing whitespace")


def _check_block(block: Any, path: str, allowed: tuple[str, ...] | None = None) -> None:
    """Known block types are checked; others (image, document, server tools …) pass on."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise _invalid(f"{path}.type: Field required")
    kind = block["type"]
    if allowed is not None and kind not in allowed:
        raise _invalid(f"{path}.type: Input tag '{kind}' is not allowed here (expected 'text')")
    if kind == "text":
        _require(block, "text", path)
        _typed(block, "text", str, path=path)
    elif kind == "tool_use":
        for field in ("id", "name"):
            _require(block, field, path)
            _typed(block, field, str, path=path)
        _require(block, "input", path)
        _typed(block, "input", dict, path=path)
    elif kind == "tool_result":
        _require(block, "tool_use_id", path)
        _typed(block, "tool_use_id", str, path=path)
        _typed(block, "is_error", bool, optional=True, path=path)
        content = block.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _invalid(f"{path}.content: Input should be a valid string or a list of blocks")
        for i, inner in enumerate(content if isinstance(content, list) else ()):
            _check_block(inner, f"{path}.content.{i}")


def _check_tool(tool: Any, path: str) -> None:
    if not isinstance(tool, dict):
        raise _invalid(f"{path}: Input should be a valid dictionary")
    if tool.get("type") not in (None, "custom"):
        return  # a server tool (web_search_…, bash_…): the upstream checks it
    _require(tool, "name", path)
    _typed(tool, "name", str, path=path)
    _require(tool, "input_schema", path)
    _typed(tool, "input_schema", dict, path=path)


def _check_tool_choice(choice: Any) -> None:
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise _invalid("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
    if choice["type"] == "tool" and not isinstance(choice.get("name"), str):
        raise _invalid("tool_choice.name: Field required")


def _check_list(body: dict[str, Any], name: str, check: Any, optional: bool = False) -> None:
    value = body.get(name)
    if value is None and optional:
        return
    if not isinstance(value, list):
        raise _invalid(f"{name}: Input should be a valid list")
    for i, item in enumerate(value):
        check(item, f"{name}.{i}")


def _require(obj: dict[str, Any], field: str, path: str = "") -> None:
    if field not in obj:
        raise _invalid(f"{path + '.' if path else ''}{field}: Field required")


def _typed(
    obj: dict[str, Any], field: str, kind: type, *, optional: bool = False, path: str = ""
) -> None:
    value = obj.get(field)
    if value is None and optional:
        return
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        name = {str: "string", dict: "dictionary", bool: "boolean"}.get(kind, kind.__name__)
        raise _invalid(f"{path + '.' if path else ''}{field}: Input should be a valid {name}")


def _integer(body: dict[str, Any], name: str, low: int, optional: bool = False) -> None:
    value = body.get(name)
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise _invalid(f"{name}: Input should be a valid integer")
    if value < low:
        raise _invalid(f"{name}: Input should be greater than or equal to {low}")


def _number(body: dict[str, Any], name: str, low: float, high: float) -> None:
    value = body.get(name)
    if value is None:
        return
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _invalid(f"{name}: Input should be a valid number")
    if not low <= value <= high:
        raise _invalid(f"{name}: Input should be between {low:g} and {high:g}")


def _invalid(message: str) -> APIError:
    return APIError(400, message, type="invalid_request_error")


def _block_deltas(block: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A content block as its ``content_block_start`` and its deltas."""
    kind = block.get("type")
    if kind == "text":
        start = {k: v for k, v in block.items() if k != "citations"}
        deltas = (
            [{"type": "text_delta", "text": block.get("text", "")}] if block.get("text") else []
        )
        deltas += [{"type": "citations_delta", "citation": c} for c in block.get("citations") or ()]
        return {**start, "text": ""}, deltas
    if kind in ("tool_use", "server_tool_use"):
        arguments = _encode(block.get("input") or {}).decode()
        return {**block, "input": {}}, [{"type": "input_json_delta", "partial_json": arguments}]
    if kind == "thinking":
        deltas = [{"type": "thinking_delta", "thinking": block.get("thinking", "")}]
        if block.get("signature"):
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        return {**block, "thinking": "", "signature": ""}, deltas
    return block, []  # redacted_thinking, tool results of server tools: whole in the start
