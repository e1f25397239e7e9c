"""Train the shipped verifier (semantic/verifier/): a MiniLM cross-encoder, seed 12, on this CPU.

    nice -n 10 python -m bench.train_verifier     # ~8 min caching + ~20 min training + ~3 min
    python -m bench.train_verifier --qqp-pairs 60 --multiturn-pairs 60 --contrast-pairs 120 \
        --epochs 1 --out /tmp/v                   # a smoke run (~2 min)
    python -m bench.train_verifier --calibrate-only --out DIR   # re-measure DIR/meta.json (~3 min)
    python -m bench.train_verifier --families first --epochs 4 --written off --out DIR  # 2026-12-02

The shipped weights (trained 2026-12-06, late): the defaults, ``--families more2 --written on``:
the first training families, the 137 of bench/contrast_more.py, the 180 of
bench/contrast_more2.py and the 1,106 written triplets (calibration families drawn from all of
them): 34 828 training pairs, 69 656 sequences cached in 635 s, 3 epochs (3 267 steps of 32)
in 12.1 min (144 pairs/s, a held-out evaluation alongside), final loss 0.290. They replaced
the weights trained without the triplets (``--written off``: 31 936 pairs, 63 872 sequences
cached in 448 s, 2 994 steps in 21.0 min, final loss 0.270) by a rule written before a fifth
held-out set (bench/contrast_fresh4.py) existed; those had replaced the weights trained
without the third round (``--families more``) by the same kind of rule on a fourth
(bench/contrast_fresh3.py), and those the weights of 2026-12-02 (below; ``--families first
--epochs 4 --written off``) on a second (bench/contrast_fresh.py). Figures and rules:
docs/benchmarks.md, "Verifier vs guard".

Tried and not shipped (2026-12-07, stop 47): ``--written both --written-turns on``, a second round
of 1,090 written triplets (bench/data/written2_train.jsonl, 25 more training topics, fitness to
smart homes) and conversations made from every triplet (:func:`written_conversations`): 43 256
training pairs, 86 512 sequences cached in 468 s, 4 056 steps in 17.2 min (126 pairs/s), final
loss 0.305. On a sixth held-out set written for the decision (bench/contrast_fresh5.py) it
served 18.9% of the paraphrases at 2.6% wrong against the shipped 18.5% at 2.4%, short of the
rule's improvement clause (2 points more served or 0.5 point fewer wrong); its conversations
17.2% at 0.6% against 13.2% at 0.7% (docs/benchmarks.md, "Verifier vs guard").
Then (stop 48) ``--written on --written-turns on``, the first round's conversations alone:
37 635 training pairs, 75 270 sequences cached in 710 s, 3 531 steps, final loss ~0.30. On a
seventh held-out set (bench/contrast_fresh6.py) 20.0% served at 2.9% wrong against 19.9% at
2.7% (one wrong hit past the rule's 0.2 point) and conversations 19.0% at 0.6% against 17.1% at
1.2% (three hits short of its 2 points more served): not shipped either.
Then (stop 49) ``--calibrate-by domain``, the shipped recipe with whole domains kept out for
calibration: 34 834 training pairs, 69 668 sequences cached in 723 s, 3 267 steps, default
threshold 0.86 (0.85 shipped). On an eighth held-out set (bench/contrast_fresh7.py) the same
2.2% wrong at 13.1% served against 9.6%, conversations 0.9% / 9.4% against 1.1% / 11.1%; but
asked 1% / 2% / 5% it made 1.7 / 2.2 / 3.5% against 1.8 / 2.2 / 3.2% (the rule asked for a table
that holds better on new domains, the point of the split) and on Quora 4.9% wrong against 3.8%:
not shipped.

Initialised from the bundled all-MiniLM-L6-v2 (the embedder's own weights); the embeddings and
the lower ``6 - --train-layers`` layers stay frozen, the top layers (2 by default), the pooler and
a one-logit head are trained with binary cross-entropy on (stored, new) text pairs, each epoch in
a random order per pair. Because the frozen part never changes, its output is computed **once**
for every training pair in both orders (one inference pass, length-sorted, kept in memory as
fp16) and each step runs only the top layers forward and backward on length-bucketed batches.

The weights of 2026-12-02 (2 shared CPU cores, other jobs alongside): 14 392 training
pairs (all contrast and adversarial training pairs, adversarial weighted 2x, 7 000 Quora,
2 500 conversations) after the stratified calibration split below, 28 784 sequences cached in
504 s; then 4 epochs, 1 800 steps of 32, 57 568 pairs in 20.7 min = **46.3 pairs/s**; lr 1e-4
(head 1e-3), final loss 0.242. Calibration (1 668 trap pairs past the cosine floor 0.55): 1%
wrong at **0.96**, serving 16% of the should-hit pairs (0.5: 17% wrong, 68% served); no hard
check earns a veto; conversation logit shift -0.39. Held-out (``bench.verifier_eval --qqp 1000
--limit 600``) at 0.96: contrast 3.6% wrong / 17.4% served, adversarial 2.3% / 4.9%, Quora
2.1% / 8.5%, multi-turn 1.0% / 18.7% (the previous weights, calibrated on a split without five
trap kinds, chose 0.48: 10.6% / 51.2%, 14.5% / 69.1%, 15.2% / 67.8%, 0.7% / 47.6%).
Earlier runs: the full-model loop with 4 trained layers ran 13 pairs/s (535 steps in 22 min);
a 3-layer run (lr 2e-4, 2.5 epochs, loss 0.196) fitted training better but did worse on the
calibration traps of the old split, so 2 layers ship.

Training data (never any held-out part):

* the Quora dev pairs' training half (bench/semantic_pairs.py's grouped split);
* bench/data/contrast_train.jsonl and multiturn_train.jsonl (bench/contrast_data.py, seed 12;
  conversations rendered by :func:`semantic.keys.compared_text`), and contrast_more_train.jsonl
  and multiturn_more_train.jsonl (bench/contrast_more.py, seed 13) with ``--families more`` (the
  default) or ``more2`` (which adds bench/contrast_more2.py's ``*_more2_train.jsonl``, seed 17);
* the training half of bench/data/adversarial_pairs.jsonl (:func:`adversarial_held`);
* with ``--written on``: bench/data/written_train.jsonl, 1,106 triplets written by hand on
  2026-12-06 (five people from one brief, 50 topics in 25 training domains: software to
  music; none of the held-out sets' domains, and no distinctive held-out lexicon value, a
  name, a number with its unit or a phrase, in any of them: 144 triplets that had one were
  dropped): a question, a paraphrase worded anew (other structure, few shared words, world
  knowledge such as "century ride" = "100-mile ride", negated equivalents such as "won't
  harm" = "safe for") and a trap that keeps the paraphrase's wording but changes one detail
  (eleven kinds, from negation to unit and intent); see :func:`written_rows`.

About one eighth of every (source, kind) is kept out as the **calibration** set, whole families
at a time (Quora group, contrast or multi-turn family, adversarial stored question; see
:func:`calibration_groups`): kinds rarest first, families in a seeded hash order until an eighth
of the kind's pairs are out. A family split by plain hash (as before) left five trap kinds with
no calibration pair at all, and the default threshold chosen on it did not hold on held-out
traps. Families are few (35 contrast families, one to three trap kinds each), so a rare kind
keeps out more than an eighth: contrast quantity 50%, tier 33%, time and audience ~30%, 20% of
the contrast pairs in all. The cosine pre-filter, the hard vetoes, the conversation logit shift
and the calibration table in meta.json are measured on it. The table and the default threshold
(1% wrong) use the trap sets only (``--calibrate-on traps``: contrast, adversarial, multi-turn):
Quora's "not duplicate" calibration pairs, with their noisy labels, made an earlier table demand
a score of 0.94. Those families are kept out of training but share their domains with trained
ones, while every held-out set is in new domains; there the shipped table's 2% point made
1.0–2.7% wrong hits, above 2% on four of the six sets. ``--calibrate-by domain`` (2026-12-07,
tried in stop 49 and not shipped: its table overshot as much) keeps out whole domains instead (:func:`calibration_domains`; a written
triplet's topic is its domain), Quora and the adversarial pairs as before.
Pairs with earlier turns score on another scale than single questions (their 1%-wrong logits
differed by 2.2 in the previous run, 0.39 in this one), so their logits get a measured shift
(``conversation_shift``, applied by :class:`semantic.verifier.PairVerifier`) and one threshold
serves both.

The int8 backend (``verifier_backend: onnx-int8``) gets its own calibration: the merged model is
exported and quantised exactly as the gateway does it (semantic/_onnx.py), the calibration pairs
are scored by that graph one pair per call, and everything above (floor, vetoes, shift, combiner,
table, veto threshold) is measured again from those scores into ``meta.json`` →
``backends.onnx-int8``, with the graph's logits on the load-check probes (``probe_logits``).
Measured 2026-12-02 on the weights of then, out of fold on the calibration traps at 2% wrong:
float32 serves 26.1% of the should-hit pairs, int8 26.0%; on the weights shipped earlier on
2026-12-06 (their own, harder calibration set): float32 45.3%, int8 44.3%; on the shipped ones
(their own set again, the third round's families in it): float32 40.8%, int8 43.9%.
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
from bench.contrast_data import FOLLOW_UPS, exchange
from semantic._guard_checks import HARD_CHECKS
from semantic.keys import compared_text
from semantic.verifier import INT8, PROBES, CandidateSignals, is_conversation, pair_signals

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"
SEED = 12
GRID = [round(0.01 * i, 2) for i in range(1, 100)] + [0.995, 0.998, 0.999]


@dataclass(frozen=True, slots=True)
class Pair:
    a: str  # the stored request's compared text
    b: str  # the new request's
    same: bool
    source: str  # qqp | contrast | multiturn | adversarial | written
    kind: str
    calibration: bool  # kept out of training


def adversarial_held(a: str) -> bool:
    """The adversarial set's held-out half: sha256 of the stored question is odd."""
    return hashlib.sha256(a.encode()).digest()[-1] % 2 == 1


def conversation_text(messages: list[dict[str, str]]) -> str:
    """A multi-turn row's conversation as the cache compares it (default window)."""
    return compared_text(messages[-1]["content"], messages[:-1], None)


#: ``--written``: the files of written triplets each choice trains on (bench/data/).
WRITTEN = {"off": (), "on": ("written_train",), "both": ("written_train", "written2_train")}

#: ``--families``: the rounds of added training families each choice trains on.
FAMILY_ROUNDS = {"first": (), "more": ("more",), "more2": ("more", "more2")}


def load_pairs(
    split: str,
    rounds: tuple[str, ...] = (),
    written: str = "off",
    turns: bool = False,
    calibrate_by: str = "family",
) -> list[Pair]:
    """``split``: "train" (training + calibration parts) or "heldout" (contrast/multi-turn/
    adversarial held-out parts; Quora's held-out half is read by semantic_pairs itself).
    ``rounds``: in "train", also these rounds of added families (``*_{round}_train.jsonl``:
    "more" is bench/contrast_more.py, "more2" bench/contrast_more2.py). ``written``: in
    "train", also the written triplets (:func:`written_rows`): "on" the first round, "both" the
    second round too (:data:`WRITTEN`); ``turns``: their conversations too
    (:func:`written_conversations`).

    In "train", the calibration pairs are chosen by :func:`calibration_groups`: whole families
    (Quora group, contrast/multi-turn family, adversarial stored question), stratified so that
    every (source, kind) has about an eighth of its pairs kept out. ``calibrate_by="domain"``:
    the contrast, multi-turn and written pairs are kept out by whole domains instead (a
    written triplet's topic is its domain; :func:`calibration_domains`), so that no family
    calibrated on shares a domain with one trained on, as on the held-out sets; Quora and the
    adversarial pairs as before."""
    rows: list[tuple[str, str, bool, str, str, str]] = []  # a, b, same, source, kind, group
    domain_of: dict[tuple[str, str], str] = {}  # (source, group) -> its domain
    if split == "train":
        a, b, same, group, held = semantic_pairs.read_qqp()
        for i in np.flatnonzero(~held):
            kind = "duplicate" if same[i] else "not_duplicate"
            rows.append((a[i], b[i], bool(same[i]), "qqp", kind, str(group[i])))
    added = rounds if split == "train" else ()
    for name in ("contrast", "multiturn"):
        files = [f"{name}_{split}"] + [f"{name}_{r}_train" for r in added]
        for row in (row for stem in files for row in _rows(DATA / f"{stem}.jsonl")):
            ta, tb = row["a"], row["b"]
            if name == "multiturn":
                ta, tb = conversation_text(ta), conversation_text(tb)
            rows.append((ta, tb, row["same"], name, row["kind"], row["family"]))
            domain_of[(name, row["family"])] = row["domain"]
    for row in _rows(DATA / "adversarial_pairs.jsonl"):
        if adversarial_held(row["a"]) == (split == "heldout"):
            rows.append((row["a"], row["b"], row["same"], "adversarial", row["kind"], row["a"]))
    if split == "train":
        triplets = [t for stem in WRITTEN[written] for t in _rows(DATA / f"{stem}.jsonl")]
        rows += written_rows(triplets) + (written_conversations(triplets) if turns else [])
        domain_of |= {("written", t["id"]): t["topic"] for t in triplets}
    cal: set[tuple[str, str]] = set()
    if split == "train" and calibrate_by == "family":
        cal = calibration_groups([(r[3], r[4], r[5]) for r in rows])
    elif split == "train":
        by_domain = [r for r in rows if (r[3], r[5]) in domain_of]
        cal = calibration_groups(
            [(r[3], r[4], r[5]) for r in rows if (r[3], r[5]) not in domain_of]
        )
        held = calibration_domains([domain_of[(r[3], r[5])] for r in by_domain])
        cal |= {sg for sg, domain in domain_of.items() if domain in held}
    return [Pair(ta, tb, s, src, kind, (src, g) in cal) for ta, tb, s, src, kind, g in rows]


def written_rows(triplets: list[dict[str, str]]) -> list[tuple[str, str, bool, str, str, str]]:
    """The pairs of the written triplets (bench/data/written_train.jsonl: a question, a
    paraphrase worded anew, and a trap that keeps the paraphrase's wording but changes one
    detail): (q, para) equivalent, (q, trap) and (para, trap) not, as (a, b, same, source, kind,
    group) rows; a triplet is one family (``id``), so all three are trained or calibrated on."""
    rows = []
    for t in triplets:
        rows += [(t["q"], t["para"], True, "written", "paraphrase", t["id"]),
                 (t["q"], t["trap"], False, "written", t["kind"], t["id"]),
                 (t["para"], t["trap"], False, "written", t["kind"], t["id"])]  # fmt: skip
    return rows


def written_conversations(
    triplets: list[dict[str, str]],
) -> list[tuple[str, str, bool, str, str, str]]:
    """Conversation pairs from the written triplets, rendered as the cache compares them
    (:func:`conversation_text`), in the multi-turn sets' format (bench/contrast_data.py: an
    earlier question, a reply that restates it, a follow-up): the stored conversation asks
    ``q`` then a follow-up; ``reworded_history`` asks ``para`` and a rewording of the
    follow-up (equivalent); ``intent_flip`` asks ``q`` and the follow-up's opposite, and a swap
    asks the trap and the stored follow-up (not equivalent: ``context_swap`` where the trap
    changed a thing or the parties, ``detail_swap`` otherwise; none for ``intent`` traps,
    where an earlier question that asks another thing can leave a follow-up's answer alone).
    The multi-turn families' earlier turns are slot-filled templates; these are written anew.
    Seeded per triplet; rows grouped by its ``id`` with :func:`written_rows`' own."""
    rows = []
    for t in triplets:
        rng = random.Random(f"{SEED}:turns:{t['id']}")
        follows, flipped = rng.choice(FOLLOW_UPS)
        follow = rng.choice(follows)
        stored = _talk(rng, t["q"], follow)
        rows += [(stored, _talk(rng, t["para"], rng.choice(follows)), True, "written",
                  "reworded_history", t["id"]),
                 (stored, _talk(rng, t["q"], rng.choice(flipped)), False, "written", "intent_flip",
                  t["id"])]  # fmt: skip
        if t["kind"] != "intent":
            swap = "context_swap" if t["kind"] in ("entity", "direction") else "detail_swap"
            rows.append((stored, _talk(rng, t["trap"], follow), False, "written", swap, t["id"]))
    return rows


def _talk(rng: random.Random, first: str, follow: str) -> str:
    """:func:`contrast_data.exchange` as the cache compares it."""
    return conversation_text(exchange(rng, first, follow))


def calibration_groups(
    rows: list[tuple[str, str, str]], share: float = 1 / 8
) -> set[tuple[str, str]]:
    """The (source, group) families kept out for calibration, from (source, kind, group) rows.

    Stratified by (source, kind): the kinds are visited rarest first, and within a kind its
    families are taken in a fixed hash order (seeded with SEED) until at least ``share`` of
    that kind's pairs are kept out, counting what families taken for earlier kinds already
    hold. Every kind of every source is so represented, and a family is always whole: all its
    pairs are in calibration or none (no family is both trained on and calibrated on)."""
    count: dict[tuple[str, str], int] = {}
    in_group: dict[tuple[str, str], dict[tuple[str, str], int]] = {}
    for source, kind, group in rows:
        sk, sg = (source, kind), (source, group)
        count[sk] = count.get(sk, 0) + 1
        in_group.setdefault(sk, {})
        in_group[sk][sg] = in_group[sk].get(sg, 0) + 1
    chosen: set[tuple[str, str]] = set()
    for sk in sorted(count, key=lambda k: (count[k], k)):
        kept = sum(n for g, n in in_group[sk].items() if g in chosen)
        for g in sorted(in_group[sk], key=lambda g: _order(*g)):
            if kept >= share * count[sk]:
                break
            if g not in chosen:
                chosen.add(g)
                kept += in_group[sk][g]
    return chosen


def calibration_domains(domains: list[str], share: float = 1 / 8) -> set[str]:
    """The domains kept out for calibration, from the domain of each pair: whole domains in a
    fixed hash order (seeded with SEED) until at least ``share`` of the pairs are kept out."""
    count: dict[str, int] = {}
    for domain in domains:
        count[domain] = count.get(domain, 0) + 1
    chosen: set[str] = set()
    kept = 0
    for domain in sorted(count, key=lambda d: _order("domain", d)):
        if kept >= share * len(domains):
            break
        chosen.add(domain)
        kept += count[domain]
    return chosen


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "semantic" / "verifier")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--train-layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--max-minutes", type=float, default=42.0)
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="stop after this step (the lr schedule still spans --epochs): replays a "
        "run that --max-minutes stopped, independent of the machine's speed",
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--families",
        default="more2",
        choices=list(FAMILY_ROUNDS),
        help="training families: first = the first ones only (the weights of 2026-12-02, with "
        "--epochs 4); more = also the 137 of bench/contrast_more.py; more2 = also the third "
        "round, bench/contrast_more2.py. Pass the same with --calibrate-only",
    )
    p.add_argument("--qqp-pairs", type=int, default=7000, help="Quora training pairs sampled")
    p.add_argument("--multiturn-pairs", type=int, default=2500, help="conversation pairs sampled")
    p.add_argument("--contrast-pairs", type=int, default=100000, help="contrast pairs sampled")
    p.add_argument(
        "--written",
        default="on",
        choices=list(WRITTEN),
        help="on: also train and calibrate on the written triplets (bench/data/written_train.jsonl"
        "); both: and on their second round (written2_train.jsonl, 2026-12-07: not shipped). "
        "Pass the same with --calibrate-only",
    )
    p.add_argument(
        "--written-turns",
        default="off",
        choices=["on", "off"],
        help="on (with --written on or both): also the written triplets' conversations "
        "(written_conversations; 2026-12-07: not shipped). Pass the same with --calibrate-only",
    )
    p.add_argument("--adversarial-weight", type=float, default=2.0, help="loss weight")
    p.add_argument("--head-lr-scale", type=float, default=10.0, help="head lr = lr * this")
    p.add_argument(
        "--calibrate-on",
        default="traps",
        choices=["traps", "all"],
        help="pairs the calibration table and default threshold are measured on: "
        "traps = contrast, adversarial and multi-turn; all = also Quora",
    )
    p.add_argument(
        "--calibrate-by",
        default="family",
        choices=["family", "domain"],
        help="how contrast, multi-turn and written pairs are kept out for calibration: whole "
        "families (stratified by kind), or whole domains, as the held-out sets are "
        "(calibration_domains; tried 2026-12-07, not shipped). Pass the same with --calibrate-only",
    )
    p.add_argument(
        "--calibrate-only",
        action="store_true",
        help="re-measure meta.json for the weights already in --out",
    )
    args = p.parse_args(argv)
    import torch

    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    if args.written_turns == "on" and args.written == "off":
        p.error("--written-turns on needs --written on or both")
    turns = args.written_turns == "on"
    pairs = load_pairs(
        "train", FAMILY_ROUNDS[args.families], args.written, turns, args.calibrate_by
    )
    train = _sample([x for x in pairs if not x.calibration], args)
    calib = [x for x in pairs if x.calibration]
    print(f"training pairs {len(train)}, calibration pairs {len(calib)}", flush=True)
    if args.calibrate_only:  # re-measure the calibration of trained weights in --out
        from semantic.verifier import load_model

        tokenizer, model = load_model(args.out)
        old = json.loads((args.out / "meta.json").read_text())
        meta = calibrate(model, tokenizer, calib, args.max_length, args.calibrate_on)
        meta["backends"] = {INT8: calibrate_int8(model, tokenizer, calib, args)}
        meta["training"] = old["training"]
        meta["training"]["calibrate_on"] = args.calibrate_on
        meta["base"] = old["base"]
        (args.out / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        return
    tokenizer, model = _init_model(args.train_layers)
    log = _train(model, tokenizer, train, args)
    _as_saved(model)  # NOTE: calibrate what ships, float16: int8's probe logits come from it
    meta = calibrate(model, tokenizer, calib, args.max_length, args.calibrate_on)
    meta["backends"] = {INT8: calibrate_int8(model, tokenizer, calib, args)}
    meta["training"] = {**log, **{k: str(v) for k, v in vars(args).items()}, "seed": SEED}
    _save(model, args.out, meta)


def calibrate_int8(
    model: Any, tokenizer: Any, calib: list[Pair], args: argparse.Namespace
) -> dict[str, Any]:
    """:func:`calibrate` on the scores of the int8 graph the gateway runs (``onnx-int8``),
    exported and quantised into a temporary directory, one pair per call as it scores them;
    plus the graph's logits on the load-check probes."""
    import tempfile

    from semantic._onnx import OnnxClassifier

    def one(graph: OnnxClassifier, a: str, b: str) -> float:
        enc = tokenizer([a], [b], truncation="longest_first", max_length=args.max_length,
                        return_tensors="np")  # fmt: skip
        return float(graph(enc)[0])

    print("int8: exporting and quantising the merged model", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        graph = OnnxClassifier.load(model, tokenizer, Path(tmp), int8=True)
        logits = np.array([one(graph, x.a, x.b) for x in calib], dtype=np.float32)
        probes = [one(graph, a, b) for a, b in PROBES]
    meta = calibrate(model, tokenizer, calib, args.max_length, args.calibrate_on, logits=logits)
    return {**meta, "probe_logits": probes}


def calibrate(
    model: Any, tokenizer: Any, calib: list[Pair], max_length: int, on: str = "traps",
    logits: np.ndarray | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Cosine floor, vetoes and the calibration table, measured on the calibration pairs.

    ``on="traps"`` (the default) measures the table, and so the default threshold and every
    ``max_wrong_rate``, on the contrast, adversarial and multi-turn calibration pairs: the
    must-not-hit pairs there are traps by construction, while a Quora "not duplicate" label is
    often a pair whose answers are the same (noisy labels), which made the old table demand a
    score of 0.94 and serve almost nothing. The Quora calibration pairs' own table is kept in
    ``by_source`` for reference either way. ``logits``: the scores to calibrate (another
    backend's, :func:`calibrate_int8`); None: the model's own."""
    from semantic.embedder import Embedder
    from semantic.guard import DEFAULT_THRESHOLD, DEFAULT_WEIGHTS
    from semantic.guard import Verifier as GuardMLP

    mlp = GuardMLP.load(DEFAULT_WEIGHTS)

    embedder = Embedder()
    va, vb = semantic_pairs._embed_pairs(embedder, [x.a for x in calib], [x.b for x in calib])
    cos = np.einsum("ij,ij->i", va, vb)
    signals = [
        pair_signals(x.a, x.b, va[i], vb[i], float(cos[i]), mlp) for i, x in enumerate(calib)
    ]
    same = np.array([x.same for x in calib])
    # the recall-oriented floor: 98% of equivalent calibration pairs pass it
    floor = math.floor(float(np.quantile(cos[same], 0.02)) * 20) / 20
    if logits is None:  # the model's own (torch) logits; else another backend's, given
        logits = score_pairs(model, tokenizer, [(x.a, x.b) for x in calib], max_length, True)
    failed = [set(s.failed) for s in signals]
    used = np.array([on == "all" or x.source != "qqp" for x in calib])
    seen = cos >= floor
    scores = 1 / (1 + np.exp(-logits))
    base_t = _table(scores[seen & used], same[seen & used])
    t01 = next((t for t, w in zip(GRID, base_t["wrong_rate"], strict=True) if w <= 0.01), 1.0)
    accepted = seen & used & (scores >= t01)
    vetoes, veto_stats = [], {}
    for check in HARD_CHECKS:
        hit = np.array([check in f for f in failed]) & accepted
        caught, lost = int((hit & ~same).sum()), int((hit & same).sum())
        veto_stats[check] = {"wrong_caught": caught, "right_lost": lost}
        if caught > lost:
            vetoes.append(check)
    vetoed = np.array([bool(f & set(vetoes)) for f in failed])
    ok = seen & ~vetoed
    # single questions and conversations score on different scales: shift conversations' logits
    # so that the logit giving 1% wrong hits (after the floor and the vetoes) is the same for both
    conv = np.array([is_conversation(x.a, x.b) for x in calib])
    shift = 0.0
    single, multi = ok & used & ~conv, ok & used & conv
    if (single & ~same).any() and (multi & ~same).any():
        shift = _logit_at(logits[single], same[single], 0.01) - _logit_at(
            logits[multi], same[multi], 0.01
        )
    scores = 1 / (1 + np.exp(-(logits + shift * conv)))

    def table_of(m: np.ndarray) -> dict[str, Any]:
        n_pos, n_neg = int((m & seen & same).sum()), int((m & seen & ~same).sum())
        return {"thresholds": GRID, "positives": n_pos, "negatives": n_neg,
                **_table(scores[m & ok], same[m & ok], n_pos=n_pos, n_neg=n_neg)}  # fmt: skip

    cal = table_of(used)
    by_source = {src: table_of(np.array([x.source == src for x in calib]))
                 for src in sorted({x.source for x in calib})}  # fmt: skip
    default = next((t for t, w in zip(GRID, cal["wrong_rate"], strict=True) if w <= 0.01), 1.0)
    print(f"floor {floor}, vetoes {vetoes} ({veto_stats}), default threshold {default}", flush=True)
    for src, t in by_source.items():
        i = GRID.index(default) if default in GRID else len(GRID) - 1
        print(f"  {src}: at {default} wrong {t['wrong_rate'][i]:.3f} recall {t['recall'][i]:.3f}")
    print(f"conversation logit shift {shift:+.3f}", flush=True)
    alone = {"calibration": cal, "calibrated_on": on, "by_source": by_source,
             "vetoes": vetoes, "veto_measurement": veto_stats, "default_threshold": default,
             "calibration_pairs": {"positives": int((seen & used & same).sum()),
                                   "negatives": int((seen & used & ~same).sum())}}  # fmt: skip
    combined = fit_combiner(
        calib, signals, logits + shift * conv, seen, used, embedder.model_name, mlp.min_score
    )
    accepted = ~conv & np.array(
        [s.cosine >= DEFAULT_THRESHOLD - 1e-5 and s.guard_accepts(mlp.min_score) for s in signals]
    )
    veto = fit_veto(logits, same, accepted, used)
    return {**combined, "alone": alone, "veto": veto, "conversation_shift": round(float(shift), 4),
            "cosine_floor": floor}  # fmt: skip


#: Veto choices compared (out of fold, on calibration pairs) when the combiner is fitted: the
#: one serving the most should-hit trap-set pairs at ``DEFAULT_WRONG_RATE`` ships.
VETO_CHOICES = {
    "none": (),
    "all hard checks": HARD_CHECKS,
    "all but question_type": tuple(c for c in HARD_CHECKS if c != "question_type"),
}
#: The default operating point: the issue's wrong-hit target, measured on calibration traps.
DEFAULT_WRONG_RATE = 0.02
#: The combiner's near-duplicate rail (``Combiner.near_duplicate``). The cross-encoder learnt
#: from the contrast sets that a one-word edit is a trap, and doubts trivial rewordings ("What
#: is" / "What's", "How do I" / "How can I"); the guard's hard checks catch the one-word traps.
#: Measured on the calibration pairs with the shipped combiner: at 0.97 the rail adds 2 right
#: hits and 1 wrong one of 1 046 traps; at 0.95, 5 and 5; at 0.98, 2 and 0.
NEAR_COSINE = 0.97


def fit_combiner(
    calib: list[Pair], signals: list[CandidateSignals], logits: np.ndarray, seen: np.ndarray,
    used: np.ndarray, embedding_model: str, guard_min_score: float,
) -> dict[str, Any]:  # fmt: skip
    """Fit :class:`semantic.verifier.Combiner` on the calibration pairs past the floor and the
    vetoes, and measure its calibration table on out-of-fold scores (each fifth of the stored
    questions scored by a combiner fitted on the other four), so that the table is not measured
    on the pairs its weights were fitted to. Each of :data:`VETO_CHOICES` is measured the same
    way; the one serving the most at :data:`DEFAULT_WRONG_RATE` is kept."""
    same = np.array([x.same for x in calib])
    qt = np.array([float("question_type" in s.failed) for s in signals])
    x = np.column_stack([[s.cosine for s in signals], [s.guard_logit for s in signals], qt,
                         logits])  # fmt: skip
    fold = np.array([_order(p.source, p.a)[0] % 5 for p in calib])
    n_pos, n_neg = int((used & seen & same).sum()), int((used & seen & ~same).sum())
    measured: dict[str, Any] = {}
    for name, vetoes in VETO_CHOICES.items():
        ok = seen & ~np.array([bool(set(s.failed) & set(vetoes)) for s in signals])
        prob = np.where(ok, _out_of_fold(x, same, ok, fold), 0.0)
        m = used & ok
        table = {"thresholds": GRID, "positives": n_pos, "negatives": n_neg,
                 **_table(prob[m], same[m], n_pos=n_pos, n_neg=n_neg)}  # fmt: skip
        i = next((i for i, r in enumerate(table["wrong_rate"]) if r <= DEFAULT_WRONG_RATE), -1)
        measured[name] = {"vetoes": list(vetoes), "table": table, "at": i,
                          "served": table["recall"][i] if i >= 0 else 0.0}  # fmt: skip
        print(f"vetoes {name}: out of fold, {measured[name]['served']:.3f} served at "
              f"{DEFAULT_WRONG_RATE:.0%} wrong", flush=True)  # fmt: skip
    best = max(measured.values(), key=lambda m: m["served"])
    ok = seen & ~np.array([bool(set(s.failed) & set(best["vetoes"])) for s in signals])
    w = _logistic(x[ok], same[ok])
    combiner = {"intercept": w[0], "w_cosine": w[1], "w_guard": w[2], "w_question_type": w[3],
                "w_verifier": w[4], "verifier_logit_max": float(logits[ok].max()),
                "embedding_model": embedding_model, "near_cosine": NEAR_COSINE,
                "guard_min_score": guard_min_score}  # fmt: skip
    print(f"combiner {combiner}, vetoes {best['vetoes']}", flush=True)
    return {"combiner": {k: (round(float(v), 5) if k != "embedding_model" else v)
                         for k, v in combiner.items()},
            "calibration": best["table"], "calibrated_on": "traps, out of fold",
            "vetoes": best["vetoes"], "default_threshold": GRID[best["at"]] if best["at"] >= 0 else 1.0,
            "default_wrong_rate": DEFAULT_WRONG_RATE,
            "veto_measurement": {k: round(v["served"], 4) for k, v in measured.items()}}  # fmt: skip


#: Share of the guard's right hits (calibration, single questions) the veto keeps.
VETO_KEEPS = 0.95


def fit_veto(
    logits: np.ndarray, same: np.ndarray, accepted: np.ndarray, used: np.ndarray
) -> dict[str, Any]:
    """The cross-encoder's veto threshold (role ``veto``): the probability that keeps
    :data:`VETO_KEEPS` of the equivalent calibration pairs the guard accepts, and what that
    does to the guard's wrong hits on the calibration traps (one number, chosen by a rule)."""
    prob = 1 / (1 + np.exp(-logits))
    threshold = round(float(np.quantile(prob[accepted & same], 1 - VETO_KEEPS)), 4)
    kept = accepted & (prob >= threshold)
    traps, right = used & ~same, accepted & same
    out = {"threshold": threshold, "keeps": VETO_KEEPS,
           "trap_wrong_rate": [float(accepted[traps].mean()), float(kept[traps].mean())],
           "right_hits": [int(right.sum()), int((kept & same).sum())],
           "wrong_hits": [int((accepted & ~same).sum()), int((kept & ~same).sum())]}  # fmt: skip
    print(f"veto: threshold {threshold}; calibration traps served {out['trap_wrong_rate']}, "
          f"right hits {out['right_hits']}, wrong hits {out['wrong_hits']}", flush=True)  # fmt: skip
    return out


def _out_of_fold(x: np.ndarray, same: np.ndarray, ok: np.ndarray, fold: np.ndarray) -> np.ndarray:
    """Each fold's combined probability from a combiner fitted on the other folds' ``ok`` pairs."""
    z = np.zeros(len(x))
    for k in np.unique(fold):
        w = _logistic(x[ok & (fold != k)], same[ok & (fold != k)])
        z[fold == k] = w[0] + x[fold == k] @ w[1:]
    return 1 / (1 + np.exp(-np.clip(z, -30, 30)))


def _logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-2, iters: int = 30) -> np.ndarray:
    """Logistic regression by Newton's method: ``[intercept, *weights]``; L2 on the weights."""
    x1 = np.column_stack([np.ones(len(x)), x])
    w = np.zeros(x1.shape[1])
    reg = np.eye(len(w)) * l2
    reg[0, 0] = 0.0
    for _ in range(iters):
        p = 1 / (1 + np.exp(-np.clip(x1 @ w, -30, 30)))
        grad = x1.T @ (p - y) + reg @ w
        hess = x1.T @ (x1 * (p * (1 - p))[:, None]) + reg
        w = w - np.linalg.solve(hess, grad)
    return w


def _logit_at(logits: np.ndarray, same: np.ndarray, rate: float) -> float:
    """The lowest logit at which at most ``rate`` of the non-equivalent pairs score at or above."""
    neg = np.sort(logits[~same])[::-1]
    k = math.floor(rate * len(neg))  # this many may pass
    return float(neg[k]) + 1e-4 if k < len(neg) else float(neg[-1]) if len(neg) else 0.0


def score_pairs(
    model: Any, tokenizer: Any, pairs: list[tuple[str, str]], max_length: int,
    logits: bool = False,
) -> np.ndarray:  # fmt: skip
    """Probabilities (or raw logits) of the model itself, no conversation shift."""
    import torch

    model.eval()
    out = []
    order = np.argsort([len(a) + len(b) for a, b in pairs])
    with torch.inference_mode():
        for i in range(0, len(order), 64):
            rows = [pairs[j] for j in order[i : i + 64]]
            enc = tokenizer([a for a, _ in rows], [b for _, b in rows], truncation="longest_first",
                            max_length=max_length, padding=True, return_tensors="pt")  # fmt: skip
            z = model(**enc).logits[:, 0]
            out.append((z if logits else torch.sigmoid(z)).numpy())
    scores = np.empty(len(pairs), dtype=np.float32)
    scores[order] = np.concatenate(out) if out else []
    return scores


# ---- helpers ----------------------------------------------------------------------------------


def _sample(train: list[Pair], args: argparse.Namespace) -> list[Pair]:
    """The training pairs used: all contrast, adversarial and written ones, a seeded sample of the rest
    (this CPU trains ~6 pairs/s; Quora's noisy labels teach little about traps)."""
    rng = random.Random(SEED)
    keep = [x for x in train if x.source in ("adversarial", "written")]
    for source, n in (("qqp", args.qqp_pairs), ("multiturn", args.multiturn_pairs),
                      ("contrast", args.contrast_pairs)):  # fmt: skip
        rows = [x for x in train if x.source == source]
        keep += rng.sample(rows, min(n, len(rows)))
    return keep


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _order(source: str, group: str) -> bytes:
    """A family's place in the calibration draw: a hash seeded with SEED."""
    return hashlib.sha256(f"calibration:{SEED}:{source}:{group}".encode()).digest()


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


def _tokenize(
    tokenizer: Any, pairs: list[tuple[str, str]], max_length: int
) -> list[tuple[list[int], list[int]]]:
    """(input_ids, token_type_ids) of each pair, unpadded."""
    enc = tokenizer([a for a, _ in pairs], [b for _, b in pairs], truncation="longest_first",
                    max_length=max_length)  # fmt: skip
    return list(zip(enc["input_ids"], enc["token_type_ids"], strict=True))


def _mask(lengths: list[int], width: int) -> Any:
    """Additive attention mask ``[b, 1, 1, width]``: 0 on tokens, a large negative on padding."""
    import torch

    keep = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]  # [b, width]
    return ((~keep).float() * torch.finfo(torch.float32).min)[:, None, None, :]


def frozen_states(
    model: Any, seqs: list[tuple[list[int], list[int]]], frozen: int, batch: int = 64
) -> list[Any]:
    """The frozen part's output for each sequence: embeddings, then layers ``[0, frozen)``, run
    once (inference, length-sorted batches, no padding kept): fp16 ``[len, hidden]`` each."""
    import torch

    bert = model.bert
    out: list[Any] = [None] * len(seqs)
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i][0]))
    with torch.inference_mode():
        for i in range(0, len(order), batch):
            idx = order[i : i + batch]
            width = max(len(seqs[j][0]) for j in idx)
            ids = torch.zeros(len(idx), width, dtype=torch.long)
            types = torch.zeros(len(idx), width, dtype=torch.long)
            for r, j in enumerate(idx):
                ids[r, : len(seqs[j][0])] = torch.tensor(seqs[j][0])
                types[r, : len(seqs[j][1])] = torch.tensor(seqs[j][1])
            lengths = [len(seqs[j][0]) for j in idx]
            h = bert.embeddings(input_ids=ids, token_type_ids=types)
            mask = _mask(lengths, width)
            for layer in bert.encoder.layer[:frozen]:
                h = _run_layer(layer, h, mask)
            for r, j in enumerate(idx):
                out[j] = h[r, : lengths[r]].to(torch.float16).clone()
    return out


def _run_layer(layer: Any, h: Any, mask: Any) -> Any:
    out = layer(h, attention_mask=mask)
    return out[0] if isinstance(out, tuple) else out


def top_logits(model: Any, states: list[Any], frozen: int) -> Any:
    """The trained part on cached frozen states: layers ``[frozen, n)``, pooler, head."""
    import torch

    lengths = [int(s.shape[0]) for s in states]
    width = max(lengths)
    h = torch.zeros(len(states), width, states[0].shape[1])
    for r, s in enumerate(states):
        h[r, : lengths[r]] = s.float()
    mask = _mask(lengths, width)
    for layer in model.bert.encoder.layer[frozen:]:
        h = _run_layer(layer, h, mask)
    pooled = model.bert.pooler(h)
    return model.classifier(model.dropout(pooled))[:, 0]


def _batches(
    rng: random.Random, n: int, lengths: list[int], batch: int
) -> list[list[tuple[int, int]]]:
    """One epoch: every training pair once, in a random order (a, b) or (b, a), shuffled,
    grouped by length within windows of 50 batches (little padding). Items: (pair, order)."""
    rows = [(i, int(rng.random() < 0.5)) for i in range(n)]
    rng.shuffle(rows)
    out: list[list[tuple[int, int]]] = []
    window = batch * 50
    for i in range(0, len(rows), window):
        chunk = sorted(rows[i : i + window], key=lambda r: lengths[2 * r[0] + r[1]])
        out.extend(chunk[j : j + batch] for j in range(0, len(chunk), batch))
    rng.shuffle(out)
    return out


def _train(
    model: Any, tokenizer: Any, train: list[Pair], args: argparse.Namespace
) -> dict[str, Any]:
    """Embeddings and the lower layers are frozen, so their output is computed once for every
    training pair in both orders (one inference pass) and each step runs only the top
    ``--train-layers`` layers, the pooler and the head, forward and backward."""
    import torch

    rng = random.Random(SEED)
    n_layers = model.config.num_hidden_layers
    frozen = n_layers - args.train_layers
    t0 = time.monotonic()
    seqs = _tokenize(tokenizer, [p for x in train for p in ((x.a, x.b), (x.b, x.a))],
                     args.max_length)  # fmt: skip
    states = frozen_states(model, seqs, frozen)
    lengths = [len(s[0]) for s in seqs]
    cache_s = time.monotonic() - t0
    print(f"cached layers 0-{frozen - 1} for {len(seqs)} sequences ({sum(lengths)} tokens) "
          f"in {cache_s:.0f} s ({len(seqs) / cache_s:.0f} sequences/s)", flush=True)  # fmt: skip
    target = torch.tensor([float(x.same) for x in train])
    weight = torch.tensor([args.adversarial_weight if x.source == "adversarial" else 1.0
                           for x in train])  # fmt: skip
    params = [p for p in model.parameters() if p.requires_grad]
    head = [p for n, p in model.named_parameters() if p.requires_grad and "classifier" in n]
    body = [p for n, p in model.named_parameters() if p.requires_grad and "classifier" not in n]
    opt = torch.optim.AdamW(
        [{"params": body, "lr": args.lr}, {"params": head, "lr": args.lr * args.head_lr_scale}],
        weight_decay=0.01,
    )
    steps_per_epoch = math.ceil(len(train) / args.batch)
    total = int(steps_per_epoch * args.epochs)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, s / max(1, total // 20)) * max(0.0, 1 - s / max(total, 1))
    )
    start, step, seen, losses = time.monotonic(), 0, 0, []
    model.train()
    minutes = 0.0
    while step < total and minutes <= args.max_minutes and step != args.max_steps:
        for rows in _batches(rng, len(train), lengths, args.batch):
            idx = [2 * i + o for i, o in rows]
            logits = top_logits(model, [states[j] for j in idx], frozen)
            pick = torch.tensor([i for i, _ in rows])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, target[pick], weight=weight[pick]
            )
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step, seen = step + 1, seen + len(rows)
            losses.append(float(loss.detach()))
            minutes = (time.monotonic() - start) / 60
            if step % 100 == 0:
                print(f"step {step}/{total} epoch {seen / len(train):.2f} "
                      f"loss {np.mean(losses[-100:]):.4f} {seen / (minutes * 60):.1f} pairs/s",
                      flush=True)  # fmt: skip
            if step >= total or minutes > args.max_minutes or step == args.max_steps:
                break
    model.eval()
    return {"steps": step, "pairs_seen": seen, "epochs_done": round(seen / len(train), 2),
            "minutes": round(minutes, 1), "cache_seconds": round(cache_s),
            "pairs_per_s": round(seen / max(minutes * 60, 1e-9), 1),
            "final_loss": round(float(np.mean(losses[-100:])), 4)}  # fmt: skip


def _table(scores: np.ndarray, same: np.ndarray, n_pos: int | None = None,
           n_neg: int | None = None) -> dict[str, list[float]]:  # fmt: skip
    """Wrong-hit rate and recall at each GRID threshold; denominators default to what is given."""
    pos = n_pos if n_pos is not None else int(same.sum())
    neg = n_neg if n_neg is not None else int((~same).sum())
    wrong = [float(((scores >= t) & ~same).sum() / max(neg, 1)) for t in GRID]
    recall = [float(((scores >= t) & same).sum() / max(pos, 1)) for t in GRID]
    return {"wrong_rate": wrong, "recall": recall}


def _as_saved(model: Any) -> None:
    """Round the trained parameters to float16 and back, as :func:`_save` stores them. The
    int8 graph quantises what it is given: calibrated on the float32 weights, the shipped ones'
    probe logits differed from the recorded ones by 0.23 (tolerance 0.05), and the gateway fell
    back to float32 onnx until ``--calibrate-only`` measured them again."""
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.half().float()


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
