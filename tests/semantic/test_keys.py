"""Cache keys: scope (exact match) and question (semantic match)."""

from __future__ import annotations

from typing import Any

from semantic.keys import chat_key, completion_key, entry_id, salted


def body(*messages: tuple[str, Any], **params: Any) -> dict[str, Any]:
    return {"messages": [{"role": r, "content": c} for r, c in messages], **params}


Q = ("user", "What is the capital of France?")
Q_MESSAGE = {"role": Q[0], "content": Q[1]}


def test_question_is_the_last_user_message() -> None:
    key = chat_key("t", "", "m", body(("system", "Be brief."), Q))
    assert key.question == Q[1] and key.semantic


def test_output_changing_parameters_change_the_scope_only() -> None:
    base = chat_key("t", "", "m", body(Q))
    for params in ({"temperature": 0.5}, {"top_p": 0.9}, {"max_tokens": 5}, {"stop": ["x"]}, {"seed": 1},
                   {"n": 2}, {"tools": [{"type": "function"}]}, {"tool_choice": "auto"},
                   {"response_format": {"type": "json_object"}}, {"unknown_vendor_flag": True}):  # fmt: skip
        other = chat_key("t", "", "m", body(Q, **params))
        assert other.scope != base.scope and other.exact != base.exact, params
        assert other.question == base.question


def test_fields_that_do_not_change_the_answer_are_ignored() -> None:
    base = chat_key("t", "", "m", body(Q))
    same = chat_key("t", "", "m", body(Q, stream=True, stream_options={"include_usage": True}, user="u1",
                                       metadata={"a": "b"}, cache={"ttl": 5}))  # fmt: skip
    assert same == base


def test_a_null_field_is_the_field_left_unset() -> None:
    base = chat_key("t", "", "m", body(Q))
    assert chat_key("t", "", "m", body(Q, seed=None, stop=None, tools=None, n=None)) == base
    assert completion_key("t", "", "m", {"prompt": "x", "stop": None}) == completion_key(
        "t", "", "m", {"prompt": "x"}
    )
    # a field no API documents stays: a backend may refuse it, and a hit must not answer it
    assert chat_key("t", "", "m", body(Q, frobnicate=None)).scope != base.scope
    # so does another API's turns field (a chat "prompt", a completion's "messages")
    assert chat_key("t", "", "m", body(Q, prompt="Write a poem")).scope != base.scope
    assert completion_key("t", "", "m", {"prompt": "x", "messages": [Q_MESSAGE]}) != (
        completion_key("t", "", "m", {"prompt": "x"})
    )


def test_a_messages_null_fields_are_the_fields_left_unset() -> None:
    """An answer sent back as the openai SDK gives it (``model_dump()``) is the conversation
    with its text alone: for the exact key and the semantic scope, in both context modes."""
    answer = {"role": "assistant", "content": "Paris.", "refusal": None, "annotations": [],
              "audio": None, "function_call": None, "tool_calls": None}  # fmt: skip
    plain = body(("user", "Hi"), ("assistant", "Paris."), Q)
    dumped = {"messages": [{"role": "user", "content": "Hi", "name": None}, answer,
                           {**plain["messages"][-1], "name": None}]}  # fmt: skip
    for mode in ("exact", "verify"):
        assert chat_key("t", "", "m", dumped, context=mode) == chat_key(
            "t", "", "m", plain, context=mode
        )
    # what OpenAI refuses (an empty tool_calls), or another API's message, stays as sent
    empty = {"messages": [plain["messages"][0], {**answer, "tool_calls": []}, Q_MESSAGE]}
    assert chat_key("t", "", "m", empty).exact != chat_key("t", "", "m", plain).exact
    for api in ("messages", "responses"):
        a, b = (chat_key("t", "", "m", x, api=api) for x in (dumped, plain))
        assert a.exact != b.exact, api


def test_a_field_sent_as_its_documented_default_is_the_field_left_unset() -> None:
    base = chat_key("t", "", "m", body(Q, stop=["x"]))
    same = chat_key("t", "", "m", body(Q, stop="x", n=1, response_format={"type": "text"}))
    assert same == base
    # not a default some backend reads otherwise (a local model's temperature is its own)
    for params in ({"n": True}, {"temperature": 1}, {"top_p": 1}, {"stop": ["x", "y"]}):
        assert chat_key("t", "", "m", body(Q, **{"stop": "x", **params})).scope != base.scope
    assert completion_key("t", "", "m", {"prompt": "x", "n": 1, "stop": "."}) == completion_key(
        "t", "", "m", {"prompt": "x", "stop": ["."]}
    )


def test_tenant_namespace_model_system_prompt_and_history_change_the_scope() -> None:
    base = chat_key("t", "", "m", body(Q))
    variants = [
        chat_key("t2", "", "m", body(Q)),
        chat_key("t", "ns", "m", body(Q)),
        chat_key("t", "", "m2", body(Q)),
        chat_key("t", "", "m", body(("system", "Answer in French."), Q)),
        chat_key("t", "", "m", body(("user", "Hi"), ("assistant", "Hello"), Q)),
    ]
    assert len({v.scope for v in variants} | {base.scope}) == len(variants) + 1


def test_context_turns_limits_the_semantic_scope_not_the_exact_key() -> None:
    history_a = body(("user", "A?"), ("assistant", "a"), ("user", "B?"), ("assistant", "b"), Q)
    history_b = body(("user", "Z?"), ("assistant", "z"), ("user", "B?"), ("assistant", "b"), Q)
    a2, b2 = chat_key("t", "", "m", history_a, 2), chat_key("t", "", "m", history_b, 2)
    assert a2.scope == b2.scope and a2.exact != b2.exact
    assert chat_key("t", "", "m", history_a).scope != chat_key("t", "", "m", history_b).scope
    assert chat_key("t", "", "m", history_a, 0).scope == chat_key("t", "", "m", body(Q), 0).scope
    # fewer earlier turns than context_turns: all of them count (a negative slice kept 1 of 2)
    bob = body(("user", "My name is Bob."), ("assistant", "Nice to meet you."), Q)
    alice = body(("user", "My name is Alice."), ("assistant", "Nice to meet you."), Q)
    for turns in (3, 2, None):
        assert (
            chat_key("t", "", "m", bob, turns).scope != chat_key("t", "", "m", alice, turns).scope
        )
    assert chat_key("t", "", "m", bob, 1).scope == chat_key("t", "", "m", alice, 1).scope


def test_a_system_message_keeps_its_place_in_the_scope() -> None:
    turns = (("user", "Tell me about snakes."), ("assistant", "Pythons are snakes."))
    system = ("system", "The topic is now Python, the language.")
    after = body(*turns, system, ("user", "How do I install it?"))
    before = body(system, *turns, ("user", "How do I install it?"))
    for context_turns in (None, 2, 5):
        a = chat_key("t", "", "m", after, context_turns)
        b = chat_key("t", "", "m", before, context_turns)
        assert a.scope != b.scope, context_turns
    # with no earlier turns kept, only the system messages (in order) are left: the same
    assert chat_key("t", "", "m", after, 0).scope == chat_key("t", "", "m", before, 0).scope


def test_requests_without_trailing_user_text_are_exact_only() -> None:
    tool_turn = {
        "messages": [
            {"role": "user", "content": "w?"},
            {"role": "tool", "tool_call_id": "1", "content": "sunny"},
        ]
    }
    image = {"messages": [{"role": "user", "content": [{"type": "text", "text": "what is this"},
                                                       {"type": "image_url", "image_url": {"url": "data:..."}}]}]}  # fmt: skip
    for b in (tool_turn, image):
        key = chat_key("t", "", "m", b)
        assert not key.semantic and key.question == ""
    other_image = {"messages": [{"role": "user", "content": [{"type": "text", "text": "what is this"},
                                                             {"type": "image_url", "image_url": {"url": "data:2"}}]}]}  # fmt: skip
    assert chat_key("t", "", "m", image).exact != chat_key("t", "", "m", other_image).exact


def test_indented_text_is_matched_exactly() -> None:
    # The embedder and the verifier read words: a line's indentation is invisible to them,
    # yet it decides what this code prints (0 1 3, or 3).
    code = "What does this print?\n\nx = 0\nfor i in range(3):\n    x += i\n{}print(x)"
    inside, after = code.format("    "), code.format("")
    key = chat_key("t", "", "m", body(("user", inside)))
    assert not key.semantic and key.question == ""
    assert key.exact != chat_key("t", "", "m", body(("user", after))).exact
    assert chat_key("t", "", "m", body(("user", "Line one\nline two?"))).semantic
    # an earlier turn with indented text stays in the scope of the verified context
    for mode in ("exact", "verify"):
        a, b = (chat_key("t", "", "m", body(("user", c), ("assistant", "It prints it."), Q),
                         context=mode) for c in (inside, after))  # fmt: skip
        assert a.semantic and a.scope != b.scope, mode


def test_integral_floats_hash_like_ints() -> None:
    assert chat_key("t", "", "m", body(Q, temperature=1)) == chat_key(
        "t", "", "m", body(Q, temperature=1.0)
    )


def test_the_order_of_schema_properties_is_part_of_the_key() -> None:
    # A model fills in a structured output (and a tool call's arguments) in the order of the
    # schema's properties: "reasoning" before "answer" is another answer than the reverse.
    def schema(*names: str) -> dict[str, Any]:
        properties = {n: {"type": "string", "description": n} for n in names}
        return {"type": "object", "properties": properties, "required": ["answer", "reasoning"]}

    def keys(*names: str) -> list[Any]:
        fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema(*names)}}
        tools = [{"type": "function", "function": {"name": "f", "parameters": schema(*names)}}]
        return [chat_key("t", "", "m", body(Q, response_format=fmt)),
                chat_key("t", "", "m", body(Q, tools=tools))]  # fmt: skip

    for first, second in zip(keys("reasoning", "answer"), keys("answer", "reasoning"), strict=True):
        assert first.scope != second.scope and first.exact != second.exact
    # the order of a schema's other keywords, and of a property's own, changes nothing
    shuffled = {
        "required": ["answer", "reasoning"],
        "properties": {n: {"description": n, "type": "string"} for n in ("reasoning", "answer")},
        "type": "object",
    }
    fmt = {"json_schema": {"schema": shuffled, "name": "r"}, "type": "json_schema"}
    assert chat_key("t", "", "m", body(Q, response_format=fmt)) == keys("reasoning", "answer")[0]


def test_completion_keys_and_entry_ids() -> None:
    a = completion_key("t", "", "m", {"prompt": "Once", "max_tokens": 3})
    b = completion_key("t", "", "m", {"prompt": "Once", "max_tokens": 4})
    assert a.exact != b.exact and not a.semantic
    assert 0 < entry_id(a.exact) < 2**63 and entry_id(a.exact) == entry_id(a.exact)


def test_content_shape_is_part_of_the_exact_key() -> None:
    parts = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is 12"},
                    {"type": "text", "text": "3 + 1?"},
                ],
            }
        ]
    }
    joined = {"messages": [{"role": "user", "content": "What is 12\n3 + 1?"}]}
    a, b = chat_key("t", "", "m", parts), chat_key("t", "", "m", joined)
    assert a.question == b.question  # the same text for the semantic tier...
    assert a.exact != b.exact  # ...but a model may join parts differently: not an exact match


def test_one_text_part_is_its_text() -> None:
    def part(text: str, **more: Any) -> list[dict[str, Any]]:
        return [{"type": "text", "text": text, **more}]

    plain = body(("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello"), Q)
    parts = body(("system", part("Be brief.")), ("user", part("Hi")), ("assistant", "Hello"),
                 ("user", part(Q[1])))  # fmt: skip
    for api in ("chat", "messages"):  # (Anthropic's text block, the same)
        for mode in ("exact", "verify"):
            a = chat_key("t", "", "m", plain, context=mode, api=api)
            assert chat_key("t", "", "m", parts, context=mode, api=api) == a, (api, mode)
    # a part with more than its text (Anthropic's cache_control) is another request
    marked = body(("user", part(Q[1], cache_control={"type": "ephemeral"})))
    assert chat_key("t", "", "m", marked).exact != chat_key("t", "", "m", body(Q)).exact


def test_a_salted_key_is_another_key_with_the_same_question() -> None:
    key = chat_key("t", "", "m", {"messages": [{"role": "user", "content": "Hi there?"}]})
    assert salted(key, "") is key
    a, b = salted(key, "upstream_model=a"), salted(key, "upstream_model=b")
    assert len({key.scope, a.scope, b.scope}) == 3 and len({key.exact, a.exact, b.exact}) == 3
    assert (a.question, a.semantic) == (key.question, key.semantic)
    assert salted(key, "upstream_model=a") == a  # (the same salt: the same key, every time)
