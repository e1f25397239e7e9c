"""Messages requests for models that speak only Chat Completions (the local model, OpenAI upstreams).

``MessagesBridge`` is the Messages adapter's chat bridge (gateway.canonical.Bridge), the same
mechanism the Responses API uses: the tier walk sends such a backend the chat request that
means the same (``system`` → a system message, ``tool_use`` → ``tool_calls``, ``tool_result`` →
``tool`` messages, their text after ``Error: `` when ``is_error``, ``stop_sequences`` →
``stop``, ``tool_choice``'s ``disable_parallel_tool_use`` → ``parallel_tool_calls: false``,
``output_config``'s ``format`` → a ``json_schema`` ``response_format``;
``top_k`` goes in the request's ``top_k``, which the local model honours and an upstream is
not sent, as OpenAI refuses the field) and renders the chat answer back as a Messages answer,
JSON or SSE (a chat ``refusal`` as the text of a ``stop_reason: "refusal"`` answer). Plain string turns stay strings, so the local model's chat template
renders turn N+1's prompt as turn N's prompt plus the new turns, and its prefix KV cache is
reused turn after turn. ``MESSAGES`` is the Messages adapter with this bridge.

A request whose last turn is the assistant's (a prefill) asks Anthropic to continue that text:
its answer is only the continuation. The chat request says so in ``continue_final``, which the
local model honours (the turn is left open in its prompt); an OpenAI upstream cannot, and
answers with a new turn as before.

Usage is normalised to Anthropic's: ``input_tokens`` excludes the prompt tokens read from a
cache, which ``cache_read_input_tokens`` counts (the chat usage's ``cached_tokens``).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from .backend import Answer, Backend, BackendStream, StreamEvent
from .errors import APIError
from .messages import MessagesAdapter, encode_event, error_event, fresh_message_id
from .requests import GatewayRequest

__all__ = [
    "MESSAGES",
    "MessageTokenCounter",
    "MessagesBridge",
    "TokenCounter",
    "count_tokens",
    "from_chat",
    "named_as_sent",
    "stop_of",
    "to_chat",
]

_decode = msgspec.json.decode
_encode = msgspec.json.encode

#: Messages fields the conversion carries over; any other field changes what the request asks
#: for in a way a chat model cannot honour, so it is refused rather than dropped.
_CARRIED = frozenset({
    "model", "max_tokens", "messages", "system", "stop_sequences", "temperature", "top_p",
    "top_k", "stream", "tools", "tool_choice", "metadata", "service_tier", "output_config",
})  # fmt: skip
#: Other fields with the value that asks for what a chat model does anyway: accepted, not sent.
_DEFAULTS = {"thinking": {"type": "disabled"}}
#: Fields that never change the answer, only what Anthropic caches of the prompt (top-level
#: ``cache_control``: automatic caching): accepted, not sent, as a block's ``cache_control``.
_HINTS = frozenset({"cache_control"})
#: A custom tool's fields that change what the model is shown or may do, which a chat
#: function cannot carry: accepted (and not sent) only with a value that asks for nothing.
_TOOL_DEFAULTS: dict[str, Callable[[Any], bool]] = {
    "input_examples": lambda examples: examples == [],
    "defer_loading": lambda deferred: deferred is False,
    "allowed_callers": lambda callers: isinstance(callers, list) and "direct" in callers,
}
#: Chat fields an error may name, as a Messages request calls them (``max_tokens`` goes to an
#: upstream that refuses it as ``max_completion_tokens``: pipeline._renamed).
_PARAMS = {"stop": "stop_sequences", "max_completion_tokens": "max_tokens",
           "response_format": "output_config.format"}  # fmt: skip
#: A chat message's ``tool_calls``: what the bridge made of ``tool_use`` blocks.
_TOOL_CALLS = re.compile(r"messages\[\d+\]\.tool_calls")
#: A chat message named in an error: ``messages[2]``, or ``messages.[2]`` as OpenAI writes some;
#: with one of its tool calls (``.tool_calls[0]``, and that call's ``.function.name``) or a
#: ``tool`` message's ``.tool_call_id``: each is a content block of the client's turn.
_CHAT_MESSAGE = re.compile(
    r"\bmessages(\.?)\[(\d+)\]"
    r"(?:\.tool_calls\.?\[(\d+)\](?:\.function\.(name|arguments)\b)?|(\.tool_call_id)\b)?"
)
#: A tool call's fields as a ``tool_use`` block calls them.
_CALL_FIELDS = {"name": ".name", "arguments": ".input", None: ""}
#: A tool's function field named in an error (``tools[1].function.description``: OpenAI takes
#: up to 1024 characters, Anthropic more), or the function ``tool_choice`` names.
_CHAT_TOOL = re.compile(
    r"\b(tools\.?\[\d+\]|tool_choice)\.function\.(name|description|parameters)(?![\w\[])"
)
#: A function's fields as a Messages tool calls them.
_TOOL_FIELDS = {"name": "name", "description": "description", "parameters": "input_schema"}
#: Seconds of a bridged stream's chunks that are no Messages event (reasoning) before the
#: client is sent a ``ping`` (a local model's keep-alive comes as often: local._KEEPALIVE_EVERY).
_PING_EVERY = 15.0
#: What OpenAI's strict mode cannot take (``_strict``), what makes a subschema typed, and the
#: string formats it knows.
_NOT_STRICT = frozenset({"allOf", "oneOf", "not", "if", "then", "else", "prefixItems",
                         "patternProperties", "dependentRequired", "dependentSchemas",
                         "definitions"})  # fmt: skip
_TYPED = frozenset({"type", "anyOf", "$ref", "enum", "const"})
_STRICT_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname",
                             "ipv4", "ipv6", "uuid"})  # fmt: skip
_STOPS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
          "function_call": "tool_use", "content_filter": "refusal", "eos": "end_turn"}  # fmt: skip


@runtime_checkable
class TokenCounter(Protocol):
    """A backend that can count a chat request's prompt tokens without running the model (the
    local model)."""

    async def count_tokens(self, request: GatewayRequest, auth: str | None = None) -> int: ...


@runtime_checkable
class MessageTokenCounter(Protocol):
    """A backend whose upstream counts a Messages request's input tokens (the Anthropic API):
    ``{"input_tokens": n}``, with the upstream's headers to relay."""

    async def count_message_tokens(
        self, request: GatewayRequest, auth: str | None = None
    ) -> Answer: ...


class MessagesBridge:
    """Messages through a chat backend (see the module docstring)."""

    def check(self, request: GatewayRequest) -> None:
        """Nothing: a turn with no content was refused for every model as the request was read
        (messages.parse_messages), in Anthropic's words."""

    def to_chat(self, request: GatewayRequest) -> GatewayRequest:
        body = to_chat(request.body)
        prefill = request.body["messages"][-1]["role"] == "assistant"
        return dataclasses.replace(request, kind="chat", body=body, include_usage=True,
                                   continue_final=prefill, top_k=request.body.get("top_k"))  # fmt: skip

    def from_chat(
        self, request: GatewayRequest, answer: Answer, sampling: Mapping[str, float]
    ) -> Answer:
        message = from_chat(answer.body, request.model, _stops(request))
        # NOTE: tool arguments that are not a JSON object (e.g. cut off by max_tokens) reach
        # the client as {}: never stored, as the streamed path does not store them either
        return Answer(message, answer.headers, lossless=_arguments_kept(answer.body))

    def from_chat_stream(
        self, request: GatewayRequest, stream: BackendStream, sampling: Mapping[str, float]
    ) -> BackendStream:
        return _MessagesStream(stream, request.model, _stops(request))


_BRIDGE = MessagesBridge()
#: The Messages adapter, whose chat-only backends are served through ``MessagesBridge``.
MESSAGES = MessagesAdapter(_BRIDGE)


async def count_tokens(backend: Backend, request: GatewayRequest, auth: str | None) -> Answer:
    """``POST /v1/messages/count_tokens``: ``{"input_tokens": n}`` asked of an Anthropic
    upstream (with its headers to relay), counted by the local model's tokenizer for the chat
    form of the request; other backends cannot (400)."""
    if "messages" in backend.apis and isinstance(backend, MessageTokenCounter):
        return await backend.count_message_tokens(request, auth)
    if "chat" in backend.apis and isinstance(backend, TokenCounter):
        try:
            return Answer({"input_tokens": await backend.count_tokens(_BRIDGE.to_chat(request))})
        except APIError as exc:  # (as a create's: pipeline._params_of)
            named_as_sent(request.body, exc)
            raise
    raise APIError(
        400,
        f"Counting tokens is not supported for model '{backend.name}'.",
        type="invalid_request_error",
    )


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The Chat Completions body asking what the Messages ``body`` asks."""
    for field, value in body.items():
        if field not in _CARRIED | _HINTS and value is not None and value != _DEFAULTS.get(field):
            raise _unsupported(f"'{field}'")
    chat: dict[str, Any] = {"model": body["model"]}
    if body.get("max_tokens") is not None:  # (count_tokens requests have none)
        chat["max_tokens"] = body["max_tokens"]
    messages = [*_system(body.get("system"))]
    for message in body["messages"]:
        messages.extend(_turn(message))
    chat["messages"] = messages
    for field in ("temperature", "top_p", "stream"):  # (top_k: see MessagesBridge.to_chat)
        if body.get(field) is not None:
            chat[field] = body[field]
    if body.get("stop_sequences"):
        chat["stop"] = list(body["stop_sequences"])
    if body.get("output_config") is not None:
        chat.update(_output_config(body["output_config"]))
    if body.get("tools"):
        chat["tools"] = [_tool(t) for t in body["tools"]]
    choice = body.get("tool_choice")
    # (OpenAI refuses tool_choice in a request without tools: "auto" and "none" then ask
    # for nothing, as clients that fill in every field send them; "any" and "tool" go on)
    if choice is not None and (chat.get("tools") or choice.get("type") not in ("auto", "none")):
        chat["tool_choice"] = _tool_choice(choice)
        # (OpenAI refuses parallel_tool_calls in a request without tools)
        if choice.get("disable_parallel_tool_use") and chat.get("tools"):
            chat["parallel_tool_calls"] = False
    return chat


def named_as_sent(body: dict[str, Any], exc: APIError) -> None:
    """Name in ``exc``, an error about the chat form of the Messages request ``body``, what it
    names as the client sent it: in its ``param``, and in its message (Anthropic's error
    bodies have no ``param``): ``stop takes up to 64 …`` → ``stop_sequences takes up to 64 …``,
    ``max_completion_tokens`` → ``max_tokens``, a chat message's ``tool_calls`` → ``tool_use``,
    and a chat message by the client's index (``messages[3]`` → ``messages[2]``, see
    ``_client_paths``)."""
    param = exc.param or ""
    named = "tool_use" if _TOOL_CALLS.fullmatch(param) else _PARAMS.get(param, exc.param)
    if param:
        where = re.compile(rf"(?<![\w.\[]){re.escape(param)}(?![\w.\[])")
        exc.message = where.sub(str(named), exc.message, count=1)
    exc.message = _client_paths(body, exc.message)
    exc.param = _client_paths(body, named) if named else named


def _client_paths(body: dict[str, Any], text: str) -> str:
    """``text`` with each chat message it names (``messages[3]``, or OpenAI's ``messages.[3]``)
    named as the client sent it: by its index in the client's ``messages`` (a system prompt
    and a turn's tool results are chat messages of their own, so the indices differ), or as
    ``system``; a tool call, or a ``tool`` message, as the content block it was made of
    (``messages[3].tool_calls[0].id`` → ``messages[2].content[1].id``); a tool's function field
    as the tool's (``tools[1].function.parameters`` → ``tools[1].input_schema``: the bridge
    sends the client's tools in their order)."""

    def named(match: re.Match[str]) -> str:
        dot, index = match.group(1), int(match.group(2)) - len(_system(body.get("system")))
        if index < 0:
            return "system"
        for i, message in enumerate(body["messages"]):
            made = _made_of(message)
            if index >= len(made):
                index -= len(made)
                continue
            turn, (result, calls) = f"messages{dot}[{i}]", made[index]
            if result is not None:  # a tool message: one tool_result block
                field = ".tool_use_id" if match.group(5) else ""
                return f"{turn}.content{dot}[{result}]{field}"
            call = match.group(3)
            if call is None or int(call) >= len(calls):  # (the message's own index only)
                return turn + match.group(0)[match.end(2) + 1 - match.start() :]
            return f"{turn}.content{dot}[{calls[int(call)]}]{_CALL_FIELDS[match.group(4)]}"
        return match.group(0)

    text = _CHAT_TOOL.sub(lambda m: f"{m.group(1)}.{_TOOL_FIELDS[m.group(2)]}", text)
    return _CHAT_MESSAGE.sub(named, text)


def _made_of(message: dict[str, Any]) -> list[tuple[int | None, list[int]]]:
    """What each chat message of a Messages turn (see ``_turn``) was made of: a ``tool``
    message's ``tool_result`` block index, or (None, the indices of the ``tool_use`` blocks
    that are the message's ``tool_calls``, in their order)."""
    content = message["content"]
    if isinstance(content, str):
        return [(None, [])]
    role, kinds = message["role"], [block.get("type") for block in content]
    results = [j for j, kind in enumerate(kinds) if kind == "tool_result" and role == "user"]
    calls = [j for j, kind in enumerate(kinds) if kind == "tool_use" and role == "assistant"]
    made: list[tuple[int | None, list[int]]] = [(j, []) for j in results]
    if "text" in kinds or calls or not results:
        made.append((None, calls))
    return made


def from_chat(chat: dict[str, Any], model: str, stops: Sequence[str] = ()) -> dict[str, Any]:
    """The Messages answer for a chat completion (its first choice); ``stops``: the request's
    ``stop_sequences``."""
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):  # (an empty answer has no block, as Anthropic's and a stream's)
        content.append({"type": "text", "text": message.get("content") or ""})
    refusal = message.get("refusal")
    if refusal and isinstance(refusal, str):  # (OpenAI's: the model declined, in its words)
        content.append({"type": "text", "text": refusal})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id") or _tool_id(),
                        "name": function.get("name", ""),
                        "input": _arguments(function.get("arguments")) or {}})  # fmt: skip
    return {
        "id": fresh_message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        **stop_of(choice, stops, called=bool(message.get("tool_calls")), refused=bool(refusal)),
        "usage": _usage(chat.get("usage") or {}),
    }


def stop_of(
    choice: dict[str, Any], stops: Sequence[str], *, called: bool, refused: bool = False
) -> dict[str, Any]:
    """``stop_reason`` and ``stop_sequence`` of a Messages answer, from its chat choice;
    ``called``: the answer calls a tool; ``refused``: it has a ``refusal`` (OpenAI's model
    declined, with ``finish_reason: "stop"``), which Anthropic calls ``stop_reason: "refusal"``.

    Chat says ``finish_reason: "stop"`` for the end of a turn, for a stop sequence and (OpenAI,
    when ``tool_choice`` names a function) for a tool call. The choice's ``stop_reason`` (vLLM,
    SGLang and the local model: the stop string that ended it) tells a stop sequence apart; an
    upstream that does not send it (OpenAI) reads as ``end_turn``.

    >>> stop_of({"finish_reason": "stop", "stop_reason": "END"}, ["END"], called=False)
    {'stop_reason': 'stop_sequence', 'stop_sequence': 'END'}
    >>> stop_of({"finish_reason": "length"}, [], called=False)
    {'stop_reason': 'max_tokens', 'stop_sequence': None}
    >>> stop_of({"finish_reason": "stop"}, [], called=True)
    {'stop_reason': 'tool_use', 'stop_sequence': None}
    >>> stop_of({"finish_reason": "stop"}, [], called=False, refused=True)
    {'stop_reason': 'refusal', 'stop_sequence': None}
    """
    if refused:
        return {"stop_reason": "refusal", "stop_sequence": None}
    finish = choice.get("finish_reason") or ""
    matched = choice.get("stop_reason")
    if finish == "stop" and isinstance(matched, str) and matched in stops:
        return {"stop_reason": "stop_sequence", "stop_sequence": matched}
    if finish == "stop" and called:
        finish = "tool_calls"
    return {"stop_reason": _STOPS.get(finish, finish or None), "stop_sequence": None}


# ---------------------------------------------------------------------------------------------
# helpers


class _MessagesStream:
    """A chat stream re-told as Messages events."""

    def __init__(self, inner: BackendStream, model: str, stops: Sequence[str]) -> None:
        self._inner = inner
        self.headers = inner.headers
        self._model = model
        self._stops = stops
        self._started = False
        self._open: tuple[int, str] | None = None  # (index, "text" | tool call index)
        self._call_id = ""  # the id of the tool call last started
        # calls that began while another call's block was open: {which: {id, name, arguments}}
        self._held: dict[str, dict[str, str]] = {}
        self._next = 0
        self._stop: dict[str, Any] = {"stop_reason": None, "stop_sequence": None}
        self._called = False  # a tool call was streamed
        self._refused = False  # a refusal was streamed (as text)
        self._usage: dict[str, Any] = {}
        self._sent_at = time.monotonic()  # when the client was last sent an event

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        async for event in self._inner:
            if event.error:
                message = _error_message(event.chunk)
                yield StreamEvent(error_event(APIError(502, message)), None, error=True)
                return
            if event.chunk is None and not event.done:
                yield event  # a keep-alive comment
                continue
            converted = list(self._convert(event)) or self._ping()
            self._sent_at = time.monotonic() if converted else self._sent_at
            for i, out in enumerate(converted, start=1):
                done = event.done and i == len(converted)
                yield StreamEvent(encode_event(out), out, done=done, more=i < len(converted))
            if event.done:
                return

    async def aclose(self) -> None:
        await self._inner.aclose()

    def counted(self) -> dict[str, Any] | None:
        return self._inner.counted()

    def _ping(self) -> list[dict[str, Any]]:
        """A ``ping`` for a chunk that is no Messages event (a reasoning model's reasoning,
        which an answer without ``thinking`` does not show, as ``from_chat`` does not) once
        the client has had nothing for ``_PING_EVERY`` s: it would otherwise hear nothing
        while the model reasons, and its read timeout (or a proxy's) could end the stream."""
        return [{"type": "ping"}] if time.monotonic() - self._sent_at >= _PING_EVERY else []

    def _convert(self, event: StreamEvent) -> Iterator[dict[str, Any]]:
        if not self._started:
            self._started = True
            # NOTE: the local model knows its prompt's tokens now, and how many its prefix
            # cache held (an upstream only at the end): split as message_delta's, as Anthropic's
            usage = {**_usage(self._inner.counted() or {}), "output_tokens": 0}
            head: dict[str, Any] = {"id": fresh_message_id(), "type": "message", "role": "assistant",
                    "model": self._model, "content": [], "stop_reason": None,
                    "stop_sequence": None, "usage": usage}  # fmt: skip
            yield {"type": "message_start", "message": head}
            yield {"type": "ping"}
        if event.done:
            yield from self._close_block()
            yield from self._flush_held()
            yield {"type": "message_delta", "delta": self._stop, "usage": _usage(self._usage)}
            yield {"type": "message_stop"}
            return
        chunk = event.chunk or {}
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content"):
                yield from self._text(delta["content"])
            if delta.get("refusal") and isinstance(delta["refusal"], str):
                self._refused = True
                yield from self._text(delta["refusal"])
            for call in delta.get("tool_calls") or ():
                self._called = True
                yield from self._tool_call(call)
            if choice.get("finish_reason"):
                self._stop = stop_of(choice, self._stops, called=self._called,
                                     refused=self._refused)  # fmt: skip

    def _text(self, text: str) -> Iterator[dict[str, Any]]:
        if self._open is None or self._open[1] != "text":
            yield from self._close_block()
            yield self._start({"type": "text", "text": ""}, "text")
        assert self._open is not None
        yield {"type": "content_block_delta", "index": self._open[0],
               "delta": {"type": "text_delta", "text": text}}  # fmt: skip

    def _tool_call(self, call: dict[str, Any]) -> Iterator[dict[str, Any]]:
        index = call.get("index")
        which = f"tool{index or 0}"
        function = call.get("function") or {}
        # NOTE: Gemini sends no index, each call whole in one delta: there a new id is a new
        # call (its arguments must not run on into the previous call's)
        fresh = index is None and bool(call.get("id")) and call["id"] != self._call_id
        # NOTE: a chat stream may interleave its calls' deltas (each names its index); a
        # Messages block once stopped cannot take more, so a call that begins while another's
        # block is open is held, and sent whole after it
        held = index is not None and self._open is not None and self._open[1] not in ("text", which)
        if which in self._held or held:
            self._hold(which, call)
            return
        if self._open is None or self._open[1] != which or fresh:
            yield from self._close_block()
            self._call_id = call.get("id") or _tool_id()
            block: dict[str, Any] = {"type": "tool_use", "id": self._call_id,
                     "name": function.get("name") or "", "input": {}}  # fmt: skip
            yield self._start(block, which)
        assert self._open is not None
        if function.get("arguments"):
            yield {"type": "content_block_delta", "index": self._open[0],
                   "delta": {"type": "input_json_delta",
                             "partial_json": function["arguments"]}}  # fmt: skip

    def _hold(self, which: str, call: dict[str, Any]) -> None:
        function = call.get("function") or {}
        held = self._held.setdefault(which, {"id": "", "name": "", "arguments": ""})
        held["id"] = held["id"] or call.get("id") or ""
        held["name"] = held["name"] or function.get("name") or ""
        held["arguments"] += function.get("arguments") or ""

    def _flush_held(self) -> Iterator[dict[str, Any]]:
        for which, held in self._held.items():
            block = {"type": "tool_use", "id": held["id"] or _tool_id(), "name": held["name"],
                     "input": {}}  # fmt: skip
            yield self._start(block, which)
            if held["arguments"]:
                yield {"type": "content_block_delta", "index": self._next - 1,
                       "delta": {"type": "input_json_delta",
                                 "partial_json": held["arguments"]}}  # fmt: skip
            yield from self._close_block()
        self._held.clear()

    def _start(self, block: dict[str, Any], which: str) -> dict[str, Any]:
        self._open = (self._next, which)
        self._next += 1
        return {"type": "content_block_start", "index": self._open[0], "content_block": block}

    def _close_block(self) -> Iterator[dict[str, Any]]:
        if self._open is not None:
            yield {"type": "content_block_stop", "index": self._open[0]}
            self._open = None


def _stops(request: GatewayRequest) -> tuple[str, ...]:
    """The Messages request's ``stop_sequences`` (parsing checked they are strings)."""
    return tuple(request.body.get("stop_sequences") or ())


def _system(system: Any) -> list[dict[str, Any]]:
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    if isinstance(system, list) and system:
        return [{"role": "system", "content": "\n\n".join(b.get("text", "") for b in system)}]
    return []


def _turn(message: dict[str, Any]) -> list[dict[str, Any]]:
    """One Messages turn as chat messages (a user turn's tool results go first, as ``tool``)."""
    role, content = message["role"], message["content"]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            texts.append(block["text"])
        elif kind == "tool_use" and role == "assistant":
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"],
                                       "arguments": _encode(block["input"]).decode()}})  # fmt: skip
        elif kind == "tool_result" and role == "user":
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                            "content": _result_text(block)})  # fmt: skip
        elif kind not in ("thinking", "redacted_thinking"):  # earlier thinking is not re-read
            raise _unsupported(f"Content blocks of type '{kind}'", "are")
    turn: list[dict[str, Any]] = list(results)
    if texts or calls or not results:
        chat: dict[str, Any] = {"role": role, "content": "\n".join(texts) if texts else None}
        if calls:
            chat["tool_calls"] = calls
        elif chat["content"] is None:
            chat["content"] = ""
        turn.append(chat)
    return turn


def _result_text(result: dict[str, Any]) -> str:
    """A ``tool_result`` block's text; one with ``is_error: true`` starts with ``Error: `` (a
    chat ``tool`` message has no such flag, and the model must learn that the tool failed)."""
    content = result.get("content")
    if isinstance(content, list):
        for block in content:
            if block.get("type") != "text":
                raise _unsupported("Tool results other than text", "are")
        content = "\n".join(b.get("text", "") for b in content)
    text = content or ""
    if result.get("is_error") is True:
        return f"Error: {text}" if text else "Error"
    return text


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A custom tool as a chat function; ``strict`` (inputs that follow the schema: structured
    outputs for tools) as the function's, which means the same to OpenAI. Fields a function
    has no room for are refused when they change the answer (``_TOOL_DEFAULTS``); others
    (``cache_control``, ``eager_input_streaming``: how the input streams) are not sent."""
    if tool.get("type") not in (None, "custom"):
        raise _unsupported(f"Server tools ('{tool.get('type')}')", "are")
    for field, honoured in _TOOL_DEFAULTS.items():
        if tool.get(field) is not None and not honoured(tool[field]):
            raise _unsupported(f"A tool's '{field}'")
    function = {"name": tool["name"], "parameters": tool["input_schema"]}
    if tool.get("description"):
        function["description"] = tool["description"]
    if tool.get("strict") is True:
        function["strict"] = True
    return {"type": "function", "function": function}


def _output_config(config: Any) -> dict[str, Any]:
    """``output_config`` as chat fields: its ``format`` (structured outputs, what the anthropic
    SDK's ``messages.parse`` sends) as a ``json_schema`` ``response_format``, ``strict`` (the
    answer follows the schema, as Anthropic's always does) when OpenAI's strict mode takes the
    schema (``_strict``: not when a property is left out of ``required``, as the SDK leaves
    fields with a default, which OpenAI would refuse). An ``effort`` is refused."""
    if not isinstance(config, dict):
        raise _invalid("output_config: Input should be a valid dictionary")
    for field, value in config.items():
        if field != "format" and value is not None:
            raise _unsupported(f"'output_config.{field}'")
    fmt = config.get("format")
    if fmt is None:
        return {}
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise _invalid("output_config.format.type: Input should be 'json_schema'")
    if not isinstance(fmt.get("schema"), dict):
        raise _invalid("output_config.format.schema: Input should be a valid dictionary")
    schema = {"name": "output", "schema": fmt["schema"]}
    if fmt["schema"].get("type") == "object" and _strict(fmt["schema"]):  # (a root object)
        schema["strict"] = True
    return {"response_format": {"type": "json_schema", "json_schema": schema}}


def _strict(node: Any) -> bool:
    """Whether OpenAI's strict mode takes the JSON schema ``node`` (its structured outputs
    guide): every object closed (``additionalProperties: false``) with every property in
    ``required``, every subschema typed, none of the keywords or string formats it lacks.

    >>> _strict({"type": "object", "properties": {"a": {"type": "string"}},
    ...          "required": ["a"], "additionalProperties": False})
    True
    >>> _strict({"type": "object", "properties": {"a": {"type": "string"}},
    ...          "additionalProperties": False})
    False

    NOTE: an ``array`` needs its ``items`` (OpenAI refuses one without: "array schema missing
    items"); sent strict, the client got that upstream 400 for a schema Anthropic takes.
    """
    if not isinstance(node, dict) or _NOT_STRICT & node.keys() or not _TYPED & node.keys():
        return False
    types = node.get("type")
    if "array" in (types if isinstance(types, list) else [types]) and "items" not in node:
        return False
    if node.get("format") not in (None, *_STRICT_FORMATS):
        return False
    properties, required = node.get("properties", {}), node.get("required") or []
    # (a hand-written schema's may be no list of names: a 500, never sent to be judged)
    if not isinstance(properties, dict) or not isinstance(required, list):
        return False
    if node.get("type") == "object" or properties:
        if node.get("additionalProperties") is not False:
            return False
        if not all(isinstance(r, str) for r in required) or set(required) != set(properties):
            return False
    defs, any_of = node.get("$defs", {}), node.get("anyOf") or []
    if not isinstance(any_of, list):
        return False
    children = [*properties.values(), *(defs.values() if isinstance(defs, dict) else [None])]
    children += any_of
    children += [node["items"]] if "items" in node else []
    return all(_strict(child) for child in children)


def _tool_choice(choice: dict[str, Any]) -> Any:
    kind = choice["type"]
    if kind == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}
    return {"auto": "auto", "any": "required", "none": "none"}[kind]


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    prompt = int(usage.get("prompt_tokens") or 0)
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return {
        "input_tokens": max(prompt - cached, 0),
        "output_tokens": int(usage.get("completion_tokens") or 0),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }


def _arguments(arguments: Any) -> dict[str, Any] | None:
    """A tool call's arguments as the object a ``tool_use`` block's ``input`` is; None when
    they are not a JSON object (e.g. cut off by max_tokens)."""
    try:
        parsed = _decode(arguments) if isinstance(arguments, str | bytes) else arguments
    except msgspec.DecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _arguments_kept(chat: dict[str, Any]) -> bool:
    """Whether every tool call of the chat answer's first choice has arguments that are a
    JSON object (all a ``tool_use`` block's ``input`` can carry)."""
    choice = (chat.get("choices") or [{}])[0]
    calls = (choice.get("message") or {}).get("tool_calls") or ()
    return all(_arguments((c.get("function") or {}).get("arguments")) is not None for c in calls)


def _tool_id() -> str:
    return "toolu_" + fresh_message_id()[4:]


def _error_message(chunk: dict[str, Any] | None) -> str:
    error = (chunk or {}).get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    return "The model failed mid-stream."


def _invalid(message: str) -> APIError:
    return APIError(400, message, type="invalid_request_error")


def _unsupported(what: str, verb: str = "is") -> APIError:
    return APIError(
        400, f"{what} {verb} not supported by this model.", type="invalid_request_error"
    )
