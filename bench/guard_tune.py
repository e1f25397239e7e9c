"""Train the precision guard's verifier and pick its operating point, on the training half only.

    python -m bench.guard_tune                 # rewrites semantic/guard_weights.npz
    python -m bench.guard_tune --model PATH    # weights for another sentence-transformers model

Steps (deterministic: fixed split, seeds and fold assignment):

1. Quora dev pairs, grouped split (see ``bench/semantic_pairs.py``); only ``train`` is used.
2. The verifier sees what the gateway would show it: pairs with ``cos >= threshold - margin``
   that pass every hard check. Features: ``cos``, ``u*v``, ``|u-v|`` and the checks' soft
   signals (:class:`semantic.guard.Verifier`).
3. 5-fold grouped cross-validation on ``train`` gives out-of-fold probabilities; ``min_score``
   is the largest value whose out-of-fold recall (over *all* train duplicates, at
   ``cos >= threshold`` with the hard checks) stays >= ``--recall``. Choosing on out-of-fold
   scores matters: in-sample scores are optimistic and would overshoot ``min_score``.
4. A final MLP on all of ``train`` is exported with its scaler, ``min_score`` and the metrics.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bench.semantic_pairs import Pairs, load_qqp, prf
from semantic._guard_checks import SOFT_FEATURES, analyze, compare
from semantic.embedder import DEFAULT_MODEL, Embedder
from semantic.guard import DEFAULT_THRESHOLD, DEFAULT_WEIGHTS, Verifier

HIDDEN = 32
ALPHA = 0.1  # L2 penalty: the training half is small (~10k pairs), keep the net smooth
SEED = 0
FOLDS = 5
MARGIN = 0.05  # also train on pairs a little below the threshold (users lower it)


def features(pairs: Pairs) -> tuple[np.ndarray, np.ndarray]:
    """Raw verifier features [n, F] and whether each pair passes the hard checks [n]."""
    cos = pairs.cos
    rows, passed = [], []
    for i in range(len(pairs.a)):
        sig = compare(analyze(pairs.a[i]), analyze(pairs.b[i]))
        rows.append(Verifier.features(pairs.ua[i], pairs.ub[i], float(cos[i]), sig.soft))
        passed.append(not sig.failed)
    return np.stack(rows), np.array(passed)


def fit(x: np.ndarray, y: np.ndarray) -> Verifier:
    from sklearn.neural_network import MLPClassifier

    mean = x.mean(axis=0)
    scale = np.where(x.std(axis=0) > 1e-6, x.std(axis=0), 1.0)
    mlp = MLPClassifier(
        (HIDDEN,), alpha=ALPHA, max_iter=300, early_stopping=True, random_state=SEED
    ).fit((x - mean) / scale, y)
    return Verifier(
        mean=mean.astype(np.float32),
        scale=scale.astype(np.float32),
        w1=mlp.coefs_[0].astype(np.float32),
        b1=mlp.intercepts_[0].astype(np.float32),
        w2=mlp.coefs_[1][:, 0].astype(np.float32),
        b2=float(mlp.intercepts_[1][0]),
    )


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="sentence-transformers model")
    ap.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="cosine gate")
    ap.add_argument("--recall", type=float, default=0.52, help="recall floor on train (OOF)")
    ap.add_argument("--out", type=Path, default=DEFAULT_WEIGHTS)
    args = ap.parse_args(argv)

    pairs = load_qqp(Embedder(args.model))
    x, passed = features(pairs)
    cos, y, train = pairs.cos, pairs.same, ~pairs.held
    pool = train & passed & (cos >= args.threshold - MARGIN)

    # Out-of-fold scores on train, folds by question group (no text shared across folds).
    fold = pairs.group % FOLDS
    oof = np.zeros(len(y))
    for k in range(FOLDS):
        model = fit(x[pool & (fold != k)], y[pool & (fold != k)])
        part = pool & (fold == k)
        oof[part] = model.predict(x[part])
    gated = train & passed & (cos >= args.threshold)
    min_score = _pick_min_score(oof, gated, y, train, args.recall)
    oof_metrics = prf((gated & (oof >= min_score))[train], y[train])

    verifier = fit(x[pool], y[pool])
    meta = {
        "embedding_model": args.model,
        "dim": int(pairs.ua.shape[1]),
        "threshold": args.threshold,
        "min_score": round(min_score, 4),
        "soft_features": list(SOFT_FEATURES),
        "hidden": HIDDEN,
        "alpha": ALPHA,
        "seed": SEED,
        "trained_on": f"qqp_dev train half: {int(pool.sum())} pairs (cos >= "
        f"{args.threshold - MARGIN:.2f}, hard checks passed)",
        "train_oof": {k: round(v, 4) for k, v in oof_metrics.items()},
    }
    verifier = Verifier(
        verifier.mean, verifier.scale, verifier.w1, verifier.b1, verifier.w2, verifier.b2, meta
    )
    verifier.save(args.out)
    report = (
        f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB): threshold {args.threshold}, "
        f"min_score {min_score:.4f}; train out-of-fold P={oof_metrics['precision']:.3f} "
        f"R={oof_metrics['recall']:.3f} F1={oof_metrics['f1']:.3f}"
    )
    return report


def _pick_min_score(
    score: np.ndarray, gated: np.ndarray, y: np.ndarray, train: np.ndarray, recall: float
) -> float:
    """Largest min_score keeping train recall (over all train duplicates) >= ``recall``."""
    need = int(np.ceil(recall * (y & train).sum()))
    pos = np.sort(score[gated & y])[::-1]  # accepted duplicates, best first
    if len(pos) < need:
        return 0.0  # the gate alone is below the recall floor: accept whatever passes it
    return float(pos[need - 1])


if __name__ == "__main__":
    print(main(sys.argv[1:]))
