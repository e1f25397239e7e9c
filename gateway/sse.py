"""Server-sent events: parse an upstream stream, assemble it into one response, replay a response.

Streams are OpenAI-shaped: ``data: {chunk}\\n\\n`` events, then ``data: [DONE]\\n\\n``.

* ``SSEParser`` splits a byte stream into events as bytes arrive (no buffering past one event).
* ``Assembler`` folds chunks into the complete ``chat.completion`` / ``text_completion`` object
  that the cache stores; ``result()`` is None unless every choice finished.
* ``replay`` turns a stored object back into chunks, so a cache hit streams like a fresh answer.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import msgspec

__all__ = [
    "DONE",
    "KEEPALIVE",
    "QUEUED",
    "RUNNING",
    "Assembler",
    "EventTooLarge",
    "SSEParser",
    "encode_event",
    "fresh_identity",
    "replay",
]

DONE = b"data: [DONE]\n\n"
#: A comment event: keeps a quiet stream's connections (proxies, a client's read timeout) alive.
KEEPALIVE = b": keep-alive\n\n"
#: A local model's comment to the gateway in front (``x-cachegate-keepalive``) while its
#: request waits for the engine: the model has not run it yet (any other event: it has).
QUEUED = b": queued\n\n"
#: Its comment to that gateway once the engine takes the request up: ``: running N``, the
#: prompt's N tokens that the model runs (booked should the stream end before its usage).
RUNNING = b": running "
_HEAD_FIELDS = ("id", "created", "model", "system_fingerprint")
#: Top-level and choice fields rebuilt by assembly and replay; any other field (citations,
#: service_tier, stop_reason, content_filter_results, ...) is kept as last sent, and replayed.
_OWN_TOP = frozenset({*_HEAD_FIELDS, "object", "choices", "usage", "obfuscation"})
_OWN_CHOICE = frozenset({"index", "delta", "message", "text", "logprobs", "finish_reason"})
#: Message fields a stream sends in pieces, in the order a model streams them:
#: ``reasoning_content`` (DeepSeek), ``reasoning`` (vLLM, SGLang, OpenRouter, Groq).
_TEXT_FIELDS = ("reasoning_content", "reasoning", "content", "refusal")
_encode = msgspec.json.Encoder().encode


def encode_event(obj: Any) -> bytes:
    return b"data: " + _encode(obj) + b"\n\n"


class SSEParser:
    """Incremental SSE parser: ``feed(bytes)`` returns the complete events' data fields.

    Linear in the bytes fed, however they are split: only new bytes are normalised and
    searched. An event longer than ``max_event_bytes`` raises :class:`EventTooLarge`.
    An event of comments only (an upstream's keep-alive) has no data: ``commented`` says
    whether one arrived since it was last asked; ``queued`` whether the last comment was a
    ``QUEUED`` one (a cachegate worker's request not yet taken up by its model, unless an
    event of its answer came since: see ``UpstreamStream.counted``); ``prompt_tokens`` the
    prompt tokens a ``RUNNING`` comment said (None: none came); ``worker`` whether either
    came (a cachegate worker's stream, with keep-alives as often as the gateway asked).

    >>> p = SSEParser()
    >>> p.feed(b'data: {"a":1}\\n\\nda'), p.feed(b'ta: [DONE]\\n\\n')
    ([b'{"a":1}'], [b'[DONE]'])
    """

    def __init__(self, max_event_bytes: int = 64 * 2**20) -> None:
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no event end
        self._held_cr = False  # a trailing CR may be the first half of a CRLF
        self._max = max_event_bytes
        self._commented = False
        self.queued = False
        self.prompt_tokens: int | None = None
        self.worker = False
        self._opening = True  # the stream's first bytes may be a UTF-8 BOM (not data)
        #: the last event that had neither data nor a comment (``unread``)
        self._unread = b""

    def feed(self, data: bytes) -> list[bytes]:
        if self._held_cr:
            data, self._held_cr = b"\r" + data, False
        if b"\r" in data:
            if data.endswith(b"\r"):
                data, self._held_cr = data[:-1], True
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        self._buffer += data
        if self._opening and (len(self._buffer) >= 3 or not _BOM.startswith(self._buffer)):
            # NOTE: as the SSE standard (and a browser) reads a stream: kept, it made the first
            # line ``\ufeffdata: ...``, no data line, and its event was dropped unseen
            self._opening = False
            if self._buffer.startswith(_BOM):
                del self._buffer[:3]
        events: list[bytes] = []
        while True:
            end = self._buffer.find(b"\n\n", max(self._scanned - 1, 0))
            if end < 0:
                self._scanned = len(self._buffer)
                if self._scanned > self._max:
                    raise EventTooLarge(f"an event is longer than {self._max} bytes")
                return events
            block = bytes(self._buffer[:end])
            del self._buffer[: end + 2]
            self._scanned = 0
            lines = [
                line[5:].lstrip(b" ") for line in block.split(b"\n") if line.startswith(b"data:")
            ]
            if lines:
                events.append(b"\n".join(lines))
            elif block.startswith(b":") or b"\n:" in block:
                self._commented = True
                self.queued = block + b"\n\n" == QUEUED
                if block.startswith(RUNNING) and block[len(RUNNING) :].isdigit():
                    self.prompt_tokens = int(block[len(RUNNING) :])
                self.worker = self.worker or self.queued or self.prompt_tokens is not None
            else:
                self._unread = block

    def end(self) -> list[bytes]:
        """At the stream's end: the events a CR held back (``feed``) completes. With no byte
        after it, it was a line's end, not the first half of a CRLF."""
        if not self._held_cr:
            return []
        self._held_cr = False
        return self.feed(b"\n")

    def commented(self) -> bool:
        """Whether an event of comments only arrived since the last call."""
        commented, self._commented = self._commented, False
        return commented

    @property
    def pending(self) -> bytes:
        """Bytes of an event that has not ended yet."""
        return bytes(self._buffer) + (b"\r" if self._held_cr else b"")

    @property
    def unread(self) -> bytes:
        """The last event with neither data nor a comment, as it came (a plain JSON body that
        ended with a blank line, where events were due: ``UpstreamStream._unstreamed``)."""
        return self._unread


_BOM = b"\xef\xbb\xbf"


class EventTooLarge(ValueError):
    """An upstream event exceeded the parser's limit (a broken or hostile upstream)."""


class Assembler:
    """Folds stream chunks into the complete response object they describe."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "chat" or "completion"
        self._head: dict[str, Any] = {}
        self._choices: dict[int, dict[str, Any]] = {}
        self._usage: dict[str, Any] | None = None
        self._extra: dict[str, Any] = {}  # other top-level fields
        #: A field came in pieces this assembler cannot join: the answer is not stored.
        self.unjoinable: str | None = None

    def add(self, chunk: dict[str, Any]) -> None:
        # NOTE: each from the first chunk that has it: Azure opens with a prompt-filter chunk
        # whose id, model and created are empty.
        for field in _HEAD_FIELDS:
            if not self._head.get(field) and chunk.get(field):
                self._head[field] = chunk[field]
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        _keep_extras(self._extra, chunk, _OWN_TOP)
        for delta_choice in chunk.get("choices") or ():
            index = delta_choice.get("index", 0)
            choice = self._choices.setdefault(index, _empty_choice(self.kind, index))
            _keep_extras(choice, delta_choice, _OWN_CHOICE)
            if self.kind == "chat":
                bad = _merge_delta(choice["message"], delta_choice.get("delta") or {})
                self.unjoinable = self.unjoinable or bad
            else:
                _append(choice, "text", delta_choice.get("text") or "")
            logprobs = delta_choice.get("logprobs")
            if logprobs:
                _merge_logprobs(choice, logprobs)
            if delta_choice.get("finish_reason"):
                choice["finish_reason"] = delta_choice["finish_reason"]

    def result(self) -> dict[str, Any] | None:
        """The complete object, or None when a choice never finished (a cut stream) or a
        field came in pieces that cannot be joined (see ``unjoinable``)."""
        if not self._choices or any(c["finish_reason"] is None for c in self._choices.values()):
            return None
        if self.unjoinable is not None:
            return None
        obj: dict[str, Any] = {
            **self._extra,
            "id": self._head.get("id"),
            "object": "chat.completion" if self.kind == "chat" else "text_completion",
            "created": self._head.get("created"),
            "model": self._head.get("model"),
            "choices": [_joined(self._choices[i]) for i in sorted(self._choices)],
        }
        if self._head.get("system_fingerprint"):
            obj["system_fingerprint"] = self._head["system_fingerprint"]
        if self._usage is not None:
            obj["usage"] = self._usage
        return obj


def fresh_identity(kind: str) -> tuple[str, int]:
    """A new response id and creation time (a replayed answer is a new response)."""
    prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
    return prefix + secrets.token_hex(12), int(time.time())


def replay(response: dict[str, Any], *, kind: str, include_usage: bool) -> Iterator[bytes]:
    """Stream a stored response as SSE events, ending with ``data: [DONE]``."""
    rid, created = fresh_identity(kind)
    head = {
        "id": rid,
        "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
        "created": created,
        "model": response.get("model"),
    }
    if response.get("system_fingerprint"):
        head["system_fingerprint"] = response["system_fingerprint"]
    head.update({k: v for k, v in response.items() if k not in _OWN_TOP})  # e.g. citations
    for choice in response.get("choices") or ():
        index = choice.get("index", 0)
        extras = {k: v for k, v in choice.items() if k not in _OWN_CHOICE}  # e.g. stop_reason
        if kind == "chat":
            deltas = _chat_deltas(choice.get("message") or {})
            for delta, logprobs in _with_logprobs(deltas, choice.get("logprobs")):
                piece = {**_delta_choice(index, delta, None), "logprobs": logprobs}
                yield encode_event({**head, "choices": [piece]})
            last: dict[str, Any] = _delta_choice(index, {}, choice.get("finish_reason"))
        else:
            last = {
                "index": index,
                "text": choice.get("text", ""),
                "logprobs": choice.get("logprobs"),
                "finish_reason": choice.get("finish_reason"),
            }
        last.update(extras)
        yield encode_event({**head, "choices": [last]})
    if include_usage:
        yield encode_event({**head, "choices": [], "usage": response.get("usage")})
    yield DONE


# ---------------------------------------------------------------------------------------------
# helpers


def _empty_choice(kind: str, index: int) -> dict[str, Any]:
    if kind == "chat":
        return {
            "index": index,
            "message": {"role": "assistant", "content": None},
            "logprobs": None,
            "finish_reason": None,
        }
    return {"index": index, "text": _Pieces(), "logprobs": None, "finish_reason": None}


class _Pieces(list[str]):
    """A text that a stream sends in pieces, joined once in ``Assembler.result``.

    NOTE: each piece added to a string copied the whole text so far: quadratic in the pieces
    (a 100k-chunk answer took 7.5 s of the event loop to fold, every other stream waiting).
    """


def _append(into: dict[str, Any], field: str, piece: str) -> None:
    pieces = into.get(field)
    if not isinstance(pieces, _Pieces):
        pieces = into[field] = _Pieces([pieces] if isinstance(pieces, str) else ())
    pieces.append(piece)


def _joined(value: Any) -> Any:
    """``value`` with each text in pieces joined (a copy: the assembler's own stays as is)."""
    if isinstance(value, _Pieces):
        return "".join(value)
    if isinstance(value, dict):
        return {k: _joined(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_joined(v) for v in value]
    return value


def _keep_extras(into: dict[str, Any], source: dict[str, Any], own: frozenset[str]) -> None:
    for field, value in source.items():
        if field not in own and value is not None:
            into[field] = value


def _merge_delta(message: dict[str, Any], delta: dict[str, Any]) -> str | None:
    """Fold one delta into ``message``; returns the name of a field it could not join."""
    for field, value in delta.items():
        if value is None:
            continue
        if field == "role":
            message["role"] = value
        elif field in _TEXT_FIELDS and isinstance(value, str):
            _append(message, field, value)
        elif field == "tool_calls":
            calls = message.setdefault("tool_calls", [])
            for part in value:
                _merge_tool_call(calls, part)
        elif field == "function_call":
            call = message.setdefault("function_call", {"name": "", "arguments": ""})
            _append(call, "name", value.get("name") or "")
            _append(call, "arguments", value.get("arguments") or "")
        elif field == "audio" and isinstance(value, dict):  # OpenAI: data and transcript pieces
            audio = message.setdefault("audio", {})
            for key, part in value.items():
                if key in ("data", "transcript") and isinstance(part, str):
                    _append(audio, key, part)
                elif part is not None:
                    audio[key] = part
        elif isinstance(value, list):  # annotations, reasoning_details: pieces in order
            _extend(message, field, value)
        elif field in message and message[field] != value:
            return field  # sent again, changed: pieces of something unknown
        else:
            message[field] = value
    return None


def _merge_tool_call(calls: list[dict[str, Any]], part: dict[str, Any]) -> None:
    index = part.get("index", len(calls))
    while len(calls) <= index:
        calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
    call = calls[index]
    if part.get("id"):
        call["id"] = part["id"]
    if part.get("type"):
        call["type"] = part["type"]
    function = part.get("function") or {}
    _append(call["function"], "name", function.get("name") or "")
    _append(call["function"], "arguments", function.get("arguments") or "")


def _merge_logprobs(choice: dict[str, Any], logprobs: dict[str, Any]) -> None:
    merged = choice["logprobs"] or {}
    for field, value in logprobs.items():
        if isinstance(value, list):
            _extend(merged, field, value)
        else:
            merged[field] = value
    choice["logprobs"] = merged


def _extend(into: dict[str, Any], field: str, items: list[Any]) -> None:
    """``into[field]`` extended by ``items`` in place (a list made anew for each piece
    copied all those before it, as a string did: see ``_Pieces``)."""
    if type(into.get(field)) is not list:  # (nor a text in pieces)
        into[field] = []
    into[field].extend(items)


def _chat_deltas(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    # As OpenAI opens a stream: "content": "" for a text answer, null for a tool call.
    content = "" if isinstance(message.get("content"), str) else None
    yield {"role": message.get("role", "assistant"), "content": content}
    for field in _TEXT_FIELDS:
        if message.get(field):
            yield {field: message[field]}
    for index, call in enumerate(message.get("tool_calls") or ()):
        yield {"tool_calls": [{"index": index, **call}]}
    if message.get("function_call"):
        yield {"function_call": message["function_call"]}
    # Anything else the answer carried (annotations, audio, ...) in one piece.
    rest = {
        k: v
        for k, v in message.items()
        if k not in _REPLAYED and v is not None and v != [] and v != {}
    }
    if rest:
        yield rest


_REPLAYED = frozenset({"role", *_TEXT_FIELDS, "tool_calls", "function_call"})


def _with_logprobs(
    deltas: Iterator[dict[str, Any]], logprobs: dict[str, Any] | None
) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each delta with the logprobs of its tokens, as a model streams them: a ``content`` or
    ``refusal`` delta as one chunk per token when its tokens spell its text (else in one
    chunk, with all of them); None on the others."""
    for delta in deltas:
        field = next((f for f in ("content", "refusal") if delta.get(f)), "")
        tokens = (logprobs or {}).get(field) if field else None
        if not isinstance(tokens, list) or not tokens:
            yield delta, None
            continue
        empty = dict.fromkeys(logprobs or {})  # (the other fields, e.g. "refusal": null)
        texts = [t.get("token") if isinstance(t, dict) else None for t in tokens]
        if not all(isinstance(t, str) for t in texts) or "".join(map(str, texts)) != delta[field]:
            yield delta, {**empty, field: tokens}
            continue
        for text, token in zip(texts, tokens, strict=True):
            yield {field: text}, {**empty, field: [token]}


def _delta_choice(index: int, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
