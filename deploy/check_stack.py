"""What deploy/test-images.sh asks the running compose stack, as a user would: the openai SDK.

    python deploy/check_stack.py ask URL STATE_FILE      a new question: a miss answered by the
                                                         model, then the same question: an exact hit
    python deploy/check_stack.py again URL STATE_FILE    the question asked before: an exact hit
                                                         with the same answer (after down / up)
    python deploy/check_stack.py shared URL_A URL_B      a miss through A, then an exact hit
                                                         through B with A's answer (Redis replicas)

Each prints one line per request (the x-cache header and the answer) and exits 1, saying why,
when the stack answers otherwise. The questions are fixed: the script starts each stack on new
volumes, so the first time is a miss.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from openai import OpenAI

MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class Answer:
    """One chat completion as the client saw it."""

    cache: str  # the gateway's x-cache header: miss, exact, semantic
    content: str
    cached_tokens: int | None  # usage.prompt_tokens_details.cached_tokens (the worker's prefix)


def ask(base_url: str, question: str) -> Answer:
    """Asks the bundled model `question` through the gateway at `base_url` (…/v1)."""
    client = OpenAI(base_url=base_url, api_key="unused", timeout=300, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": question}],
        max_tokens=24,
        temperature=0,
    )
    completion = raw.parse()
    details = completion.usage.prompt_tokens_details if completion.usage else None
    answer = Answer(
        cache=raw.headers.get("x-cache", "?"),
        content=completion.choices[0].message.content or "",
        cached_tokens=details.cached_tokens if details else None,
    )
    print(f"  {base_url}  x-cache={answer.cache:<6} {answer.content[:70]!r}")
    return answer


def main(argv: list[str]) -> int:
    mode, *args = argv
    try:
        if mode == "ask":
            _ask_twice(args[0], Path(args[1]))
        elif mode == "again":
            _ask_again(args[0], Path(args[1]))
        elif mode == "shared":
            _ask_through_two(args[0], args[1])
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    except _Failed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


class _Failed(Exception):
    pass


def _ask_twice(base_url: str, state: Path) -> None:
    question = "In one sentence: what is a cache?"
    first = ask(base_url, question)
    _expect(first.cache == "miss", f"a new question was {first.cache!r}, not a miss")
    _expect(first.content.strip() != "", "the model answered with nothing")
    second = ask(base_url, question)
    _expect(second.cache == "exact", f"the repeated question was {second.cache!r}, not exact")
    _expect(second.content == first.content, "the cached answer differs from the first")
    state.write_text(json.dumps({"question": question, "content": first.content}))


def _ask_again(base_url: str, state: Path) -> None:
    saved = json.loads(state.read_text())
    answer = ask(base_url, saved["question"])
    _expect(answer.cache == "exact", f"after down/up the question was {answer.cache!r}")
    _expect(answer.content == saved["content"], "after down/up the answer changed")


def _ask_through_two(url_a: str, url_b: str) -> None:
    question = "In one sentence: what is a database?"
    first = ask(url_a, question)
    _expect(first.cache == "miss", f"a new question was {first.cache!r} through {url_a}")
    second = ask(url_b, question)
    _expect(second.cache == "exact", f"{url_b} answered {second.cache!r}, not A's stored answer")
    _expect(second.content == first.content, f"{url_b} answered differently from {url_a}")


def _expect(condition: bool, why: str) -> None:
    if not condition:
        raise _Failed(why)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
