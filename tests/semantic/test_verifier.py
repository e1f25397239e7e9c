"""The verifier: calibration, config paths, and behaviour through the HTTP API with the shipped
weights and the real embedder (a paraphrase hits, a trap does not, a context swap does not)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import numpy as np
import pytest
import yaml

from gateway.config import ConfigError, load_config_text
from semantic.cache import SemanticSettings, score_threshold
from semantic.keys import chat_key, compared_text
from semantic.verifier import DEFAULT_PATH, Calibration, PairVerifier, is_conversation
from tests.conftest import Gateway
from tests.fake_upstream import FakeUpstream, ThreadedServer

TABLE = {"thresholds": [0.1, 0.5, 0.9], "wrong_rate": [0.2, 0.03, 0.01], "recall": [1, 0.8, 0.5]}


# ---- calibration --------------------------------------------------------------------------------


def test_threshold_for_takes_the_lowest_threshold_meeting_the_rate() -> None:
    cal = Calibration.from_dict(TABLE)
    assert cal.threshold_for(0.05) == 0.5
    assert cal.threshold_for(0.01) == 0.9
    assert cal.threshold_for(0.5) == 0.1
    assert cal.threshold_for(0.001) == 1.0  # nothing measured meets it: no semantic hits


def test_a_wiggling_table_is_made_monotone_and_a_bad_one_refused() -> None:
    cal = Calibration.from_dict({**TABLE, "wrong_rate": [0.2, 0.01, 0.02]})
    assert cal.wrong_rate == (0.2, 0.01, 0.01)
    with pytest.raises(ValueError, match="ascending"):
        Calibration.from_dict({**TABLE, "thresholds": [0.9, 0.5, 0.1]})


def test_score_threshold_from_yaml_knobs() -> None:
    verifier = cast(
        PairVerifier,
        SimpleNamespace(calibration=Calibration.from_dict(TABLE), default_threshold=0.7, path="x"),
    )
    assert score_threshold(SemanticSettings(), verifier) == 0.7
    assert score_threshold(SemanticSettings(max_wrong_rate=0.05), verifier) == 0.5
    assert (
        score_threshold(SemanticSettings(verifier_threshold=0.3, max_wrong_rate=0.05), verifier)
        == 0.3
    )
    bare = cast(PairVerifier, SimpleNamespace(calibration=None, default_threshold=0.5, path="x"))
    with pytest.raises(ValueError, match="no calibration table"):
        score_threshold(SemanticSettings(max_wrong_rate=0.01), bare)


def test_the_shipped_verifier_has_a_usable_calibration() -> None:
    verifier = PairVerifier()
    assert verifier.calibration is not None
    t = verifier.calibration.threshold_for(0.01)
    assert 0.0 < t < 1.0 and t == verifier.default_threshold
    assert (DEFAULT_PATH / "delta.safetensors").stat().st_size < 50 * 2**20
    trap, para = verifier.score(
        [
            ("Is it safe to fly a drone over Paris?", "Is it illegal to fly a drone over Paris?"),
            ("How do I reset my password?", "How can I reset my password?"),
        ]
    )
    assert trap < 0.5 < para


def test_conversation_pairs_get_the_calibrated_logit_shift() -> None:
    verifier = PairVerifier()
    single = ("How do I reset my password?", "How can I reset my password?")
    conv = (
        compared_text("And the price?", [{"role": "user", "content": "Flights to Rome"}], 2),
        compared_text("And the cost?", [{"role": "user", "content": "Plane tickets to Rome"}], 2),
    )
    assert is_conversation(*conv) and not is_conversation(*single)
    verifier.conversation_shift = 0.0
    base = verifier.score([single, conv])
    verifier.conversation_shift = -1.5
    shifted = verifier.score([single, conv])

    def logit(p: float) -> float:
        return float(np.log(p / (1 - p)))

    assert shifted[0] == pytest.approx(base[0], abs=1e-6)
    assert logit(shifted[1]) == pytest.approx(logit(base[1]) - 1.5, abs=1e-3)


# ---- config and keys ----------------------------------------------------------------------------


MODELS = {"m": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk"}}


MODELS = {"m": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk"}}


def _config(semantic: dict[str, Any], tmp_path: Path) -> Any:
    text = yaml.safe_dump(
        {"data_dir": str(tmp_path), "cache": {"semantic": semantic}, "models": MODELS}
    )
    return load_config_text(text, base_dir=tmp_path)


def test_the_calibration_split_covers_every_kind_and_keeps_families_whole() -> None:
    from bench.train_verifier import calibration_groups

    # (source, kind, group): kind "rare" lives in 2 families only, "common" in 40
    rows = [("contrast", "common", f"f{i}") for i in range(40) for _ in range(5)]
    rows += [("contrast", "rare", f"f{i}") for i in (3, 17) for _ in range(4)]
    rows += [("adversarial", "date", f"q{i}") for i in range(3)]
    cal = calibration_groups(rows)
    assert cal == calibration_groups(list(reversed(rows)))  # deterministic, order-free
    for kind in ("common", "rare", "date"):
        n = sum(1 for s, k, _ in rows if k == kind)
        kept = sum(1 for s, k, g in rows if k == kind and (s, g) in cal)
        assert kept >= n / 8 and kept < n  # every kind is represented, none wholly kept out
    assert all(source in ("contrast", "adversarial") for source, _ in cal)
    assert ("adversarial", "f3") not in cal  # families are per source


def test_config_paths(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    config = _config({"verifier": "mine", "max_wrong_rate": 0.02, "context": "exact"}, tmp_path)
    semantic = config.cache.semantic
    assert semantic.verifier == str((tmp_path / "mine").resolve())
    assert semantic.max_wrong_rate == 0.02 and semantic.context == "exact"
    assert _config({"verifier": "off"}, tmp_path).cache.semantic.verifier == "off"
    with pytest.raises(ConfigError, match="context"):
        _config({"context": "sometimes"}, tmp_path)
    with pytest.raises(ConfigError, match="max_wrong_rate"):
        _config({"max_wrong_rate": 2}, tmp_path)


def test_verify_mode_moves_earlier_turns_into_the_compared_text() -> None:
    def key(first: str, mode: Any, system: str = "Be brief.") -> Any:
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": first},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "How much does it cost?"},
        ]
        return chat_key("t", "", "m", {"messages": messages}, None, mode)

    a, b = key("Flights to Rome", "verify"), key("Plane tickets to Rome", "verify")
    assert a.scope == b.scope and a.exact != b.exact
    assert a.question == compared_text(
        "How much does it cost?",
        [
            {"role": "user", "content": "Flights to Rome"},
            {"role": "assistant", "content": "Noted."},
        ],
        None,
    )
    assert key("Flights to Rome", "verify", system="Be long.").scope != a.scope
    exact_a, exact_b = key("Flights to Rome", "exact"), key("Plane tickets to Rome", "exact")
    assert exact_a.scope != exact_b.scope and exact_a.question == "How much does it cost?"


# ---- through HTTP -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gw(
    upstream_server: ThreadedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    model = {"backend": "openai", "base_url": f"{upstream_server.url}/v1", "api_key": "sk"}
    text = yaml.safe_dump(
        {
            "data_dir": str(tmp_path_factory.mktemp("verifier")),
            # the operating point these examples were checked at (the shipped default, 1% wrong
            # on the calibration pairs, is stricter: see docs/benchmarks.md)
            "cache": {
                "semantic": {
                    "enabled": True,
                    "verifier": "bundled",
                    "context": "verify",
                    "verifier_threshold": 0.75,
                }
            },
            "models": {"fake-model": model},
        }
    )
    gateway = Gateway(load_config_text(text))
    yield gateway
    gateway.stop()


def chat(gw: Gateway, messages: list[dict[str, str]], ns: str) -> httpx.Response:
    body = {"model": "fake-model", "messages": messages}
    return gw.http.post("/v1/chat/completions", json=body, headers={"x-cache-namespace": ns})


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_a_paraphrase_hits_and_a_trap_does_not(gw: Gateway, upstream: FakeUpstream) -> None:
    first = chat(gw, user("How do I reset my password?"), "p")
    assert first.headers["x-cache"] == "miss"
    hit = chat(gw, user("How can I reset my password?"), "p")
    assert hit.headers["x-cache"] == "semantic"
    assert hit.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
    chat(gw, user("Is it safe to fly a drone over Paris?"), "t")
    trap = chat(gw, user("Is it illegal to fly a drone over Paris?"), "t")
    assert trap.headers["x-cache"] == "miss"
    stats = gw.http.get("/admin/stats").json()["cache"]
    assert stats["verifier"]["score_threshold"] == 0.75
    assert stats["verifier"]["backend"] == "onnx"  # cache.semantic.verifier_backend's default
    assert 'cachegate_verifier_backend_info{backend="onnx"} 1' in gw.http.get("/metrics").text
    assert stats["guard_rejections_by_reason"].get("verifier", 0) >= 1


def test_a_reworded_history_hits_and_a_context_swap_does_not(gw: Gateway) -> None:
    def convo(first: str, reply: str) -> list[dict[str, str]]:
        return [
            {"role": "user", "content": first},
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "How long does it take?"},
        ]

    stored = chat(
        gw, convo("How do I renew my passport in Canada?", "You can renew it by mail."), "c"
    )
    assert stored.headers["x-cache"] == "miss"
    reworded = convo("What is the process to renew a passport in Canada?", "Renewal works by mail.")
    assert chat(gw, reworded, "c").headers["x-cache"] == "semantic"
    swapped = convo("How do I renew my passport in Mexico?", "You can renew it by mail.")
    assert chat(gw, swapped, "c").headers["x-cache"] == "miss"
