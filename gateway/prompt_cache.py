"""Automatic prompt caching for Anthropic upstreams: where to put ``cache_control`` breakpoints.

Anthropic caches a prompt's prefix only up to a block marked with ``cache_control`` (at most four
marks per request, in the order tools → system → messages). A later request reads that cache
entry when its own prefix up to one of its marks, or up to a block at most 20 blocks before a
mark, is the same. Writing an entry costs 1.25× the input price (2× for the 1-hour TTL), reading
it 0.1×, so marks pay where a tenant's next requests will share the prefix. Seeing a tenant's
consecutive requests, the gateway places them (``PromptCacher.prepare``):

1. at the last block of the request: the next turn of the conversation extends it;
2. where this request stops sharing a prefix with the tenant's earlier ones, when no entry ends
   there yet or the last mark's 20-block look-back does not reach it: that shared part (common
   tools, system prompt, earlier turns) is what the next request of the kind will read;
3. at the end of the system prompt, then of the tools: the prefix most stable across
   conversations;
4. between marks more than 20 blocks apart, so every written prefix stays within reach.

A mark goes only where the prefix holds at least the model's minimum cacheable length (a
shorter one is not cached and would waste one of the four). A client's own marks are never
moved, and count against the four; its top-level ``cache_control`` (automatic caching) is a
mark the API puts on the last block itself, so none is added there. The TTL is chosen from
the measured gap between requests sharing the prefix: a gap over 5 minutes outlives a
5-minute entry, so the 1-hour one pays (up to an hour; past that neither survives and the
cheaper write is used); a mark before a client's 1-hour one is a 1-hour one too.

>>> cacher = PromptCacher(min_tokens=1)
>>> body = {"system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]}
>>> sent = cacher.prepare("tenant-a", body, now=0.0)
>>> sent["messages"][0]["content"][0]["cache_control"]
{'type': 'ephemeral'}
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

__all__ = [
    "LOOKBACK_BLOCKS",
    "MAX_BREAKPOINTS",
    "Block",
    "Mark",
    "Plan",
    "PromptCacher",
    "apply_marks",
    "blocks_of",
    "marks_accepted",
    "min_cacheable_tokens",
    "plan_marks",
]

#: Most ``cache_control`` marks one request may carry (the API refuses a fifth).
MAX_BREAKPOINTS = 4
#: How many blocks before a mark the API looks for a cached prefix.
LOOKBACK_BLOCKS = 20
#: Seconds a 5-minute / 1-hour cache entry lives after its last read or write.
FIVE_MINUTES = 300.0
ONE_HOUR = 3600.0

TTL = Literal["5m", "1h"]
Where = tuple[str, int, int]  # ("tools", i, -1) | ("system", i, -1) | ("messages", i, j)


@dataclass(frozen=True, slots=True)
class Block:
    """One cacheable block of a request, in prompt order."""

    where: Where
    #: Digest of the prompt up to and including this block (chained: equal digests are equal
    #: prefixes), and the estimated tokens of that prefix.
    digest: bytes
    tokens: int
    #: A mark may go here (not on thinking blocks or empty text).
    markable: bool
    #: The TTLs of the client's own marks on this block and inside it (the content blocks
    #: of a ``tool_result`` or ``search_result``, which the API counts against the four too).
    client_ttls: tuple[TTL, ...]

    @property
    def client_ttl(self) -> TTL | None:
        """The TTL of the client's first mark on or in this block, or None."""
        return self.client_ttls[0] if self.client_ttls else None


@dataclass(frozen=True, slots=True)
class Mark:
    index: int  # into the request's blocks
    ttl: TTL


@dataclass(frozen=True, slots=True)
class Plan:
    """The marks to add, and the gap (seconds) since the prefix was last seen, if it was."""

    marks: tuple[Mark, ...]
    gap: float | None
    shared: int  # blocks shared with the tenant's earlier requests


def min_cacheable_tokens(model: str) -> int:
    """The documented minimum cacheable prompt length of a Claude model (by its name)."""
    name = model.lower().replace(".", "-")
    if any(m in name for m in ("opus-4-5", "haiku-4-5")):
        return 4096
    if "haiku" in name and ("3-5" in name or "claude-3-haiku" in name or "haiku-3" in name):
        return 2048
    return 1024


def blocks_of(body: dict[str, Any]) -> list[Block]:
    """The request's blocks in prompt order: tools, system, then each message's content."""
    blocks: list[Block] = []
    state = hashlib.sha256()
    tokens = 0
    for where, item in _items(body):
        raw = _encode(item)
        state.update(len(raw).to_bytes(8, "little") + raw)
        tokens += _estimate(item)
        markable = _markable(where, item)
        ttls = tuple(_client_ttls(item))
        blocks.append(Block(where, state.copy().digest(), tokens, markable, ttls))
    return blocks


def plan_marks(
    blocks: list[Block],
    *,
    shared: int,
    known: frozenset[int],
    gap: float | None,
    min_tokens: int,
    ttl: Literal["auto", "5m", "1h"] = "auto",
    automatic: TTL | None = None,
) -> Plan:
    """Choose the marks to add (pure: the tenant's history comes in as arguments).

    ``shared``: how many leading blocks the tenant's earlier requests had too; ``known``:
    indexes where a cache entry was written already (an earlier request's marks);
    ``automatic``: the TTL of the client's top-level ``cache_control``, a mark the API places
    on the last block itself.
    """
    client = [i for i, b in enumerate(blocks) if b.client_ttls]
    budget = MAX_BREAKPOINTS - sum(len(b.client_ttls) for b in blocks) - (automatic is not None)
    worth = [i for i, b in enumerate(blocks) if b.markable and b.tokens >= min_tokens]
    if budget <= 0 or not worth:
        return Plan((), gap, shared)
    chosen: list[int] = []

    def take(index: int | None) -> None:
        taken = set(chosen) | set(client)
        if index is not None and index not in taken and len(chosen) < budget:
            chosen.append(index)

    last = worth[-1]
    if automatic is None:
        take(last)
    else:  # (the last markable block: worth, as a prefix only grows)
        client.append(last)
    divergence = _at_or_before(worth, shared - 1)
    if divergence is not None and (divergence not in known or last - divergence >= LOOKBACK_BLOCKS):
        take(divergence)
    for segment in ("system", "tools"):
        take(_at_or_before(worth, _segment_end(blocks, segment)))
    for index in _gaps(worth, sorted({*chosen, *client})):
        take(index)
    marks = sorted(chosen)
    chosen_ttl = _ttl(ttl, gap)
    fitted = (Mark(i, _fit_ttl(blocks, i, chosen_ttl, automatic)) for i in marks)
    return Plan(tuple(fitted), gap, shared)


def apply_marks(
    body: dict[str, Any], blocks: list[Block], marks: tuple[Mark, ...]
) -> dict[str, Any]:
    """A copy of ``body`` with ``cache_control`` on the marked blocks (``body`` is unchanged).

    A string ``system`` or message ``content`` becomes one text block, which the API reads the
    same way.
    """
    if not marks:
        return body
    out = dict(body)
    for mark in marks:
        segment, i, j = blocks[mark.index].where
        control: dict[str, Any] = {"type": "ephemeral"}
        if mark.ttl == "1h":
            control["ttl"] = "1h"
        if segment == "tools":
            out["tools"] = tools = list(out["tools"])
            tools[i] = {**tools[i], "cache_control": control}
        elif segment == "system":
            system = out["system"]
            if isinstance(system, str):
                system = [{"type": "text", "text": system}]
            out["system"] = system = list(system)
            system[i] = {**system[i], "cache_control": control}
        else:
            out["messages"] = messages = list(out["messages"])
            message = dict(messages[i])
            content = message["content"]
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            content = list(content)
            content[j] = {**content[j], "cache_control": control}
            message["content"] = content
            messages[i] = message
    return out


def marks_accepted(body: dict[str, Any]) -> bool:
    """Whether the API takes the client's ``cache_control`` marks as they are: each one
    ``{"type": "ephemeral"}`` with an optional ``ttl`` of ``5m`` or ``1h``, on a block that may
    carry one (not a thinking block, not an empty text), at most ``MAX_BREAKPOINTS`` with a
    top-level one, and no ``1h`` mark after a ``5m`` one (in the order tools → system →
    messages; the top-level one on the last block). True when there is none.

    >>> marks_accepted({"messages": [{"role": "user", "content": [
    ...     {"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}]})
    True
    """
    controls: list[Any] = []
    for where, item in _items(body):
        found = list(_controls(item))
        if found and not _markable(where, item):
            return False
        controls += found
    if body.get("cache_control") is not None:
        controls.append(body["cache_control"])
    if len(controls) > MAX_BREAKPOINTS or not all(_well_formed(c) for c in controls):
        return False
    ttls = [c.get("ttl", "5m") for c in controls]
    return not ("5m" in ttls and "1h" in ttls[ttls.index("5m") :])


class PromptCacher:
    """Per model: remembers each tenant's recent prefixes and marks its requests' blocks.

    Memory is bounded: ``max_tenants`` tenants (least recently seen forgotten first), each with
    its previous request's block digests and the last ``_MARKS`` prefixes it marked.
    """

    def __init__(
        self,
        *,
        min_tokens: int,
        ttl: Literal["auto", "5m", "1h"] = "auto",
        max_tenants: int = 10_000,
    ) -> None:
        self.min_tokens = min_tokens
        self.ttl = ttl
        self.max_tenants = max_tenants
        self._tenants: OrderedDict[str, _History] = OrderedDict()
        self.marks_added = 0  # counters for /admin/stats
        self.requests = 0

    def prepare(self, tenant: str, body: dict[str, Any], *, now: float) -> dict[str, Any]:
        """The body to send upstream: ``body`` with the planned marks added."""
        blocks = blocks_of(body)
        if not blocks:
            return body
        history = self._tenants.get(tenant)
        shared, known, gap = 0, frozenset[int](), None
        if history is not None:
            shared, known, gap = history.match(blocks, now)
        plan = plan_marks(
            blocks,
            shared=shared,
            known=known,
            gap=gap,
            min_tokens=self.min_tokens,
            ttl=self.ttl,
            automatic=_automatic(body),
        )
        self._remember(tenant, history, blocks, plan, now)
        self.requests += 1
        self.marks_added += len(plan.marks)
        return apply_marks(body, blocks, plan.marks)

    def stats(self) -> dict[str, int]:
        return {"requests": self.requests, "marks_added": self.marks_added,
                "tenants": len(self._tenants)}  # fmt: skip

    def _remember(
        self, tenant: str, history: _History | None, blocks: list[Block], plan: Plan, now: float
    ) -> None:
        if history is None:
            history = _History()
        self._tenants[tenant] = history
        self._tenants.move_to_end(tenant)
        while len(self._tenants) > self.max_tenants:
            self._tenants.popitem(last=False)
        marked = [m.index for m in plan.marks]
        marked += [i for i, b in enumerate(blocks) if b.client_ttls]
        history.record(blocks, marked, now)


# ---------------------------------------------------------------------------------------------
# helpers

_encode = msgspec.json.Encoder(order="deterministic").encode
_MARKS = 32  # marked prefixes remembered per tenant
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


class _History:
    """A tenant's previous request (block digests, when) and its recently marked prefixes."""

    __slots__ = ("at", "last", "marked")

    def __init__(self) -> None:
        self.last: dict[bytes, int] = {}  # digest -> index in the previous request
        self.at = 0.0
        self.marked: OrderedDict[bytes, float] = OrderedDict()  # digest -> last seen

    def match(self, blocks: list[Block], now: float) -> tuple[int, frozenset[int], float | None]:
        """Blocks shared with earlier requests, indexes with an entry written, the gap."""
        known = frozenset(i for i, b in enumerate(blocks) if b.digest in self.marked)
        # NOTE: digests are chained, so a shared digest at i means blocks 0..i are shared.
        shared, seen = 0, None
        for i in range(len(blocks) - 1, -1, -1):
            digest = blocks[i].digest
            if digest in self.last or digest in self.marked:
                shared = i + 1
                seen = self.marked.get(digest, self.at) if digest not in self.last else self.at
                break
        return shared, known, (None if seen is None else max(now - seen, 0.0))

    def record(self, blocks: list[Block], marked: list[int], now: float) -> None:
        self.last = {b.digest: i for i, b in enumerate(blocks)}
        self.at = now
        for index in marked:
            self.marked[blocks[index].digest] = now
            self.marked.move_to_end(blocks[index].digest)
        while len(self.marked) > _MARKS:
            self.marked.popitem(last=False)


def _items(body: dict[str, Any]) -> Iterator[tuple[Where, Any]]:
    for i, tool in enumerate(body.get("tools") or ()):
        yield ("tools", i, -1), tool
    system = body.get("system")
    if isinstance(system, str):
        if system:
            yield ("system", 0, -1), {"type": "text", "text": system}
    elif isinstance(system, list):
        for i, block in enumerate(system):
            yield ("system", i, -1), block
    for i, message in enumerate(body.get("messages") or ()):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            yield ("messages", i, 0), {"type": "text", "text": content}
        elif isinstance(content, list):
            for j, block in enumerate(content):
                yield ("messages", i, j), block


def _estimate(item: Any) -> int:
    """Tokens of a block, roughly (4 characters a token; an image or document ~1500)."""
    if isinstance(item, dict) and item.get("type") in ("image", "document"):
        return 1500
    if isinstance(item, dict) and isinstance(item.get("text"), str):
        return len(item["text"]) // 4 + 1
    return len(_encode(item)) // 4 + 1


def _markable(where: Where, item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    if where[0] == "tools":
        return True
    kind = item.get("type")
    if kind in _UNMARKABLE:
        return False
    return not (kind == "text" and not item.get("text"))


def _client_ttls(item: Any) -> Iterator[TTL]:
    """The client's marks on ``item`` and on the blocks of its ``content`` (a tool result's),
    in prompt order."""
    if not isinstance(item, dict):
        return
    control = item.get("cache_control")
    if isinstance(control, dict):
        yield "1h" if control.get("ttl") == "1h" else "5m"
    content = item.get("content")
    for inner in content if isinstance(content, list) else ():
        yield from _client_ttls(inner)


def _controls(item: Any) -> Iterator[Any]:
    """The ``cache_control`` values on ``item`` and on the blocks of its ``content``, as sent
    (a null one is no mark)."""
    if not isinstance(item, dict):
        return
    if item.get("cache_control") is not None:
        yield item["cache_control"]
    content = item.get("content")
    for inner in content if isinstance(content, list) else ():
        yield from _controls(inner)


def _well_formed(control: Any) -> bool:
    return (
        isinstance(control, dict)
        and control.get("type") == "ephemeral"
        and control.keys() <= {"type", "ttl"}
        and control.get("ttl", "5m") in ("5m", "1h")
    )


def _at_or_before(worth: list[int], index: int) -> int | None:
    """The last index in ``worth`` (sorted) at or before ``index``."""
    found = None
    for i in worth:
        if i > index:
            break
        found = i
    return found


def _segment_end(blocks: list[Block], segment: str) -> int:
    ends = [i for i, b in enumerate(blocks) if b.where[0] == segment]
    return ends[-1] if ends else -1


def _gaps(worth: list[int], marks: list[int]) -> Iterator[int]:
    """Blocks that bring marks more than LOOKBACK_BLOCKS apart back within reach."""
    if not marks:
        return
    previous = marks[0]
    for later in marks[1:]:
        mark = later
        while mark - previous > LOOKBACK_BLOCKS:
            step = _at_or_before(worth, mark - LOOKBACK_BLOCKS)
            if step is None or step <= previous:
                break
            yield step
            mark = step
        previous = later


def _ttl(mode: Literal["auto", "5m", "1h"], gap: float | None) -> TTL:
    if mode != "auto":
        return mode
    return "1h" if gap is not None and FIVE_MINUTES < gap <= ONE_HOUR else "5m"


def _fit_ttl(blocks: list[Block], index: int, ttl: TTL, automatic: TTL | None) -> TTL:
    """NOTE: the API wants 1-hour marks before 5-minute ones: a client's 5m mark earlier in the
    prompt makes ours 5m, a client's 1h mark later (its automatic one: at the end) makes ours 1h."""
    if ttl == "1h" and any("5m" in b.client_ttls for b in blocks[:index]):
        return "5m"
    later = automatic == "1h" or any("1h" in b.client_ttls for b in blocks[index + 1 :])
    if ttl == "5m" and later:
        return "1h"
    return ttl


def _automatic(body: dict[str, Any]) -> TTL | None:
    """The TTL of the client's top-level ``cache_control`` (automatic caching), or None."""
    control = body.get("cache_control")
    if not control:
        return None
    return "1h" if isinstance(control, dict) and control.get("ttl") == "1h" else "5m"
