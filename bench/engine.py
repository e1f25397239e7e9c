"""Continuous batching of the local model: aggregate tokens/s and TTFT vs one request at a time.

    python -m bench.engine            # 1/4/8/16 concurrent streams, bundled model, CPU fp32
    python -m bench.engine --quick    # 1/8 only, fewer tokens

Every figure comes from one run on one process: ``c`` streams are submitted at once to an
``AsyncEngine`` (the scheduler the gateway uses, no HTTP) and decode ``--tokens`` tokens each
from distinct prompts (no prefix reuse); the same ``c`` requests are then run through an engine
with ``max_batch: 1`` (one at a time, as before batching). Single-stream decode is compared
with the weight-read floor: bytes of the weights ÷ the memory bandwidth measured here.

TTFT = submit → first event of the stream. transformers' own continuous batching
(``generate_batch``) runs the same 8 prompts for comparison.

llama.cpp (``bench/llamacpp.py``; optional: ``make llamacpp`` builds llama-cpp-python from
source, ~11–15 min, once) runs the bundled GGUF itself one stream at a time, on the same 8
prompts as an 8-stream engine run, taking turns with it round after round: at the engine's
torch thread count and at the other of 1 and 2. Its decode tokens/s is computed by the same
function as the engine's (:func:`decode_tokens_per_s`). Without llama-cpp-python this part is
skipped, and the section says how to install it.

The ``weights`` settings (``localmodel.weights``: ``unpacked``, ``onednn``, ``auto`` (the
native kernel), ``float16``, ``bfloat16``, ``int8``) are measured side by side in the same run, taking turns round after
round so that the machine's noise falls on all of them: single-stream ms/token, each against
the weight-read floor of its own bytes, single-stream TTFT, and 8-stream decode tokens/s. And
the quality of those that round the weights: over ``--prompts`` chat prompts the float32
engine answers greedily, then the other model prefills the prompt and is fed the same tokens
one decode step at a time (teacher forcing: the path decode takes) and its argmax and logits
are compared with a float32 forward of the same tokens.

The ``kv_dtype`` settings (``float32``, ``bfloat16``, ``int8`` pages) are measured the same way
on the one model: single-stream ms/token and 8-stream decode tokens/s, taking turns. So is the
``threads`` setting: the engine at 1 and 2 torch threads (single stream, 8 streams batched and
one at a time, each against the weight-read floor measured at that many threads). And the
decoder layers as ``localmodel.lean`` runs them against transformers' own (single stream, each
measure followed at once by a read of the memory's speed for its share of the floor; 8-stream
decode).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import torch

from bench import llamacpp
from bench.kv import Drift, _questions, teacher_forced
from bench.prefix import CACHE_DIR, load_engine
from bench.report import command, median, percentile, publish, run_header, table
from localmodel import AsyncEngine, Engine, Finished, SamplingParams, TextDelta
from localmodel.forward import decode_one_token, prefill
from localmodel.kv import RequestCache
from localmodel.lean import original_layers
from localmodel.loader import load
from localmodel.weights import in_use

_T = TypeVar("_T")

PROMPT_TOKENS = 64
#: one stream: TTFT, tokens, decode ms/token, end (seconds from the submit)
_Stream = tuple[float, int, float, float]


def measure(engine: Engine, concurrency: int, n_tokens: int, seed: int) -> dict[str, Any]:
    """``concurrency`` greedy streams at once; aggregate tokens/s, TTFT p50/p99 (seconds)."""
    params = SamplingParams(temperature=0.0, max_tokens=n_tokens)
    requests = [
        engine.prepare(p, params, namespace=f"bench|{seed}|{i}")
        for i, p in enumerate(_prompts(concurrency, seed))
    ]

    gaps: list[float] = []  # between a stream's consecutive pieces of text (its steps)

    async def one(local: AsyncEngine, request: Any, started: float) -> _Stream:
        first = last = 0.0
        async for event in local.stream(request):
            now = time.perf_counter() - started
            first = first or now
            if isinstance(event, TextDelta):
                if last:
                    gaps.append(now - last)
                last = now
            if isinstance(event, Finished):
                c = event.completion
                per_token = c.decode_s / max(c.usage.completion_tokens - 1, 1)
                return first, c.usage.completion_tokens, per_token, now
        raise AssertionError("no Finished event")

    async def run() -> tuple[list[_Stream], float]:
        async with AsyncEngine(engine) as local:
            started = time.perf_counter()
            got = await asyncio.gather(*(one(local, r, started) for r in requests))
            return list(got), time.perf_counter() - started

    results, wall = asyncio.run(run())
    ttfts = [r[0] for r in results]
    tokens = sum(r[1] for r in results)
    return {
        "itl_p50_s": median(gaps),
        "itl_p99_s": percentile(gaps, 99),
        "concurrency": concurrency,
        "max_batch": engine.config.max_batch,
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "decode_tokens_per_s": decode_tokens_per_s([(r[1], r[0], r[3]) for r in results]),
        "ttft_p50_s": median(ttfts),
        "ttft_p99_s": percentile(ttfts, 99),
        "ms_per_token": 1000 * median([r[2] for r in results]),
    }


def decode_tokens_per_s(streams: list[tuple[int, float, float]]) -> float:
    """Tokens after each stream's first over the time at least one stream was past its first.

    ``streams``: ``(tokens, first token at, last token at)``, seconds on one clock. Streams run
    at once (the engine) or one after another (llama.cpp) are counted alike; for one stream it
    is ``(tokens - 1) / (last - first)``.
    """
    decoding = _covered([(first, end) for _, first, end in streams])
    return sum(tokens - 1 for tokens, _, _ in streams) / decoding


def _prompts(count: int, seed: int) -> list[list[int]]:
    """``count`` distinct random prompts of PROMPT_TOKENS tokens (the same for the same seed)."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(100, 40000, (PROMPT_TOKENS,), generator=gen).tolist()
            for _ in range(count)]  # fmt: skip


def read_bandwidth() -> float:
    """Bytes/s this machine reads: the best of 5 reductions over 256 MiB of float32."""
    buf = torch.ones(256 * 2**20 // 4)
    buf.sum()
    return buf.numel() * 4 / min(_timed(buf.sum) for _ in range(5))


def weight_floor(model: Any, bandwidth: float) -> dict[str, float]:
    """Bytes a decode step reads, the read bandwidth, the ms/token floor.

    Every weight once (tied ones once), less the input embedding table (one row is read per
    token) unless the output layer reads it as its weight.
    """
    seen: dict[int, int] = {}
    for p in model.parameters():
        seen[p.data_ptr()] = p.numel() * p.element_size()
    table = model.get_input_embeddings().weight
    output = model.get_output_embeddings()
    if output is None or output.weight is not table:  # (tied: the same Parameter)
        seen.pop(table.data_ptr())
    weight_bytes = sum(seen.values())
    return {"weight_bytes": weight_bytes, "bandwidth_gb_s": bandwidth / 1e9,
            "floor_ms": 1000 * weight_bytes / bandwidth}  # fmt: skip


def variant(engine: Engine, weights: str) -> Engine:
    """The same engine with another ``weights`` setting (the model loaded again)."""
    return Engine.load(replace(engine.config, weights=weights))


def taking_turns(
    engines: dict[str, Engine], streams: int, figures: tuple[str, ...], n_tokens: int, rounds: int
) -> dict[str, dict[str, float]]:
    """Median of each of ``figures`` of ``measure`` at ``streams`` streams per engine, the
    engines taking turns round after round (so that the machine's noise falls on all of them)."""
    got: dict[str, list[dict[str, Any]]] = {name: [] for name in engines}
    for r in range(rounds):
        for name, engine in engines.items():
            got[name].append(measure(engine, streams, n_tokens, seed=100 * streams + r))
    return {name: {f: median([run[f] for run in runs]) for f in figures}
            for name, runs in got.items()}  # fmt: skip


def kv_dtypes(engine: Engine, n_tokens: int) -> dict[str, dict[str, float]]:
    """The pages' dtypes side by side on the same model (``weights`` as loaded): single-stream
    ms/token and 8-stream decode tokens/s, the engines taking turns."""
    engines = {name: Engine(engine.model, engine.tokenizer, replace(engine.config, kv_dtype=name))
               for name in KV_DTYPES}  # fmt: skip
    single = taking_turns(engines, 1, ("ms_per_token",), n_tokens, rounds=3)
    eight = taking_turns(engines, 8, ("decode_tokens_per_s", "ttft_p99_s"), n_tokens, rounds=3)
    return {name: single[name] | eight[name] for name in KV_DTYPES}


def threads_side_by_side(engine: Engine, n_tokens: int, rounds: int) -> dict[int, dict[str, Any]]:
    """The same engine at 1 and 2 torch threads (``threads``: torch's ops and the native
    kernels' calls split over them), taking turns round after round: single-stream ms/token
    and TTFT, 8 streams batched and one at a time, and the weight-read floor at each count
    (the read measured at that many threads). Every measure has seeds of its own (no prefix
    hit). Empty on a 1-CPU host."""
    counts = (1, 2)
    if (os.cpu_count() or 1) < 2:
        return {}
    before = torch.get_num_threads()
    one_at_a_time = Engine(engine.model, engine.tokenizer, replace(engine.config, max_batch=1))
    got: dict[int, dict[str, list[Any]]] = {n: {} for n in counts}
    try:
        for r in range(rounds):
            for n in counts:
                torch.set_num_threads(n)
                seed = 20000 + 1000 * n + 10 * r
                for name, e, streams in (("single", engine, 1), ("batched_8", engine, 8),
                                         ("one_at_a_time_8", one_at_a_time, 8)):  # fmt: skip
                    got[n].setdefault(name, []).append(measure(e, streams, n_tokens, seed))
                    seed += 1
                got[n].setdefault("bandwidth", []).append(_on_a_thread(read_bandwidth))
    finally:
        torch.set_num_threads(before)
    out: dict[int, dict[str, Any]] = {}
    for n, runs in got.items():
        floor = weight_floor(engine.model, median(runs["bandwidth"]))
        batched = median([m["decode_tokens_per_s"] for m in runs["batched_8"]])
        alone = median([m["decode_tokens_per_s"] for m in runs["one_at_a_time_8"]])
        out[n] = {
            "ms_per_token": median([m["ms_per_token"] for m in runs["single"]]),
            "ttft_s": median([m["ttft_p50_s"] for m in runs["single"]]),
            "floor": floor,
            "decode_8": batched,
            "decode_8_one_at_a_time": alone,
            "ratio_8": batched / alone,
            "ttft_p99_8_s": median([m["ttft_p99_s"] for m in runs["batched_8"]]),
        }
    return out


def lean_side_by_side(engine: Engine, n_tokens: int, rounds: int) -> dict[str, dict[str, Any]]:
    """The engine's decoder layers as ``localmodel.lean`` runs them and as transformers does
    (``original_layers``), taking turns round after round: single-stream ms/token and TTFT,
    8-stream decode tokens/s. Each single-stream measure is followed by a read of the
    memory's speed, so its share of the weight-read floor is taken at the same time (the
    machine's read speed moves between minutes: 24–32 GB/s seen on one core here)."""
    got: dict[str, dict[str, list[Any]]] = {name: {} for name in LAYERS}
    for r in range(rounds):
        for name in LAYERS:
            with contextlib.ExitStack() as stack:
                if name == "transformers":
                    stack.enter_context(original_layers(engine.model))
                seed = 30000 + 1000 * LAYERS.index(name) + 10 * r
                single = measure(engine, 1, n_tokens, seed)
                floor = weight_floor(engine.model, _on_a_thread(read_bandwidth))
                eight = measure(engine, 8, n_tokens, seed + 1)
            runs = got[name]
            runs.setdefault("ms_per_token", []).append(single["ms_per_token"])
            runs.setdefault("ttft_s", []).append(single["ttft_p50_s"])
            runs.setdefault("floor_ms", []).append(floor["floor_ms"])
            runs.setdefault("share", []).append(floor["floor_ms"] / single["ms_per_token"])
            runs.setdefault("decode_8", []).append(eight["decode_tokens_per_s"])
    return {name: {f: median(v) for f, v in runs.items()} | {"shares": runs["share"]}
            for name, runs in got.items()}  # fmt: skip


def hf_generate_batch(engine: Engine, streams: int, n_tokens: int) -> dict[str, Any]:
    """transformers' own continuous batching (``generate_batch``, paged attention) on the same
    prompts as :func:`measure` at ``streams`` streams; a fresh copy of the model as loaded."""
    from transformers import GenerationConfig

    model = load(replace(engine.config, weights="unpacked")).model
    prompts = _prompts(streams, seed=streams)  # measure()'s prompts at this level
    # no stop token: n_tokens each, as in measure()
    config = GenerationConfig(
        max_new_tokens=n_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0
    )
    model.generate_batch(inputs=prompts[:1], generation_config=config, max_new_tokens=2)  # warm
    started = time.perf_counter()
    out = model.generate_batch(inputs=prompts, generation_config=config)
    wall = time.perf_counter() - started
    tokens = sum(len(o.generated_tokens) for o in out.values())
    return {"streams": streams, "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall}


def versus_llama_cpp(engine: Engine, n_tokens: int, rounds: int) -> dict[str, Any]:
    """The engine's 8 streams at once vs llama.cpp one stream at a time on the same 8 prompts,
    taking turns round after round; the engine's single stream too (other prompts).

    NOTE: each round has its own seeds, used nowhere else in this run, so that the engine's
    prefix cache never holds a prompt it is given here (its TTFT would be a hit, not a prefill).
    """
    if (why := llamacpp.missing()) is not None:
        return {"skipped": why}
    threads = torch.get_num_threads()
    counts = [threads, *(n for n in (1, 2) if n != threads and n <= (os.cpu_count() or 1))]
    n_ctx = max(256, PROMPT_TOKENS + n_tokens)
    repack = not llamacpp.repacking_crashes()
    runners = {n: _on_a_thread(lambda n=n: llamacpp.LlamaCpp(n, n_ctx, repack)) for n in counts}
    for runner in runners.values():  # warm: the first evaluation allocates and repacks
        _on_a_thread(lambda r=runner: r.greedy(_prompts(1, seed=8999)[0], 4, time.perf_counter()))
    engine_8: list[dict[str, Any]] = []
    engine_1: list[dict[str, Any]] = []
    llama: dict[int, list[list[llamacpp.Timed]]] = {n: [] for n in counts}
    load: list[float] = []
    for r in range(rounds):
        seed = 9000 + r
        load.append(os.getloadavg()[0])
        engine_8.append(measure(engine, 8, n_tokens, seed=seed))
        for n, runner in runners.items():
            clock = time.perf_counter()
            llama[n].append(_on_a_thread(
                lambda r=runner, c=clock, s=seed: [r.greedy(p, n_tokens, c) for p in _prompts(8, s)]
            ))  # fmt: skip
        engine_1.append(measure(engine, 1, n_tokens, seed=seed + 500))
    load.append(os.getloadavg()[0])
    return {
        "version": runners[threads].version,
        "gguf": llamacpp.BUNDLED_GGUF,
        "repacking": repack,
        "n_ctx": n_ctx,
        "rounds": rounds,
        "threads": threads,
        "loadavg_1min": load,
        "engine_8": _round_medians(engine_8),
        "engine_1": _round_medians(engine_1),
        "llama_cpp": {n: _llama_figures(streams) for n, streams in llama.items()},
        "llama_cpp_tokens": [list(t.token_ids) for t in llama[threads][0][:2]],
    }


def _round_medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over rounds of :func:`measure`'s decode tokens/s and TTFT p50."""
    decode = [run["decode_tokens_per_s"] for run in runs]
    return {"decode_tokens_per_s": median(decode), "decode_per_round": decode,
            "ttft_p50_s": median([run["ttft_p50_s"] for run in runs])}  # fmt: skip


def _llama_figures(rounds: list[list[llamacpp.Timed]]) -> dict[str, Any]:
    """Median over rounds of the decode tokens/s (as the engine's); prefill tokens/s and TTFT
    over every stream."""
    streams = [s for one in rounds for s in one]
    decode = [decode_tokens_per_s([(s.tokens, s.first_s, s.end_s) for s in one]) for one in rounds]
    return {
        "decode_tokens_per_s": median(decode),
        "decode_per_round": decode,
        "prefill_tokens_per_s": median([PROMPT_TOKENS / s.ttft_s for s in streams]),
        "ttft_p50_s": median([s.ttft_s for s in streams]),
        "streams": len(streams),
        "tokens_each": sorted({s.tokens for s in streams}),
    }


def weights_quality(engine: Engine, other: Engine, n_prompts: int, n_answer: int) -> dict[str, Any]:
    """Greedy-token agreement and logit drift of another ``weights`` setting on the decode
    (one-row) path, against ``engine``'s float32 answers."""
    greedy = SamplingParams(temperature=0.0, max_tokens=n_answer)
    drift = Drift()
    for question in _questions(n_prompts):
        prompt, fed, cold = teacher_forced(engine, question, greedy)
        cache = RequestCache.allocate(other.layout, len(prompt) + len(fed))
        prefill(other.model, cache, torch.tensor([prompt[:-1]]), 0)
        warm = torch.stack([decode_one_token(other.model, cache, t, cache.length) for t in fed])
        drift.add(warm, cold)
    return {"prompts": n_prompts, "positions": drift.positions, **drift.figures()}


#: The ``weights`` settings measured side by side, and those measured for quality against
#: float32 (the others compute the same arithmetic up to summation order).
WEIGHTS = ("unpacked", "onednn", "auto", "float16", "bfloat16", "int8")
ROUNDED = ("float16", "bfloat16", "int8")
#: the pages' dtypes measured side by side (``float32`` is what ``auto`` means on a CPU)
KV_DTYPES = ("float32", "bfloat16", "int8")
#: The decoder layers side by side: as localmodel.lean runs them, as transformers does.
LAYERS = ("lean", "transformers")


def run(
    engine: Engine,
    levels: tuple[int, ...],
    n_tokens: int,
    prompts: int = 40,
    llama_rounds: int = 3,
) -> dict[str, Any]:
    header = run_header()
    # NOTE: one-time work out of the first measure: each lean layer's check of its one-call
    # decode step runs at the first batched decode step (localmodel.lean)
    measure(engine, 2, 4, seed=999)
    one_at_a_time = Engine(engine.model, engine.tokenizer, replace(engine.config, max_batch=1))
    batched, single_read = [], 0.0
    for c in levels:
        batched.append(measure(engine, c, n_tokens, seed=c))
        if c == 1:  # (the read right after it: the machine's speed moves between minutes)
            single_read = _on_a_thread(read_bandwidth)
    baseline = [measure(one_at_a_time, c, n_tokens, seed=c) for c in levels if c > 1]
    llama_cpp = versus_llama_cpp(engine, n_tokens, llama_rounds)
    engines = {name: engine if name == "auto" else variant(engine, name) for name in WEIGHTS}
    bandwidth = _on_a_thread(read_bandwidth)  # once: the floors differ by their bytes only
    floors = {name: weight_floor(engines[name].model, bandwidth)
              for name in ("unpacked", "float16", "int8")}  # fmt: skip
    # packed weights: the same bytes as their unpacked dtype's
    floors |= {"onednn": floors["unpacked"], "auto": floors["unpacked"],
               "bfloat16": floors["float16"]}  # fmt: skip
    single = taking_turns(engines, 1, ("ms_per_token", "ttft_p50_s"), n_tokens, rounds=3)
    weights = {
        "ms_per_token": {name: f["ms_per_token"] for name, f in single.items()},
        "ttft_s": {name: f["ttft_p50_s"] for name, f in single.items()},
        "decode_8": {name: f["decode_tokens_per_s"] for name, f in taking_turns(
            engines, 8, ("decode_tokens_per_s",), n_tokens, rounds=2).items()},
        "floor": floors,
        "quality": {name: weights_quality(engine, engines[name], prompts, n_tokens)
                    for name in ROUNDED},
    }  # fmt: skip
    return {"header": header, "threads": torch.get_num_threads(), "n_tokens": n_tokens,
            "weights_in_use": in_use(engine.model),
            "step_tokens": engine.config.step_tokens, "batched": batched,
            "one_at_a_time": baseline, "weights": weights,
            "floor": weight_floor(engine.model, single_read or bandwidth),
            "kv_dtypes": kv_dtypes(engine, n_tokens),
            "threads_side": threads_side_by_side(engine, n_tokens, rounds=2),
            "lean": lean_side_by_side(engine, n_tokens, rounds=3),
            "hf_generate_batch": hf_generate_batch(engine, 8, n_tokens),
            "llama_cpp": llama_cpp, "loadavg_end": os.getloadavg()}  # fmt: skip


def markdown(results: dict[str, Any], cmd: str) -> str:
    base = {r["concurrency"]: r for r in results["one_at_a_time"]}
    single = results["batched"][0]
    rows = []
    for r in results["batched"]:
        b = base.get(r["concurrency"])
        rows.append([
            r["concurrency"], f"{r['tokens_per_s']:.1f}",
            f"{b['tokens_per_s']:.1f}" if b else "—",
            f"**{r['tokens_per_s'] / b['tokens_per_s']:.2f}×**" if b else "—",
            f"{r['decode_tokens_per_s']:.1f}",
            f"{b['decode_tokens_per_s']:.1f}" if b else "—",
            f"**{r['decode_tokens_per_s'] / b['decode_tokens_per_s']:.2f}×**" if b else "—",
            f"{1000 * r['ttft_p50_s']:.0f} / {1000 * r['ttft_p99_s']:.0f}",
            f"{1000 * b['ttft_p50_s']:.0f} / {1000 * b['ttft_p99_s']:.0f}" if b else "—",
        ])  # fmt: skip
    floor = results["floor"]
    share = floor["floor_ms"] / single["ms_per_token"]
    load0 = results["header"]["loadavg_start"]
    return "\n".join([
        "## Continuous batching of the local model (`bench/engine.py`)",
        "",
        f"`{cmd}` — {results['header']['machine']}, {results['threads']} torch thread(s), "
        f"bundled SmolLM2-135M fp32 (`weights: auto`: {results['weights_in_use']}), {PROMPT_TOKENS}-token distinct prompts, "
        f"{results['n_tokens']} greedy tokens per stream, step_tokens {results['step_tokens']}. "
        "Batched (`max_batch: 16`) and one at a time (`max_batch: 1`) in the same run. "
        "**The machine is shared with other jobs**: absolute figures move between runs; the "
        f"ratios are side by side. Load average (1/5/15 min) at start {_load(load0)}, at end "
        f"{_load(results['loadavg_end'])}.",
        "",
        "Tokens/s counts every token over the whole run (prefill included); decode tokens/s "
        "counts the tokens after each stream's first over the time at least one stream was "
        "past its first token (the issue's \"aggregate decode throughput\").",
        "",
        table(["streams", "tokens/s batched", "tokens/s one at a time", "ratio",
               "decode tokens/s batched", "decode tokens/s one at a time", "decode ratio",
               "TTFT p50 / p99 ms batched", "TTFT p50 / p99 ms one at a time"], rows),
        "",
        *_itl_markdown(results),
        "",
        f"Single stream: {single['ms_per_token']:.1f} ms/token; weight-read floor "
        f"{floor['floor_ms']:.1f} ms ({floor['weight_bytes'] / 1e6:.0f} MB of weights at "
        f"{floor['bandwidth_gb_s']:.1f} GB/s, read right after it): **{100 * share:.0f}% of the "
        "floor**.",
        "",
        *_llama_markdown(results),
        "",
        *_hf_markdown(results),
        "",
        *_weights_markdown(results["weights"], results["llama_cpp"]),
        "",
        *_kv_markdown(results["kv_dtypes"]),
        "",
        *_threads_markdown(results.get("threads_side", {})),
        "",
        *_lean_markdown(results.get("lean", {})),
    ])  # fmt: skip


def _itl_markdown(results: dict[str, Any]) -> list[str]:
    """Inter-token latency, and the decode throughput it gives when every stream decodes."""
    base = {r["concurrency"]: r for r in results["one_at_a_time"]}
    single = results["batched"][0]["itl_p50_s"]
    rows = []
    for r in results["batched"]:
        b, c, itl = base.get(r["concurrency"]), r["concurrency"], r["itl_p50_s"]
        rows.append([
            c, f"{1000 * itl:.1f} / {1000 * r['itl_p99_s']:.1f}",
            f"{1000 * b['itl_p50_s']:.1f} / {1000 * b['itl_p99_s']:.1f}" if b else "—",
            f"{c / itl:.1f}", f"**{c * single / itl:.2f}×**",
        ])  # fmt: skip
    return [
        "Inter-token latency (ITL: the time between a stream's consecutive tokens as its client "
        "receives them) and what it gives at steady state, every stream decoding: streams / ITL "
        "p50, against one stream alone (1 / its ITL p50). The decode ratio above also counts, "
        "inside its window, the steps where the prompts of streams that came later are "
        "prefilled (256 tokens a step), which a short generation does not amortise; this one "
        "does not.",
        "",
        table(["streams", "ITL p50 / p99 ms batched", "ITL p50 / p99 ms one at a time",
               "steady decode tokens/s batched", "ratio to one stream"], rows),
    ]  # fmt: skip


def _threads_markdown(side: dict[int, dict[str, Any]]) -> list[str]:
    """The ``threads`` table: the same engine at 1 and 2 threads, taking turns."""
    if not side:
        return []
    rows = []
    for n, f in sorted(side.items()):
        floor = f["floor"]
        rows.append([
            n, f"{f['ms_per_token']:.1f}",
            f"{floor['floor_ms']:.1f} ({floor['bandwidth_gb_s']:.1f} GB/s)",
            f"{100 * floor['floor_ms'] / f['ms_per_token']:.0f}%", f"{1000 * f['ttft_s']:.0f}",
            f"{f['decode_8']:.1f}", f"{f['decode_8_one_at_a_time']:.1f}",
            f"**{f['ratio_8']:.2f}×**", f"{1000 * f['ttft_p99_8_s']:.0f}",
        ])  # fmt: skip
    one, two = side[1], side[2]
    return [
        "### `threads` side by side (same run, taking turns)",
        "",
        "The same engine at 1 and 2 torch threads (torch's ops, and each call of the native "
        "kernels split over them), 2 rounds, medians; every measure on prompts of its own (no "
        "prefix hit). The floor is the weights' bytes over the read speed measured at that "
        "many threads. The 8-stream ratio is batched against one at a time at the same "
        "thread count.",
        "",
        table(
            [
                "threads",
                "single-stream ms/token",
                "floor ms (read)",
                "of the floor",
                "TTFT p50 ms, one stream",
                "decode tokens/s, 8 streams",
                "one at a time",
                "ratio",
                "TTFT p99 ms, 8 streams",
            ],
            rows,
        ),
        "",
        f"2 threads against 1: single stream **{one['ms_per_token'] / two['ms_per_token']:.2f}×**, "
        f"TTFT **{one['ttft_s'] / two['ttft_s']:.2f}×**, 8-stream decode "
        f"**{two['decode_8'] / one['decode_8']:.2f}×**.",
    ]


def _lean_markdown(lean: dict[str, dict[str, Any]]) -> list[str]:
    """The decoder-layers table: ``localmodel.lean`` against transformers' layers."""
    if not lean:
        return []
    rows = [[f"`{name}`", f"{f['ms_per_token']:.1f}", f"{f['floor_ms']:.1f}",
             f"**{100 * f['share']:.0f}%**", " / ".join(f"{100 * x:.0f}%" for x in f["shares"]),
             f"{1000 * f['ttft_s']:.0f}", f"{f['decode_8']:.1f}"]
            for name, f in lean.items()]  # fmt: skip
    ours, theirs = lean["lean"], lean["transformers"]
    return [
        "### Decoder layers: `localmodel.lean` against transformers' (same run, taking turns)",
        "",
        "The same engine with its decoder layers as `localmodel.lean` runs them (the default "
        "where they compute the same: q/k/v and gate/up as one product each, RMSNorm with its "
        "residual add and RoPE in C) and as transformers does, 3 rounds, medians. Each "
        "single-stream measure is followed at once by a read of the memory's speed: the "
        "floor is the weights' bytes at that speed, the share is taken round by round.",
        "",
        table(["layers", "single-stream ms/token", "floor ms (read after it)", "of the floor",
               "per round", "TTFT p50 ms, one stream", "decode tokens/s, 8 streams"], rows),
        "",
        f"`lean` against transformers' layers: single stream "
        f"**{theirs['ms_per_token'] / ours['ms_per_token']:.2f}×**, TTFT "
        f"**{theirs['ttft_s'] / ours['ttft_s']:.2f}×**, 8-stream decode "
        f"**{ours['decode_8'] / theirs['decode_8']:.2f}×**.",
    ]  # fmt: skip


def _kv_markdown(kv: dict[str, dict[str, float]]) -> list[str]:
    """The ``kv_dtype`` table: what reading and writing each kind of page costs a step."""
    base = kv["float32"]
    rows = [[f"`{name}`", f"{f['ms_per_token']:.1f}",
             f"{base['ms_per_token'] / f['ms_per_token']:.2f}×", f"{f['decode_tokens_per_s']:.1f}",
             f"**{f['decode_tokens_per_s'] / base['decode_tokens_per_s']:.2f}×**",
             f"{1000 * f['ttft_p99_s']:.0f}"]
            for name, f in kv.items()]  # fmt: skip
    return [
        "### `kv_dtype` side by side (same run, taking turns)",
        "",
        "The same model (`weights: auto`) with its KV pages in each dtype: every step writes "
        "the new tokens' K/V into the pages and reads each sequence's history back (int8: "
        "quantised on the way in, de-quantised on the way out, K's partly filled last page "
        "from its full-precision tail). Medians of 3 rounds; 8 streams in one batched step.",
        "",
        table(["kv_dtype", "single-stream ms/token", "speed vs float32", "decode tokens/s, "
               "8 streams", "vs float32", "TTFT p99 ms, 8 streams"], rows),
    ]  # fmt: skip


def _llama_markdown(results: dict[str, Any]) -> list[str]:
    side = results["llama_cpp"]
    if "skipped" in side:
        return [
            "### llama.cpp side by side",
            "",
            f"Not measured: llama.cpp was skipped ({side['skipped']}). Install it with "
            f"{llamacpp.INSTALL} and rerun `python -m bench.engine`.",
        ]
    e8, e1, threads = side["engine_8"], side["engine_1"], side["threads"]
    rows = [
        [f"llama.cpp {side['version']}, one stream at a time", n,
         f"{f['decode_tokens_per_s']:.1f}", _per_round(f), f"{f['prefill_tokens_per_s']:.0f}",
         f"{1000 * f['ttft_p50_s']:.0f}"]
        for n, f in side["llama_cpp"].items()
    ] + [
        ["engine, 8 streams at once (aggregate)", threads, f"**{e8['decode_tokens_per_s']:.1f}**",
         _per_round(e8), "—", f"{1000 * e8['ttft_p50_s']:.0f}"],
        ["engine, one stream", threads, f"{e1['decode_tokens_per_s']:.1f}", _per_round(e1), "—",
         f"{1000 * e1['ttft_p50_s']:.0f}"],
    ]  # fmt: skip
    llama = side["llama_cpp"][threads]["decode_tokens_per_s"]
    ratio = e8["decode_tokens_per_s"] / llama
    verdict = "**met**" if ratio >= 1 else "**not met**"
    load = ", ".join(f"{x:.2f}" for x in side["loadavg_1min"])
    return [
        "### llama.cpp side by side",
        "",
        f"llama-cpp-python {side['version']} (built from source here) on the GGUF the engine "
        f"converts, `{side['gguf']}` as shipped (llama.cpp computes on its 4-bit weights; the "
        f"engine on their float32 de-quantisation), n_ctx {side['n_ctx']}. Each of "
        f"{side['rounds']} rounds runs 8 fresh {PROMPT_TOKENS}-token prompts through the engine "
        "at once, then the same 8 prompts through llama.cpp one at a time at each thread "
        f"count, then one other prompt through the engine alone; {results['n_tokens']} greedy "
        "tokens per stream everywhere (llama.cpp: the argmax of the logits, end-of-sequence "
        "ignored, exactly that many tokens). Decode tokens/s is the same function for both "
        "(tokens after each stream's first over the time a stream was past its first token); "
        f"medians over the rounds. 1-min load average at each round's start and at the end: {load}."
        + ("" if side.get("repacking", True) else _NO_REPACKING),
        "",
        table(_LLAMA_COLUMNS, rows),
        "",
        f"Issue 13's target, the engine's 8-stream aggregate decode ≥ llama.cpp's single-stream "
        f"decode on the same GGUF, at {threads} thread(s) each: "
        f"{e8['decode_tokens_per_s']:.1f} vs {llama:.1f} tokens/s, **{ratio:.2f}×**: {verdict}.",
    ]


_NO_REPACKING = (
    " **llama.cpp ran without weight repacking** (`use_extra_bufts` off): with it, this build "
    "crashed at its first evaluation here (SIGSEGV in `llama_decode` after repacking the "
    "weights for its AMX backend: ggml-org/llama.cpp#20824), so it computed with ggml's plain "
    "CPU kernels, as on a CPU without AMX. Where repacking worked it was faster: compare with "
    "earlier runs before reading the ratio below."
)

_LLAMA_COLUMNS = [
    "what",
    "threads",
    "decode tokens/s",
    "per round",
    "prefill tokens/s",
    "TTFT p50 ms",
]


def _per_round(figures: dict[str, Any]) -> str:
    return " / ".join(f"{x:.1f}" for x in figures["decode_per_round"])


def _load(load: list[float] | tuple[float, ...]) -> str:
    return "/".join(f"{x:.2f}" for x in load)


def _hf_markdown(results: dict[str, Any]) -> list[str]:
    hf = results["hf_generate_batch"]
    ours = next(r for r in results["batched"] if r["concurrency"] == hf["streams"])
    return [
        f"transformers' own continuous batching (`generate_batch`, its paged attention), the "
        f"same {hf['streams']} prompts and {results['n_tokens']} greedy tokens each, the model "
        f"as loaded: {hf['tokens_per_s']:.1f} tokens/s over the whole run ({hf['wall_s']:.1f} "
        f"s) against the engine's {ours['tokens_per_s']:.1f} "
        f"(**{ours['tokens_per_s'] / hf['tokens_per_s']:.1f}×**).",
    ]


def _weights_markdown(weights: dict[str, Any], llama: dict[str, Any]) -> list[str]:
    ms, d8, floors, quality = (weights[k] for k in ("ms_per_token", "decode_8", "floor", "quality"))
    rows = [[f"`{name}`", f"{ms[name]:.1f}", f"{floors[name]['weight_bytes'] / 1e6:.0f} MB",
             f"{floors[name]['floor_ms']:.1f}", f"{100 * floors[name]['floor_ms'] / ms[name]:.0f}%",
             f"{1000 * weights['ttft_s'][name]:.0f}", f"{d8[name]:.1f}"]
            for name in WEIGHTS]  # fmt: skip
    speed = ", ".join(f"`{n}` **{ms['unpacked'] / ms[n]:.2f}×**" for n in WEIGHTS[1:])
    speed8 = ", ".join(f"`{n}` **{d8[n] / d8['unpacked']:.2f}×**" for n in WEIGHTS[1:])
    lines = [
        "### `weights` settings side by side (same run, taking turns)",
        "",
        "`unpacked`: the float32 weights as loaded (MKL); `onednn`: the same weights "
        "prepacked for oneDNN; `auto` (the default), here `native`: the "
        "same weights repacked in tiles of 16 output features for cachegate's own kernel "
        "(`localmodel/linear.c`, built at load); `float16`: weights stored in float16; `bfloat16`: "
        "weights and activations in bfloat16 on oneDNN (prepacked); `int8`: weight-only int8 "
        "with a scale per output feature (torch's int8 kernel up to 16 rows, a widened "
        "bfloat16 product above). TTFT: one stream, a 64-token prompt (its prefill).",
        "",
        table(["weights", "single-stream ms/token", "read per token", "floor ms",
               "share of the floor", "TTFT ms", "decode tokens/s, 8 streams"], rows),
        "",
        f"Against `unpacked`, single stream: {speed}; 8 streams: {speed8}.",
        "",
        "Quality on the decode path against float32 (greedy answers of the float32 engine fed "
        "back token by token, teacher forcing):",
        "",
        table(["weights", "prompts", "tokens", "greedy-token agreement", "max \\|Δ logit\\|",
               "mean of per-token max \\|Δ logit\\|"],
              [[f"`{name}`", q["prompts"], q["positions"], f"**{q['agreement']:.2%}**",
                f"{q['drift_max']:.3f}", f"{q['drift_mean_of_max']:.3f}"]
               for name, q in quality.items()]),
    ]  # fmt: skip
    if "skipped" not in llama:
        best = max(("auto", "bfloat16", "int8"), key=lambda n: d8[n])
        one = llama["llama_cpp"][llama["threads"]]["decode_tokens_per_s"]
        lines += [
            "",
            f"The 8-stream decode of `weights: {best}` (above) against llama.cpp's single "
            f"stream earlier in this run at {llama['threads']} thread(s): {d8[best]:.1f} vs "
            f"{one:.1f} tokens/s, **{d8[best] / one:.2f}×** (not taking turns with it).",
        ]
    return lines


def main(argv: list[str] | None = None) -> str:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 and 8 streams, 16 tokens")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument(
        "--threads", type=int, default=1,
        help="torch CPU threads (above 1, the sections after the first two run with the main "
        "thread's OpenMP team alive: see _on_a_thread; the threads section compares 1 and 2)",
    )  # fmt: skip
    parser.add_argument("--prompts", type=int, default=40, help="rounded weights' quality")
    parser.add_argument("--data-dir", type=Path, default=CACHE_DIR)
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)
    engine = load_engine(args.data_dir, "cpu", "float32", args.threads or None)
    levels = (1, 8) if args.quick else (1, 4, 8, 16)
    quick = args.quick
    results = run(
        engine,
        levels,
        16 if quick else args.tokens,
        12 if quick else args.prompts,
        llama_rounds=2 if quick else 3,
    )
    return publish("engine", results, markdown(results, command("engine", argv)), not args.no_doc)


def _on_a_thread(work: Callable[[], _T]) -> _T:
    """``work()`` on a thread of its own, which ends with it.

    NOTE: a thread that runs OpenMP regions of more than one thread (torch's ops, the native
    kernels, llama.cpp's) keeps a team of OpenMP threads while it lives; once the process has
    more of them than CPUs, libgomp's waiting threads stop spinning between regions and every
    region wakes them from sleep (measured here: a 2-thread engine's products 1.5x slower after
    llama.cpp had run on the main thread). The engine's measures run on threads of their own
    (``AsyncEngine``), so does everything else multi-threaded here."""
    done: list[_T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as exc:  # (raised again on the caller's thread)
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return done[0]


def _covered(spans: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, stop)`` intervals."""
    total, reach = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop > reach:
            total += stop - max(start, reach)
            reach = stop
    return total


def _timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
