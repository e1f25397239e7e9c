"""Hard checks as vetoes, measured on the verifier's CALIBRATION trap pairs only.

    python -m bench.verifier_vetoes [--verifier DIR]     # ~3 min on 2 busy cores

bench/train_verifier.py keeps a hard check (semantic._guard_checks.HARD_CHECKS) as a veto when,
among the calibration pairs the verifier accepts at its 1%-wrong threshold, the check rejects
more wrong pairs than right ones. This compares, on the same calibration trap pairs (contrast,
adversarial, multi-turn; never a held-out part), three choices: the vetoes shipped in
meta.json, no veto, and every hard check as a veto. Each is swept over the score thresholds;
"at equal served share" is the lowest wrong-hit rate of any threshold that serves at least the
share of should-hit pairs the shipped vetoes serve at the default threshold (and 30/50/60%).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from bench.train_verifier import GRID, _cosines, load_pairs
from semantic._guard_checks import HARD_CHECKS, analyze, compare
from semantic.embedder import Embedder
from semantic.verifier import PairVerifier


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--verifier", type=Path, default=None, help="model directory (default: shipped)")
    args = p.parse_args(argv)
    verifier = PairVerifier(args.verifier)
    calib = [x for x in load_pairs("train") if x.calibration and x.source != "qqp"]
    same = np.array([x.same for x in calib])
    source = np.array([x.source for x in calib])
    seen = _cosines(Embedder(), calib) >= verifier.cosine_floor
    scores = np.zeros(len(calib), dtype=np.float32)
    judged = np.flatnonzero(seen)
    for i in range(0, len(judged), 64):
        idx = judged[i : i + 64]
        scores[idx] = verifier.score([(calib[j].a, calib[j].b) for j in idx])
    failed = [set(compare(analyze(x.a), analyze(x.b)).failed) for x in calib]
    choices = {
        f"shipped {list(verifier.vetoes)}": set(verifier.vetoes),
        "none": set(),
        "all hard checks": set(HARD_CHECKS),
    }
    t0 = verifier.default_threshold
    print(f"{len(calib)} calibration trap pairs ({int(same.sum())} should hit), "
          f"floor {verifier.cosine_floor}, default threshold {t0}")  # fmt: skip
    for check in HARD_CHECKS:
        hit = np.array([check in f for f in failed]) & seen & (scores >= t0)
        print(f"  {check}: at {t0} would reject {int((hit & ~same).sum())} wrong, "
              f"{int((hit & same).sum())} right")  # fmt: skip
    for src in ("all traps", "contrast", "adversarial", "multiturn"):
        m = np.ones(len(calib), bool) if src == "all traps" else source == src
        ref = None
        for name, vetoes in choices.items():
            ok = seen & m & ~np.array([bool(f & vetoes) for f in failed])
            curve = [(_rate(ok & (scores >= t), ~same & m), _rate(ok & (scores >= t), same & m))
                     for t in GRID]  # fmt: skip
            w0, s0 = _rate(ok & (scores >= t0), ~same & m), _rate(ok & (scores >= t0), same & m)
            ref = s0 if ref is None else ref
            equal = [min((w for w, s in curve if s >= r - 1e-9), default=float("nan"))
                     for r in (ref, *SERVED)]  # fmt: skip
            print(f"{src:12} {name:28} at {t0}: wrong {w0:.2%} served {s0:.2%}; wrong at "
                  + ", ".join(f"served >= {r:.0%}: {w:.2%}"
                              for r, w in zip((ref, *SERVED), equal, strict=True)))  # fmt: skip


#: Further served shares (of should-hit pairs) at which the choices are compared.
SERVED = (0.3, 0.5, 0.6)


def _rate(hit: np.ndarray, of: np.ndarray) -> float:
    return float((hit & of).sum() / max(int(of.sum()), 1))


if __name__ == "__main__":
    main()
