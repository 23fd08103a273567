"""Parts as governance rewrites them: which parts it may touch, their governed versions, and
the rebuilt messages that hold them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from operator import is_
from typing import Any, cast

import pydantic_core
from pydantic_ai.messages import ModelMessage, ToolCallPart, ToolReturnPart

from .counting import MARK, Part, cached_part_tokens, message_cache, part_cache
from .names import Action, StepName
from .policy import Truncation
from .tokens import Tokenizer, as_text


@dataclass(slots=True)
class PartState:
    """The fate of one part of a normalised message."""

    origin: int | None
    """Index of the part in the input message; None when governance added it."""
    action: Action
    tokens_before: int
    tokens_after: int
    step: StepName | None = None
    ref: str | None = None


@dataclass(slots=True)
class Transform:
    """A governed version of one part, cached on the part between calls."""

    part: Part
    tokens: int
    action: Action
    step: StepName
    ref: str | None = None
    evicted: str | None = None


def plain_output(part: Part) -> ToolReturnPart[Any] | None:
    """``part`` if it is an ordinary tool output governance may rewrite, else None.

    Framework returns (tool search, capability loading) are typed subclasses whose content has
    a fixed shape; they are left as they are.
    """
    if type(part) is ToolReturnPart:
        return cast(ToolReturnPart[Any], part)
    return None


def plain_call(part: Part) -> ToolCallPart | None:
    """``part`` if it is an ordinary tool call whose arguments governance may cut, else None.

    Framework calls (tool search, capability loading) are typed subclasses whose arguments have
    a fixed shape, and provider-native calls are another class; they are left as they are.
    """
    if type(part) is ToolCallPart:
        return part
    return None


def with_content(
    part: ToolReturnPart[Any], content: str, note: dict[str, Any] | None = None
) -> ToolReturnPart[Any]:
    """A copy of a tool output with new content (and governance's note in its metadata)."""
    if note is None:
        return replace(part, content=content)
    return replace(part, content=content, metadata=mark_metadata(part, note))


def marked(part: Part) -> bool:
    """Whether governance itself wrote this part (a placeholder, preview or notice)."""
    metadata = getattr(part, "metadata", None)
    return isinstance(metadata, dict) and MARK in metadata


def tool_output_text(part: ToolReturnPart[Any]) -> str | None:
    """The text of a tool output as it would be truncated; None when it carries files."""
    if part.files:
        return None
    return part.content if isinstance(part.content, str) else as_text(part.content)


def rebuilt(message: ModelMessage, parts: list[Part]) -> ModelMessage:
    """``message`` with ``parts``; the same object for the same parts on every call.

    Governed parts are cached on the originals, so reusing the rebuilt message too lets its
    counts (cached by identity) survive from one request to the next.
    """
    values = message_cache(message)
    key = ("rebuilt", tuple(map(id, parts)))
    found = values.get(key)
    if found is not None and len(found.parts) == len(parts) and all(map(is_, found.parts, parts)):
        result: ModelMessage = found
        return result
    result = replace(message, parts=parts)  # type: ignore[arg-type]
    values[key] = result
    return result


def measure(tokens: int, truncation: Truncation, part: Part) -> int:
    """The size of a part in the truncation's unit (characters measured on the text, on a
    call's arguments as JSON)."""
    if truncation.unit == "tokens":
        return tokens
    call = plain_call(part)
    if call is not None:
        return len(call.args_as_json_str())
    output = plain_output(part)
    if output is not None:
        text = tool_output_text(output)
        return len(text) if text is not None else 0
    content = getattr(part, "content", "")
    return len(content) if isinstance(content, str) else 0


def mark_metadata(part: Part, note: dict[str, Any]) -> dict[str, Any]:
    """Part metadata carrying governance's note, keeping any metadata already there."""
    metadata = getattr(part, "metadata", None)
    base = dict(metadata) if isinstance(metadata, dict) else {}
    base[MARK] = note
    return base


def masked_version(part: Part, tokens: int, tokenizer: Tokenizer) -> Transform | None:
    """The masked version of a tool result, or of the call of a masked result."""
    if plain_call(part) is not None:
        return masked_call(part, tokens, tokenizer)
    return placeholder(part, tokens, tokenizer)


MASKED_INPUT_CHARS = 100
"""Argument values longer than this are masked with their call's result; shorter ones (a path,
a flag, a count) stay, so the call still says what it did."""


def masked_call(part: Part, tokens: int, tokenizer: Tokenizer) -> Transform | None:
    """A call with its long argument values masked (keys, short values and the shape stay);
    None when none is long."""
    call = plain_call(part)
    if call is None:
        return None
    values = part_cache(call)
    key = ("mask-input", tokenizer.encoding_name)
    if key in values:
        cached: Transform | None = values[key]
        return cached
    result = None
    args = _masked_args(call.args, tokenizer)
    if args is not None:
        new = replace(call, args=args)
        count = cached_part_tokens(new, tokenizer)
        result = None if count >= tokens else Transform(new, count, "masked", "mask")
    values[key] = result
    return result


def _masked_args(
    args: str | dict[str, Any] | None, tokenizer: Tokenizer
) -> str | dict[str, Any] | None:
    """The arguments with every long string value masked, of the same type (a dict, or a JSON
    string); None when no value is long. Arguments that are not a JSON object are one value."""
    if not args:
        return None
    if isinstance(args, dict):
        masked = _masked_value(args, tokenizer)
        return None if masked == args else masked
    try:
        parsed = pydantic_core.from_json(args)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        masked_raw = _masked_value(args, tokenizer)
        return None if masked_raw == args else masked_raw
    masked = _masked_value(parsed, tokenizer)
    return None if masked == parsed else pydantic_core.to_json(masked).decode()


def _masked_value(value: Any, tokenizer: Tokenizer) -> Any:
    if isinstance(value, str):
        if len(value) <= MASKED_INPUT_CHARS:
            return value
        return f"[input masked — ~{tokenizer.count(value)} tokens removed]"
    if isinstance(value, dict):
        return {key: _masked_value(item, tokenizer) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked_value(item, tokenizer) for item in value]
    return value


def placeholder(part: Part, tokens: int, tokenizer: Tokenizer) -> Transform | None:
    """The masked version of a tool result."""
    output = plain_output(part)
    if output is None:
        return None
    values = part_cache(output)
    key = ("mask", tokenizer.encoding_name, tokens)
    if key in values:
        cached: Transform | None = values[key]
        return cached
    text = f"[result masked — ~{tokens} tokens removed]"
    new = with_content(output, text, {"masked": tokens})
    count = cached_part_tokens(new, tokenizer)
    result = None if count >= tokens else Transform(new, count, "masked", "mask")
    values[key] = result
    return result
