"""Precision guard: hard checks, the learned verifier, shipped defaults."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from semantic._guard_checks import analyze, compare
from semantic.embedder import Embedder
from semantic.guard import (
    DEFAULT_THRESHOLD,
    DEFAULT_WEIGHTS,
    HARD_CHECKS,
    Guard,
    GuardConfig,
    Verdict,
    Verifier,
)


@pytest.fixture(scope="session")
def guard() -> Guard:
    return Guard()


def judge(guard: Guard, embedder: Embedder, stored: str, query: str) -> Verdict:
    cand, q = embedder.encode([stored, query])
    return guard.check(query, q, stored, cand, float(q @ cand))


PARAPHRASES = [
    ("How do I reset my password?", "How can I reset my password?"),
    ("What is the capital of France?", "What's the capital city of France?"),
    ("How do I take a screenshot on a Mac?", "How can I take a screenshot on my Mac?"),
    (
        "What is the difference between tea and coffee?",
        "What is the difference between coffee and tea?",
    ),
    ("When did World War 2 end?", "When did the Second World War end?"),
    ("What foods are not safe for dogs to eat?", "What foods are unsafe for dogs to eat?"),
]

REJECTIONS = [
    ("Is the museum open on Mondays?", "Is the museum not open on Mondays?", "negation"),
    ("Is the pharmacy open on Sunday?", "Is the pharmacy closed on Sunday?", "antonym"),
    (
        "What is the best laptop under $500?",
        "What is the best laptop under $1000?",
        "number_mismatch",
    ),
    (
        "What are the new features of the iPhone 12?",
        "What are the new features of the iPhone 13?",
        "number_mismatch",
    ),
    (
        "How long does it take to drive 100 km?",
        "How long does it take to drive 100 miles?",
        "unit_mismatch",
    ),
    (
        "What is the weather like in Rome in July?",
        "What is the weather like in Rome in January?",
        "date_mismatch",
    ),
    (
        "What are the best restaurants in Paris?",
        "What are the best restaurants in Berlin?",
        "entity_mismatch",
    ),
    ("When was the Eiffel Tower built?", "Where was the Eiffel Tower built?", "question_type"),
    (
        "How do I get from Paris to Berlin by train?",
        "How do I get from Berlin to Paris by train?",
        "order_swap",
    ),
    ("Is Python faster than Java?", "Is Java faster than Python?", "order_swap"),
    ("Did Rome defeat Carthage?", "Did Carthage defeat Rome?", "order_swap"),
    ("Is 17 > 12?", "Is 17 < 12?", "number_mismatch"),
    ("Is x >= 5 true for x=5?", "Is x > 5 true for x=5?", "number_mismatch"),
    ("Is -4 < -7?", "Is -4 > -7?", "number_mismatch"),
]


@pytest.mark.parametrize(("stored", "query"), PARAPHRASES)
def test_accepts_paraphrases(guard: Guard, embedder: Embedder, stored: str, query: str) -> None:
    verdict = judge(guard, embedder, stored, query)
    assert verdict.accept, verdict
    assert verdict.reason == "ok" and guard.min_score <= verdict.score <= 1.0


@pytest.mark.parametrize(("stored", "query", "reason"), REJECTIONS)
def test_rejects_with_reason(
    guard: Guard, embedder: Embedder, stored: str, query: str, reason: str
) -> None:
    # Hard checks reject whatever the similarity (most of these pairs score >= 0.8).
    assert judge(guard, embedder, stored, query) == Verdict(False, 0.0, reason)


def test_comparison_operators_are_normalised() -> None:
    assert analyze("Is a ≥ b or a => c?").operators == (">=", ">=")
    assert compare(analyze("Is x ≤ 3?"), analyze("Is x <= 3?")).failed == ()
    assert compare(analyze("Is 17 > 12?"), analyze("Is 17 greater than 12?")).failed == ()


def test_a_spelled_out_number_is_read_whole() -> None:
    # "twenty-five" is 25, as "25" is: it was read as 20 and 5, a number_mismatch veto on a
    # paraphrase (found on the eighth held-out set's paraphrases, stop 49)
    assert _numbers("a seventy-five-minute set") == ["75"]
    assert _numbers("a hundred and twenty people") == ["120"]
    assert _numbers("three hundred and five") == ["305"]
    assert _numbers("two hundred thousand dollars") == ["200000"]
    assert _numbers("the twenty-first century") == ["21"]
    assert _numbers("ninety nine bottles") == ["99"]
    # words that do not build one number stay apart
    assert _numbers("five six seven") == ["5", "6", "7"]
    assert _numbers("two and three") == ["2", "3"]
    assert _numbers("fifteen twenty") == ["15", "20"]
    assert _numbers("a dozen eggs, half an hour") == ["0.5", "12"]
    same = compare(
        analyze("How long is a 25-minute set?"), analyze("How long is a twenty-five-minute set?")
    )
    assert "number_mismatch" not in same.failed
    other = compare(
        analyze("How long is a 25-minute set?"), analyze("How long is a twenty-minute set?")
    )
    assert "number_mismatch" in other.failed


def test_a_spelled_decimal_is_read_whole() -> None:
    # "eight and a half" is 8.5 and "sixteen point two" 16.2: they were read as 8 and 0.5, 16
    # and 2, a number_mismatch veto on a paraphrase (the eighth held-out set's, stop 50)
    assert _numbers("a split of eight and a half seconds") == ["8.5"]
    assert _numbers("sixteen point two seconds") == ["16.2"]
    assert _numbers("three and a half percent superfat") == ["3.5"]
    assert _numbers("one and a half hours") == ["1.5"]
    assert _numbers("zero point two five") == ["0.25"]
    assert _numbers("twenty point five") == ["20.5"]
    # "one" alone is still no number, and "point" needs a digit after it
    assert _numbers("which one and a friend") == []
    assert _numbers("two point of view") == ["2"]
    split = "What does a split of 8.5 seconds tell me?"
    assert "number_mismatch" not in _failed(split, "What does a split of eight and a half seconds?")
    assert "number_mismatch" in _failed(split, "What does a split of eight seconds tell me?")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How often should I feed a 21-day-old chick?", "How often should I feed a three-week-old chick?"),
        ("It has sat in the mold for five weeks: unmold?", "It has sat in the mold 35 days: unmold?"),
        ("Is half an hour enough to rest the dough?", "Is 30 minutes enough to rest the dough?"),
        ("Can a 2 year old eat honey?", "Can a 24 month old eat honey?"),
        ("Is a 90min walk too long for a puppy?", "Is a 1.5 hour walk too long for a puppy?"),
    ],
)  # fmt: skip
def test_durations_that_convert_are_one_quantity(a: str, b: str) -> None:
    # the same time in other units asks the same thing: no number or unit veto
    assert not {"number_mismatch", "unit_mismatch"} & _failed(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How often should I feed a 21-day-old chick?", "How often should I feed a 21-week-old chick?"),
        ("It has sat in the mold for five weeks: unmold?", "It has sat in the mold 30 days: unmold?"),
        ("Can I run 5 km in 2 hours?", "Can I run 5 miles in 120 minutes?"),
        ("Can 3 kids stay for 2 weeks?", "Can 4 kids stay for 14 days?"),
    ],
)  # fmt: skip
def test_durations_that_differ_or_come_with_other_differences_still_veto(a: str, b: str) -> None:
    # another duration, or the same one beside another number or unit, is still a difference
    assert {"number_mismatch", "unit_mismatch"} & _failed(a, b)


def test_a_prefixed_word_whose_base_its_own_text_has_is_no_negation() -> None:
    # "unmold" beside "mold" in the same question is an action, not "not mold": it was a negation
    # veto against a paraphrase that says "mold" once (the eighth held-out set's, stop 50)
    stored = "It has been in the mold for 6 hours. Should I unmold it now?"
    assert "negation" not in _failed(stored, "Is it time to pop out soap in its mold 6 hours?")
    # a plain prefix negation still is one, both ways
    assert "negation" in _failed("Is the water safe?", "Is the water unsafe?")
    assert "negation" in _failed("Is the water unsafe?", "Is the water safe?")


@pytest.mark.parametrize(
    ("a", "b", "check"),
    [
        ("We offer plan 2 and plan 4. What does plan 2 cost per month?",
         "We offer plan 2 and plan 4. What does plan 4 cost per month?", "number_mismatch"),
        ("I have a 2 TB drive and a 4 TB drive. How many photos fit on the 2 TB drive?",
         "I have a 2 TB drive and a 4 TB drive. How many photos fit on the 4 TB drive?",
         "number_mismatch"),
        ("Room 101 and room 102 are free. How big is room 101?",
         "Room 101 and room 102 are free. How big is room 102?", "number_mismatch"),
        ("Compare Paris and Rome: what is the population of Paris?",
         "Compare Paris and Rome: what is the population of Rome?", "entity_mismatch"),
    ],
)  # fmt: skip
def test_the_same_values_named_and_another_asked_about_veto(a: str, b: str, check: str) -> None:
    # both name the same two values, each asks about another: the sets are equal, and the
    # near-duplicate rail served the pair (a new-user review's traps, stop 51)
    assert check in _failed(a, b) and check in _failed(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Compare Paris and Rome: which is bigger, Paris or Rome?",
         "Which is bigger, Paris or Rome?"),  # (each named as often as the other, both sides)
        ("We offer plan 2 and plan 4. What does plan 2 cost per month?",
         "We have plans 2 and 4; how much is plan 2 a month?"),
        ("Is 5 a prime number? Why is 5 prime?", "Why is 5 a prime number?"),  # (one value)
        # (a conversation's turns repeat values as they go: read on single questions only)
        ("How much? || user: A 5-1 offense or a 6-2? | assistant: The 5-1 offense: more.",
         "And the price? || user: A 5-1 offense or a 6-2?"),
    ],
)  # fmt: skip
def test_the_same_value_asked_about_is_no_difference(a: str, b: str) -> None:
    assert not {"number_mismatch", "entity_mismatch"} & _failed(a, b)


def test_a_swap_around_instead_of_or_an_arrow_is_an_order_swap() -> None:
    # "X instead of Y" / "Y instead of X" and "A -> B" / "B -> A" turn the question around
    # (served context swaps of the eighth held-out set's conversations, stop 50)
    butter = "I want to use mango butter instead of babassu oil in my soap: what changes?"
    swapped = "I want to use babassu oil instead of mango butter in my soap: what changes?"
    assert "order_swap" in _failed(butter, swapped)
    roles = "Changing roles, vice-skip -> skip: what do I need to learn?"
    assert "order_swap" in _failed(
        roles, "Changing roles, skip -> vice-skip: what do I need to learn?"
    )
    # the same direction in other words is not
    assert "order_swap" not in _failed(roles, "Changing roles, vice-skip to skip: what do I learn?")
    assert "order_swap" not in _failed(butter, "Can I use mango butter in place of babassu oil?")


def _failed(a: str, b: str) -> set[str]:
    return set(compare(analyze(a), analyze(b)).failed)


def _numbers(text: str) -> list[str]:
    return sorted(analyze(text).numbers)


def test_a_name_and_its_possessive_are_one_name() -> None:
    # "Harris's" was the stem "harriss" where "Harris" is "harri": an entity_mismatch veto on a
    # paraphrase (found on the eighth held-out set's paraphrases, stop 49)
    assert analyze("a Harris's hawk").entities == analyze("a Harris hawk").entities == {"harri"}
    assert analyze("Is McDonald's open?").entities == analyze("Is McDonalds open?").entities
    assert analyze("What is Newton's first law?").entities == analyze("Is it Newton's?").entities
    other = compare(analyze("Flying a Harris's hawk?"), analyze("Flying a Cooper's hawk?"))
    assert "entity_mismatch" in other.failed


def test_names_in_a_compared_conversation_are_found_by_sentence() -> None:
    """A compared conversation strings sentences and turns together, each starting with a
    capital: those capitals are neither names nor Title Case (which turned every name off)."""
    from semantic.keys import compared_text

    def text(question: str, *turns: str) -> str:
        roles = ("user", "assistant")
        earlier = [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]
        return compared_text(question, earlier, 4)

    india = text("How do I turn it on?", "Can orders be sent to India?", "Sure. Here is how.")
    canada = text("How do I turn it on?", "Is delivery to Canada possible?", "Good question. Yes.")
    assert analyze(india).entities == {"india"} and analyze(canada).entities == {"canada"}
    assert "entity_mismatch" in compare(analyze(india), analyze(canada)).failed
    # reworded turns with other sentence openings are not an entity mismatch
    reworded = text("How do I turn it on?", "Can you send orders to India?", "Regarding that: yes.")
    assert "entity_mismatch" not in compare(analyze(india), analyze(reworded)).failed
    # single questions keep their rules: any capital after the first word, Title Case aside
    assert analyze("I use a Mac. Apple says what?").entities == {"mac", "apple"}
    assert analyze("Is The Eiffel Tower Open On Sunday?").entities == frozenset()


def test_negation_and_antonym_cancel() -> None:
    assert compare(analyze("Is the shop open?"), analyze("Is the shop not closed?")).failed == ()
    assert compare(analyze("Is the shop open?"), analyze("Is the shop closed?")).failed == (
        "antonym",
    )


def test_wordnet_antonyms_catch_opposites_the_hand_list_lacks() -> None:
    """Pairs only WordNet knows (a satellite adjective inheriting its head's antonym, a verb
    pair) are antonyms; prefix pairs stay negations; rewordings without an opposite pass."""

    def failed(a: str, b: str) -> tuple[str, ...]:
        return compare(analyze(a), analyze(b)).failed

    assert failed("Fee for an international wire?", "Fee for a domestic wire?") == ("antonym",)
    assert failed("Where can I find pricey hotels?", "Where can I find cheap hotels?") == (
        "antonym",
    )
    assert failed("How do I deposit cash?", "How do I withdraw cash?") == ("antonym",)
    assert failed("Is the data known?", "Is the data unknown?") == ("negation",)
    assert failed("How do I deposit cash?", "How can I deposit money?") == ()


def test_the_shipped_wordnet_list_is_what_the_generator_writes(tmp_path: Path) -> None:
    """semantic/antonyms_wordnet.txt regenerates byte for byte from Debian's wordnet-base
    (`make test` installs it), and holds no stopword and no multi-word entry."""
    from bench import wordnet_antonyms
    from semantic._guard_checks import STOPWORDS

    out = tmp_path / "antonyms.txt"
    wordnet_antonyms.main(["--out", str(out)])
    assert out.read_bytes() == wordnet_antonyms.OUT.read_bytes()
    pairs = [ln.split() for ln in out.read_text().splitlines() if not ln.startswith("#")]
    assert len(pairs) > 20_000
    assert all(len(p) == 2 and p[0] < p[1] for p in pairs)
    assert not {w for p in pairs for w in p} & STOPWORDS


def test_checks_are_symmetric_and_deterministic(guard: Guard, embedder: Embedder) -> None:
    for a, b, *_ in PARAPHRASES + REJECTIONS:
        assert compare(analyze(a), analyze(b)) == compare(analyze(b), analyze(a))
        va, vb = embedder.encode([a, b])
        first = guard.check(a, va, b, vb)
        assert first == guard.check(a, va, b, vb)
        assert first.accept == guard.check(b, vb, a, va).accept
        assert first.score == pytest.approx(guard.check(b, vb, a, va).score, abs=1e-5)


def test_verifier_rejects_low_scores(embedder: Embedder) -> None:
    strict = Guard(GuardConfig(min_score=1.0))
    verdict = judge(strict, embedder, *PARAPHRASES[0])
    assert not verdict.accept and verdict.reason == "verifier" and verdict.score < 1.0


def test_config_switches(embedder: Embedder) -> None:
    stored, query, _ = REJECTIONS[0]
    assert judge(Guard(GuardConfig(enabled=False)), embedder, stored, query) == Verdict(
        True, 1.0, "disabled"
    )
    no_negation = Guard(GuardConfig(checks=tuple(c for c in HARD_CHECKS if c != "negation")))
    assert judge(no_negation, embedder, stored, query).reason != "negation"
    with pytest.raises(ValueError):
        GuardConfig(checks=("no_such_check",))
    with pytest.raises(ValueError):
        GuardConfig(min_score=1.5)


def test_verifier_only_for_its_embedding_model(embedder: Embedder) -> None:
    other = Guard(embedding_model="some/other-model")
    assert other.verifier is None
    assert judge(other, embedder, *PARAPHRASES[0]) == Verdict(True, 1.0, "ok")
    stored, query, reason = REJECTIONS[2]
    assert judge(other, embedder, stored, query).reason == reason  # hard checks still run


def test_shipped_weights_file() -> None:
    assert DEFAULT_WEIGHTS.stat().st_size < 1_000_000
    verifier = Verifier.load(DEFAULT_WEIGHTS)
    assert verifier.embedding_model == "all-MiniLM-L6-v2" and verifier.dim == 384
    assert verifier.meta["threshold"] == DEFAULT_THRESHOLD
    assert 0.0 < verifier.min_score < 1.0
    x = np.zeros((3, len(verifier.mean)), dtype=np.float32)
    p = verifier.predict(x)
    assert p.shape == (3,) and np.all((p > 0) & (p < 1))


def test_check_latency(guard: Guard, embedder: Embedder) -> None:
    texts = [f"How do I learn topic number {i} quickly in {2000 + i}?" for i in range(200)]
    vecs = embedder.encode(texts)
    stored = vecs[0]
    start = time.perf_counter()
    for text, vec in zip(texts, vecs, strict=True):
        guard.check(text, vec, texts[0], stored)
    per_check = (time.perf_counter() - start) / len(texts)
    assert per_check < 0.005  # the budget is 5 ms; typically ~0.1 ms


def test_a_name_with_and_without_its_accents_is_one_name() -> None:
    # "[a-z]" split "Cancún" into "Canc" + "ún": the two spellings read as two places
    accented = analyze("Are hotels in Cancún cheaper over Easter?")
    plain = analyze("Do room rates in Cancun go down over Easter?")
    assert accented.entities == plain.entities == {"cancun", "easter"}
    assert "entity_mismatch" not in compare(accented, plain).failed
    other = analyze("Do room rates in Mérida go down over Easter?")
    assert other.entities == {"merida", "easter"}
    assert "entity_mismatch" in compare(accented, other).failed
    # only Latin letters that decompose to an ASCII letter are folded
    assert analyze("Is Łódź far from Kraków?").entities == {"łodz", "krakow"}
