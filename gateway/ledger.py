"""The usage ledger: one account of tokens and money saved, by tenant and model.

Four things save tokens, and each API reports them its own way; ``usage_of`` normalises them:

- a **response-cache hit** (exact, semantic, coalesced) avoids the whole call: the stored
  answer's input and output tokens are saved, at what that call cost (its cached and
  cache-written input at those prices, the rest at the input and output prices);
- the **local prefix KV cache** serves prompt tokens without prefill
  (``usage.prompt_tokens_details.cached_tokens`` of a local model);
- a **provider's prompt cache** bills cached input cheaper: OpenAI's
  ``prompt_tokens_details.cached_tokens`` (Responses: ``input_tokens_details``), Anthropic's
  ``cache_read_input_tokens``;
- an Anthropic **cache write** (``cache_creation_input_tokens``) costs *more* than plain input;
  a write that no later request of the same tenant and model read within ``write_ttl`` is
  waste, counted as ``unread_write_tokens`` / ``unread_write_usd``.

The semantic audit's model calls (gateway.audit) are spending the cache causes, not requests
and not savings: they are a line of their own (``audit_calls``, ``audit_input_tokens``,
``audit_output_tokens``, ``audit_usd``), outside ``requests``, ``spent_usd`` and ``saved_usd``.

A stream that ends before its answer (the client left, the upstream broke or sent an error, a
local generation was cancelled) still cost what the model generated, and the provider bills
it: it is booked as a model call with what is known (``partial_usage``) and counted in
``ended_early``. Its output tokens are at least what the streamed text amounts to; its input
tokens are unknown (0) unless the stream reported them (Anthropic's ``message_start``) or the
backend counted them (the local model's prompt). A local model's non-streamed call whose client
left before its answer is booked the same way (``pipeline._abandoned``).

Prices are USD per million tokens from the YAML ``prices:`` map (unpriced models count tokens,
and $0)::

    >>> ledger = Ledger({"gpt-4o": Price(input=2.5, cached_input=1.25, output=10)})
    >>> ledger.record("team-a", "gpt-4o", usage_of(body["usage"]), source="upstream", hit=False)
    >>> ledger.stats()["team-a"]["gpt-4o"]["saved_usd"]
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .config import Price
from .requests import unpartitioned

__all__ = ["Ledger", "Usage", "partial_usage", "usage_of"]

Source = Literal["local", "upstream"]

log = logging.getLogger(__name__)

#: Seconds an Anthropic cache write stays readable (its default 5-minute TTL); one made with
#: the 1-hour TTL (``cache_creation.ephemeral_1h_input_tokens``) stays ``_HOUR``.
WRITE_TTL = 300.0
_HOUR = 3600.0

#: The largest token count believed: above it a reported count is not one (0), as a string or
#: a negative number is. NOTE: a bigger one (a broken upstream's 10**400) would be summed into
#: the account for good, and /metrics, whose values are floats, would fail from then on.
MAX_TOKENS = 2**53 - 1


@dataclass(frozen=True, slots=True)
class Usage:
    """One answer's tokens, whichever API reported them.

    ``input_tokens`` counts every prompt token, cached or not (Anthropic reports cache reads
    and writes apart from ``input_tokens``; they are added back here).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0  # read from a prompt cache (provider's, or the local prefix cache)
    cache_write_tokens: int = 0  # written into a provider's prompt cache (Anthropic)
    cache_write_1h_tokens: int = 0  # of those, written for an hour (priced cache_write_1h)


def usage_of(usage: Any) -> Usage:
    """Normalise an OpenAI (chat, completions, Responses) or Anthropic ``usage`` object."""
    if not isinstance(usage, dict):
        return Usage()
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
        read, write = (
            _int(usage.get("cache_read_input_tokens")),
            _int(usage.get("cache_creation_input_tokens")),
        )
        # NOTE: Anthropic splits the writes by their TTL; an hour's costs more (2x input, not
        # 1.25x), and all were priced as 5 minutes' (a cost report 37% low on 1h writes)
        split = usage.get("cache_creation")
        hour = _int(split.get("ephemeral_1h_input_tokens")) if isinstance(split, dict) else 0
        return Usage(_int(usage.get("input_tokens")) + read + write,
                     _int(usage.get("output_tokens")), read, write, min(hour, write))  # fmt: skip
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    prompt = _int(usage.get("prompt_tokens", usage.get("input_tokens")))
    output = usage.get("completion_tokens", usage.get("output_tokens"))
    if cached > prompt:
        # NOTE: cached tokens are some of the prompt's: more (a broken upstream) booked more
        # cached tokens than input and a saving on tokens never sent
        _cached_above_prompt()
        cached = prompt
    return Usage(prompt, _int(output), cached)


def partial_usage(reported: Any, counted: Any, streamed_chars: int) -> Usage:
    """What a call whose stream ended before its answer is known to have cost.

    Field by field the larger of the usage its stream ``reported`` so far and the usage the
    backend ``counted`` itself (usage objects of any API, or None); output tokens at least
    those of the ``streamed_chars`` characters of text the client was sent (an estimate).
    """
    a, b = usage_of(reported), usage_of(counted)
    output = max(a.output_tokens, b.output_tokens, _estimated_tokens(streamed_chars))
    return Usage(max(a.input_tokens, b.input_tokens), output,
                 max(a.cached_tokens, b.cached_tokens),
                 max(a.cache_write_tokens, b.cache_write_tokens),
                 min(max(a.cache_write_1h_tokens, b.cache_write_1h_tokens),
                     max(a.cache_write_tokens, b.cache_write_tokens)))  # fmt: skip


@dataclass(slots=True)
class _Account:
    requests: int = 0
    model_calls: int = 0
    calls_avoided: int = 0  # response-cache hits
    input_tokens: int = 0  # of model calls
    output_tokens: int = 0
    avoided_input_tokens: int = 0  # of the answers served from the response cache
    avoided_output_tokens: int = 0
    prefix_cached_tokens: int = 0  # local prefix KV cache
    provider_cached_tokens: int = 0  # provider prompt-cache reads
    cache_write_tokens: int = 0
    unread_write_tokens: int = 0
    spent_usd: float = 0.0  # what the model calls cost (estimated from the prices)
    saved_response_cache_usd: float = 0.0
    saved_prefix_usd: float = 0.0
    saved_provider_cache_usd: float = 0.0
    write_premium_usd: float = 0.0  # paid above the input price for cache writes
    unread_write_usd: float = 0.0  # the premium of writes never read
    audit_calls: int = 0  # the semantic audit's model calls (gateway.audit)
    audit_input_tokens: int = 0
    audit_output_tokens: int = 0
    audit_usd: float = 0.0  # what they cost: spent on top of spent_usd
    ended_early: int = 0  # model calls whose stream ended before the answer (partial_usage)
    #: [written at, tokens not yet read] of recent cache writes, oldest first: those kept 5
    #: minutes, and those kept an hour (Anthropic's ``ttl: 1h``: they expire, and are priced,
    #: as an hour's).
    writes: deque[list[float]] = field(default_factory=deque)
    writes_1h: deque[list[float]] = field(default_factory=deque)


#: Accounts kept before a new partition (``x-cachegate-partition``) of a tenant is booked to
#: that tenant: any client with a tenant key may send new partitions, each a new account and
#: a new set of /metrics series.
MAX_ACCOUNTS = 10_000
#: Partitions (of any tenant) with ``cachegate_ledger_*`` series of their own in /metrics: the
#: first booked. Each is 23 series per model that any client with a tenant key can make up,
#: and 10,000 accounts made a scrape of 230,000 series (20 MB); a later partition's usage is
#: exported with its tenant's (``/admin/stats`` keeps every account).
MAX_PARTITION_SERIES = 100


class Ledger:
    """Per (tenant, model) accounts; ``record`` is called once per answered request."""

    def __init__(
        self,
        prices: Mapping[str, Price] | None = None,
        *,
        write_ttl: float = WRITE_TTL,
        clock: Callable[[], float] = time.time,
        max_accounts: int = MAX_ACCOUNTS,
        max_partition_series: int = MAX_PARTITION_SERIES,
    ) -> None:
        self._prices = dict(prices or {})
        self._write_ttl = write_ttl
        self._clock = clock
        self._max_accounts = max_accounts
        self._max_partition_series = max_partition_series
        self._accounts: dict[tuple[str, str], _Account] = {}

    def record(
        self,
        tenant: str,
        model: str,
        usage: Usage,
        *,
        source: Source,
        hit: bool,
        ended_early: bool = False,
    ) -> dict[str, float]:
        """Account one answer; returns what it saved (``tokens_saved``, ``usd_saved``).

        ``ended_early``: a model's stream that ended before its answer; ``usage`` is what was
        known of it (``partial_usage``), charged as any model call.
        """
        account = self._account(tenant, model)
        account.requests += 1
        if ended_early:
            account.ended_early += 1
        price = self._prices.get(model, Price())
        before = _saved(account)
        if hit:
            account.calls_avoided += 1
            self._avoid(account, usage, price)
        else:
            self._charge(account, usage, price, source)
        tokens = usage.input_tokens + usage.output_tokens if hit else usage.cached_tokens
        return {"tokens_saved": tokens, "usd_saved": _saved(account) - before}

    def avoided(self, tenant: str, model: str, usage: Usage) -> dict[str, float]:
        """Account tokens an answer took from the response cache beside its model call (an
        embeddings request whose other inputs were cached); returns what they saved."""
        account = self._account(tenant, model)
        before = _saved(account)
        self._avoid(account, usage, self._prices.get(model, Price()))
        tokens = usage.input_tokens + usage.output_tokens
        return {"tokens_saved": tokens, "usd_saved": _saved(account) - before}

    def record_audit(self, tenant: str, model: str, usage: Usage) -> None:
        """Account one audit's model call: its tokens and cost, apart from the requests'."""
        account = self._account(tenant, model)
        account.audit_calls += 1
        account.audit_input_tokens += usage.input_tokens
        account.audit_output_tokens += usage.output_tokens
        account.audit_usd += _cost(usage, self._prices.get(model, Price()))

    def stats(self) -> dict[str, dict[str, dict[str, float]]]:
        """tenant → model → counters (tokens, calls, USD)."""
        self._expire_writes()
        out: dict[str, dict[str, dict[str, float]]] = {}
        for (tenant, model), a in sorted(self._accounts.items()):
            row: dict[str, float] = {
                k: (round(v, _DIGITS) if isinstance(v, float) else v) for k, v in _fields(a).items()
            }
            row["saved_usd"] = round(_saved(a), _DIGITS)
            out.setdefault(tenant, {})[model] = row
        return out

    def series(self) -> dict[tuple[str, str], dict[str, float]]:
        """The accounts flat, keyed ``(tenant, model)`` (for labelled /metrics counters);
        past ``max_partition_series`` partitions, a partition's account is added to its
        tenant's row.

        NOTE: a pair, not a joined string: a tenant behind a front gateway holds the
        separator itself (``requests.partitioned``). The partitions that keep rows of their
        own are the first booked (accounts are never dropped, and a dict keeps their order),
        so every row only grows, as a counter must."""
        stats, kept = self.stats(), set[str]()
        out: dict[tuple[str, str], dict[str, float]] = {}
        for tenant, model in self._accounts:
            row, name = stats[tenant][model], tenant
            if tenant != unpartitioned(tenant) and tenant not in kept:
                if len(kept) < self._max_partition_series:
                    kept.add(tenant)
                else:
                    name = unpartitioned(tenant)
            into = out.setdefault((name, model), dict.fromkeys(row, 0.0))
            for field_name, value in row.items():
                into[field_name] += value
        return out

    # -- helpers ---------------------------------------------------------------------------

    def _account(self, tenant: str, model: str) -> _Account:
        """The account of ``(tenant, model)``; past ``max_accounts``, a partitioned tenant's
        new one is its tenant's (configured tenants and models keep theirs: they are bounded)."""
        account = self._accounts.get((tenant, model))
        if account is None:
            if len(self._accounts) >= self._max_accounts:
                tenant = unpartitioned(tenant)
            account = self._accounts.setdefault((tenant, model), _Account())
        return account

    @staticmethod
    def _avoid(account: _Account, usage: Usage, price: Price) -> None:
        account.avoided_input_tokens += usage.input_tokens
        account.avoided_output_tokens += usage.output_tokens
        # what the call cost when it ran: its cached input at the cached price, not a saving
        # of the full input price the provider never charged
        account.saved_response_cache_usd += _cost(usage, price)

    def _charge(self, account: _Account, usage: Usage, price: Price, source: Source) -> None:
        cached_price = price.input if price.cached_input is None else price.cached_input
        account.model_calls += 1
        account.input_tokens += usage.input_tokens
        account.output_tokens += usage.output_tokens
        saving = _usd(usage.cached_tokens, price.input - cached_price)
        if source == "local":
            account.prefix_cached_tokens += usage.cached_tokens
            account.saved_prefix_usd += saving
        else:
            account.provider_cached_tokens += usage.cached_tokens
            account.saved_provider_cache_usd += saving
        account.spent_usd += _cost(usage, price)
        # NOTE: only this account: a read consumes this account's writes alone, and the
        # others' expire before anything shows them (``stats``); expiring every account here
        # cost each request O(accounts), and a tenant key makes up to ``max_accounts`` of them
        now = self._clock()
        self._expire(account, price, now)
        if usage.cached_tokens:
            _read_writes(account, usage.cached_tokens)
        if usage.cache_write_tokens:
            account.cache_write_tokens += usage.cache_write_tokens
            account.write_premium_usd += _written(usage, price, above=price.input)
            hour = usage.cache_write_1h_tokens
            for writes, tokens in ((account.writes, usage.cache_write_tokens - hour),
                                   (account.writes_1h, hour)):  # fmt: skip
                if tokens:
                    writes.append([now, float(tokens)])

    def _expire_writes(self) -> None:
        """Writes older than their TTL with tokens left unread become waste."""
        now = self._clock()
        for (_tenant, model), account in self._accounts.items():
            self._expire(account, self._prices.get(model, Price()), now)

    def _expire(self, account: _Account, price: Price, now: float) -> None:
        """One account's writes past their TTL (``write_ttl``; an hour's, an hour) with
        tokens left unread become waste, at their own premium."""
        write, hour = _write_prices(price)
        for writes, ttl, premium in ((account.writes, self._write_ttl, write - price.input),
                                     (account.writes_1h, _HOUR, hour - price.input)):  # fmt: skip
            while writes and writes[0][0] < now - ttl:
                _, left = writes.popleft()
                account.unread_write_tokens += int(left)
                account.unread_write_usd += _usd(int(left), premium)


def _read_writes(account: _Account, tokens: int) -> None:
    """A cache read consumes the oldest live writes of this tenant and model, 5 minutes' or
    an hour's."""
    left = float(tokens)
    while left > 0 and (account.writes or account.writes_1h):
        oldest = min((w for w in (account.writes, account.writes_1h) if w), key=lambda w: w[0][0])
        write = oldest[0]
        taken = min(write[1], left)
        write[1] -= taken
        left -= taken
        if write[1] <= 0:
            oldest.popleft()


def _cost(usage: Usage, price: Price) -> float:
    """What one model call cost: plain, cached and cache-written input, and output."""
    cached_price = price.input if price.cached_input is None else price.cached_input
    plain = max(usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens, 0)
    return (
        _usd(plain, price.input)
        + _usd(usage.cached_tokens, cached_price)
        + _written(usage, price)
        + _usd(usage.output_tokens, price.output)
    )


def _written(usage: Usage, price: Price, above: float = 0.0) -> float:
    """What one call's cache writes cost (``above``: less that price a token, the premium
    over it): those for an hour at ``cache_write_1h`` (None: ``cache_write``), the others at
    ``cache_write`` (None: ``input``)."""
    write_price, hour_price = _write_prices(price)
    hour = usage.cache_write_1h_tokens
    return _usd(usage.cache_write_tokens - hour, write_price - above) + _usd(
        hour, hour_price - above
    )


def _write_prices(price: Price) -> tuple[float, float]:
    """A cache write's price a token: one kept 5 minutes (``cache_write``, None: ``input``),
    one kept an hour (``cache_write_1h``, None: ``cache_write``'s)."""
    write = price.input if price.cache_write is None else price.cache_write
    return write, write if price.cache_write_1h is None else price.cache_write_1h


def _saved(a: _Account) -> float:
    """Net USD saved: the three savings, less the premium of cache writes."""
    return (
        a.saved_response_cache_usd
        + a.saved_prefix_usd
        + a.saved_provider_cache_usd
        - a.write_premium_usd
    )


def _fields(a: _Account) -> dict[str, Any]:
    return {k: getattr(a, k) for k in a.__slots__ if k not in ("writes", "writes_1h")}


#: Decimal places of a USD figure in the stats: a picodollar (6, a microdollar, showed the 4e-07
#: USD four embedding tokens saved as 0, and `cachegate stats` as $0.0000: free).
_DIGITS = 12


def _usd(tokens: int, per_million: float) -> float:
    return tokens * per_million / 1_000_000


def _estimated_tokens(chars: int) -> int:
    """Tokens of ``chars`` characters of text, roughly: 4 characters a token (the rule
    gateway.prompt_cache estimates prefixes by), rounded up."""
    return -(-max(chars, 0) // 4)


def _int(value: Any) -> int:
    """A reported token count; 0 for what is not one (see ``MAX_TOKENS``)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_TOKENS:
        return value
    return 0


@functools.cache
def _cached_above_prompt() -> None:
    """Say once that an upstream reports more cached tokens than prompt tokens."""
    log.warning(
        "an upstream reported more cached_tokens than prompt_tokens: the usage ledger books "
        "them as prompt_tokens (logged once)"
    )
