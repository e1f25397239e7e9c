"""Cache inspection for the admin API: list, show and render stored answers.

Texts (questions and answers) are users' data: unless ``admin.show_text`` is on, an entry is
rendered with each text's keyed digest and length instead (``gateway.texts``), and a text
search is refused.

Listing reads every live entry of the store (there is no secondary index): it keeps only
(created, id) pairs of the matching ones, yields to the event loop every ``_BATCH`` entries,
and reads the page's entries again by id.
"""

from __future__ import annotations

import asyncio
import binascii
import heapq
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from semantic.cache import ResponseCache
from semantic.store import Entry

from .errors import APIError
from .requests import unpartitioned
from .texts import Texts

__all__ = ["Query", "list_entries", "not_found", "parse_id", "parse_query", "render"]

MAX_LIMIT = 500
_BATCH = 256
_ID = re.compile(r"0|[1-9][0-9]{0,18}")


@dataclass(frozen=True, slots=True)
class Query:
    limit: int = 50
    offset: int = 0
    namespace: str | None = None
    model: str | None = None
    tenant: str | None = None
    kind: str | None = None  # "exact" (no vector) or "semantic"
    text: str | None = None  # case-insensitive substring of the question

    def matches(self, entry: Entry) -> bool:
        return (
            (self.namespace is None or entry.namespace == self.namespace)
            and (self.model is None or entry.model == self.model)
            # a tenant's: its own and those of its front gateway's partitions (tenant\x1fp)
            and (self.tenant is None or self.tenant in (entry.tenant, unpartitioned(entry.tenant)))
            and (self.kind is None or _kind(entry) == self.kind)
            and (self.text is None or self.text in entry.question.lower())
        )


def parse_query(params: Mapping[str, str], show_text: bool) -> Query:
    """The listing's query parameters, or a 400 naming the bad one."""
    limit = _int(params, "limit", 50, 1, MAX_LIMIT)
    offset = _int(params, "offset", 0, 0, 1 << 62)
    kind = params.get("kind") or None
    if kind not in (None, "exact", "semantic"):
        raise APIError(400, "'kind' must be exact or semantic.", param="kind")
    text = params.get("q") or None
    if text is not None and not show_text:
        raise APIError(
            403, "Text search needs admin.show_text: true.", param="q", code="text_hidden"
        )
    return Query(
        limit=limit,
        offset=offset,
        namespace=params.get("namespace"),  # "" is the default namespace
        model=params.get("model") or None,
        tenant=params.get("tenant") or None,
        kind=kind,
        text=text.lower() if text else None,
    )


async def list_entries(cache: ResponseCache, query: Query, texts: Texts) -> dict[str, Any]:
    """One page of matching entries, newest first, and how many match in all."""
    found: list[tuple[float, int]] = []
    seen = 0
    async for entry in cache.entries():
        seen += 1
        if query.matches(entry):
            found.append((entry.created, entry.id))
        if seen % _BATCH == 0:
            await asyncio.sleep(0)  # let requests run between batches
    wanted = heapq.nlargest(query.offset + query.limit, found)[query.offset :]
    page = []
    for _, entry_id in wanted:
        stored = await cache.entry(entry_id)
        if stored is not None:
            page.append(render(stored, texts))
    return {
        "object": "list",
        "data": page,
        "total": len(found),
        "offset": query.offset,
        "limit": query.limit,
        "has_more": query.offset + len(wanted) < len(found),
    }


def render(entry: Entry, texts: Texts, *, full: bool = False) -> dict[str, Any]:
    """An entry as JSON (ids as strings: they exceed JavaScript's exact integers)."""
    response = entry.response
    answer, finish = _answer(response)
    out: dict[str, Any] = {
        "id": str(entry.id),
        "kind": _kind(entry),
        "model": entry.model,
        "tenant": entry.tenant,
        "namespace": entry.namespace,
        "created": entry.created,
        "expires": entry.expires,
        "age_s": round(time.time() - entry.created, 1),
        "hits": entry.hits,
        "question": texts.describe(entry.question),
        "answer": texts.describe(answer),
        "finish_reason": finish,
        "usage": response.get("usage"),
    }
    if full:
        out["scope"] = entry.scope[:16]
        out["vector_model"] = entry.vector_model
        out["response"] = response if texts.show else None
    return out


def parse_id(raw: str) -> int:
    """An entry's id as the gateway writes it (``x-cache-entry``): ASCII digits, no sign,
    no leading zero. NOTE: ``int`` alone took ``+12``, ``012``, `` 12`` and other scripts'
    digits as 12, so a spelling no answer was given under showed or deleted entry 12."""
    if not _ID.fullmatch(raw):
        raise not_found(raw)
    return int(raw)


def not_found(raw: str) -> APIError:
    return APIError(404, f"No cached answer has the id {raw!r}.", code="entry_not_found")


def _kind(entry: Entry) -> str:
    return "semantic" if entry.vector else "exact"


def _answer(response: dict[str, Any]) -> tuple[str, str | None]:
    """The stored answer's text and how it ended, whichever API's shape it has."""
    if response.get("object") == "response":  # Responses: output items' text parts
        parts = [p for item in _dicts(response.get("output"))
                 for p in _dicts(item.get("content")) if p.get("type") == "output_text"]  # fmt: skip
        return _texts(parts), _str(response.get("status"))
    if response.get("type") == "message":  # Anthropic Messages: text blocks
        blocks = [b for b in _dicts(response.get("content")) if b.get("type") == "text"]
        return _texts(blocks), _str(response.get("stop_reason"))
    if "embedding" in response:  # one input's vector
        return f"(an embedding, {_dimensions(response['embedding'])} numbers)", None
    choice = next(iter(_dicts(response.get("choices"))), {})
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    return (text if isinstance(text, str) else ""), _str(choice.get("finish_reason"))


def _dimensions(vector: Any) -> int | str:
    """A stored vector's length: a list of floats, or base64 of float32s (``encoding_format``)."""
    if isinstance(vector, list):
        return len(vector)
    try:
        return len(binascii.a2b_base64(vector, strict_mode=True)) // 4
    except (TypeError, ValueError):  # binascii.Error is a ValueError
        return "?"


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _texts(parts: list[dict[str, Any]]) -> str:
    return "".join(p["text"] for p in parts if isinstance(p.get("text"), str))


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise APIError(400, f"'{name}' must be an integer from {low} to {high}.", param=name)
    return value
