"""Prompt encoding: chat messages through the tokenizer's chat template, or plain text.

The template is the model's own (SmolLM2: ChatML, ``<|im_start|>role\\n…<|im_end|>``), rendered
to text with the generation prompt appended and then tokenised without adding special
tokens again (the template already wrote them). A final assistant message can instead be
*continued* (``continue_final``: a prefill, e.g. an Anthropic Messages request that ends with
an assistant turn): it is left open — no end-of-turn marker, no new assistant header — so the
model writes on from its last character, as vLLM's ``continue_final_message`` does.

Message text is text: a ``<|im_end|>`` typed in a message is tokenised as the characters it
is made of, never as the control token (else a user could close their turn and write a
system turn of their own). Only the markers the template itself writes are control tokens.

NOTE: the rendering of a conversation is a token-prefix of the rendering of the same
conversation plus one more turn. That is what makes a multi-turn chat hit the prefix cache:
turn 2's prompt begins with turn 1's prompt and turn 1's answer (as long as the answer the
client sends back is the one generated, up to its ``<|im_end|>``).

Example::

    tokens = encode_chat(tokenizer, [{"role": "user", "content": "Hi"}])
    tokens = encode_text(tokenizer, "Once upon a time")
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["InvalidPromptError", "encode_chat", "encode_text", "render_chat"]


class InvalidPromptError(ValueError):
    """The messages cannot be rendered (unknown content parts, no template…): a 400."""


def render_chat(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    continue_final: bool = False,
) -> str:
    """Render OpenAI-style ``messages`` with the model's chat template.

    ``content`` may be a string or a list of ``{"type": "text", "text": …}`` parts (joined);
    other part types (images, audio) raise :class:`InvalidPromptError`. ``tools`` are passed
    to the template, which may ignore them (SmolLM2's does). ``continue_final``: the last
    message is an assistant turn to continue, left open with no generation prompt (ChatML: a
    final ``"2, 3,"`` renders as ``…<|im_start|>assistant\\n2, 3,``).
    """
    if not messages:
        raise InvalidPromptError("messages must not be empty")
    if getattr(tokenizer, "chat_template", None) is None:
        raise InvalidPromptError("this model has no chat template; use completions instead")
    normalised = [_normalise(m) for m in messages]
    if continue_final and normalised[-1]["role"] != "assistant":
        raise InvalidPromptError("only a final assistant message can be continued")
    try:
        # NOTE: continue_final_message marks where the final message's text ends and cuts the
        # rendering there, so its end-of-turn marker (and all the template writes after) goes
        text = tokenizer.apply_chat_template(
            normalised,
            tools=list(tools) if tools else None,
            add_generation_prompt=add_generation_prompt and not continue_final,
            continue_final_message=continue_final,
            tokenize=False,
        )
    except Exception as exc:  # jinja raise_exception() in templates, bad roles…
        raise InvalidPromptError(f"chat template failed: {exc}") from exc
    return str(text)


def encode_chat(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    continue_final: bool = False,
) -> list[int]:
    """Token ids of ``messages`` rendered ready to complete: with the generation prompt, or
    with the final assistant message left open when ``continue_final`` (see ``render_chat``)."""
    text = render_chat(tokenizer, messages, tools=tools, continue_final=continue_final)
    contents = [_normalise(m)["content"] for m in messages]
    markers = _control_texts(tokenizer)
    if not any(marker in content for content in contents for marker in markers):
        return list(tokenizer.encode(text, add_special_tokens=False))
    return _encode_literal_contents(tokenizer, messages, contents, tools, text, continue_final)


def _encode_literal_contents(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    contents: list[str],
    tools: Sequence[Mapping[str, Any]] | None,
    text: str,
    continue_final: bool,
) -> list[int]:
    """Encode with every message's content as plain text (control-token strings included).

    The template is rendered again with a placeholder for each content, which tells the
    control tokens the template wrote from those typed in a content. The text between two of
    the template's control tokens (template text and contents together) is tokenised in one
    piece with ``split_special_tokens``: the tokenizer splits at control tokens first anyway,
    so ordinary text gets the very ids it always had (and turn N+1 still extends turn N).
    """
    holders = [f"\ue000{i}\ue001" for i in range(len(messages))]
    masked = [{**m, "content": h} for m, h in zip(messages, holders, strict=True)]
    skeleton = render_chat(tokenizer, masked, tools=tools, continue_final=continue_final)
    pieces = _PLACEHOLDER.split(skeleton)  # template text, index, template text, index, ...
    if "".join(contents[int(p)] if i % 2 else p for i, p in enumerate(pieces)) != text:
        # the template changes contents (trims them, say): no safe way to keep them literal
        raise InvalidPromptError(
            "a message contains the text of one of the model's control tokens "
            f"({', '.join(sorted(_control_texts(tokenizer)))}), which this model's chat "
            "template cannot carry as plain text"
        )
    markers = sorted(_control_texts(tokenizer), key=len, reverse=True)
    split = re.compile("(" + "|".join(map(re.escape, markers)) + ")")
    ids: list[int] = []
    stretch = ""  # text since the template's last control token

    def flush() -> None:
        if stretch:
            ids.extend(
                tokenizer.encode(stretch, add_special_tokens=False, split_special_tokens=True)
            )

    for i, piece in enumerate(pieces):
        if i % 2:
            stretch += contents[int(piece)]
            continue
        for j, part in enumerate(split.split(piece)):
            if j % 2:  # one of the template's own control tokens
                flush()
                stretch = ""
                ids.append(int(tokenizer.convert_tokens_to_ids(part)))
            else:
                stretch += part
    flush()
    return [int(t) for t in ids]


_PLACEHOLDER = re.compile("\ue000(\\d+)\ue001")


def _control_texts(tokenizer: Any) -> frozenset[str]:
    """The texts the tokenizer turns into special (control) tokens, e.g. ``<|im_end|>``."""
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    texts = {t.content for t in added.values() if getattr(t, "special", False)}
    texts.update(getattr(tokenizer, "all_special_tokens", None) or ())
    return frozenset(t for t in texts if t)


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a legacy-completions prompt (the tokenizer's own BOS rule applies).

    An empty prompt becomes ``[bos]`` when the model has one: the model needs one token to
    predict from.
    """
    ids = list(tokenizer.encode(text, add_special_tokens=True))
    if not ids and tokenizer.bos_token_id is not None:
        ids = [int(tokenizer.bos_token_id)]
    if not ids:
        raise InvalidPromptError("prompt must not be empty")
    return ids


def _normalise(message: Mapping[str, Any]) -> dict[str, Any]:
    role, content = message.get("role"), message.get("content")
    if not isinstance(role, str):
        raise InvalidPromptError("every message needs a string 'role'")
    if content is None:
        content = ""
    elif isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, Mapping) and part.get("type") == "text"):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise InvalidPromptError(f"content part {kind!r} is not supported by this model")
            parts.append(str(part.get("text", "")))
        content = "".join(parts)
    elif not isinstance(content, str):
        raise InvalidPromptError("message content must be a string or a list of text parts")
    if role == "developer":  # OpenAI's newer name for the system role; the template knows "system"
        role = "system"
    return {**message, "role": role, "content": content}
