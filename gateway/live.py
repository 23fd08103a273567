"""An answer streaming through the gateway, shown on its session's page as it arrives.

The client's messages and the finished answer reach the pages as any appended message does
(``sessions.live``); what is in flight between them, the answer's text, thinking and tool calls
so far, is pushed here: a fragment every ``INTERVAL_SECONDS`` at most, into the page's
``#answering`` element, and an empty one when the stream ends. Only while a page watches the
session; a push that is lost costs nothing (the stored answer follows).
"""

from __future__ import annotations

import time
from typing import Any

from asgiref.sync import sync_to_async
from django.template.loader import render_to_string
from pydantic_ai.messages import TextPart, ThinkingPart, ToolCallPart

from sessions.chat.stream import send
from sessions.live import is_watched
from sessions.models import AgentSession

INTERVAL_SECONDS = 0.1
PREVIEW_CHARS = 4_000


class LiveAnswer:
    """The pushes of one streamed answer."""

    def __init__(self, session: AgentSession, model: str, *, watched: bool) -> None:
        self.session = session
        self.model = model
        self.watched = watched
        self._pushed_at = 0.0

    @classmethod
    async def begin(cls, session: AgentSession, model: str) -> LiveAnswer:
        return cls(session, model, watched=await sync_to_async(is_watched)(session))

    async def progressed(self, assembler: Any) -> None:
        """The stream moved on: push what it holds, unless a push went out just now."""
        now = time.monotonic()
        if not self.watched or now - self._pushed_at < INTERVAL_SECONDS:
            return
        self._pushed_at = now
        result = assembler.result()
        parts = [] if result is None else [_shown(part) for part in result.view.parts]
        await send(self.session, _fragment(self.session, self.model, [p for p in parts if p]))

    async def ended(self) -> None:
        if self.watched:
            await send(self.session, _fragment(self.session, self.model, None))


def _shown(part: Any) -> dict[str, str] | None:
    if isinstance(part, TextPart):
        return {"kind": "text", "text": part.content[-PREVIEW_CHARS:]}
    if isinstance(part, ThinkingPart):
        return {"kind": "thinking", "text": part.content[-PREVIEW_CHARS:]}
    if isinstance(part, ToolCallPart):
        return {"kind": "call", "name": part.tool_name, "text": part.args_as_json_str()[:400]}
    return None


def _fragment(session: AgentSession, model: str, parts: list[dict[str, str]] | None) -> str:
    return render_to_string(
        "gateway/_answering.html", {"session": session, "model": model, "parts": parts}
    )
