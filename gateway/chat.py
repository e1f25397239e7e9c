"""The OpenAI Chat Completions and legacy Completions adapters.

Both speak ``data: {chunk}`` SSE ending in ``data: [DONE]``, and their answers carry
``choices``; only the shape of a choice (``message`` or ``text``) differs. A stored answer is
a ``chat.completion`` or ``text_completion`` object, replayed as chunks of the same kind.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

from semantic.keys import CacheKey, ContextMode, chat_key, completion_key

from .canonical import GatewayRequest
from .errors import APIError, sse_error
from .requests import parse_request
from .sse import Assembler, fresh_identity, replay

__all__ = ["CHAT", "COMPLETION", "ChoicesAdapter", "content_text"]

#: Finish reasons of a complete answer; anything else (content_filter, error, null) is not stored.
_COMPLETE = frozenset({"stop", "length", "tool_calls", "function_call", "eos"})


class ChoicesAdapter:
    """An OpenAI API whose answers are ``choices``: chat completions or legacy completions."""

    def __init__(self, kind: Literal["chat", "completion"]) -> None:
        self.kind: Literal["chat", "completion"] = kind

    def parse(self, raw: bytes, headers: Mapping[str, str], tenant: str) -> GatewayRequest:
        return parse_request(self.kind, raw, headers, tenant)

    def key(self, request: GatewayRequest, context_turns: int | None,
            context: ContextMode = "exact", *, native: bool = False) -> CacheKey:  # fmt: skip
        # (native changes nothing: OpenAI's defaults that every backend applies alike are in
        # semantic.keys._DEFAULTS; temperature 1 is not the local model's nor vLLM's)
        ns = request.control.namespace
        if self.kind == "chat":
            body = request.body
            return chat_key(request.tenant, ns, request.model, body, context_turns, context)
        return completion_key(request.tenant, ns, request.model, request.body)

    def complete(self, request: GatewayRequest, answer: dict[str, Any]) -> bool:
        """Every choice the request asked for is there and finished normally."""
        choices = answer.get("choices")
        if "error" in answer or not isinstance(choices, list) or len(choices) != _expected(request):
            return False
        return all(self._finished(c) for c in choices)

    def fold(self, request: GatewayRequest, *, cached: bool) -> ChunkFold:
        return ChunkFold(self.kind, request.include_usage, assemble=cached)

    def fresh(self, request: GatewayRequest, stored: dict[str, Any]) -> dict[str, Any]:
        rid, created = fresh_identity(self.kind)
        return {**stored, "id": rid, "created": created}

    def replay(self, request: GatewayRequest, stored: dict[str, Any]) -> Iterator[bytes]:
        return replay(stored, kind=self.kind, include_usage=request.include_usage)

    def saved_tokens(self, stored: dict[str, Any]) -> int:
        usage = stored.get("usage") or {}
        return int(usage.get("completion_tokens") or 0)

    def text(self, answer: dict[str, Any]) -> str:
        parts: list[str] = []
        for choice in answer.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            if self.kind == "completion":
                parts.append(str(choice.get("text") or ""))
                continue
            message = choice.get("message") or {}
            parts.append(content_text(message.get("content")) or str(message.get("refusal") or ""))
            for call in message.get("tool_calls") or ():
                function = (call.get("function") if isinstance(call, dict) else None) or {}
                parts.append(f"{function.get('name')}({function.get('arguments') or ''})")
        return "\n".join(p for p in parts if p)

    @property
    def bridge(self) -> None:
        return None  # it is the chat form itself

    def delivered(self, request: GatewayRequest, answer: dict[str, Any], *, upstream: bool) -> None:
        pass  # nothing is kept beyond the response cache

    def error_json(self, error: APIError) -> bytes:
        return error.json()

    def error_event(self, error: APIError, sequence: int = 0) -> bytes:
        return sse_error(error)

    def _finished(self, choice: Any) -> bool:
        """A choice that finished normally and carries its answer (a message, or a text)."""
        reason = choice.get("finish_reason") if isinstance(choice, dict) else None
        if not isinstance(reason, str) or reason not in _COMPLETE:  # (a list: unhashable)
            return False
        if self.kind == "chat":
            return isinstance(choice.get("message"), dict)
        return isinstance(choice.get("text"), str)


class ChunkFold:
    """Folds chunks into the answer; hides the usage chunk from clients that did not ask.

    NOTE: backends always ask their model for usage, so an assembled stream can be cached
    with it; this fold drops that chunk for a client that did not ask for it.
    """

    def __init__(self, kind: str, include_usage: bool, *, assemble: bool = True) -> None:
        self._assembler = Assembler(kind) if assemble else None  # (a pass-through: none)
        self._include_usage = include_usage
        self._usage: dict[str, Any] | None = None
        self._streamed = 0

    def add(self, chunk: dict[str, Any]) -> bool:
        if self._assembler is not None:
            self._assembler.add(chunk)
        self._streamed += _generated(chunk)
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        usage_only = not chunk.get("choices") and chunk.get("usage") is not None
        return self._include_usage or not usage_only

    def result(self) -> dict[str, Any] | None:
        return self._assembler.result() if self._assembler is not None else None

    def usage(self) -> dict[str, Any] | None:
        return self._usage

    def streamed(self) -> int:
        return self._streamed


CHAT = ChoicesAdapter("chat")
COMPLETION = ChoicesAdapter("completion")


def content_text(content: Any) -> str:
    """A chat message's ``content``: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("text")
        )
    return ""


def _generated(chunk: dict[str, Any]) -> int:
    """Characters of generated text in one chunk: each choice's content, refusal, reasoning
    and tool-call names and arguments (a completion's: its text)."""
    count = 0
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            count += len(choice["text"]) if isinstance(choice.get("text"), str) else 0
            continue
        parts = [delta.get(k) for k in ("content", "refusal", "reasoning_content")]
        for call in delta.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                parts += [function.get("name"), function.get("arguments")]
        count += sum(len(part) for part in parts if isinstance(part, str))
    return count


def _expected(request: GatewayRequest) -> int:
    n = request.body.get("n") or 1
    prompt = request.body.get("prompt")
    if (
        request.kind == "completion"
        and isinstance(prompt, list)
        and prompt
        and not isinstance(prompt[0], int)
    ):
        return int(n) * len(prompt)  # one set of choices per prompt
    return int(n)
