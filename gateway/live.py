"""An answer streaming through the gateway, shown on its session's page as it arrives.

The client's messages and the finished answer reach the pages as any appended message does
(``sessions.live``); what is in flight between them, the answer's text, thinking and tool calls
so far, is pushed here: a fragment every ``INTERVAL_SECONDS`` at most, into the page's
``#answering`` element, and an empty one when the stream ends. Only while a page watches the
session; a push that is lost costs nothing (the stored answer follows).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.template.loader import render_to_string
from pydantic_ai.messages import TextPart, ThinkingPart, ToolCallPart

from sessions.chat.stream import send
from sessions.live import is_watched
from sessions.models import AgentSession

if TYPE_CHECKING:
    from gateway.threads import Thread

INTERVAL_SECONDS = 0.1
PREVIEW_CHARS = 4_000


class LiveAnswer:
    """The pushes of one streamed answer, once its session is known and a page watches it.
    The relay never waits for either: the first chunks of an answer forwarded before its
    session was found (observe mode) go unpushed, and the stored answer shows them."""

    def __init__(self, threading: Awaitable[Thread | None], model: str) -> None:
        self.model = model
        self._watched = asyncio.ensure_future(_watched(threading))
        self._pushed_at = 0.0

    def _session(self) -> AgentSession | None:
        done = self._watched.done() and not self._watched.cancelled()
        return self._watched.result() if done and self._watched.exception() is None else None

    async def progressed(self, assembler: Any) -> None:
        """The stream moved on: push what it holds, unless a push went out just now."""
        now = time.monotonic()
        session = self._session()
        if session is None or now - self._pushed_at < INTERVAL_SECONDS:
            return
        self._pushed_at = now
        result = assembler.result()
        parts = [] if result is None else [_shown(part) for part in result.view.parts]
        await send(session, _fragment(session, self.model, [p for p in parts if p]))

    async def ended(self) -> None:
        """The stream is over: clear what was pushed of it."""
        await asyncio.wait([self._watched])
        session = self._session()
        if session is not None:
            await send(session, _fragment(session, self.model, None))


async def _watched(threading: Awaitable[Thread | None]) -> AgentSession | None:
    """The request's session if a page may be watching it."""
    thread = await threading
    if thread is None:
        return None
    watched = await sync_to_async(is_watched, thread_sensitive=False)(thread.session)
    return thread.session if watched else None


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
