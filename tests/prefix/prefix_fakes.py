"""A fake KVSpan for the prefix tests: it records the token ids it covers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prefix import Match


@dataclass(frozen=True, slots=True)
class FakeSpan:
    """KV of `tokens`: `bytes_per_token` each, plus `overhead` bytes per span.

    A non-zero overhead makes nbytes non-proportional to tokens, so that splitting a
    span costs bytes (as padding or per-span headers would).
    """

    tokens: tuple[int, ...]
    bytes_per_token: int = 4
    overhead: int = 0

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        return len(self.tokens) * self.bytes_per_token + self.overhead

    def slice(self, start: int, stop: int) -> FakeSpan:
        return FakeSpan(self.tokens[start:stop], self.bytes_per_token, self.overhead)


def span(tokens: Sequence[int], bytes_per_token: int = 4, overhead: int = 0) -> FakeSpan:
    return FakeSpan(tuple(tokens), bytes_per_token, overhead)


def covered(match: Match) -> tuple[int, ...]:
    """The token ids the match's spans cover, concatenated."""
    out: list[int] = []
    for s in match.spans:
        assert isinstance(s, FakeSpan)
        out.extend(s.tokens)
    return tuple(out)


def served(match: Match) -> tuple[int, ...]:
    """The token ids whose KV the caller would reuse: the first n_cached covered."""
    tokens = covered(match)
    assert len(tokens) >= match.n_cached
    return tokens[: match.n_cached]
