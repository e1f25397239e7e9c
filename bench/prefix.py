"""Prefix KV reuse and KV-cached decode on the bundled SmolLM2-135M-Instruct.

    python -m bench.prefix              # bench/results/prefix.json + docs/benchmarks.md section
    python -m bench.prefix --quick      # 256/1024 only, fewer repeats (a smoke run)

Measured side by side in one process, in interleaved rounds (the machine is shared, so
absolute times drift; the ratios are what to read), median of ``--repeats`` rounds:

* **TTFT** for a shared prefix of 256 / 1024 / 2048 tokens plus a new 64-token suffix —
  *cold* (no cache: prefill everything), *warm* (the engine: radix match, copy of the
  prefix KV into the request cache, prefill of the suffix, first sample), the *floor* (the
  forward over the 64 suffix tokens with the prefix KV already in place, nothing else),
  and Hugging Face's documented prompt reuse (``generate`` with a ``copy.deepcopy`` of a
  stored ``DynamicCache``). All times end when the first token is sampled.
* **Decode** tokens/s after a 512- and a 2048-token prompt: the engine's loop
  (preallocated KV, detokenisation and stop checks included) vs ``model.generate()``
  (timed by a streamer from its first to its last new token) vs recomputing the whole
  sequence for every token.
* **KV bytes per token**, and the prefix tree's **bookkeeping** per request at 2k tokens
  (match + lock/unlock + insert), with and without the copy of the new tokens' KV.
* **Disk tier** (``prefix_disk_dir``): TTFT for a 1024-token shared prefix + 64 new tokens
  served cold, from memory, and from disk after the memory tree evicted it (page cache
  warm: the file was just written, as for a recent eviction), with the break-even the
  engine measured at start.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from bench.report import command, median, publish, run_header, table
from localmodel import Engine, EngineConfig, SamplingParams
from localmodel.engine import prefill
from localmodel.kv import RequestCache
from prefix import CountSpan, RadixCache, RadixKey

CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cachegate"
SUFFIX = 64
TARGET_SPEEDUP, TARGET_FLOOR, TARGET_BOOKKEEPING_MS = 8.0, 1.3, 1.0


# ── measurements ─────────────────────────────────────────────────────────────────────


def measure_ttft(engine: Engine, prefix_len: int, repeats: int) -> dict[str, Any]:
    """Cold / warm / floor / HF-deepcopy time to first token for ``prefix_len`` + 64 tokens."""
    model, layout = engine.model, engine.layout
    cold_engine = Engine(model, engine.tokenizer, engine.config, prefix_cache=RadixCache(0))
    prefix = _tokens(prefix_len, seed=prefix_len)
    namespace = f"bench|{prefix_len}"
    engine.complete(engine.prepare(prefix, _one_token(), namespace=namespace))  # cache it

    floor_cache = RequestCache.allocate(layout, prefix_len + SUFFIX)
    prefill(model, floor_cache, _ids(prefix, layout.device), start=0)
    hf_cache = _hf_prompt_cache(model, prefix, layout.device)

    samples: dict[str, list[float]] = {"cold": [], "warm": [], "floor": [], "hf_deepcopy": []}
    cached: list[int] = []
    for round_ in range(repeats + 1):  # round 0 warms up allocators and kernels
        prompt = prefix + _tokens(SUFFIX, seed=10_000 + round_)
        cold = cold_engine.complete(cold_engine.prepare(prompt, _one_token(), namespace="cold"))
        warm = engine.complete(engine.prepare(prompt, _one_token(), namespace=namespace))
        floor = _time(lambda: _floor(model, floor_cache, prompt, prefix_len))  # noqa: B023
        hf = _time(lambda: _hf_generate(model, hf_cache, prompt, layout.device))  # noqa: B023
        if round_:
            samples["cold"].append(cold.prefill_s)
            samples["warm"].append(warm.prefill_s)
            samples["floor"].append(floor)
            samples["hf_deepcopy"].append(hf)
            cached.append(warm.usage.cached_tokens)
    result: dict[str, Any] = {k: median(v) for k, v in samples.items()}
    result.update(prefix=prefix_len, suffix=SUFFIX, cached_tokens=min(cached), samples=samples)
    result["speedup"] = result["cold"] / result["warm"]
    result["warm_vs_floor"] = result["warm"] / result["floor"]
    result["hf_vs_warm"] = result["hf_deepcopy"] / result["warm"]
    return result


def measure_disk_ttft(engine: Engine, prefix_len: int, repeats: int) -> dict[str, Any]:
    """TTFT for ``prefix_len`` shared + 64 new tokens: cold, from memory, from disk.

    A second engine on the same model has a disk tier in a temporary directory; before
    each of its rounds its memory tree is evicted into the tier (by the byte budget's
    path, so the prefix goes to disk) and the writer drained, so the prefix is read back.
    """
    model, tokenizer = engine.model, engine.tokenizer
    cold_engine = Engine(model, tokenizer, engine.config, prefix_cache=RadixCache(0))
    prefix = _tokens(prefix_len, seed=50_000 + prefix_len)
    namespace = f"bench-disk|{prefix_len}"
    samples: dict[str, list[float]] = {"cold": [], "memory": [], "disk": []}
    disk_tokens: list[int] = []
    with tempfile.TemporaryDirectory(prefix="cachegate-bench-") as directory:
        config = replace(engine.config, prefix_disk_dir=Path(directory))
        disk_engine = Engine(model, tokenizer, config)  # measures its break-even here
        try:
            for warm_engine in (engine, disk_engine):
                warm_engine.complete(warm_engine.prepare(prefix, _one_token(), namespace=namespace))
            for round_ in range(repeats + 1):  # round 0 warms up allocators and kernels
                prompt = prefix + _tokens(SUFFIX, seed=40_000 + round_)
                cold = cold_engine.complete(
                    cold_engine.prepare(prompt, _one_token(), namespace="cold")
                )
                memory = engine.complete(engine.prepare(prompt, _one_token(), namespace=namespace))
                _offload_all(disk_engine)
                before = disk_engine.stats.disk_hit_tokens
                disk = disk_engine.complete(
                    disk_engine.prepare(prompt, _one_token(), namespace=namespace)
                )
                if round_:
                    samples["cold"].append(cold.prefill_s)
                    samples["memory"].append(memory.prefill_s)
                    samples["disk"].append(disk.prefill_s)
                    disk_tokens.append(disk_engine.stats.disk_hit_tokens - before)
            stats = disk_engine.stats
        finally:
            disk_engine.close()
    assert stats.break_even is not None and stats.disk is not None
    result: dict[str, Any] = {k: median(v) for k, v in samples.items()}
    result.update(prefix=prefix_len, suffix=SUFFIX, disk_tokens=min(disk_tokens), samples=samples)
    result["cold_vs_disk"] = result["cold"] / result["disk"]
    result["disk_vs_memory"] = result["disk"] / result["memory"]
    result["break_even"] = stats.break_even.as_dict()
    result["disk_stats"] = {"written_tokens": stats.disk.written_tokens, "files": stats.disk.files}
    return result


def measure_decode(engine: Engine, prompt_len: int, n_tokens: int, repeats: int) -> dict[str, Any]:
    """Decode tokens/s after ``prompt_len`` tokens: the engine's loop vs ``generate()``.

    Both are timed from the first generated token to the last (the prefill is excluded);
    ``generate()`` through a streamer that stamps every token it emits.
    """
    model, device = engine.model, engine.layout.device
    bench_engine = Engine(model, engine.tokenizer, engine.config, prefix_cache=RadixCache(0))
    bench_engine.stop_token_ids = frozenset()  # decode exactly n_tokens, eos or not
    prompt = _tokens(prompt_len, seed=7)
    params = SamplingParams(temperature=0.0, max_tokens=n_tokens)
    ours, hf = [], []
    for _ in range(repeats):
        result = bench_engine.complete(bench_engine.prepare(prompt, params, namespace="decode"))
        assert result.usage.completion_tokens == n_tokens
        ours.append((n_tokens - 1) / result.decode_s)
        hf.append((n_tokens - 1) / _hf_decode_s(model, prompt, n_tokens, device))
    return {
        "prompt": prompt_len,
        "tokens": n_tokens,
        "engine_tok_s": median(ours),
        "generate_tok_s": median(hf),
        "engine_vs_generate": median(ours) / median(hf),
        "samples": {"engine": ours, "generate": hf},
    }


def measure_recompute(engine: Engine, prompt_len: int, n_tokens: int) -> dict[str, Any]:
    """Decode without a KV cache: every new token re-runs the whole sequence."""
    prompt = _tokens(prompt_len, seed=7)
    seconds = _time(lambda: _recompute(engine.model, prompt, n_tokens, engine.layout.device))
    return {"prompt": prompt_len, "tokens": n_tokens, "tok_s": n_tokens / seconds}


def measure_bookkeeping(engine: Engine, prefix_len: int, repeats: int) -> dict[str, Any]:
    """Prefix-tree cost of one request with ``prefix_len`` cached tokens + 64 new ones."""
    layout = engine.layout
    buffer = RequestCache.allocate(layout, prefix_len + SUFFIX)
    buffer.truncate(prefix_len + SUFFIX)  # contents are irrelevant to the tree
    prefix = _tokens(prefix_len, seed=3)
    results: dict[str, Any] = {"prefix": prefix_len, "suffix": SUFFIX}

    def counted(n: int) -> CountSpan:
        return CountSpan(n, layout.bytes_per_token)

    for label, make_kv in (("with_kv_copy", buffer.view), ("tree_only", counted)):
        tree = RadixCache(4 * 2**30)
        tree.insert(RadixKey("ns", prefix), make_kv(prefix_len))
        samples = []
        for round_ in range(repeats):
            tokens = prefix + _tokens(SUFFIX, seed=20_000 + round_)
            started = time.perf_counter()
            match = tree.match(RadixKey("ns", tokens))
            with tree.hold(match):
                pass
            tree.insert(RadixKey("ns", tokens), make_kv(len(tokens)))
            samples.append(time.perf_counter() - started)
            assert match.n_cached == prefix_len
        results[label + "_ms"] = median(samples) * 1e3
    return results


# ── report ───────────────────────────────────────────────────────────────────────────


def run(
    engine: Engine,
    *,
    sizes: tuple[int, ...] = (256, 1024, 2048),
    repeats: int = 5,
    decode_prompts: tuple[int, ...] = (512, 2048),
    decode_tokens: int = 64,
    recompute_tokens: int = 8,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every measurement of this benchmark; the dict is what ``prefix.json`` holds."""
    results: dict[str, Any] = {
        **run_header(),
        "device": str(engine.layout.device),
        "dtype": str(engine.layout.dtype).removeprefix("torch."),
        "torch_threads": torch.get_num_threads(),
        "kv_bytes_per_token": engine.layout.bytes_per_token,
        "ttft": [],
    }
    for size in sizes:
        log(f"bench.prefix: TTFT with a {size}-token shared prefix …")
        results["ttft"].append(measure_ttft(engine, size, repeats))
    log("bench.prefix: decode …")
    decode_repeats = max(2, repeats // 2)
    measure_decode(engine, 64, 4, 1)  # warm-up
    results["decode"] = [
        measure_decode(engine, n, decode_tokens, decode_repeats) for n in decode_prompts
    ]
    results["recompute"] = measure_recompute(engine, decode_prompts[0], recompute_tokens)
    log("bench.prefix: bookkeeping …")
    results["bookkeeping"] = measure_bookkeeping(engine, 2048, 50)
    log("bench.prefix: disk tier …")
    results["disk"] = measure_disk_ttft(engine, 1024, max(2, repeats // 2))
    return results


def markdown(results: dict[str, Any], command: str) -> str:
    ms = _ms
    ttft_rows = [
        [
            f"{r['prefix']} + {r['suffix']}",
            ms(r["cold"]),
            f"**{ms(r['warm'])}**",
            ms(r["floor"]),
            ms(r["hf_deepcopy"]),
            f"**{r['speedup']:.1f}×**",
            f"**{r['warm_vs_floor']:.2f}×**",
            f"{r['hf_vs_warm']:.1f}×",
        ]
        for r in results["ttft"]
    ]
    b, rc = results["bookkeeping"], results["recompute"]
    decode_rows = [
        [
            d["prompt"],
            f"**{d['engine_tok_s']:.1f}**",
            f"{d['generate_tok_s']:.1f}",
            f"**{d['engine_vs_generate']:.2f}×**",
            f"{rc['tok_s']:.2f}" if rc["prompt"] == d["prompt"] else "—",
        ]
        for d in results["decode"]
    ]
    d = results["decode"][0]
    at_1k = next((r for r in results["ttft"] if r["prefix"] == 1024), None)
    verdict = (
        f"At 1024 shared tokens warm TTFT is {at_1k['speedup']:.1f}× faster than cold "
        f"(target ≥ {TARGET_SPEEDUP:.0f}×) and {at_1k['warm_vs_floor']:.2f}× the floor "
        f"(target ≤ {TARGET_FLOOR}×); decode is {d['engine_vs_generate']:.2f}× `generate()` "
        f"after {d['prompt']} tokens "
        f"(target ≥ 1); bookkeeping {b['tree_only_ms']:.3f} ms (target ≤ {TARGET_BOOKKEEPING_MS} ms)."
        if at_1k
        else ""
    )
    disk, be = results["disk"], results["disk"]["break_even"]
    disk_text = (
        f"Disk tier (`prefix_disk_dir`): a {disk['prefix']}-token prefix + {disk['suffix']} new "
        f"tokens, evicted from memory and read back from disk ({disk['disk_tokens']} tokens; "
        "page cache warm: the file was just written, as for a recent eviction):"
    )
    break_even = (
        f"loading pays from **{be['min_tokens']} token(s)**"
        if be["min_tokens"] is not None
        else "**never** (recomputing is faster)"
    )
    be_text = (
        f"Break-even measured by the engine at start ({be['measured_tokens']} tokens): prefill "
        f"{be['prefill_s_per_token'] * 1e3:.2f} ms/token, disk load "
        f"{be['load_s_per_token'] * 1e6:.1f} µs/token + {be['load_overhead_s'] * 1e6:.0f} µs "
        f"per read: {break_even}."
    )
    disk_table = table(
        ["shared prefix + new", "cold", "from memory", "from disk", "cold / disk", "disk / memory"],
        [
            [
                f"{disk['prefix']} + {disk['suffix']}",
                ms(disk["cold"]),
                ms(disk["memory"]),
                f"**{ms(disk['disk'])}**",
                f"**{disk['cold_vs_disk']:.1f}×**",
                f"{disk['disk_vs_memory']:.2f}×",
            ]
        ],
    )
    return "\n".join(
        [
            "## Prefix KV cache and decode (`bench/prefix.py`)",
            "",
            f"Command: `{command}` — {results['machine']}; code {results['code']}; SmolLM2-135M-Instruct on "
            f"{results['device']} ({results['dtype']}, torch threads: {results['torch_threads']}). "
            "Medians of interleaved rounds; times end when the first token is sampled.",
            "",
            table(
                [
                    "shared prefix + new",
                    "cold",
                    "warm (engine)",
                    "floor",
                    "HF deepcopy + generate",
                    "cold / warm",
                    "warm / floor",
                    "HF / warm",
                ],
                ttft_rows,
            ),
            "",
            f"Decode tokens/s ({d['tokens']} tokens, greedy, prefill excluded) after a prompt of "
            "the given length; the last column recomputes the whole sequence for each token "
            f"(no KV cache, {rc['tokens']} tokens):",
            "",
            table(
                ["prompt", "engine", "`generate()`", "engine / generate", "no KV cache"],
                decode_rows,
            ),
            "",
            f"KV cache: {results['kv_bytes_per_token']:,} bytes per token. Prefix-tree bookkeeping "
            f"per request at {b['prefix']} cached + {b['suffix']} new tokens (match, lock/unlock, "
            f"insert): **{b['tree_only_ms']:.3f} ms**; {b['with_kv_copy_ms']:.3f} ms including the "
            "copy of the new tokens' KV into the tree.",
            "",
            disk_text,
            "",
            disk_table,
            "",
            be_text,
            "",
            verdict,
        ]
    )


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="256/1024 only, 2 repeats")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--data-dir", type=Path, default=CACHE_DIR)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: stable on shared machines; 0 = torch's default)",
    )
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)
    engine = load_engine(args.data_dir, args.device, args.dtype, args.threads or None)
    sizes = (256, 1024) if args.quick else (256, 1024, 2048)
    repeats = 2 if args.quick else args.repeats
    results = run(engine, sizes=sizes, repeats=repeats)
    return publish("prefix", results, markdown(results, command("prefix", argv)), not args.no_doc)


def load_engine(
    data_dir: Path,
    device: str = "auto",
    dtype: str = "auto",
    threads: int | None = None,
    weights: str = "auto",
) -> Engine:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    config = EngineConfig(
        data_dir=data_dir,
        device=device,
        dtype=dtype,
        threads=threads,
        prefix_cache_bytes=2 * 2**30,
        weights=weights,
    )
    return Engine.load(config)


# ── helpers ──────────────────────────────────────────────────────────────────────────


def _one_token() -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=1)


def _tokens(n: int, seed: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1_000, 40_000, (n,), generator=generator).tolist()  # no special ids


def _ids(tokens: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor([tokens], device=device)  # [1, n]


def _time(fn: Callable[[], object]) -> float:
    _sync()
    started = time.perf_counter()
    fn()
    _sync()
    return time.perf_counter() - started


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _offload_all(engine: Engine) -> None:
    """Evict the whole memory tree by its byte budget's path (so it goes to disk); wait."""
    assert engine.disk is not None
    engine.prefix_cache.evict(engine.prefix_cache.stats.bytes)
    engine.disk.tier.drain()


@torch.inference_mode()
def _floor(model: Any, cache: RequestCache, prompt: list[int], prefix_len: int) -> int:
    cache.truncate(prefix_len)  # the prefix KV stays; no copy, no tree
    logits = prefill(model, cache, _ids(prompt[prefix_len:], cache.key_buf.device), prefix_len)
    return int(logits.argmax())


@torch.inference_mode()
def _hf_prompt_cache(model: Any, prefix: list[int], device: torch.device) -> Any:
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    model(_ids(prefix, device), cache=cache, use_cache=True)
    return cache


@torch.inference_mode()
def _hf_generate(model: Any, prompt_cache: Any, prompt: list[int], device: torch.device) -> Any:
    """Hugging Face's "re-use a prompt cache" recipe: deepcopy it, hand it to generate()."""
    ids = _ids(prompt, device)
    with _quiet():
        return model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            cache=copy.deepcopy(prompt_cache),
            max_new_tokens=1,
            do_sample=False,
        )


class _Stamps:
    """A ``generate()`` streamer that records when each batch of tokens comes out."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: torch.Tensor) -> None:
        _sync()
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


@torch.inference_mode()
def _hf_decode_s(model: Any, prompt: list[int], n_tokens: int, device: torch.device) -> float:
    """Seconds ``generate()`` spends from its first new token to its last."""
    ids = _ids(prompt, device)
    stamps = _Stamps()
    with _quiet():
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=n_tokens,
            min_new_tokens=n_tokens,
            do_sample=False,
            streamer=stamps,
        )
    # put() #0 is the prompt, #1 the first new token, #n_tokens the last one
    assert len(stamps.times) == n_tokens + 1, len(stamps.times)
    return stamps.times[-1] - stamps.times[1]


@torch.inference_mode()
def _recompute(model: Any, prompt: list[int], n_tokens: int, device: torch.device) -> None:
    """Decode without a KV cache: every token re-runs the whole sequence."""
    ids = _ids(prompt, device)
    for _ in range(n_tokens):
        logits = model(ids, use_cache=False, logits_to_keep=1).logits[0, -1]
        ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)


@contextlib.contextmanager
def _quiet() -> Any:
    """generate() prints advisory warnings on every call; keep the benchmark output clean."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        hf_logging.set_verbosity(level)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.1f} ms"


if __name__ == "__main__":
    main(sys.argv[1:])
