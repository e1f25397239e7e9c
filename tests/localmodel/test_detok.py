"""Streaming text: UTF-8-safe incremental detokenisation and stop strings."""

from __future__ import annotations

from typing import Any

import pytest

from localmodel.detok import IncrementalDetokenizer, StopMatcher

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
