"""A fake Anthropic Messages API for tests, written from the public API reference.

``POST /v1/messages`` (JSON and SSE) and ``POST /v1/messages/count_tokens``, with the API's
headers (``x-api-key`` or ``Authorization: Bearer``, ``anthropic-version`` required; ``request-id`` answered), error body
``{"type": "error", "error": {"type", "message"}}`` and status codes, and prompt caching as
documented: an entry is written for the prefix up to each ``cache_control`` block (at most 4,
1-hour marks before 5-minute ones, prefixes shorter than ``min_cacheable`` tokens are not
cached; a top-level ``cache_control``, automatic caching, is one more mark, on the last
block), read when a later request's mark, or a block up to 20 before it, ends the same prefix;
usage reports ``input_tokens`` (after the last cache read or write), ``cache_read_input_tokens``
and ``cache_creation_input_tokens``. Tokens are counted as 1 per 4 characters of text.

Answers are deterministic plus a serial number: ``"answer #7 to: What is 2+2?"``. A ``fake``
body field asks for misbehaviour, of ``/v1/messages/count_tokens`` too: ``status`` (an error
with that status; 529 is ``overloaded_error``; ``fail_times``: only the first N times this exact
body is seen; ``retry_after``: a ``retry-after`` header on it), ``headers`` (more headers on the
answer, e.g. ``anthropic-ratelimit-*``); of ``/v1/messages`` only: ``error_after`` (an ``event: error`` after N stream events),
``break_after`` (cut the stream after N events), ``stop_reason`` (e.g. ``refusal``),
``tool_use`` (answer with a call of that tool), ``content`` (answer with this text),
``delta_usage`` (more fields of a stream's ``message_delta`` usage: the API's cumulative
counts, each of which it documents as nullable), ``context_management`` (the message's, as
the context editing beta reports the edits it applied: streamed, ``message_delta``'s own
field, null in ``message_start``).
A request with a code execution tool (``code_execution_...``) or a ``container`` (its id, or
``{"id": ...}``) is answered in that container, or a new one (``container_<n>``): the message's
``container`` (streamed: ``message_start``'s and ``message_delta``'s).

Run standalone (benchmarks): ``python -m tests.fake_anthropic --port 9998`` (API key
``sk-ant-test``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import time
from collections import Counter
from typing import Any

import msgspec

from tests.fake_upstream import lifespan, read_body

_encode = msgspec.json.Encoder(order="deterministic").encode
_decode = msgspec.json.decode

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}  # fmt: skip


class FakeAnthropic:
    """The ASGI app. ``stats`` counts requests; ``bodies``/``headers`` keep what was received."""

    def __init__(self, *, api_key: str = "sk-ant-test", min_cacheable: int = 1024) -> None:
        self.api_key = api_key
        self.min_cacheable = min_cacheable
        self.stats: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.cache: dict[bytes, float] = {}  # prefix digest -> expiry (time.monotonic)
        self._seen: Counter[bytes] = Counter()  # (path, body) digest -> times received
        self.clock = time.monotonic
        self._serial = 0

    def reset(self) -> None:
        self.stats.clear()
        self.bodies.clear()
        self.headers.clear()
        self.cache.clear()
        self._seen.clear()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await lifespan(receive, send)
        raw = await read_body(receive)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        path = scope["path"]
        if scope["method"] != "POST" or path not in ("/v1/messages", "/v1/messages/count_tokens"):
            return await _error(send, 404, f"Not found: {path}")
        # NOTE: anthropic SDK 2.x sends its API key as "Authorization: Bearer"; 0.x as x-api-key.
        bearer = headers.get("authorization", "").removeprefix("Bearer ")
        if (headers.get("x-api-key") or bearer) != self.api_key:
            return await _error(send, 401, "invalid x-api-key")
        if not headers.get("anthropic-version"):
            return await _error(send, 400, "anthropic-version: header is required")
        try:
            body = _decode(raw)
        except msgspec.DecodeError:
            return await _error(send, 400, "The request body is not valid JSON.")
        self.bodies.append(body)
        self.headers.append(headers)
        self.stats[path] += 1
        fake = body.get("fake") or {}
        digest = hashlib.sha256(path.encode() + b"\n" + raw).digest()
        self._seen[digest] += 1
        if fake.get("status") and self._seen[digest] <= fake.get("fail_times", 10**9):
            status = int(fake["status"])
            said = {"retry-after": str(fake["retry_after"])} if "retry_after" in fake else {}
            message = "Overloaded" if status == 529 else "fake failure"
            return await _error(send, status, message, {**said, **fake.get("headers", {})})
        if path.endswith("count_tokens"):
            counted = {"input_tokens": sum(t for _, t, _ in _blocks(body))}
            return await _json(send, 200, counted, fake.get("headers"))
        await self._message(body, fake, send)

    async def _message(self, body: dict[str, Any], fake: dict[str, Any], send: Any) -> None:
        problem = _invalid(body)
        if problem is None:
            problem = self._check_marks(body)
        if problem is not None:
            return await _error(send, 400, problem)
        self._serial += 1
        message = self._answer(body, fake)
        if not body.get("stream"):
            return await _json(send, 200, message, fake.get("headers"))
        await _stream(send, message, fake)

    def _answer(self, body: dict[str, Any], fake: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]["content"]
        question = last if isinstance(last, str) else " ".join(
            b.get("text", "") for b in last if b.get("type") == "text")  # fmt: skip
        text = fake.get("content") or f"answer #{self._serial} to: {question}"
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        stop = fake.get("stop_reason", "end_turn")
        if fake.get("tool_use"):
            content.append({"type": "tool_use", "id": f"toolu_{self._serial:04d}",
                            "name": fake["tool_use"], "input": {"city": "Paris"}})  # fmt: skip
            stop = "tool_use"
        usage = self._usage(body)
        usage["output_tokens"] = len(text) // 4 + 1
        message = {"id": f"msg_{self._serial:04d}", "type": "message", "role": "assistant",
                   "model": body["model"], "content": content, "stop_reason": stop,
                   "stop_sequence": None, "usage": usage}  # fmt: skip
        if fake.get("context_management"):
            message["context_management"] = fake["context_management"]
        named = body.get("container")
        named = named.get("id") if isinstance(named, dict) else named
        coding = any(str(t.get("type", "")).startswith("code_execution_")
                     for t in body.get("tools") or ())  # fmt: skip
        if named or coding:  # (expires 30 days after creation; here: an hour from now)
            message["container"] = {"id": named or f"container_{self._serial:04d}",
                                    "expires_at": _expiry()}  # fmt: skip
        return message

    def _usage(self, body: dict[str, Any]) -> dict[str, Any]:
        """Prompt caching as documented: read the longest cached prefix a mark reaches, write
        one entry per mark past it."""
        blocks = _blocks(body)
        now = self.clock()
        total = sum(t for _, t, _ in blocks)
        cumulative = [sum(t for _, t, _ in blocks[: i + 1]) for i in range(len(blocks))]
        marks = [i for i, (_, _, ttl) in enumerate(blocks) if ttl is not None]
        read = 0
        for mark in marks:
            for i in range(mark, max(mark - 20, -1), -1):
                if self.cache.get(blocks[i][0], 0.0) > now:
                    read = max(read, cumulative[i])
                    self.cache[blocks[i][0]] = now + _ttl(blocks[mark][2])  # a read refreshes
                    break
        written = {"5m": 0, "1h": 0}
        done = read
        for mark in marks:
            digest, _, ttl = blocks[mark]
            if cumulative[mark] > done and cumulative[mark] >= self.min_cacheable:
                assert ttl is not None
                written[ttl] += cumulative[mark] - done
                done = cumulative[mark]
                self.cache[digest] = now + _ttl(ttl)
        return {"input_tokens": total - done, "cache_read_input_tokens": read,
                "cache_creation_input_tokens": written["5m"] + written["1h"],
                "cache_creation": {"ephemeral_5m_input_tokens": written["5m"],
                                   "ephemeral_1h_input_tokens": written["1h"]},
                "output_tokens": 0, "service_tier": "standard"}  # fmt: skip

    @staticmethod
    def _check_marks(body: dict[str, Any]) -> str | None:
        ttls = [ttl for _, _, ttl in _blocks(body, automatic=False) if ttl is not None]
        automatic = body.get("cache_control")
        if isinstance(automatic, dict):  # automatic caching: a mark the API puts on the last block
            ttls.append(automatic.get("ttl", "5m"))
        if len(ttls) > 4:
            return f"A maximum of 4 blocks with cache_control may be provided. Found {len(ttls)}."
        if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
            return "a ttl='1h' cache_control block must not come after a ttl='5m' one"
        return None


# ---------------------------------------------------------------------------------------------
# helpers


def _blocks(body: dict[str, Any], automatic: bool = True) -> list[tuple[bytes, int, str | None]]:
    """(digest of the prefix through the block, its tokens, its mark's TTL) in prompt order
    (``automatic``: a top-level ``cache_control`` marks the last block, unless it has one)."""
    items: list[Any] = list(body.get("tools") or [])
    system = body.get("system")
    items += [{"type": "text", "text": system}] if isinstance(system, str) else list(system or [])
    for message in body.get("messages") or ():
        content = message["content"]
        items += [{"type": "text", "text": content}] if isinstance(content, str) else content
    out: list[tuple[bytes, int, str | None]] = []
    state = hashlib.sha256()
    for item in items:
        control = item.get("cache_control")
        plain = {k: v for k, v in item.items() if k != "cache_control"}
        state.update(_encode(plain))
        text = plain.get("text") if isinstance(plain.get("text"), str) else _encode(plain).decode()
        ttl = None if control is None else control.get("ttl", "5m")
        out.append((state.copy().digest(), len(text) // 4 + 1, ttl))
    top = body.get("cache_control")
    if automatic and isinstance(top, dict) and out and out[-1][2] is None:
        out[-1] = (*out[-1][:2], top.get("ttl", "5m"))
    return out


def _expiry() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))


def _ttl(ttl: str | None) -> float:
    return 3600.0 if ttl == "1h" else 300.0


def _invalid(body: dict[str, Any]) -> str | None:
    for field in ("model", "max_tokens", "messages"):
        if field not in body:
            return f"{field}: Field required"
    if not body["messages"]:
        return "messages: at least one message is required"
    return None


async def _stream(send: Any, message: dict[str, Any], fake: dict[str, Any]) -> None:
    head = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {**message["usage"], "output_tokens": 1}}  # fmt: skip
    events: list[dict[str, Any]] = [{"type": "message_start", "message": head}]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "text", "text": ""}})  # fmt: skip
            if index == 0:
                events.append({"type": "ping"})
            words = block["text"].split(" ")
            pieces = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
            events += [{"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": p}} for p in pieces]  # fmt: skip
        else:
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {**block, "input": {}}})  # fmt: skip
            arguments = _encode(block["input"]).decode()
            for piece in (arguments[:5], arguments[5:]):
                events.append({"type": "content_block_delta", "index": index,
                               "delta": {"type": "input_json_delta", "partial_json": piece}})  # fmt: skip
        events.append({"type": "content_block_stop", "index": index})
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    if "container" in message:
        delta["container"] = message["container"]
    usage = {"output_tokens": message["usage"]["output_tokens"], **(fake.get("delta_usage") or {})}
    events.append({"type": "message_delta", "delta": delta, "usage": usage})
    if "context_management" in message:
        head["context_management"] = None
        events[-1]["context_management"] = message["context_management"]
    events.append({"type": "message_stop"})
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream"),
                            (b"request-id", message["id"].replace("msg", "req").encode())]})  # fmt: skip
    for n, event in enumerate(events):
        if fake.get("error_after") == n:
            error = {
                "type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"},
            }
            await send({"type": "http.response.body", "body": _sse(error), "more_body": True})
            break
        if fake.get("break_after") == n:
            break
        await send({"type": "http.response.body", "body": _sse(event), "more_body": True})
        await asyncio.sleep(0)
    await send({"type": "http.response.body", "body": b""})


def _sse(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + _encode(event) + b"\n\n"


async def _json(send: Any, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
    """``obj`` with ``status``; ``headers`` replace or add to the usual ones."""
    body = _encode(obj)
    sent = {"content-type": "application/json", "content-length": str(len(body)),
            "request-id": "req_fake", **(headers or {})}  # fmt: skip
    await send({"type": "http.response.start", "status": status,
                "headers": [(k.encode(), v.encode()) for k, v in sent.items()]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


async def _error(
    send: Any, status: int, message: str, headers: dict[str, str] | None = None
) -> None:
    kind = _ERROR_TYPES.get(status, "api_error")
    error = {"type": "error", "error": {"type": kind, "message": message}}
    await _json(send, status, error, headers)


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9998)
    args = parser.parse_args()
    uvicorn.run(FakeAnthropic(), host=args.host, port=args.port, http="httptools",
                log_level="warning", access_log=False)  # fmt: skip


if __name__ == "__main__":
    main()
