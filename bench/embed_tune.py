"""Experiment: how far fine-tuning the embedder's top layers moves precision (not shipped).

The semantic tier's precision target (0.92 at recall 0.50, pair by pair on the Quora dev split)
is out of reach of the bundled all-MiniLM-L6-v2 plus the guard (0.80 at 0.54 held out). This
measures the next lever the issue allows: fine-tune the top ``--layers`` transformer layers with
a CoSENT ranking loss (every duplicate pair's cosine should exceed every non-duplicate's in the
batch) on the *train* half of semantic_pairs' grouped split, and report raw cosine precision at
recall 0.50 on the *held-out* half, before and after each epoch (train-half figures on a sample
show over-fitting). The layers below stay frozen, so their outputs are computed once.

Nothing it trains is saved or shipped: the gateway keeps the bundled weights.

Run: ``python -m bench.embed_tune`` (~4 min to encode the frozen layers, ~5 min an epoch with
3 layers on 2 cores). Not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
import torch

from bench.report import command, publish, run_header, table
from bench.semantic_pairs import read_qqp
from semantic.embedder import default_model_path

#: Cosines are multiplied by this inside the CoSENT loss (its usual temperature).
_SCALE = 20.0


def precision_at_recall(cos: np.ndarray, same: np.ndarray, recall: float) -> tuple[float, float]:
    """Precision of the highest-cosine pairs that reach ``recall``, and the threshold there."""
    order = np.argsort(-cos)
    true_hits = np.cumsum(same[order])
    k = int(np.searchsorted(true_hits, recall * same.sum())) + 1
    return float(true_hits[k - 1] / k), float(cos[order][k - 1])


class TopLayers:
    """The frozen bottom of the encoder, computed once per text, and the trainable top."""

    def __init__(self, texts: list[str], layers: int) -> None:
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(default_model_path(), device="cpu")
        bert, tokenizer = st[0].auto_model, st.tokenizer
        cut = len(bert.encoder.layer) - layers
        self.top = torch.nn.ModuleList(bert.encoder.layer[cut:])
        self.states: list[torch.Tensor] = []  # [tokens, hidden] per text, below the top
        with torch.inference_mode():
            for start in range(0, len(texts), 128):
                enc = tokenizer(
                    texts[start : start + 128],
                    padding=True,
                    truncation=True,
                    max_length=st.max_seq_length,
                    return_tensors="pt",
                )
                hidden = bert(**enc, output_hidden_states=True).hidden_states[cut]
                for row, n in zip(hidden, enc["attention_mask"].sum(1).tolist(), strict=True):
                    self.states.append(row[:n].clone())

    def encode(self, ids: list[int]) -> torch.Tensor:
        """Mean-pooled, normalised vectors [len(ids), hidden] through the top layers."""
        rows = [self.states[i] for i in ids]
        width = max(r.shape[0] for r in rows)
        x = torch.zeros(len(rows), width, rows[0].shape[1])
        mask = torch.zeros(len(rows), width)
        for j, r in enumerate(rows):
            x[j, : r.shape[0]] = r
            mask[j, : r.shape[0]] = 1
        additive = (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min
        for layer in self.top:
            out = layer(x, attention_mask=additive)
            x = out[0] if isinstance(out, tuple) else out
        pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def cosines(self, ia: list[int], ib: list[int]) -> np.ndarray:
        out = []
        with torch.inference_mode():
            for s in range(0, len(ia), 256):
                out.append((self.encode(ia[s : s + 256]) * self.encode(ib[s : s + 256])).sum(-1))
        return torch.cat(out).numpy()


def cosent_loss(cos: torch.Tensor, same: torch.Tensor) -> torch.Tensor:
    """log(1 + sum over (duplicate i, non-duplicate j) of exp(scale * (cos_j - cos_i)))."""
    diff = _SCALE * (cos[None, :] - cos[:, None])  # [i, j] = cos_j - cos_i
    pairs = same[:, None] & ~same[None, :]
    diff = diff.masked_fill(~pairs, float("-inf"))
    return torch.logsumexp(torch.cat([torch.zeros(1), diff.flatten()]), 0)


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(args.seed)
    a, b, same, _, held = read_qqp()
    texts = sorted(set(a) | set(b))
    index = {t: i for i, t in enumerate(texts)}
    ia = np.array([index[t] for t in a])
    ib = np.array([index[t] for t in b])
    test, train = np.flatnonzero(held), np.flatnonzero(~held)
    sample = train[: args.train_sample]

    started = time.perf_counter()
    model = TopLayers(texts, args.layers)
    frozen_s = time.perf_counter() - started

    def evaluate(epoch: int, seconds: float) -> dict[str, Any]:
        model.top.eval()
        p, t = precision_at_recall(
            model.cosines(ia[test].tolist(), ib[test].tolist()), same[test], args.recall
        )
        p_train, _ = precision_at_recall(
            model.cosines(ia[sample].tolist(), ib[sample].tolist()), same[sample], args.recall
        )
        row = {"epoch": epoch, "held_out_precision": p, "threshold": t, "train_precision": p_train}
        print(f"epoch {epoch}: {row} ({seconds:.0f} s)", flush=True)
        return {**row, "seconds": seconds}

    rows = [evaluate(0, 0.0)]
    optimizer = torch.optim.AdamW(model.top.parameters(), lr=args.lr, weight_decay=0.01)
    rng = np.random.default_rng(args.seed)
    for epoch in range(1, args.epochs + 1):
        model.top.train()
        epoch_started = time.perf_counter()
        order = rng.permutation(train)
        for start in range(0, len(order), args.batch):
            batch = order[start : start + args.batch]
            cos = (model.encode(ia[batch].tolist()) * model.encode(ib[batch].tolist())).sum(-1)
            loss = cosent_loss(cos, torch.from_numpy(same[batch]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        rows.append(evaluate(epoch, time.perf_counter() - epoch_started))
    return {
        **run_header(),
        "settings": vars(args),
        "train_pairs": len(train),
        "held_out_pairs": len(test),
        "frozen_layers_s": frozen_s,
        "epochs": rows,
    }


def markdown(result: dict[str, Any], cmd: str) -> str:
    s = result["settings"]
    rows = [
        [
            r["epoch"] or "— (bundled weights)",
            f"{r['held_out_precision']:.3f}",
            f"{r['threshold']:.3f}",
            f"{r['train_precision']:.3f}",
        ]
        for r in result["epochs"]
    ]
    return "\n".join(
        [
            "## Experiment: fine-tuning the embedder's top layers",
            "",
            f"`{cmd}` — {result['machine']}; code {result['code']}. Not shipped and not in "
            "`make bench`: it measures how far the bundled model can be moved toward the "
            "precision target.",
            "",
            f"The top {s['layers']} of MiniLM's 6 layers trained with a CoSENT loss "
            f"(lr {s['lr']:g}, batch {s['batch']}) on the {result['train_pairs']:,} train-half "
            f"pairs; raw cosine (no guard) precision at recall {s['recall']:.2f} on the "
            f"{result['held_out_pairs']:,} held-out pairs, and on {s['train_sample']:,} "
            "train-half pairs.",
            "",
            table(["epoch", "held-out precision", "threshold there", "train-half precision"], rows),
        ]
    )


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--layers", type=int, default=3, help="top layers to train (of 6)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--recall", type=float, default=0.5)
    parser.add_argument("--train-sample", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)
    result = run(args)
    text = markdown(result, command("embed_tune", argv))
    return publish("embed_tune", result, text, not args.no_doc)


if __name__ == "__main__":
    main(sys.argv[1:])
