"""A small OpenAI-compatible upstream for tests and benchmarks, which counts what it receives.

Answers are deterministic in the request, plus a serial number, so a test can tell a fresh answer
(new number) from a cached one (same number)::

    "answer #7 to: What is 2+2? [temperature=0.2 max_tokens=None]"

A request can ask for misbehaviour in a ``fake`` body field (what the SDK sends via
``extra_body={"fake": {...}}``; the gateway forwards unknown fields untouched):

    delay          seconds before the response starts
    first_delay    seconds between a stream's response headers and its first event
    keepalive      with ``first_delay``: send a ``: keep-alive`` comment event every this many
                   seconds of that wait (as OpenRouter does while a model thinks)
    chunk_delay    seconds between generated stream events (as a real server, the usage chunk
                   and ``[DONE]`` follow the last one at once)
    done_delay     seconds between ``[DONE]`` and the body's end (a server still cleaning up)
    status         answer with this HTTP error status (``fail_times``: only the first N times
                   this exact body is seen; ``retry_after``: a Retry-After header,
                   ``retry_after_ms``: a retry-after-ms one)
    stream_status  answer a streaming request with this HTTP error status, a plain one as usual
                   (as OpenAI refuses to stream some models to an unverified organization)
    break_after    cut the connection after this many stream events (no [DONE])
    error_event    send an ``{"error": ...}`` event after this many stream events
    invalid_json   answer 200 with a body that is not JSON
    error_body     answer 200 with an ``{"error": ...}`` body
    drop_choices   answer with this many choices fewer than ``n`` asked for (embeddings: fewer
                   embeddings than inputs)
    error_input    embeddings: answer 400 naming this input's index, when it is among them
    bad_chunk      send a chunk the assembler cannot read after this many stream events
    finish_reason  finish reason to report (e.g. "content_filter")
    tool_call      answer with a call of this function name
    reasoning      responses: a reasoning item (an id only: no encrypted_content) before it;
                   a string: its summary text (streamed as ``reasoning_summary_*`` events)
    refusal        responses: answer with a refusal part of this text
    citation       responses: the text cites this URL (a ``url_citation`` annotation)
    empty_output   responses: a stream's last event says ``"output": []`` (its items were
                   streamed), as vLLM, ChatGPT's Codex API and some proxies send it
    content        answer with this text (``repeat``: this many times over)
    contents       a list: the k-th request carrying this same list is answered by its k-th
                   entry (cycling): a text (as ``content``) or an object of these options
                   (``{"status": 503}``, ``{"delay": 5}``): one scope, different answers
    chunks         number of content pieces a stream is split into (default 4)
    endless        chat/completions streams: after the first content piece, repeat it until
                   the client disconnects (an answer no buffer between here and a client holds);
                   with ``chunk_delay``, paced by it
    raw            answer exactly ``{"status", "content_type", "headers", "body"}`` (a string;
                   an SSE body is sent as written): for malformed or odd upstream answers (of
                   ``/responses/input_tokens`` too, the one option a count takes)

A chat request for a model named ``o-...`` with ``max_tokens`` is refused as OpenAI's
reasoning models refuse it (a 400 asking for ``max_completion_tokens``), and one with
``max_completion_tokens`` over 100000 as too large for that model; one with a tool call
whose id is over 40 characters as OpenAI refuses it (a 400 naming ``messages[i].tool_calls[k].id``),
and one with a function description over 1024 characters (``tools[i].function.description``).

``stop`` is honoured as vLLM honours it: the answer ends before the first stop string it
contains, with ``finish_reason: "stop"`` and the choice's ``stop_reason`` naming that string.
A chat ``tool_choice`` that names a function is answered with a call of it, and, as OpenAI
does, ``finish_reason: "stop"``; with ``max_tokens`` under the 17 characters of its arguments
they are cut to that many, as a model that ran out of tokens leaves them (``"length"``).

``POST /v1/responses`` speaks the Responses API as OpenAI's reference describes it: a Response
object (``store`` defaults to true, and stored responses serve ``previous_response_id`` and
``GET``/``DELETE /v1/responses/{id}``), or the event stream (``event:`` lines, a
``sequence_number`` on each event, no ``[DONE]``). Its answer names the conversation it saw::

    "answer #3 to: And in French? [turns=3 instructions=Be brief temperature=None]"

``fake`` options for it: ``status``, ``delay``, ``break_after``, ``error_event`` (a
``type: error`` event), ``content``, ``chunks``, ``incomplete`` (status ``incomplete``),
``failed`` (a ``response.failed`` stream / status ``failed``), ``tool_call``, ``reasoning``,
``refusal``, ``citation``, ``empty_output``, ``code_interpreter`` (a ``code_interpreter_call``
item in the container its ``code_interpreter`` tool names, or ``cntr_<n>`` for ``auto``). ``include: ["message.output_text.logprobs"]`` is honoured: each streamed piece
of the text is a token, with ``top_logprobs`` alternatives (its logprobs on its delta event).

Run standalone: ``python -m tests.fake_upstream --port 9999``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import itertools
import struct
import threading
import time
from collections import Counter
from typing import Any

import msgspec

_encode = msgspec.json.encode
_decode = msgspec.json.decode


class FakeUpstream:
    """The ASGI app. ``stats`` counts requests by endpoint and how streams ended."""

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()
        self.last_body: dict[str, Any] = {}
        self.last_headers: dict[str, str] = {}
        self.last_query = b""  # the query string of the last request (a base URL's own)
        self.clients: set[tuple[Any, ...]] = set()  # (host, port) of each connection seen
        self._seen: Counter[str] = Counter()
        self._turns: Counter[str] = Counter()  # requests seen per ``contents`` list
        self._serial = 0
        #: Stored Responses: id -> (response, the conversation up to and including its output)
        self.responses: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}

    def reset(self) -> None:
        self.stats.clear()
        self._turns.clear()
        self._seen.clear()
        self.clients.clear()
        self.last_body = {}
        self.last_headers = {}
        self.last_query = b""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await lifespan(receive, send)
        path, method = scope["path"], scope["method"]
        self.last_query = scope.get("query_string", b"")
        if method == "GET" and path == "/_stats":
            return await send_json(send, 200, dict(self.stats))
        if method == "POST" and path == "/_reset":
            self.reset()
            return await send_json(send, 200, {"ok": True})
        if "/responses/" in path and method in ("GET", "DELETE"):
            return await self._stored(path, method, send)
        if method == "GET" and path.endswith("/models"):
            return await send_json(
                send, 200, {"object": "list", "data": [{"id": "fake", "object": "model"}]}
            )
        if method == "POST" and path.endswith("/responses/input_tokens"):
            body = _decode(await read_body(receive))
            self.stats["input_tokens"] += 1
            self.last_body = body
            self.last_headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            return await self._count(body, send)
        if method != "POST" or not path.endswith(
            ("/chat/completions", "/completions", "/embeddings", "/responses")
        ):
            return await send_json(
                send, 404, {"error": {"message": "no such route", "type": "invalid_request_error"}}
            )

        raw = await read_body(receive)
        body = _decode(raw)
        kind = "chat" if path.endswith("/chat/completions") else "completions"
        kind = "embeddings" if path.endswith("/embeddings") else kind
        kind = "responses" if path.endswith("/responses") else kind
        self.stats["requests"] += 1
        self.stats[kind] += 1
        self.clients.add(tuple(scope.get("client") or ()))
        self.last_body = body
        self.last_headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        fake = self._turn(body.get("fake") or {})
        self._seen[hashlib.sha256(raw).hexdigest()] += 1
        attempt = self._seen[hashlib.sha256(raw).hexdigest()]

        disconnected = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            disconnected.set()

        watcher = asyncio.create_task(watch())
        try:
            await self._respond(kind, body, fake, attempt, disconnected, send)
        finally:
            watcher.cancel()

    async def _respond(
        self, kind: str, body: dict[str, Any], fake: dict[str, Any], attempt: int,
        disconnected: asyncio.Event, send: Any,
    ) -> None:  # fmt: skip
        if fake.get("delay"):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(disconnected.wait(), fake["delay"])
            if disconnected.is_set():
                self.stats["cancelled"] += 1
                return
        if fake.get("raw") is not None:
            return await _as_written(fake["raw"], send)
        status = fake.get("stream_status") if body.get("stream") else None
        if fake.get("status") and attempt <= fake.get("fail_times", 10**9):
            status = fake["status"]
        if status:
            self.stats["errors"] += 1
            headers = {"retry-after": str(fake["retry_after"])} if "retry_after" in fake else {}
            if "retry_after_ms" in fake:  # (OpenAI's, which its SDKs read first)
                headers["retry-after-ms"] = str(fake["retry_after_ms"])
            headers["x-request-id"] = f"req_failed_{status}"
            message = {"message": f"fake failure {status}", "type": "server_error"}
            return await send_json(send, status, {"error": message}, headers)
        if fake.get("refuse_user") is not None and body.get("user") == fake["refuse_user"]:
            # as OpenAI refuses a field that leaves the answer alone (a ``user`` too long)
            error = {"message": "Invalid 'user': string too long.", "param": "user",
                     "type": "invalid_request_error", "code": "string_above_max_length"}  # fmt: skip
            return await send_json(send, 400, {"error": error})
        if fake.get("invalid_json"):
            return await _raw(send, 200, b"{not json", "application/json")
        if fake.get("error_body"):
            return await send_json(
                send, 200, {"error": {"message": "fake error in a 200", "type": "server_error"}}
            )

        if kind == "chat" and str(body.get("model")).startswith("o-") and "max_tokens" in body:
            # as OpenAI's reasoning models (o1, o3, gpt-5) refuse the older name
            error = {"message": "Unsupported parameter: 'max_tokens' is not supported with this "
                     "model. Use 'max_completion_tokens' instead.", "type": "invalid_request_error",
                     "param": "max_tokens", "code": "unsupported_parameter"}  # fmt: skip
            return await send_json(send, 400, {"error": error})
        asked = body.get("max_completion_tokens")
        if str(body.get("model")).startswith("o-") and isinstance(asked, int) and asked > 100000:
            error = {"message": f"max_completion_tokens is too large: {asked}. This model supports "
                     f"at most 100000 completion tokens, whereas you provided {asked}.",
                     "type": "invalid_request_error", "param": "max_completion_tokens",
                     "code": None}  # fmt: skip
            return await send_json(send, 400, {"error": error})
        if kind == "chat" and (too_long := _long_call_id(body) or _long_description(body)):
            return await send_json(send, 400, {"error": too_long})
        self._serial += 1
        if kind == "responses":
            return await self._respond_responses(body, fake, disconnected, send)
        if kind == "embeddings":
            answer = _embeddings(body, fake)
            if answer is None:
                value = body["input"]
                k = value.index(fake["error_input"]) if isinstance(value, list) else 0
                error = {"message": f"'$.input[{k}]' is invalid: too long", "param": f"input[{k}]",
                         "type": "invalid_request_error", "code": None}  # fmt: skip
                return await send_json(send, 400, {"error": error})
            return await send_json(send, 200, answer, {"x-request-id": f"req_emb_{self._serial}"})
        answer = self._answer(kind, body, fake)
        if fake.get("drop_choices"):
            answer["choices"] = answer["choices"][: -fake["drop_choices"]]
        if not body.get("stream"):
            return await send_json(send, 200, answer, _answer_headers(answer["id"]))
        await self._stream(kind, body, fake, answer, disconnected, send)

    # -- the Responses API -----------------------------------------------------------------

    async def _count(self, body: dict[str, Any], send: Any) -> None:
        """``POST /responses/input_tokens``: a word is a token (instructions, the conversation
        its previous_response_id continues, the input), with an answer's headers (its
        ``x-request-id`` is ``req_count_<n>``, the n-th count); ``fake.raw`` as for a create."""
        served = self.stats["input_tokens"]
        if (body.get("fake") or {}).get("raw") is not None:
            return await _as_written(body["fake"]["raw"], send)
        conversation = _items(body.get("input"))
        previous = body.get("previous_response_id")
        if previous is not None:
            if previous not in self.responses:
                return await send_json(send, 400, {"error": _previous_not_found(previous)})
            conversation = [*self.responses[previous][1], *conversation]
        text = " ".join([body.get("instructions") or "", *map(_item_text, conversation)])
        count = {"object": "response.input_tokens", "input_tokens": len(text.split())}
        return await send_json(send, 200, count, _answer_headers(f"count_{served}"))

    async def _respond_responses(
        self, body: dict[str, Any], fake: dict[str, Any], disconnected: asyncio.Event, send: Any
    ) -> None:
        conversation = _items(body.get("input"))
        known = {i.get("id") for _, items in self.responses.values() for i in items}
        for item in conversation:  # as OpenAI: an input item's id must be one it stored
            if "id" in item and item.get("type") != "item_reference" and item["id"] not in known:
                error = {"message": f"Item with id '{item['id']}' not found.",
                         "type": "invalid_request_error", "param": "input", "code": None}  # fmt: skip
                return await send_json(send, 400, {"error": error})
        previous = body.get("previous_response_id")
        if previous is not None:
            if previous not in self.responses:
                return await send_json(send, 400, {"error": _previous_not_found(previous)})
            conversation = [*self.responses[previous][1], *conversation]
        response = _response(self._serial, body, conversation, fake)
        if body.get("store", True):
            self.responses[response["id"]] = (response, [*conversation, *response["output"]])
        if not body.get("stream"):
            return await send_json(send, 200, response, _answer_headers(response["id"]))
        self.stats["streams"] += 1
        headers = [(k.encode(), v.encode()) for k, v in _answer_headers(response["id"]).items()]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), *headers]})  # fmt: skip
        events = _response_events(response, fake.get("chunks", 4))
        if fake.get("empty_output"):  # as vLLM, ChatGPT's Codex API and some proxies end it
            events[-1] = {**events[-1], "response": {**response, "output": []}}
        for i, event in enumerate(events):
            if self._ended(i, fake, disconnected):
                return
            if fake.get("error_event") is not None and i >= fake["error_event"]:
                event = {"type": "error", "code": "server_error", "param": None,
                         "message": "fake mid-stream failure", "sequence_number": i}  # fmt: skip
            data = b"event: " + event["type"].encode() + b"\ndata: " + _encode(event) + b"\n\n"
            last = i == len(events) - 1 or event["type"] == "error"
            await send({"type": "http.response.body", "body": data, "more_body": not last})
            if last:
                self.stats[
                    "streams_completed" if event["type"] != "error" else "streams_errored"
                ] += 1
                return

    async def _quiet(self, fake: dict[str, Any], disconnected: asyncio.Event, send: Any) -> None:
        """``first_delay`` seconds without an event (``keepalive``: comments meanwhile)."""
        deadline = time.monotonic() + fake["first_delay"]
        while (left := deadline - time.monotonic()) > 0 and not disconnected.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    disconnected.wait(), min(left, fake.get("keepalive") or left)
                )
            if fake.get("keepalive") and deadline - time.monotonic() > 0:
                await send({"type": "http.response.body", "body": b": keep-alive\n\n",
                            "more_body": True})  # fmt: skip

    def _ended(self, i: int, fake: dict[str, Any], disconnected: asyncio.Event) -> bool:
        """Before stream event ``i``: True when the client went away (counted cancelled);
        raises to cut the connection at ``break_after``."""
        if disconnected.is_set():
            self.stats["streams_cancelled"] += 1
            return True
        if fake.get("break_after") is not None and i >= fake["break_after"]:
            self.stats["streams_broken"] += 1
            raise ConnectionAbortedError("fake upstream cut the stream")
        return False

    async def _stored(self, path: str, method: str, send: Any) -> None:
        rest = path.split("/responses/", 1)[1]
        rid, _, tail = rest.partition("/")
        stored = self.responses.get(rid)
        if stored is None:
            error = {"message": f"Response with id '{rid}' not found.",
                     "type": "invalid_request_error", "param": None, "code": None}  # fmt: skip
            return await send_json(send, 404, {"error": error})
        self.stats["responses_" + method.lower()] += 1
        if method == "DELETE":
            del self.responses[rid]
            return await send_json(send, 200, {"id": rid, "object": "response", "deleted": True})
        if tail == "input_items":
            return await send_json(
                send,
                200,
                {"object": "list", "data": stored[1][: -len(stored[0]["output"]) or None]},
            )
        return await send_json(send, 200, stored[0])

    # -- helpers ---------------------------------------------------------------------------

    def _turn(self, fake: dict[str, Any]) -> dict[str, Any]:
        """``fake`` with its ``contents`` entry for this request applied."""
        contents = fake.get("contents")
        if not contents:
            return fake
        key = _encode(contents).decode()
        entry = contents[self._turns[key] % len(contents)]
        self._turns[key] += 1
        return {**fake, **(entry if isinstance(entry, dict) else {"content": entry})}

    def _answer(self, kind: str, body: dict[str, Any], fake: dict[str, Any]) -> dict[str, Any]:
        question = body["messages"][-1].get("content") if kind == "chat" else body.get("prompt")
        text = fake.get("content") or (
            f"answer #{self._serial} to: {question} "
            f"[temperature={body.get('temperature')} max_tokens={body.get('max_tokens')}]"
        )
        text *= fake.get("repeat", 1)
        finish = fake.get("finish_reason", "stop")
        text, matched = _stopped(text, body.get("stop"))
        ends = {"finish_reason": "stop", "stop_reason": matched} if matched else {}
        n = body.get("n") or 1
        usage = {
            "prompt_tokens": 11,
            "completion_tokens": len(text.split()),
            "total_tokens": 11 + len(text.split()),
        }
        created = int(time.time())
        if kind == "completions":
            choices = [
                {"index": i, "text": text, "logprobs": None, "finish_reason": finish, **ends}
                for i in range(n)
            ]
            return {"id": f"cmpl-{self._serial}", "object": "text_completion", "created": created,
                    "model": body["model"], "choices": choices, "usage": usage}  # fmt: skip
        message: dict[str, Any] = {"role": "assistant", "content": text}
        called = fake.get("tool_call") or _forced_function(body.get("tool_choice"))
        if called:
            arguments, limit = '{"city": "Paris"}', body.get("max_tokens") or 99
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{self._serial}", "type": "function",
                "function": {"name": called, "arguments": arguments[:limit]}}]}  # fmt: skip
            # NOTE: as OpenAI answers a tool_choice that names a function: finish_reason "stop"
            finish, ends = "tool_calls" if fake.get("tool_call") else "stop", {}
            finish = "length" if limit < len(arguments) else finish
        # with ``logprobs``: a token per streamed piece of the text (as OpenAI's, in order)
        logprobs = {"content": [{"token": piece, "logprob": -0.5, "bytes": list(piece.encode()),
                                 "top_logprobs": []} for piece in _split(message["content"] or "",
                                 fake.get("chunks", 4))], "refusal": None}  # fmt: skip
        choices = [
            {"index": i, "message": message, "logprobs": logprobs if body.get("logprobs") else None,
             "finish_reason": finish, **ends}
            for i in range(n)
        ]  # fmt: skip
        return {"id": f"chatcmpl-{self._serial}", "object": "chat.completion", "created": created,
                "model": body["model"], "system_fingerprint": "fp_fake", "choices": choices,
                "usage": usage}  # fmt: skip

    async def _stream(
        self, kind: str, body: dict[str, Any], fake: dict[str, Any], answer: dict[str, Any],
        disconnected: asyncio.Event, send: Any,
    ) -> None:  # fmt: skip
        headers = [(k.encode(), v.encode()) for k, v in _answer_headers(answer["id"]).items()]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), *headers]})  # fmt: skip
        events = list(_chunks(kind, answer, fake.get("chunks", 4)))
        generated = len(events)  # the usage chunk and [DONE] follow the last one at once
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({**_head(kind, answer), "choices": [], "usage": answer["usage"]})
        if fake.get("first_delay"):
            await self._quiet(fake, disconnected, send)
        # endless: the first content piece over and over, until the client disconnects
        endless = bool(fake.get("endless"))
        sent = itertools.chain(events[:2], itertools.repeat(events[1])) if endless else events
        for i, event in enumerate(sent):
            if endless:
                await asyncio.sleep(0)  # (a send into free buffer space does not yield)
            if self._ended(i, fake, disconnected):
                return
            if fake.get("bad_chunk") is not None and i == fake["bad_chunk"]:
                event = {**event, "choices": [{"index": 0, "delta": "not an object"}]}
            if fake.get("error_event") is not None and i >= fake["error_event"]:
                error = {"error": {"message": "fake mid-stream failure", "type": "server_error"}}
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"data: " + _encode(error) + b"\n\n",
                        "more_body": False,
                    }
                )
                self.stats["streams_errored"] += 1
                return
            chunk = b"data: " + _encode(event) + b"\n\n"
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if fake.get("chunk_delay") and (endless or i + 1 < generated):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(disconnected.wait(), fake["chunk_delay"])
        if disconnected.is_set():
            self.stats["streams_cancelled"] += 1
            return
        lingers = bool(fake.get("done_delay"))
        await send(
            {"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": lingers}
        )
        if lingers:
            await asyncio.sleep(fake["done_delay"])
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        self.stats["streams_completed"] += 1


def embedding_of(item: Any, dimensions: int = 8) -> list[float]:
    """The fake's embedding of one input: a function of the input alone (tests compare)."""
    digest = hashlib.sha256(repr(item).encode()).digest()
    return [round(b / 255, 4) for b in digest[:dimensions]]


def _embeddings(body: dict[str, Any], fake: dict[str, Any]) -> dict[str, Any] | None:
    value = body["input"]
    inputs = [value] if isinstance(value, str) or isinstance(value[0], int) else value
    if fake.get("error_input") in inputs:  # refuse it, as OpenAI does an input too long
        return None
    vectors = [embedding_of(x, body.get("dimensions", 8)) for x in inputs]
    if body.get("encoding_format") == "base64":  # little-endian float32s, as OpenAI sends them
        vectors = [base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode() for v in vectors]
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    if fake.get("drop_choices"):  # answer fewer embeddings than inputs
        data = data[: -fake["drop_choices"]]
    tokens = sum(len(x.split()) if isinstance(x, str) else len(x) for x in inputs)
    return {"object": "list", "data": data, "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}  # fmt: skip


def _too_long(param: str, limit: int, size: int) -> dict[str, Any]:
    """OpenAI's error for a string parameter over its maximum length."""
    return {"message": f"Invalid '{param}': string too long. Expected a string with "
            f"maximum length {limit}, but got a string with length {size} instead.",
            "type": "invalid_request_error", "param": param,
            "code": "string_above_max_length"}  # fmt: skip


def _long_call_id(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's error for a tool call id over 40 characters (as another provider's may be)."""
    for i, message in enumerate(body.get("messages") or ()):
        for k, call in enumerate(message.get("tool_calls") or ()):
            size = len(str(call.get("id") or ""))
            if size > 40:
                return _too_long(f"messages[{i}].tool_calls[{k}].id", 40, size)
    return None


def _long_description(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's error for a function description over 1024 characters (Anthropic has no limit)."""
    for i, tool in enumerate(body.get("tools") or ()):
        size = len(str((tool.get("function") or {}).get("description") or ""))
        if size > 1024:
            return _too_long(f"tools[{i}].function.description", 1024, size)
    return None


def _previous_not_found(previous: str) -> dict[str, Any]:
    return {"message": f"Previous response with id '{previous}' not found.",
            "type": "invalid_request_error", "param": "previous_response_id",
            "code": "previous_response_not_found"}  # fmt: skip


def _items(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": value}]}]  # fmt: skip
    return [item if "type" in item else {"type": "message", **item} for item in value or ()]


def _item_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))


def _response(
    serial: int, body: dict[str, Any], conversation: list[dict[str, Any]], fake: dict[str, Any]
) -> dict[str, Any]:
    """A Response object as OpenAI answers it (fields from the API reference)."""
    users = [i for i in conversation if i.get("role") == "user"]
    question = _item_text(users[-1]) if users else ""
    text = fake.get("content") or (
        f"answer #{serial} to: {question} [turns={len(conversation)} "
        f"instructions={body.get('instructions')} temperature={body.get('temperature')}]"
    )
    cited = [{"type": "url_citation", "start_index": 0, "end_index": len(text),
              "url": fake["citation"], "title": "Source"}] if fake.get("citation") else []  # fmt: skip
    part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": cited,
                            "logprobs": _logprobs(body, fake, text)}  # fmt: skip
    if fake.get("refusal"):
        part = {"type": "refusal", "refusal": fake["refusal"]}
    item: dict[str, Any] = {"type": "message", "id": f"msg_{serial}", "status": "completed",
                            "role": "assistant", "content": [part]}  # fmt: skip
    if fake.get("tool_call"):
        item = {"type": "function_call", "id": f"fc_{serial}", "call_id": f"call_{serial}",
                "name": fake["tool_call"], "arguments": '{"city": "Paris"}',
                "status": "completed"}  # fmt: skip
    status = (
        "failed" if fake.get("failed") else "incomplete" if fake.get("incomplete") else "completed"
    )
    status = "queued" if body.get("background") else status  # (its output comes later)
    summary = fake.get("reasoning")
    summary = [{"type": "summary_text", "text": summary}] if isinstance(summary, str) else []
    reasoning = [{"type": "reasoning", "id": f"rs_{serial}", "summary": summary}] * bool(
        fake.get("reasoning")
    )
    if fake.get("code_interpreter"):  # its container: the one named, or a new one ("auto")
        tool = next(t for t in body.get("tools") or () if t.get("type") == "code_interpreter")
        container = tool.get("container")
        reasoning.append({"type": "code_interpreter_call", "id": f"ci_{serial}",
                          "container_id": container if isinstance(container, str)
                          else f"cntr_{serial}", "code": "print(1)", "outputs": None,
                          "status": "completed"})  # fmt: skip
    words = len(text.split())
    return {
        "id": f"resp_{serial}", "object": "response", "created_at": int(time.time()),
        "completed_at": int(time.time()) if status == "completed" else None, "status": status,
        "error": {"code": "server_error", "message": "fake failure"} if status == "failed" else None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"), "model": body["model"],
        "output": [] if status == "queued" else [*reasoning, item], "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None}, "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0), "truncation": body.get("truncation", "disabled"),
        "usage": {"input_tokens": 11, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": words, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": 11 + words},
        "user": body.get("user"), "metadata": body.get("metadata") or {},
        "prompt_cache_key": body.get("prompt_cache_key"),
        "safety_identifier": body.get("safety_identifier"),
    }  # fmt: skip


def _response_events(response: dict[str, Any], pieces: int) -> list[dict[str, Any]]:
    """The event sequence OpenAI streams for ``response``, numbered."""
    opening = {**response, "status": "in_progress", "output": [], "usage": None,
               "completed_at": None}  # fmt: skip
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
    ]
    for index, item in enumerate(response["output"]):
        if item["type"] == "function_call":
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                }
            )
            events.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item["id"],
                    "output_index": index,
                    "delta": item["arguments"],
                }
            )
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item["id"],
                    "output_index": index,
                    "arguments": item["arguments"],
                }
            )
            events.append({"type": "response.output_item.done", "output_index": index,
                           "item": item})  # fmt: skip
            continue
        if item["type"] == "reasoning":
            events += _summary_events(index, item)
            continue
        if item["type"] == "code_interpreter_call":
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": {**item, "status": "in_progress"}})  # fmt: skip
            events.append({"type": "response.output_item.done", "output_index": index,
                           "item": item})  # fmt: skip
            continue
        part = item["content"][0]
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        events.append({"type": "response.output_item.added", "output_index": index,
                       "item": {**item, "status": "in_progress", "content": []}})  # fmt: skip
        if part["type"] == "refusal":
            events.append({"type": "response.content_part.added", **ids,
                           "part": {**part, "refusal": ""}})  # fmt: skip
            for piece in _split(part["refusal"], pieces):
                events.append({"type": "response.refusal.delta", **ids, "delta": piece})
            events.append({"type": "response.refusal.done", **ids, "refusal": part["refusal"]})
        else:
            events.append({"type": "response.content_part.added", **ids,
                           "part": {**part, "text": "", "annotations": [], "logprobs": []}})  # fmt: skip
            for k, piece in enumerate(_split(part["text"], pieces)):
                events.append({"type": "response.output_text.delta", **ids, "delta": piece,
                               "logprobs": part["logprobs"][k : k + 1]})  # fmt: skip
            for a, annotation in enumerate(part["annotations"]):
                events.append({"type": "response.output_text.annotation.added", **ids,
                               "annotation_index": a, "annotation": annotation})  # fmt: skip
            events.append({"type": "response.output_text.done", **ids, "text": part["text"],
                           "logprobs": part["logprobs"]})  # fmt: skip
        events.append({"type": "response.content_part.done", **ids, "part": part})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": f"response.{response['status']}", "response": response})
    return [{**e, "sequence_number": n} for n, e in enumerate(events)]


def _summary_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    """A reasoning item's events: added without its summary, each summary part, done."""
    events: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "summary": []},
        }
    ]
    for s, part in enumerate(item["summary"]):
        ids = {"item_id": item["id"], "output_index": index, "summary_index": s}
        events += [
            {"type": "response.reasoning_summary_part.added", **ids, "part": {**part, "text": ""}},
            {"type": "response.reasoning_summary_text.delta", **ids, "delta": part["text"]},
            {"type": "response.reasoning_summary_text.done", **ids, "text": part["text"]},
            {"type": "response.reasoning_summary_part.done", **ids, "part": part},
        ]
    events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    return events


def _logprobs(body: dict[str, Any], fake: dict[str, Any], text: str) -> list[dict[str, Any]]:
    """An output_text part's logprobs, when the request's ``include`` asks for them: a token
    per streamed piece, with ``top_logprobs`` alternatives."""
    if "message.output_text.logprobs" not in (body.get("include") or ()):
        return []
    top = [{"token": "x", "logprob": -9.0, "bytes": [120]}] * int(body.get("top_logprobs") or 0)
    return [{"token": piece, "logprob": -0.5, "bytes": list(piece.encode()), "top_logprobs": top}
            for piece in _split(text, fake.get("chunks", 4))]  # fmt: skip


def _head(kind: str, answer: dict[str, Any]) -> dict[str, Any]:
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    return {
        "id": answer["id"],
        "object": obj,
        "created": answer["created"],
        "model": answer["model"],
    }


def _chunks(kind: str, answer: dict[str, Any], pieces: int) -> Any:
    head = _head(kind, answer)
    for choice in answer["choices"]:
        index = choice["index"]
        if kind == "completions":
            text = choice["text"]
            for part in _split(text, pieces):
                yield {
                    **head,
                    "choices": [
                        {"index": index, "text": part, "logprobs": None, "finish_reason": None}
                    ],
                }
            yield {
                **head,
                "choices": [
                    {
                        "index": index,
                        "text": "",
                        "logprobs": None,
                        "finish_reason": choice["finish_reason"],
                        **_stop_reason(choice),
                    }
                ],
            }
            continue
        message = choice["message"]
        yield {
            **head,
            "choices": [
                {
                    "index": index,
                    "delta": {"role": "assistant", "content": ""},
                    "finish_reason": None,
                }
            ],
        }
        tokens = (choice.get("logprobs") or {}).get("content") or ()
        for p, part in enumerate(_split(message.get("content") or "", pieces)):
            # each piece carries its own token's logprobs, as OpenAI streams them
            logprobs = {"content": [tokens[p]], "refusal": None} if tokens else None
            delta = {"index": index, "delta": {"content": part}, "logprobs": logprobs}
            yield {**head, "choices": [{**delta, "finish_reason": None}]}
        for t, call in enumerate(message.get("tool_calls") or ()):
            first = {
                "index": t,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            yield {
                **head,
                "choices": [
                    {"index": index, "delta": {"tool_calls": [first]}, "finish_reason": None}
                ],
            }
            for part in _split(call["function"]["arguments"], 2):
                more = {"index": t, "function": {"arguments": part}}
                yield {
                    **head,
                    "choices": [
                        {"index": index, "delta": {"tool_calls": [more]}, "finish_reason": None}
                    ],
                }
        last = {"index": index, "delta": {}, "finish_reason": choice["finish_reason"]}
        yield {**head, "choices": [{**last, **_stop_reason(choice)}]}


def _forced_function(choice: Any) -> str | None:
    """The function a chat ``tool_choice`` names (``{"type": "function", ...}``), if any."""
    if isinstance(choice, dict) and choice.get("type") == "function":
        return str((choice.get("function") or {}).get("name") or "") or None
    return None


def _stopped(text: str, stop: Any) -> tuple[str, str | None]:
    """``text`` cut before the first stop string in it, and that string (vLLM's ``stop``)."""
    stops = [stop] if isinstance(stop, str) else list(stop or ())
    found = [(text.find(s), n, s) for n, s in enumerate(stops) if s and s in text]
    if not found:
        return text, None
    at, _, matched = min(found)
    return text[:at], matched


def _stop_reason(choice: dict[str, Any]) -> dict[str, Any]:
    return {"stop_reason": choice["stop_reason"]} if "stop_reason" in choice else {}


def _split(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(pieces, 1)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _answer_headers(answer_id: str) -> dict[str, str]:
    """What OpenAI sends with an answer (of this id): its request id and rate-limit state."""
    return {"x-request-id": f"req_{answer_id}", "x-ratelimit-remaining-requests": "4999",
            "openai-processing-ms": "7", "set-cookie": "not-for-clients=1"}  # fmt: skip


async def lifespan(receive: Any, send: Any) -> None:
    """Answer an ASGI lifespan scope (start-up and shutdown, nothing to do)."""
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


async def read_body(receive: Any) -> bytes:
    raw = b""
    while True:
        message = await receive()
        raw += message.get("body", b"")
        if not message.get("more_body"):
            return raw


async def send_json(
    send: Any, status: int, obj: Any, headers: dict[str, str] | None = None
) -> None:
    await _raw(send, status, _encode(obj), "application/json", headers)


async def _as_written(raw: dict[str, Any], send: Any) -> None:
    """The ``fake.raw`` answer: ``{"status", "content_type", "headers", "body"}`` as written."""
    content_type = raw.get("content_type", "application/json")
    body = raw["body"].encode()
    await _raw(send, raw.get("status", 200), body, content_type, raw.get("headers"))


async def _raw(
    send: Any, status: int, body: bytes, media: str, headers: dict[str, str] | None = None
) -> None:
    hdrs = [(b"content-type", media.encode()), (b"content-length", str(len(body)).encode())]
    hdrs += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


class ThreadedServer:
    """Runs an ASGI app with uvicorn on 127.0.0.1 in a background thread (tests, benchmarks)."""

    def __init__(
        self, app: Any, port: int = 0, lifespan: str = "off", http: Any = "httptools"
    ) -> None:
        import socket

        import uvicorn

        self.app = app
        self._socket = socket.socket()
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", port))
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, log_level="warning", http=http, lifespan=lifespan, access_log=False
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, daemon=True, name="fake-upstream")

    def _run(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._socket]))

    def start(self) -> ThreadedServer:
        self._thread.start()
        deadline = time.time() + 60  # (10 s was once too short on a machine at load 9)
        while not self._server.started:
            if time.time() > deadline:
                raise RuntimeError("fake upstream did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9999)
    args = parser.parse_args()
    uvicorn.run(FakeUpstream(), host=args.host, port=args.port, http="httptools", log_level="warning",
                access_log=False)  # fmt: skip


if __name__ == "__main__":
    main()
