"""A session as a readable Markdown transcript: its messages, then its records."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from pydantic_ai.messages import (
    ModelRequest,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ctxhub.governance.tokens import context_window
from sessions.models import (
    AgentSession,
    AuditEvent,
    Clear,
    Compaction,
    EvictedOutput,
    Pin,
)

CUT_AT = 2_000
"""Characters of a long tool output or argument a transcript shows; the rest is cut, said."""


def _fenced(text: str, language: str = "") -> str:
    """A code block no backtick run inside the text can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def _cut(text: str) -> str:
    if len(text) <= CUT_AT:
        return text
    return f"{text[:CUT_AT]}\n… [cut: {len(text) - CUT_AT:,} more characters]"


def _part_lines(part: Any) -> list[str]:
    if isinstance(part, SystemPromptPart):
        return ["**system prompt:**", "", _fenced(_cut(part.content))]
    if isinstance(part, UserPromptPart):
        content = part.content if isinstance(part.content, str) else str(part.content)
        return ["**user:**", "", _fenced(_cut(content))]
    if isinstance(part, ToolReturnPart):
        head = f"**tool result** `{part.tool_name}` (`{part.tool_call_id}`):"
        return [head, "", _fenced(_cut(part.model_response_str()))]
    if isinstance(part, RetryPromptPart):
        head = f"**retry** `{part.tool_name or ''}` (`{part.tool_call_id}`):"
        return [head, "", _fenced(_cut(part.model_response()))]
    if isinstance(part, TextPart):
        return ["**assistant:**", "", _fenced(_cut(part.content))]
    if isinstance(part, ThinkingPart):
        return ["**thinking:**", "", _fenced(_cut(part.content))]
    if isinstance(part, ToolCallPart):
        head = f"**tool call** `{part.tool_name}` (`{part.tool_call_id}`):"
        return [head, "", _fenced(_cut(part.args_as_json_str()), "json")]
    return [f"**{getattr(part, 'part_kind', type(part).__name__)}**"]


def export_markdown(session: AgentSession) -> Iterator[str]:
    """A transcript to read: each message with its seq, what it holds, and the records."""
    window = session.context_window or context_window(session.model)
    yield f"# {session.title}\n\n"
    yield f"- Model: `{session.model}`, window {window:,} tokens\n"
    yield f"- Policy: `{json.dumps(session.policy or {}, sort_keys=True)}`\n\n"
    yield "## Messages\n\n"
    rows = session.messages.order_by("seq").only("seq", "kind", "source", "payload", "tokens")
    for row in rows.iterator(chunk_size=200):
        message = row.message
        role = "request" if isinstance(message, ModelRequest) else "response"
        yield f"### #{row.seq} · {role} · {row.tokens:,} tokens · {row.source}\n\n"
        for part in message.parts:
            yield "\n".join(_part_lines(part)) + "\n\n"
    yield "## Records\n\n"
    said = False
    for c in Compaction.objects.filter(session=session).order_by("created_at", "id"):
        said = True
        state = "undone" if c.undone_at else "active"
        yield (
            f"- Compaction of #{c.first_seq}\N{EN DASH}#{c.last_seq} ({c.outcome}, {state}), "
            f"{c.tokens_before:,} → {c.tokens_after:,} tokens, {c.created_at:%Y-%m-%d %H:%M}\n\n"
        )
        yield _indented(_fenced(_cut(c.summary))) + "\n\n"
    for clear in Clear.objects.filter(session=session).order_by("created_at", "id"):
        said = True
        state = "undone" if clear.undone_at else "active"
        yield f"- Clear from #{clear.from_seq} ({state}), {clear.created_at:%Y-%m-%d %H:%M}\n"
    for pin in Pin.objects.filter(session=session).order_by("created_at", "id"):
        said = True
        state = "unpinned" if pin.undone_at else "pinned"
        yield f"- Pin of #{pin.seq} ({state}), {pin.created_at:%Y-%m-%d %H:%M}\n"
    evicted = EvictedOutput.objects.filter(session=session).order_by("created_at", "id")
    for output in evicted.only("ref", "tokens", "created_at"):
        said = True
        yield f"- Evicted output `{output.ref}`: {output.tokens:,} tokens kept in full\n"
    events = AuditEvent.objects.filter(session=session).order_by("created_at", "id")
    for event in events.select_related("actor"):
        said = True
        who = event.actor.get_username() if event.actor else "—"
        figures = " → ".join(
            f"{t:,}" if t is not None else "?" for t in (event.tokens_before, event.tokens_after)
        )
        yield (
            f"- {event.created_at:%Y-%m-%d %H:%M} `{event.verb}` by {who} "
            f"({figures} governed tokens)\n"
        )
    if not said:
        yield "None.\n"


def _indented(text: str) -> str:
    return "\n".join(f"  {line}" if line else "" for line in text.splitlines())
