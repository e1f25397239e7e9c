"""The OpenAI Responses API adapter: ``POST /v1/responses`` and the responses it stored.

A request's ``input`` (a string, or a list of items; none with a stored ``prompt`` template),
``instructions``, function ``tools``, ``text.format``, sampling parameters and
``previous_response_id`` map to the canonical request; a Response object (JSON) or the
Responses event stream is rendered back::

    response.created → response.in_progress → response.output_item.added
    → response.content_part.added → response.output_text.delta … → response.output_text.done
    → response.content_part.done → response.output_item.done → response.completed

each event with its ``sequence_number``. Upstreams that speak the API get the body as sent
(unknown fields untouched); the local model gets the request in Chat Completions form
(``to_chat``), its answer rendered back here, so its prefix KV cache serves every turn.

``previous_response_id``: when this gateway stored that response (for the same owner), the
conversation it stands for is resolved here — the cache key sees that conversation, never the
id — and an upstream that does not know the id (the gateway answered it from the cache or the
local model, or another model's upstream did) gets the conversation inlined as ``input``. An id the gateway does not hold is
forwarded upstream as is, and the request is cached under an exact key that includes the id
(the conversation then starts with a reference turn to it, so a follow-up on a cached answer
of that chain still continues it upstream) — unless the id is another owner's: one an
upstream answered for another owner stays refused (404) after its stored copy is gone, as the
upstream, called with the gateway's key, would continue it for anyone (``stored.claim``). So
does an input item naming one of that response's output items by id (``item_reference``).
An ``item_reference`` to an item this gateway made (a hit's or the local model's output) is
resolved here, from the owner's stored responses: no upstream ever saw that id.

The API is part of every cache scope (``kind``), so an answer stored through this API is never
served to a chat request, or the other way round: a Response object is not a chat completion.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal, Protocol, TypeVar, runtime_checkable

import msgspec

from semantic.keys import CacheKey, ContextMode, chat_key

from .backend import Backend
from .canonical import Answer, BackendStream, GatewayRequest, StreamEvent
from .errors import APIError, no_content, responses_error_event
from .messages_bridge import TokenCounter
from .requests import (
    Metadata,
    Seed,
    decode_body,
    gateway_request,
    integral,
    partitioned,
    validated,
)
from .stored import ResponseStore, StoredResponse

__all__ = [
    "InputTokenCounter",
    "ResponsesAdapter",
    "count_input_tokens",
    "param_as_sent",
    "resent_if_lost",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

_encode = msgspec.json.Encoder().encode
#: Events that end a Responses stream; only ``response.completed`` ends it with an answer.
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_ROLES = frozenset({"user", "assistant", "system", "developer"})
#: Fields outside the cache key that a Response echoes, where the stored one does: a hit
#: shows the request's own (see ``fresh``).
_ECHOED = ("prompt_cache_key", "prompt_cache_retention", "safety_identifier")
#: A conversation's first turn when it continues a response only the upstream holds.
_REFERENCE = "previous_response"
#: An input item that names an item the upstream holds (``{"type": "item_reference", "id"}``).
_ITEM_REFERENCE = "item_reference"

#: Request fields the local model honours or that cannot change its answer; any other field
#: gets a 400 when the local model serves the request.
_LOCAL_KNOWN = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "text",
        "max_output_tokens",
        "temperature",
        "top_p",
        "store",
        "metadata",
        "previous_response_id",
        "stream",
        "user",
        "parallel_tool_calls",
        "truncation",
        "service_tier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "safety_identifier",
        "stream_options",
        "include",
        "reasoning",
        "top_k",
        "seed",
        "background",
        "max_tool_calls",  # (a limit on tool calls: the local model makes none)
    }
)
#: Chat Completions fields an error may name, as the Responses API calls them.
_CHAT_PARAMS = {"messages": "input", "max_tokens": "max_output_tokens",
                "max_completion_tokens": "max_output_tokens"}  # fmt: skip
#: Responses fields the local model cannot honour, with the value that asks for nothing (a
#: 400 otherwise): clients that send every field they know send them so (``null``).
_LOCAL_UNUSED: dict[str, Any] = {
    "top_logprobs": 0,
    "conversation": None,
    "prompt": None,
    "context_management": None,
    "moderation": None,
}


#: The integer fields of a Responses request.
_INTEGERS = ("max_output_tokens", "top_logprobs", "top_k", "seed", "max_tool_calls")


class _Body(msgspec.Struct):
    """The fields cachegate reasons about; any other field passes through untouched."""

    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    store: bool | None = None
    metadata: Metadata | None = None
    previous_response_id: str | None = None
    stream: bool | None = None
    # NOTE: typed as OpenAI types them (a wrong one was answered, and echoed in the Response)
    seed: Seed | None = None
    user: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    parallel_tool_calls: bool | None = None
    background: bool | None = None


class ResponsesAdapter:
    """``/v1/responses``: parse, key, judge, fold, render; and the store of its responses.

    ``keyed``: the gateway has API keys, so a stored response belongs to a tenant; without
    keys it belongs to the client's own key (see ``owner``).
    """

    kind: Literal["responses"] = "responses"

    def __init__(self, store: ResponseStore, *, keyed: bool) -> None:
        self.store = store
        self._keyed = keyed

    # -- Wire ------------------------------------------------------------------------------

    def parse(self, raw: bytes, headers: Mapping[str, str], tenant: str) -> GatewayRequest:
        return self._parse(raw, headers, tenant, counting=False)

    def parse_count(self, raw: bytes, headers: Mapping[str, str], tenant: str) -> GatewayRequest:
        """A ``POST /v1/responses/input_tokens`` body: a Response request's fields, its
        conversation resolved as a Response request's is; ``input`` may be left out."""
        return self._parse(raw, headers, tenant, counting=True)

    def _parse(
        self, raw: bytes, headers: Mapping[str, str], tenant: str, *, counting: bool
    ) -> GatewayRequest:
        body = decode_body(raw)
        if "model" not in body:
            raise APIError(
                400, "You must provide a model parameter.", param="model", code="missing"
            )
        if "input" not in body and body.get("prompt") is None and not counting:
            raise APIError(
                400, "Missing required parameter: 'input'.", param="input", code="missing"
            )
        extension = body.pop("cache", None)
        integral(body, _INTEGERS)  # (3.0 is 3, as in chat: requests.integral)
        # a stored prompt template (or a count) may hold no input: the body is sent without one
        parsed = validated({"input": [], **body}, _Body)
        _check_tools(parsed.tools)
        items = input_items(parsed.input)
        request = gateway_request(
            "responses", body, headers, tenant, extension, stream=bool(parsed.stream)
        )
        if body.get("conversation") is not None:
            # NOTE: a conversation the upstream keeps grows with every turn (and a cached
            # answer would never be added to it): neither served from nor stored in the cache
            control = dataclasses.replace(request.control, no_cache=True, no_store=True)
            request = dataclasses.replace(request, control=control)
        owner = self.owner(request.tenant, headers)
        self._refuse_foreign_conversation(owner, body.get("conversation"))
        self._refuse_foreign_containers(owner, parsed.tools)
        self._refuse_foreign_items(owner, items)
        items, request = self._dereferenced(owner, items, request)
        previous_id = parsed.previous_response_id
        turns, earlier, body = self._resolve(owner, previous_id, items, request.body)
        return dataclasses.replace(
            request, body=_forwardable(body), owner=owner, turns=tuple(turns), earlier=earlier,
            previous=previous_id, standalone=_standalone(turns, body),
        )  # fmt: skip

    def _refuse_foreign_conversation(self, owner: str, conversation: Any) -> None:
        """A 404, as for an unknown conversation, when ``conversation`` names one an upstream
        took for another owner: called with the gateway's key, it continues (and so shows) any
        conversation made with that key, whoever names it, as it resolves a response id."""
        conversation_id = _conversation_id(conversation)
        if conversation_id is not None and self.store.foreign(owner, conversation_id):
            raise APIError(404, f"Conversation with id '{conversation_id}' not found.",
                           param="conversation")  # fmt: skip

    def _refuse_foreign_containers(self, owner: str, tools: list[dict[str, Any]] | None) -> None:
        """A 404, as for an unknown container, when a ``code_interpreter`` tool names one an
        upstream made (or ran in) for another owner: called with the gateway's key, it runs
        the tool in any container made with that key, whose files the code then reads."""
        for i, container_id in _named_containers(tools):
            if self.store.foreign(owner, container_id):
                raise APIError(404, f"Container with id '{container_id}' not found.",
                               param=f"tools[{i}].container")  # fmt: skip

    def _refuse_foreign_items(self, owner: str, items: list[dict[str, Any]]) -> None:
        """A 404, as for an unknown item, when an input item names another owner's item by its
        id: an upstream called with the gateway's key resolves it (an ``item_reference``, a
        reasoning item without its content) for anyone, as it does a response id."""
        for item in items:
            item_id = item.get("id")
            if isinstance(item_id, str) and self.store.foreign(owner, item_id):
                raise APIError(404, f"Item with id '{item_id}' not found.", param="input")

    def _dereferenced(
        self, owner: str, items: list[dict[str, Any]], request: GatewayRequest
    ) -> tuple[list[dict[str, Any]], GatewayRequest]:
        """Each ``item_reference`` to an item this gateway made (the output of a cache hit or
        of the local model) as that item, from the owner's stored responses: no upstream ever
        saw its id. A 404, as for an unknown item, when the owner holds none."""
        if not any(i.get("type") == _ITEM_REFERENCE and _ours(i.get("id")) for i in items):
            return items, request
        resolved, sent = [], []  # (the body's other items go as sent)
        for item, raw in zip(items, request.body["input"], strict=True):
            if item.get("type") == _ITEM_REFERENCE and _ours(item.get("id")):
                found = self._referenced(owner, item["id"])
                if found is None:
                    raise APIError(404, f"Item with id '{item['id']}' not found.", param="input")
                item = raw = found
            resolved.append(item)
            sent.append(raw)
        return resolved, dataclasses.replace(request, body={**request.body, "input": sent})

    def _resolve(
        self,
        owner: str,
        previous_id: str | None,
        items: list[dict[str, Any]],
        body: dict[str, Any],
    ) -> tuple[list[dict[str, Any]], int, dict[str, Any]]:
        """(the conversation, how many of its turns are earlier ones, the body to forward).

        An id this gateway does not hold becomes a reference turn, ``{"type":
        "previous_response", "id": ...}``, at the conversation's start: the key includes it
        (exact only), and a follow-up on this answer still continues that upstream chain.
        An id an upstream made is forwarded only to the model that made it: a follow-up on
        another model (another upstream, perhaps) gets the conversation inlined.
        """
        if previous_id is None:
            return items, 0, body
        previous = self.store.get(owner, previous_id)
        if previous is None and self.store.foreign(owner, previous_id):
            # another owner's (held, or claimed: its response may be gone): never forwarded,
            # as an upstream called with the gateway's key would resolve it for anyone
            raise _not_found(previous_id)
        if previous is None:  # not ours: the upstream may hold it
            return [{"type": _REFERENCE, "id": previous_id}, *items], 1, body
        turns = [*previous.conversation, *items]
        # the upstream never saw this id (or another model's upstream made it, which this
        # model's may not know): send the conversation
        if not previous.upstream or previous.model != body["model"]:
            body = _inlined(turns, body)
        return turns, len(previous.conversation), body

    def owner(self, tenant: str, headers: Mapping[str, str]) -> str:
        """Who may read a stored response: the tenant, or without gateway keys the client's
        own key (and OpenAI organization/project): clients of one open gateway stay apart."""
        if self._keyed:
            return tenant
        seen = "\n".join(
            [
                headers.get("authorization", ""),
                headers.get("openai-organization", ""),
                headers.get("openai-project", ""),
            ]
        )
        return partitioned(tenant, "key-" + hashlib.sha256(seen.encode()).hexdigest()[:32])

    def error_json(self, error: APIError) -> bytes:
        return error.json()

    def error_event(self, error: APIError, sequence: int = 0) -> bytes:
        return responses_error_event(error, sequence)

    # -- Adapter ---------------------------------------------------------------------------

    def key(self, request: GatewayRequest, context_turns: int | None,
            context: ContextMode = "exact", *, native: bool = False) -> CacheKey:  # fmt: skip
        """Every output-changing field (instructions, tools, text, temperature, …) is in the
        scope; the conversation is compared as chat turns, its last user turn by meaning.
        (``native`` changes nothing: the API's defaults that every backend applies alike are
        in ``semantic.keys._DEFAULTS`` already.)"""
        ns, turns = request.control.namespace, request.turns or ()
        fields = {
            k: v for k, v in request.body.items() if k not in ("input", "previous_response_id")
        }
        if "prompt" in fields:  # a stored prompt template (id, version, variables): it is in
            fields["prompt_template"] = fields.pop("prompt")  # the scope (chat's `prompt` is not)
        if "messages" in fields:  # (chat's turns: refused here, so in the scope, not the turns)
            fields["chat_messages"] = fields.pop("messages")
        fields["messages"] = [_key_turn(item) for item in turns]
        if any(t.get("type") in (_REFERENCE, _ITEM_REFERENCE) for t in turns):
            # NOTE: turns only the upstream knows: exact match only, their ids in the key
            key = chat_key(request.tenant, ns, request.model, fields, None, api=self.kind)
            return dataclasses.replace(key, question="", semantic=False)
        return chat_key(
            request.tenant, ns, request.model, fields, context_turns, context, api=self.kind
        )

    def complete(self, request: GatewayRequest, answer: dict[str, Any]) -> bool:
        return (
            answer.get("object") == "response"
            and answer.get("status") == "completed"
            and answer.get("error") is None
            and isinstance(answer.get("output"), list)
        )

    def fold(self, request: GatewayRequest, *, cached: bool) -> ResponsesFold:
        # always: a completed response is kept for previous_response_id, and every streamed
        # id is claimed for its owner as it arrives (a stream cut short may leave it upstream)
        self._claim_named(request)  # (the upstream took them: its stream opened)
        return ResponsesFold(lambda response_id: self.store.claim(request.owner, response_id))

    def fresh(self, request: GatewayRequest, stored: dict[str, Any]) -> dict[str, Any]:
        """A stored Response as a new one: new ids, created (and completed) now, and this
        request's own echoed fields (those outside the cache scope: metadata, store, user,
        previous_response_id, and ``_ECHOED``'s, where the stored one echoes them)."""
        output = [
            {**item, "id": _item_id(item)} if "id" in item else item
            for item in stored.get("output") or ()
        ]
        body, now = request.body, int(time.time())
        echoed = {k: body.get(k) for k in _ECHOED if k in stored}
        if stored.get("completed_at") is not None:  # (as created: not the stored answer's)
            echoed["completed_at"] = now
        return {
            **stored,
            **echoed,
            "id": _new_id("resp"),
            "created_at": now,
            "output": output,
            "metadata": body.get("metadata") or {},
            "store": body.get("store", True),
            "user": body.get("user"),
            "previous_response_id": request.previous,
        }

    def replay(self, request: GatewayRequest, stored: dict[str, Any]) -> Iterator[bytes]:
        return iter(replay_events(stored))

    def saved_tokens(self, stored: dict[str, Any]) -> int:
        usage = stored.get("usage") or {}
        return int(usage.get("output_tokens") or 0)

    def text(self, answer: dict[str, Any]) -> str:
        parts: list[str] = []
        for item in answer.get("output") or ():
            if not isinstance(item, dict):
                continue
            if item.get("type") == "function_call":
                parts.append(f"{item.get('name')}({item.get('arguments') or ''})")
            elif item.get("type") == "message":
                for part in item.get("content") or ():
                    if isinstance(part, dict):
                        parts.append(str(part.get("text") or part.get("refusal") or ""))
        return "\n".join(p for p in parts if p)

    @property
    def bridge(self) -> ResponsesAdapter:
        return self  # it renders the chat form's answers itself (to_chat, from_chat, ...)

    def delivered(self, request: GatewayRequest, answer: dict[str, Any], *, upstream: bool) -> None:
        """Keep a Response the client received (unless it asked ``store: false``), and claim
        the id of one an upstream answered for its owner, kept or not.

        NOTE: one still running upstream (``background: true``: ``queued`` or ``in_progress``)
        is not kept: the copy would never change. Polled at the gateway it is not found; a
        follow-up naming it goes to the upstream as a reference, as for any id not kept here
        (by its owner only: the claim refuses it to the others).
        """
        if answer.get("object") != "response" or not isinstance(answer.get("id"), str):
            return
        if not isinstance(answer.get("output") or [], list):
            return  # (not a Response: an upstream's garbage, relayed as it came)
        if upstream:
            self._claim_named(request)
            self.store.claim(request.owner, answer["id"])
            for item in answer.get("output") or ():  # (item ids too: ``_refuse_foreign_items``)
                for claimed in _claimed_ids(item):
                    self.store.claim(request.owner, claimed)
        if request.body.get("store") is False or _status(answer) in _RUNNING:
            return
        turns = list(request.turns or ())
        own = _unique_ids([self._listed(request.owner, item) for item in turns[request.earlier :]])
        output = [i for i in answer.get("output") or () if isinstance(i, dict)]
        conversation = [*turns, *output]
        if _conversation_id(request.body.get("conversation")) is not None:
            # NOTE: it continued turns only the upstream holds (the conversation's, never seen
            # here): a follow-up is keyed on this id, as on any response only the upstream holds
            conversation = [{"type": _REFERENCE, "id": answer["id"]}]
        # (not one made with a stored ``prompt``: its messages are the response's
        # instructions, never carried along ``previous_response_id``; a follow-up reads these
        # turns and its own ``prompt``, which its key holds)
        self.store.put(StoredResponse(request.owner, answer, own, conversation,
                                      upstream=upstream, model=request.model))  # fmt: skip

    def _listed(self, owner: str, item: dict[str, Any]) -> dict[str, Any]:
        """An input item as ``input_items`` lists it: with an id; a reference to an item the
        owner's stored responses hold, as that item (OpenAI lists the items a response read,
        never a reference: its list has no such type). One held by nobody here stays one."""
        if item.get("type") == _ITEM_REFERENCE and isinstance(item.get("id"), str):
            found = self._referenced(owner, item["id"])
            if found is not None:
                return found
        return _with_id(item)

    def _referenced(self, owner: str, item_id: str) -> dict[str, Any] | None:
        """The item ``item_id`` names among the owner's stored responses; None for none (a
        reference listed under an id of its own names no item: ``_unique_ids``)."""
        found = self.store.item(owner, item_id)
        return None if found is None or found.get("type") == _ITEM_REFERENCE else found

    def _claim_named(self, request: GatewayRequest) -> None:
        """Claim the upstream-kept ``conversation`` and containers a request names, once an
        upstream answered in them, for its owner (the first owner it answers for keeps each;
        ``_refuse_foreign_conversation``, ``_refuse_foreign_containers``)."""
        conversation_id = _conversation_id(request.body.get("conversation"))
        if conversation_id is not None:
            self.store.claim(request.owner, conversation_id)
        for _, container_id in _named_containers(request.body.get("tools")):
            self.store.claim(request.owner, container_id)

    # -- Bridge: served by a backend that speaks only Chat Completions ---------------------

    def check(self, request: GatewayRequest) -> None:
        """A 400 for a message item with no content (``[]``; one without any is refused as the
        request is read) but an assistant's, as the local model refuses a chat turn with none
        (errors.no_content): read as ``""``, the model answered an empty turn, and the answer
        was stored. One of the previous response's conversation names ``previous_response_id``."""
        for i, item in enumerate(request.turns or (), start=-request.earlier):
            if item.get("type") != "message" or item.get("role") == "assistant":
                continue
            if not item.get("content"):
                if i < 0:
                    raise _unreadable_earlier("a message with no content")
                raise no_content(f"input[{i}].content")

    def to_chat(self, request: GatewayRequest) -> GatewayRequest:
        """The request in Chat Completions form (the local model's), or a 400 naming what
        that form cannot carry (``check``'s too: a count is no create, see pipeline._bridge)."""
        self.check(request)
        body = request.body
        if not request.turns:
            raise APIError(400, "'input' must not be empty.", param="input", code="invalid_value")
        if request.turns[0].get("type") == _REFERENCE:
            raise _not_found(request.previous)  # earlier turns only an upstream holds
        chat = _chat_params(body)
        messages = (
            [{"role": "system", "content": body["instructions"]}]
            if body.get("instructions")
            else []
        )
        # (an item's index in the client's ``input``; the previous response's come before it)
        messages += [_chat_message(i - request.earlier, t) for i, t in enumerate(request.turns)]
        chat["messages"] = messages
        truncate = body.get("truncation") == "auto"
        return dataclasses.replace(
            request, kind="chat", body=chat, include_usage=True, truncate=truncate
        )

    def from_chat(
        self, request: GatewayRequest, answer: Answer, sampling: Mapping[str, float]
    ) -> Answer:
        completion = answer.body
        choice = (completion.get("choices") or [{}])[0]
        text = (choice.get("message") or {}).get("content") or ""
        message = _message(_new_id("msg"), text, _item_status(choice.get("finish_reason")))
        response = _response(
            request,
            completion.get("model"),
            [message],
            choice.get("finish_reason"),
            _usage(completion.get("usage") or {}),
            sampling,
        )
        # NOTE: created when it was asked for (the chat's ``created``), not when it completed:
        # one reading for both said a latency of 0, whatever the model took
        created = completion.get("created")
        if isinstance(created, int) and created <= response["created_at"]:
            response["created_at"] = created
        return Answer(response, answer.headers)

    def from_chat_stream(
        self, request: GatewayRequest, stream: BackendStream, sampling: Mapping[str, float]
    ) -> BackendStream:
        return _ChatAsResponses(request, stream, sampling)


class ResponsesFold:
    """A Responses stream's answer is the ``response`` of its last event (``completed``,
    ``incomplete`` or ``failed``: only a completed one is cached, see ``complete``);
    ``claim`` is told the response's id at its first event that carries one, and each output
    item's id as the item is added (a stream cut short has shown the client those).

    NOTE: some upstreams (vLLM, ChatGPT's Codex API, proxies) end the stream with an empty
    ``output`` after streaming its items: the answer's output is then the items of its
    ``response.output_item.done`` events, as the client saw them (stored as it was, every
    hit of it answered nothing).
    """

    def __init__(self, claim: Callable[[str], None] | None = None) -> None:
        self._final: dict[str, Any] | None = None
        self._claim = claim
        self._claimed = False  # the response's id
        self._streamed = 0
        self._items: dict[int, dict[str, Any]] = {}  # finished output items by output_index

    def add(self, chunk: dict[str, Any]) -> bool:
        kind = chunk.get("type")
        if isinstance(kind, str) and kind.endswith(".delta"):  # text, arguments, reasoning
            delta = chunk.get("delta")
            self._streamed += len(delta) if isinstance(delta, str) else 0
        index, item = chunk.get("output_index"), chunk.get("item")
        if kind == "response.output_item.done" and isinstance(item, dict):
            self._items[index if isinstance(index, int) else len(self._items)] = item
        if self._claim is not None:
            for claimed in _claimed_ids(item):
                self._claim(claimed)
        response = chunk.get("response")
        if not isinstance(response, dict):
            return True
        if self._claim is not None and not self._claimed and isinstance(response.get("id"), str):
            self._claim(response["id"])
            self._claimed = True
        if kind in _TERMINAL:
            self._final = response
        return True

    def result(self) -> dict[str, Any] | None:
        if self._final is not None and not self._final.get("output") and self._items:
            return {**self._final, "output": [self._items[i] for i in sorted(self._items)]}
        return self._final

    def usage(self) -> dict[str, Any] | None:
        return self._final.get("usage") if self._final is not None else None

    def streamed(self) -> int:
        """Characters of the ``*.delta`` events taken (a bridged stream's text deltas go to the
        client unparsed: the local model counts its own output, see LocalStream.counted)."""
        return self._streamed


def input_items(value: Any) -> list[dict[str, Any]]:
    """A request's ``input`` as items: a string is one user message (400 on a bad item)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [_part("input_text", value)]}]
    items: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        _check_strings(item, i)
        kind = item.get("type", "message")
        if "type" not in item and "role" not in item and "id" in item:
            kind = _ITEM_REFERENCE  # (its type may be left out)
            item = {**item, "type": kind}
        if kind == "message":
            role = item.get("role")
            if not isinstance(role, str) or role not in _ROLES:
                raise APIError(
                    400,
                    f"Invalid value for 'input[{i}].role': {role!r}.",
                    param=f"input[{i}].role",
                    code="invalid_value",
                )
            content = item.get("content")
            if isinstance(content, str):
                text = "output_text" if role == "assistant" else "input_text"
                content = [_part(text, content)]
            elif not isinstance(content, list):
                raise APIError(
                    400,
                    f"Missing required parameter: 'input[{i}].content'.",
                    param=f"input[{i}].content",
                    code="missing",
                )
            _check_parts(content, i)
            item = {**item, "type": "message", "content": content}
        items.append(item)
    return items


async def count_input_tokens(
    adapter: ResponsesAdapter, backend: Backend, request: GatewayRequest, auth: str | None
) -> Answer:
    """``POST /v1/responses/input_tokens``: ``{"input_tokens": n}`` asked of an
    OpenAI-compatible upstream (with the headers of its answer to relay), counted by the local
    model's tokenizer for the chat form of the request; other backends cannot (400)."""
    if "responses" in backend.apis and isinstance(backend, InputTokenCounter):
        answer = await resent_if_lost(lambda sent: backend.count_input_tokens(sent, auth), request)
        count = answer.body.get("input_tokens")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise APIError(502, f"Upstream for model '{backend.name}' answered no input_tokens.",
                           type="api_error", code="upstream_error")  # fmt: skip
        return Answer({"input_tokens": count}, answer.headers)
    if "chat" in backend.apis and isinstance(backend, TokenCounter):
        try:
            return Answer({"input_tokens": await backend.count_tokens(adapter.to_chat(request))})
        except APIError as exc:  # (as a create's: pipeline._params_of)
            param_as_sent(exc)
            raise
    raise APIError(
        400,
        f"Counting input tokens is not supported for model '{backend.name}'.",
        param="model",
        code="unsupported_model",
    )


def param_as_sent(exc: APIError) -> None:
    """Name in ``exc``'s ``param``, an error about the chat form of a Responses request (the
    local model's), the field as the client sent it: ``messages`` → ``input``, ..."""
    exc.param = _CHAT_PARAMS.get(exc.param or "", exc.param)


async def resent_if_lost(
    call: Callable[[GatewayRequest], Awaitable[T]], request: GatewayRequest
) -> T:
    """``call(request)``, and once more with the request's standalone body when the upstream
    no longer holds the earlier response it names (``GatewayRequest.standalone``: a restarted
    worker, a response deleted there): a create and a count both go on with the conversation."""
    try:
        return await call(request)
    except APIError as exc:
        if exc.code != "previous_response_not_found" or request.standalone is None:
            raise
    log.info("model %s: the upstream holds no %s now; sending the conversation instead",
             request.model, request.previous)  # fmt: skip
    return await call(dataclasses.replace(request, body=request.standalone, standalone=None))


@runtime_checkable
class InputTokenCounter(Protocol):
    """A backend that counts a Response request's input tokens (an OpenAI-compatible API)."""

    async def count_input_tokens(
        self, request: GatewayRequest, auth: str | None = None
    ) -> Answer: ...


def replay_events(response: dict[str, Any]) -> list[bytes]:
    """A complete Response object as the event stream that would have produced it."""
    events = _Events(response)
    out = [events.opening()]
    for index, item in enumerate(response.get("output") or ()):
        out.append(events.item_added(index, item))
        if item.get("type") == "message":
            for c, part in enumerate(item.get("content") or ()):
                out.append(events.part_added(index, item, c, part))
                out += events.part_content(index, item, c, part)
                out.append(events.part_done(index, item, c, part))
        elif item.get("type") == "reasoning":
            out += events.summary(index, item)
        elif item.get("type") == "function_call":
            out.append(events.arguments(index, item))
        out.append(events.item_done(index, item))
    out.append(events.closing(response))
    return out


# ---------------------------------------------------------------------------------------------
# helpers


class _Events:
    """Encodes the events of one response, numbering them (``sequence_number``)."""

    def __init__(self, response: dict[str, Any]) -> None:
        self._seq = 0
        self._skeleton = {
            **response,
            "status": "in_progress",
            "output": [],
            "usage": None,
            "incomplete_details": None,
        }
        if "completed_at" in response:  # (not yet, as OpenAI's stream opens)
            self._skeleton["completed_at"] = None

    @property
    def numbered(self) -> dict[str, Any]:
        """The number of the last event encoded, as a chunk the relay reads it from (it
        numbers an error event it adds after them)."""
        return {"sequence_number": self._seq - 1}

    def event(self, kind: str, **fields: Any) -> bytes:
        data = _encode({"type": kind, "sequence_number": self._seq, **fields})
        self._seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"

    def error(self, error: APIError) -> bytes:
        sent = responses_error_event(error, self._seq)
        self._seq += 1
        return sent

    def opening(self) -> bytes:
        return self.event("response.created", response=self._skeleton) + self.event(
            "response.in_progress", response=self._skeleton
        )

    def item_added(self, index: int, item: dict[str, Any]) -> bytes:
        opened = {**item, "status": "in_progress"} if "status" in item else dict(item)
        if item.get("type") == "message":
            opened["content"] = []
        elif item.get("type") == "function_call":
            opened["arguments"] = ""
        elif item.get("type") == "reasoning" and "summary" in item:
            opened["summary"] = []
        return self.event("response.output_item.added", output_index=index, item=opened)

    def summary(self, index: int, item: dict[str, Any]) -> list[bytes]:
        """A reasoning item's summary parts, each as OpenAI streams one: added (empty), its
        text, done."""
        out: list[bytes] = []
        for s, part in enumerate(item.get("summary") or ()):
            ids = {"item_id": item.get("id"), "output_index": index, "summary_index": s}
            text = part.get("text", "")
            out += [
                self.event(
                    "response.reasoning_summary_part.added", **ids, part={**part, "text": ""}
                ),
                self.event("response.reasoning_summary_text.delta", **ids, delta=text),
                self.event("response.reasoning_summary_text.done", **ids, text=text),
                self.event("response.reasoning_summary_part.done", **ids, part=part),
            ]
        return out

    def part_added(self, index: int, item: dict[str, Any], c: int, part: dict[str, Any]) -> bytes:
        # as OpenAI opens a part: empty, its text, refusal, annotations and logprobs to come
        empty = {k: ([] if k in ("annotations", "logprobs") else v) for k, v in part.items()}
        empty.update({k: "" for k in ("text", "refusal") if k in part})
        return self.event(
            "response.content_part.added",
            item_id=item.get("id"),
            output_index=index,
            content_index=c,
            part=empty,
        )

    def part_content(
        self, index: int, item: dict[str, Any], c: int, part: dict[str, Any]
    ) -> list[bytes]:
        """A complete part's events between added and done: its text (with its logprobs, then
        its annotations), or its refusal."""
        ids = {"item_id": item.get("id"), "output_index": index, "content_index": c}
        if part.get("type") == "refusal":
            refusal = part.get("refusal") or ""
            return [
                self.event("response.refusal.delta", **ids, delta=refusal),
                self.event("response.refusal.done", **ids, refusal=refusal),
            ]
        if part.get("type") != "output_text":
            return []
        text, logprobs = part.get("text", ""), part.get("logprobs") or []
        out = [self.text_delta(index, item, c, text, logprobs)]
        for a, annotation in enumerate(part.get("annotations") or ()):
            out.append(self.event("response.output_text.annotation.added", **ids,
                                  annotation_index=a, annotation=annotation))  # fmt: skip
        return [*out, self.text_done(index, item, c, text, logprobs)]

    def text_delta(
        self, index: int, item: dict[str, Any], c: int, delta: str, logprobs: Sequence[Any] = ()
    ) -> bytes:
        return self._text("response.output_text.delta", index, item, c, logprobs, delta=delta)

    def text_done(
        self, index: int, item: dict[str, Any], c: int, text: str, logprobs: Sequence[Any] = ()
    ) -> bytes:
        return self._text("response.output_text.done", index, item, c, logprobs, text=text)

    def _text(
        self,
        kind: str,
        index: int,
        item: dict[str, Any],
        c: int,
        logprobs: Sequence[Any],
        **text: str,
    ) -> bytes:
        ids = {"item_id": item.get("id"), "output_index": index, "content_index": c}
        return self.event(kind, **ids, **text, logprobs=list(logprobs))

    def part_done(self, index: int, item: dict[str, Any], c: int, part: dict[str, Any]) -> bytes:
        return self.event(
            "response.content_part.done",
            item_id=item.get("id"),
            output_index=index,
            content_index=c,
            part=part,
        )

    def arguments(self, index: int, item: dict[str, Any]) -> bytes:
        args = item.get("arguments", "")
        return self.event(
            "response.function_call_arguments.delta",
            item_id=item.get("id"),
            output_index=index,
            delta=args,
        ) + self.event(
            "response.function_call_arguments.done",
            item_id=item.get("id"),
            output_index=index,
            arguments=args,
        )

    def item_done(self, index: int, item: dict[str, Any]) -> bytes:
        return self.event("response.output_item.done", output_index=index, item=item)

    def closing(self, response: dict[str, Any]) -> bytes:
        status = response.get("status")
        kind = "response.completed" if status == "completed" else f"response.{status}"
        return self.event(kind if kind in _TERMINAL else "response.failed", response=response)


class _ChatAsResponses:
    """A chat-completions stream (the local model's) as the Responses event stream."""

    def __init__(
        self, request: GatewayRequest, stream: BackendStream, sampling: Mapping[str, float]
    ) -> None:
        self._request = request
        self._stream = stream
        self._sampling = sampling

    @property
    def headers(self) -> Mapping[str, str]:
        return self._stream.headers

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        message = _message(_new_id("msg"), "", "in_progress")
        part = message["content"][0]
        response = _response(self._request, self._request.model, [], None, None, self._sampling)
        response["status"] = "in_progress"
        events = _Events(response)
        # (each event's chunk its number only: the relay numbers an error event it adds)
        yield StreamEvent(events.opening(), events.numbered)
        opened = events.item_added(0, message) + events.part_added(0, message, 0, part)
        yield StreamEvent(opened, events.numbered)
        text: list[str] = []
        finish: str | None = None
        usage: dict[str, Any] = {}
        model = self._request.model
        async for event in self._stream:
            if event.error:  # a chat error event, as the Responses API sends one
                yield StreamEvent(_chat_error(event.chunk, events), event.chunk, error=True)
                return
            if event.chunk is None and not event.done:
                yield event  # a keep-alive comment
                continue
            if event.done:
                break
            chunk = event.chunk or {}
            model = chunk.get("model") or model
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                delta = (choice.get("delta") or {}).get("content")
                if delta:
                    text.append(delta)
                    delta_event = events.text_delta(0, message, 0, delta)
                    yield StreamEvent(delta_event, events.numbered)
                finish = choice.get("finish_reason") or finish
        else:
            return  # ended without [DONE]: the relay reports it
        full = "".join(text)
        done = _message(message["id"], full, _item_status(finish))
        final = _response(self._request, model, [done], finish, _usage(usage), self._sampling)
        # NOTE: one response, one id: the one response.created announced
        final.update(id=response["id"], created_at=response["created_at"])
        tail = events.text_done(0, message, 0, full) + events.part_done(
            0, message, 0, done["content"][0]
        )
        yield StreamEvent(tail + events.item_done(0, done), events.numbered)
        yield StreamEvent(
            events.closing(final),
            {"type": f"response.{final['status']}", "response": final},
            done=True,
        )

    async def aclose(self) -> None:
        await self._stream.aclose()

    def counted(self) -> dict[str, Any] | None:
        return self._stream.counted()


def _chat_error(chunk: dict[str, Any] | None, events: _Events) -> bytes:
    """A chat stream's error event (``{"error": {...}}``) as a Responses stream's."""
    error = (chunk or {}).get("error")
    error = error if isinstance(error, dict) else {}
    message = error.get("message")
    failed = APIError(502, message if isinstance(message, str) else "The model failed.",
                      param=error.get("param"), code=error.get("code"))  # fmt: skip
    return events.error(failed)


def _named_containers(tools: Any) -> list[tuple[int, str]]:
    """(index, id) of each ``code_interpreter`` tool that names its container by its id (one
    the upstream keeps; ``{"type": "auto"}`` asks for a new one)."""
    return [
        (i, tool["container"])
        for i, tool in enumerate(tools if isinstance(tools, list) else ())
        if isinstance(tool, dict)
        and tool.get("type") == "code_interpreter"
        and isinstance(tool.get("container"), str)
    ]


def _claimed_ids(item: Any) -> list[str]:
    """The ids an upstream's output item makes its owner's: its own, and the container a
    ``code_interpreter_call`` ran in (``_refuse_foreign_containers``)."""
    if not isinstance(item, dict):
        return []
    return [v for v in (item.get("id"), item.get("container_id")) if isinstance(v, str)]


def _conversation_id(conversation: Any) -> str | None:
    """The id a request's ``conversation`` names: the id itself, or ``{"id": ...}``."""
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    return conversation if isinstance(conversation, str) else None


def _status(response: dict[str, Any]) -> str | None:
    """A Response's ``status``, when it is a string (an upstream's list is not hashable)."""
    status = response.get("status")
    return status if isinstance(status, str) else None


def _item_status(finish: str | None) -> str:
    """The message item's status: cut at max_output_tokens, it is ``incomplete`` as its
    response is (OpenAI's)."""
    return "incomplete" if finish == "length" else "completed"


def _response(
    request: GatewayRequest,
    model: Any,
    output: list[dict[str, Any]],
    finish: str | None,
    usage: dict[str, Any] | None,
    sampling: Mapping[str, float],
) -> dict[str, Any]:
    """A Response object echoing the request's parameters, as OpenAI's does; ``temperature``
    and ``top_p`` the request left unset echo what the backend applied (``sampling``), and
    ``service_tier`` the one that served it (``"default"``: the local model has no other)."""
    body = request.body
    incomplete, now = finish == "length", int(time.time())
    return {
        "id": _new_id("resp"),
        "object": "response",
        "created_at": now,
        "completed_at": None if incomplete else now,  # (OpenAI's: only a completed one's)
        "status": "incomplete" if incomplete else "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": model or request.model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": request.previous,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": _applied(body, "temperature", sampling),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": _applied(body, "top_p", sampling),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


def _applied(body: dict[str, Any], name: str, sampling: Mapping[str, float]) -> Any:
    value = body.get(name)
    return sampling[name] if value is None else value


def _usage(chat: dict[str, Any]) -> dict[str, Any]:
    details = chat.get("prompt_tokens_details") or {}
    # NOTE: both required by the SDK's ``InputTokensDetails`` (without ``cache_write_tokens``
    # its field read None); nothing here is written to a provider's prompt cache at a premium
    read, written = details.get("cached_tokens", 0), details.get("cache_write_tokens", 0)
    return {
        "input_tokens": chat.get("prompt_tokens", 0),
        "input_tokens_details": {"cached_tokens": read, "cache_write_tokens": written},
        "output_tokens": chat.get("completion_tokens", 0),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": chat.get("total_tokens", 0),
    }


def _message(item_id: str, text: str, status: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [part],
    }


def _chat_params(body: dict[str, Any]) -> dict[str, Any]:
    """The sampling parameters of a Responses body as Chat Completions ones (local model)."""
    for param, value in body.items():
        if param in _LOCAL_UNUSED:
            if value is not None and value != _LOCAL_UNUSED[param]:
                raise _unsupported(param)
        elif param not in _LOCAL_KNOWN:
            raise _unsupported(param, "is not a request argument the local model recognizes")
        if param in ("include", "reasoning") and not _unset(value):
            raise _unsupported(param)
        if param == "background" and value:  # (false: the SDKs' and clients' no-op value)
            raise _unsupported(param, "(true) is not supported by the local model")
    fmt = (body.get("text") or {}).get("format") or {}  # (``text``: an object, validated)
    if not isinstance(fmt, dict) or fmt.get("type", "text") != "text":
        raise _unsupported("text.format", "other than text is not supported by the local model")
    chat: dict[str, Any] = {"model": body["model"], "stream": bool(body.get("stream"))}
    for name in ("temperature", "top_p", "top_k", "seed", "tools", "tool_choice", "user"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("max_output_tokens") is not None:
        chat["max_completion_tokens"] = body["max_output_tokens"]
    return chat


def _unset(value: Any) -> bool:
    """Whether an ``include`` or ``reasoning`` asks for nothing: empty, or an object of nulls
    only (``{"effort": null}``, what clients send for "the model's default")."""
    if isinstance(value, dict):
        return all(v is None for v in value.values())
    return value in (None, [])


def _chat_message(index: int, item: dict[str, Any]) -> dict[str, Any]:
    """A message item as a chat message, or a 400 naming what the client sent: ``input[index]``
    (``index``: the item's in the request's ``input``), or the ``previous_response_id`` whose
    conversation holds it (a negative ``index``: an earlier turn, which the client never sent)."""
    if item.get("type") != "message":
        if index < 0:
            raise _unreadable_earlier(f"an item of type '{item.get('type')}'")
        raise _unsupported(
            f"input[{index}]", f"of type '{item.get('type')}' is not supported by the local model"
        )
    texts = []
    for j, part in enumerate(item["content"]):
        if part.get("type") not in _TEXT_PARTS or not isinstance(part.get("text"), str):
            if index < 0:
                raise _unreadable_earlier("content other than text")
            raise _unsupported(
                f"input[{index}].content[{j}]", "is not text, which is all the local model reads"
            )
        texts.append(part["text"])
    return {"role": item["role"], "content": "".join(texts)}


def _unreadable_earlier(what: str) -> APIError:
    return _unsupported(
        "previous_response_id", f"names a conversation the local model cannot read: {what}"
    )


def _check_strings(item: dict[str, Any], i: int) -> None:
    """An item's ``type`` and ``id`` are strings where given, or null (400 otherwise, as
    OpenAI's: not a 500 once an upstream that took them has answered, on storing them)."""
    for name in ("type", "id"):
        if item.get(name) is not None and not isinstance(item[name], str):
            raise APIError(
                400,
                f"Invalid type for 'input[{i}].{name}': expected a string.",
                param=f"input[{i}].{name}",
                code="invalid_type",
            )


def _check_parts(content: list[Any], i: int) -> None:
    """A message's content parts are objects with a ``type``, text parts with a string
    ``text`` (400 otherwise, not a 500)."""
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise APIError(
                400,
                f"Invalid value for 'input[{i}].content[{j}]': expected an object with a 'type'.",
                param=f"input[{i}].content[{j}]",
                code="invalid_value",
            )
        if part["type"] in _TEXT_PARTS and not isinstance(part.get("text"), str):
            raise APIError(
                400,
                f"Invalid type for 'input[{i}].content[{j}].text': expected a string.",
                param=f"input[{i}].content[{j}].text",
                code="invalid_type",
            )


#: The statuses of a Response still being generated (``background: true``).
_RUNNING = frozenset({"queued", "in_progress"})
#: Content parts whose ``text`` is the text (a string).
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def _key_turn(item: dict[str, Any]) -> dict[str, Any]:
    """An item as a chat turn for the cache key: text parts as chat text parts (so the last
    user turn is a question the semantic tier can compare); everything else as sent."""
    if item.get("type") in (_REFERENCE, _ITEM_REFERENCE):
        return item  # NOTE: its id is what the key must tell apart (unlike an item's own id)
    item = _without_unset(item)
    if item.get("type") != "message":
        return {k: v for k, v in item.items() if k not in ("id", "status")}
    content = [
        {"type": "text", "text": p["text"]}
        if p.get("type") in ("input_text", "output_text") and isinstance(p.get("text"), str)
        else _without_unset(p)  # (an image's ``file_id`` sent as null: its optional fields)
        for p in item["content"]
    ]
    rest = {k: v for k, v in item.items() if k not in ("id", "status", "type", "content", "role")}
    return {"role": item["role"], "content": content, **rest}


def _without_unset(item: dict[str, Any]) -> dict[str, Any]:
    """An input item (or content part) less its fields sent as null: optional ones, null is
    left out (the SDKs' ``model_dump()`` of an output item sent back keeps them:
    ``encrypted_content``, ``namespace``, ``phase``); not those the API requires
    (``_NULL_REQUIRED``: one left out and one sent as null differ, an upstream may refuse
    either, and a hit must not answer what a miss would refuse)."""
    kind = item.get("type")
    kept = _NULL_REQUIRED.get(kind, frozenset()) if isinstance(kind, str) else frozenset()
    return {k: v for k, v in item.items() if v is not None or k in kept}


#: Input item (and content part) fields the API requires, by the item's type: null a value
#: of them, or (an image's ``detail``) no value at all, though one left out reads ``auto``.
_NULL_REQUIRED = {
    "image_generation_call": frozenset({"result"}),
    "code_interpreter_call": frozenset({"code", "outputs"}),
    "input_image": frozenset({"detail"}),
}


def _check_tools(tools: list[dict[str, Any]] | None) -> None:
    for i, tool in enumerate(tools or ()):
        if tool.get("type") == "function" and not isinstance(tool.get("name"), str):
            raise APIError(
                400,
                f"Missing required parameter: 'tools[{i}].name'.",
                param=f"tools[{i}].name",
                code="missing",
            )


def _part(kind: str, text: str) -> dict[str, Any]:
    return {"type": kind, "text": text}


def _sendable(item: dict[str, Any]) -> bool:
    """Whether an item of a conversation the upstream never saw can be sent to it in full:
    not the reference to its own chain (sent as ``previous_response_id``), nor a reasoning
    item without its ``encrypted_content`` (the upstream finds those by id only, and it
    never stored this one: a 400)."""
    kind = item.get("type")
    return kind != _REFERENCE and (kind != "reasoning" or bool(item.get("encrypted_content")))


def _inlined(turns: list[dict[str, Any]], body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with the conversation ``turns`` as its input, in place of its
    ``previous_response_id`` (still there if the conversation opens with a reference: the
    upstream chain it continues)."""
    body = {k: v for k, v in body.items() if k != "previous_response_id"}
    if _referenced(turns):
        body["previous_response_id"] = turns[0]["id"]
    body["input"] = [_inline(t) for t in turns if _sendable(t)]
    return body


def _standalone(turns: list[dict[str, Any]], body: dict[str, Any]) -> dict[str, Any] | None:
    """The body to send instead when the upstream no longer holds the ``previous_response_id``
    that ``body`` names and this gateway holds with all its turns (a restarted worker keeps
    none): the conversation inlined. None when the body names none, or none held here."""
    if body.get("previous_response_id") is None or _referenced(turns):
        return None
    return _forwardable(_inlined(turns, body))


def _referenced(turns: list[dict[str, Any]]) -> bool:
    """Whether the conversation opens with a reference to a response only the upstream holds
    (it may have no turn at all: a prompt template's input, no output)."""
    return bool(turns) and turns[0].get("type") == _REFERENCE


def _forwardable(body: dict[str, Any]) -> dict[str, Any]:
    """The body with its input items as an upstream can take them: the ids this gateway gave
    them (a client sends back the output of a cache hit or of the local model) left out, as
    the upstream answers an item id it did not store with a 400; a reasoning item of ours
    without its ``encrypted_content`` cannot be sent at all."""
    items = body.get("input")
    if not isinstance(items, list) or not any(map(_with_our_id, items)):
        return body
    sent = []
    for item in items:
        if not _with_our_id(item):
            sent.append(item)
        elif _sendable(item):
            sent.append(_inline(item))
    return {**body, "input": sent}


def _with_our_id(item: dict[str, Any]) -> bool:
    """An item sent in full (not a reference) with an id this gateway made."""
    kind = item.get("type", "message" if "role" in item else _ITEM_REFERENCE)
    return kind != _ITEM_REFERENCE and _ours(item.get("id"))


def _inline(item: dict[str, Any]) -> dict[str, Any]:
    """An item sent in full, without the id this gateway gave it (the upstream answers an
    input item id it did not store with a 400); an item reference keeps its id."""
    if item.get("type") == _ITEM_REFERENCE or "id" not in item:
        return item
    return {k: v for k, v in item.items() if k != "id"}


def _with_id(item: dict[str, Any]) -> dict[str, Any]:
    return item if "id" in item else {"id": _item_id(item), **item}


def _unique_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` (a request's input, as stored) with an id of their own each: an item whose id
    an earlier one has (an output item a client sends back twice, an item and a reference to
    it, two references to one item) gets a new one.

    NOTE: the input items' pages are cursored by id (``input_items_page``): an id held twice
    would start the next page at its first holder again (the SDK's auto-paging never ends),
    or skip what follows the second. OpenAI's list documents no duplicate (it lists items, a
    referenced one as itself: ``_listed``); here the first holder of an id keeps it, so a
    reference listed first still names its item, and a later one names only its place in
    the list (a reference to it is unknown: ``_dereferenced``).
    """
    seen: set[Any] = set()
    unique = []
    for item in items:
        if item.get("id") in seen:
            item = {**item, "id": _item_id(item)}
        seen.add(item.get("id"))
        unique.append(item)
    return unique


def _item_id(item: dict[str, Any]) -> str:
    return _new_id(_ID_PREFIXES.get(item.get("type", ""), "item"))


#: The id prefixes OpenAI gives its output items, by type.
_ID_PREFIXES = {"message": "msg", "function_call": "fc", "reasoning": "rs",
                "web_search_call": "ws", "file_search_call": "fs", "computer_call": "cu"}  # fmt: skip


def _new_id(prefix: str) -> str:
    """An id as OpenAI's look (48 hex digits), its last 8 a digest of the others: an id this
    gateway made is told from an upstream's without remembering it (``_ours``)."""
    random = secrets.token_hex(20)
    return f"{prefix}_{random}{_tag(random)}"


def _ours(item_id: Any) -> bool:
    """Whether this gateway made ``item_id`` (one in 2**32 upstream ids passes for one)."""
    if not isinstance(item_id, str) or len(item_id) < 49 or item_id[-49] != "_":
        return False
    random, tag = item_id[-48:-8], item_id[-8:]
    return secrets.compare_digest(tag, _tag(random))


def _tag(random: str) -> str:
    return hashlib.blake2b(random.encode(), digest_size=4, person=b"cachegate-id").hexdigest()


def _not_found(response_id: str | None) -> APIError:
    return APIError(
        400,
        f"Previous response with id '{response_id}' not found.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


def _unsupported(param: str, what: str = "is not supported by the local model") -> APIError:
    return APIError(400, f"'{param}' {what}.", param=param, code="unsupported_parameter")


def input_items_page(items: list[dict[str, Any]], query: Mapping[str, str]) -> dict[str, Any]:
    """``GET /v1/responses/{id}/input_items``: a page of a response's input items
    (``limit`` 1-100, default 20; ``order`` ``desc`` (the default) or ``asc``; ``after``, and
    ``before``: the ``limit`` items just before that one; an id not among them is a 400)."""
    try:
        limit = int(query.get("limit", 20))
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        raise APIError(400, "'limit' must be an integer from 1 to 100.", param="limit")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise APIError(400, "'order' must be 'asc' or 'desc'.", param="order")
    ordered = items if order == "asc" else items[::-1]
    ids = [i.get("id") for i in ordered]
    start, end = _cursor(ids, query, "after") + 1, _cursor(ids, query, "before", len(ids))
    ordered = ordered[start:end]
    page = ordered[-limit:] if "before" in query else ordered[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0].get("id") if page else None,
        "last_id": page[-1].get("id") if page else None,
        "has_more": len(ordered) > limit,
    }


def _cursor(ids: list[Any], query: Mapping[str, str], name: str, default: int = -1) -> int:
    """Where the item that ``query[name]`` names is in ``ids`` (``default`` without one): a
    cursor no item of this response has is the client's error, never an empty page."""
    cursor = query.get(name)
    if cursor is None:
        return default
    if cursor not in ids:
        raise APIError(400, f"No input item with id '{cursor}' in this response.", param=name,
                       code="invalid_value")  # fmt: skip
    return ids.index(cursor)
