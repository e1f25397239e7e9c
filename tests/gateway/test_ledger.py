"""The usage ledger and the history ring, unit by unit (the HTTP path is in test_admin.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import Price
from gateway.history import NAMESPACES, OTHER_NAMESPACES, Answer, History, percentile
from gateway.ledger import Ledger, Usage, partial_usage, usage_of


def test_usage_of_each_api() -> None:
    openai_chat = {"prompt_tokens": 120, "completion_tokens": 30,
                   "prompt_tokens_details": {"cached_tokens": 64}}  # fmt: skip
    assert usage_of(openai_chat) == Usage(120, 30, 64, 0)
    responses = {"input_tokens": 50, "output_tokens": 5,
                 "input_tokens_details": {"cached_tokens": 32}}  # fmt: skip
    assert usage_of(responses) == Usage(50, 5, 32, 0)
    # Anthropic: input_tokens excludes what was read from or written to its cache
    anthropic = {"input_tokens": 10, "output_tokens": 7, "cache_read_input_tokens": 900,
                 "cache_creation_input_tokens": 100}  # fmt: skip
    assert usage_of(anthropic) == Usage(1010, 7, 900, 100)
    assert usage_of(None) == Usage() and usage_of({"prompt_tokens": "x"}) == Usage()


def test_anthropic_cache_writes_read_and_unread() -> None:
    now = [1000.0]
    price = Price(input=3.0, cached_input=0.3, cache_write=3.75, output=15.0)
    ledger = Ledger({"claude": price}, write_ttl=300, clock=lambda: now[0])
    write = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 2000}
    ledger.record("a", "claude", usage_of(write), source="upstream", hit=False)
    now[0] += 60
    read = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 1500}
    ledger.record("a", "claude", usage_of(read), source="upstream", hit=False)
    ledger.record("b", "claude", usage_of(write), source="upstream", hit=False)  # never read
    now[0] += 301
    a, b = ledger.stats()["a"]["claude"], ledger.stats()["b"]["claude"]
    assert a["cache_write_tokens"] == 2000 and a["provider_cached_tokens"] == 1500
    assert a["unread_write_tokens"] == 500  # what the one read did not cover
    assert b["unread_write_tokens"] == 2000
    assert b["unread_write_usd"] == pytest.approx(2000 * 0.75 / 1e6)
    premium, read_saving = 2000 * 0.75 / 1e6, 1500 * 2.7 / 1e6
    assert a["saved_usd"] == pytest.approx(read_saving - premium)
    assert b["saved_usd"] == pytest.approx(-premium)  # a write nobody read only cost money


def test_an_hours_cache_writes_are_priced_as_an_hours() -> None:
    """Anthropic bills a write kept for an hour at 2x input, one for 5 minutes at 1.25x; every
    write was priced at ``cache_write`` (a review's cost report: spend 37% low, premium 4x)."""
    usage = usage_of({"input_tokens": 10, "output_tokens": 6, "cache_creation_input_tokens": 1500,
                      "cache_creation": {"ephemeral_5m_input_tokens": 100,
                                         "ephemeral_1h_input_tokens": 1400}})  # fmt: skip
    assert usage == Usage(1510, 6, 0, 1500, 1400)
    priced = Price(input=3.0, cached_input=0.3, cache_write=3.75, cache_write_1h=6.0, output=15.0)
    ledger = Ledger({"claude": priced, "plain": Price(input=3.0, cache_write=3.75, output=15.0)})
    ledger.record("t", "claude", usage, source="upstream", hit=False)
    row = ledger.stats()["t"]["claude"]
    spent = (10 * 3.0 + 100 * 3.75 + 1400 * 6.0 + 6 * 15.0) / 1e6
    assert row["spent_usd"] == pytest.approx(spent, abs=1e-6)
    assert row["write_premium_usd"] == pytest.approx((100 * 0.75 + 1400 * 3.0) / 1e6, abs=1e-6)
    saved = ledger.record("t", "claude", usage, source="upstream", hit=True)  # what it cost
    assert saved["usd_saved"] == pytest.approx(spent)
    # an hour's writes are waste only after an hour, at their own premium (they expired at 5
    # minutes, at cache_write's: a review)
    now = [1000.0]
    timed = Ledger({"claude": priced}, write_ttl=300, clock=lambda: now[0])
    timed.record("a", "claude", usage, source="upstream", hit=False)
    timed.record("b", "claude", usage, source="upstream", hit=False)
    now[0] += 600
    read = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 1400}
    timed.record("a", "claude", usage_of(read), source="upstream", hit=False)
    a, b = timed.stats()["a"]["claude"], timed.stats()["b"]["claude"]
    assert a["unread_write_tokens"] == b["unread_write_tokens"] == 100  # (the 5 minutes')
    now[0] += 3001
    a, b = timed.stats()["a"]["claude"], timed.stats()["b"]["claude"]
    assert a["unread_write_tokens"] == 100  # (its hour's were read)
    assert b["unread_write_tokens"] == 1500
    assert b["unread_write_usd"] == pytest.approx((100 * 0.75 + 1400 * 3.0) / 1e6, abs=1e-9)
    # without cache_write_1h, an hour's writes are priced as cache_write, as before
    ledger.record("t", "plain", usage, source="upstream", hit=False)
    plain = ledger.stats()["t"]["plain"]
    assert plain["spent_usd"] == pytest.approx((10 * 3 + 1500 * 3.75 + 90) / 1e6, abs=1e-6)


def test_a_tiny_amount_is_not_rounded_to_nothing() -> None:
    ledger = Ledger({"emb": Price(input=0.10)})
    ledger.record("t", "emb", Usage(4, 0), source="upstream", hit=True)
    ledger.record("t", "emb", Usage(7, 0), source="upstream", hit=False)
    row = ledger.stats()["t"]["emb"]
    assert row["saved_usd"] == pytest.approx(4e-7) and row["spent_usd"] == pytest.approx(7e-7)


def test_hits_and_local_prefix_tokens() -> None:
    ledger = Ledger({"m": Price(input=1.0, output=2.0)})
    saved = ledger.record("t", "m", Usage(100, 10), source="upstream", hit=True)
    assert saved == {"tokens_saved": 110, "usd_saved": pytest.approx(120 / 1e6)}
    ledger.record("t", "local", Usage(300, 20, 256), source="local", hit=False)
    row = ledger.stats()["t"]["local"]
    assert row["prefix_cached_tokens"] == 256 and row["saved_usd"] == 0  # unpriced: tokens only
    assert ledger.stats()["t"]["m"]["avoided_output_tokens"] == 10


def test_a_hit_saves_what_its_call_cost_not_the_full_input_price() -> None:
    # the stored call read 800 of its 1000 input tokens from the provider's prompt cache
    ledger = Ledger({"m": Price(input=2.0, cached_input=0.5, output=8.0)})
    usage = usage_of({"prompt_tokens": 1000, "completion_tokens": 10,
                      "prompt_tokens_details": {"cached_tokens": 800}})  # fmt: skip
    saved = ledger.record("t", "m", usage, source="upstream", hit=True)
    paid = (200 * 2.0 + 800 * 0.5 + 10 * 8.0) / 1e6
    assert saved == {"tokens_saved": 1010, "usd_saved": pytest.approx(paid)}
    assert ledger.stats()["t"]["m"]["saved_usd"] == pytest.approx(paid)


def test_a_stream_that_ended_early_is_booked_with_what_is_known() -> None:
    # Anthropic's message_start reported the input (and 1 output token); 41 characters came
    reported = {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 900}
    assert partial_usage(reported, None, 41) == Usage(910, 11, 900, 0)
    # the local model counted its prompt and 3 deltas; 8 characters would be only 2 tokens
    assert partial_usage(None, {"prompt_tokens": 50, "completion_tokens": 3}, 8) == Usage(50, 3)
    assert partial_usage(None, None, 0) == Usage()  # an upstream cut before any text
    ledger = Ledger({"m": Price(input=1.0, output=2.0)})
    ledger.record("t", "m", Usage(0, 25), source="upstream", hit=False, ended_early=True)
    ledger.record("t", "m", Usage(10, 5), source="upstream", hit=False)
    row = ledger.stats()["t"]["m"]
    assert (row["requests"], row["model_calls"], row["ended_early"]) == (2, 2, 1)
    assert (row["input_tokens"], row["output_tokens"]) == (10, 30)
    assert row["spent_usd"] == pytest.approx((10 * 1.0 + 30 * 2.0) / 1e6)


def test_history_ring_is_bounded_and_percentiles_are_binned() -> None:
    now = [0.0]
    history = History(interval=10, points=3, clock=lambda: now[0])
    for step in range(6):
        now[0] = step * 10.0
        history.record(Answer("miss", "m", "", latency=0.1 * (step + 1)))
        history.record(Answer("exact", "m", "", latency=0.001))
    points = history.snapshot()["points"]
    assert [p["t"] for p in points] == [30.0, 40.0, 50.0]  # the oldest went
    assert points[-1]["tiers"] == {"miss": 1, "exact": 1}
    p50 = points[-1]["latency"]["miss"]["p50"]
    assert 0.6 <= p50 <= 0.6 * 2**0.25  # the bin's upper edge, within one bin
    assert percentile([0] * 10, 0.5) is None


def test_namespaces_past_the_first_hundred_are_counted_together() -> None:
    history = History(interval=10, points=3, clock=lambda: 0.0)
    for n in range(NAMESPACES + 50):  # a client naming a new namespace each time
        history.record(Answer("miss", "m", f"ns{n}", latency=0.01))
    history.record(Answer("exact", "m", "ns0", latency=0.01))  # one of the first still apart
    by_namespace = history.snapshot()["points"][-1]["by_namespace"]
    assert len(by_namespace) == NAMESPACES + 1
    assert by_namespace["ns0"] == {"miss": 1, "exact": 1}
    assert by_namespace[OTHER_NAMESPACES] == {"miss": 50}


def test_a_partitioned_tenant_keeps_its_model_label() -> None:
    """Behind a front gateway a tenant is ``tenant\\x1fpartition``: the /metrics labels must
    still split the account into that tenant and the model."""
    from gateway.metrics import _LedgerCollector
    from gateway.requests import partitioned

    ledger = Ledger({"gpt": Price(input=1.0, output=2.0)})
    tenant = partitioned("team-a", "p1")
    ledger.record(tenant, "gpt", Usage(100, 10, 0, 0), source="upstream", hit=False)
    labels = {
        tuple(sorted(s.labels.items()))
        for family in _LedgerCollector(ledger).collect()
        for s in family.samples
    }
    assert labels == {(("model", "gpt"), ("tenant", tenant))}


def test_partitions_past_the_account_limit_are_booked_to_their_tenant() -> None:
    """Any client with a tenant key may send new x-cachegate-partition values: past the
    limit, a new one's usage goes to its tenant's account instead of a new account."""
    from gateway.requests import partitioned

    ledger = Ledger({"gpt": Price(input=1.0, output=2.0)}, max_accounts=2)
    for partition in ("p1", "p2", "p3", "p4"):
        tenant = partitioned("team-a", partition)
        ledger.record(tenant, "gpt", Usage(100, 10, 0, 0), source="upstream", hit=False)
    stats = ledger.stats()
    assert set(stats) == {partitioned("team-a", "p1"), partitioned("team-a", "p2"), "team-a"}
    assert stats["team-a"]["gpt"]["requests"] == 2  # p3 and p4
    p1 = partitioned("team-a", "p1")  # an account it has already keeps counting
    ledger.record(p1, "gpt", Usage(1, 1, 0, 0), source="upstream", hit=False)
    assert ledger.stats()[p1]["gpt"]["requests"] == 2


def test_a_request_checks_the_cache_writes_of_its_own_account_only() -> None:
    """A tenant key may make up ``max_accounts`` accounts (partitions): a request used to
    expire the cache writes of every one of them. It visits its own; the others' unread
    writes are still counted, when the stats are read."""
    from gateway.requests import partitioned

    now = [1000.0]
    price = Price(input=3.0, cached_input=0.3, cache_write=3.75, output=15.0)
    ledger = Ledger({"claude": price}, write_ttl=300, clock=lambda: now[0])
    write = Usage(110, 5, 0, 100)
    for n in range(1000):
        ledger.record(partitioned("a", f"p{n}"), "claude", write, source="upstream", hit=False)
    visited: list[object] = []
    expire = ledger._expire

    def counted(account: Any, price: Price, cutoff: float) -> None:
        visited.append(account)
        expire(account, price, cutoff)

    ledger._expire = counted  # type: ignore[method-assign]
    now[0] += 301  # every write is now past its TTL, none read
    ledger.record("b", "claude", Usage(1010, 5, 900, 0), source="upstream", hit=False)
    assert len(visited) == 1
    stats = ledger.stats()
    assert len(visited) == 1002  # (the stats read every account)
    unread = [
        stats[partitioned("a", f"p{n}")]["claude"]["unread_write_tokens"] for n in range(1000)
    ]
    assert unread == [100] * 1000
    assert stats["b"]["claude"]["provider_cached_tokens"] == 900
    series = ledger.series()
    assert sum(row["unread_write_tokens"] for row in series.values()) == 100_000
    assert sum(row["requests"] for row in series.values()) == 1001
