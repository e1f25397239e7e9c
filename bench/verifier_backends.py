"""The verifier's backends side by side: p50 latency of one call on 1 pair and on 3 pairs.

    python -m bench.verifier_backends              # ~1 min on 2 shared cores

Pairs: the first 200 of bench/data/contrast_heldout.jsonl. Each backend
(``cache.semantic.verifier_backend``) runs with one intra-op thread, as in the gateway's
verifier worker; the backends take turns call by call, so the shared machine's load falls on
both. Agreement: the largest |score difference| from torch over the 200 pairs, 3 per call,
for float32 onnx; int8 (its own calibration, so its scores are not meant to equal torch's): the
mean and largest |logit difference| from torch, and the share of pairs whose logit changes sign.
Prints the figures and saves bench/results/verifier_backends.json (docs/benchmarks.md quotes
them by hand, in the verifier's section).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.report import command, machine, percentile, save_json, table
from bench.train_verifier import DATA, _rows
from semantic.verifier import PairVerifier


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=100, help="calls per backend and batch size")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    pairs = [(r["a"], r["b"]) for r in _rows(DATA / "contrast_heldout.jsonl")[:200]]
    with tempfile.TemporaryDirectory() as tmp:
        verifiers = {
            "torch": PairVerifier(backend="torch"),
            "onnx": PairVerifier(backend="onnx", export_dir=Path(tmp)),
            "onnx-int8": PairVerifier(backend="onnx-int8", export_dir=Path(tmp)),
        }
        for name in ("onnx", "onnx-int8"):
            assert verifiers[name].backend == name, verifiers[name].fallback
        ms: dict[str, dict[int, list[float]]] = {name: {1: [], 3: []} for name in verifiers}
        for i in range(args.rounds):
            for size in (1, 3):
                for name, verifier in verifiers.items():
                    t = time.perf_counter()
                    verifier.score(pairs[i : i + size])
                    ms[name][size].append(1000 * (time.perf_counter() - t))
        diff = max(
            float(np.max(np.abs(verifiers["onnx"].score(chunk) - verifiers["torch"].score(chunk))))
            for chunk in (pairs[i : i + 3] for i in range(0, len(pairs), 3))
        )
        raw = {name: verifiers[name].raw_logits(pairs) for name in ("torch", "onnx-int8")}
    drift = np.abs(raw["onnx-int8"] - raw["torch"])
    flips = float(np.mean(np.sign(raw["onnx-int8"]) != np.sign(raw["torch"])))
    p50 = {name: {size: percentile(v, 50) for size, v in by.items()} for name, by in ms.items()}
    rows = [[name, f"{p50[name][1]:.1f}", f"{p50[name][3]:.1f}"] for name in verifiers]
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    text = "\n".join(
        [
            f"`{command('verifier_backends', argv)}` — {machine()}, load average {load}; "
            f"{args.rounds} calls each; largest |score difference| onnx vs torch: {diff:.1e}; "
            f"onnx-int8 vs torch logits: mean |Δ| {drift.mean():.2f}, largest {drift.max():.2f}, "
            f"sign changed on {flips:.1%} of the pairs.",
            "",
            table(["backend", "1 pair p50 ms", "3 pairs p50 ms"], rows),
        ]
    )
    save_json(
        "verifier_backends",
        {"p50_ms": p50, "max_score_diff": diff, "load": load,
         "int8_logit_drift": {"mean": float(drift.mean()), "max": float(drift.max()),
                              "sign_changed": flips}},
    )  # fmt: skip
    print(text)
    return text


if __name__ == "__main__":
    main()
