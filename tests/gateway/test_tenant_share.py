"""A tenant's share of the response cache (``cache.max_entries_per_tenant``), through the API,
on both backends (``shares``: the disk store's, and Redis's with a real redis-server).

Without a share, one tenant storing many distinct answers (a batch job, a key that leaked)
pushed every other tenant's answers out of the one LRU: their next identical request missed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import openai
import pytest
import yaml

from gateway.config import load_config_text
from gateway.runtime import MAX_TENANTS_SHOWN
from tests.conftest import Gateway, RedisServer, wait_for
from tests.fake_upstream import FakeUpstream

TENANTS = (
    "auth: {keys: [{key: key-a, tenant: a}, {key: key-b, tenant: b}]}\nadmin: {api_key: adm}\n"
)


def _sdk(gw: Gateway, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0)


def _ask(sdk: openai.OpenAI, question: str, **options: Any) -> str:
    """What the gateway answered ``question`` from: its ``x-cache`` header."""
    raw = sdk.chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "user", "content": question}], **options
    )
    raw.parse()
    return str(raw.headers["x-cache"])


def _stats(gw: Gateway) -> dict[str, Any]:
    stats = gw.http.get("/admin/stats", headers={"authorization": "Bearer adm"}).json()
    return dict(stats["cache"])


def _settles(gw: Gateway, **expected: Any) -> None:
    """``/admin/stats``'s cache shows ``expected`` (Redis's counts are read about once a
    second: they may lag a moment behind)."""
    wait_for(lambda: {k: _stats(gw).get(k) for k in expected} == expected)


@pytest.fixture(params=["disk", "redis"])
def shares(
    request: pytest.FixtureRequest, make_gateway: Any, tmp_path: Any
) -> Callable[..., Gateway]:
    """``make_gateway`` with the response cache on the disk store or on a real Redis."""
    if request.param == "disk":
        return make_gateway
    server = RedisServer(tmp_path).start()
    request.addfinalizer(server.stop)

    def make(extra_yaml: str = "", *args: Any, **kwargs: Any) -> Gateway:
        config = yaml.safe_load(extra_yaml) or {}
        config.setdefault("cache", {}).update(backend="redis", redis={"url": server.url})
        return make_gateway(yaml.safe_dump(config), *args, **kwargs)

    return make


def test_a_tenant_flooding_the_cache_pushes_out_only_its_own_answers(
    shares: Any, upstream: FakeUpstream
) -> None:
    gw = shares(TENANTS + "cache: {max_entries: 10, max_entries_per_tenant: 4}")
    a, b = _sdk(gw, "key-a"), _sdk(gw, "key-b")
    for i in range(3):
        assert _ask(a, f"a's question {i}") == "miss"
    for i in range(20):  # b stores far more than its share
        assert _ask(b, f"b's batch item {i}") == "miss"
    for i in range(3):  # (before: every one a miss, pushed out by b's answers)
        assert _ask(a, f"a's question {i}") == "exact"
    assert [_ask(b, f"b's batch item {i}") for i in (19, 18, 17, 16)] == ["exact"] * 4
    assert _ask(b, "b's batch item 0") == "miss"  # b's least recently used went first
    _settles(gw, entries=7, entries_by_tenant={"a": 3, "b": 4})


def test_a_hit_keeps_an_answer_in_its_tenants_share(shares: Any, upstream: FakeUpstream) -> None:
    """Within its share a tenant's least recently *used* answer goes first, not its oldest."""
    gw = shares(TENANTS + "cache: {max_entries: 10, max_entries_per_tenant: 3}")
    b = _sdk(gw, "key-b")
    for question in ("x", "y", "z"):
        _ask(b, question)
    assert _ask(b, "x") == "exact"
    _ask(b, "w")  # past the share: y goes, x was used since
    assert [_ask(b, q) for q in ("x", "z", "w")] == ["exact"] * 3
    assert _ask(b, "y") == "miss"


def test_a_tenant_cannot_widen_its_share_with_partitions(
    shares: Any, upstream: FakeUpstream
) -> None:
    """``x-cachegate-partition`` subdivides a tenant (any client may send it): each partition
    is not a share of its own."""
    gw = shares(TENANTS + "cache: {max_entries: 10, max_entries_per_tenant: 4}")
    a, b = _sdk(gw, "key-a"), _sdk(gw, "key-b")
    for i in range(3):
        _ask(a, f"a's question {i}")
    for i in range(20):
        _ask(b, "same question", extra_headers={"x-cachegate-partition": f"p{i}"})
    assert [_ask(a, f"a's question {i}") for i in range(3)] == ["exact"] * 3
    _settles(gw, entries_by_tenant={"a": 3, "b": 4})


def test_a_tenants_expired_answers_leave_its_share_first(
    shares: Any, upstream: FakeUpstream
) -> None:
    """Past its share, a tenant's expired answers not yet swept go first, as past
    ``max_entries``: its least recently used went, a live answer, while one never served again
    kept its place (and each live answer asked again missed, pushing out the next)."""
    settings = "cache: {max_entries: 10, max_entries_per_tenant: 4, sweep_interval: 3600}"
    gw = shares(TENANTS + settings)
    a = _sdk(gw, "key-a")
    for i in range(3):
        assert _ask(a, f"a's question {i}") == "miss"
    assert _ask(a, "today's headline", extra_headers={"x-cache-ttl": "1"}) == "miss"
    time.sleep(1.5)  # (past its TTL: never served again, not yet swept)
    assert _ask(a, "a's new question") == "miss"  # past the share: the expired answer goes
    assert [_ask(a, f"a's question {i}") for i in range(3)] == ["exact"] * 3
    assert _ask(a, "a's new question") == "exact"
    _settles(gw, entries_by_tenant={"a": 4})


def test_the_shares_hold_across_a_restart_with_a_lower_share(
    make_gateway: Any, upstream: FakeUpstream, tmp_path: Any
) -> None:
    """The disk store restores each tenant's entries; a share lowered meanwhile drops that
    tenant's least recently used at start, not another tenant's."""
    data = f"data_dir: {tmp_path / 'shared-data'}\n"
    gw = make_gateway(TENANTS + data + "cache: {max_entries: 10, max_entries_per_tenant: 5}")
    a, b = _sdk(gw, "key-a"), _sdk(gw, "key-b")
    for i in range(2):
        _ask(a, f"a's question {i}")
    for i in range(5):
        _ask(b, f"b's batch item {i}")
    gw.stop()
    gw = make_gateway(TENANTS + data + "cache: {max_entries: 10, max_entries_per_tenant: 3}")
    a, b = _sdk(gw, "key-a"), _sdk(gw, "key-b")
    assert _stats(gw)["entries_by_tenant"] == {"a": 2, "b": 3}
    assert [_ask(a, f"a's question {i}") for i in range(2)] == ["exact"] * 2
    assert [_ask(b, f"b's batch item {i}") for i in (4, 3, 2)] == ["exact"] * 3
    assert _ask(b, "b's batch item 0") == "miss"


def test_an_evicted_answer_leaves_the_vector_index_too(shares: Any, upstream: FakeUpstream) -> None:
    """A tenant's answer pushed out for its share is not found semantically either (its
    vector went with it), and the index counts what the store holds."""
    gw = shares(TENANTS + "cache: {max_entries: 10, max_entries_per_tenant: 2}", semantic=True)
    a, b = _sdk(gw, "key-a"), _sdk(gw, "key-b")
    assert _ask(a, "What is the capital of France?") == "miss"
    for question in ("How tall is Mount Everest?", "Who wrote Hamlet?", "What is photosynthesis?"):
        assert _ask(b, question) == "miss"
    _settles(gw, entries=3)
    assert _stats(gw)["index"]["entries"] == 3
    assert _ask(b, "How tall is Mount Everest?") == "miss"  # (evicted: stored again now)
    assert _ask(a, "What's the capital of France?") == "semantic"


def test_no_share_by_default(shares: Any, upstream: FakeUpstream) -> None:
    """Without ``max_entries_per_tenant`` one LRU serves every tenant, as before."""
    gw = shares(TENANTS + "cache: {max_entries: 4}")
    a, b = _sdk(gw, "key-a"), _sdk(gw, "key-b")
    _ask(a, "a's question")
    for i in range(4):
        _ask(b, f"b's batch item {i}")
    assert _ask(a, "a's question") == "miss"
    assert "entries_by_tenant" not in _stats(gw)


def test_a_share_per_tenant_is_taken_with_redis() -> None:
    """(It was a config error: Redis evicted in one LRU for every replica.)"""
    config = load_config_text("cache: {backend: redis, max_entries_per_tenant: 100}")
    assert config.cache.max_entries_per_tenant == 100


def test_stats_name_the_tenants_holding_the_most_and_count_the_rest_together(
    make_gateway: Any, upstream: FakeUpstream
) -> None:
    """With client keys as tenants there can be as many tenants as entries: ``/admin/stats``
    (polled by the dashboard) names the 100 holding the most, not every one."""
    keys = ", ".join(f"{{key: key-{i}, tenant: t{i}}}" for i in range(MAX_TENANTS_SHOWN + 3))
    gw = make_gateway(
        f"auth: {{keys: [{keys}]}}\nadmin: {{api_key: adm}}\n"
        + "cache: {max_entries_per_tenant: 10}"
    )
    big = _sdk(gw, "key-0")
    for i in range(3):
        assert _ask(big, f"t0's question {i}") == "miss"
    for i in range(1, MAX_TENANTS_SHOWN + 3):
        assert _ask(_sdk(gw, f"key-{i}"), f"t{i}'s question") == "miss"
    stats = _stats(gw)
    assert stats["entries"] == MAX_TENANTS_SHOWN + 5
    shown = stats["entries_by_tenant"]
    assert len(shown) == MAX_TENANTS_SHOWN and shown["t0"] == 3
    assert stats["entries_by_other_tenants"] == {"tenants": 3, "entries": 3}
