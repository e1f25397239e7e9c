"""Quantised KV (``kv_dtype``) and attention sinks (``context_overflow: sinks``), bundled model.

    python -m bench.kv              # bench/results/kv.json + docs/benchmarks.md section
    python -m bench.kv --quick      # 60 prompts, a short text (a smoke run)

* **Quality of paged KV** in each ``kv_dtype``, over ``--prompts`` chat prompts (a shared
  system prompt + a question from ``bench/data/contrast_heldout.jsonl``): the float32 engine
  answers greedily (``--answer`` tokens); an engine whose pool pages are in that dtype
  prefills the prompt (its KV goes to the radix tree, which owns the pages: the system turn
  and the question end up in separate nodes); then a request maps the tree's pages (a prefix
  hit) and the last prompt token and the answer are fed on top (teacher forcing), their own
  KV going into pages of that dtype too, attention dequantising at every step; compared with
  a cold float32 forward of the same tokens: **greedy-token agreement** (argmax equal, every
  position) and **logit drift** (max and mean |Δ|). float32 pages are the control (exact).
* **Prefix hit rate at a fixed byte budget**, multi-tenant, through the paged pool:
  ``--tenants`` tenants with a system prompt of 256–768 tokens each, Zipf(1.1) popularity,
  a new 32-token question per request (and a 16-token answer cached after it). An engine per
  dtype whose pool *and* tree get the budget (``kv_pool_bytes`` = ``prefix_cache_bytes``):
  each request maps its hit's pages, writes the rest (zero K/V: hit rates depend on bytes
  only, so no forward pass is run for this part), inserts into the tree and releases; the
  pool reclaims cached pages leaf-first when it needs room, as the engine's does.
  **Tokens per byte**: tokens the tree holds per byte of the pool's pages they use.
* **Dequantising inside attention**: one decode step at 1k tokens of history with pages in
  each dtype (every step gathers and dequantises the whole history).
* **Attention sinks** past a small window (``max_context`` ``--window``) on a long English
  text (``docs/architecture.md``): perplexity of the tokens past the window with sinks +
  context shift over float32 pages and over int8 pages (the engine's paged caches, the
  shift reading the window out and writing the kept tokens into fresh pages), with the same
  shift but no sinks, with a fresh sliding window recomputed
  for every block of 64 tokens (strided, the usual window baseline), and full attention
  over the whole text (the model's own 8k window: the reference); and below the window,
  sinks vs ``error`` (identical by construction: no shift runs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import torch

from bench.report import ROOT, command, median, publish, run_header, table
from localmodel import Engine, EngineConfig, SamplingParams
from localmodel.forward import decode_one_token, prefill
from localmodel.kv import RequestCache
from localmodel.pages import PagedCache, PagePool
from localmodel.sinks import ContextShift
from prefix import RadixKey

CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cachegate"
SYSTEM = (
    "You are the support assistant of a bank, a clinic and a travel agency. Answer the "
    "customer's question in one or two short sentences, and say when you do not know. "
) * 3
DTYPES = ("bfloat16", "float16", "int8")
ALL_DTYPES = ("float32", *DTYPES)
TARGET_AGREEMENT, TARGET_TOKENS_PER_BYTE = 0.99, 3.5


# ── quality of paged KV ──────────────────────────────────────────────────────────────


def _engine_in(engine: Engine, dtype: str, n_bytes: int, **config: Any) -> Engine:
    """An engine on ``engine``'s model whose pool pages (and tree) are ``dtype``."""
    cfg = EngineConfig(data_dir=CACHE_DIR, device="cpu", kv_dtype=dtype, prefix_cache_bytes=n_bytes,
                       **config)  # fmt: skip
    return Engine(engine.model, engine.tokenizer, cfg)


def measure_quality(engine: Engine, n_prompts: int, n_answer: int) -> dict[str, Any]:
    model = engine.model
    stores = {dtype: _engine_in(engine, dtype, 2**30) for dtype in ALL_DTYPES}
    greedy = SamplingParams(temperature=0.0, max_tokens=n_answer)
    one = SamplingParams(temperature=0.0, max_tokens=1)
    drift = {d: Drift() for d in ALL_DTYPES}
    positions = 0
    for question in _questions(n_prompts):
        prompt, fed, cold = teacher_forced(engine, question, greedy)
        positions += len(fed)
        for dtype, store in stores.items():
            store.complete(store.prepare(prompt, one, namespace="q"))  # the tree keeps its pages
            assert store.pool is not None
            match = store.prefix_cache.match(RadixKey("q", prompt))
            assert match.n_cached == len(prompt) - 1
            cache = PagedCache(store.pool, len(prompt) + len(fed))
            cache.map_prefix(match.spans, match.n_cached, prompt)  # the tree's pages, shared
            del match
            drift[dtype].add(_forward_all(model, cache, fed), cold)  # [n, vocab] each
            cache.release()
    return {
        "prompts": n_prompts,
        "positions": positions,
        "rows": [{"kv_dtype": d, **drift[d].figures()} for d in ALL_DTYPES],
    }


class Drift:
    """Greedy-token agreement and logit drift of logits against reference ones, position by
    position: ``add(got, want)`` with ``[n, vocab]`` each, then ``figures()``."""

    def __init__(self) -> None:
        self.agree = self.positions = 0
        self.max = self.sum_of_max = 0.0

    def add(self, got: torch.Tensor, want: torch.Tensor) -> None:
        self.agree += int((got.argmax(-1) == want.argmax(-1)).sum())
        self.positions += got.shape[0]
        delta = (got - want).abs()
        self.max = max(self.max, float(delta.max()))
        self.sum_of_max += float(delta.max(-1).values.sum())

    def figures(self) -> dict[str, float]:
        return {"agreement": self.agree / self.positions, "drift_max": self.max,
                "drift_mean_of_max": self.sum_of_max / self.positions}  # fmt: skip


# ── hit rate at a fixed budget ───────────────────────────────────────────────────────


def measure_hit_rate(
    engine: Engine, budgets_mib: tuple[int, ...], tenants: int, requests: int
) -> list[dict[str, Any]]:
    rng = random.Random(0)
    systems = [rng.randrange(256, 769) for _ in range(tenants)]
    weights = [1 / (i + 1) ** 1.1 for i in range(tenants)]
    picks = rng.choices(range(tenants), weights, k=requests)
    layout = engine.layout
    zeros = torch.zeros((max(systems) + 48, 2, layout.n_layers, layout.n_kv_heads, layout.head_dim))
    rows = []
    for budget in budgets_mib:
        for dtype in ALL_DTYPES:
            paged = _engine_in(engine, dtype, budget * 2**20, kv_pool_bytes=budget * 2**20)
            pool, tree = paged.pool, paged.prefix_cache
            assert pool is not None
            hit = total = 0
            for i, tenant in enumerate(picks):
                system = [1000 + tenant * 1000 + t for t in range(systems[tenant])]
                prompt = system + [50_000 + i * 48 + t for t in range(32)]
                key = RadixKey(f"t{tenant}", prompt)
                match = tree.match(key)
                hit, total = hit + match.n_cached, total + len(prompt)
                stored = prompt + [50_032 + i * 48 + t for t in range(16)]
                cache = PagedCache(pool, len(stored), key.namespace)
                cache.map_prefix(match.spans, match.n_cached, prompt)
                del match
                cache.load_rows(
                    zeros[: len(stored) - cache.length], cache.length
                )  # [n, 2, L, H, D]
                tree.insert(RadixKey(key.namespace, stored), cache.view(len(stored)))
                cache.release()
            stats, pages = tree.stats, pool.stats
            rows.append({
                "budget_mib": budget, "kv_dtype": dtype, "hit_rate": hit / total,
                "tokens": stats.tokens, "pool_pages": pages.pages, "used_pages": pages.used,
                "page_bytes": pages.page_bytes,
                "tokens_per_mib": stats.tokens / (pages.used * pages.page_bytes / 2**20),
                "bytes_per_token": stats.bytes / max(stats.tokens, 1),
            })  # fmt: skip
    return rows


# ── dequantising inside attention ────────────────────────────────────────────────────


def measure_step(engine: Engine, n: int, repeats: int) -> list[dict[str, Any]]:
    """One decode step at ``n`` tokens of history, with pages in each dtype (median)."""
    tokens = torch.randint(1000, 40_000, (1, n), generator=torch.Generator().manual_seed(1))
    rows = []
    for dtype in ALL_DTYPES:
        paged = _engine_in(engine, dtype, 0, kv_pool_bytes=(n + 64) * engine.layout.bytes_per_token)
        assert paged.pool is not None
        cache = PagedCache(paged.pool, n + 1)
        prefill(engine.model, cache, tokens, start=0)
        times = []
        for _ in range(repeats):
            cache.truncate(n)
            started = time.perf_counter()
            decode_one_token(engine.model, cache, 1234, n)
            times.append(time.perf_counter() - started)
        cache.release()
        rows.append({"kv_dtype": dtype, "tokens": n, "decode_step_s": median(times)})
    return rows


# ── attention sinks ──────────────────────────────────────────────────────────────────


def measure_sinks(engine: Engine, n_tokens: int, window: int, sinks: int) -> dict[str, Any]:
    model = engine.model
    text = (ROOT / "docs" / "architecture.md").read_text()
    tokens = engine.tokenizer(text)["input_ids"][:n_tokens]
    n_tokens = len(tokens)
    shift = ContextShift.of(model, sinks)
    no_sinks = ContextShift(shift.inv_freq, 0)
    with torch.inference_mode():
        full = model(torch.tensor([tokens])).logits[0]  # [n, vocab]: the model's own window
    # NOTE: the engine's caches: pages of a pool (float32 = kv_dtype auto on a CPU, and int8)
    # (room for two windows: a shift writes the kept tokens into fresh pages, then frees)
    pools = {d: PagePool(engine.layout, 2 * -(-window // 16) + 2, 16, getattr(torch, d))
             for d in ("float32", "int8")}  # fmt: skip
    runs = {
        "full attention (reference)": full,
        f"sinks ({sinks}) + shift, float32 pages": _stream(
            model, pools["float32"], tokens, window, shift
        ),
        f"sinks ({sinks}) + shift, int8 pages": _stream(
            model, pools["int8"], tokens, window, shift
        ),
        "shift, no sinks (float32 pages)": _stream(
            model, pools["float32"], tokens, window, no_sinks
        ),
        "sliding window, recomputed": _strided(model, tokens, window, stride=64),
    }
    rows = [
        {
            "method": name,
            "ppl_past_window": _ppl(logits, tokens, window, n_tokens),
            "ppl_below_window": _ppl(logits, tokens, 1, window),
        }
        for name, logits in runs.items()
    ]
    below = _stream(model, pools["float32"], tokens[:window], window, shift)
    return {
        "tokens": n_tokens,
        "window": window,
        "sinks": sinks,
        "rows": rows,
        "below_window_max_abs_diff": float((below - full[:window]).abs().max()),
    }


def _stream(
    model: Any, pool: PagePool, tokens: list[int], window: int, shift: ContextShift
) -> torch.Tensor:
    """Feed ``tokens`` 32 at a time through a ``window``-token paged cache that shifts when
    full (``ContextShift.shift`` over pages, as the engine's requests do)."""
    cache = PagedCache(pool, window)
    out = []
    for start in range(0, len(tokens), 32):
        chunk = tokens[start : start + 32]
        while cache.capacity - cache.length < len(chunk):
            shift.shift(cache)
        cache.reserve(len(chunk))
        out.append(_forward_all(model, cache, chunk))
        cache.note_fed(chunk)
    cache.release()
    return torch.cat(out)


def _strided(model: Any, tokens: list[int], window: int, stride: int) -> torch.Tensor:
    """Each block of ``stride`` tokens predicted with the ``window - stride`` tokens before it."""
    out = []
    for start in range(0, len(tokens), stride):
        lo = max(0, start + stride - window)
        ids = tokens[lo : start + stride]
        with torch.inference_mode():
            logits = model(torch.tensor([ids])).logits[0]
        out.append(logits[start - lo :])
    return torch.cat(out)


def _ppl(logits: torch.Tensor, tokens: list[int], start: int, stop: int) -> float:
    """Perplexity of tokens ``[start, stop)`` given the logits at the positions before them."""
    target = torch.tensor(tokens[start:stop])
    nll = torch.nn.functional.cross_entropy(logits[start - 1 : stop - 1].float(), target)
    return math.exp(float(nll))


def teacher_forced(
    engine: Engine, question: str, greedy: SamplingParams
) -> tuple[list[int], list[int], torch.Tensor]:
    """A chat prompt, the tokens to feed after its last-but-one (its last token, then the
    float32 engine's greedy answer) and the float32 logits at each fed token ``[n, vocab]``."""
    prompt = engine.encode_chat(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    )
    answer = engine.complete(engine.prepare(prompt, greedy, namespace="ref"))
    fed = [prompt[-1], *answer.choices[0].token_ids[:-1]]  # teacher forcing
    with torch.inference_mode():
        cold = engine.model(torch.tensor([prompt[:-1] + fed])).logits[0, -len(fed) :]
    return prompt, fed, cold


def _forward_all(model: Any, cache: RequestCache | PagedCache, tokens: list[int]) -> torch.Tensor:
    start = cache.length
    with torch.inference_mode():
        out = model(
            input_ids=torch.tensor([tokens]),
            position_ids=torch.arange(start, start + len(tokens))[None],
            cache=cache,
            use_cache=True,
        )
    return out.logits[0]  # [n, vocab]


def _questions(n: int) -> list[str]:
    seen: dict[str, None] = {}
    with (ROOT / "bench" / "data" / "contrast_heldout.jsonl").open() as f:
        for line in f:
            seen.setdefault(json.loads(line)["a"], None)
    questions = list(seen)
    random.Random(0).shuffle(questions)
    return questions[:n]


# ── report ───────────────────────────────────────────────────────────────────────────


def run(
    engine: Engine, *, prompts: int, answer: int, text_tokens: int, window: int
) -> dict[str, Any]:
    header = run_header()
    started = time.perf_counter()
    results: dict[str, Any] = {**header}
    results["quality"] = measure_quality(engine, prompts, answer)
    results["hit_rate"] = measure_hit_rate(engine, (64, 256), tenants=32, requests=1500)
    results["step"] = measure_step(engine, 1024, repeats=7)
    results["sinks"] = measure_sinks(engine, text_tokens, window, sinks=4)
    results["loadavg_end"] = os.getloadavg()
    results["seconds"] = time.perf_counter() - started
    return results


def markdown(results: dict[str, Any], command: str) -> str:
    q, hr, steps, sk = results["quality"], results["hit_rate"], results["step"], results["sinks"]
    fp32 = {r["budget_mib"]: r for r in hr if r["kv_dtype"] == "float32"}
    quality_rows = [
        [r["kv_dtype"], f"**{r['agreement']:.2%}**", f"{r['drift_max']:.3f}",
         f"{r['drift_mean_of_max']:.4f}"]
        for r in q["rows"]
    ]  # fmt: skip
    hit_rows = [
        [f"{r['budget_mib']} MiB", r["kv_dtype"], f"**{r['hit_rate']:.1%}**",
         f"{r['hit_rate'] / max(fp32[r['budget_mib']]['hit_rate'], 1e-9):.2f}×", r["tokens"],
         f"{r['tokens'] / fp32[r['budget_mib']]['tokens']:.2f}×",
         f"{r['used_pages']} / {r['pool_pages']}", f"{r['bytes_per_token']:.0f}",
         f"{fp32[r['budget_mib']]['bytes_per_token'] / r['bytes_per_token']:.2f}×",
         f"{r['tokens_per_mib'] / fp32[r['budget_mib']]['tokens_per_mib']:.2f}×"]
        for r in hr
    ]  # fmt: skip
    step32 = next(r for r in steps if r["kv_dtype"] == "float32")["decode_step_s"]
    step_rows = [
        [r["kv_dtype"], f"{r['decode_step_s'] * 1e3:.1f}", f"{r['decode_step_s'] / step32:.2f}×"]
        for r in steps
    ]
    sink_rows = [
        [r["method"], f"**{r['ppl_past_window']:.2f}**", f"{r['ppl_below_window']:.2f}"]
        for r in sk["rows"]
    ]
    int8 = next(r for r in q["rows"] if r["kv_dtype"] == "int8")
    int8_rows = [r for r in hr if r["kv_dtype"] == "int8"]
    int8_tpb = min(r["tokens_per_mib"] / fp32[r["budget_mib"]]["tokens_per_mib"] for r in int8_rows)
    int8_format = min(fp32[r["budget_mib"]]["bytes_per_token"] / r["bytes_per_token"]
                      for r in int8_rows)  # fmt: skip
    int8_held = min(r["tokens"] / fp32[r["budget_mib"]]["tokens"] for r in int8_rows)
    format_met = "met" if int8_format >= TARGET_TOKENS_PER_BYTE else "missed"
    load = results["loadavg_start"]
    return f"""## Quantised KV pages and attention sinks (`kv_dtype`, `context_overflow`)

`{command}` — {results["machine"]}; code {results["code"]}; load average at start
{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, at end {results["loadavg_end"][0]:.2f};
{results["seconds"]:.0f} s.

**Paged KV in each `kv_dtype`** vs float32, {q["prompts"]} chat prompts (shared system
prompt + a question), {q["positions"]} positions: the prompt prefilled into pages of that
dtype (the tree keeps them), then a request maps them (a prefix hit) and is fed the last
prompt token and the float32 engine's greedy answer, its own KV going into pages of that
dtype too, attention dequantising at every step; against a cold float32 forward.
Target int8 agreement ≥ {TARGET_AGREEMENT:.0%}: **{"met" if int8["agreement"] >= TARGET_AGREEMENT else "missed"}**.

{table(["kv_dtype (pages)", "greedy-token agreement", "max abs Δ logit", "mean of per-token max Δ"], quality_rows)}

**Prefix hit rate at a fixed byte budget**, through the paged pool: 32 tenants (system
prompts of 256–768 tokens, Zipf 1.1), 1 500 requests of a new 32-token question each; per
dtype an engine whose pool and tree both get the budget, pages reclaimed leaf-first when
the pool needs room. **Tokens per byte**, int8 against float32: **{int8_format:.2f}×** by the
pages' bytes per token (int8 K and V with V's per-token and K's per-page scales, 16-token
pages, against float32 K and V; target ≥ {TARGET_TOKENS_PER_BYTE}×: **{format_met}**), and int8
holds at least {int8_held:.2f}× the tokens at each budget. Per byte of the pages each cache
uses, {int8_tpb:.2f}× at the least: lower, because at one budget the two caches hold different
contents. The larger int8 cache keeps more of the 48-token question branches, whose pages
are partly filled (a branch starts inside its system prompt's last page, copied on write,
and ends inside its own last page): fewer tokens a page.

{table(["budget", "kv_dtype", "hit rate (cached / prompt tokens)", "vs float32", "tokens held", "held vs float32", "pages used / pool", "bytes / token", "tokens per byte vs float32", "tokens per used page byte vs float32"], hit_rows)}

**Dequantised inside attention**: every decode step gathers the whole history from its
pages and dequantises it to float32. One decode step at {steps[0]["tokens"]} tokens of
history (median of 7, one request, SmolLM2):

{table(["kv_dtype (pages)", "decode step ms", "vs float32"], step_rows)}

**Attention sinks** (`context_overflow: sinks`, window {sk["window"]}, {sk["sinks"]} sinks,
a quarter of the window dropped per shift, K re-rotated), on {sk["tokens"]} tokens of
`docs/architecture.md`. Perplexity of the tokens past the window, and of those below it;
below the window no shift runs, so sinks change nothing (the engine's path, fed 32 tokens
at a time, vs one full forward: max |Δ logit| {sk["below_window_max_abs_diff"]:.1e}, float
rounding of the chunking; the tests assert identical tokens to `context_overflow: error`).

{table(["method", f"ppl, tokens {sk['window']}…{sk['tokens']}", f"ppl, tokens 1…{sk['window']}"], sink_rows)}
"""


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--prompts", type=int, default=300)
    parser.add_argument("--answer", type=int, default=8, help="greedy answer tokens per prompt")
    parser.add_argument("--text-tokens", type=int, default=1536)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--quick", action="store_true", help="60 prompts, 768 text tokens")
    parser.add_argument("--data-dir", type=Path, default=CACHE_DIR)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    engine = Engine.load(
        EngineConfig(data_dir=args.data_dir, device="cpu", threads=args.threads,
                     prefix_cache_bytes=2**30)
    )  # fmt: skip
    results = run(
        engine,
        prompts=60 if args.quick else args.prompts,
        answer=args.answer,
        text_tokens=768 if args.quick else args.text_tokens,
        window=args.window,
    )
    return publish("kv", results, markdown(results, command("kv", argv)), not args.no_doc)


if __name__ == "__main__":
    main()
