"""Streaming text: UTF-8-safe incremental detokenisation and stop strings."""

from __future__ import annotations

from typing import Any

import pytest

from localmodel import Engine, SamplingParams, TextDelta
from localmodel.detok import CONTEXT_TOKENS, IncrementalDetokenizer, StopMatcher

TEXTS = [
    "héllo 🌍 世界 🎉 — ok",
    "👩‍👩‍👧‍👦 family, 🇫🇷 flag, 😀😃😄",
    "日本語のテキストと한국어 텍스트",
    "plain ascii with  double  spaces\nand lines",
]


def _stream(tokenizer: Any, text: str, context: list[int] | None = None) -> list[str]:
    detok = IncrementalDetokenizer(tokenizer, context or [])
    pieces = [detok.push(t) for t in tokenizer.encode(text, add_special_tokens=False)]
    return [*pieces, detok.flush()]


@pytest.mark.parametrize("text", TEXTS)
def test_stream_never_splits_a_character_and_reassembles_exactly(tokenizer: Any, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) > len(text.encode()) // 4  # multi-byte characters span several tokens
    pieces = _stream(tokenizer, text)
    assert all("\ufffd" not in piece for piece in pieces)
    if not text.isascii():
        assert "" in pieces[:-1]  # some token ended mid-character and was held back
    assert "".join(pieces) == text


def test_context_tokens_are_not_emitted_and_specials_are_skipped(tokenizer: Any) -> None:
    context = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    pieces = _stream(tokenizer, "Bonjour 🌍!", context)
    assert "".join(pieces) == "Bonjour 🌍!"
    detok = IncrementalDetokenizer(tokenizer, context)
    assert detok.push(tokenizer.convert_tokens_to_ids("<|im_end|>")) == ""


def _cuts_mid_character(tokenizer: Any, ids: list[int]) -> list[int]:
    """Where a prompt of ``ids[:cut]`` ends inside a character (its text ends in U+FFFD)."""
    return [cut for cut in range(1, len(ids)) if tokenizer.decode(ids[:cut]).endswith("\ufffd")]


def _complete_text(tokenizer: Any, ids: list[int]) -> str:
    """The text of ``ids`` up to its last complete character."""
    return str(tokenizer.decode(ids)).removesuffix("\ufffd")


@pytest.mark.parametrize("text", TEXTS[:3])
def test_a_prompt_ending_mid_character_streams_that_character_whole(
    tokenizer: Any, text: str
) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    cuts = _cuts_mid_character(tokenizer, ids)
    assert cuts  # the text has characters split across tokens
    for cut in cuts:
        prompt, completion = ids[:cut], ids[cut:]
        detok = IncrementalDetokenizer(tokenizer, prompt[-CONTEXT_TOKENS:])
        pieces = [*(detok.push(t) for t in completion), detok.flush()]
        assert all("\ufffd" not in piece for piece in pieces), (cut, pieces)
        shown = _complete_text(tokenizer, prompt)  # the split character is not in it
        assert "".join(pieces) == text[len(shown) :], cut


def test_a_character_the_completion_does_not_finish_stays_the_prompts(tokenizer: Any) -> None:
    ids = tokenizer.encode("Hello 🌍", add_special_tokens=False)
    prompt = ids[: _cuts_mid_character(tokenizer, ids)[0]]
    detok = IncrementalDetokenizer(tokenizer, prompt)
    pieces = [detok.push(t) for t in tokenizer.encode(" world", add_special_tokens=False)]
    assert "".join([*pieces, detok.flush()]) == " world"


def test_engine_streams_a_character_the_prompt_began(engine: Engine) -> None:
    tokenizer = engine.tokenizer
    ids = tokenizer.encode("Hello 🌍", add_special_tokens=False)
    prompt = ids[: _cuts_mid_character(tokenizer, ids)[0]]  # token ids: /v1/completions allows it
    params = SamplingParams(temperature=0.0, max_tokens=2)
    request = engine.prepare(prompt, params, namespace="detok")
    streamed = "".join(e.text for e in engine.generate(request) if isinstance(e, TextDelta))
    choice = engine.complete(engine.prepare(prompt, params, namespace="detok")).choices[0]
    whole = str(tokenizer.decode([*prompt, *choice.token_ids]))
    assert "\ufffd" not in whole  # the bundled model finishes the emoji in its two tokens
    assert streamed == choice.text == whole[len(_complete_text(tokenizer, prompt)) :]
    assert choice.text and "\ufffd" not in choice.text


def test_stop_matcher_without_stops_passes_text_through() -> None:
    stops = StopMatcher(())
    assert stops.push("abc") == ("abc", False)
    assert stops.flush() == ""


def test_stop_matcher_holds_back_possible_beginnings() -> None:
    stops = StopMatcher(("STOP",))
    assert stops.push("hello S") == ("hello ", False)  # "S" may start "STOP"
    assert stops.push("T") == ("", False)
    assert stops.push("x") == ("STx", False)  # it did not
    assert stops.flush() == ""


def test_stop_matcher_finds_a_stop_split_across_pieces() -> None:
    stops = StopMatcher(("\n\n", "END"))
    out = [stops.push(p) for p in ["one\n", "\ntwo", " three"]]
    assert out[0] == ("one", False)
    assert out[1] == ("", True)
    assert out[2] == ("", True)
    assert stops.flush() == ""
    assert stops.matched == "\n\n"


def test_stop_matcher_earliest_stop_wins_and_flush_returns_tail() -> None:
    stops = StopMatcher(("cd", "bcdx"))
    assert stops.push("abcd") == ("ab", True)
    assert stops.matched == "cd"
    tail = StopMatcher(("xyz",))
    assert tail.push("abc xy") == ("abc ", False)
    assert tail.flush() == "xy"
    assert tail.matched is None  # never reached
    same_place = StopMatcher(("abc", "ab"))  # both start at one place: the first listed
    assert same_place.push("xabc") == ("x", True) and same_place.matched == "abc"
