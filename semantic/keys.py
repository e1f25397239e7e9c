"""Response-cache keys: what must match exactly (scope) and what may match by meaning (question).

A cached answer may be served only to a request that would have produced an equivalent answer.
So a request splits into:

* **scope** — tenant, namespace, endpoint, model, every output-changing parameter (all body
  fields except the few listed in ``NON_SCOPE_FIELDS``, unknown ones included; a documented
  one sent as null is left unset), the system
  prompt, and the conversation before the last user turn;
* **question** — the text of the last user message, the only part compared by embedding.

``exact`` hashes both; the semantic tier searches only among entries of the same ``scope``.

>>> k1 = chat_key("acme", "", "gpt-4o", {"messages": [{"role": "user", "content": "Hi"}]})
>>> k2 = chat_key("acme", "", "gpt-4o", {"messages": [{"role": "user", "content": "Hi"}],
...                                      "temperature": 0.2})
>>> k1.scope == k2.scope, k1.question == k2.question
(False, True)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

#: Where a chat request's earlier turns go (see ``chat_key``).
ContextMode = Literal["exact", "verify"]

__all__ = [
    "NON_SCOPE_FIELDS",
    "CacheKey",
    "ContextMode",
    "chat_key",
    "compared_text",
    "completion_key",
    "context_question",
    "embedding_key",
    "entry_id",
    "has_turns",
    "salted",
]

#: Body fields of the OpenAI APIs that never change the answer's content (another API names
#: its own: ``chat_key``'s ``non_scope``). Everything else is part of the scope, including
#: fields cachegate does not know: an unknown field might change the answer, so two requests
#: that differ in it must not share an entry.
NON_SCOPE_FIELDS = frozenset(
    {
        "model",
        "stream",
        "stream_options",
        "user",
        "safety_identifier",  # (OpenAI's successor of ``user``: who asked, not what)
        "metadata",
        "store",
        "service_tier",
        # a provider's prompt cache (which cache to read, how long it keeps the prompt): a
        # routing hint, not the answer (OpenAI's own answer to it is the same, only cheaper)
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "cache",
    }
)


@dataclass(frozen=True, slots=True)
class CacheKey:
    """Where an answer lives in the response cache."""

    #: Hex digest of everything that must match exactly (semantic lookups stay inside it).
    scope: str
    #: What is compared by meaning: the last user message's text (with the recent earlier turns
    #: in the "verify" context mode, see ``compared_text``). Empty when the request has none.
    question: str
    #: Hex digest of the full request (scope with the whole conversation, plus the question).
    exact: str
    #: False when only an exact hit is safe (no trailing user text, images, legacy prompts,
    #: indented text such as code: see ``_INDENTED``).
    semantic: bool


def chat_key(
    tenant: str,
    namespace: str,
    model: str,
    body: dict[str, Any],
    context_turns: int | None = None,
    context: ContextMode = "exact",
    *,
    api: str = "chat",
    non_scope: frozenset[str] = NON_SCOPE_FIELDS,
) -> CacheKey:
    """The key of a chat completion request.

    ``context``: where the earlier turns go. ``"exact"`` (conservative): the last
    ``context_turns`` messages before the last user turn belong to the semantic *scope* (None:
    all), so only an identical history can give a semantic hit. ``"verify"``: they leave the
    scope (system/developer messages stay) and join the compared text
    (:func:`compared_text`, the last ``context_turns`` messages, None: ``DEFAULT_WINDOW``), so
    a reworded or padded history can hit and the verifier judges whether the context is the
    same. The exact key always covers the whole conversation. ``api`` names the API whose
    answers the entry holds (another API that maps its turns to ``messages``, e.g.
    ``"responses"``): part of the scope, so no answer is served across APIs; ``non_scope``: the
    fields of that API that never change its answer (another API's are unknown there).
    """
    messages: list[dict[str, Any]] = [_message(m, api) for m in body.get("messages") or []]
    params = _params(tenant, namespace, api, model, body, turns="messages", non_scope=non_scope)
    last = messages[-1] if messages else {}
    question, text_only = _text(last.get("content")) if last.get("role") == "user" else ("", False)
    semantic = text_only and bool(question.strip()) and not _INDENTED.search(question)
    if semantic:
        # The last message's fields other than its text (e.g. "name") belong to the scope.
        extra = {k: v for k, v in last.items() if k != "content"}
        if context == "verify":
            system = [m for m in messages[:-1] if m.get("role") in _SYSTEM_ROLES]
            unseen = _uncompared(messages[:-1], context_turns)
            scope = _digest([params, "verify", system, extra, *([unseen] if unseen else [])])
            question = compared_text(question, messages[:-1], context_turns)
        else:
            scope = _digest([params, _context(messages[:-1], context_turns), extra])
        # NOTE: the exact key takes the content as sent (one text part: its text, see
        # _message), not the joined question: parts joined one way here may be joined another
        # way by a model, so two shapes are two requests.
        exact = _digest([params, messages[:-1], extra, last.get("content")])
    else:
        scope = _digest([params, messages])
        exact = _digest([params, messages, ""])
    return CacheKey(
        scope=scope, question=question if semantic else "", exact=exact, semantic=semantic
    )


def completion_key(tenant: str, namespace: str, model: str, body: dict[str, Any]) -> CacheKey:
    """The key of a legacy completion request: exact match only (a raw prompt has no turns)."""
    params = _params(tenant, namespace, "completion", model, body, turns="prompt")
    scope = _digest([params, body.get("prompt")])
    return CacheKey(scope=scope, question="", exact=_digest([scope]), semantic=False)


def embedding_key(
    tenant: str, namespace: str, model: str, body: dict[str, Any], item: str | list[int]
) -> CacheKey:
    """The key of one input of an embeddings request (exact only): a batch's inputs are
    cached one by one, so a later batch reuses whichever of them it shares."""
    fields = {k: v for k, v in body.items() if k != "input"}
    scope = _digest([*_params(tenant, namespace, "embedding", model, fields)])
    question = item if isinstance(item, str) else ""  # (what the admin API lists and searches)
    return CacheKey(scope=scope, question=question, exact=_digest([scope, item]), semantic=False)


def _message(message: Any, api: str) -> Any:
    """A message as the keys read it: content of one text part is that text (OpenAI and
    Anthropic document the string as that part: nothing is joined, so every model reads the
    same prompt); in a chat request, a field OpenAI documents as optional sent as null
    (``annotations`` as ``[]``: no citations) is the field left out.

    NOTE: the openai SDK sends an answer back as it got it (``model_dump()``: ``"refusal":
    None``, ``"annotations": []``, ``"audio"``, ``"function_call"`` and ``"tool_calls"``
    None), the same conversation as a client that sends only the text. An empty
    ``tool_calls`` stays: OpenAI refuses it, and a hit must not answer what a miss would refuse.
    """
    if not isinstance(message, dict):
        return message
    content = message.get("content")
    if isinstance(content, list) and len(content) == 1 and _plain_text(content[0]):
        message = {**message, "content": content[0]["text"]}
    if api != "chat":
        return message
    unset = _MESSAGE_UNSET | (_ANSWER_UNSET if message.get("role") == "assistant" else frozenset())
    return {
        k: v
        for k, v in message.items()
        if k not in unset or not (v is None or (k == "annotations" and v == []))
    }


def _plain_text(part: Any) -> bool:
    """A text part with nothing besides its text (a ``cache_control`` mark, say)."""
    return (
        isinstance(part, dict)
        and part.keys() == {"type", "text"}
        and part["type"] == "text"
        and isinstance(part["text"], str)
    )


#: A chat message's fields whose null OpenAI reads as left out: of any message, and of an
#: assistant message (what an answer carries besides its text).
_MESSAGE_UNSET = frozenset({"name"})
_ANSWER_UNSET = frozenset({"refusal", "annotations", "audio", "function_call", "tool_calls"})


def _context(earlier: list[dict[str, Any]], context_turns: int | None) -> list[dict[str, Any]]:
    """The messages before the question that the semantic scope covers, in their order.

    Every system/developer message stays, where it was (a system prompt after a turn is not
    the same conversation as one before it); of the other turns only the last
    ``context_turns`` (all when None).
    """
    if context_turns is None:
        return earlier
    turns = [i for i, m in enumerate(earlier) if m.get("role") not in _SYSTEM_ROLES]
    dropped = set(turns[: max(len(turns) - context_turns, 0)])
    return [m for i, m in enumerate(earlier) if i not in dropped]


_SYSTEM_ROLES = ("system", "developer")

#: A line that starts with spaces or tabs: an indented layout (code, YAML), where the column a
#: line starts at can change the answer (a ``print`` inside a loop or after it). The embedder and the
#: verifier read words and never see it, so such text is matched exactly (a question) or kept
#: in the scope (an earlier turn of the ``verify`` context), never compared by meaning.
_INDENTED = re.compile(r"\n[ \t]+\S")


#: Characters kept of each earlier turn in the compared text (the verifier reads 128 tokens).
TURN_CHARS = 200
#: Earlier messages compared when ``context_turns`` is None in the verified-context mode.
DEFAULT_WINDOW = 4


def compared_text(question: str, earlier: list[dict[str, Any]], window: int | None) -> str:
    """What the embedder and the verifier compare: the question, then the last ``window``
    earlier user/assistant messages, most recent first (so truncation drops the oldest).

    >>> compared_text("And the price?", [{"role": "user", "content": "Flights to Rome"},
    ...                                  {"role": "assistant", "content": "Daily at 9."}], 2)
    'And the price? || assistant: Daily at 9. | user: Flights to Rome'

    With no earlier turns it is the question itself, so single-turn entries compare as before.
    """
    turns = [m for m in earlier if m.get("role") in ("user", "assistant")]
    recent = turns[-(DEFAULT_WINDOW if window is None else window) :] if window != 0 else []
    parts = []
    for m in reversed(recent):
        text, _ = _text(m.get("content"))
        if text.strip():
            parts.append(f"{m['role']}: {' '.join(text.split())[:TURN_CHARS]}")
    return f"{question} || {' | '.join(parts)}" if parts else question


#: Where :func:`compared_text` puts one earlier turn after another.
_TURN_SEP = re.compile(r" \| (?=(?:user|assistant): )")
#: Where :func:`compared_text` puts the earlier turns after the question: " || " before the
#: first turn's role. (A question may hold " || " itself: ``a || b`` in code.)
_TURNS_SEP = re.compile(r" \|\| (?=(?:user|assistant): )")


def has_turns(compared: str) -> bool:
    """Whether ``compared`` (:func:`compared_text`) carries earlier turns after its question.

    >>> has_turns("Is `a || b` lazy?"), has_turns("And? || user: Is `a || b` lazy?")
    (False, True)
    """
    return _TURNS_SEP.search(compared) is not None


def context_question(compared: str) -> str | None:
    """The earlier user turn a follow-up in ``compared`` (:func:`compared_text`) refers to: the
    most recent one that asks something (ends with "?"), so small talk after it ("Thanks!") is
    skipped; with none that asks, the most recent one. None: no earlier user turn.

    >>> context_question("How long? || assistant: By mail. | user: Renew a passport in Canada?")
    'Renew a passport in Canada?'
    """
    found = _TURNS_SEP.search(compared)
    if found is None:
        return None
    turns = _TURN_SEP.split(compared[found.end() :])
    asked = [t.removeprefix("user: ") for t in turns if t.startswith("user: ")]
    return next((t for t in asked if t.endswith("?")), asked[0] if asked else None)


def _uncompared(earlier: list[dict[str, Any]], window: int | None) -> list[dict[str, Any]]:
    """The messages of the compared window that :func:`compared_text` does not carry whole,
    for the scope (``context: verify``): tool results and calls, non-text parts, fields
    besides the text, text past ``TURN_CHARS``, indented text. Two conversations that differ there never
    share an answer, whatever the verifier reads; plain text turns stay out of the scope.
    """
    if window == 0:
        return []  # (nothing of the context is compared: a follow-up matches across them)
    turns = [i for i, m in enumerate(earlier) if m.get("role") in ("user", "assistant")]
    recent = turns[-(DEFAULT_WINDOW if window is None else window) :]
    start = recent[0] if recent else len(earlier)
    unseen = []
    for m in earlier[start:]:
        if m.get("role") in _SYSTEM_ROLES:
            continue  # (in the scope already)
        text, text_only = _text(m.get("content"))
        # NOTE: a field that is null or empty says nothing: the SDKs send an answer back as they
        # got it (OpenAI's: with "refusal": null and "annotations": [])
        fields = {k for k, v in m.items() if v is not None and v != [] and v != {}}
        plain = (
            m.get("role") in ("user", "assistant") and text_only and fields <= {"role", "content"}
        )
        if not plain or len(" ".join(text.split())) > TURN_CHARS or _INDENTED.search(text):
            unseen.append(m)
    return unseen


def entry_id(exact: str) -> int:
    """A stable positive int64 id for an entry (vector-index id), the same on every replica."""
    return int(exact[:15], 16)


# ---------------------------------------------------------------------------------------------
# helpers

_encoder = msgspec.json.Encoder(order="sorted")


def _params(
    tenant: str,
    namespace: str,
    kind: str,
    model: str,
    body: dict[str, Any],
    turns: str = "",
    non_scope: frozenset[str] = NON_SCOPE_FIELDS,
) -> list[Any]:
    """The fields of the scope, less ``turns`` (the field the caller hashes on its own).

    NOTE: only the caller's own: another API's (``prompt`` in a chat request) stays, as an
    unknown field does, since a backend refuses it and a hit must not answer it.
    """
    # NOTE: a documented field sent as null is the field left unset (OpenAI reads it so, and so
    # do vLLM and the local model): clients that send every field they know (LangChain,
    # LiteLLM) share the entry of those that send none; so is one sent as the default every
    # backend applies (LangChain sends "n": 1). An unknown one stays: a backend may refuse it
    # (the local model does), and a hit must not answer what a miss would refuse.
    unset = _NULL_IS_UNSET.get(kind, frozenset())
    defaults = _DEFAULTS.get(kind, {})
    if kind == "responses":
        body = {k: _responses_field(k, v) for k, v in body.items()}
    fields = {
        # one stop sequence, as a string or a list of it: the same (OpenAI, vLLM, local)
        k: [v] if k == "stop" and isinstance(v, str) and kind in ("chat", "completion") else v
        for k, v in body.items()
        if k not in non_scope
        and k != turns
        and not (k in unset and v is None)
        and not (k in defaults and _is_default(v, defaults[k]))
    }
    return [tenant, namespace, kind, model, fields]


def _responses_field(name: str, value: Any) -> Any:
    """A Responses request's field as the scope reads it: ``include`` (a set of what to add
    to the answer: its order asks nothing) sorted, the others less their nested nulls."""
    if name == "include" and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return sorted(value)
    return _nested_unset(name, value)


def _nested_unset(name: str, value: Any) -> Any:
    """A Responses request's field ``name`` less the nested fields sent as null that OpenAI
    documents as optional (``_NESTED_NULL_IS_UNSET``): null there is the field left out, as
    at the top level. An object left empty (``text: {"format": null}``) is the field unset.

    NOTE: only those fields, never a null below them: a JSON schema's ``"default": null``, a
    prompt variable's or a function call's arguments are values the model reads.
    """
    if name == "tools" and isinstance(value, list):
        return [_tool_unset(tool) for tool in value]
    fields = _NESTED_NULL_IS_UNSET.get(name)
    if fields is None or not isinstance(value, dict):
        return value
    value = _without_nulls(value, fields)
    if name == "text" and isinstance(value.get("format"), dict):
        value = {**value, "format": _without_nulls(value["format"], _FORMAT_NULL_IS_UNSET)}
    return value if value or name not in _EMPTY_IS_UNSET else None


def _tool_unset(tool: Any) -> Any:
    kind = tool.get("type") if isinstance(tool, dict) else None
    if not isinstance(kind, str):  # (not a tool the API knows: as sent)
        return tool
    return _without_nulls(tool, _TOOL_NULL_IS_UNSET.get(kind, frozenset()))


def _without_nulls(value: dict[str, Any], fields: Collection[str]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if not (v is None and k in fields)}


def _is_default(value: Any, default: Any) -> bool:
    if isinstance(value, bool) or isinstance(default, bool):  # (True == 1: not ``n``'s 1)
        return value is default
    return _canonical(value) == default


_SAMPLING = ("frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
             "presence_penalty", "seed", "stop", "temperature", "top_p")  # fmt: skip
#: The documented optional fields of each API (the OpenAI SDK's), where null means unset.
_NULL_IS_UNSET = {
    "chat": frozenset({
        *_SAMPLING, "audio", "function_call", "functions", "max_completion_tokens",
        "modalities", "moderation", "parallel_tool_calls", "prediction", "reasoning_effort",
        "response_format", "tool_choice", "tools", "top_logprobs", "verbosity",
        "web_search_options",
    }),
    "completion": frozenset({*_SAMPLING, "best_of", "echo", "suffix"}),
    "embedding": frozenset({"encoding_format", "dimensions"}),
    "responses": frozenset({
        "background", "context_management", "conversation", "include", "instructions",
        "max_output_tokens", "max_tool_calls", "moderation", "parallel_tool_calls",
        "prompt_template", "reasoning", "temperature", "text", "tool_choice", "tools",
        "top_logprobs", "top_p", "truncation",
    }),
}  # fmt: skip

#: The fields of a Responses request's objects that OpenAI documents as optional and
#: nullable (the SDK's ``Optional`` fields that are not ``Required``: null is the default),
#: by the field holding the object; ``text.format`` too (the Response's echo has it so). Not
#: a function tool's ``parameters`` nor ``strict``: required, though nullable (an upstream may
#: refuse the tool without them, and a hit must not answer what a miss would refuse).
_NESTED_NULL_IS_UNSET = {
    "text": frozenset({"format", "verbosity"}),
    "reasoning": frozenset({"context", "effort", "generate_summary", "summary"}),
    "prompt_template": frozenset({"variables", "version"}),
}
#: A tool's, by its ``type``; and a ``text.format``'s (``json_schema``'s ``strict``).
_TOOL_NULL_IS_UNSET = {
    "function": frozenset({"allowed_callers", "description", "output_schema"}),
    "custom": frozenset({"allowed_callers"}),
    "file_search": frozenset({"filters"}),
    "web_search": frozenset({"filters", "user_location"}),
    "web_search_preview": frozenset({"user_location"}),
}
_FORMAT_NULL_IS_UNSET = frozenset({"strict"})
#: Objects that, empty, ask for nothing: the field unset (``reasoning: {}``, ``text: {}``).
_EMPTY_IS_UNSET = frozenset({"text", "reasoning"})

#: Values OpenAI documents as a field's default that every backend applies too (the local
#: model, vLLM): sent, the field left unset. Not ``temperature: 1`` nor ``top_p: 1``: the
#: local model and vLLM sample with the model's own defaults where a request sets none. An
#: embedding's ``encoding_format: "float"`` is the list of floats an unset one gets (the
#: Vercel AI SDK sends it; curl users, the docs' examples, do not). Nor ``presence_penalty``
#: or ``frequency_penalty: 0``, ``logprobs: false``, ``modalities: ["text"]``: upstreams
#: refuse those fields whatever their value (OpenAI's reasoning models; others' penalties),
#: and a hit must not answer what a miss would refuse. A Responses request's: the API's own
#: defaults (as its Response echoes them; OpenAI's, vLLM's and the local model's alike), which
#: clients that spell out every field send; not ``reasoning`` (each model has its own effort),
#: ``temperature``/``top_p`` (as in chat) nor ``top_logprobs: 0``.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "chat": {"n": 1, "response_format": {"type": "text"}},
    "completion": {"n": 1},
    "embedding": {"encoding_format": "float"},
    "responses": {
        "background": False,
        "include": [],
        "parallel_tool_calls": True,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "truncation": "disabled",
    },
}

#: Marks a JSON object whose keys are hashed in their order (see ``_canonical``).
_ORDERED = "\x00ordered"


def _canonical(value: Any, *, ordered: bool = False) -> Any:
    """``value`` as hashed: objects by their sorted keys (a field's place in a request does
    not change its answer), except a JSON schema's ``properties``, whose order does: a model
    fills in a structured output or a tool call's arguments in that order (a ``reasoning``
    before an ``answer`` is thought through first; OpenAI's strict mode emits them so)."""
    # 1 and 1.0 mean the same to every API: hash them the same.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        items = {k: _canonical(v, ordered=k == "properties") for k, v in value.items()}
        return {_ORDERED: list(items.items())} if ordered else items
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _text(content: Any) -> tuple[str, bool]:
    """(text, text_only) of a message's content (a string or a list of parts)."""
    if isinstance(content, str):
        return content, True
    if isinstance(content, list):
        texts = [
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        ]
        return "\n".join(texts), len(texts) == len(content)
    return "", False


def salted(key: CacheKey, salt: str) -> CacheKey:
    """``key`` under a backend's ``salt``: what its answers depend on besides the request (a
    local model's defaults for the sampling parameters a request leaves unset, the upstream
    model a name stands for). Answers made under other settings then never match. ``""``:
    ``key`` itself."""
    if not salt:
        return key
    scope, exact = _digest([salt, key.scope]), _digest([salt, key.exact])
    return CacheKey(scope=scope, question=key.question, exact=exact, semantic=key.semantic)


def _digest(parts: list[Any]) -> str:
    return hashlib.sha256(_encoder.encode(_canonical(parts))).hexdigest()
