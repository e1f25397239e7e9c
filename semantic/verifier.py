"""The answer-equivalence verifier: a cross-encoder that reads the stored and the new request together.

Cosine similarity of two sentence embeddings cannot tell "Is it safe to take ibuprofen with
alcohol?" from "... dangerous ...", nor "send money from Alice to Bob" from "from Bob to Alice":
the vectors are dominated by the topic. A cross-encoder attends across both texts, so it sees the
one word that changes the answer. The semantic tier therefore uses the cosine only as a
recall-oriented pre-filter (``cache.semantic.threshold``) and lets this model decide:

    >>> verifier = PairVerifier()                     # the shipped weights (semantic/verifier/)
    >>> verifier.score([("Is the pharmacy open on Sunday?", "Is the pharmacy closed on Sunday?")])
    array([0.02], dtype=float32)                      # P(the stored answer fits the new request)
    >>> verifier.calibration.threshold_for(0.01)      # score giving <= 1% wrong hits (calibrated)

The shipped model is all-MiniLM-L6-v2 (the bundled embedder's weights) with its top layers and
a classifier head fine-tuned by ``python -m bench.train_verifier``; only the tensors training
changed are shipped (``delta.safetensors``, fp16), and the rest is read from the bundled
embedder at load time. ``meta.json`` holds the calibration table (measured on pairs kept out of
training), the hard checks kept as vetoes, the conversation logit shift (pairs with earlier turns
score on another scale than single questions; the shift, added to their logit, makes one
threshold mean the same wrong-hit rate for both), and how it was trained. Any Hugging Face
sequence-classification directory with one output logit works as well (``path=``); without a
``meta.json`` it has no calibration, so give it a score threshold.

Texts are compared as :func:`semantic.keys.compared_text` renders them: the question, then the
recent earlier turns, so a conversation's context is part of what is judged; the cache also
judges two conversations' context pair on its own (:data:`CONTEXT_SCORE`).

Backends (``backend=``, ``cache.semantic.verifier_backend``): "torch" (eager PyTorch), "onnx"
(ONNX Runtime, float32) or "onnx-int8" (the same graph with int8 weights). The onnx backends
export the merged classifier (the bundled weights with the delta applied) once, as
``[pairs, tokens] -> [pairs]`` raw logits, into ``<export_dir>/verifier-<digest>/model.onnx``
(and ``model.int8.onnx``; semantic/_onnx.py; the digest covers the verifier's files, the base
model and the export format). Only the model call changes: tokenisation, the conversation shift
and the sigmoid are the same for all. At load the probe pairs (:data:`PROBES`) are scored:
float32 against torch (within :data:`AGREEMENT`), int8 against the logits recorded when its
calibration was measured (``meta.json`` → ``backends.onnx-int8.probe_logits``, within
:data:`INT8_AGREEMENT`). A graph that still disagrees after one re-export, or cannot be made,
is not used: int8 falls back to float32 onnx, float32 to torch, with a warning (``backend`` says
which runs, ``fallback`` why).

int8 moves the cross-encoder's logits (mean |Δ| ~0.4 on contrast pairs, whose logits spread
±3), so it has its own combiner, calibration table, veto threshold and conversation shift,
measured by ``python -m bench.train_verifier --calibrate-only`` on the same calibration pairs
from its own scores and stored under ``meta.json`` → ``backends.onnx-int8``; with it loaded,
those replace the float32 ones. Its activations are quantised per call over the whole input, so
it scores one pair per call: a pair's score never depends on its batch-mates or their padding.
A verifier directory without that entry cannot run int8 and runs float32 onnx. For one pair,
ONNX Runtime skips most of torch's per-module overhead, and int8 halves it again:
docs/benchmarks.md (verifier section) has the timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .keys import has_turns

if TYPE_CHECKING:
    from ._onnx import OnnxClassifier

__all__ = [
    "AGREEMENT",
    "BACKENDS",
    "CONTEXT_SCORE",
    "DEFAULT_PATH",
    "INT8",
    "INT8_AGREEMENT",
    "PROBES",
    "Calibration",
    "CandidateSignals",
    "Combiner",
    "PairVerifier",
    "VerifierBusy",
    "is_conversation",
    "pair_signals",
]

log = logging.getLogger(__name__)

#: A pair waiting for the verifier's worker: (stored, new, the future of its logit).
_Queued = tuple[str, str, asyncio.Future[float]]

DEFAULT_PATH = Path(__file__).with_name("verifier")
"""The shipped verifier (package data): ``delta.safetensors`` + ``meta.json``."""

#: How the model call runs: "torch" (eager), "onnx" (ONNX Runtime, float32) or "onnx-int8"
#: (ONNX Runtime, int8 weights, with its own calibration).
BACKENDS = ("torch", "onnx", "onnx-int8")
#: Largest |logit difference| from torch allowed on the probe pairs at load (float32 ONNX
#: Runtime measured 2e-6 on them, 1.2e-5 at most on 60 contrast pairs; a wrong or stale graph
#: is off by far more).
AGREEMENT = 1e-3
#: Largest |logit difference| allowed between the int8 graph's probe logits and those recorded
#: with its calibration. The same graph on the same kind of CPU reproduces them exactly; a CPU
#: whose int8 kernels round otherwise (e.g. without VNNI) can be off by more, and its scores
#: would not match the calibration table, so it runs float32.
INT8_AGREEMENT = 0.05
#: The combiner's score the context pair of two conversations needs at most (the lookup's
#: threshold when that is lower): the earlier user turns their follow-ups refer to, judged as
#: two single questions (``ResponseCache._same_context``). Chosen on the multi-turn training
#: set (bench/data/multiturn_train.jsonl, onnx-int8, threshold 0.85): the lowest score at which
#: context swaps served fell to their least (1.1% -> 0.4%; detail swaps 2.3% -> 1.0%) while
#: should-hit conversations served fell from 47.2% to 42.0% (0.85: 37.7%; raising the whole
#: pair's threshold to reach the same wrong hits, 0.9, served 34.5%): docs/benchmarks.md.
CONTEXT_SCORE = 0.7
#: The key under ``meta.json`` → ``backends`` holding int8's calibration.
INT8 = "onnx-int8"
#: Pairs scored at load to check an exported graph (one pair per call).
PROBES = (
    ("How do I reset my password?", "How can I reset my password?"),
    ("Is it safe to fly a drone over Paris?", "Is it illegal to fly a drone over Paris?"),
    (
        "And the price? || user: Flights from Toronto to Rome in May",
        "And the cost? || assistant: Economy or business? | user: Plane tickets to Rome in May",
    ),
    ("tax", "What is the boiling point of water at 2000 metres, in degrees Celsius?"),
)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Measured operating points: at score threshold ``thresholds[i]``, a fraction
    ``wrong_rate[i]`` of non-equivalent candidates is served and ``recall[i]`` of equivalent ones.

    Measured on calibration pairs (kept out of training) that pass the cosine pre-filter, after
    the hard vetoes, i.e. on what the verifier sees in the cache.
    """

    thresholds: tuple[float, ...]
    wrong_rate: tuple[float, ...]
    recall: tuple[float, ...]

    def threshold_for(self, max_wrong_rate: float) -> float:
        """The lowest score threshold whose measured wrong-hit rate is at most ``max_wrong_rate``.

        NOTE: ``wrong_rate`` falls as the threshold rises (checked at load), so the first
        threshold that meets the target serves the most right answers.
        """
        for t, w in zip(self.thresholds, self.wrong_rate, strict=True):
            if w <= max_wrong_rate:
                return t
        return 1.0  # nothing measured meets it: serve nothing semantically

    def rate_at(self, threshold: float) -> float:
        """The measured wrong-hit rate at ``threshold`` (that of the highest row at or below it;
        below the table: its first row)."""
        i = max(0, int(np.searchsorted(self.thresholds, threshold, side="right")) - 1)
        return self.wrong_rate[i]

    def stricter(self, threshold: float) -> float:
        """One step stricter than ``threshold``: the lowest threshold above it whose measured
        wrong-hit rate is at most half the one at ``threshold``; 1.0 (serve nothing
        semantically) when that rate is 0 already or no row halves it. Used by auto-tighten.

        >>> cal = Calibration((0.5, 0.7, 0.9), (0.08, 0.03, 0.0), (0.9, 0.7, 0.4))
        >>> cal.stricter(0.5), cal.stricter(0.7), cal.stricter(0.9)
        (0.7, 0.9, 1.0)
        """
        rate = self.rate_at(threshold)
        # (the rates fall as thresholds rise: every row at or below ``threshold`` has ``rate``
        # or more, so the lowest row meeting half of it lies above ``threshold``)
        return self.threshold_for(rate / 2) if rate > 0 else 1.0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        cal = cls(tuple(d["thresholds"]), tuple(d["wrong_rate"]), tuple(d["recall"]))
        if list(cal.thresholds) != sorted(cal.thresholds) or len(cal.thresholds) != len(
            cal.wrong_rate
        ):
            raise ValueError("calibration table: thresholds must be ascending, one rate each")
        # a measured table can wiggle by one pair; make it monotone so threshold_for is exact
        rates = np.minimum.accumulate(np.asarray(cal.wrong_rate, dtype=float))
        return cls(cal.thresholds, tuple(float(r) for r in rates), cal.recall)


@dataclass(frozen=True, slots=True)
class CandidateSignals:
    """What the cache knows of a (stored, new) pair before the cross-encoder runs."""

    cosine: float  # the index's similarity of the two compared texts
    failed: tuple[str, ...]  # the hard checks that fail (semantic._guard_checks)
    guard_logit: float  # logit of the guard's MLP over the two vectors (0.0: no MLP)
    conversation: bool = False  # either text carries earlier turns (:func:`is_conversation`)

    def guard_accepts(self, min_score: float) -> bool:
        """Whether the precision guard passes the pair: no hard check fails and its MLP's
        probability is at least ``min_score`` (the cosine threshold is the caller's)."""
        return not self.failed and _sigmoid(self.guard_logit) >= min_score


@dataclass(frozen=True, slots=True)
class Combiner:
    """A logistic combination of the cross-encoder with the cheap signals the cache already has.

    ``P(hit) = sigmoid(intercept + w_cos * cosine + w_guard * guard_logit + w_qt * question_type
    + w_verifier * verifier_logit)``, fitted on the calibration pairs by
    ``python -m bench.train_verifier`` (its calibration table is measured on out-of-fold scores).
    The cross-encoder alone cannot tell new kinds of traps from paraphrases; the guard's MLP and
    the cosine carry what it misses (measured in docs/benchmarks.md). ``verifier_logit_max`` is
    the highest cross-encoder logit seen in calibration: a pair that cannot reach the threshold
    even with it is rejected without running the cross-encoder (:meth:`can_reach`).
    ``embedding_model``: the embedder whose cosines and guard MLP the weights were fitted with;
    with another one the combiner is not used.
    """

    intercept: float
    w_cosine: float
    w_guard: float
    w_question_type: float
    w_verifier: float
    verifier_logit_max: float
    embedding_model: str
    #: The near-duplicate rail: a pair at or above this cosine that passes every hard check and
    #: the guard's MLP (``guard_min_score``) is served without the cross-encoder, which was
    #: taught that one-word edits are traps and doubts trivial rewordings ("What is" / "What's").
    near_cosine: float = 1.01
    guard_min_score: float = 0.5

    def near_duplicate(self, s: CandidateSignals) -> bool:
        """Whether the pair is a single question's trivial rewording that the guard vouches for
        (in a conversation a one-word change of the context is the trap)."""
        return (
            s.cosine >= self.near_cosine
            and not s.conversation
            and s.guard_accepts(self.guard_min_score)
        )

    def logit(self, signals: CandidateSignals, verifier_logit: float) -> float:
        return self._cheap(signals) + self.w_verifier * verifier_logit

    def probability(self, signals: CandidateSignals, verifier_logit: float) -> float:
        return _sigmoid(self.logit(signals, verifier_logit))

    def can_reach(self, signals: CandidateSignals, threshold: float) -> bool:
        """Whether the cross-encoder could lift this pair to ``threshold`` (else skip it)."""
        best = self._cheap(signals) + max(self.w_verifier, 0.0) * self.verifier_logit_max
        return threshold <= 0.0 or best >= _logit(threshold)

    def _cheap(self, s: CandidateSignals) -> float:
        qt = 1.0 if "question_type" in s.failed else 0.0
        return (
            self.intercept
            + self.w_cosine * s.cosine
            + self.w_guard * s.guard_logit
            + self.w_question_type * qt
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Combiner:
        numbers = {k: float(v) for k, v in d.items() if k != "embedding_model"}
        return cls(embedding_model=str(d["embedding_model"]), **numbers)


def pair_signals(
    stored: str, new: str, stored_vec: np.ndarray, new_vec: np.ndarray, cosine: float,
    guard_mlp: Any = None,
) -> CandidateSignals:  # fmt: skip
    """A pair's :class:`CandidateSignals`; ``guard_mlp`` (``semantic.guard.Verifier``) None: no
    guard logit (0.0)."""
    from ._guard_checks import analyze, compare

    checks = compare(analyze(stored), analyze(new))
    guard = 0.0
    if guard_mlp is not None:
        guard = _logit(guard_mlp.score(new_vec, stored_vec, cosine, checks.soft))
    return CandidateSignals(cosine, checks.failed, guard, is_conversation(stored, new))


def _sigmoid(z: float) -> float:
    return float(1.0 / (1.0 + np.exp(-np.clip(z, -30.0, 30.0))))


def _logit(p: float) -> float:
    p = min(max(p, 1e-7), 1 - 1e-7)
    return float(np.log(p / (1 - p)))


class PairVerifier:
    """Score (stored, new) text pairs: ``P(the stored answer also answers the new request)``.

    ``path``: the shipped verifier (None) or a model directory. ``max_length``: tokens read of
    a pair (longer pairs lose the end of each text first: the oldest context turns).
    ``backend``: "torch", "onnx" or "onnx-int8" (see the module docstring), exported into
    ``export_dir`` (default: the embedder's, ``$XDG_CACHE_HOME/cachegate/models``). Thread-safe;
    :meth:`verify` gathers concurrent calls from the event loop into one job for the verifier's
    own worker thread: one forward pass (int8: one pass per pair, in that one job).
    :meth:`verify_background` (the audit's answer pairs) waits until no such call does.
    A live call may bound its wait for the worker (``max_wait``, as the embedder's callers
    do): past it, :class:`VerifierBusy`.
    """

    #: The cross-encoder combined with the cosine and the guard's signals (None: alone).
    combiner: Combiner | None

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        max_length: int = 128,
        num_threads: int = 1,
        backend: str = "torch",
        export_dir: str | Path | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"verifier backend must be one of {', '.join(BACKENDS)}: {backend!r}")
        self.path = Path(path) if path is not None else DEFAULT_PATH
        self.max_length = max_length
        self.meta: dict[str, Any] = _read_meta(self.path)
        self._configure(self.meta)
        self._guard_mlp: Any = None
        if self.combiner is not None:
            from .guard import DEFAULT_WEIGHTS, Verifier

            self._guard_mlp = Verifier.load(DEFAULT_WEIGHTS)
        self._tokenizer, self._model = load_model(self.path)
        #: The tokenizer of :meth:`reads_differences`, on the event loop: a fast tokenizer's
        #: truncation is a setting of its own, which two threads must not change at once.
        self._reader = copy.deepcopy(self._tokenizer)
        self._lock = threading.Lock()
        self._num_threads = num_threads
        self._pending: list[_Queued] = []
        self._background: list[_Queued] = []
        self._running = False
        #: When the first live pair queued behind a busy worker joined ``_pending`` (None: none
        #: waits so): a pair that would join a queue older than its ``max_wait`` is refused.
        self._waiting_since: float | None = None
        #: The backend in use: the one asked for, or the next one when it could not be loaded
        #: ("onnx-int8" → "onnx" → "torch").
        self.backend = "torch"
        #: Why the asked-for backend is not in use ("" when it is).
        self.fallback = ""
        self._onnx: OnnxClassifier | None = None
        if backend == INT8:
            self._open_int8(export_dir)
        if backend != "torch" and self._onnx is None:
            self._open_onnx(export_dir)

    def use_embedder(self, model_name: str) -> None:
        """The cache's embedder: with another one than the combiner was fitted with, the
        cross-encoder decides alone, on its own calibration (``meta["alone"]``)."""
        if self.combiner is None or self.combiner.embedding_model == model_name:
            return
        fitted = self.combiner.embedding_model
        self.combiner = None
        self._decision(self.meta.get("alone", {}))
        # NOTE: say what it costs: without the combiner (and its near-duplicate rail) the
        # cross-encoder's own calibrated threshold turns down most plain rewordings
        log.warning(
            "verifier: its combiner was fitted with embedder %s, not %s: the cross-encoder "
            "decides alone, on its own calibration (default score threshold %.2f, vetoes: %s, "
            "no near-duplicate rail), and serves far fewer paraphrases; "
            "cache.semantic.verifier_threshold or max_wrong_rate trade them against wrong hits",
            fitted,
            model_name,
            self.default_threshold,
            ", ".join(self.vetoes) or "none",
        )

    def signals(
        self, stored: str, new: str, stored_vec: np.ndarray, new_vec: np.ndarray, cosine: float
    ) -> CandidateSignals:
        """The hard checks and (with the combiner) the guard MLP's logit for one pair."""
        mlp = self._guard_mlp if self.combiner is not None else None
        return pair_signals(stored, new, stored_vec, new_vec, cosine, mlp)

    def vetoed(self, signals: CandidateSignals) -> str | None:
        """The first failed hard check that vetoes the pair (None: the models decide)."""
        return next((name for name in signals.failed if name in self.vetoes), None)

    def can_reach(self, signals: CandidateSignals, threshold: float) -> bool:
        """Whether running the cross-encoder could give this pair ``threshold``."""
        return self.combiner is None or self.combiner.can_reach(signals, threshold)

    def reads_differences(self, stored: str, new: str) -> bool:
        """Whether the model reads every difference of a (stored, new) pair.

        A pair longer than ``max_length`` tokens loses the end of each text (the oldest earlier
        turns first), which the model never sees: two conversations that differ only there
        would be judged the same. Such a pair is judged only when what is cut off is the same
        in both texts, from the start of the turn each is cut in (the cuts may fall a token
        apart). A tokenizer without character offsets cannot tell: a cut pair is not judged.
        """
        reader = self._reader
        if len(reader(stored, new)["input_ids"]) <= self.max_length:
            return True
        if not reader.is_fast:
            return False
        pair = reader(stored, new, truncation="longest_first", max_length=self.max_length,
                      return_offsets_mapping=True)  # fmt: skip
        read = [0, 0]  # characters of each text the model reads
        for text, (_, end) in zip(pair.sequence_ids(), pair["offset_mapping"], strict=True):
            if text is not None:
                read[text] = max(read[text], end)
        return _unread(stored, read[0]) == _unread(new, read[1])

    def near_duplicate(self, signals: CandidateSignals) -> bool:
        """Whether the combiner's near-duplicate rail serves this pair without the model."""
        return self.combiner is not None and self.combiner.near_duplicate(signals)

    def probability(self, signals: CandidateSignals, verifier_logit: float) -> float:
        """P(hit) of a pair: the combiner's, or the cross-encoder's own."""
        if self.combiner is None:
            return _sigmoid(verifier_logit)
        return self.combiner.probability(signals, verifier_logit)

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """The cross-encoder's own probabilities ``[n]`` float32 (see :meth:`logits`)."""
        return (1.0 / (1.0 + np.exp(-self.logits(pairs)))).astype(np.float32)

    def logits(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Logits ``[n]`` float32 for ``pairs`` of (stored, new) texts (:meth:`raw_logits`),
        with the conversation shift applied."""
        logits = self.raw_logits(pairs)
        if self.conversation_shift and len(pairs):
            conv = np.array([is_conversation(a, b) for a, b in pairs], dtype=np.float32)
            logits = logits + conv * np.float32(self.conversation_shift)
        return logits

    def raw_logits(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """The model's own logits ``[n]`` float32, no conversation shift: one batch (an int8
        graph: one pair a call, since its activations are scaled per call). What the load
        checks compare on :data:`PROBES` (``bench.train_verifier`` records int8's)."""
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        with self._lock:
            if self._onnx is not None and self._onnx.int8:
                rows = [self._logits(self._tokenize([pair])) for pair in pairs]
                return np.concatenate([r.numpy() for r in rows]).astype(np.float32)
            return np.asarray(self._logits(self._tokenize(pairs)).numpy(), dtype=np.float32)

    async def verify(self, stored: str, new: str, *, max_wait: float | None = None) -> float:
        """The cross-encoder's own probability for one pair (see :meth:`verify_logit`)."""
        return _sigmoid(await self.verify_logit(stored, new, max_wait=max_wait))

    async def verify_logit(self, stored: str, new: str, *, max_wait: float | None = None) -> float:
        """The cross-encoder's logit for one pair, computed off the event loop; concurrent calls
        share one forward pass.

        ``max_wait`` (seconds): raise :class:`VerifierBusy` rather than wait longer for the
        worker to start on the pair (a pass that has started is waited for). Refused at once
        when the pairs queued behind the worker have waited longer already.
        """
        return await self._queued(self._pending, stored, new, max_wait)

    async def verify_background(self, stored: str, new: str) -> float:
        """The cross-encoder's own probability for one pair that no request waits for (the
        audit's two answers), scored only while no :meth:`verify_logit` call waits, alone.

        NOTE: an audit's answers fill ``max_length`` and a batch is padded to its longest
        pair: in a live batch one would make the whole pass several times longer (a live
        pair alone 13-16 ms, batched with an audit's pair 85-125 ms on 2 shared cores:
        docs/observability.md, "The semantic audit"). Alone and one at a time, a live pair
        that arrives meanwhile waits for one such pass at most, never for a queue of them.
        """
        return _sigmoid(await self._queued(self._background, stored, new))

    # -- helpers ---------------------------------------------------------------------------

    def _logits(self, batch: dict[str, Any]) -> Any:
        """The model's raw logits ``[n]`` (float32 torch tensor) for a tokenised batch."""
        import torch

        onnx = self._onnx
        if onnx is not None:
            return torch.from_numpy(onnx(batch))
        with torch.inference_mode():
            return self._model(**batch).logits[:, 0].float()

    def _tokenize(self, pairs: Sequence[tuple[str, str]]) -> Any:
        """A padded batch of (stored, new) pairs, each cut to ``max_length`` tokens."""
        return self._tokenizer(
            [a for a, _ in pairs],
            [b for _, b in pairs],
            truncation="longest_first",
            max_length=self.max_length,
            padding=True,
            return_tensors="pt",
        )

    def _open_int8(self, export_dir: str | Path | None) -> None:
        """Load the int8 graph with its own calibration, or say why not (float32 onnx next)."""
        overlay = self.meta.get("backends", {}).get(INT8)
        if overlay is None:
            why = "has no int8 calibration in meta.json (bench.train_verifier --calibrate-only)"
        else:
            expected = np.asarray(overlay["probe_logits"], dtype=np.float32)
            self._onnx, why = self._load_graph(export_dir, True, expected, INT8_AGREEMENT)
        if self._onnx is not None:
            self.backend = INT8
            self._configure({**self.meta, **overlay})
            return
        self.fallback = f"{INT8} {why}"
        log.warning("verifier: %s; using float32 onnx", self.fallback)

    def _open_onnx(self, export_dir: str | Path | None) -> None:
        """Load (exporting first if needed) the float32 onnx graph, checked against torch."""
        self._onnx, why = self._load_graph(export_dir, False, self.raw_logits(PROBES), AGREEMENT)
        if self._onnx is not None:
            self.backend = "onnx"
        else:
            self.fallback = "; ".join(filter(None, (self.fallback, f"onnx {why}")))
            log.warning("verifier: %s; using the torch backend", self.fallback)

    def _load_graph(
        self, export_dir: str | Path | None, int8: bool, expected: np.ndarray, tolerance: float
    ) -> tuple[OnnxClassifier | None, str]:
        """The exported graph whose probe logits are within ``tolerance`` of ``expected``."""
        from ._onnx import OnnxClassifier, graph_file, load_checked, verifier_export_name
        from .embedder import _default_export_dir

        base = Path(_bundled()) if (self.path / "delta.safetensors").exists() else None
        where = Path(export_dir) if export_dir is not None else _default_export_dir()
        directory = where / verifier_export_name(self.path, base)
        name = graph_file("int8" if int8 else None)

        def disagreement(onnx: OnnxClassifier) -> str:
            self._onnx = onnx
            diff = float(np.max(np.abs(self.raw_logits(PROBES) - expected)))
            self._onnx = None
            return "" if diff <= tolerance else f"logits differ by {diff:.2g}"

        return load_checked(
            lambda: OnnxClassifier.load(
                self._model, self._tokenizer, directory, int8=int8, threads=self._num_threads
            ),
            disagreement,
            lambda: (directory / name).unlink(missing_ok=True),
        )

    async def _queued(
        self, queue: list[_Queued], stored: str, new: str, max_wait: float | None = None
    ) -> float:
        """Queue a pair in ``queue`` (live or background) and wait for its logit (at most
        ``max_wait`` for the worker to start on it: see :meth:`_bound`)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[float] = loop.create_future()
        if max_wait is not None and self._running:  # (an idle worker starts on it at once)
            self._bound(loop, future, max_wait)
        queue.append((stored, new, future))
        if not self._running:
            self._running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await future

    def _bound(
        self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[float], max_wait: float
    ) -> None:
        """Bound the wait of a live pair queued behind the busy worker: refused at once
        (:class:`VerifierBusy`) when the pairs queued so have waited past ``max_wait`` already
        (they all start together, with the next pass: it would wait longer still), else it
        gives up after ``max_wait`` unless the worker has taken it by then.

        NOTE: one timer, no await: the pair's future fails when the timer finds it still in
        the queue it joined (the worker takes the whole queue at once, leaving a new list).
        """
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
        elif now - self._waiting_since > max_wait:
            raise VerifierBusy(f"the verifier's queue is older than {max_wait:.3f} s")
        loop.call_later(max_wait, self._expire, self._pending, future, max_wait)

    def _expire(self, queue: list[_Queued], future: asyncio.Future[float], max_wait: float) -> None:
        """A bounded pair's ``max_wait`` is over: it gives up if the worker has not taken it
        (it is then skipped, never scored)."""
        if queue is self._pending and not future.done():
            future.set_exception(VerifierBusy(f"no verifier worker within {max_wait:.3f} s"))

    async def _drain(self) -> None:
        """Score every live pair waiting, as one batch; only when none waits, one background
        pair, then look at the live queue again. A pair nothing waits for any more (its lookup
        was cancelled: the client left; its audit was) is skipped, never scored."""
        try:
            while self._pending or self._background:
                if self._pending:
                    jobs, self._pending = self._pending, []
                    self._waiting_since = None
                else:
                    jobs = [self._background.pop(0)]
                jobs = [job for job in jobs if not job[2].done()]
                if jobs:
                    await self._score(jobs)
        finally:
            self._running = False

    async def _score(self, jobs: list[_Queued]) -> None:
        """One pass over ``jobs`` in the worker thread; each waiter gets its logit."""
        try:
            scores = await asyncio.to_thread(self._score_in_worker, [j[:2] for j in jobs])
        except Exception as exc:  # every waiter sees the failure
            for *_, fut in jobs:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (*_, fut), s in zip(jobs, scores, strict=True):
            if not fut.done():
                fut.set_result(float(s))

    def _score_in_worker(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        import torch

        torch.set_num_threads(self._num_threads)
        return self.logits(pairs)

    def _configure(self, meta: dict[str, Any]) -> None:
        """What ``meta.json`` (or the int8 backend's part of it) sets: the combiner, the
        decision, the veto threshold, the cosine floor and the conversation shift."""
        self.meta = meta
        self.combiner = Combiner.from_dict(meta["combiner"]) if "combiner" in meta else None
        self._decision(meta)
        #: The cross-encoder's probability below which it vetoes what the guard accepted.
        self.veto_threshold = float(meta.get("veto", {}).get("threshold", 0.5))
        #: Cosine pre-filter the calibration was measured with.
        self.cosine_floor = float(meta.get("cosine_floor", 0.5))
        #: Added to the logit of a conversation pair (see :func:`is_conversation`) so that one
        #: threshold means the same wrong-hit rate for single questions and conversations.
        self.conversation_shift = float(meta.get("conversation_shift", 0.0))

    def _decision(self, meta: dict[str, Any]) -> None:
        """Calibration table, default threshold and vetoes of the decision in use."""
        self.calibration: Calibration | None = (
            Calibration.from_dict(meta["calibration"]) if "calibration" in meta else None
        )
        #: Hard checks (semantic._guard_checks) that veto a pair before the model runs.
        self.vetoes: tuple[str, ...] = tuple(meta.get("vetoes", ()))
        #: Score threshold chosen at training time (used when neither YAML knob is given).
        self.default_threshold = float(meta.get("default_threshold", 0.5))


class VerifierBusy(Exception):
    """The verifier's worker could not start on a pair within the caller's ``max_wait``."""


def _unread(text: str, read: int) -> str:
    """``text`` from the start of the turn (:func:`semantic.keys.compared_text`'s separators)
    where its first ``read`` characters end; all of it when they end in the question."""
    start = max(text.rfind(" | ", 0, read + 3), text.rfind(" || ", 0, read + 4))
    return text[start:] if start >= 0 else text


def is_conversation(a: str, b: str) -> bool:
    """Whether a pair carries earlier turns (:func:`semantic.keys.compared_text`'s separator).

    NOTE: " || " alone is no separator: a single question may hold it (``a || b`` in code), and
    such a pair was read as a conversation (no near-duplicate rail, the conversation shift).
    """
    return has_turns(a) or has_turns(b)


def load_model(path: Path) -> tuple[Any, Any]:
    """(tokenizer, model) of a verifier directory: a delta over the bundled MiniLM, or a full
    sequence-classification model. Never downloads (the files must be local)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    delta = path / "delta.safetensors"
    base = Path(_bundled()) if delta.exists() else path
    tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    with _quiet(delta.exists()):  # (the base has no classifier head: the delta brings it)
        model = AutoModelForSequenceClassification.from_pretrained(
            str(base), num_labels=1, local_files_only=True
        )
    if delta.exists():
        from safetensors.torch import load_file

        tensors = {k: v.float() for k, v in load_file(str(delta)).items()}
        missing = set(tensors) - set(model.state_dict())
        if missing:
            raise ValueError(f"{delta}: tensors the model does not have: {sorted(missing)[:3]}")
        model.load_state_dict(tensors, strict=False)
    model.eval()
    return tokenizer, model


@contextlib.contextmanager
def _quiet(quiet: bool) -> Iterator[None]:
    """transformers' warnings off (its load report, which calls the head missing)."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    if quiet:
        hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def _bundled() -> str:
    from .embedder import default_model_path

    return default_model_path()


def _read_meta(path: Path) -> dict[str, Any]:
    if not path.is_dir():
        raise FileNotFoundError(f"verifier model directory not found: {path}")
    meta = path / "meta.json"
    return json.loads(meta.read_text()) if meta.exists() else {}
