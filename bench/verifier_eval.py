"""Old guard vs the new verifier, pair by pair, on the held-out parts only.

    python -m bench.verifier_eval              # ~10 min on 2 busy cores; writes docs/benchmarks.md
    python -m bench.verifier_eval --limit 60 --no-doc  # smoke run
    python -m bench.verifier_eval --backend onnx-int8 --compare onnx  # two backends side by side

Held-out data (nothing here was trained or tuned on; see bench/contrast_data.py and
bench/train_verifier.py for the splits):

* **quora**: a seeded sample (seed 12) of the Quora dev pairs' held-out half
  (bench/semantic_pairs.py's grouped split);
* **contrast**: bench/data/contrast_heldout.jsonl (held-out families and domains);
* **adversarial**: the held-out half of bench/data/adversarial_pairs.jsonl;
* **multiturn**: bench/data/multiturn_heldout.jsonl;
* **fresh**, **fresh_multiturn**: bench/data/contrast_fresh.jsonl and multiturn_fresh.jsonl, a
  second held-out set written later in domains, and with words, that no other family has
  (bench/contrast_fresh.py): wording nothing here was trained, calibrated or tuned on;
* **fresh2**, **fresh2_multiturn**: a third such set, written later again in nine more domains
  (bench/contrast_fresh2.py: contrast_fresh2.jsonl, multiturn_fresh2.jsonl);
* **fresh3**, **fresh3_multiturn**: a fourth, written beside the third round of training families
  in nine more domains (bench/contrast_fresh3.py: contrast_fresh3.jsonl, multiturn_fresh3.jsonl);
* **fresh4**, **fresh4_multiturn**: a fifth, written beside the written triplets in nine more
  domains (bench/contrast_fresh4.py: contrast_fresh4.jsonl, multiturn_fresh4.jsonl);
* **fresh5**, **fresh5_multiturn**: a sixth, written beside the second round of written triplets
  in nine more domains (bench/contrast_fresh5.py: contrast_fresh5.jsonl, multiturn_fresh5.jsonl);
* **fresh6**, **fresh6_multiturn**: a seventh, written for the decision about conversations made
  from the first round alone, in nine more domains (bench/contrast_fresh6.py);
* **fresh7**, **fresh7_multiturn**: an eighth, written for the decision about a calibration split
  by whole domains, in nine more domains (bench/contrast_fresh7.py).

A pair is (stored request, new request). Three decisions, side by side:

* **guard alone** (``verifier: off``): cosine of the last user turns >= 0.80 and
  ``Guard.check`` accepting, and (multi-turn) the earlier turns identical, since they are part
  of the exact scope (``context: exact``);
* **guard + veto** (``verifier_role: veto``): the same, unless the cross-encoder's
  probability for the two questions is below the shipped veto threshold;
* **verifier decides** (the default, ``verifier_role: decide``; measured with ``context: verify``): cosine of the compared
  texts (:func:`semantic.keys.compared_text`) >= the verifier's floor, no hard veto, the
  combiner's probability >= its default threshold (2% wrong on the calibration traps) and, for
  two conversations, their context pair passing too (``ResponseCache._same_context``); the
  column "whole pair only" leaves that out (the decision before 2026-12-05); with the
  verifier's model call on ``--backend`` (default: the gateway's ``verifier_backend``), each
  backend with its own calibration (semantic/verifier.py); ``--compare B`` adds the same
  decision on backend B as a fourth column.
Reported: wrong-hit rate (share of must-not-hit pairs that would be served), should-hit rate
(share of equivalent pairs served), precision; and the verifier's latency on this machine.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench import semantic_pairs
from bench.contrast_data import FRESH_SETS
from bench.report import machine, percentile, publish, table
from bench.train_verifier import DATA, SEED, _rows, adversarial_held, conversation_text
from semantic.embedder import Embedder
from semantic.guard import DEFAULT_THRESHOLD, Guard
from semantic.keys import context_question
from semantic.verifier import BACKENDS, CONTEXT_SCORE, PairVerifier

#: The fresh held-out sets' stems (contrast_data.FRESH_SETS): "fresh", "fresh2", ...
FRESH = tuple(stem for stem, *_ in FRESH_SETS)
SETS = ("quora", "contrast", "adversarial", "multiturn",
        *(name for stem in FRESH for name in (stem, f"{stem}_multiturn")))  # fmt: skip
RATES = (0.005, 0.01, 0.02, 0.05)
#: The decisions compared: the guard alone (verifier: off), the guard with the verifier's veto
#: (role "veto"), the combined verifier (role "decide", the default).
DECISIONS = ("old_guard", "guard_veto", "whole_pair", "verifier")
LABELS = {"old_guard": "guard alone", "guard_veto": "guard + veto",
          "whole_pair": "verifier, whole pair only (before 2026-12-05)",
          "verifier": "verifier decides (default)", "compare": "verifier decides"}  # fmt: skip


def load_sets(n_qqp: int, only: tuple[str, ...] = SETS) -> dict[str, list[dict[str, Any]]]:
    """The held-out sets named in ``only``, each as rows: a/b (compared texts), qa/qb (last user
    turns), same, kind, history (the earlier turns are identical)."""
    out: dict[str, list[dict[str, Any]]] = {}
    if "quora" in only:
        a, b, same, _, held = semantic_pairs.read_qqp()
        rows = [i for i in np.flatnonzero(held)]
        pick = sorted(random.Random(SEED).sample(rows, min(n_qqp, len(rows))))
        out["quora"] = [_pair(a[i], b[i], bool(same[i]), "qqp") for i in pick]
    for name, stem in (("contrast", "contrast_heldout"), *((f, f"contrast_{f}") for f in FRESH)):
        if name in only:
            out[name] = [
                _pair(r["a"], r["b"], r["same"], r["kind"]) for r in _rows(DATA / f"{stem}.jsonl")
            ]
    if "adversarial" in only:
        out["adversarial"] = [
            _pair(r["a"], r["b"], r["same"], r["kind"])
            for r in _rows(DATA / "adversarial_pairs.jsonl")
            if adversarial_held(r["a"])
        ]
    for name, stem in (("multiturn", "multiturn_heldout"),
                       *((f"{f}_multiturn", f"multiturn_{f}") for f in FRESH)):  # fmt: skip
        if name in only:
            out[name] = [
                {"a": conversation_text(r["a"]), "b": conversation_text(r["b"]),
                 "qa": r["a"][-1]["content"], "qb": r["b"][-1]["content"], "same": r["same"],
                 "kind": r["kind"], "history": r["a"][:-1] == r["b"][:-1]}
                for r in _rows(DATA / f"{stem}.jsonl")
            ]  # fmt: skip
    return {name: out[name] for name in SETS if name in out}


def evaluate(
    verifier: PairVerifier, n_qqp: int, limit: int | None = None,
    compare: PairVerifier | None = None, only: tuple[str, ...] = SETS,
) -> dict[str, Any]:  # fmt: skip
    """``only``: the sets measured (default all)."""
    embedder, guard = Embedder(), Guard()
    sets = load_sets(n_qqp, only)
    if limit is not None:  # a seeded sample of each set (a shorter run on a busy machine)
        sets = {k: random.Random(SEED).sample(v, min(limit, len(v))) for k, v in sets.items()}
    decisions = DECISIONS + (("compare",) if compare is not None else ())
    result: dict[str, Any] = {"machine": machine(), "cosine_floor": verifier.cosine_floor,
                              "score_threshold": verifier.default_threshold,
                              "vetoes": list(verifier.vetoes), "backend": verifier.backend,
                              "compare": compare and compare.backend, "decisions": decisions}  # fmt: skip
    for name, rows in sets.items():
        t0 = time.monotonic()
        same = np.array([r["same"] for r in rows])
        old = _old_guard(embedder, guard, rows)
        # role "veto": what the guard accepts, unless the verifier turns it down
        accepted = np.flatnonzero(old)
        vetoed = old.copy()
        z = _score(verifier, [(rows[i]["qa"], rows[i]["qb"]) for i in accepted])
        vetoed[accepted] = 1 / (1 + np.exp(-z)) >= verifier.veto_threshold
        ua, ub = semantic_pairs._embed_pairs(
            embedder, [r["a"] for r in rows], [r["b"] for r in rows]
        )
        hits_at = _decider(verifier, rows, ua, ub, embedder)
        hit = {"old_guard": old, "guard_veto": vetoed,
               "whole_pair": hits_at(verifier.default_threshold, whole_pair=True),
               "verifier": hits_at(verifier.default_threshold)}  # fmt: skip
        if compare is not None:
            hit["compare"] = _decider(compare, rows, ua, ub, embedder)(compare.default_threshold)
        kinds = sorted({r["kind"] for r in rows})
        result[name] = {
            "pairs": len(rows), "should_hit": int(same.sum()), "must_not_hit": int((~same).sum()),
            **{label: _rates(hit[label], same) for label in decisions},
            "by_kind": {k: {label: _rates(hit[label][m], same[m]) for label in decisions}
                        for k in kinds for m in [np.array([r["kind"] == k for r in rows])]},
            "operating_points": {
                str(rate): _rates(hits_at(_at(verifier, rate)), same)
                for rate in RATES if verifier.calibration is not None
            },
            "seconds": round(time.monotonic() - t0, 1),
        }  # fmt: skip
        print(name, *(result[name][label] for label in decisions), flush=True)
    # latency on Quora's pairs; with --sets that leaves Quora out, on the first set's
    result["latency_ms"] = _latency(
        embedder, verifier, sets.get("quora") or next(iter(sets.values()))
    )
    return result


def _decider(
    verifier: PairVerifier, rows: list[dict[str, Any]], ua: np.ndarray, ub: np.ndarray,
    embedder: Embedder,
) -> Callable[..., np.ndarray]:  # fmt: skip
    """``hits(threshold, whole_pair=False)`` of role "decide" on ``rows``: the near-duplicate
    rail, or the floor, no hard veto, the verifier's probability at or above ``threshold`` and
    (conversations, unless ``whole_pair``: as before 2026-12-05) the context pair passing
    (:func:`_context_scores`)."""
    cos = np.einsum("ij,ij->i", ua, ub)  # [n]
    signals = [verifier.signals(r["a"], r["b"], ua[i], ub[i], float(cos[i]))
               for i, r in enumerate(rows)]  # fmt: skip
    veto = np.array([verifier.vetoed(s) is not None for s in signals])
    veto |= np.array([not verifier.reads_differences(r["a"], r["b"]) for r in rows], dtype=bool)
    scores = np.zeros(len(rows), dtype=np.float32)
    judged = np.flatnonzero((cos >= verifier.cosine_floor) & ~veto)
    logits = _score(verifier, [(rows[i]["a"], rows[i]["b"]) for i in judged])
    scores[judged] = [
        verifier.probability(signals[i], z) for i, z in zip(judged, logits, strict=True)
    ]
    near = np.array([verifier.near_duplicate(x) for x in signals])
    ok = (cos >= verifier.cosine_floor) & ~veto
    context = _context_scores(verifier, embedder, rows)

    def hits(threshold: float, whole_pair: bool = False) -> np.ndarray:
        same_context = whole_pair | (context >= min(threshold, CONTEXT_SCORE))
        return near | (ok & (scores >= threshold) & same_context)

    return hits


def _context_scores(
    verifier: PairVerifier, embedder: Embedder, rows: list[dict[str, Any]]
) -> np.ndarray:
    """The context pair's score of each row, as ``ResponseCache._same_context`` judges it: the
    earlier user turns the two follow-ups refer to, as two single questions (1.0: the same
    turn, or a side has none; 0.0: vetoed, or below the cosine floor)."""
    pairs = [(context_question(r["a"]), context_question(r["b"])) for r in rows]
    out = np.ones(len(rows), dtype=np.float32)
    todo = [i for i, (a, b) in enumerate(pairs) if a is not None and b is not None and a != b]
    if not todo:
        return out
    ctx = [(str(pairs[i][0]), str(pairs[i][1])) for i in todo]
    ua, ub = semantic_pairs._embed_pairs(embedder, [a for a, _ in ctx], [b for _, b in ctx])
    cos = np.einsum("ij,ij->i", ua, ub)
    signals = [verifier.signals(a, b, ua[j], ub[j], float(cos[j])) for j, (a, b) in enumerate(ctx)]
    logits = _score(verifier, ctx)
    for j, i in enumerate(todo):
        if verifier.near_duplicate(signals[j]):
            continue
        if verifier.vetoed(signals[j]) is not None or cos[j] < verifier.cosine_floor:
            out[i] = 0.0
        else:
            out[i] = verifier.probability(signals[j], float(logits[j]))
    return out


def main(argv: list[str] | None = None) -> str:
    from gateway.config import SemanticCacheConfig

    shipped = SemanticCacheConfig().verifier_backend
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--verifier", type=Path, default=None, help="model directory (default: shipped)")
    p.add_argument("--backend", choices=BACKENDS, default=shipped, help=f"default: {shipped}")
    p.add_argument("--compare", choices=BACKENDS, default=None, help="a second backend beside")
    p.add_argument("--qqp", type=int, default=3000, help="Quora held-out pairs sampled")
    p.add_argument("--limit", type=int, default=None, help="a seeded sample of N rows per set")
    p.add_argument(
        "--sets",
        type=lambda v: tuple(v.split(",")),
        default=SETS,
        help=f"comma-separated sets to measure (default all: {','.join(SETS)})",
    )
    p.add_argument("--no-doc", action="store_true")
    args = p.parse_args(argv)
    if unknown := set(args.sets) - set(SETS):
        p.error(f"unknown sets {sorted(unknown)}")
    verifier = PairVerifier(args.verifier, backend=args.backend)
    compare = args.compare and PairVerifier(args.verifier, backend=args.compare)
    result = evaluate(verifier, args.qqp, args.limit, compare or None, args.sets)
    return publish("verifier_eval", result, markdown(result, args), write_doc=not args.no_doc)


def markdown(r: dict[str, Any], args: argparse.Namespace) -> str:
    decisions = r["decisions"]
    labels = {**LABELS, "verifier": f"verifier decides (default; `{r['backend']}`)",
              "compare": f"verifier decides (`{r['compare']}`)"}  # fmt: skip
    sets = [name for name in SETS if name in r]
    rows = []
    for name in sets:
        s = r[name]
        for label in decisions:
            m = s[label]
            rows.append([name, labels[label], f"{m['wrong_hit_rate']:.1%}",
                         f"{m['should_hit_rate']:.1%}", f"{m['precision']:.3f}",
                         f"{s['should_hit']}/{s['must_not_hit']}"])  # fmt: skip
    kinds = []
    for name in (name for name in sets if name != "quora"):
        for kind, k in r[name]["by_kind"].items():
            should = k["old_guard"]["should"]
            rate = "should_hit_rate" if should else "wrong_hit_rate"
            kinds.append([name, kind, "should hit" if should else "must not hit",
                          *(f"{k[label][rate]:.1%}" for label in decisions)])  # fmt: skip
    points = [[name, rate, f"{m['wrong_hit_rate']:.1%}", f"{m['should_hit_rate']:.1%}",
               f"{m['precision']:.3f}"]
              for name in sets for rate, m in r[name]["operating_points"].items()]  # fmt: skip
    lat = r["latency_ms"]
    return "\n".join(
        [
            "### Verifier vs guard, held-out parts (`python -m bench.verifier_eval`)",
            "",
            f"Command: `python -m bench.verifier_eval --qqp {args.qqp}"
            f"{f' --limit {args.limit}' if args.limit is not None else ''}"
            f"{f' --compare {args.compare}' if args.compare else ''}"
            f"{' --sets ' + ','.join(args.sets) if args.sets != SETS else ''}`; "
            f"backend `{r['backend']}`; "
            "data: bench/data/*_heldout.jsonl, the fresh held-out sets (bench/data/*_fresh*.jsonl) "
            "and the adversarial held-out half (bench/contrast_data.py, seed 12), a seed-12 sample of "
            "the Quora held-out half. Verifier: semantic/verifier/ (bench/train_verifier.py, seed 12); "
            f"cosine floor {r['cosine_floor']}, score threshold {r['score_threshold']}, vetoes "
            f"{r['vetoes'] or 'none'}, conversations compared (context: verify). Guard: cosine 0.80 + "
            "guard, exact history; veto: the cross-encoder on the two questions. "
            f"Machine: {r['machine']}.",
            "",
            table(
                [
                    "set",
                    "",
                    "wrong hits (of must-not-hit)",
                    "should-hit served",
                    "precision",
                    "should/must-not",
                ],
                rows,
            ),
            "",
            "By kind (wrong-hit rate for traps, served rate for should-hit):",
            "",
            table(["set", "kind", "", *(labels[label] for label in decisions)], kinds),
            "",
            f"Verifier (`{r['backend']}`) at other `max_wrong_rate` operating points "
            "(its calibration table):",
            "",
            table(
                ["set", "max_wrong_rate", "wrong hits", "should-hit served", "precision"], points
            ),
            "",
            f"Latency on this machine (p50 / p95 ms): embed one question {lat['embed']}; verifier "
            f"(`{r['backend']}`) "
            f"on 1 pair {lat['verify_1']}, on 3 pairs in one batch {lat['verify_3']}.",
        ]
    )


# ---- helpers ----------------------------------------------------------------------------------


def _pair(a: str, b: str, same: bool, kind: str) -> dict[str, Any]:
    return {"a": a, "b": b, "qa": a, "qb": b, "same": same, "kind": kind, "history": True}


def _old_guard(embedder: Embedder, guard: Guard, rows: list[dict[str, Any]]) -> np.ndarray:
    qa, qb = [r["qa"] for r in rows], [r["qb"] for r in rows]
    ua, ub = semantic_pairs._embed_pairs(embedder, qa, qb)
    cos = np.einsum("ij,ij->i", ua, ub)
    out = np.zeros(len(rows), dtype=bool)
    for i in np.flatnonzero((cos >= DEFAULT_THRESHOLD - 1e-5) & [r["history"] for r in rows]):
        out[i] = guard.check(qb[i], ub[i], qa[i], ua[i], float(cos[i])).accept
    return out


def _score(verifier: PairVerifier, pairs: list[tuple[str, str]]) -> np.ndarray:
    order = np.argsort([len(x) + len(y) for x, y in pairs])
    out = np.empty(len(pairs), dtype=np.float32)
    for i in range(0, len(order), 64):
        idx = order[i : i + 64]
        out[idx] = verifier.logits([pairs[j] for j in idx])
    return out


def _at(verifier: PairVerifier, rate: float) -> float:
    assert verifier.calibration is not None
    return verifier.calibration.threshold_for(rate)


def _rates(hit: np.ndarray, same: np.ndarray) -> dict[str, Any]:
    neg, pos = ~same, same
    return {
        "wrong_hit_rate": float(hit[neg].mean()) if neg.any() else 0.0,
        "should_hit_rate": float(hit[pos].mean()) if pos.any() else 0.0,
        "precision": float((hit & pos).sum() / max(int(hit.sum()), 1)),
        "hits": int(hit.sum()),
        "should": bool(pos.any()) and not neg.any(),
    }


def _latency(
    embedder: Embedder, verifier: PairVerifier, rows: list[dict[str, Any]]
) -> dict[str, str]:
    def timed(fn: Any, n: int = 60) -> str:
        ms = []
        for i in range(n):
            t = time.perf_counter()
            fn(i)
            ms.append(1000 * (time.perf_counter() - t))
        return f"{percentile(ms, 50):.1f} / {percentile(ms, 95):.1f}"

    pairs = [(r["a"], r["b"]) for r in rows[:200]]

    def pair(i: int) -> tuple[str, str]:  # (fewer pairs than calls: round again)
        return pairs[i % len(pairs)]

    return {
        "embed": timed(lambda i: embedder.encode([pair(i)[1] + f" x{i}"])),  # never cached
        "verify_1": timed(lambda i: verifier.score([pair(i)])),
        "verify_3": timed(lambda i: verifier.score([pair(i), pair(i + 1), pair(i + 2)])),
    }


if __name__ == "__main__":
    main()
