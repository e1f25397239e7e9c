"""The verifier: calibration, config paths, and behaviour through the HTTP API with the shipped
weights and the real embedder (a paraphrase hits, a trap does not, a context swap does not)."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import numpy as np
import pytest
import yaml

from gateway.config import ConfigError, load_config_text
from semantic.cache import CacheSettings, ResponseCache, SemanticSettings, score_threshold
from semantic.keys import chat_key, compared_text, context_question
from semantic.store import DiskStore
from semantic.verifier import (
    DEFAULT_PATH,
    INT8,
    PROBES,
    Calibration,
    PairVerifier,
    VerifierBusy,
    is_conversation,
)
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


def test_a_stricter_step_halves_the_measured_wrong_rate_and_ends_at_one() -> None:
    cal = Calibration((0.2, 0.4, 0.6, 0.8), (0.10, 0.06, 0.04, 0.0), (0.9, 0.8, 0.7, 0.5))
    assert [cal.rate_at(t) for t in (0.1, 0.2, 0.5, 0.8, 0.95)] == [0.10, 0.10, 0.06, 0.0, 0.0]
    assert cal.stricter(0.2) == 0.6  # 0.10 -> at most 0.05: 0.4's 0.06 is not enough
    assert cal.stricter(0.5) == 0.8  # between rows: from 0.4's rate, 0.06 -> 0.0
    assert cal.stricter(0.8) == 1.0 and cal.stricter(1.0) == 1.0  # nothing is stricter
    flat = Calibration((0.2, 0.4), (0.10, 0.08), (0.9, 0.8))
    assert flat.stricter(0.2) == 1.0  # no row halves the rate: no semantic hits


def test_score_threshold_from_yaml_knobs() -> None:
    verifier = cast(
        PairVerifier,
        SimpleNamespace(
            calibration=Calibration.from_dict(TABLE),
            default_threshold=0.7,
            veto_threshold=0.07,
            path="x",
        ),
    )
    veto = SemanticSettings(verifier_role="veto")
    assert score_threshold(veto, verifier) == 0.07
    assert score_threshold(replace(veto, verifier_threshold=0.2), verifier) == 0.2
    decide = SemanticSettings()  # the default role
    assert score_threshold(decide, verifier) == 0.7
    assert score_threshold(replace(decide, max_wrong_rate=0.05), verifier) == 0.5
    assert (
        score_threshold(replace(decide, verifier_threshold=0.3, max_wrong_rate=0.05), verifier)
        == 0.3
    )
    bare = cast(PairVerifier, SimpleNamespace(calibration=None, default_threshold=0.5, path="x"))
    with pytest.raises(ValueError, match="no calibration table"):
        score_threshold(replace(decide, max_wrong_rate=0.01), bare)


def _int8() -> dict[str, Any]:
    """meta.json's calibration of the int8 backend (``verifier_backend``'s default)."""
    meta: dict[str, Any] = json.loads((DEFAULT_PATH / "meta.json").read_text())
    return meta["backends"][INT8]  # type: ignore[no-any-return]


def test_the_shipped_verifier_has_a_usable_calibration() -> None:
    verifier = PairVerifier()
    assert verifier.calibration is not None and verifier.combiner is not None
    t = verifier.calibration.threshold_for(verifier.meta["default_wrong_rate"])
    assert 0.0 < t < 1.0 and t == verifier.default_threshold
    assert 0.0 < verifier.veto_threshold < 0.5
    assert (DEFAULT_PATH / "delta.safetensors").stat().st_size < 50 * 2**20
    # the int8 backend's own calibration (the gateway's default) is usable the same way
    own = _int8()
    int8 = Calibration.from_dict(own["calibration"])
    assert int8.threshold_for(own["default_wrong_rate"]) == own["default_threshold"]
    assert 0.0 < own["veto"]["threshold"] < 0.5 and len(own["probe_logits"]) == len(PROBES)
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


def test_a_domain_calibration_split_keeps_whole_domains_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # train_verifier --calibrate-by domain: the contrast pairs of a domain are all trained on
    # or all calibrated on, about an eighth kept out; Quora and adversarial split as before
    import gzip

    from bench import contrast_data
    from bench.train_verifier import FAMILY_ROUNDS, _rows, calibration_domains, load_pairs

    # Quora pairs of our own (the dev split lives outside the repository, in ../shared/data)
    qqp = tmp_path / "qqp.jsonl.gz"
    with gzip.open(qqp, "wt") as f:
        for i in range(400):
            row = {"a": f"How do I learn skill {i}?", "b": f"Best way to learn skill {i % 97}?",
                   "duplicate": int(i % 3 == 0)}  # fmt: skip
            f.write(json.dumps(row) + "\n")
    monkeypatch.setenv("CACHEGATE_QQP", str(qqp))

    assert calibration_domains(["a"] * 5 + ["b"] * 5 + ["c"] * 30) == calibration_domains(
        ["c"] * 30 + ["b"] * 5 + ["a"] * 5
    )
    by_family = load_pairs("train", FAMILY_ROUNDS["more2"], "on")
    by_domain = load_pairs("train", FAMILY_ROUNDS["more2"], "on", calibrate_by="domain")
    assert [(x.a, x.b, x.source) for x in by_family] == [(x.a, x.b, x.source) for x in by_domain]
    domain = {
        (r["a"], r["b"]): r["domain"]
        for stem in ("contrast_train", "contrast_more_train", "contrast_more2_train")
        for r in _rows(contrast_data.DATA / f"{stem}.jsonl")
    }

    def by_domain_flags(pairs: list[Any]) -> dict[str, set[bool]]:
        """Each domain's contrast pairs' calibration flags."""
        flags: dict[str, set[bool]] = {}
        for x in (x for x in pairs if x.source == "contrast"):
            flags.setdefault(domain[(x.a, x.b)], set()).add(x.calibration)
        return flags

    split = by_domain_flags(by_domain)
    assert all(len(flags) == 1 for flags in split.values())
    kept = [d for d, flags in split.items() if flags == {True}]
    assert 0 < len(kept) < len(split) / 3
    contrast = [x for x in by_domain if x.source == "contrast"]
    assert sum(x.calibration for x in contrast) >= len(contrast) / 10
    # by families, a domain is split between training and calibration
    assert any(len(flags) == 2 for flags in by_domain_flags(by_family).values())
    for source in ("qqp", "adversarial"):
        flags = [x.calibration for x in by_family if x.source == source]
        assert flags == [x.calibration for x in by_domain if x.source == source]
        assert 0 < sum(flags) < len(flags)  # (some kept out, in both modes alike)


def test_config_paths(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    mine = {"verifier": "mine", "verifier_role": "decide", "max_wrong_rate": 0.02}
    semantic = _config({**mine, "context": "exact"}, tmp_path).cache.semantic
    assert semantic.verifier == str((tmp_path / "mine").resolve())
    assert semantic.max_wrong_rate == 0.02 and semantic.context == "exact"
    assert _config({"verifier": "off"}, tmp_path).cache.semantic.verifier == "off"
    default = _config({}, tmp_path).cache.semantic
    assert default.verifier == "bundled" and default.verifier_role == "decide"
    # what only a deciding verifier does is refused with a vetoing one, and fine with none
    with pytest.raises(ConfigError, match="verifier_role: decide"):
        _config({"verifier_role": "veto", "max_wrong_rate": 0.02}, tmp_path)
    with pytest.raises(ConfigError, match="verifier_role: decide"):
        _config({"verifier_role": "veto", "context": "verify"}, tmp_path)
    assert _config({"verifier": "off", "context": "verify"}, tmp_path).cache.semantic
    with pytest.raises(ConfigError, match="context"):
        _config({"context": "sometimes"}, tmp_path)
    # the context pair check: on by default, off only where there is one to judge
    assert default.context_pair is True
    assert _config({"context": "verify", "context_pair": False}, tmp_path).cache.semantic
    with pytest.raises(ConfigError, match="context_pair: false needs context: verify"):
        _config({"context_pair": False}, tmp_path)
    with pytest.raises(ConfigError, match=r"cache.semantic.context_pair: expected `bool`"):
        _config({"context": "verify", "context_pair": "sometimes"}, tmp_path)
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


def test_the_context_question_is_the_last_earlier_user_turn_that_asks() -> None:
    def turns(*texts: str) -> list[dict[str, str]]:
        roles = ("user", "assistant")
        return [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]

    padded = turns("Hi there!", "Hello!", "Flights to Rome in May?", "Daily.", "Thanks!", "Sure.")
    assert context_question(compared_text("And the price?", padded, 6)) == "Flights to Rome in May?"
    told = turns("I fly to Rome in May.", "Nice.")  # (no turn asks: the most recent one)
    assert context_question(compared_text("And the price?", told, 2)) == "I fly to Rome in May."
    assert context_question(compared_text("And the price?", [], 4)) is None  # a single question
    assert context_question(compared_text("And?", turns("Hi", "Hello!")[1:], 4)) is None
    # " || " in the question is no separator (``a || b`` in code): the turns start at a role
    asked = compared_text("Is `a || b` lazy there?", turns("Flights to Rome in May?"), 4)
    assert context_question(asked) == "Flights to Rome in May?"
    assert context_question("Is `a || b` lazy?") is None
    assert not is_conversation("Is `a || b` lazy?", "Is `a || b` lazy there?")


def test_verify_mode_keeps_what_the_compared_text_does_not_carry_in_the_scope() -> None:
    """Tool results and calls, images, other fields and text past TURN_CHARS of the compared
    window are not in the compared text, so they stay in the scope: two conversations that
    differ only there never share an answer (the verifier could not tell them apart)."""
    question = {"role": "user", "content": "Should I take an umbrella?"}
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "weather", "arguments": "{}"}}]}  # fmt: skip

    def scope(*earlier: dict[str, Any], turns: int | None = None) -> str:
        messages = [{"role": "user", "content": "Weather in Oslo?"}, *earlier, question]
        return chat_key("t", "", "m", {"messages": messages}, turns, "verify").scope

    rain = {"role": "tool", "tool_call_id": "c1", "content": "Rain, 12C"}
    sun = {"role": "tool", "tool_call_id": "c1", "content": "Sunny, 25C"}
    assert scope(call, rain) != scope(call, sun)

    def image(url: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                            {"type": "image_url", "image_url": {"url": url}}]}  # fmt: skip

    assert scope(image("https://a/1.png")) != scope(image("https://a/2.png"))
    doc = "Clause 1. " * 30  # longer than TURN_CHARS: the compared text cuts it
    assert scope({"role": "user", "content": doc + "Fee: 10"}) != scope(
        {"role": "user", "content": doc + "Fee: 90"}
    )
    # plain text turns are compared, not scoped; outside the window nothing is scoped
    said = {"role": "assistant", "content": "It is in Norway."}
    assert scope(said) == scope({"role": "assistant", "content": "Oslo is in Norway."})
    assert scope(call, rain, said, said, turns=1) == scope(call, sun, said, said, turns=1)
    assert scope(call, rain, turns=0) == scope(call, sun, turns=0)


# ---- through HTTP -------------------------------------------------------------------------------


def _gateway(url: str, data_dir: Path, semantic: dict[str, Any]) -> Gateway:
    model = {"backend": "openai", "base_url": f"{url}/v1", "api_key": "sk"}
    text = yaml.safe_dump(
        {
            "data_dir": str(data_dir),
            "cache": {"semantic": {"enabled": True, **semantic}},
            "models": {"fake-model": model},
        }
    )
    return Gateway(load_config_text(text))


@pytest.fixture(scope="module")
def gw(
    upstream_server: ThreadedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    # the shipped operating point of the combined verifier (2% wrong on calibration);
    # verifier: bundled and verifier_role: decide are the defaults
    gateway = _gateway(
        upstream_server.url, tmp_path_factory.mktemp("verifier"), {"context": "verify"}
    )
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
    chat(gw, user("Is the museum free for children on weekends?"), "t")  # the guard passes it
    assert (
        chat(gw, user("Is the museum free for adults on weekends?"), "t").headers["x-cache"]
        == "miss"
    )
    stats = gw.http.get("/admin/stats").json()["cache"]
    assert stats["verifier"]["score_threshold"] == _int8()["default_threshold"]
    assert stats["verifier"]["role"] == "decide" and stats["verifier"]["combiner"] is True
    assert stats["verifier"]["backend"] == "onnx-int8"  # cache.semantic.verifier_backend's default
    metrics = gw.http.get("/metrics").text
    assert 'cachegate_verifier_backend_info{backend="onnx-int8"} 1' in metrics
    assert stats["guard_rejections_by_reason"].get("verifier", 0) >= 1


def test_a_place_spelt_without_its_accents_hits_and_another_place_does_not(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    # the hard checks read "Cancún" as two words once ("Canc", "ún"): another place than "Cancun"
    stored = chat(gw, user("Are hotels in Cancún cheaper during the Easter holidays?"), "a")
    assert stored.headers["x-cache"] == "miss"
    plain = chat(gw, user("Are hotels in Cancun cheaper during the Easter holidays?"), "a")
    assert plain.headers["x-cache"] == "semantic"
    assert plain.json()["choices"][0]["message"] == stored.json()["choices"][0]["message"]
    other = chat(gw, user("Are hotels in Mérida cheaper during the Easter holidays?"), "a")
    assert other.headers["x-cache"] == "miss"
    assert upstream.stats["chat"] == 2


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
    # (the earlier turn's question reworded; with the weights shipped after the fifth
    # held-out set, a history whose answer is reworded too, "Renewal works by mail.", no
    # longer hits in this example)
    reworded = convo(
        "What is the process to renew a passport in Canada?", "You can renew it by mail."
    )
    assert chat(gw, reworded, "c").headers["x-cache"] == "semantic"
    swapped = convo("How do I renew my passport in Mexico?", "You can renew it by mail.")
    assert chat(gw, swapped, "c").headers["x-cache"] == "miss"


def test_a_question_holding_a_double_bar_is_judged_as_a_single_question(gw: Gateway) -> None:
    """The compared text puts the earlier turns after " || ", and a question holding it
    (``a || b`` in code) was read as a conversation: no near-duplicate rail, the conversation
    shift, so its trivial rewording missed (the verifier turned it down) where the same with
    "or" hit. Earlier turns start at " || " before a role."""
    pairs = [
        ("Why does `cd dir || exit` need quotes?", "Why does `cd dir || exit` need quotes ?"),
        ("In JavaScript, what does a || b return?", "In JavaScript what does a || b return?"),
    ]
    for n, (first, again) in enumerate(pairs):
        stored = chat(gw, user(first), f"bars{n}")
        assert stored.headers["x-cache"] == "miss"
        hit = chat(gw, user(again), f"bars{n}")
        assert hit.headers["x-cache"] == "semantic", again  # was "miss"
        assert hit.json()["choices"][0]["message"] == stored.json()["choices"][0]["message"]
    other = chat(gw, user("In JavaScript, what does a && b return?"), "bars1")
    assert other.headers["x-cache"] == "miss"


#: (a conversation's first question, the same with its context swapped, the same reworded,
#: the follow-up they share): rows of bench/data/multiturn_train.jsonl.
SWAPS = [
    ("Do citizens of Canada need a visa to visit Australia?",
     "Do citizens of Australia need a visa to visit Canada?",
     "Is a visa required for Canada passport holders travelling to Australia?",
     "Would doing it before noon be better?"),
    ("Is risotto eaten chilly?", "Do people serve sourdough bread chilly?",
     "Do people serve risotto chilly?", "What are the risks?"),
]  # fmt: skip
#: Small talk before a conversation's question (its context question is still that one).
SMALL_TALK = ("Good morning.", "Good morning! How can I help?")


def follow_up(first: str, follow: str, *before: str) -> list[dict[str, str]]:
    """``before`` (user, assistant, user, ...), then ``first``, its answer and ``follow``."""
    turns = [(before[i], before[i + 1]) for i in range(0, len(before), 2)]
    turns.append((first, f"Here is what I know about {first.lower()}"))
    return [*({"role": r, "content": t} for pair in turns
              for r, t in zip(("user", "assistant"), pair, strict=True)),
            {"role": "user", "content": follow}]  # fmt: skip


def test_a_follow_up_after_a_swapped_context_misses_and_after_small_talk_hits(
    gw: Gateway,
) -> None:
    """The same follow-up after another context: the whole pair read "Would doing it before
    noon be better?" on both sides and served the answer for a visa from Canada to Australia to
    one from Australia to Canada (0.96; rows of bench/data/multiturn_train.jsonl). The context
    pair is now judged on its own, so it misses, while the same context after small talk hits."""
    for n, (first, swapped, reworded, follow) in enumerate(SWAPS):
        stored = chat(gw, follow_up(first, follow), f"swap{n}")
        assert stored.headers["x-cache"] == "miss"
        miss = chat(gw, follow_up(swapped, follow), f"swap{n}")
        assert miss.headers["x-cache"] == "miss", swapped  # was "semantic"
        hit = chat(gw, follow_up(reworded, follow, *SMALL_TALK), f"swap{n}")
        assert hit.headers["x-cache"] == "semantic", reworded
        assert hit.json()["choices"][0]["message"] == stored.json()["choices"][0]["message"]
    reasons = gw.http.get("/admin/stats").json()["cache"]["guard_rejections_by_reason"]
    assert reasons.get("verifier_context", 0) >= 1


@pytest.fixture(scope="module")
def whole_pair_gw(
    upstream_server: ThreadedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    gateway = _gateway(
        upstream_server.url,
        tmp_path_factory.mktemp("whole-pair"),
        {"context": "verify", "context_pair": False},
    )
    yield gateway
    gateway.stop()


def test_with_context_pair_off_the_whole_pair_decides_alone(
    whole_pair_gw: Gateway, upstream: FakeUpstream
) -> None:
    """``context_pair: false``: the previous behaviour, the whole pair alone. The same follow-up
    after a swapped context, which the context pair turns down (the test above), is served."""
    first, swapped, _, follow = SWAPS[0]
    stored = chat(whole_pair_gw, follow_up(first, follow), "pair-off")
    assert stored.headers["x-cache"] == "miss"
    calls = upstream.stats["chat"]
    served = chat(whole_pair_gw, follow_up(swapped, follow), "pair-off")
    assert served.headers["x-cache"] == "semantic"  # a miss with the context pair on
    assert served.json()["choices"][0]["message"] == stored.json()["choices"][0]["message"]
    assert upstream.stats["chat"] == calls
    stats = whole_pair_gw.http.get("/admin/stats").json()["cache"]
    assert "verifier_context" not in stats["guard_rejections_by_reason"]


async def test_a_context_pair_the_busy_embedder_cannot_take_in_time_is_an_overload_miss(
    tmp_path: Path,
) -> None:
    """The context pair's two turns are embedded within ``max_wait``, as the question is: with
    every embedder worker busy, the lookup gives up (a miss, counted as skipped "overload", the
    question's vector kept for the store) where it queued behind the workers."""
    settings = SemanticSettings(verifier="bundled", embedder_backend="onnx",
                                verifier_backend="onnx-int8", max_wait=0.05, candidates=3)  # fmt: skip
    cache = ResponseCache(DiskStore(tmp_path, max_entries=100), CacheSettings(), settings)
    await cache.start()
    first, _, reworded, follow = SWAPS[1]

    def key(messages: list[dict[str, str]]) -> Any:
        return chat_key("t", "", "m", {"messages": messages}, None, "verify")

    await cache.store(key(follow_up(first, follow)), {"choices": []}, model="m", tenant="t",
                      namespace="")  # fmt: skip
    asked = key(follow_up(reworded, follow, *SMALL_TALK))
    embedder = cache.embedder
    assert embedder is not None
    await embedder.embed(asked.question)  # (its own embedding needs no worker: the LRU has it)
    release, held = threading.Event(), threading.Semaphore(0)

    def hold(_: Any) -> None:  # (in the worker, after its text: the worker stays busy)
        held.release()
        release.wait()

    busy = []
    for i in range(embedder.workers):  # one at a time: each on a worker of its own
        busy.append(asyncio.ensure_future(embedder.embed_then(f"Busy {i} {uuid.uuid4()}", hold)))
        while not held.acquire(blocking=False):
            await asyncio.sleep(0.01)
    try:  # (before: waited for a worker until released)
        found = await asyncio.wait_for(cache.lookup(asked), timeout=60)
    finally:
        release.set()
        await asyncio.gather(*busy)
    assert found.kind == "miss" and found.overloaded and found.vector is not None
    stats = cache.stats()
    assert stats["semantic_skipped"]["overload"] == 1 and stats["semantic_errors"] == 0
    assert stats["guard_rejections_by_reason"].get("verifier_context", 0) == 0
    # with the workers free, the same lookup judges the context pair and hits
    assert (await cache.lookup(asked)).kind == "semantic"
    assert cache.stats()["semantic_skipped"]["overload"] == 1
    await cache.close()


def held_worker(
    verifier: PairVerifier, monkeypatch: pytest.MonkeyPatch
) -> tuple[threading.Event, threading.Event, list[list[tuple[str, str]]]]:
    """Hold the verifier's worker in each pass until ``release`` is set (``started``: a pass
    began); ``batches``: the pairs of each pass."""
    started, release = threading.Event(), threading.Event()
    batches: list[list[tuple[str, str]]] = []
    score = verifier._score_in_worker

    def held(pairs: list[tuple[str, str]]) -> np.ndarray:
        batches.append(list(pairs))
        started.set()
        assert release.wait(60)
        return score(pairs)

    monkeypatch.setattr(verifier, "_score_in_worker", held)
    return started, release, batches


#: A paraphrase the verifier judges (not a near duplicate served without it): a semantic hit.
RENEW = ("How do I renew my passport in Canada?", "Steps to renew my passport in Canada?")


def test_a_would_be_hit_the_busy_verifier_cannot_take_in_time_is_an_overload_miss(
    make_gateway: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through HTTP: with the verifier's worker held on another lookup's pair, a lookup whose
    embedding came in time no longer queues behind it for as long as it takes: past
    ``max_wait_ms`` it is a miss (the model answers it, never the stored answer unjudged),
    counted as skipped "overload_verify" in /admin/stats and /metrics. The held lookup,
    whose pair the worker had started on, is judged and served."""
    gw = make_gateway("cache: {semantic: {max_wait_ms: 300, audit_rate: 0}}", semantic=True)
    stored, asked = RENEW
    answers = {ns: chat(gw, user(stored), ns) for ns in ("held", "late")}
    assert all(a.headers["x-cache"] == "miss" for a in answers.values())
    verifier = gw.runtime.cache.verifier
    started, release, batches = held_worker(verifier, monkeypatch)
    calls = upstream.stats["chat"]
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(chat, gw, user(asked), "held")
        try:
            assert started.wait(60)  # (the worker is on the held lookup's pair)
            late = chat(gw, user(asked), "late")  # (before: waited for the held pass)
        finally:
            release.set()
        hit = first.result(timeout=60)
    assert late.headers["x-cache"] == "miss" and upstream.stats["chat"] == calls + 1
    content = late.json()["choices"][0]["message"]["content"]
    assert f" to: {asked} [" in content  # the model's answer to it, not the stored one
    assert hit.headers["x-cache"] == "semantic"
    assert hit.json()["choices"][0]["message"] == answers["held"].json()["choices"][0]["message"]
    assert len(batches) == 1 == len(batches[0])  # the late pair was never scored
    skipped = gw.http.get("/admin/stats").json()["cache"]["semantic_skipped"]
    assert skipped == {"overload": 0, "overload_verify": 1, "overload_store": 0, "loading": 0}
    metrics = gw.http.get("/metrics").text
    assert 'cachegate_semantic_skipped_total{reason="overload_verify"} 1' in metrics


async def test_as_a_veto_a_verifier_that_cannot_take_the_pick_in_time_is_an_overload_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Role "veto": the guard's pick waits at most ``max_wait`` for the verifier too; past it
    the lookup is a miss (not the guard's hit without the verifier's word), the question's
    vector kept for the store, counted as skipped "overload_verify"."""
    settings = SemanticSettings(verifier="bundled", verifier_role="veto", embedder_backend="onnx",
                                verifier_backend="onnx-int8", max_wait=0.2)  # fmt: skip
    cache = ResponseCache(DiskStore(tmp_path, max_entries=100), CacheSettings(), settings)
    await cache.start()
    stored, asked = (chat_key("t", "", "m", {"messages": user(q)})
                     for q in ("How do I reset my password?", "How can I reset my password?"))  # fmt: skip
    await cache.store(stored, {"choices": []}, model="m", tenant="t", namespace="")
    verifier = cache.verifier
    assert verifier is not None
    started, release, batches = held_worker(verifier, monkeypatch)
    ahead = asyncio.ensure_future(verifier.verify_logit("a", "b"))  # another lookup's pair
    while not started.is_set():
        await asyncio.sleep(0.01)
    try:  # (before: waited for the held pass)
        found = await asyncio.wait_for(cache.lookup(asked), timeout=60)
    finally:
        release.set()
    await ahead
    assert found.kind == "miss" and found.skipped == "overload_verify"
    assert found.vector is not None and batches == [[("a", "b")]]
    stats = cache.stats()
    assert stats["semantic_skipped"] == {
        "overload": 0,
        "overload_verify": 1,
        "overload_store": 0,
        "loading": 0,
    }
    assert stats["guard_rejections_by_reason"] == {}  # (not turned down: not judged)
    assert (await cache.lookup(asked)).kind == "semantic"  # with the worker free: the hit
    await cache.close()


def test_an_answer_sent_back_as_the_sdk_got_it_is_compared_as_text(gw: Gateway) -> None:
    """The openai SDK sends a ``choices[0].message`` appended to the messages with OpenAI's
    ``"refusal": null`` and ``"annotations": []``: those fields kept every such turn in the
    scope, so a reworded history never hit."""

    def convo(first: str, reply: str) -> Any:
        return [{"role": "user", "content": first},
                {"role": "assistant", "content": reply, "refusal": None, "annotations": []},
                {"role": "user", "content": "How long does it take?"}]  # fmt: skip

    stored = convo("How do I renew my passport in Canada?", "You can renew it by mail.")
    assert chat(gw, stored, "sdk").headers["x-cache"] == "miss"
    # (the earlier turn's question reworded; with the weights shipped after the fifth
    # held-out set, a history whose answer is reworded too, "Renewal works by mail.", no
    # longer hits in this example)
    reworded = convo(
        "What is the process to renew a passport in Canada?", "You can renew it by mail."
    )
    assert chat(gw, reworded, "sdk").headers["x-cache"] == "semantic"  # was "miss"
    swapped = convo("How do I renew my passport in Mexico?", "You can renew it by mail.")
    assert chat(gw, swapped, "sdk").headers["x-cache"] == "miss"
    refused = [stored[0], {**stored[1], "refusal": "I can't help with that."}, stored[2]]
    assert chat(gw, refused, "sdk").headers["x-cache"] == "miss"  # (a field with a value counts)


def test_follow_ups_that_share_their_question_are_told_apart_by_their_context(
    gw: Gateway,
) -> None:
    """The same follow-up stored under two contexts: each reworded context is served the
    answer of its own (only the context tells the two stored requests apart)."""

    def convo(country: str, first: str = "How do I renew my passport in {}?") -> Any:
        return [{"role": "user", "content": first.format(country)},
                {"role": "assistant", "content": "You can renew it by mail."},
                {"role": "user", "content": "How long does it take?"}]  # fmt: skip

    answers = {}
    for country in ("Canada", "Mexico"):
        stored = chat(gw, convo(country), "f")
        assert stored.headers["x-cache"] == "miss"
        answers[country] = stored.json()["choices"][0]["message"]["content"]
    assert answers["Canada"] != answers["Mexico"]  # (the fake upstream numbers its answers)
    for country in ("Mexico", "Canada"):
        reworded = convo(country, "What is the process to renew a passport in {}?")
        hit = chat(gw, reworded, "f")
        assert hit.headers["x-cache"] == "semantic", country
        assert hit.json()["choices"][0]["message"]["content"] == answers[country]


def test_a_context_turn_the_verifier_does_not_read_must_be_the_same(
    gw: Gateway, upstream: FakeUpstream
) -> None:
    """The verifier reads 128 tokens of a pair: with a window of long turns it never saw the
    oldest one, so a conversation for a grandmother got the answer given for a baby."""

    def convo(first: str, question: str = "Suggest a dinner recipe.") -> Any:
        return [{"role": "user", "content": first},
                {"role": "assistant", "content": "Great, cooking at home is a lovely way to spend "
                 "an evening and it also saves money compared with eating out at restaurants "
                 "every night of the week."},
                {"role": "user", "content": "I have about forty minutes tonight and a fairly "
                 "basic kitchen with an oven, a stove and a couple of pans, nothing fancy."},
                {"role": "assistant", "content": "Forty minutes is plenty of time for a "
                 "satisfying home-cooked dinner with a basic kitchen setup like yours; many "
                 "classic dishes fit easily."},
                {"role": "user", "content": question}]  # fmt: skip

    assert chat(gw, convo("I want to cook for my baby."), "u").headers["x-cache"] == "miss"
    other = chat(gw, convo("I want to cook for my grandmother."), "u")
    assert other.headers["x-cache"] == "miss"  # was "semantic" (0.98)
    # the question reworded under the same turns still hits: what the verifier does not read
    # is the same
    again = convo("I want to cook for my baby.", "Could you suggest a dinner recipe?")
    assert chat(gw, again, "u").headers["x-cache"] == "semantic"
    assert upstream.stats["chat"] == 2
    reasons = gw.http.get("/admin/stats").json()["cache"]["guard_rejections_by_reason"]
    assert reasons.get("verifier_unread", 0) >= 1


# ---- the defaults, and role "veto" (the guard decides, the verifier may turn its pick down) --------


@pytest.fixture(scope="module")
def veto_gw(
    upstream_server: ThreadedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    gateway = _gateway(
        upstream_server.url, tmp_path_factory.mktemp("veto"), {"verifier_role": "veto"}
    )
    yield gateway
    gateway.stop()


def test_as_a_veto_the_verifier_turns_down_a_trap_the_guard_lets_through(
    veto_gw: Gateway, upstream: FakeUpstream
) -> None:
    # cosine 0.93, no hard check fails, the guard's MLP accepts: only the verifier sees that
    # children and adults may pay differently
    chat(veto_gw, user("Is the museum free for children on weekends?"), "v")
    calls = upstream.stats["requests"]
    trap = chat(veto_gw, user("Is the museum free for adults on weekends?"), "v")
    assert trap.headers["x-cache"] == "miss" and upstream.stats["requests"] == calls + 1
    first = chat(veto_gw, user("How do I reset my password?"), "v")
    hit = chat(veto_gw, user("How can I reset my password?"), "v")
    assert hit.headers["x-cache"] == "semantic"
    assert hit.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
    stats = veto_gw.http.get("/admin/stats").json()["cache"]
    assert stats["verifier"]["role"] == "veto" and stats["verifier"]["combiner"] is False
    assert stats["verifier"]["score_threshold"] == _int8()["veto"]["threshold"]
    assert stats["guard_rejections_by_reason"] == {"verifier": 1}


# ---- the combiner -------------------------------------------------------------------------------


def test_the_combiner_is_a_logistic_of_its_signals_and_skips_only_hopeless_pairs() -> None:
    from semantic.verifier import CandidateSignals, Combiner

    c = Combiner(0.5, -1.0, 0.4, -0.3, 0.5, 6.0, "all-MiniLM-L6-v2")
    s = CandidateSignals(cosine=0.9, failed=("question_type",), guard_logit=2.0)
    z = 0.5 - 0.9 + 0.8 - 0.3 + 0.5 * 3.0
    assert c.probability(s, 3.0) == pytest.approx(1 / (1 + np.exp(-z)))
    assert c.probability(CandidateSignals(0.9, (), 2.0), 3.0) > c.probability(s, 3.0)
    # can_reach is exact for logits up to the calibrated maximum: skipped pairs never pass
    for guard_logit in np.linspace(-12, 4, 33):
        pair = CandidateSignals(0.95, (), float(guard_logit))
        best = max(c.probability(pair, z) for z in np.linspace(-8, 6.0, 57))
        assert c.can_reach(pair, 0.87) == (best >= 0.87 - 1e-9)


def test_another_embedder_makes_the_cross_encoder_decide_alone_on_its_own_table() -> None:
    verifier = PairVerifier()
    assert verifier.combiner is not None
    combined = (verifier.default_threshold, verifier.vetoes)
    verifier.use_embedder("all-MiniLM-L6-v2")  # the one it was fitted with: nothing changes
    assert verifier.combiner is not None
    verifier.use_embedder("some-other-model")
    alone = verifier.meta["alone"]
    assert verifier.combiner is None
    assert (
        (verifier.default_threshold, verifier.vetoes)
        == (
            alone["default_threshold"],
            tuple(alone["vetoes"]),
        )
        != combined
    )
    s = verifier.signals("How do I reset my password?", "How can I reset it?", *np.eye(2), 0.0)
    assert s.guard_logit == 0.0 and verifier.probability(s, 1.0) == pytest.approx(
        1 / (1 + np.exp(-1))
    )


def test_another_embedder_says_at_start_what_deciding_alone_costs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # With a custom cache.semantic.embedding_model the log said only "the cross-encoder decides
    # alone": nothing said that its own threshold (0.95 with onnx-int8) turns down plain
    # rewordings ("How do I" / "How can I") the bundled embedder serves, nor what to set.
    verifier = PairVerifier()
    with caplog.at_level("WARNING", logger="semantic.verifier"):
        verifier.use_embedder("some-other-model")
    message = caplog.text
    assert f"default score threshold {verifier.default_threshold:.2f}" in message
    assert "fewer paraphrases" in message and "verifier_threshold" in message


def test_loading_the_shipped_verifier_prints_no_load_report(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """transformers calls the base model's classifier head missing; the delta supplies it."""
    from safetensors.torch import load_file

    import semantic
    from semantic.verifier import load_model

    shipped = Path(semantic.__file__).parent / "verifier"
    _, model = load_model(shipped)
    assert "LOAD REPORT" not in capfd.readouterr().err
    head = load_file(str(shipped / "delta.safetensors"))["classifier.weight"].float()
    assert bool((model.classifier.weight == head).all())  # the head came from the delta


# ---- the audit's background path -----------------------------------------------------------------

#: An answer as an audit compares two: long enough to fill ``max_length`` (128 tokens).
ANSWER = (
    "To reset your password, open Settings, choose Security, then select 'Reset password'. "
    "You will receive an email with a link valid for 24 hours; follow it and choose a new "
    "password of at least 12 characters, including a number and a symbol. "
) * 4


async def test_a_live_pair_is_scored_before_and_never_with_an_audits_pairs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch is padded to its longest pair, and an audit's pair fills ``max_length``: a live
    pair batched with one would wait several times its own pass. Audit pairs queue apart and are scored
    one at a time, alone, only while no live pair waits: a live pair queued after two of them
    goes first, and one that comes while the first is scored goes before the second."""
    verifier = PairVerifier()
    loop = asyncio.get_running_loop()
    first, second = (ANSWER, ANSWER.replace("24", "48")), (ANSWER, ANSWER.replace("12", "16"))
    live, late = ("How do I reset my password?", "How can I reset my password?"), ("a", "b")
    batches: list[list[tuple[str, str]]] = []
    arrived = threading.Event()
    score = verifier._score_in_worker
    tasks: list[asyncio.Task[float]] = []

    def look_up_late() -> None:  # on the loop: its pair is queued before ``arrived`` is set
        tasks.append(loop.create_task(verifier.verify_logit(*late)))
        loop.call_soon(arrived.set)

    def recorded(pairs: list[tuple[str, str]]) -> np.ndarray:
        batches.append(list(pairs))
        if pairs == [first]:  # a live lookup comes while the audit's pair is scored
            loop.call_soon_threadsafe(look_up_late)
            assert arrived.wait(30)
        return score(pairs)

    monkeypatch.setattr(verifier, "_score_in_worker", recorded)
    audits = [asyncio.ensure_future(verifier.verify_background(*p)) for p in (first, second)]
    await asyncio.sleep(0)  # both audit pairs are queued before the live one
    alone = await verifier.verify_logit(*live)
    scores = await asyncio.gather(*audits)
    assert batches == [[live], [first], [late], [second]]
    logits = [alone, *await asyncio.gather(*tasks)]  # (the late one's, made during ``first``)
    assert logits == pytest.approx(verifier.logits([live, late]).tolist(), abs=1e-4)
    assert scores == pytest.approx(verifier.score([first, second]).tolist(), abs=1e-4)


async def test_a_live_pair_whose_lookup_was_cancelled_is_not_scored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lookup whose client left (its task cancelled while its pair waits for the next pass)
    leaves nothing to score: its pair was batched with the others, a cross-encoder pass for
    nobody, as an embedder's text is not (its queue drops such callers)."""
    verifier = PairVerifier()
    batches: list[list[tuple[str, str]]] = []
    score = verifier._score_in_worker

    def recorded(pairs: list[tuple[str, str]]) -> np.ndarray:
        batches.append(list(pairs))
        return score(pairs)

    monkeypatch.setattr(verifier, "_score_in_worker", recorded)
    kept, gone = ("How do I reset my password?", "How can I reset my password?"), ("a", "b")
    waits = asyncio.ensure_future(verifier.verify_logit(*kept))
    left = asyncio.ensure_future(verifier.verify_logit(*gone))
    await asyncio.sleep(0)  # both pairs are queued, the pass has not started
    left.cancel()
    logit = await waits
    assert batches == [[kept]]  # was [[kept, gone]]
    assert logit == pytest.approx(float(verifier.logits([kept])[0]), abs=1e-4)
    assert left.cancelled()


async def test_a_live_pair_behind_a_busy_worker_gives_up_after_max_wait_and_is_never_scored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``max_wait`` bounds a live pair's wait for the verifier's worker, as the embedder's
    callers' (were: it waited for as long as the pass ahead took): past it VerifierBusy, and
    the pair is not scored once the worker is free. A pair that comes once the queue is older
    than its ``max_wait`` is refused at once; a pair without ``max_wait`` waits, and is scored."""
    verifier = PairVerifier()
    started, release, batches = held_worker(verifier, monkeypatch)
    busy, late, later, patient = (("How do I reset my password?", f"How can I {x}?")
                                  for x in ("reset it", "change it", "renew it", "reset mine"))  # fmt: skip
    ahead = asyncio.ensure_future(verifier.verify_logit(*busy, max_wait=0.05))
    while not started.is_set():  # (the worker is on the pass of ``busy``, held)
        await asyncio.sleep(0.01)
    waiting = asyncio.ensure_future(verifier.verify_logit(*patient))  # no bound: waits
    try:
        with pytest.raises(VerifierBusy):
            await asyncio.wait_for(verifier.verify_logit(*late, max_wait=0.05), timeout=30)
        refused = asyncio.ensure_future(verifier.verify_logit(*later, max_wait=0.05))
        await asyncio.sleep(0)  # (one step: its queue is older than its max_wait already)
        assert refused.done() and isinstance(refused.exception(), VerifierBusy)
        assert not ahead.done() and not waiting.done()  # a pass that started is waited for
    finally:
        release.set()
    logits = await asyncio.gather(ahead, waiting)
    assert batches == [[busy], [patient]]  # the pairs that gave up were never scored
    assert logits == pytest.approx(verifier.logits([busy, patient]).tolist(), abs=1e-4)
