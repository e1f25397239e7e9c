"""The precision guard: the last word on a semantic hit, after the similarity threshold.

A semantic hit serves a stored answer to a question that was never asked. It is right only when
both questions want the same answer — and cosine similarity of sentence embeddings is a poor
judge of that: "Is the pharmacy open on Sunday?" / "Is the pharmacy closed on Sunday?" score
0.95, higher than many true paraphrases. So a hit needs two things:

1. ``similarity >= threshold`` (the gateway's knob: global, per model, per request). Lower means
   more hits and more wrong ones; with the raw model, precision is only ~0.79 at 0.90 (QQP).
2. ``Guard.check(...)`` accepts. The guard runs

   - **hard checks** (:mod:`semantic._guard_checks`): numbers, units, dates, negation, antonyms,
     named entities, question type, swapped order. Any failure rejects, whatever the similarity:
     a different number means a different answer even when annotators of a data set disagree.
   - a **learned verifier**: a one-hidden-layer MLP over cheap pair features (cosine, the
     embeddings' ``u*v`` and ``|u-v|``, word/trigram overlap, the checks' soft signals),
     evaluated in numpy in microseconds. Its weights ship in ``guard_weights.npz``, trained by
     ``bench/guard_tune.py`` on one half of the Quora dev pairs (grouped by question so no text
     is shared with the held-out half). It accepts when its probability ``>= min_score``.

The shipped defaults (:data:`DEFAULT_THRESHOLD`, and ``min_score`` stored with the weights) were
picked on the training half for the best precision at recall >= 0.5; ``bench/semantic_pairs.py``
reports the held-out numbers. Raise ``min_score`` for fewer, safer hits.

The verifier's weights belong to the embedding model they were trained with (its vectors are
features). With another model the guard keeps its hard checks and skips the verifier, unless
you pass weights trained for that model (``python -m bench.guard_tune --model PATH``).

Example::

    guard = Guard()
    v = guard.check(q_text, q_vec, cand_text, cand_vec, similarity=0.93)
    if v.accept: ...                 # serve the stored answer
    else: metrics.inc(v.reason)      # "negation", "number_mismatch", "verifier", ...
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from semantic._guard_checks import HARD_CHECKS, SOFT_FEATURES, analyze, compare

__all__ = [
    "DEFAULT_THRESHOLD",
    "DEFAULT_WEIGHTS",
    "HARD_CHECKS",
    "Guard",
    "GuardConfig",
    "Verdict",
    "Verifier",
]

DEFAULT_THRESHOLD = 0.80
"""Shipped cosine threshold for semantic hits with the guard on (all-MiniLM-L6-v2)."""

DEFAULT_WEIGHTS = Path(__file__).with_name("guard_weights.npz")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The guard's answer for one candidate.

    ``score`` is the verifier's probability that the stored answer fits the query (1.0 when
    the verifier did not run); ``reason`` is ``"ok"``, the name of the failed hard check, or
    ``"verifier"`` — a label for metrics (``guard_rejections_total{reason=...}``).
    """

    accept: bool
    score: float
    reason: str


@dataclass(frozen=True, slots=True)
class GuardConfig:
    """Guard settings (the YAML ``cache.semantic.guard`` block maps onto this).

    ``checks``: the hard checks to run (default: all of :data:`HARD_CHECKS`).
    ``verifier``: run the learned verifier. ``min_score``: its acceptance probability; ``None``
    takes the value shipped with the weights. ``weights``: a weights file (default: shipped).
    """

    enabled: bool = True
    checks: tuple[str, ...] = HARD_CHECKS
    verifier: bool = True
    min_score: float | None = None
    weights: str | Path | None = None

    def __post_init__(self) -> None:
        unknown = set(self.checks) - set(HARD_CHECKS)
        if unknown:
            raise ValueError(f"unknown guard checks {sorted(unknown)}; known: {HARD_CHECKS}")
        if self.min_score is not None and not 0.0 <= self.min_score <= 1.0:
            raise ValueError(f"min_score must be in [0, 1], got {self.min_score}")


class Guard:
    """Decide whether a nearest neighbour may answer a query (see the module docstring).

    ``embedding_model`` names the model that made the vectors; the verifier runs only when it
    matches the one its weights were trained with (and the dimension agrees).
    """

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        embedding_model: str = "all-MiniLM-L6-v2",
    ) -> None:
        self.config = config or GuardConfig()
        self._checks = frozenset(self.config.checks)
        self.verifier: Verifier | None = None
        if self.config.enabled and self.config.verifier:
            verifier = Verifier.load(self.config.weights or DEFAULT_WEIGHTS)
            if verifier.embedding_model == embedding_model:
                self.verifier = verifier
        default = self.verifier.min_score if self.verifier else 0.5
        self.min_score = self.config.min_score if self.config.min_score is not None else default

    def check(
        self,
        query_text: str,
        query_vec: np.ndarray,
        cand_text: str,
        cand_vec: np.ndarray,
        similarity: float | None = None,
    ) -> Verdict:
        """Judge one (query, candidate) pair; vectors are the L2-normalised ``[dim]`` embeddings.

        ``similarity`` is the cosine the index returned (recomputed when ``None``). Symmetric in
        query and candidate. Takes ~0.1 ms on a CPU (the candidate's parse is cached).
        """
        if not self.config.enabled:
            return Verdict(True, 1.0, "disabled")
        signals = compare(analyze(cand_text), analyze(query_text))
        for name in signals.failed:
            if name in self._checks:
                return Verdict(False, 0.0, name)
        if self.verifier is None or len(query_vec) != self.verifier.dim:
            return Verdict(True, 1.0, "ok")
        if similarity is None:
            similarity = float(np.dot(query_vec, cand_vec))
        score = self.verifier.score(query_vec, cand_vec, similarity, signals.soft)
        if score < self.min_score:
            return Verdict(False, score, "verifier")
        return Verdict(True, score, "ok")


@dataclass(frozen=True)
class Verifier:
    """A one-hidden-layer MLP over pair features; ``score`` = P(the answer fits).

    Features, in order: ``cos``, ``u*v`` [dim], ``|u-v|`` [dim], then
    :data:`semantic._guard_checks.SOFT_FEATURES`; standardised with ``mean``/``scale``.
    """

    mean: np.ndarray  # [F]
    scale: np.ndarray  # [F]
    w1: np.ndarray  # [F, H]
    b1: np.ndarray  # [H]
    w2: np.ndarray  # [H]
    b2: float
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def embedding_model(self) -> str:
        return str(self.meta.get("embedding_model", ""))

    @property
    def min_score(self) -> float:
        return float(self.meta.get("min_score", 0.5))

    @cached_property
    def dim(self) -> int:
        return (len(self.mean) - 1 - len(SOFT_FEATURES)) // 2

    @staticmethod
    def features(u: np.ndarray, v: np.ndarray, cos: float, soft: tuple[float, ...]) -> np.ndarray:
        """Raw (unscaled) feature vector ``[1 + 2*dim + len(SOFT_FEATURES)]``; symmetric in u, v."""
        u = np.asarray(u, dtype=np.float32).reshape(-1)
        v = np.asarray(v, dtype=np.float32).reshape(-1)
        return np.concatenate(
            [
                np.array([cos], dtype=np.float32),
                u * v,
                np.abs(u - v),
                np.asarray(soft, dtype=np.float32),
            ]
        )

    def score(self, u: np.ndarray, v: np.ndarray, cos: float, soft: tuple[float, ...]) -> float:
        return float(self.predict(self.features(u, v, cos, soft)[None, :])[0])

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Probabilities for raw feature rows ``x`` [n, F] -> [n]."""
        h = np.maximum((x - self.mean) / self.scale @ self.w1 + self.b1, 0.0)  # [n, H]
        z = h @ self.w2 + self.b2  # [n]
        return 1.0 / (1.0 + np.exp(-np.clip(z, -30.0, 30.0)))

    def save(self, path: str | Path) -> None:
        np.savez_compressed(
            path,
            mean=self.mean.astype(np.float32),
            scale=self.scale.astype(np.float32),
            w1=self.w1.astype(np.float32),
            b1=self.b1.astype(np.float32),
            w2=self.w2.astype(np.float32),
            b2=np.float32(self.b2),
            meta=np.frombuffer(json.dumps(self.meta, sort_keys=True).encode(), dtype=np.uint8),
        )

    @classmethod
    def load(cls, path: str | Path) -> Verifier:
        with np.load(path) as z:
            meta = json.loads(z["meta"].tobytes())
            if meta.get("soft_features") != list(SOFT_FEATURES):
                raise ValueError(f"{path}: trained with other features; rerun bench/guard_tune.py")
            return cls(
                mean=z["mean"],
                scale=z["scale"],
                w1=z["w1"],
                b1=z["b1"],
                w2=z["w2"],
                b2=float(z["b2"]),
                meta=meta,
            )
