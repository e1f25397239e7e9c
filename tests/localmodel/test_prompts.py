"""Prompt encoding with the bundled tokenizer's ChatML template."""

from __future__ import annotations

from typing import Any

import pytest

from localmodel.prompts import InvalidPromptError, encode_chat, encode_text, render_chat


def test_render_chat_uses_chatml_and_adds_the_generation_prompt(tokenizer: Any) -> None:
    text = render_chat(tokenizer, [{"role": "user", "content": "Hi"}])
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert text.startswith("<|im_start|>system\n")  # SmolLM2's default system prompt


def test_text_parts_are_joined_and_other_parts_rejected(tokenizer: Any) -> None:
    parts = [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]
    assert encode_chat(tokenizer, [{"role": "user", "content": parts}]) == encode_chat(
        tokenizer, [{"role": "user", "content": "Hello there"}]
    )
    image = [{"type": "image_url", "image_url": {"url": "data:,"}}]
    with pytest.raises(InvalidPromptError, match="image_url"):
        encode_chat(tokenizer, [{"role": "user", "content": image}])
    with pytest.raises(InvalidPromptError):
        encode_chat(tokenizer, [])


def test_next_turn_prompt_starts_with_this_turn_prompt_and_answer(tokenizer: Any) -> None:
    """What makes conversations hit the prefix cache."""
    turn1 = [{"role": "user", "content": "Name a colour."}]
    answer = "Blue is a colour."
    ids1 = encode_chat(tokenizer, turn1)
    answer_ids = tokenizer.encode(answer, add_special_tokens=False)
    turn2 = [*turn1, {"role": "assistant", "content": answer}, {"role": "user", "content": "More?"}]
    ids2 = encode_chat(tokenizer, turn2)
    assert ids2[: len(ids1) + len(answer_ids)] == ids1 + answer_ids


def test_encode_text_special_cases(tokenizer: Any) -> None:
    assert encode_text(tokenizer, "Once upon") == tokenizer.encode("Once upon")
    assert encode_text(tokenizer, "") == [tokenizer.bos_token_id]
