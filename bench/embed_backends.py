"""Embedder backends side by side: speed, agreement with float32 torch, and what hits.

    python -m bench.embed_backends              # ~10 min on 2 shared cores
    python -m bench.embed_backends --quick      # 2,000 held-out pairs instead of all

Backends (``cache.semantic.embedder_backend``, plus one measured but not shipped):
``torch`` (float32, the packed forward), ``torch int8`` (the packed forward with its Linear
layers dynamically quantised by ``torch.ao.quantization.quantize_dynamic``; not a config
choice), ``onnx`` (float32 through ONNX Runtime), ``onnx-int8`` (its weights int8 per channel,
activations per call) and ``onnx-int8-block`` (weights int8 in blocks of 128 inputs, activations
per row and block).

Speed: one question at a time (p50 of ``encode([text])``, the latency of a lone miss) and
batches of 16 (texts/s, the throughput of a busy worker), one worker thread and one intra-op
thread each, backends in alternating rounds so that the shared machine's load falls on all.
Agreement: cosine between each backend's vector and torch float32's for the same text, in
serving-like batches of 16; "alone vs batch" is the least cosine between a text embedded alone
and in a batch (int8 activations are quantised per call, so a text's vector depends a little
on its batch-mates). Fidelity: Quora held-out pairs (``bench/semantic_pairs.py``'s split) at the
shipped default (cos >= 0.8 and the guard), and the adversarial set's wrong-hit and paraphrase
hit rates.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.report import command, percentile, publish, run_header, table
from bench.semantic_pairs import ADVERSARIAL, guard_verdicts, prf, read_qqp
from semantic._packed import PackedEncoder
from semantic.embedder import Embedder
from semantic.guard import DEFAULT_THRESHOLD, Guard

NAMES = ["torch", "torch int8", "onnx", "onnx-int8", "onnx-int8-block"]


def load(name: str, export_dir: Path) -> Embedder:
    if name == "torch int8":
        emb = Embedder(cache_size=0, workers=1)
        emb._packed = PackedEncoder.from_model(emb._model, int8=True)
        return emb
    return Embedder(cache_size=0, workers=1, backend=name, export_dir=export_dir)


def speed(embs: dict[str, Embedder], texts: list[str], rounds: int) -> dict[str, dict[str, Any]]:
    """p50/p99 ms of one text at a time, and texts/s in batches of 16, alternating rounds."""
    one: dict[str, list[float]] = {n: [] for n in embs}
    rate: dict[str, list[float]] = {n: [] for n in embs}
    chunk = len(texts) // rounds
    for r in range(rounds):
        part = texts[r * chunk : (r + 1) * chunk]
        for name, emb in embs.items():
            for text in part[:100]:
                started = time.perf_counter()
                emb.encode([text])
                one[name].append(time.perf_counter() - started)
            started = time.perf_counter()
            for i in range(0, len(part), 16):
                emb.encode(part[i : i + 16])
            rate[name].append(len(part) / (time.perf_counter() - started))
    return {
        n: {
            "one_p50_ms": percentile(one[n], 50) * 1000,
            "one_p99_ms": percentile(one[n], 99) * 1000,
            "batch16_per_s": float(np.median(rate[n])),
        }
        for n in embs
    }


def embed16(emb: Embedder, texts: list[str], seed: int = 0) -> dict[str, np.ndarray]:
    """Each text's vector, embedded in shuffled batches of 16 (as a busy worker sees them)."""
    order = list(texts)
    random.Random(seed).shuffle(order)
    out: dict[str, np.ndarray] = {}
    for i in range(0, len(order), 16):
        batch = order[i : i + 16]
        out.update(zip(batch, emb.encode(batch), strict=True))
    return out


def fidelity(emb: Embedder, guard: Guard, pairs: dict[str, Any]) -> dict[str, Any]:
    vec = embed16(emb, pairs["texts"])
    out: dict[str, Any] = {}
    for name in ("qqp", "adversarial"):
        a, b, same = pairs[name]
        ua = np.stack([vec[t] for t in a])  # [n, dim]
        ub = np.stack([vec[t] for t in b])
        cos = np.einsum("ij,ij->i", ua, ub)  # [n]
        view = _PairView(a, b, ua, ub, cos)
        hit = (cos >= DEFAULT_THRESHOLD) & guard_verdicts(guard, view, cos >= DEFAULT_THRESHOLD)  # type: ignore[arg-type]
        if name == "qqp":
            out["qqp"] = prf(hit, same)
        else:
            out["adversarial"] = {
                "wrong_hit_rate": float(hit[~same].mean()),
                "paraphrase_hit_rate": float(hit[same].mean()),
            }
        out[f"{name}_hits"] = hit
    out["vectors"] = vec
    return out


class _PairView:
    """What ``guard_verdicts`` reads of a ``Pairs``."""

    def __init__(self, a: list[str], b: list[str], ua: Any, ub: Any, cos: Any) -> None:
        self.a, self.b, self.ua, self.ub, self.cos = a, b, ua, ub, cos


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 held-out pairs")
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args(argv)
    import torch

    # NOTE: as in the embedder's workers: one intra-op thread. The main thread's default (one
    # per core) makes torch wait on an OpenMP barrier whenever another process holds a core,
    # which made torch ~20x slower than ONNX Runtime (1 thread) in a first run at load 9.
    torch.set_num_threads(1)
    header = run_header()
    started = time.time()
    a, b, same, _group, held = read_qqp()
    idx = np.flatnonzero(held)
    if args.quick:
        idx = np.sort(np.random.default_rng(0).choice(idx, 2000, replace=False))
    qa, qb, qs = [a[i] for i in idx], [b[i] for i in idx], same[idx]
    import json

    rows = [json.loads(x) for x in ADVERSARIAL.read_text().splitlines() if x.strip()]
    adv = (
        [r["a"] for r in rows],
        [r["b"] for r in rows],
        np.array([bool(r["same"]) for r in rows]),
    )
    texts = sorted(set(qa) | set(qb) | set(adv[0]) | set(adv[1]))
    pairs = {"qqp": (qa, qb, qs), "adversarial": adv, "texts": texts}
    guard = Guard()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        embs = {name: load(name, Path(tmp)) for name in NAMES}
        load_s = time.perf_counter() - t0
        probe = random.Random(1).sample(sorted(set(a) - set(qa) - set(qb)), 1200)
        speeds = speed(embs, probe, rounds=4)
        results = {name: fidelity(emb, guard, pairs) for name, emb in embs.items()}
        alone = random.Random(2).sample(texts, 200)
        solo = {n: emb.encode(alone) for n, emb in embs.items()}  # one batch of 200 ...
        for name, emb in embs.items():  # ... vs each text alone
            single = np.concatenate([emb.encode([t]) for t in alone])
            results[name]["alone_vs_batch_min"] = float(np.min(np.sum(single * solo[name], 1)))
    ref = results["torch"]["vectors"]
    table_rows = []
    for name in NAMES:
        r, s = results[name], speeds[name]
        cos = np.array([float(r["vectors"][t] @ ref[t]) for t in texts])
        r["agreement"] = {"min": float(cos.min()), "p1": float(np.percentile(cos, 1)),
                          "mean": float(cos.mean())}  # fmt: skip
        changed = int(np.sum(r["qqp_hits"] != results["torch"]["qqp_hits"]))
        r["qqp_hits_changed"] = changed
        table_rows.append([
            f"`{name}`", f"{s['one_p50_ms']:.2f}", f"{s['one_p99_ms']:.2f}",
            f"{s['batch16_per_s']:.0f}",
            f"{speeds['torch']['one_p50_ms'] / s['one_p50_ms']:.2f}×",
            f"{s['batch16_per_s'] / speeds['torch']['batch16_per_s']:.2f}×",
            f"{r['agreement']['min']:.4f} / {r['agreement']['mean']:.5f}",
            f"{r['alone_vs_batch_min']:.4f}",
            f"{r['qqp']['precision']:.3f} / {r['qqp']['recall']:.3f}", changed,
            f"{r['adversarial']['wrong_hit_rate']:.1%} / {r['adversarial']['paraphrase_hit_rate']:.1%}",
        ])  # fmt: skip
    end = {**header, "loadavg_end": __import__("os").getloadavg(), "wall_s": time.time() - started,
           "load_and_export_s": load_s, "pairs": len(qa), "texts": len(texts),
           "speed": speeds,
           "results": {n: {k: v for k, v in r.items() if not k.endswith(("hits", "vectors"))}
                       for n, r in results.items()}}  # fmt: skip
    la, lb = header["loadavg_start"], end["loadavg_end"]
    text = "\n\n".join([
        "## Embedder backends (`bench/embed_backends.py`)",
        f"`{command('embed_backends', argv)}` — {header['machine']}, code {header['code']}. "
        f"Load average at start {la[0]:.1f}, at end {lb[0]:.1f} (2 shared cores); wall "
        f"{end['wall_s'] / 60:.1f} min. One worker thread, one intra-op thread; speed in "
        "alternating rounds over 1,200 Quora questions not in the pairs below. Agreement: "
        f"cosine with torch float32 over {len(texts):,} texts (min / mean). Quora: "
        f"{len(qa):,} held-out pairs ({int(qs.sum()):,} duplicates) at the shipped default "
        f"(cos ≥ {DEFAULT_THRESHOLD} and the guard); `changed`: pairs whose verdict differs from "
        "torch float32. Adversarial: wrong hits on must-not-hit pairs / paraphrases served.",
        table(["backend", "one text p50 ms", "p99 ms", "batch of 16, texts/s",
               "speed-up, one", "speed-up, 16", "agreement min / mean", "alone vs batch",
               "Quora precision / recall", "changed", "adversarial wrong / served"],
              table_rows),
    ])  # fmt: skip
    publish("embed_backends", end, text, not args.no_doc)


if __name__ == "__main__":
    main()
