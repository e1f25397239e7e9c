"""The paged KV pool (``localmodel.pages``): pages shared by the prefix tree and requests.

What must hold: a prefix hit maps the tree's pages with no copy (the same page ids), a
request copies only a shared, partly filled page before writing into it, every reference is
released when a request finishes, cached pages are reclaimed only when the pool needs them,
and a pool full of running work preempts the youngest request, which still completes with
the tokens it gets alone.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from localmodel import ContextWindowExceeded, Engine, Event, Finished, SamplingParams
from localmodel.batch import Piece, forward, use_batched_attention
from localmodel.kv import KVLayout, TensorKV
from localmodel.pages import PagedCache, PagedKV, PagePool, PoolExhausted
from localmodel.scheduler import Scheduler
from prefix import RadixCache, RadixKey
from tests.localmodel.conftest import MakeEngine
from tests.localmodel.test_batch import _batched

NS = "smollm2|tenant-a"
GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
GREEDY8 = SamplingParams(temperature=0.0, max_tokens=8)


def _layout(layers: int = 2, heads: int = 2, dim: int = 4) -> KVLayout:
    return KVLayout(layers, heads, dim, torch.float32, torch.device("cpu"))


def _fill(cache: PagedCache, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Append ``n`` random tokens' K/V (all layers) through the write path; return them."""
    layout = cache.pool.layout
    gen = torch.Generator().manual_seed(seed)
    shape = (layout.n_layers, layout.n_kv_heads, n, layout.head_dim)
    keys, values = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    start = cache.length
    cache.reserve(n)
    for layer in range(layout.n_layers):
        cache.append(layer, keys[layer][None], values[layer][None])
    cache.note_fed(range(start, start + n))
    return keys, values


def _kv_of(cache: PagedCache) -> tuple[torch.Tensor, torch.Tensor]:
    return cache.view(cache.length).gather()


# ── the pool and its spans, no model ─────────────────────────────────────────────────


def test_slices_share_pages_and_dropping_the_last_reference_frees_them() -> None:
    pool = PagePool(_layout(), n_pages=8, page_size=4)
    cache = PagedCache(pool, capacity=32)
    keys, _ = _fill(cache, 10)  # pages 0, 1, 2 (the last one half full)
    assert cache.table == [0, 1, 2] and pool.free_pages == 5
    span = cache.view(10)
    part = span.slice(5, 10)  # starts inside page 1: shares pages 1 and 2, no copy
    assert (part.pages, part.offset, len(part)) == ((1, 2), 1, 5)
    assert torch.equal(part.gather()[0], keys[:, :, 5:10])
    assert [pool.refs(p) for p in (0, 1, 2)] == [2, 3, 3]  # table + span (+ part)
    assert pool.copied_pages == 0
    cache.release()
    del span
    assert [pool.refs(p) for p in (0, 1, 2)] == [0, 1, 1] and pool.free_pages == 6
    assert pool.stats.cached == 2  # held by a span only
    del part
    assert pool.free_pages == 8 and pool.stats.used == 0


def test_a_prefix_hit_maps_the_same_pages_and_copies_only_the_partial_last_one() -> None:
    pool = PagePool(_layout(), n_pages=16, page_size=4)
    tree = RadixCache(1 << 20)
    first = PagedCache(pool, capacity=32)
    keys, values = _fill(first, 10)
    tree.insert(RadixKey(NS, range(10)), first.view(10))  # the tree shares pages 0, 1, 2
    first.release()
    stored_pages = [p for s in tree.match(RadixKey(NS, range(20))).spans for p in s.pages]  # type: ignore[attr-defined]

    hit = tree.match(RadixKey(NS, range(20)))
    second = PagedCache(pool, capacity=32)
    second.map_prefix(hit.spans, hit.n_cached, list(range(20)))
    del hit
    assert second.table == stored_pages == [0, 1, 2]  # the tree's pages: no copy
    assert pool.copied_pages == 0
    assert torch.equal(_kv_of(second)[0], keys) and torch.equal(_kv_of(second)[1], values)

    new_keys, _ = _fill(second, 3, seed=1)  # token 10 goes into the shared page 2
    assert pool.copied_pages == 1  # copy-on-write of that page, and only of that one
    assert second.table[:2] == [0, 1] and second.table[2] not in stored_pages
    assert torch.equal(_kv_of(second)[0], torch.cat([keys, new_keys], dim=2))
    (span,) = tree.match(RadixKey(NS, range(20))).spans
    assert torch.equal(span.gather()[0], keys)  # type: ignore[attr-defined]  # intact
    del span
    second.release()
    tree.flush()
    assert pool.stats.used == 0


def test_spans_mapped_across_a_split_node_line_up_page_by_page() -> None:
    """A node split inside a page: both halves share it; a hit maps it once."""
    pool = PagePool(_layout(), n_pages=16, page_size=4)
    tree = RadixCache(1 << 20)
    cache = PagedCache(pool, capacity=32)
    keys, _ = _fill(cache, 12)
    tree.insert(RadixKey(NS, range(12)), cache.view(12))
    other = PagedCache(pool, capacity=32)
    other.map_prefix(tree.match(RadixKey(NS, range(6))).spans, 5, range(5))
    _fill(other, 4, seed=2)  # diverges at token 5 (inside page 1): copy-on-write
    tree.insert(RadixKey(NS, [0, 1, 2, 3, 4, 99, 98, 97, 96]), other.view(9))  # splits at 5
    hit = tree.match(RadixKey(NS, [*range(12), 0]))
    assert [len(s) for s in hit.spans] == [5, 7]
    fresh = PagedCache(pool, capacity=32)
    fresh.map_prefix(hit.spans, 12, range(12))
    assert fresh.table == cache.table  # page 1 appears once, from the lower half
    assert torch.equal(_kv_of(fresh)[0], keys)


def test_reclaim_is_asked_only_when_free_pages_run_out() -> None:
    pool = PagePool(_layout(), n_pages=4, page_size=4)
    asked: list[int] = []
    held: list[PagedKV] = []

    def reclaim(n: int) -> None:
        asked.append(n)
        held.clear()  # the tree dropping what it cached

    pool.reclaim = reclaim
    cache = PagedCache(pool, capacity=64)
    _fill(cache, 8)
    held.append(cache.view(8))
    cache.release()  # pages 0, 1 are now cached (the span holds them)
    other = PagedCache(pool, capacity=64)
    _fill(other, 8)  # two free pages remain: no reclaim
    assert asked == [] and pool.stats.cached == 2
    _fill(other, 4)  # a third page: one short
    assert asked == [1] and pool.stats.cached == 0
    with pytest.raises(PoolExhausted):
        _fill(other, 8)  # nothing left to reclaim


def test_foreign_spans_are_copied_into_pages() -> None:
    pool = PagePool(_layout(), n_pages=8, page_size=4)
    kv = TensorKV(torch.randn(2, 2, 6, 4), torch.randn(2, 2, 6, 4))
    cache = PagedCache(pool, capacity=16)
    cache.map_prefix([kv], 5, range(5))
    assert cache.length == 5 and len(cache.table) == 2
    assert torch.equal(_kv_of(cache)[0], kv.keys[:, :, :5])


# ── attention over pages is exact ────────────────────────────────────────────────────


def test_batched_steps_over_pages_equal_cold_forwards(tiny_model: Any) -> None:
    model = tiny_model
    use_batched_attention(model)
    pool = PagePool(KVLayout.of(model), n_pages=40, page_size=4)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 512, (n,), generator=gen).tolist() for n in (1, 9, 23)]
    caches = [PagedCache(pool, 64) for _ in prompts]
    seen: list[list[int]] = [[] for _ in prompts]
    steps = [
        [(0, prompts[0]), (1, prompts[1]), (2, prompts[2][:13])],
        [(0, [5]), (1, [6]), (2, prompts[2][13:])],
        [(0, [7]), (1, [8]), (2, [9])],
    ]
    for step in steps:
        pieces = [Piece(caches[i], tuple(t)) for i, t in step]
        for piece in pieces:
            assert isinstance(piece.cache, PagedCache)
            piece.cache.reserve(len(piece.tokens))
        logits = forward(model, pieces)
        for row, (i, tokens) in zip(logits, step, strict=True):
            seen[i] += tokens
            with torch.inference_mode():
                cold = model(torch.tensor([seen[i]])).logits[0, -1]
            assert (row - cold).abs().max().item() <= 1e-4
    assert [c.tokens for c in caches] == seen


# ── the engine on a pool ─────────────────────────────────────────────────────────────


def _chat(engine: Engine, text: str) -> list[int]:
    return engine.encode_chat([{"role": "user", "content": text}])


def test_engine_requests_share_the_trees_pages_and_release_theirs(tiny_engine: Engine) -> None:
    pool = tiny_engine.pool
    assert pool is not None and tiny_engine.stats.pool is not None
    prompt = _chat(tiny_engine, "Tell me about the sea and the ships on it.")
    first = tiny_engine.complete(tiny_engine.prepare(prompt, GREEDY, namespace=NS))
    assert pool.stats.used == pool.stats.cached > 0  # only the tree holds pages now

    request = tiny_engine.prepare(prompt, GREEDY, namespace=NS)
    steps = tiny_engine.steps(request)
    piece = steps.send(None)
    assert isinstance(piece, Piece) and isinstance(piece.cache, PagedCache)
    spans = tiny_engine.prefix_cache.match(RadixKey(NS, prompt)).spans
    tree_pages = [p for s in spans for p in s.pages]  # type: ignore[attr-defined]
    full = (len(prompt) - 1) // pool.page_size
    assert piece.cache.table[:full] == tree_pages[:full]  # mapped, not copied
    steps.close()  # the driver gives up: the request's references go
    assert pool.stats.used == pool.stats.cached

    again = tiny_engine.complete(tiny_engine.prepare(prompt, GREEDY, namespace=NS))
    assert again.choices == first.choices
    assert again.usage.cached_tokens == len(prompt) - 1
    del spans
    tiny_engine.flush_prefix_cache()
    assert pool.stats.used == 0


def test_cached_pages_are_reclaimed_only_when_the_pool_needs_them(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    engine = make_engine(tiny=tiny_model, kv_pool_bytes=16 * 16 * 512)  # 16 pages
    pool = engine.pool
    assert pool is not None and pool.n_pages == 16 and engine.context_window == 256
    params = SamplingParams(temperature=0.0, max_tokens=8)
    for i in range(3):
        prompt = list(range(1000 + 100 * i, 1020 + 100 * i))
        engine.complete(engine.prepare(prompt, params, namespace=NS))
    assert engine.prefix_cache.stats.evictions == 0  # room to spare: everything stays cached
    cached = pool.stats.cached
    assert cached >= 6 and pool.stats.free == 16 - cached
    big = list(range(10, 250))  # 240 tokens + 4: every page of the pool
    result = engine.complete(engine.prepare(big, SamplingParams(max_tokens=4), namespace="x"))
    assert len(result.choices[0].token_ids) == 4
    assert engine.prefix_cache.stats.evictions > 0  # the tree gave its pages back


def test_a_request_longer_than_the_pool_is_refused_like_a_context_overflow(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    engine = make_engine(tiny=tiny_model, kv_pool_bytes=8 * 16 * 512)  # 8 pages: 128 tokens
    assert engine.context_window == 128
    with pytest.raises(ContextWindowExceeded, match="128 tokens"):
        engine.prepare(list(range(100)), SamplingParams(max_tokens=40), namespace=NS)
    assert engine.prepare(list(range(100)), SamplingParams(max_tokens=28), namespace=NS)


@pytest.mark.parametrize("kv_dtype", ["float32", "int8"])
def test_a_request_holding_every_page_writes_into_the_partial_page_the_tree_shares(
    make_engine: MakeEngine, tiny_model: Any, kv_dtype: str
) -> None:
    """A 75-token prompt in a 5-page pool (80 tokens): sent again, it maps all five pages
    from the tree, and n = 3 choices restart from the prompt's last page once the tree
    shares it. No page is free to copy it to: the tree gives it up, nothing fails."""
    page = PagePool.bytes_per_page(KVLayout.of(tiny_model), 16, getattr(torch, kv_dtype))
    engine = make_engine(tiny=tiny_model, kv_pool_bytes=5 * page, kv_dtype=kv_dtype)
    assert engine.context_window == 80
    prompt = list(range(1000, 1075))
    params = SamplingParams(temperature=0.0, max_tokens=3, n=3)
    first = engine.complete(engine.prepare(prompt, params, namespace=NS))
    again = engine.complete(engine.prepare(prompt, params, namespace=NS))
    assert again.usage.cached_tokens == len(prompt) - 1
    assert len(again.choices) == len(first.choices) == 3
    if kv_dtype == "float32":  # (int8: a warm answer may differ from a cold one)
        assert again.choices == first.choices
    assert engine.pool.stats.used == engine.pool.stats.cached  # every request released


@pytest.mark.parametrize(("n_pages", "more", "max_tokens"), [(5, 20, 8), (6, 45, 1)])
@pytest.mark.parametrize("batched", [False, True], ids=["alone", "scheduler"])
def test_a_request_alone_evicts_the_node_that_keeps_a_page_it_replaced(
    make_engine: MakeEngine, tiny_model: Any, batched: bool, n_pages: int, more: int,
    max_tokens: int,
) -> None:  # fmt: skip
    """20 tokens, then 50 that continue them (the hit copies the partly filled second
    page), then ``more`` that continue those, filling the pool: the first node keeps the
    original second page, held up by the second node on the request's pages. The request,
    alone, evicts cached prefixes on its own pages too, a page at a time (the second shape
    is short of two pages at once)."""
    engine = make_engine(tiny=tiny_model, kv_pool_bytes=n_pages * 16 * 512)
    first = list(range(1000, 1020))
    second = first + list(range(2000, 2030))
    third = second + list(range(3000, 3000 + more))
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    alone = make_engine(tiny=tiny_model)
    expected = alone.complete(alone.prepare(third, params, namespace=NS))
    for prompt in (first, second):
        engine.complete(engine.prepare(prompt, SamplingParams(max_tokens=1), namespace=NS))
    if batched:
        (got,) = _batched(engine, [(third, params)])
    else:
        got = engine.complete(engine.prepare(third, params, namespace=NS))
    assert got.choices == expected.choices and got.usage.cached_tokens == len(second)
    assert engine.pool.stats.used == engine.pool.stats.cached


def test_a_page_only_a_kept_node_holds_is_freed_rather_than_preempting(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    """The shape above with a second request beside it, in an 8-page pool: together they
    need every page but the one the first node keeps (held up by the second node, on the
    first request's pages). Admission counts that page as free: it is freed for them, not
    paid for by preempting a running request (found by a review)."""
    engine = make_engine(tiny=tiny_model, kv_pool_bytes=8 * 16 * 512)
    first = list(range(1000, 1020))
    second = first + list(range(2000, 2030))
    jobs = [(second + list(range(3000, 3010)), GREEDY8), (list(range(5000, 5030)), GREEDY8)]
    alone = make_engine(tiny=tiny_model)
    expected = [alone.complete(alone.prepare(p, q, namespace=NS)).choices for p, q in jobs]
    for prompt in (first, second):
        engine.complete(engine.prepare(prompt, SamplingParams(max_tokens=1), namespace=NS))
    got = _batched(engine, jobs, max_batch=4, step_tokens=256)
    assert [c.choices for c in got] == expected
    assert got[0].usage.cached_tokens == len(second)
    assert engine.pool.stats.preemptions == 0  # was 1
    assert engine.pool.stats.used == engine.pool.stats.cached


def test_freeing_a_page_a_kept_node_holds_evicts_only_what_keeps_it(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    """The shape above, with a third prefix (two whole pages) that another running request
    shares. Freeing the page the first node keeps evicts the node below it and that node's
    tail, not the shared prefix, which is older in the LRU order and frees no page: a request
    sent while the sharer still runs finds it (it evicted every least recently used node,
    whatever pages it was on, until a page was free: found by a review)."""
    engine = make_engine(tiny=tiny_model, kv_pool_bytes=8 * 16 * 512)
    shared = list(range(7000, 7032))
    first = list(range(1000, 1020))
    second = first + list(range(2000, 2030))
    for prompt in (shared, first, second):
        engine.complete(engine.prepare(prompt, SamplingParams(max_tokens=1), namespace=NS))
    scheduler = Scheduler(engine, max_batch=4, step_tokens=256)
    done: list[Finished] = []

    def send(item: Event | BaseException) -> bool:
        assert not isinstance(item, BaseException)
        if isinstance(item, Finished):
            done.append(item)
        return True

    def add(prompt: list[int], max_tokens: int) -> None:
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        scheduler.add(engine.prepare(prompt, params, namespace=NS), send)

    add([*shared, 7100, 7101, 7102, 7103], 12)  # the sharer: within its 3 pages, the longest
    add(second + list(range(3000, 3010)), 8)  # its 5th page frees the one the first node keeps
    while not done:
        scheduler.step()
    assert len(scheduler.running) == 1  # the sharer still runs
    add([*shared, 7200, 7201], 2)
    while scheduler.busy:
        scheduler.step()
    probe = next(f for f in done if f.completion.usage.prompt_tokens == len(shared) + 2)
    assert probe.completion.usage.cached_tokens == len(shared)  # was 0
    assert engine.pool.stats.preemptions == 0
    assert engine.pool.stats.used == engine.pool.stats.cached


@pytest.mark.parametrize("tree_bytes", [256 * 2**20, 0], ids=["tree-on", "tree-off"])
def test_a_full_pool_preempts_the_youngest_and_everyone_gets_their_tokens(
    make_engine: MakeEngine, tiny_model: Any, tree_bytes: int
) -> None:
    """Three requests of up to 3 pages each in a 7-page pool: one must give way. Whether
    the tree can keep its KV meanwhile or not (recomputed), it ends with its own tokens."""
    prompts = [list(range(100 + 7 * i, 124 + 7 * i)) for i in range(3)]  # 24 tokens each
    alone = make_engine(tiny=tiny_model)
    expected = [alone.complete(alone.prepare(p, GREEDY, namespace=NS)).choices for p in prompts]
    engine = make_engine(tiny=tiny_model, max_bytes=tree_bytes, kv_pool_bytes=7 * 16 * 512)
    assert engine.pool is not None
    jobs = [(p, GREEDY) for p in prompts]
    assert [c.choices for c in _batched(engine, jobs, max_batch=3, step_tokens=64)] == expected
    assert engine.pool.stats.preemptions >= 1
    assert engine.pool.stats.used == engine.pool.stats.cached  # every request released


def test_admission_counts_what_the_requests_admitted_before_have_yet_to_feed(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    """Three 60-token prompts, a 10-page pool (160 tokens): two fit, so the third waits
    rather than being admitted in the same loop (each one checked against the same free
    pages) and preempting another at the first step, its prefill thrown away."""
    engine = make_engine(tiny=tiny_model, kv_pool_bytes=10 * 16 * 512)
    assert engine.pool is not None and engine.pool.n_pages == 10
    prompts = [list(range(100 + 61 * i, 160 + 61 * i)) for i in range(3)]
    params = SamplingParams(temperature=0.0, max_tokens=4)
    scheduler = Scheduler(engine, max_batch=4, step_tokens=256)
    for prompt in prompts:
        scheduler.add(engine.prepare(prompt, params, namespace=NS), lambda item: True)
    scheduler.step()
    assert (len(scheduler.running), len(scheduler.waiting)) == (2, 1)
    while scheduler.busy:
        scheduler.step()
    assert engine.pool.stats.preemptions == 0


def test_reclaim_keeps_the_prefix_running_requests_share(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    """A system prompt every running request maps is on pages reclaim cannot free: its node
    loses only the tail that frees a page (the partly filled page the requests copied),
    and the shared pages stay found by the next request and by a preempted one's restore."""
    engine = make_engine(tiny=tiny_model, kv_pool_bytes=10 * 16 * 512)
    assert engine.pool is not None
    system = list(range(1000, 1040))  # 40 tokens: 2 full pages and 8 tokens of a third
    engine.complete(engine.prepare([*system, 5], SamplingParams(max_tokens=1), namespace=NS))
    held: list[int] = []
    evict = engine.prefix_cache.evict

    def spy(n_bytes: int, **kwargs: Any) -> int:
        freed = evict(n_bytes, **kwargs)
        held.append(engine.prefix_cache.stats.tokens)
        return freed

    engine.prefix_cache.evict = spy  # type: ignore[method-assign]
    jobs = [([*system, 2000 + 9 * i, 2001 + 9 * i], GREEDY) for i in range(3)]
    finished = _batched(engine, jobs, max_batch=3, step_tokens=64)
    assert engine.pool.stats.preemptions >= 1 and held
    assert min(held) >= 32  # the two full pages of the system prompt were never evicted
    assert all(c.usage.cached_tokens >= 32 for c in finished)
    # a preempted request taking its KV back is no query: the hit rate counts requests' own
    stats = engine.prefix_cache.stats
    assert (stats.queries, stats.queried_tokens) == (4, 41 + 3 * 42)


def test_a_preempted_request_gets_the_trees_pages_back_when_the_pool_kept_them(
    tiny_engine: Engine,
) -> None:
    pool = tiny_engine.pool
    assert pool is not None
    prompt = list(range(300, 340))  # 40 tokens: two full pages and a partial one
    steps = tiny_engine.steps(tiny_engine.prepare(prompt, GREEDY, namespace=NS))
    piece = steps.send(None)
    assert isinstance(piece, Piece) and isinstance(piece.cache, PagedCache)
    cache = piece.cache
    before = tiny_engine.forward_batch([piece])[0]
    table = list(cache.table)
    tiny_engine.preempt(cache)
    assert (cache.length, cache.table, pool.stats.preemptions) == (0, [], 1)
    assert pool.stats.used == pool.stats.cached == len(table)  # the tree holds them
    n = tiny_engine.restore(cache, prompt)
    assert n == len(prompt) - 1 and cache.table == table  # the same pages, not recomputed
    after = tiny_engine.forward_batch([Piece(cache, tuple(prompt[n:]))])[0]
    assert (after - before).abs().max().item() <= 1e-4
    steps.close()


def test_many_requests_through_a_small_pool_all_get_their_tokens_and_release_every_page(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    """Nine requests (shared prefixes, n = 2, different lengths) through 10 pages, 4 at a time."""
    shared = list(range(500, 520))
    prompts = [shared[: 5 + 2 * i] + list(range(600 + 9 * i, 606 + 9 * i)) for i in range(9)]
    params = [
        SamplingParams(temperature=0.0, max_tokens=40 + 3 * (i % 3), n=1 + i % 2) for i in range(9)
    ]
    alone = make_engine(tiny=tiny_model)
    expected = [
        alone.complete(alone.prepare(p, q, namespace=NS)).choices
        for p, q in zip(prompts, params, strict=True)
    ]
    engine = make_engine(tiny=tiny_model, kv_pool_bytes=10 * 16 * 512)
    scheduler = Scheduler(engine, max_batch=4, step_tokens=32)
    events: list[list[Event | BaseException]] = [[] for _ in prompts]
    for i, (prompt, q) in enumerate(zip(prompts, params, strict=True)):
        request = engine.prepare(prompt, q, namespace=NS)
        scheduler.add(request, lambda item, i=i: events[i].append(item) or True)  # type: ignore[misc]
    while scheduler.busy:
        scheduler.step()
    got = [e[-1].completion.choices if isinstance(e[-1], Finished) else e[-1] for e in events]
    assert got == expected
    assert engine.pool is not None and engine.pool.stats.preemptions >= 1
    assert engine.pool.stats.used == engine.pool.stats.cached
    engine.flush_prefix_cache()
    assert engine.pool.stats.used == 0


def _preempting_scheduler(engine: Engine) -> tuple[Scheduler, list[list[Event | BaseException]]]:
    """Three 24-token prompts in a 7-page pool, stepped until one of them is preempted."""
    scheduler = Scheduler(engine, max_batch=3, step_tokens=64)
    events: list[list[Event | BaseException]] = [[], [], []]
    for i in range(3):
        request = engine.prepare(list(range(100 + 7 * i, 124 + 7 * i)), GREEDY, namespace=NS)
        scheduler.add(request, lambda item, i=i: events[i].append(item) or True)  # type: ignore[misc]
    assert engine.pool is not None
    before = engine.pool.preemptions
    while engine.pool.preemptions == before:
        scheduler.step()
    return scheduler, events


def test_a_preempted_request_can_be_cancelled_or_failed_while_it_waits(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    engine = make_engine(tiny=tiny_model, kv_pool_bytes=7 * 16 * 512)
    assert engine.pool is not None
    scheduler, events = _preempting_scheduler(engine)
    (waiting,) = scheduler.waiting
    waiting.request.cancel.set()  # the client left while its request waited to resume
    assert waiting.piece is not None
    left = waiting.piece.cache
    fed = []
    forward = engine.forward_batch
    engine.forward_batch = lambda pieces: fed.extend(p.cache for p in pieces) or forward(pieces)  # type: ignore[method-assign]
    while scheduler.busy:
        scheduler.step()
    assert fed and left not in fed  # finished "cancelled" without feeding its tokens again
    finished = [e[-1] for e in events]
    assert all(isinstance(f, Finished) for f in finished)
    reasons = [f.completion.choices[0].finish_reason for f in finished if isinstance(f, Finished)]
    assert reasons.count("cancelled") == 1 and reasons.count("length") == 2

    engine.flush_prefix_cache()
    scheduler, events = _preempting_scheduler(engine)
    (waiting,) = scheduler.waiting
    index = (waiting.request.prompt_tokens[0] - 100) // 7  # which of the three it is
    scheduler.fail_waiting(RuntimeError("shutting down"))
    assert isinstance(events[index][-1], RuntimeError)
    while scheduler.busy:
        scheduler.step()
    assert engine.pool.stats.used == engine.pool.stats.cached


def test_requests_failed_while_they_wait_are_all_answered_when_a_cleanup_fails(
    make_engine: MakeEngine, tiny_model: Any
) -> None:
    """``fail_waiting`` (a shutdown, a failed step's ``fail_all``) closes a preempted request's
    coroutine before answering it; that cleanup failing (its cache's release) raised out of
    it: neither that request nor those queued behind it were answered, and on the engine's
    thread (a failed step's path) it killed the thread, every caller waiting for ever. As
    ``_fail`` does, the failure is logged and every request answered."""
    engine = make_engine(tiny=tiny_model, kv_pool_bytes=7 * 16 * 512)
    assert engine.pool is not None
    scheduler, events = _preempting_scheduler(engine)
    (preempted,) = scheduler.waiting
    index = (preempted.request.prompt_tokens[0] - 100) // 7  # which of the three it is
    behind: list[Event | BaseException] = []
    queued = engine.prepare(list(range(400, 420)), GREEDY, namespace=NS)
    scheduler.add(queued, lambda item: behind.append(item) or True)  # type: ignore[func-returns-value]
    assert preempted.piece is not None

    def broken_release() -> None:
        raise RuntimeError("cleanup failed")

    preempted.piece.cache.release = broken_release  # type: ignore[method-assign]
    scheduler.fail_waiting(RuntimeError("shutting down"))
    assert [str(e[-1]) for e in (events[index], behind)] == ["shutting down"] * 2
    while scheduler.busy:
        scheduler.step()
    assert engine.pool.stats.used == engine.pool.stats.cached
