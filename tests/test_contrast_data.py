"""bench/contrast_data.py: the committed evaluation and training files are what it writes, the
families added later (bench/contrast_more.py, contrast_more2.py) are training data only, and the
fresh held-out families (bench/contrast_fresh*.py) share no domain, lexicon or word with training."""

from __future__ import annotations

import json
import re

import pytest

from bench import (
    contrast_data,
    contrast_fresh,
    contrast_fresh2,
    contrast_fresh3,
    contrast_fresh4,
    contrast_fresh5,
    contrast_fresh6,
    contrast_fresh7,
    contrast_more,
    contrast_more2,
    train_verifier,
)

#: The added training rounds' families, and the held-out sets' modules.
ADDED = contrast_more.FAMILIES + contrast_more2.FAMILIES
FRESH = ((contrast_fresh, "fresh"), (contrast_fresh2, "fresh2"), (contrast_fresh3, "fresh3"),
         (contrast_fresh4, "fresh4"), (contrast_fresh5, "fresh5"),
         (contrast_fresh6, "fresh6"), (contrast_fresh7, "fresh7"))  # fmt: skip


def test_the_committed_files_are_what_the_generator_writes() -> None:
    # the held-out files above all: adding families must not change a row of them
    written = (
        contrast_data.generate() | contrast_data.generate_more() | contrast_data.generate_fresh()
    )
    assert set(written) == {"contrast_train", "contrast_heldout", "multiturn_train",
                            "multiturn_heldout", "contrast_more_train", "multiturn_more_train",
                            "contrast_more2_train", "multiturn_more2_train",
                            "contrast_fresh", "multiturn_fresh", "contrast_fresh2",
                            "multiturn_fresh2", "contrast_fresh3", "multiturn_fresh3",
                            "contrast_fresh4", "multiturn_fresh4", "contrast_fresh5",
                            "multiturn_fresh5", "contrast_fresh6", "multiturn_fresh6",
                            "contrast_fresh7", "multiturn_fresh7"}  # fmt: skip
    for stem, rows in written.items():
        lines = (contrast_data.DATA / f"{stem}.jsonl").read_text().splitlines()
        assert lines == [json.dumps(row, sort_keys=True) for row in rows], stem


def test_the_added_families_are_new_training_families() -> None:
    first = {f.name for f in contrast_data.FAMILIES}
    names = [f.name for f in ADDED]
    assert len(names) == len(set(names)) and not first & set(names)
    assert not any(contrast_data.held_out(f) for f in ADDED)
    assert not {f.domain for f in ADDED} & set(contrast_data.HELDOUT_DOMAINS)


def test_the_added_conversations_never_quote_a_held_out_family() -> None:
    # an irrelevant earlier exchange is another family's question: from training families only
    def opening(phrasing: str) -> str:  # (up to its first slot or polarity)
        return phrasing.split("{")[0].split("[")[0].strip()

    families = contrast_data.FAMILIES + ADDED
    training = [p for f in families if not contrast_data.held_out(f) for p in f.phrasings]
    held = [p for f in families if contrast_data.held_out(f) for p in f.phrasings]
    # the held-out phrasings' openings that no training phrasing starts with
    openings = {o for o in map(opening, held) if len(o) > 8}
    openings = {o for o in openings if not any(t.startswith(o) for t in training)}
    assert len(openings) > 20
    written = contrast_data.generate_more()
    rows = written["multiturn_more_train"] + written["multiturn_more2_train"]
    earlier = [r["b"][0]["content"] for r in rows if r["kind"] == "irrelevant_earlier"]
    assert earlier
    assert not [q for q in earlier if any(q.startswith(o) for o in openings)]


def test_the_fresh_families_are_held_out_and_share_no_word_with_training() -> None:
    trained = {f.domain for f in contrast_data.FAMILIES + ADDED}
    rows = contrast_data.generate_fresh()
    seen = _training_questions()
    domains: list[set[str]] = []
    for module, stem in FRESH:
        assert all(contrast_data.held_out(f) for f in module.FAMILIES)
        domains.append({f.domain for f in module.FAMILIES})
        assert not trained & domains[-1]
        assert {r["same"] for r in rows[f"contrast_{stem}"]} == {True, False}
        assert {r["same"] for r in rows[f"multiturn_{stem}"]} == {True, False}
        # no question the verifier trains or calibrates on (Quora aside) is a fresh row
        fresh = {r[k] for r in rows[f"contrast_{stem}"] for k in ("a", "b")}
        assert fresh and not fresh & seen
    assert sum(map(len, domains)) == len(set().union(*domains))  # (no domain in two sets)


def test_a_fresh_lexicon_that_repeats_a_training_word_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    used = contrast_data.LEXICONS["act_open"][1][0][0]  # a training verb ("open")
    bad = ("antonym", [("unbolt", used), ("bolt",)], True)
    monkeypatch.setattr(contrast_fresh, "LEXICONS", {**contrast_fresh.LEXICONS, "act_bolt_z": bad})
    with pytest.raises(ValueError, match="words"):
        contrast_data.generate_fresh()


def _training_questions() -> set[str]:
    """Every question of the contrast, multi-turn and adversarial files the verifier trains and
    calibrates on (bench.train_verifier.load_pairs, less Quora: its data is outside the repo)."""
    out: set[str] = set()
    for stem in (
        "contrast_train",
        "contrast_more_train",
        "contrast_more2_train",
        "adversarial_pairs",
    ):
        out |= {
            r[k] for r in train_verifier._rows(contrast_data.DATA / f"{stem}.jsonl") for k in "ab"
        }
    for stem in train_verifier.WRITTEN["both"]:
        written = train_verifier._rows(contrast_data.DATA / f"{stem}.jsonl")
        out |= {t[k] for t in written for k in ("q", "para", "trap")}
    for stem in ("multiturn_train", "multiturn_more_train", "multiturn_more2_train"):
        rows = train_verifier._rows(contrast_data.DATA / f"{stem}.jsonl")
        out |= {m["content"] for r in rows for k in "ab" for m in r[k] if m["role"] == "user"}
    return out


def test_the_written_triplets_are_whole_and_name_no_held_out_value() -> None:
    """bench/data/written_train.jsonl and written2_train.jsonl (``train_verifier --written on``,
    ``both``): each triplet a question, its paraphrase and a trap, three different texts, a
    known kind of trap; none names a distinctive value of a held-out lexicon (a name, a number
    with its unit, words that go together: not a lone everyday word like "get"), so the
    held-out sets stay unseen."""
    first, second = (train_verifier._rows(contrast_data.DATA / f"{stem}.jsonl")
                     for stem in train_verifier.WRITTEN["both"])  # fmt: skip
    assert len(first) > 1000 and len(second) > 1000
    triplets = first + second
    assert (
        len({t["id"] for t in triplets}) == len({t["q"].lower() for t in triplets}) == len(triplets)
    )
    kinds = {"negation", "antonym", "entity", "quantity", "time", "audience", "tier",
             "direction", "unit", "intent", "condition"}  # fmt: skip
    assert {t["kind"] for t in triplets} == kinds
    assert all(len({t["q"], t["para"], t["trap"]}) == 3 for t in triplets)
    held = {w for module, _ in FRESH for _, values, _ in module.LEXICONS.values()
            for v in values for w in v
            if (" " in w or re.search(r"[A-Z0-9]", w)) and not w.isdigit()}  # fmt: skip
    text = "\n".join(t[k] for t in triplets for k in ("q", "para", "trap"))
    assert not {w for w in held if not w.islower() and re.search(rf"\b{re.escape(w)}\b", text)}
    assert not {w for w in held if w.islower() and w in text.lower()}
    # each triplet is a family of three pairs: one to serve, two to refuse
    rows = train_verifier.written_rows(triplets[:2])
    assert [(r[2], r[4], r[5]) for r in rows[:3]] == [
        (True, "paraphrase", triplets[0]["id"]),
        (False, triplets[0]["kind"], triplets[0]["id"]),
        (False, triplets[0]["kind"], triplets[0]["id"]),
    ]
    assert {r[3] for r in rows} == {"written"} and len(rows) == 6


def test_the_written_conversations_ask_the_triplets_as_earlier_turns() -> None:
    """``train_verifier --written-turns on``: each triplet also gives conversations in the
    multi-turn format: the paraphrase as a reworded history is equivalent; the follow-up's
    opposite and the trap as the earlier question are not (no swap for an intent trap)."""
    base = {"q": "Which apps can't be removed?", "para": "What programs are stuck on my PC?",
            "trap": "Which apps can be removed?", "kind": "negation", "topic": "software"}  # fmt: skip
    triplets = [{**base, "id": "t:1"}, {**base, "id": "t:2", "kind": "intent"}]
    rows = train_verifier.written_conversations(triplets)
    assert rows == train_verifier.written_conversations(triplets)  # seeded per triplet
    assert [(r[2], r[4], r[5]) for r in rows] == [
        (True, "reworded_history", "t:1"),
        (False, "intent_flip", "t:1"),
        (False, "detail_swap", "t:1"),
        (True, "reworded_history", "t:2"),
        (False, "intent_flip", "t:2"),
    ]
    stored, reworded, flipped, swapped = (rows[0][0], rows[0][1], rows[1][1], rows[2][1])
    assert all(row[0] == stored and row[3] == "written" for row in rows[:3])
    follow_up, history = stored.split(" || ")
    assert history.endswith("user: " + base["q"]) and reworded.endswith("user: " + base["para"])
    assert swapped.startswith(follow_up + " || ") and swapped.endswith("user: " + base["trap"])
    opposite = next(flip for follows, flip in contrast_data.FOLLOW_UPS if follow_up in follows)
    assert flipped.split(" || ")[0] in opposite and flipped.endswith("user: " + base["q"])
