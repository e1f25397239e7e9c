"""Benchmarks' smoke options: a short run must not crash where a full one works (no models
loaded here: fakes stand in for them)."""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.verifier_eval import _latency


class _Embedder:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        return np.zeros((len(texts), 4), dtype=np.float32)


class _Verifier:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        self.calls.append(len(pairs))
        return [0.5] * len(pairs)


def test_verifier_eval_times_60_calls_with_fewer_pairs() -> None:
    # `--limit 20` (or `--qqp 20`): 20 Quora rows, 60 timed calls of each kind
    rows: list[dict[str, Any]] = [{"a": f"a{i}", "b": f"b{i}"} for i in range(20)]
    embedder, verifier = _Embedder(), _Verifier()
    latency = _latency(embedder, verifier, rows)  # type: ignore[arg-type]
    assert set(latency) == {"embed", "verify_1", "verify_3"}
    assert len(set(embedder.texts)) == 60  # every text new to the embedder's LRU
    assert verifier.calls == [1] * 60 + [3] * 60
