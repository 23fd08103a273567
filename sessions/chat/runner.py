"""Running a chat turn as an asyncio task of the ASGI process, and stopping it.

``start_turn`` records the turn (refused while another of the session runs) and starts its
task; the agent runs in a task of its own, so Stop cancels the model call or the tool in
progress and nothing else. Stop reaches the turn wherever it runs: directly in this process,
through the turn's control channel on the channel layer in another.

Each model request of the turn goes through ``TurnRun.before_request``: the run's messages
not yet in the log are appended, the agent's tool definitions stored if they changed (at the
turn's first request, as a rule), then the request carries the session's governed context and
every open page gets the x-ray of that very request. Each response is appended as it
completes, with the usage its provider reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.template.loader import render_to_string
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelContextWindowExceededError,
    ModelHTTPError,
    UserError,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.usage import RequestUsage

from ctxhub.governance import count_tokens
from ctxhub.governance.llm import OFFLINE_PREFIX, UnknownOfflineModel
from sessions import telemetry
from sessions.chat import turns
from sessions.chat.agent import chat_agent
from sessions.chat.stream import TurnStream, render_turn, send
from sessions.models import AgentSession, ChatTurn, MessageSource, TurnStatus
from sessions.services import Conflict, append_messages, send_context
from sessions.services.tools import definitions_of, set_tools
from sessions.xray import xray

if TYPE_CHECKING:
    from pydantic_ai.tools import ToolDefinition

log = logging.getLogger(__name__)

STOP_EVENT = "chat.stop"
HEARTBEAT_SECONDS = 5.0
MAX_ERROR_CHARS = 2_000

# The turns this process runs, by session.
_RUNS: dict[Any, TurnRun] = {}


class TurnRun:
    """One turn: the agent's run, its storage and its stream."""

    def __init__(self, session: AgentSession, turn: ChatTurn) -> None:
        self.session = session
        self.turn = turn
        self.stream = TurnStream(session, turn)
        self.stored = 0
        """How many of the run's messages are in the log."""
        self.requests = 0
        self.agent_task: asyncio.Task[Any] | None = None
        self.task: asyncio.Task[None] | None = None
        self.stopping = False
        self.sent_tokens = 0
        """Tokens the latest request carried, tool definitions included."""

    # --- around each model request (see sessions.chat.agent.HubGovernance) ---------------------

    async def before_request(
        self, messages: list[ModelMessage], tools: Sequence[ToolDefinition]
    ) -> list[ModelMessage]:
        new = messages[self.stored :]
        if new:
            await database_sync_to_async(self._append)(new)
            self.stored = len(messages)
            if self.stream.live["tools"]:
                await self.stream.results_stored()
        self.requests += 1
        governed, xray_html = await database_sync_to_async(self._govern)(definitions_of(tools))
        await self.stream.request_sent(self.requests, xray_html)
        return governed

    async def after_response(self, response: ModelResponse) -> None:
        await self.stream.flush()
        response = self._measured(response)
        await database_sync_to_async(self._append)([response])
        self.stored += 1
        await self.stream.response_stored()

    def _measured(self, response: ModelResponse) -> ModelResponse:
        """An offline model's response with the tokens it was really sent and wrote: such a
        model measures nothing, and pydantic-ai would store its rough guess as if a provider
        had reported it."""
        if not (response.model_name or "").startswith(OFFLINE_PREFIX):
            return response
        written = "".join(
            part.content if isinstance(part, TextPart) else part.args_as_json_str()
            for part in response.parts
            if isinstance(part, TextPart | ToolCallPart)
        )
        model = self.session.model
        usage = RequestUsage(
            input_tokens=self.sent_tokens, output_tokens=count_tokens(written, model=model)
        )
        return replace(response, usage=usage)

    def _append(self, messages: list[ModelMessage]) -> None:
        rows = append_messages(self.session, messages, source=MessageSource.CHAT)
        turns.record_seqs(self.turn, rows)

    def _govern(self, tools: list[dict[str, Any]]) -> tuple[list[ModelMessage], str]:
        # The x-ray of this very request is pushed below: no other word to the pages.
        set_tools(self.session, tools, announce=False)
        context = send_context(self.session)
        self.sent_tokens = context.tokens
        html = render_to_string(
            "sessions/_xray.html",
            {
                "session": self.session,
                "xray": xray(context),
                "oob": True,
                "during": self.requests,
            },
        )
        return context.messages, html

    # --- the task ------------------------------------------------------------------------------

    async def main(self) -> None:
        # Its own thread for the ORM, as a request has: a turn outlives the request that
        # started it. Each database call hands its connection back to the pool as it ends
        # (database_sync_to_async), so a turn holds none while the model thinks, and a Stop
        # that cancels a call cannot strand one.
        async with ThreadSensitiveContext():
            heartbeat = asyncio.create_task(self._beat())
            listener = asyncio.create_task(self._listen_for_stop())
            try:
                await self._execute()
            finally:
                heartbeat.cancel()
                listener.cancel()

    async def _execute(self) -> None:
        # The turn's span; the agent's run, its model calls and tools, and each request the
        # hub governs for it nest under it (the run's task starts inside it).
        with telemetry.chat_turn(self.session, self.turn) as span:
            status, error = TurnStatus.DONE, ""
            try:
                agent = chat_agent(self.session, self.turn.model, self)
                agent.instrument = telemetry.agent_instrumentation()
                if self.stopping:  # stopped before the run could start
                    raise asyncio.CancelledError
                self.agent_task = asyncio.create_task(
                    agent.run(
                        self.turn.prompt,
                        event_stream_handler=self.stream.handle,
                        # The session is the conversation, in the messages and in the spans.
                        conversation_id=str(self.session.pk),
                    )
                )
                await self.agent_task
            except asyncio.CancelledError:
                if not self.stopping:  # the server is going down, not a Stop: let it
                    raise
                status = TurnStatus.STOPPED
            except Exception as exc:
                status, error = TurnStatus.FAILED, describe(exc)
                log.warning("chat turn %s failed: %s", self.turn.pk, error, exc_info=True)
            await self.stream.flush()
            turn = await database_sync_to_async(turns.finish)(self.turn, status, error=error)
            telemetry.turn_finished(span, turn)
        await self.stream.finished(turn)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            await self.stream.beat()

    async def _listen_for_stop(self) -> None:
        """Stop asked from another process arrives on the turn's control channel."""
        layer = get_channel_layer()
        if layer is None or not self.turn.control_channel:
            return
        while True:
            message = await layer.receive(self.turn.control_channel)
            if message.get("type") == STOP_EVENT:
                self.stop()
                return

    def stop(self) -> None:
        """Cancel the agent's run (once); the turn ends as stopped."""
        if self.stopping:
            return
        self.stopping = True
        if self.agent_task is not None:
            self.agent_task.cancel()


def describe(error: Exception) -> str:
    """What the chat shows for a run that failed."""
    if isinstance(error, ModelContextWindowExceededError):
        text = f"The request was still too long for the model after smaller retries: {error}"
    elif isinstance(error, ModelHTTPError):
        text = f"The provider answered HTTP {error.status_code} ({error.model_name}): {error.body}"
    elif isinstance(error, ModelAPIError):
        text = f"The provider could not be reached or failed ({error.model_name}): {error}"
    elif isinstance(error, UserError | UnknownOfflineModel):
        # pydantic-ai's advice for a missing key names its own test model; here the choice
        # is the session's chat model.
        text = str(error).split(" To try Pydantic AI without an API key")[0]
        if "API key" in text or "api_key" in text:
            text += (
                f" Set it where the hub runs, or choose {OFFLINE_PREFIX}demo (no key, no"
                " network) for this chat."
            )
    else:
        text = f"{type(error).__name__}: {error}"
    return text[:MAX_ERROR_CHARS]


async def start_turn(session: AgentSession, actor: Any, prompt: str) -> ChatTurn:
    """Record a turn and start it; Conflict while another turn of the session runs. Called in
    a request, whose connection is handed back when it ends (the turn's own calls, outliving
    it, hand theirs back one by one)."""
    layer = get_channel_layer()
    channel = await layer.new_channel() if layer is not None else ""
    turn = await sync_to_async(turns.begin)(session, actor, prompt, channel)
    run = TurnRun(session, turn)
    await send(session, render_turn(turn, oob=True))
    _RUNS[session.pk] = run
    # A fresh context: the turn must not inherit the starting request's (its ORM thread, above
    # all, which ends with the request).
    task = run.task = asyncio.create_task(run.main(), context=contextvars.Context())
    task.add_done_callback(lambda _: _forget(session.pk, run))
    return turn


def _forget(session_pk: Any, run: TurnRun) -> None:
    if _RUNS.get(session_pk) is run:
        del _RUNS[session_pk]


async def stop_turn(session: AgentSession) -> ChatTurn:
    """Stop the session's running turn, wherever it runs; Conflict when none runs."""
    turn = await sync_to_async(turns.running_turn)(session)
    if turn is None:
        raise Conflict("no turn is running")
    run = _RUNS.get(session.pk)
    if run is not None and run.turn.pk == turn.pk:
        run.stop()
    elif turns.is_stale(turn):
        # Its server died: close it here.
        turn = await sync_to_async(turns.finish)(turn, TurnStatus.LOST, error="its server stopped")
        await send(session, render_turn(turn, oob=True))
    else:
        layer = get_channel_layer()
        if layer is not None and turn.control_channel:
            with contextlib.suppress(Exception):
                await layer.send(turn.control_channel, {"type": STOP_EVENT})
    return turn


async def wait_for_turn(session: AgentSession) -> None:
    """Wait until the session's turn run by this process (if any) has ended."""
    run = _RUNS.get(session.pk)
    if run is not None and run.task is not None:
        await asyncio.shield(run.task)
