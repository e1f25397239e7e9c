"""Experiment: do token-alignment features lift the precision guard? (not shipped)

The guard (hard checks, then an MLP over the sentence vectors and the checks' soft signals) gets
~0.80 held-out precision at recall ~0.54 on the Quora dev pairs; the target is 0.92 at 0.50. A
sentence vector averages its word pieces away; this measures whether BERTScore-style features from
MiniLM's *per-token* outputs (each piece's best cosine with the other question's pieces: means,
idf-weighted means, minima, quantiles, counts below a cut; on all and on content pieces) help.

Protocol as ``bench/guard_tune.py``, with a gradient-boosted classifier: semantic_pairs' grouped
split; pairs with ``cos >= --threshold`` that pass the hard checks; the cut chosen on 5-fold
grouped out-of-fold scores of the train half at recall ``--recall``; held-out precision/recall
at that cut, and the best held-out precision over cuts with recall >= 0.50 ("oracle"). HGB rows
are repeated over ``--seeds``; the token gain is bootstrapped over held-out question groups.

Nothing here is shipped. Run: ``python -m bench.token_align`` (~10 min on 2 cores; the token
vectors are cached under ``--cache``). Not in ``make bench``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.guard_tune import FOLDS, MARGIN, _pick_min_score
from bench.report import command, percentile, publish, run_header, table
from bench.semantic_pairs import Pairs, load_qqp, prf
from semantic._guard_checks import STOPWORDS, analyze, compare
from semantic.embedder import Embedder, default_model_path
from semantic.guard import DEFAULT_THRESHOLD, Guard

CUTS = (0.5, 0.6, 0.7)  # "pieces whose best match is below this" counts
PCA_DIM = 64


def encode_tokens(texts: list[str], cache: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MiniLM's output vectors of every word piece, [CLS]/[SEP] dropped: ``(vecs [T, 384] fp16,
    offsets [len(texts) + 1], vocabulary ids [T])``; text i owns rows ``off[i]:off[i + 1]``."""
    path = token_cache(texts, cache)
    if path.exists():
        with np.load(path) as z:
            return z["vecs"], z["off"], z["ids"]
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(default_model_path(), device="cpu")
    ids = st.tokenizer(texts, truncation=True, max_length=st.max_seq_length)["input_ids"]
    out = st.encode(texts, batch_size=64, output_value="token_embeddings", convert_to_numpy=False)
    pieces = [t[1:-1].numpy().astype(np.float16) for t in out]  # [n_i, 384] each
    assert [len(v) + 2 for v in pieces] == [len(i) for i in ids]
    vecs, off = np.concatenate(pieces), np.cumsum([0] + [len(v) for v in pieces])
    flat_ids = np.concatenate([np.array(i[1:-1], dtype=np.int32) for i in ids])
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, vecs=vecs, off=off, ids=flat_ids)
    return vecs, off, flat_ids


def token_cache(texts: list[str], cache: Path) -> Path:
    return cache / f"tokens-{hashlib.sha256(chr(10).join(texts).encode()).hexdigest()[:16]}.npz"


def unit_rows(vecs: np.ndarray, basis: np.ndarray | None = None, int8: bool = False) -> np.ndarray:
    """Float32 unit rows, optionally projected on ``basis`` [384, k] and stored as int8 (x127)."""
    x = vecs.astype(np.float32) if basis is None else vecs.astype(np.float32) @ basis
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-9)
    if int8:
        x = np.round(x * 127).astype(np.int8).astype(np.float32)
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-9)
    return x


def _one_side(best: np.ndarray, content: np.ndarray, w: np.ndarray) -> list[float]:
    """Stats of each piece's best cosine with the other side [n]: all pieces, then content."""
    s = np.sort(best)
    out = [best.mean(), w @ best / w.sum(), s[0], s[int(0.1 * (len(s) - 1))]]
    out += [s[int(0.25 * (len(s) - 1))], *((best < c).sum() for c in CUTS)]
    bc, wc = best[content], w[content]
    if not len(bc):
        return [*out, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    return [*out, bc.mean(), wc @ bc / wc.sum(), bc.min(), *((bc < c).sum() for c in CUTS)]


def align_features(
    a: np.ndarray, b: np.ndarray, ca: np.ndarray, cb: np.ndarray, wa: np.ndarray, wb: np.ndarray
) -> np.ndarray:
    """33 features of a pair from unit piece vectors a [na, d], b [nb, d], content masks and idf
    weights: each stat's min and max over the two directions, BERTScore F1s, lengths."""
    if not len(a) or not len(b):
        return np.zeros(33, dtype=np.float32)
    sim = a @ b.T  # [na, nb] piece-to-piece cosines
    fa, fb = np.array(_one_side(sim.max(1), ca, wa)), np.array(_one_side(sim.max(0), cb, wb))
    p, r = np.clip(fa[[0, 1, 8]], 1e-6, 1), np.clip(fb[[0, 1, 8]], 1e-6, 1)
    size = [min(len(a), len(b)) / max(len(a), len(b)), abs(len(a) - len(b))]
    out = [np.minimum(fa, fb), np.maximum(fa, fb), 2 * p * r / (p + r), size]
    return np.concatenate(out).astype(np.float32)


def token_features(
    unit: np.ndarray, off: np.ndarray, content: np.ndarray, idf: np.ndarray, ia: Any, ib: Any
) -> tuple[np.ndarray, list[float]]:
    """Features for every pair [n, 33], and the time of each pair's computation (µs)."""
    rows, times = [], []
    for i, j in zip(ia, ib, strict=True):
        sa, sb = slice(off[i], off[i + 1]), slice(off[j], off[j + 1])
        t0 = time.perf_counter()
        rows.append(align_features(unit[sa], unit[sb], content[sa], content[sb], idf[sa], idf[sb]))
        times.append((time.perf_counter() - t0) * 1e6)
    return np.stack(rows), times


def hgb(x: np.ndarray, y: np.ndarray, seed: int) -> Any:
    """The classifier: seed only moves its early-stopping split."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(
        max_iter=400, learning_rate=0.05, l2_regularization=1.0, early_stopping=True,
        validation_fraction=0.15, n_iter_no_change=30, random_state=seed,
    ).fit(x, y)  # fmt: skip


def oracle(score: np.ndarray, gate: np.ndarray, same: np.ndarray, recall: float = 0.5) -> float:
    """Best precision over cuts on ``score`` (among ``gate``) whose recall of ``same`` >= recall."""
    order = np.argsort(-score[gate], kind="stable")
    s, tp = score[gate][order], np.cumsum(same[gate][order])
    n = np.arange(1, len(s) + 1)
    ok = np.r_[s[1:] != s[:-1], True] & (tp >= recall * same.sum())  # cut between distinct scores
    return float((tp / n)[ok].max()) if ok.any() else float("nan")


def held_out(score: np.ndarray, cut: float, gate: np.ndarray, p: Pairs) -> dict[str, float]:
    """Held-out P/R/F1 of ``gate & (score >= cut)``, the cut, and the oracle over the gate."""
    h, y = p.held, p.same
    best = oracle(score[h], gate[h], y[h])
    return {**prf((gate & (score >= cut))[h], y[h]), "cut": cut, "oracle": best}


def cross_validated(
    x: np.ndarray, p: Pairs, passed: np.ndarray, args: argparse.Namespace, seed: int
) -> tuple[dict[str, float], np.ndarray]:
    """guard_tune's protocol with an HGB on ``x``: held-out P/R at the out-of-fold cut, the
    oracle, and the final model's held-out scores [n] (0 outside the gate)."""
    cos, y, train = p.cos, p.same, ~p.held
    pool = train & passed & (cos >= args.threshold - MARGIN)
    gate = passed & (cos >= args.threshold)
    fold, oof = p.group % FOLDS, np.zeros(len(y))
    for k in range(FOLDS):
        model = hgb(x[pool & (fold != k)], y[pool & (fold != k)], seed)
        oof[pool & (fold == k)] = model.predict_proba(x[pool & (fold == k)])[:, 1]
    cut = _pick_min_score(oof, train & gate, y, train, args.recall)
    score = np.zeros(len(y))
    score[gate & p.held] = hgb(x[pool], y[pool], seed).predict_proba(x[gate & p.held])[:, 1]
    return held_out(score, cut, gate, p), score


def piece_weights(ids: np.ndarray, off: np.ndarray, texts: np.ndarray) -> tuple[Any, Any]:
    """Per piece [T]: whether it is content (not a stop word or punctuation), and its idf over
    the given (train-half) texts."""
    from transformers import AutoTokenizer

    vocab = AutoTokenizer.from_pretrained(default_model_path()).get_vocab()  # piece -> id
    is_content = np.zeros(max(vocab.values()) + 1, dtype=bool)
    for piece, k in vocab.items():
        word = piece.removeprefix("##")
        is_content[k] = word not in STOPWORDS and any(c.isalnum() for c in word)
    df = np.zeros(len(is_content))
    for i in texts:
        df[np.unique(ids[off[i] : off[i + 1]])] += 1
    idf = np.log((len(texts) + 1) / (df + 1)) + 1e-3
    return is_content[ids], idf[ids].astype(np.float32)


def bootstrap_gain(
    base: np.ndarray, new: np.ndarray, gate: np.ndarray, p: Pairs, n: int
) -> list[float]:
    """Oracle gain ``new - base`` over resamples of held-out question groups: mean, 2.5%, 97.5%."""
    held = np.flatnonzero(p.held)
    _, inv = np.unique(p.group[held], return_inverse=True)
    members = np.split(held[np.argsort(inv, kind="stable")], np.cumsum(np.bincount(inv))[:-1])
    rng, gains = np.random.default_rng(0), []
    for _ in range(n):
        pick = np.concatenate([members[k] for k in rng.integers(0, len(members), len(members))])
        y = p.same[pick]
        gains.append(oracle(new[pick], gate[pick], y) - oracle(base[pick], gate[pick], y))
    return [float(np.mean(gains)), *np.percentile(gains, [2.5, 97.5]).tolist()]


def shipped_guard(p: Pairs, gate: np.ndarray) -> dict[str, float]:
    """The bundled guard as the gateway runs it (query b, stored a), at its own min_score."""
    guard, score = Guard(), np.zeros(len(p.a))
    for i in np.flatnonzero(gate & p.held):  # outside the gate it rejects anyway
        score[i] = guard.check(p.b[i], p.ub[i], p.a[i], p.ua[i], float(p.cos[i])).score
    return held_out(score, guard.min_score, gate, p)


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    p = load_qqp(Embedder())
    cos, y, held, train = p.cos, p.same, p.held, ~p.held
    signals = [compare(analyze(a), analyze(b)) for a, b in zip(p.a, p.b, strict=True)]
    passed = np.array([not s.failed for s in signals])
    base = np.c_[cos, np.array([s.soft for s in signals])]  # [n, 1 + len(SOFT_FEATURES)]
    gate = passed & (cos >= args.threshold)

    texts = sorted(set(p.a) | set(p.b))
    row = {t: i for i, t in enumerate(texts)}
    ia, ib = np.array([row[t] for t in p.a]), np.array([row[t] for t in p.b])
    t0, cold = time.perf_counter(), not token_cache(texts, args.cache).exists()
    vecs, off, ids = encode_tokens(texts, args.cache)
    encode_s = time.perf_counter() - t0
    train_texts = np.unique(np.r_[ia[train], ib[train]])
    content, idf = piece_weights(ids, off, train_texts)
    tok, times = token_features(unit_rows(vecs), off, content, idf, ia, ib)
    # int8 64-d is what a cache entry could afford; the basis from train-half pieces only.
    train_rows = np.concatenate([np.arange(off[i], off[i + 1]) for i in train_texts])
    sample = vecs[np.random.default_rng(0).choice(train_rows, 60_000, replace=False)]
    basis = np.linalg.svd(sample.astype(np.float32), full_matrices=False)[2][:PCA_DIM].T
    tok8, _ = token_features(unit_rows(vecs, basis, int8=True), off, content, idf, ia, ib)

    cut = _pick_min_score(cos, train, y, train, args.recall)  # no model: the train half's cut
    rows = {
        "raw cosine, no checks": [held_out(cos, cut, np.ones_like(gate), p)],
        "shipped guard (MLP at its min_score)": [shipped_guard(p, gate)],
    }
    variants = {
        "HGB: cos + soft signals": base,
        "HGB: cos + soft + token alignment (fp16 384-d)": np.c_[base, tok],
        f"HGB: cos + soft + token alignment (int8 PCA-{PCA_DIM})": np.c_[base, tok8],
    }
    scores = {}  # seed 0's held-out scores, for the bootstrap
    for name, x in variants.items():
        runs = [cross_validated(x, p, passed, args, seed) for seed in range(args.seeds)]
        rows[name], scores[name] = [m for m, _ in runs], runs[0][1]
        print(name, [round(m["oracle"], 4) for m in rows[name]], flush=True)
    without, with_tokens = list(variants)[:2]
    pieces = np.diff(off)
    return {
        **run_header(),
        "settings": {**vars(args), "cache": str(args.cache)},
        "held_out_pairs": int(held.sum()),
        "held_out_duplicates": int((held & y).sum()),
        "gate_alone": prf(gate[held], y[held]),
        "rows": rows,
        "token_gain": bootstrap_gain(scores[without], scores[with_tokens], gate, p, args.boot),
        "feature_us": {"p50": percentile(times, 50), "p99": percentile(times, 99)},
        "pieces_per_text": {"mean": float(pieces.mean()), "p99": float(np.percentile(pieces, 99))},
        "token_encode_s": encode_s,
        "token_cache": "cold" if cold else "hit",
        "wall_s": time.perf_counter() - started,
    }


def markdown(r: dict[str, Any], cmd: str) -> str:
    s, gain, us, pieces = r["settings"], r["token_gain"], r["feature_us"], r["pieces_per_text"]

    def cell(runs: list[dict[str, float]], key: str) -> str:
        v = np.array([m[key] for m in runs])
        return f"{v.mean():.3f}" + (f" ± {v.std():.3f}" if len(v) > 1 else "")

    keys = ("cut", "precision", "recall", "oracle")
    rows = [[name, *(cell(v, k) for k in keys)] for name, v in r["rows"].items()]
    best = max(np.mean([m["oracle"] for m in v]) for v in r["rows"].values())
    load = "encoding (cold cache)" if r["token_cache"] == "cold" else "loading (cached)"
    noise = "within noise" if gain[1] <= 0 <= gain[2] else "outside resampling noise"
    return f"""## Experiment: token-alignment features for the precision guard

`{cmd}` — {r["machine"]}; code {r["code"]}; {r["wall_s"] / 60:.0f} min in all, \
{r["token_encode_s"]:.0f} s of it {load} the token vectors. Not shipped and not \
in `make bench`: it measures whether BERTScore-style features from MiniLM's per-token outputs \
move the guard toward the precision target (0.92 at recall 0.50).

{r["held_out_pairs"]:,} held-out Quora pairs ({r["held_out_duplicates"]:,} duplicates). Gate: \
cos ≥ {s["threshold"]:.2f} and the hard checks pass (alone: \
P {r["gate_alone"]["precision"]:.3f}, R {r["gate_alone"]["recall"]:.3f}). Cuts: raw cosine at \
train-half recall {s["recall"]:.2f}; \
the shipped guard at its shipped min_score (bench/guard_tune.py: the same protocol, an MLP); \
HGB at out-of-fold train recall {s["recall"]:.2f} (5 grouped folds), mean ± sd over \
{s["seeds"]} seeds. Oracle: the best held-out precision over all cuts with recall ≥ 0.50.

{table(["scorer", "cut", "held-out P at the cut", "R there", "oracle P at R ≥ 0.50"], rows)}

Token features change the oracle precision by {gain[0]:+.3f} (seed 0; 95% interval \
[{gain[1]:+.3f}, {gain[2]:+.3f}] over {s["boot"]} resamples of held-out question groups): \
{noise}. The best oracle precision in the table is {best:.3f}, against the 0.92 target.

Cost: the features take p50 {us["p50"]:.0f} µs, p99 {us["p99"]:.0f} µs a pair (numpy, both \
sides' unit piece vectors in memory; the query's come out of the forward pass that makes its \
sentence vector; the guard's own check is ~0.1 ms). An entry's pieces (mean \
{pieces["mean"]:.1f} a question, p99 {pieces["p99"]:.0f}) take {pieces["mean"] * 768:,.0f} B as \
fp16 384-d, \
{pieces["mean"] * PCA_DIM:,.0f} B as int8 PCA-{PCA_DIM}; its sentence vector takes 1,536 B.
"""


def main(argv: list[str] | None = None) -> str:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cachegate/bench"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="cosine gate")
    parser.add_argument("--recall", type=float, default=0.52, help="out-of-fold train recall")
    parser.add_argument("--seeds", type=int, default=5, help="HGB seeds per row")
    parser.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--cache", type=Path, default=cache, help="token vectors cached here")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)
    result = run(args)
    text = markdown(result, command("token_align", argv))
    return publish("token_align", result, text, not args.no_doc)


if __name__ == "__main__":
    main(sys.argv[1:])
