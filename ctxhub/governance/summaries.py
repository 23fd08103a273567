"""Summaries a compaction wrote: how to recognise one in a history, and the history without them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)

from .counting import MARK
from .ledger import is_summary_text

SUMMARY_PREFIX = "[Summary of {count} earlier messages]"
"""First line of an inline summary (co-cli, 000)."""
COMPACT_PREFIX = "[Compacted conversation summary]"
"""First line of the ``/compact`` summary request (co-cli, 000)."""
ACKNOWLEDGEMENT = "Understood. I have the conversation context."
"""The response that completes the ``/compact`` two-message form (co-cli, 000)."""
MARKER = "[Earlier conversation trimmed — {count} messages removed to stay within context budget]"
"""What replaces the middle when the summariser fails (co-cli's static marker, 000)."""


# --- recognising earlier summaries ------------------------------------------------------------


def is_summary_part(part: ModelRequestPart) -> bool:
    return (
        isinstance(part, UserPromptPart)
        and isinstance(part.content, str)
        and is_summary_text(part.content)
    )


def is_summary(message: ModelMessage) -> bool:
    """Whether a message holds a summary or marker written by compaction."""
    if not isinstance(message, ModelRequest):
        return False
    note = (message.metadata or {}).get(MARK)
    if isinstance(note, dict) and "compaction" in note:
        return True
    return any(is_summary_part(p) for p in message.parts)


def _is_acknowledgement(message: ModelMessage) -> bool:
    return (
        isinstance(message, ModelResponse)
        and len(message.parts) == 1
        and isinstance(message.parts[0], TextPart)
        and message.parts[0].content == ACKNOWLEDGEMENT
    )


def summary_count(messages: Sequence[ModelMessage]) -> int:
    """How many compaction summaries (or markers) a history holds."""
    return sum(1 for m in messages if is_summary(m))


_COUNT = re.compile(r"^\[(?:Summary of|Earlier conversation trimmed —) (\d+)")


def messages_represented(text: str) -> int:
    """How many messages an earlier summary said it stood for."""
    match = _COUNT.match(text)
    return int(match.group(1)) if match else 0


@dataclass
class Stripped:
    history: list[ModelMessage]
    index: list[int]
    summaries: list[str]
    summary_indices: list[int]
    system_parts: list[SystemPromptPart]
    kept_users: list[tuple[int, ModelMessage]] = field(default_factory=list)
    """(input index, message) of the user messages an earlier compaction kept verbatim
    beside its summary: covered by it, and kept again (or not) by the next."""


def users_kept_before(message: ModelMessage) -> int:
    """How many user messages kept verbatim stand right before a summary (its metadata says)."""
    note = (message.metadata or {}).get(MARK) if isinstance(message, ModelRequest) else None
    users = note.get("users") if isinstance(note, dict) else None
    return users if isinstance(users, int) and users > 0 else 0


def strip_summaries(messages: Sequence[ModelMessage], *, pull_system: bool) -> Stripped:
    """The history without earlier summaries (their acknowledgements, and the user messages
    they kept verbatim beside them), and their texts."""
    out = Stripped([], [], [], [], [])
    after_summary = False
    for index, message in enumerate(messages):
        if after_summary and _is_acknowledgement(message):
            out.summary_indices.append(index)
            after_summary = False
            continue
        after_summary = False
        if isinstance(message, ModelRequest):
            summary = is_summary(message)
            rest: list[ModelRequestPart] = []
            for part in message.parts:
                if summary and is_summary_part(part):
                    out.summaries.append(str(getattr(part, "content", "")))
                elif pull_system and isinstance(part, SystemPromptPart):
                    out.system_parts.append(part)
                else:
                    rest.append(part)
            if summary:
                out.summary_indices.append(index)
                after_summary = True
                _take_kept_users(out, users_kept_before(message), index)
            if len(rest) != len(message.parts):
                if rest:
                    out.history.append(replace(message, parts=rest, metadata=None))
                    out.index.append(index)
                continue
        out.history.append(message)
        out.index.append(index)
    return out


def _take_kept_users(out: Stripped, count: int, summary_index: int) -> None:
    """Move the ``count`` user messages right before a summary from the history to
    ``kept_users``: they are what an earlier compaction kept of what it covered."""
    taken: list[tuple[int, ModelMessage]] = []
    while count and out.history and out.index[-1] == summary_index - len(taken) - 1:
        message = out.history[-1]
        if not isinstance(message, ModelRequest) or not all(
            isinstance(p, UserPromptPart) for p in message.parts
        ):
            break
        taken.append((out.index.pop(), out.history.pop()))
        count -= 1
    out.kept_users[:0] = reversed(taken)
