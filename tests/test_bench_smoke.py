"""Benchmarks' smoke options: a short run must not crash where a full one works (no models
loaded here: fakes stand in for them)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

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


def test_verifier_eval_sets_reads_only_the_sets_named() -> None:
    # `--sets fresh3,fresh3_multiturn`: the named sets and no other (Quora's data is not read)
    from bench.verifier_eval import SETS, load_sets, main

    sets = load_sets(100, ("fresh3_multiturn", "fresh3"))
    assert list(sets) == ["fresh3", "fresh3_multiturn"]  # (in SETS' order)
    for rows in sets.values():
        assert {r["same"] for r in rows} == {True, False}
    assert "fresh3" in SETS
    with pytest.raises(SystemExit):
        main(["--sets", "fresh3,nope", "--no-doc"])


def test_make_bench_runs_every_benchmark_with_a_docs_section() -> None:
    import re
    from pathlib import Path

    from bench.run_all import BENCHMARKS, NOT_LISTED

    bench = Path(__file__).resolve().parents[1] / "bench"
    modules = {p.stem for p in bench.glob("*.py")} - {"__init__"}
    assert set(BENCHMARKS) | set(NOT_LISTED) == modules
    assert not set(BENCHMARKS) & set(NOT_LISTED)
    sections = re.findall(
        r"<!-- bench:(\w+) -->", (bench.parent / "docs/benchmarks.md").read_text()
    )
    assert set(sections) - set(NOT_LISTED) <= set(BENCHMARKS)


def test_make_bench_goes_on_after_a_benchmark_that_exits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import types

    from bench import run_all

    ran: list[str] = []

    def exits(argv: list[str]) -> None:
        raise SystemExit("bench.overload --client wrk needs wrk: apt-get install wrk")

    for name, main in (("exits", exits), ("runs", lambda argv: ran.append("runs"))):
        monkeypatch.setitem(sys.modules, f"bench.{name}", types.SimpleNamespace(main=main))
    assert run_all.main(["exits", "runs"]) == 1
    assert ran == ["runs"]
    err = capsys.readouterr().err
    assert "needs wrk" in err and "failed: exits" in err


def test_gpu_check_no_bench_is_only_the_logits_check(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    import torch

    from bench import gpu_check

    layout = types.SimpleNamespace(device=torch.device("cpu"), dtype=torch.float32)
    engine = types.SimpleNamespace(layout=layout, config=types.SimpleNamespace(max_batch=16))
    streamed: list[list[int]] = []
    monkeypatch.setattr(gpu_check, "load_engine", lambda *args: engine)
    monkeypatch.setattr(gpu_check, "check_logits", lambda engine, size, reference: {
        "prefix": size, "suffix": 64, "max_abs_diff": 0.0, "tolerance": 1e-4,
        "top1_agrees": True, "ok": True})  # fmt: skip
    monkeypatch.setattr(gpu_check, "concurrent_streams", lambda e, s, t: streamed.append(s))
    monkeypatch.setattr(gpu_check, "save_json", lambda name, data: None)
    assert gpu_check.main(["--no-bench"]) == 0
    assert streamed == []
    assert gpu_check.main(["--no-bench", "--streams", "1,8"]) == 0
    assert streamed == [[1, 8]]


def test_verifier_cost_does_not_count_a_gateway_error_as_a_wrong_hit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    import bench.verifier_cost as vc

    async def ask(client: Any, url: str, question: str, namespace: str = "") -> Any:
        if question.startswith("Fresh"):
            return "miss", 0.001
        if question == "trap":  # the store answered, the trap failed on one gateway
            return ("error 500" if url == "u-broken" else "semantic"), 0.001
        return "miss", 0.001

    monkeypatch.setattr(vc, "ask", ask)
    result = asyncio.run(
        vc.measure({"ok": "u-ok", "broken": "u-broken"}, [{"a": "stored", "b": "trap"}])
    )
    assert result["ok"]["wrong_hits"] == 1 and result["ok"]["errors"] == 0
    assert result["broken"]["wrong_hits"] == 0 and result["broken"]["errors"] == 1


def test_verifier_eval_measures_named_sets_without_quora() -> None:
    # `--sets fresh5 --limit 20`: the rows and the latency come from fresh5 (no Quora to time on)
    from bench.verifier_eval import evaluate
    from semantic.verifier import PairVerifier

    result = evaluate(PairVerifier(None), 0, 20, None, ("fresh5",))
    assert result["fresh5"]["pairs"] == 20 and "quora" not in result
    assert set(result["latency_ms"]) == {"embed", "verify_1", "verify_3"}


def test_audit_replay_oracle_rewords_alike_for_audits_and_controls() -> None:
    # an answer's calls: stored, the audit's fresh one, the control's; never the same wording
    # twice in a row, and (stored, audit) differ the way (audit, control) do, as a model's
    # samples would: with the templates in a fixed turn the two pairs were always different ones
    from collections import Counter

    from bench.audit_replay import TEMPLATES, Oracle

    oracle = Oracle([{"a": "q?", "b": "p?", "same": True}], "words")
    calls = [[oracle.wording(n) for _ in range(3)] for n in range(3000)]
    assert all(c[0] != c[1] != c[2] for c in calls)
    audits = Counter(frozenset(c[:2]) for c in calls)
    controls = Counter(frozenset(c[1:]) for c in calls)
    assert len(audits) == len(controls) == len(TEMPLATES)  # every pair of templates, both
    for pair in audits:
        assert abs(audits[pair] - controls[pair]) < 150  # ~1000 each
