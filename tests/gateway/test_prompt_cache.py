"""Automatic cache_control breakpoints (gateway.prompt_cache): pure planning, no HTTP."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.prompt_cache import (
    LOOKBACK_BLOCKS,
    MAX_BREAKPOINTS,
    PromptCacher,
    blocks_of,
    marks_accepted,
    min_cacheable_tokens,
)

LONG = "All prices include VAT. Opening hours are nine to five. " * 40  # ~560 tokens


def marks(body: dict[str, Any]) -> list[tuple[str, int, int, str]]:
    """(segment, i, j, ttl) of every block carrying cache_control."""
    return [(*b.where, b.client_ttl) for b in blocks_of(body) if b.client_ttl is not None]


def conversation(turns: int, system: str = LONG) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for n in range(turns):
        messages.append({"role": "user", "content": f"question {n}: " + "detail " * 30})
        messages.append({"role": "assistant", "content": f"answer {n}: " + "words " * 30})
    messages.append({"role": "user", "content": f"question {turns}?"})
    return {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": system,
            "messages": messages}  # fmt: skip


def test_first_request_marks_its_end_and_the_system_prompt() -> None:
    sent = PromptCacher(min_tokens=100).prepare("t", conversation(2), now=0.0)
    assert marks(sent) == [("system", 0, -1, "5m"), ("messages", 4, 0, "5m")]
    assert sent["system"][0]["text"] == LONG  # a string system prompt became one block


def test_the_client_body_is_not_changed() -> None:
    body = conversation(1)
    before = repr(body)
    PromptCacher(min_tokens=1).prepare("t", body, now=0.0)
    assert repr(body) == before


def test_prefix_shorter_than_the_minimum_gets_no_mark() -> None:
    body = {"max_tokens": 5, "system": "short", "messages": [{"role": "user", "content": "hi"}]}
    assert PromptCacher(min_tokens=1024).prepare("t", body, now=0.0) is body
    assert min_cacheable_tokens("claude-haiku-4-5") == 4096
    assert min_cacheable_tokens("claude-3-5-haiku-latest") == 2048
    assert min_cacheable_tokens("claude-sonnet-4-5") == 1024


def test_divergence_from_the_previous_request_is_marked() -> None:
    """Two questions after the same long shared turn: the shared part gets its own entry."""
    cacher = PromptCacher(min_tokens=100)
    shared = [{"role": "user", "content": [{"type": "text", "text": LONG},
                                           {"type": "text", "text": "first question"}]}]  # fmt: skip
    cacher.prepare("t", {"max_tokens": 5, "messages": shared}, now=0.0)
    other = [{"role": "user", "content": [{"type": "text", "text": LONG},
                                          {"type": "text", "text": "second question"}]}]  # fmt: skip
    sent = cacher.prepare("t", {"max_tokens": 5, "messages": other}, now=1.0)
    assert marks(sent) == [("messages", 0, 0, "5m"), ("messages", 0, 1, "5m")]


def test_tenants_do_not_see_each_others_history() -> None:
    cacher = PromptCacher(min_tokens=100)
    first = [{"role": "user", "content": [{"type": "text", "text": LONG},
                                          {"type": "text", "text": "q1"}]}]  # fmt: skip
    second = [{"role": "user", "content": [{"type": "text", "text": LONG},
                                           {"type": "text", "text": "q2"}]}]  # fmt: skip
    cacher.prepare("a", {"max_tokens": 5, "messages": first}, now=0.0)
    sent = cacher.prepare("b", {"max_tokens": 5, "messages": second}, now=1.0)
    assert marks(sent) == [("messages", 0, 1, "5m")]  # b never sent the shared part before


def test_client_marks_are_kept_and_never_exceeded() -> None:
    body = conversation(3)
    body["system"] = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    for message in body["messages"][:3]:
        message["content"] = [{"type": "text", "text": message["content"],
                               "cache_control": {"type": "ephemeral"}}]  # fmt: skip
    sent = PromptCacher(min_tokens=1).prepare("t", body, now=0.0)
    assert sent is body  # four already: nothing added, nothing moved
    body["messages"][2]["content"][0].pop("cache_control")
    sent = PromptCacher(min_tokens=1).prepare("t", body, now=0.0)
    assert len(marks(sent)) == MAX_BREAKPOINTS
    assert marks(sent)[-1][:3] == ("messages", 6, 0)  # the one free mark went to the end
    assert sent["system"] == body["system"]


def test_a_gap_longer_than_five_minutes_chooses_the_hour_ttl() -> None:
    cacher = PromptCacher(min_tokens=100)
    cacher.prepare("t", conversation(1), now=0.0)
    sent = cacher.prepare("t", conversation(2), now=600.0)  # the same conversation, 10 min on
    assert {ttl for *_, ttl in marks(sent)} == {"1h"}
    sent = cacher.prepare("t", conversation(3), now=630.0)  # 30 s on: 5 minutes suffice
    assert {ttl for *_, ttl in marks(sent)} == {"5m"}
    sent = cacher.prepare("t", conversation(4), now=630.0 + 7200)  # 2 h: neither survives
    assert {ttl for *_, ttl in marks(sent)} == {"5m"}


def test_hour_marks_never_follow_a_client_five_minute_mark() -> None:
    cacher = PromptCacher(min_tokens=100, ttl="1h")
    body = conversation(1)
    body["system"] = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    sent = cacher.prepare("t", body, now=0.0)
    assert [ttl for *_, ttl in marks(sent)] == ["5m", "5m"]


def test_marks_keep_written_prefixes_within_the_lookback() -> None:
    """A long agent turn (many blocks) after a known prefix: the shared end stays marked."""
    cacher = PromptCacher(min_tokens=100)
    body = conversation(1)
    cacher.prepare("t", body, now=0.0)
    results = [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"} for i in range(30)]
    longer = {**body, "messages": [*body["messages"], {"role": "assistant", "content": "calling"},
                                   {"role": "user", "content": results}]}  # fmt: skip
    sent = cacher.prepare("t", longer, now=1.0)
    positions = [i for i, b in enumerate(blocks_of(sent)) if b.client_ttl is not None]
    assert positions[-1] == len(blocks_of(sent)) - 1
    assert 3 in positions  # the previous request's end, 31 blocks before this one's
    assert all(b - a <= LOOKBACK_BLOCKS for a, b in itertools.pairwise(positions))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=40),
    st.lists(st.integers(0, 40), max_size=6),
)
def test_never_more_than_four_marks_and_client_marks_untouched(
    sizes: list[int], client: list[int]
) -> None:
    messages = [{"role": "user" if i % 2 == 0 else "assistant",
                 "content": [{"type": "text", "text": "x" * 200 * (s + 1)} for s in range(n + 1)]}
                for i, n in enumerate(sizes)]  # fmt: skip
    flat = [block for m in messages for block in m["content"]]
    for index in client[:4]:
        if index < len(flat):
            flat[index]["cache_control"] = {"type": "ephemeral"}
    before = marks({"messages": messages})
    cacher = PromptCacher(min_tokens=60)
    for now in (0.0, 1.0):
        sent = cacher.prepare("t", {"max_tokens": 9, "messages": messages}, now=now)
        after = marks(sent)
        assert len(after) <= MAX_BREAKPOINTS
        assert set(before) <= set(after)


def test_a_top_level_cache_control_counts_as_a_client_mark() -> None:
    body = conversation(2)
    for message in body["messages"][:3]:
        message["content"] = [{"type": "text", "text": message["content"],
                               "cache_control": {"type": "ephemeral"}}]  # fmt: skip
    assert len(marks(PromptCacher(min_tokens=1).prepare("t", body, now=0.0))) == 4
    body["cache_control"] = {"type": "ephemeral"}  # the API's automatic mark: one of the four
    assert PromptCacher(min_tokens=1).prepare("t", body, now=0.0) is body


def test_client_marks_inside_tool_results_count_against_the_four() -> None:
    """The API counts a mark on a tool result's content block like any other: with two such
    and two on text blocks, a fifth mark would have the request refused."""
    mark = {"type": "ephemeral"}
    body = conversation(3)
    for n, message in enumerate(body["messages"][:4]):
        text = {"type": "text", "text": message["content"], "cache_control": mark}
        if n in (2, 3):  # (the role does not matter here)
            message["content"] = [
                {"type": "tool_result", "tool_use_id": f"t{n}", "content": [text]}
            ]
        else:
            message["content"] = [text]
    assert PromptCacher(min_tokens=1).prepare("t", body, now=0.0) is body  # four already
    body["messages"][0]["content"][0].pop("cache_control")
    sent = PromptCacher(min_tokens=1, ttl="1h").prepare("t", body, now=0.0)
    assert str(sent).count("cache_control") == MAX_BREAKPOINTS
    # the one free mark: at the end, and 5m (a 1h one must not follow the client's 5m ones)
    assert sent["messages"][-1]["content"][0]["cache_control"] == mark


def test_marks_accepted_as_the_api_takes_them() -> None:
    """What the response-cache key may leave out (messages._keyed): only marks the API takes;
    any it refuses keep the request apart, so no hit answers what a miss refuses."""
    mark, hour = {"type": "ephemeral"}, {"type": "ephemeral", "ttl": "1h"}

    def body(*controls: Any, first: str = "text", top: Any = None) -> dict[str, Any]:
        blocks: list[Any] = [{"type": first, "text": "t", "thinking": "t", "signature": "s"}]
        blocks += [{"type": "text", "text": f"b{n}"} for n in range(len(controls) - 1)]
        marked = [{**b, "cache_control": c} for b, c in zip(blocks, controls, strict=False)]
        return {"messages": [{"role": "user", "content": marked}],
                **({"cache_control": top} if top is not None else {})}  # fmt: skip

    result = {"type": "tool_result", "tool_use_id": "t1",
              "content": [{"type": "text", "text": "12 C", "cache_control": mark}]}  # fmt: skip
    nested = {"messages": [{"role": "user", "content": [result]}], "cache_control": mark}
    assert marks_accepted(body()) and marks_accepted(body(None))  # (none; a null one is none)
    assert marks_accepted(body(hour, mark, mark, top=mark)) and marks_accepted(nested)
    assert not marks_accepted(body(mark, mark, mark, mark, top=mark))  # (a fifth: top-level)
    assert not marks_accepted(body(mark, hour))  # (1h after 5m)
    assert not marks_accepted(body(mark, top=hour))  # (the top-level one is last)
    assert not marks_accepted(body(mark, first="thinking"))
    for control in ({"type": "persistent"}, {**mark, "ttl": "2h"}, {**mark, "x": 1}, "on"):
        assert not marks_accepted(body(control)), control
