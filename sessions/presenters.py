"""How a stored message is shown: one row per message, one block per part."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from pydantic_ai.messages import (
    BinaryContent,
    FilePart,
    FileUrl,
    ModelMessage,
    ModelRequestPart,
    ModelResponsePart,
    ToolCallPart,
    ToolReturnPart,
)

from ctxhub.governance.tokens import part_text
from sessions.models import Message

if TYPE_CHECKING:
    from sessions.services.governed import GovernedContext

# Long parts are cut in the list; the full text is one click (an htmx request) away.
PREVIEW_CHARS = 600

_LABELS = {
    "system-prompt": "system",
    "user-prompt": "user",
    "tool-return": "tool result",
    "retry-prompt": "retry",
    "text": "assistant",
    "tool-call": "tool call",
    "thinking": "thinking",
}


@dataclass(frozen=True, slots=True)
class PartView:
    kind: str
    label: str
    tool: str
    call_id: str
    text: str
    chars: int
    lines: int
    cut: bool
    media: list[str]

    @property
    def first_line(self) -> str:
        """The text's first non-empty line: what a folded tool call or result shows."""
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")


@dataclass(frozen=True, slots=True)
class MessageView:
    seq: int
    kind: str
    tokens: int
    exact: bool
    source: str
    created_at: datetime
    parts: list[PartView]
    reported_input: int | None = None
    """Input tokens the provider reported for the request this response answered."""
    reported_output: int | None = None

    @property
    def cut(self) -> bool:
        return any(part.cut for part in self.parts)


def _media_label(item: object) -> str | None:
    """What a media item is, without its bytes: "image/png, 293 KB" or its URL."""
    if isinstance(item, BinaryContent):
        return f"{item.media_type}, {max(1, len(item.data) // 1024)} KB"
    if isinstance(item, FileUrl):
        return item.url
    return None


def _media(part: ModelRequestPart | ModelResponsePart) -> list[str]:
    if isinstance(part, FilePart):
        items: list[object] = [part.content]
    else:
        content = getattr(part, "content", None)
        items = list(content) if isinstance(content, list | tuple) else []
    return [label for label in map(_media_label, items) if label is not None]


def present_part(part: ModelRequestPart | ModelResponsePart, *, full: bool) -> PartView:
    if isinstance(part, ToolCallPart):
        text = part.args_as_json_str()
    elif isinstance(part, ToolReturnPart):
        text = part.model_response_str()
    else:
        text = part_text(part)
    cut = not full and len(text) > PREVIEW_CHARS
    kind = part.part_kind
    return PartView(
        kind=kind,
        label=_LABELS.get(kind, kind.replace("-", " ")),
        tool=getattr(part, "tool_name", None) or "",
        call_id=getattr(part, "tool_call_id", None) or "",
        text=text[:PREVIEW_CHARS] if cut else text,
        chars=len(text),
        lines=text.count("\n") + 1 if text else 0,
        cut=cut,
        media=_media(part),
    )


def present_message(row: Message, *, full: bool = False) -> MessageView:
    message = row.message
    return MessageView(
        seq=row.seq,
        kind=row.kind,
        tokens=row.tokens,
        exact=row.tokens_exact,
        source=row.get_source_display(),
        created_at=row.created_at,
        parts=[present_part(part, full=full) for part in message.parts],
        **_reported(message),
    )


def _reported(message: ModelMessage) -> dict[str, int]:
    """The usage a stored response carries, if the provider reported any."""
    usage = getattr(message, "usage", None)
    if usage is None or not (usage.input_tokens or usage.output_tokens):
        return {}
    return {"reported_input": usage.input_tokens, "reported_output": usage.output_tokens}


def present_sent(context: GovernedContext, seq: int) -> list[PartView]:
    """The parts the next request carries for the log message at ``seq``, in full; none when
    governance leaves it out (or a record hides it)."""
    sent = 0
    for report in context.report.messages:
        if not report.kept:
            continue
        if report.index is not None and context.seq_of(report.index) == seq:
            return [present_part(part, full=True) for part in context.messages[sent].parts]
        sent += 1
    return []
