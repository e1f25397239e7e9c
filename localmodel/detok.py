"""Streaming text: incremental detokenisation and stop strings.

Byte-level BPE tokens are not characters: 🌍 is four bytes and may arrive as three
tokens, and a SentencePiece token's leading space depends on its neighbours. So
``decode(token)`` per token is wrong; :class:`IncrementalDetokenizer` decodes a short window
and emits only the text that the newest token *completes* (the prefix/read offset scheme
of vLLM and TGI), holding it back while it still ends in U+FFFD (an unfinished character),
and dropping it when generation ends before it is finished.

:class:`StopMatcher` then cuts the text before the first stop string. In a stream it holds
back any tail that could still become a stop string, so a client never sees half of one.

Example::

    detok, stops = IncrementalDetokenizer(tokenizer, prompt[-6:]), StopMatcher(("\\n\\n",))
    for token in tokens:
        text, stopped = stops.push(detok.push(token))
        send(text)
        if stopped:
            break
    else:
        text, _ = stops.push(detok.flush())
        send(text + stops.flush())
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["CONTEXT_TOKENS", "IncrementalDetokenizer", "StopMatcher"]

CONTEXT_TOKENS = 6
"""Prompt tokens to seed the detokenizer with, so the first completion token decodes with
the same leading-space handling it would have inside the full text (vLLM uses 5 + 1)."""

_REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """Turns a stream of token ids into a stream of complete UTF-8 text pieces.

    ``tokens[prefix_offset:read_offset]`` is a window already emitted; decoding it and the
    window extended to the newest token, the difference is the new text. Special tokens are
    skipped (chat markers never reach the client).

    A context that ends mid-character (a token-id prompt cut inside a character, its last
    token carrying the first bytes) decodes to a trailing U+FFFD. A completion that
    finishes the character emits it whole, as the text of prompt + completion shows it:
    prompt ``Hello`` + the first bytes of 🌍, completion its last bytes + `` world``, streams
    ``"🌍 world"``, where decoding the completion's ids alone starts with U+FFFDs. A
    completion that does not finish it does not emit it: that broken character is the
    prompt's, and no U+FFFD of the prompt's making reaches the client.
    """

    def __init__(self, tokenizer: Any, context: Sequence[int] = ()) -> None:
        self._tokenizer = tokenizer
        self._tokens: list[int] = list(context)
        self._read_offset = len(self._tokens)
        self._prefix_offset = max(0, self._read_offset - CONTEXT_TOKENS)

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes (often ``""`` mid-character)."""
        self._tokens.append(token_id)
        new_text, emitted = self._window()
        if len(new_text) <= emitted or new_text.endswith(_REPLACEMENT):
            return ""  # NOTE: an unfinished multi-byte character decodes to U+FFFD; wait for more
        self._prefix_offset, self._read_offset = self._read_offset, len(self._tokens)
        return new_text[emitted:]

    def flush(self) -> str:
        """Text still held back at the end of generation, less a character its last tokens
        left unfinished (``max_tokens`` cut inside an emoji: the tokens that would finish it
        never came), as vLLM and TGI drop it: a U+FFFD there is no text the model wrote.
        A broken byte sequence *inside* the text still shows as U+FFFD."""
        new_text, emitted = self._window()
        self._prefix_offset = self._read_offset = len(self._tokens)
        return new_text[emitted:].rstrip(_REPLACEMENT)

    def _window(self) -> tuple[str, int]:
        """The window decoded to the newest token, and how many of its characters were emitted.

        NOTE: the read offset only moves to a token that ends a character, so the emitted
        text is a prefix of the new text, except where the context ended mid-character:
        there its trailing U+FFFD turns into the finished character, so only the start the
        two share counts as emitted.
        """
        emitted_text = self._decode(self._prefix_offset, self._read_offset)
        new_text = self._decode(self._prefix_offset, len(self._tokens))
        if not emitted_text.endswith(_REPLACEMENT):
            return new_text, len(emitted_text)
        return new_text, _shared_prefix_len(emitted_text, new_text)

    def _decode(self, start: int, stop: int) -> str:
        return str(
            self._tokenizer.decode(
                self._tokens[start:stop],
                skip_special_tokens=True,
                clean_up_tokenization_spaces=False,
            )
        )


class StopMatcher:
    """Cuts streamed text before the first stop string, holding back possible beginnings.

    NOTE: a stop string that completes in the newest piece must have started inside the
    held-back tail (any suffix that is a prefix of a stop string is held), so searching
    ``held + piece`` finds every occurrence exactly once.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._held = ""
        self.stopped = False
        #: The stop string that was reached (the earliest in the text; of two that start
        #: there, the first listed).
        self.matched: str | None = None

    def push(self, text: str) -> tuple[str, bool]:
        """Return ``(text safe to emit, whether a stop string was reached)``."""
        if self.stopped:
            return "", True
        if not self._stops:
            return text, False
        buffer = self._held + text
        found = [(i, n) for n, i in enumerate(buffer.find(s) for s in self._stops) if i >= 0]
        if found:
            cut, which = min(found)
            self._held, self.stopped, self.matched = "", True, self._stops[which]
            return buffer[:cut], True
        keep = self._partial_stop_len(buffer)
        self._held = buffer[len(buffer) - keep :]
        return buffer[: len(buffer) - keep], False

    def flush(self) -> str:
        """At the end of generation the held tail is plain text after all."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial_stop_len(self, buffer: str) -> int:
        """Length of the longest suffix of ``buffer`` that is a proper prefix of a stop string."""
        longest = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(buffer)), longest, -1):
                if buffer.endswith(stop[:size]):
                    longest = size
                    break
        return longest


def _shared_prefix_len(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)
