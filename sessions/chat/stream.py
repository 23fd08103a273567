"""What a running turn shows: pushed to every tab watching the session, kept for late ones.

The turn's in-flight state (``live``) is the response being streamed, part by part, and the
tools running; completed messages are not in it, they are in the log and reach the pages as
appended messages. Text arrives as deltas, batched every ``BATCH_SECONDS``: each push names
the character offset it starts at, so a page can place it exactly after a catch-up from the
database (``static/js/chat.js``). Anything else (a part starting, a tool called or returning,
the response stored, the turn ending) pushes the whole turn fragment.

Before anything is pushed, the state is saved on the turn's row: what any page has been sent
is always in the database, so a page that (re)connects mid-turn loses nothing.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterable
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.template.loader import render_to_string
from django.utils.html import format_html
from pydantic_ai.messages import (
    AgentStreamEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)
from pydantic_ai.tools import RunContext

from sessions.chat import turns
from sessions.live import PUSH_EVENT
from sessions.models import AgentSession, ChatTurn

log = logging.getLogger(__name__)

BATCH_SECONDS = 0.05
# A tool's result as the turn shows it while it runs; the log keeps it whole.
RESULT_PREVIEW_CHARS = 600


def text_id(turn: ChatTurn, response: int, index: int) -> str:
    """The id of a streamed text part: unique per turn, response and part."""
    return f"turn-{turn.pk.hex[:12]}-r{response}-p{index}"


def render_turn(turn: ChatTurn | None, *, session_pk: Any = None, oob: bool = False) -> str:
    """The turn fragment: status, the response in flight, the tools running (empty before
    the session's first turn)."""
    if turn is None:
        return render_to_string(
            "sessions/_turn.html", {"turn": None, "session_pk": session_pk, "oob": oob}
        )
    live = turn.live or {}
    response = live.get("response", 0)
    parts = [
        {**part, "id": text_id(turn, response, index)}
        for index, part in enumerate(live.get("parts", []))
        if part is not None
    ]
    return render_to_string(
        "sessions/_turn.html",
        {
            "turn": turn,
            "session_pk": turn.session_id,
            "parts": parts,
            "tools": live.get("tools", []),
            "oob": oob,
        },
    )


class TurnStream:
    """The in-flight state of one running turn, and its pushes."""

    def __init__(self, session: AgentSession, turn: ChatTurn) -> None:
        self.session = session
        self.turn = turn
        turn.live = {"response": 0, "parts": [], "tools": []}
        # Deltas not pushed yet: (part index, offset of the first, texts).
        self._pending: dict[int, tuple[int, list[str]]] = {}
        self._flush_soon: asyncio.Task[None] | None = None
        # Saving and pushing in order: a fragment never overtakes the deltas before it.
        self._lock = asyncio.Lock()

    @property
    def live(self) -> dict[str, Any]:
        live: dict[str, Any] = self.turn.live
        return live

    # --- pydantic-ai events ----------------------------------------------------------------

    async def handle(self, ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        """The run's event stream handler."""
        async for event in events:
            await self.on_event(event)

    async def on_event(self, event: AgentStreamEvent) -> None:
        if isinstance(event, PartStartEvent):
            await self._part_started(event.index, event.part)
        elif isinstance(event, PartDeltaEvent):
            self._part_delta(event.index, event.delta)
        elif isinstance(event, FunctionToolCallEvent):
            call = event.part
            self.live["tools"].append(
                {
                    "id": call.tool_call_id,
                    "name": call.tool_name,
                    "args": call.args_as_json_str(),
                    "state": "running",
                    "result": "",
                }
            )
            await self.push_turn()
        elif isinstance(event, FunctionToolResultEvent):
            result = event.part
            text = result.model_response_str()
            # "retried" (arguments that did not validate), "failed", "denied" or "done".
            state = "done" if result.outcome == "success" else result.outcome
            tool = next((t for t in self.live["tools"] if t["id"] == result.tool_call_id), None)
            if tool is None:
                tool = {"id": result.tool_call_id, "name": result.tool_name, "args": ""}
                self.live["tools"].append(tool)
            tool.update(state=state, size=len(text), result=text[:RESULT_PREVIEW_CHARS])
            await self.push_turn()

    async def _part_started(self, index: int, part: Any) -> None:
        if isinstance(part, TextPart):
            entry = {"kind": "text", "text": part.content}
        elif isinstance(part, ThinkingPart):
            entry = {"kind": "thinking", "text": part.content}
        elif isinstance(part, ToolCallPart):
            entry = {"kind": "call", "name": part.tool_name, "text": part.args_as_json_str()}
        else:
            return
        parts = self.live["parts"]
        parts.extend([None] * (index + 1 - len(parts)))
        parts[index] = entry
        self._pending.pop(index, None)
        await self.push_turn()

    def _part_delta(self, index: int, delta: Any) -> None:
        parts = self.live["parts"]
        part = parts[index] if index < len(parts) else None
        if part is None:
            return
        if isinstance(delta, TextPartDelta | ThinkingPartDelta):
            text = delta.content_delta or ""
        elif isinstance(delta, ToolCallPartDelta) and isinstance(delta.args_delta, str):
            # Arguments show with the part; they are not streamed character by character.
            part["text"] += delta.args_delta
            return
        else:
            return
        if not text:
            return
        offset, texts = self._pending.get(index, (len(part["text"]), []))
        texts.append(text)
        self._pending[index] = (offset, texts)
        part["text"] += text
        if self._flush_soon is None or self._flush_soon.done():
            self._flush_soon = asyncio.create_task(self._flush_later())

    # --- the turn's own moments --------------------------------------------------------------

    async def request_sent(self, number: int, xray_html: str) -> None:
        """A model request left with the governed context: the x-ray of that request."""
        self.live["response"] = number
        self.turn.requests = number
        self.live["parts"] = []
        self._pending.clear()
        await self.push_turn(extra=xray_html)

    async def response_stored(self) -> None:
        """The response is in the log (and on the pages): it is no longer in flight."""
        self.live["parts"] = []
        self._pending.clear()
        await self.push_turn()

    async def results_stored(self) -> None:
        """The tools' results are in the log."""
        self.live["tools"] = []
        await self.push_turn()

    async def beat(self) -> None:
        """The heartbeat: the turn is alive (and its state current)."""
        async with self._lock:
            await self._save()

    async def finished(self, turn: ChatTurn) -> None:
        """The turn ended: its final fragment."""
        if self._flush_soon is not None:
            self._flush_soon.cancel()
        self._pending.clear()
        self.turn = turn
        # The pages' x-ray was last drawn while the turn ran ("request N of the running
        # turn"): the change signal has them draw it again, as things stand now.
        changed = render_to_string("sessions/_changed.html", {"revision": self.session.revision})
        async with self._lock:
            await send(self.session, render_turn(turn, oob=True) + changed)

    # --- saving and pushing --------------------------------------------------------------------

    async def push_turn(self, *, extra: str = "") -> None:
        """Save the state and push the whole fragment (it holds any pending delta)."""
        self._pending.clear()
        async with self._lock:
            await self._save()
            await send(self.session, render_turn(self.turn, oob=True) + extra)

    async def _flush_later(self) -> None:
        await asyncio.sleep(BATCH_SECONDS)
        await self.flush()

    async def flush(self) -> None:
        """Push the pending deltas, after saving them."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        response = self.live["response"]
        html = "".join(
            format_html(
                '<div hx-swap-oob="beforeend:#{}"><span data-at="{}">{}</span></div>',
                text_id(self.turn, response, index),
                offset,
                "".join(texts),
            )
            for index, (offset, texts) in pending.items()
        )
        async with self._lock:
            await self._save()
            await send(self.session, html)

    async def _save(self) -> None:
        # A copy: the event loop goes on changing the state while a thread saves it.
        live = copy.deepcopy(self.live)
        await database_sync_to_async(turns.save_live)(self.turn, live, live["response"])


async def send(session: AgentSession, html: str) -> None:
    """Push HTML to every page watching the session."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(session.group_name, {"type": PUSH_EVENT, "html": html})
    except Exception as error:  # the pages catch up from the database when they reconnect
        log.warning("chat push to %s lost: %s", session.group_name, error)
