"""Pair-by-pair evaluation of the semantic tier: thresholds, the precision guard, latency.

Question: "may b be answered with a's stored answer?" For every Quora dev pair (20,000 pairs,
7,366 duplicates; the non-duplicates are hard negatives), a hit is ``cos(a, b) >= threshold``
(guard off) or that *and* ``Guard.check`` accepting (guard on). Precision = share of hits that
are duplicates; recall = share of duplicates that hit.

Honest split: pairs are grouped into connected components of shared question texts and each
component goes, by a hash of its smallest text, to ``train`` or ``held-out``; no question text
appears on both sides. ``bench/guard_tune.py`` fits the guard on ``train`` only; the tables
here are on ``held-out`` (a full-data row is labelled as such: half of it was seen in training).

Also: the adversarial set ``bench/data/adversarial_pairs.jsonl`` (negations, swapped entities,
numbers, units, dates, antonyms, question types, order swaps, with true paraphrases mixed in):
wrong-hit rate on the pairs that must not hit and hit rate on the paraphrases; and the guard's
latency per check.

Run: ``python -m bench.semantic_pairs`` (embeddings are cached under
``$XDG_CACHE_HOME/cachegate/bench``; the first run embeds ~38k texts, a few minutes on 2 cores).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.report import machine, percentile, save_json, table
from semantic.embedder import Embedder
from semantic.guard import DEFAULT_THRESHOLD, Guard

ROOT = Path(__file__).resolve().parents[1]
QQP = ROOT.parent / "shared" / "data" / "qqp_dev.jsonl.gz"
ADVERSARIAL = ROOT / "bench" / "data" / "adversarial_pairs.jsonl"
THRESHOLDS = [round(0.80 + 0.02 * i, 2) for i in range(10)]  # 0.80 … 0.98


@dataclass(frozen=True)
class Pairs:
    """Question pairs with their labels, split and embeddings."""

    a: list[str]
    b: list[str]
    same: np.ndarray  # [n] bool: b may be answered with a's answer
    held: np.ndarray  # [n] bool: held-out half (never used for tuning)
    group: np.ndarray  # [n] int: connected component of shared texts (for grouped folds)
    ua: np.ndarray  # [n, dim] embeddings of a
    ub: np.ndarray  # [n, dim] embeddings of b
    kind: list[str]
    batch: np.ndarray | None = None  # adversarial only: 1 = written with the checks, 2 = after

    @property
    def cos(self) -> np.ndarray:
        return np.einsum("ij,ij->i", self.ua, self.ub)  # [n]


def qqp_path() -> Path:
    return Path(os.environ.get("CACHEGATE_QQP", QQP))


def read_qqp() -> tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray]:
    """The Quora dev pairs as ``(a, b, same, group, held)``, with the grouped split."""
    with gzip.open(qqp_path(), "rt") as f:
        rows = [json.loads(line) for line in f]
    a = [r["a"] for r in rows]
    b = [r["b"] for r in rows]
    group, held = _grouped_split(a, b)
    same = np.array([bool(r["duplicate"]) for r in rows])
    return a, b, same, group, held


def load_qqp(embedder: Embedder) -> Pairs:
    """The Quora dev pairs with a deterministic grouped train/held-out split."""
    a, b, same, group, held = read_qqp()
    ua, ub = _embed_pairs(embedder, a, b)
    return Pairs(a, b, same, held, group, ua, ub, ["qqp"] * len(a))


def load_adversarial(embedder: Embedder, path: Path = ADVERSARIAL) -> Pairs:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    a = [r["a"] for r in rows]
    b = [r["b"] for r in rows]
    ua, ub = _embed_pairs(embedder, a, b)
    n = len(rows)
    same = np.array([bool(r["same"]) for r in rows])
    held = np.ones(n, dtype=bool)
    batch = np.array([int(r.get("batch", 1)) for r in rows])
    return Pairs(a, b, same, held, np.arange(n), ua, ub, [r["kind"] for r in rows], batch)


def guard_verdicts(guard: Guard, pairs: Pairs, mask: np.ndarray | None = None) -> np.ndarray:
    """Guard acceptance per pair [n] (a is the stored question, b the query)."""
    cos = pairs.cos
    out = np.zeros(len(pairs.a), dtype=bool)
    for i in np.flatnonzero(mask if mask is not None else np.ones(len(out), dtype=bool)):
        out[i] = guard.check(pairs.b[i], pairs.ub[i], pairs.a[i], pairs.ua[i], float(cos[i])).accept
    return out


def prf(hit: np.ndarray, same: np.ndarray) -> dict[str, float]:
    tp = int((hit & same).sum())
    p = tp / max(int(hit.sum()), 1)
    r = tp / max(int(same.sum()), 1)
    return {
        "precision": p,
        "recall": r,
        "f1": 2 * p * r / max(p + r, 1e-12),
        "hits": int(hit.sum()),
    }


def main(argv: list[str] | None = None) -> str:
    """Run the evaluation, write bench/results/semantic_pairs.json, return a markdown report."""
    del argv
    embedder = Embedder()
    guard = Guard()
    qqp = load_qqp(embedder)
    adv = load_adversarial(embedder)
    cos = qqp.cos
    accepted = guard_verdicts(guard, qqp, cos >= min(THRESHOLDS[0], DEFAULT_THRESHOLD))
    held, same = qqp.held, qqp.same

    curve = []
    for t in THRESHOLDS:
        off = prf((cos >= t)[held], same[held])
        on = prf(((cos >= t) & accepted)[held], same[held])
        curve.append({"threshold": t, "guard_off": off, "guard_on": on})
    default = {
        split: prf(((cos >= DEFAULT_THRESHOLD) & accepted)[m], same[m])
        for split, m in (("held_out", held), ("train", ~held), ("all", np.ones_like(held)))
    }
    raw_default = prf((cos >= DEFAULT_THRESHOLD)[held], same[held])

    adv_cos = adv.cos
    adv_ok = guard_verdicts(guard, adv)
    adversarial = {}
    for name, hit in (
        ("guard_off", adv_cos >= DEFAULT_THRESHOLD),
        ("guard_on", (adv_cos >= DEFAULT_THRESHOLD) & adv_ok),
    ):
        late = adv.batch == 2
        adversarial[name] = {
            "wrong_hit_rate": float(hit[~adv.same].mean()),
            "paraphrase_hit_rate": float(hit[adv.same].mean()),
            "batch2_wrong_hit_rate": float(hit[~adv.same & late].mean()),
            "batch2_paraphrase_hit_rate": float(hit[adv.same & late].mean()),
            "by_kind": _by_kind(adv, hit),
        }
    rejected: dict[str, int] = {}
    for i in np.flatnonzero((adv_cos >= DEFAULT_THRESHOLD) & ~adv_ok):
        reason = guard.check(adv.b[i], adv.ub[i], adv.a[i], adv.ua[i], float(adv_cos[i])).reason
        rejected[reason] = rejected.get(reason, 0) + 1

    latency = _guard_latency(guard, qqp)
    result: dict[str, Any] = {
        "machine": machine(),
        "data": {
            "pairs": len(qqp.a),
            "held_out_pairs": int(held.sum()),
            "held_out_duplicates": int((held & same).sum()),
            "adversarial_pairs": len(adv.a),
            "adversarial_must_not_hit": int((~adv.same).sum()),
        },
        "default": {
            "threshold": DEFAULT_THRESHOLD,
            "guard_min_score": guard.min_score,
            **default,
            "held_out_guard_off": raw_default,
        },
        "curve_held_out": curve,
        "adversarial": adversarial,
        "adversarial_rejections_by_reason": rejected,
        "guard_latency_us": latency,
    }
    save_json("semantic_pairs", result)
    return _markdown(result)


# ---- helpers ----------------------------------------------------------------------------------


def _grouped_split(a: list[str], b: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Union-find over texts; a component is held out when sha256(its smallest text) is odd."""
    ids: dict[str, int] = {}
    for t in a + b:
        ids.setdefault(t, len(ids))
    parent = list(range(len(ids)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for x, y in zip(a, b, strict=True):
        parent[find(ids[x])] = find(ids[y])
    smallest: dict[int, str] = {}
    for t, i in ids.items():
        r = find(i)
        if r not in smallest or t < smallest[r]:
            smallest[r] = t
    roots = [find(ids[x]) for x in a]
    held = np.array([hashlib.sha256(smallest[r].encode()).digest()[-1] % 2 == 1 for r in roots])
    return np.array(roots), held


def _embed_pairs(embedder: Embedder, a: list[str], b: list[str]) -> tuple[np.ndarray, np.ndarray]:
    texts = sorted(set(a) | set(b))
    digest = hashlib.sha256(("\n".join(texts) + embedder.model_name).encode()).hexdigest()[:16]
    cache_dir = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cachegate/bench"
    path = cache_dir / f"emb-{digest}.npy"
    if path.exists():
        vecs = np.load(path)
    else:
        vecs = np.concatenate(
            [embedder.encode(texts[i : i + 256]) for i in range(0, len(texts), 256)]
        )
        cache_dir.mkdir(parents=True, exist_ok=True)
        np.save(path, vecs)
    row = {t: i for i, t in enumerate(texts)}
    return vecs[[row[t] for t in a]], vecs[[row[t] for t in b]]


def _by_kind(pairs: Pairs, hit: np.ndarray) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for kind in sorted(set(pairs.kind)):
        m = np.array([k == kind for k in pairs.kind])
        out[kind] = {"pairs": int(m.sum()), "hit_rate": float(hit[m].mean())}
    return out


def _guard_latency(guard: Guard, pairs: Pairs, n: int = 2000) -> dict[str, float]:
    """Per-check time over held-out pairs; the query's parse is fresh, as in a real lookup."""
    from semantic._guard_checks import analyze

    idx = np.flatnonzero(pairs.held)[:n]
    analyze.cache_clear()
    for i in idx[:50]:  # warm numpy, not the texts
        guard.check("warm up " + pairs.b[i], pairs.ub[i], pairs.a[i], pairs.ua[i])
    times = []
    for i in idx:
        t0 = time.perf_counter()
        guard.check(pairs.b[i], pairs.ub[i], pairs.a[i], pairs.ua[i])
        times.append((time.perf_counter() - t0) * 1e6)
    return {"p50": percentile(times, 50), "p99": percentile(times, 99), "n": len(times)}


def _markdown(r: dict[str, Any]) -> str:
    d = r["default"]
    rows = []
    for c in r["curve_held_out"]:
        off, on = c["guard_off"], c["guard_on"]
        rows.append(
            [f"{c['threshold']:.2f}"]
            + [f"{off[k]:.3f}" for k in ("precision", "recall", "f1")]
            + [f"{on[k]:.3f}" for k in ("precision", "recall", "f1")]
        )
    curve = table(
        ["cos ≥", "P (off)", "R (off)", "F1 (off)", "P (guard)", "R (guard)", "F1 (guard)"], rows
    )
    split_rows = [
        [name, f"{d[key]['precision']:.3f}", f"{d[key]['recall']:.3f}", f"{d[key]['f1']:.3f}"]
        for name, key in (
            ("held-out, guard off", "held_out_guard_off"),
            ("**held-out, guard on**", "held_out"),
            ("train half (seen in tuning)", "train"),
            ("all 20,000 pairs (half seen)", "all"),
        )
    ]
    adv = r["adversarial"]
    kinds = sorted(adv["guard_on"]["by_kind"])
    adv_rows = [
        [
            k,
            adv["guard_on"]["by_kind"][k]["pairs"],
            f"{adv['guard_off']['by_kind'][k]['hit_rate']:.0%}",
            f"{adv['guard_on']['by_kind'][k]['hit_rate']:.0%}",
        ]
        for k in kinds
    ]
    lat = r["guard_latency_us"]
    return "\n\n".join(
        [
            "## Semantic tier, pair by pair (`python -m bench.semantic_pairs`)",
            f"Machine: {r['machine']}. Quora dev pairs split by question groups: "
            f"{r['data']['held_out_pairs']} held-out pairs "
            f"({r['data']['held_out_duplicates']} duplicates) never used for tuning.",
            f"The guard's setting (what the gateway runs with `verifier: off`): "
            f"cos ≥ {d['threshold']:.2f}, guard on (its learned check's min_score "
            f"{d['guard_min_score']:.2f}). The shipped default adds the cross-encoder verifier: "
            "`python -m bench.verifier_eval` measures it on the same held-out pairs.",
            table(["at the default", "precision", "recall", "F1"], split_rows),
            "Held-out precision/recall/F1 by threshold, guard off vs on:",
            curve,
            f"Adversarial set ({r['data']['adversarial_pairs']} pairs, "
            f"{r['data']['adversarial_must_not_hit']} must not hit) at cos ≥ {d['threshold']:.2f}: "
            f"wrong hits {adv['guard_off']['wrong_hit_rate']:.1%} guard off → "
            f"**{adv['guard_on']['wrong_hit_rate']:.1%}** guard on; paraphrase hits "
            f"{adv['guard_off']['paraphrase_hit_rate']:.1%} → "
            f"{adv['guard_on']['paraphrase_hit_rate']:.1%}. Batch 2 only (written after the "
            f"checks were designed): wrong hits {adv['guard_on']['batch2_wrong_hit_rate']:.1%}, "
            f"paraphrase hits {adv['guard_on']['batch2_paraphrase_hit_rate']:.1%} (guard on).",
            table(["kind", "pairs", "hit rate (off)", "hit rate (guard)"], adv_rows),
            f"Guard latency per check: p50 {lat['p50']:.0f} µs, p99 {lat['p99']:.0f} µs "
            f"({lat['n']} checks, fresh query parse).",
        ]
    )


if __name__ == "__main__":
    print(main(sys.argv[1:]))
