"""Device check: warm-prefix logits equal cold logits, then the prefix benchmark table.

    python -m bench.gpu_check                 # CUDA (bfloat16) when available, else CPU (float32)
    python -m bench.gpu_check --dtype float32 # any device, the strict float32 tolerance

For each shared-prefix length the script caches the prefix through the engine, then
compares the last-token logits of (a) the engine's warm path — radix match, copy of the
cached KV, prefill of the 64 new tokens — with (b) a cold prefill of the whole prompt.

Tolerance:

* float32: max |warm − cold| ≤ 1e-4 (DESIGN.md's invariant; on CPU we see ~1e-5 or 0).
* bfloat16: max |warm − cold| ≤ 2e, where e = max |cold_bf16 − fp32| is bf16's own error
  on the same prompt, measured against a float32 copy of the model. bf16 keeps 8
  significant bits, so a logit near 20 is only representable to ±0.06, and the warm and
  cold runs do the same math in different shapes (64 queries against a cached prefix vs
  all queries at once), so GEMM and attention kernels accumulate in different orders. If
  prefix reuse adds no error of its own, warm is within ~e of fp32 like cold is, and the
  triangle inequality bounds |warm − cold| by 2e; a bug (wrong positions, a stale or
  misplaced KV entry) shows up as differences of whole logits. A fixed threshold would be
  either meaningless or flaky. Top-1 agreement is reported too (a near-tie may
  legitimately flip in bf16). The tolerance never goes below 2^-7 (one bf16 step at 1.0).

Then concurrent streams (``--streams``, default 1/8/32/64 on CUDA, 1/8 on a CPU, none with
``--no-bench``): that many greedy streams submitted at once to the engine's scheduler
(``bench/engine.py``'s measure: distinct 64-token prompts, ``--tokens`` each), with aggregate
and decode tokens/s and TTFT p50/p99, and the same 8 streams one at a time (``max_batch: 1``)
for the batching ratio.
On CUDA, last: 1, 8 and the most streams with cuDNN's SDPA off (what the engine sets at load)
and on (torch's default), taking turns, to show what that setting is worth.

Exit status 1 when a check fails. The JSON goes to bench/results/gpu_check.json.
"""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import replace
from typing import Any

import torch

from bench.engine import measure
from bench.prefix import CACHE_DIR, SUFFIX, _ids, _tokens, load_engine, markdown, run
from bench.report import command as report_command
from bench.report import median, save_json, table
from localmodel import Engine, SamplingParams
from localmodel.engine import prefill
from localmodel.kv import RequestCache
from prefix import RadixKey

FP32_TOLERANCE = 1e-4
BF16_TOLERANCE_FLOOR = 2**-7  # one bf16 step at 1.0, in case the dtype error is ~0


def check_logits(engine: Engine, prefix_len: int, reference: Any | None) -> dict[str, Any]:
    """Warm vs cold last-token logits for ``prefix_len`` cached + 64 new tokens."""
    model, layout = engine.model, engine.layout
    namespace = f"gpu-check|{prefix_len}"
    prefix = _tokens(prefix_len, seed=prefix_len)
    prompt = prefix + _tokens(SUFFIX, seed=99)
    once = SamplingParams(temperature=0.0, max_tokens=1)
    engine.complete(engine.prepare(prefix, once, namespace=namespace))

    match = engine.prefix_cache.match(RadixKey(namespace, prompt))
    assert match.n_cached == prefix_len, (match.n_cached, prefix_len)
    warm_cache = RequestCache.allocate(layout, len(prompt))
    with engine.prefix_cache.hold(match):
        warm_cache.load(match.spans, match.n_cached)
    warm = prefill(model, warm_cache, _ids(prompt[prefix_len:], layout.device), prefix_len)
    cold_cache = RequestCache.allocate(layout, len(prompt))
    cold = prefill(model, cold_cache, _ids(prompt, layout.device), 0)

    diff = (warm.float() - cold.float()).abs().max().item()
    result: dict[str, Any] = {
        "prefix": prefix_len,
        "suffix": SUFFIX,
        "max_abs_diff": diff,
        "top1_agrees": int(warm.argmax()) == int(cold.argmax()),
    }
    if reference is None:
        result["tolerance"] = FP32_TOLERANCE
    else:
        with torch.inference_mode():
            ref = reference(_ids(prompt, layout.device), logits_to_keep=1).logits[0, -1]
        result["dtype_error"] = (cold.float() - ref.float()).abs().max().item()
        result["warm_error"] = (warm.float() - ref.float()).abs().max().item()
        result["tolerance"] = max(2 * result["dtype_error"], BF16_TOLERANCE_FLOOR)
    result["ok"] = diff <= result["tolerance"]
    return result


def concurrent_streams(engine: Engine, levels: list[int], n_tokens: int) -> dict[str, Any]:
    """``measure`` at each level, and 8 streams one at a time for the batching ratio."""
    batched = [measure(engine, c, n_tokens, seed=c) for c in levels]
    alone = Engine(engine.model, engine.tokenizer, replace(engine.config, max_batch=1))
    one_at_a_time = measure(alone, 8, n_tokens, seed=8)
    rows = [[r["concurrency"], f"{r['tokens_per_s']:.1f}", f"{r['decode_tokens_per_s']:.1f}",
             f"{1000 * r['ttft_p50_s']:.0f} / {1000 * r['ttft_p99_s']:.0f}"]
            for r in [*batched, {**one_at_a_time, "concurrency": "8 one at a time"}]]  # fmt: skip
    print(f"\nConcurrent streams, {n_tokens} greedy tokens each (max_batch "
          f"{engine.config.max_batch}):\n")  # fmt: skip
    print(table(["streams", "tokens/s", "decode tokens/s", "TTFT p50 / p99 ms"], rows))
    return {"batched": batched, "one_at_a_time_8": one_at_a_time}


def cudnn_side_by_side(engine: Engine, levels: list[int], n_tokens: int, rounds: int = 2) -> dict:
    """Decode with cuDNN's SDPA off (the engine's setting on CUDA) and on (torch's default),
    taking turns: cuDNN builds a graph for each new shape, and each decode step attends over
    one token more, so with it on every step paid for a new graph (a ~2× slower decode)."""
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {"off": {}, "on": {}}
    seeds = iter(range(1000, 10**6))
    try:
        for _ in range(rounds):
            for setting in ("off", "on"):
                torch.backends.cuda.enable_cudnn_sdp(setting == "on")
                for c in levels:
                    runs[setting].setdefault(c, []).append(
                        measure(engine, c, n_tokens, next(seeds))
                    )
    finally:
        torch.backends.cuda.enable_cudnn_sdp(False)

    def med(setting: str, c: int, key: str) -> float:
        return median([r[key] for r in runs[setting][c]])

    rows = [
        [c, f"{med('off', c, 'tokens_per_s'):.1f}", f"{med('on', c, 'tokens_per_s'):.1f}",
         f"**{med('off', c, 'tokens_per_s') / med('on', c, 'tokens_per_s'):.2f}×**",
         f"{med('off', c, 'ms_per_token'):.1f} / {med('on', c, 'ms_per_token'):.1f}"]
        for c in levels
    ]  # fmt: skip
    print(f"\nSDPA without cuDNN (the engine) vs with it (torch's default), taking turns, "
          f"medians of {rounds} rounds, {n_tokens} greedy tokens each:\n")  # fmt: skip
    header = [
        "streams",
        "tokens/s, cuDNN off",
        "tokens/s, cuDNN on",
        "off / on",
        "ms/token off / on",
    ]
    print(table(header, rows))
    return {"rounds": rounds, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = default)")
    parser.add_argument("--no-bench", action="store_true",
                        help="only the logits check (and --streams if given)")  # fmt: skip
    parser.add_argument("--streams", help="concurrent streams, e.g. 1,8,32,64 (0: none)")
    parser.add_argument("--tokens", type=int, default=32, help="greedy tokens per stream")
    args = parser.parse_args(argv)

    engine = load_engine(CACHE_DIR, args.device, args.dtype, args.threads or None)
    on_cuda = engine.layout.device.type == "cuda"
    default = "0" if args.no_bench else "1,8,32,64" if on_cuda else "1,8"
    streams = [int(c) for c in (args.streams or default).split(",")]
    if max(streams) > engine.config.max_batch:
        engine = Engine(engine.model, engine.tokenizer,
                        replace(engine.config, max_batch=max(streams)))  # fmt: skip
    sizes = (256, 1024, 2048) if on_cuda else (256, 1024)
    reference = None
    if engine.layout.dtype != torch.float32:
        reference = copy.deepcopy(engine.model).float().eval()
    checks = [check_logits(engine, size, reference) for size in sizes]
    del reference

    dtype = str(engine.layout.dtype).removeprefix("torch.")
    rows = [
        [
            f"{c['prefix']} + {c['suffix']}",
            f"{c['max_abs_diff']:.2e}",
            f"{c['tolerance']:.2e}",
            f"{c['dtype_error']:.2e}" if "dtype_error" in c else "—",
            f"{c['warm_error']:.2e}" if "warm_error" in c else "—",
            "yes" if c["top1_agrees"] else "no",
            "**ok**" if c["ok"] else "**FAIL**",
        ]
        for c in checks
    ]
    header = [
        "prefix + new",
        "max abs(warm − cold)",
        "tolerance",
        "max abs(cold − fp32)",
        "max abs(warm − fp32)",
        "top-1 agrees",
        "check",
    ]
    print(f"Warm vs cold last-token logits on {engine.layout.device} ({dtype}):\n")
    print(table(header, rows))
    results: dict[str, Any] = {
        "device": str(engine.layout.device),
        "dtype": dtype,
        "torch": torch.__version__,
        "cudnn_sdpa": torch.backends.cuda.cudnn_sdp_enabled(),  # the engine turns it off
        "checks": checks,
    }
    if not args.no_bench:
        results["bench"] = run(engine, sizes=sizes, repeats=args.repeats)
        command = report_command("gpu_check", argv)
        print()
        print(markdown(results["bench"], command))
    if streams != [0]:
        results["streams"] = concurrent_streams(engine, streams, args.tokens)
        if on_cuda:
            levels = sorted({1, 8, max(streams)})
            results["cudnn_side_by_side"] = cudnn_side_by_side(engine, levels, args.tokens)
    save_json("gpu_check", results)
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
