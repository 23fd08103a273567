"""Counting a history fast: per-part token counts and memos cached by object identity (each
message's facts, built from them, are in ``facts``).

Governance runs before every model request, on a history that grows by a few messages per
request. Tokenising it all again each time would cost O(total). Messages and parts are treated
as immutable values once they are in a history (pydantic-ai never edits a finished message), so
what we learn about one is cached against the object itself, weakly: the entry disappears with
the object (see ``memory``). A cheap fingerprint (identity of the content and part list) guards
against the rare caller that does edit a message in place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequestPart,
    ModelResponsePart,
    RetryPromptPart,
    ToolCallPart,
    ToolReturnPart,
)

from .caches import memory
from .tokens import (
    MESSAGE_OVERHEAD,
    PART_OVERHEAD,
    Tokenizer,
    media_tokens,
    part_pieces,
)

Part = ModelRequestPart | ModelResponsePart

MARK = "ctxhub"
"""Metadata key on parts and messages governance wrote, so governing again leaves them be."""


_PARTS = memory.parts
_MESSAGES = memory.messages


def _part_fingerprint(part: Part) -> tuple[int, ...]:
    if isinstance(part, ToolCallPart):
        return (id(part.args), id(part.tool_name))
    return (id(getattr(part, "content", None)),)


def part_cache(part: Part) -> dict[Any, Any]:
    """Cached values for one part (its counts, its governed versions)."""
    return _PARTS.slot(part, _part_fingerprint(part))


def message_cache(message: ModelMessage) -> dict[Any, Any]:
    """Cached values for one message (its facts, its governed versions)."""
    return _MESSAGES.slot(message, (id(message.parts), len(message.parts)))


TokenSink = Callable[[Part, str, list[int]], None]


def cached_part_tokens(part: Part, tokenizer: Tokenizer, sink: TokenSink | None = None) -> int:
    """Tokens of one part, framing included, cached by identity.

    ``sink`` receives the token ids of the part's bulky text when it had to be tokenised, so a
    caller about to truncate that text need not tokenise it again.
    """
    values = part_cache(part)
    key = ("tokens", tokenizer.encoding_name, tokenizer.image_rule)
    cached = values.get(key)
    if cached is not None:
        return int(cached)
    pieces = part_pieces(part)
    total = PART_OVERHEAD + media_tokens(part, tokenizer.image_rule)
    for number, piece in enumerate(pieces):
        if sink is not None and number == len(pieces) - 1 and len(piece) > 2_048:
            ids = tokenizer.encode(piece)
            if ids is not None:
                sink(part, piece, ids)
                total += len(ids)
                continue
        total += tokenizer.count(piece)
    values[key] = total
    return total


def message_tokens(message: ModelMessage, tokenizer: Tokenizer) -> int:
    """Tokens of one message, framing included: its facts' count, without building them."""
    return MESSAGE_OVERHEAD + sum(cached_part_tokens(part, tokenizer) for part in message.parts)


def is_tool_result(part: Part) -> bool:
    """Whether a part answers a regular tool call (provider-native results pair inline)."""
    if isinstance(part, ToolReturnPart):
        return True
    return isinstance(part, RetryPromptPart) and part.tool_name is not None


def result_call_id(part: Part) -> str:
    """The call id a tool result answers."""
    assert isinstance(part, ToolReturnPart | RetryPromptPart)
    return part.tool_call_id
