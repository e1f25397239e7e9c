"""Prefix-affinity routing over several replicas of one model (cachegate workers, vLLM, SGLang).

Each replica keeps its own prefix KV cache, so a prompt is cheapest on the replica that served
its prefix last. The router remembers, per replica, an approximate prefix tree of the prompts it
sent there (prompt text as UTF-8 bytes, as SGLang's router does with characters) and sends a
request to the replica holding the longest prefix of it (a remembered prompt followed by the
model's own turns counts them as held: the replica made them) — unless that match is too short
(``min_match`` of the prompt) or that replica is too busy (``max_imbalance`` more requests in
flight than the least-loaded one), in which case the least-loaded replica gets it.

The trees are a ``prefix.RadixCache`` whose spans are byte counts, with a byte budget and
LRU eviction: what the router remembers ages like what the replicas' caches hold. They are kept
per tenant, as a cachegate worker keeps its tenants' prefix KV apart: one tenant's prompts never
draw another's requests to a replica that would not reuse their KV for it.

    >>> router = PrefixRouter(["http://w1:8081/v1", "http://w2:8081/v1"])
    >>> pick = router.choose("system: You are ...\\nuser: hi")     # Route(replica=0, matched=0)
    >>> router.release(pick.replica)                                 # when the request ends
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

from prefix import CountSpan, Match, RadixCache, RadixKey

from .config import redact_url

__all__ = ["PrefixRouter", "Route", "prompt_text"]

Policy = Literal["prefix", "round_robin", "least_loaded"]


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request goes and why."""

    replica: int  # index into the replica list
    matched: int  # prompt bytes the chosen replica is believed to hold
    reason: Literal["prefix", "least_loaded", "round_robin", "pinned"]


class PrefixRouter:
    """Chooses a replica per request; counts requests in flight per replica."""

    def __init__(
        self,
        replicas: list[str],
        *,
        policy: Policy = "prefix",
        min_match: float = 0.5,
        max_imbalance: int = 4,
        tree_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        if not replicas:
            raise ValueError("a router needs at least one replica")
        self.replicas = list(replicas)
        self.policy = policy
        self._min_match = min_match
        self._max_imbalance = max_imbalance
        self._trees = RadixCache(max_bytes=tree_bytes)
        self._in_flight = [0] * len(replicas)
        self._rotation = itertools.cycle(range(len(replicas)))
        self._down_until = [0.0] * len(replicas)
        self._lock = threading.Lock()
        self.counts = {"prefix": 0, "least_loaded": 0, "round_robin": 0, "pinned": 0}

    def choose(
        self,
        prompt: str,
        exclude: frozenset[int] = frozenset(),
        pinned: int | None = None,
        tenant: str = "",
    ) -> Route:
        """Pick a replica for ``tenant``'s ``prompt`` (never one in ``exclude``) and count it
        in flight; ``pinned``: the replica that must serve it (it holds state the request
        refers to), unless excluded or down."""
        # A sentinel 0 ends the key: match() serves at most n-1, and the prompt is all of it.
        tokens = (*prompt.encode("utf-8", "surrogatepass"), 0)
        with self._lock:
            candidates = [i for i in range(len(self.replicas)) if i not in exclude]
            if not candidates:
                raise ValueError("every replica is excluded")
            now = time.monotonic()
            healthy = [i for i in candidates if self._down_until[i] <= now] or candidates
            if pinned is not None and pinned in candidates and self._down_until[pinned] <= now:
                route = Route(pinned, 0, "pinned")
            else:
                route = self._pick(tokens, healthy, tenant)
            self._in_flight[route.replica] += 1
            self.counts[route.reason] += 1
            if self.policy == "prefix":
                self._trees.insert(
                    RadixKey(self._tree(route.replica, tenant), tokens), CountSpan(len(tokens))
                )
            return route

    def release(self, replica: int) -> None:
        with self._lock:
            self._in_flight[replica] -= 1

    def is_down(self, replica: int) -> bool:
        """Whether ``replica`` is avoided now (``mark_down``)."""
        with self._lock:
            return self._down_until[replica] > time.monotonic()

    def mark_down(self, replica: int, seconds: float) -> None:
        """The replica failed before answering: avoid it for a while, forget its prefixes."""
        with self._lock:
            self._down_until[replica] = time.monotonic() + seconds
            for tree in self._remembered(replica, self._trees.tokens_by_namespace()):
                self._trees.flush(tree)

    def stats(self) -> dict[str, Any]:
        now = time.monotonic()
        with self._lock:
            remembered = self._trees.tokens_by_namespace()
            return {
                "policy": self.policy,
                "replicas": [
                    {
                        "url": redact_url(url),  # (a URL may carry credentials)
                        "in_flight": self._in_flight[i],
                        "down": self._down_until[i] > now,
                        "remembered_bytes": sum(
                            remembered[t] for t in self._remembered(i, remembered)
                        ),
                    }
                    for i, url in enumerate(self.replicas)
                ],
                "routed": dict(self.counts),
            }

    # -- helpers ---------------------------------------------------------------------------

    def _tree(self, replica: int, tenant: str) -> str:
        """The namespace of ``replica``'s tree for ``tenant``."""
        return f"{self.replicas[replica]}\x1f{tenant}"

    def _remembered(self, replica: int, held: dict[str, int]) -> list[str]:
        """``replica``'s trees among ``held`` (the trees' ``tokens_by_namespace``): every
        tenant's that holds something."""
        mine = self._tree(replica, "")
        return [t for t in held if t.startswith(mine)]

    def _ended(self, replica: int, tenant: str, tokens: tuple[int, ...], matched: int) -> bool:
        """Whether a prompt sent to ``replica`` ended where its match of ``tokens`` does (its
        sentinel 0 follows there): what follows in ``tokens`` may be what it answered. NOTE:
        a match that is only the start of a longer prompt sent there (a shared opening) is
        no sign of its answer: the replica that answered was passed over for it."""
        if not matched:
            return False
        ended = RadixKey(self._tree(replica, tenant), (*tokens[:matched], 0, 0))
        return self._trees.match(ended).n_cached == matched + 1

    def _pick(self, tokens: tuple[int, ...], candidates: list[int], tenant: str) -> Route:
        least = min(self._in_flight[i] for i in candidates)
        if self.policy == "round_robin":
            while True:
                i = next(self._rotation)
                if i in candidates:
                    return Route(i, 0, "round_robin")
        if self.policy == "prefix":
            prompt = bytes(tokens[:-1])
            matches: list[tuple[int, int]] = []
            for i in candidates:
                found: Match = self._trees.match(RadixKey(self._tree(i, tenant), tokens))
                matched = found.n_cached
                if self._ended(i, tenant, tokens, matched):  # its own answers follow it
                    matched = _with_answers(prompt, matched)
                matches.append((matched, i))
            matched, best = max(matches, key=lambda m: (m[0], -self._in_flight[m[1]]))
            prompt_bytes = len(tokens) - 1
            good_match = matched > 0 and matched >= self._min_match * prompt_bytes
            if good_match and self._in_flight[best] - least <= self._max_imbalance:
                return Route(best, matched, "prefix")
        # least loaded; among equals, rotate so idle replicas share the work
        idle = [i for i in candidates if self._in_flight[i] == least]
        for _ in range(len(self.replicas)):
            i = next(self._rotation)
            if i in idle:
                return Route(i, 0, "least_loaded")
        return Route(idle[0], 0, "least_loaded")


#: How ``prompt_text`` begins a turn the model made (chat's assistant message; Responses'
#: assistant message, function call and reasoning items).
_MODEL_TURNS = tuple(f"{role}\x1f".encode() for role in ("assistant", "function_call", "reasoning"))


def _with_answers(prompt: bytes, matched: int) -> int:
    """``matched`` bytes of ``prompt`` a replica was sent, and the model's own turns that
    follow them: what it made answering them, which its prefix cache holds as well.

    NOTE: only prompts are remembered, so the second turn of a conversation (its first prompt,
    the answer, a new question) matched only the first prompt: under ``min_match`` whenever
    the answer was the longer, and the conversation went to whichever replica was idle (3 in 6
    of a review's chats, each losing its prefix KV there).
    """
    if not matched or prompt[matched - 1] != 0x1E:  # (a match that ends inside a turn)
        return matched
    while prompt.startswith(_MODEL_TURNS, matched):
        end = prompt.find(b"\x1e", matched)
        if end < 0:
            break
        matched = end + 1
    return matched


def prompt_text(body: dict[str, Any], kind: str = "chat") -> str:
    """The text a replica's prefix cache sees first: messages in order (Responses:
    ``instructions`` then the ``input`` items), or the raw prompt."""
    messages = body.get("messages")
    if kind == "responses":
        items = body.get("input")
        messages = [{"role": "system", "content": body.get("instructions")},
                    *(items if isinstance(items, list) else [{"role": "user", "content": items}])]  # fmt: skip
    if isinstance(messages, list):
        parts: list[str] = []
        for message in messages:
            if not isinstance(message, dict):
                continue
            content = message.get("content", message.get("output", message.get("arguments")))
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            role = message.get("role") or message.get("type")
            parts.append(f"{role}\x1f{content or ''}\x1e")
        return "".join(parts)
    prompt = body.get("prompt")
    if prompt is None or kind == "embedding":  # no prefix to reuse, so no affinity
        return ""
    return prompt if isinstance(prompt, str) else str(prompt)
