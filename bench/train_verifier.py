"""Train the shipped verifier (semantic/verifier/): a MiniLM cross-encoder, seed 12, on this CPU.

    nice -n 10 python -m bench.train_verifier            # <= 22 min of training + ~3 min calibration
    python -m bench.train_verifier --max-minutes 2 --out /tmp/v   # a smoke run

Initialised from the bundled all-MiniLM-L6-v2 (the embedder's own weights); the embeddings and
the lower ``6 - --train-layers`` layers stay frozen, the top layers, the pooler and a one-logit
head are trained with binary cross-entropy on (stored, new) text pairs, both orders.

Training data (never any held-out part):

* the Quora dev pairs' training half (bench/semantic_pairs.py's grouped split);
* bench/data/contrast_train.jsonl and multiturn_train.jsonl (bench/contrast_data.py, seed 12;
  conversations rendered by :func:`semantic.keys.compared_text`);
* the training half of bench/data/adversarial_pairs.jsonl (:func:`adversarial_held`).

One eighth of each (by Quora group, by contrast family) is kept out as the **calibration** set:
the cosine pre-filter, the hard vetoes and the calibration table in meta.json are measured on it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import semantic_pairs
from semantic.keys import compared_text

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"
SEED = 12
GRID = [round(0.01 * i, 2) for i in range(1, 100)] + [0.995, 0.998, 0.999]


@dataclass(frozen=True, slots=True)
class Pair:
    a: str  # the stored request's compared text
    b: str  # the new request's
    same: bool
    source: str  # qqp | contrast | multiturn | adversarial
    kind: str
    calibration: bool  # kept out of training


def adversarial_held(a: str) -> bool:
    """The adversarial set's held-out half: sha256 of the stored question is odd."""
    return hashlib.sha256(a.encode()).digest()[-1] % 2 == 1


def conversation_text(messages: list[dict[str, str]]) -> str:
    """A multi-turn row's conversation as the cache compares it (default window)."""
    return compared_text(messages[-1]["content"], messages[:-1], None)


def load_pairs(split: str) -> list[Pair]:
    """``split``: "train" (training + calibration parts) or "heldout" (contrast/multi-turn/
    adversarial held-out parts; Quora's held-out half is read by semantic_pairs itself)."""
    out: list[Pair] = []
    if split == "train":
        a, b, same, group, held = semantic_pairs.read_qqp()
        for i in np.flatnonzero(~held):
            cal = _bucket(str(group[i])) == 0
            out.append(Pair(a[i], b[i], bool(same[i]), "qqp", "qqp", cal))
    for name in ("contrast", "multiturn"):
        for row in _rows(DATA / f"{name}_{split}.jsonl"):
            ta, tb = row["a"], row["b"]
            if name == "multiturn":
                ta, tb = conversation_text(ta), conversation_text(tb)
            cal = split == "train" and _bucket(row["family"]) == 0
            out.append(Pair(ta, tb, row["same"], name, row["kind"], cal))
    for row in _rows(DATA / "adversarial_pairs.jsonl"):
        if adversarial_held(row["a"]) == (split == "heldout"):
            cal = split == "train" and _bucket(row["a"]) == 0
            out.append(Pair(row["a"], row["b"], row["same"], "adversarial", row["kind"], cal))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "semantic" / "verifier")
    p.add_argument("--epochs", type=float, default=2.5)
    p.add_argument("--train-layers", type=int, default=4)
    p.add_argument("--lr", type=float, default=1.5e-4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--max-minutes", type=float, default=22.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--qqp-pairs", type=int, default=3500, help="Quora training pairs sampled")
    p.add_argument("--multiturn-pairs", type=int, default=2000, help="conversation pairs sampled")
    args = p.parse_args(argv)
    import torch

    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    pairs = load_pairs("train")
    train = _sample([x for x in pairs if not x.calibration], args)
    calib = [x for x in pairs if x.calibration]
    print(f"training pairs {len(train)}, calibration pairs {len(calib)}", flush=True)
    tokenizer, model = _init_model(args.train_layers)
    log = _train(model, tokenizer, train, args)
    meta = calibrate(model, tokenizer, calib, args.max_length)
    meta["training"] = {**log, **{k: str(v) for k, v in vars(args).items()}, "seed": SEED}
    _save(model, args.out, meta)


def calibrate(model: Any, tokenizer: Any, calib: list[Pair], max_length: int) -> dict[str, Any]:
    """Cosine floor, vetoes and the calibration table, measured on the calibration pairs."""
    from semantic._guard_checks import analyze, compare
    from semantic.embedder import Embedder

    embedder = Embedder()
    cos = _cosines(embedder, calib)
    same = np.array([x.same for x in calib])
    # the recall-oriented floor: 98% of equivalent calibration pairs pass it
    floor = math.floor(float(np.quantile(cos[same], 0.02)) * 20) / 20
    scores = score_pairs(model, tokenizer, [(x.a, x.b) for x in calib], max_length)
    failed = [set(compare(analyze(x.a), analyze(x.b)).failed) for x in calib]
    seen = cos >= floor
    base_t = _table(scores[seen], same[seen])
    t01 = next((t for t, w in zip(GRID, base_t["wrong_rate"], strict=True) if w <= 0.01), 1.0)
    accepted = seen & (scores >= t01)
    vetoes, veto_stats = [], {}
    from semantic._guard_checks import HARD_CHECKS

    for check in HARD_CHECKS:
        hit = np.array([check in f for f in failed]) & accepted
        caught, lost = int((hit & ~same).sum()), int((hit & same).sum())
        veto_stats[check] = {"wrong_caught": caught, "right_lost": lost}
        if caught > lost:
            vetoes.append(check)
    vetoed = np.array([bool(f & set(vetoes)) for f in failed])
    table = _table(scores[seen & ~vetoed], same[seen & ~vetoed], n_pos=int((seen & same).sum()),
                   n_neg=int((seen & ~same).sum()))  # fmt: skip
    print(f"floor {floor}, vetoes {vetoes} ({veto_stats})", flush=True)
    cal = {"thresholds": GRID, **table}
    default = next((t for t, w in zip(GRID, cal["wrong_rate"], strict=True) if w <= 0.01), 1.0)
    return {"calibration": cal, "cosine_floor": floor, "vetoes": vetoes,
            "veto_measurement": veto_stats, "default_threshold": default,
            "calibration_pairs": {"positives": int((seen & same).sum()),
                                  "negatives": int((seen & ~same).sum())}}  # fmt: skip


def score_pairs(
    model: Any, tokenizer: Any, pairs: list[tuple[str, str]], max_length: int
) -> np.ndarray:
    import torch

    model.eval()
    out = []
    order = np.argsort([len(a) + len(b) for a, b in pairs])
    with torch.inference_mode():
        for i in range(0, len(order), 64):
            rows = [pairs[j] for j in order[i : i + 64]]
            enc = tokenizer([a for a, _ in rows], [b for _, b in rows], truncation="longest_first",
                            max_length=max_length, padding=True, return_tensors="pt")  # fmt: skip
            out.append(torch.sigmoid(model(**enc).logits[:, 0]).numpy())
    scores = np.empty(len(pairs), dtype=np.float32)
    scores[order] = np.concatenate(out) if out else []
    return scores


# ---- helpers ----------------------------------------------------------------------------------


def _sample(train: list[Pair], args: argparse.Namespace) -> list[Pair]:
    """The training pairs used: all contrast and adversarial ones, a seeded sample of the rest
    (this CPU trains ~6 pairs/s; Quora's noisy labels teach little about traps)."""
    rng = random.Random(SEED)
    keep = [x for x in train if x.source in ("contrast", "adversarial")]
    for source, n in (("qqp", args.qqp_pairs), ("multiturn", args.multiturn_pairs)):
        rows = [x for x in train if x.source == source]
        keep += rng.sample(rows, min(n, len(rows)))
    return keep


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _bucket(key: str) -> int:
    return hashlib.sha256(("calibration:" + key).encode()).digest()[0] % 8


def _init_model(train_layers: int) -> tuple[Any, Any]:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from semantic.embedder import default_model_path

    base = default_model_path()
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=1, local_files_only=True
    )
    n_layers = model.config.num_hidden_layers
    for name, param in model.named_parameters():
        layer = _layer_of(name)
        param.requires_grad = layer is None and not name.startswith("bert.embeddings")
        if layer is not None and layer >= n_layers - train_layers:
            param.requires_grad = True
    return tokenizer, model


def _layer_of(name: str) -> int | None:
    parts = name.split(".")
    if "layer" in parts:
        return int(parts[parts.index("layer") + 1])
    return None


def _batches(rng: random.Random, data: list[Pair], batch: int) -> list[list[tuple[str, str, bool]]]:
    """Shuffled, each pair in a random order, grouped by length within windows of 50 batches."""
    rows = [(x.a, x.b, x.same) if rng.random() < 0.5 else (x.b, x.a, x.same) for x in data]
    rng.shuffle(rows)
    out: list[list[tuple[str, str, bool]]] = []
    window = batch * 50
    for i in range(0, len(rows), window):
        chunk = sorted(rows[i : i + window], key=lambda r: len(r[0]) + len(r[1]))
        out.extend(chunk[j : j + batch] for j in range(0, len(chunk), batch))
    rng.shuffle(out)
    return out


def _train(
    model: Any, tokenizer: Any, train: list[Pair], args: argparse.Namespace
) -> dict[str, Any]:
    import torch

    rng = random.Random(SEED)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    steps_per_epoch = math.ceil(len(train) / args.batch)
    total = int(steps_per_epoch * args.epochs)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, s / max(1, total // 20)) * max(0.0, 1 - s / max(total, 1))
    )
    loss_fn = torch.nn.BCEWithLogitsLoss()
    start, step, seen, losses = time.monotonic(), 0, 0, []
    model.train()
    while step < total:
        for rows in _batches(rng, train, args.batch):
            enc = tokenizer([r[0] for r in rows], [r[1] for r in rows], truncation="longest_first",
                            max_length=args.max_length, padding=True, return_tensors="pt")  # fmt: skip
            target = torch.tensor([float(r[2]) for r in rows])
            loss = loss_fn(model(**enc).logits[:, 0], target)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step, seen = step + 1, seen + len(rows)
            losses.append(float(loss.detach()))
            minutes = (time.monotonic() - start) / 60
            if step % 50 == 0:
                print(f"step {step}/{total} loss {np.mean(losses[-50:]):.4f} "
                      f"{seen / (minutes * 60):.1f} pairs/s", flush=True)  # fmt: skip
            if step >= total or minutes > args.max_minutes:
                return {"steps": step, "pairs_seen": seen, "minutes": round(minutes, 1),
                        "final_loss": round(float(np.mean(losses[-50:])), 4)}  # fmt: skip
    return {"steps": step, "pairs_seen": seen}


def _cosines(embedder: Any, pairs: list[Pair]) -> np.ndarray:
    texts = sorted({x.a for x in pairs} | {x.b for x in pairs})
    vecs = np.concatenate([embedder.encode(texts[i : i + 256]) for i in range(0, len(texts), 256)])
    row = {t: i for i, t in enumerate(texts)}
    return np.array([float(vecs[row[x.a]] @ vecs[row[x.b]]) for x in pairs])


def _table(scores: np.ndarray, same: np.ndarray, n_pos: int | None = None,
           n_neg: int | None = None) -> dict[str, list[float]]:  # fmt: skip
    """Wrong-hit rate and recall at each GRID threshold; denominators default to what is given."""
    pos = n_pos if n_pos is not None else int(same.sum())
    neg = n_neg if n_neg is not None else int((~same).sum())
    wrong = [float(((scores >= t) & ~same).sum() / max(neg, 1)) for t in GRID]
    recall = [float(((scores >= t) & same).sum() / max(pos, 1)) for t in GRID]
    return {"wrong_rate": wrong, "recall": recall}


def _save(model: Any, out: Path, meta: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    trained = {
        n: p.detach().half().contiguous() for n, p in model.named_parameters() if p.requires_grad
    }
    save_file(trained, str(out / "delta.safetensors"))
    meta["base"] = "bundled all-MiniLM-L6-v2"
    (out / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    print(f"saved {out} ({sum(t.numel() for t in trained.values())} trained parameters)")


if __name__ == "__main__":
    main()
