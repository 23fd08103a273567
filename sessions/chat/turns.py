"""Chat turns in the database: beginning one (at most one runs per session), finishing it,
and the synthetic results that keep the log valid when a turn stops between a tool call and
its result."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart

from sessions.models import AgentSession, ChatTurn, Message, MessageSource, TurnStatus
from sessions.services import Conflict, Invalid, append_messages

# What a tool call left without its result reads as, in the log and to the model.
INTERRUPTED = "Interrupted: the turn was stopped before this tool returned; nothing came back."


class TurnRunning(Conflict):
    """Refused because the session's turn is running: a reason that lapses once it ends (the
    page takes it away then)."""

    code = "turn_running"


MAX_PROMPT_CHARS = 100_000


def chat_model_name(session: AgentSession) -> str:
    """The model that answers the session's chat: its own choice, else the setting."""
    return session.chat_model or settings.CTXHUB_CHAT_MODEL


def running_turn(session: AgentSession) -> ChatTurn | None:
    return ChatTurn.objects.filter(session=session, status=TurnStatus.RUNNING).first()


def latest_turn(session: AgentSession) -> ChatTurn | None:
    return ChatTurn.objects.filter(session=session).first()


def shown_turn(session: AgentSession) -> ChatTurn | None:
    """The turn the chat shows: the latest, unless it ended well and the log moved on since
    (its "Answered" or "Stopped" line would stand over messages that came after it). A failed
    turn stays: it holds the prompt that was not sent."""
    turn = latest_turn(session)
    if turn is None or turn.status in (TurnStatus.RUNNING, TurnStatus.FAILED):
        return turn
    if turn.last_seq is not None and session.messages.filter(seq__gt=turn.last_seq).exists():
        return None
    return turn


def is_stale(turn: ChatTurn) -> bool:
    """A running turn whose process stopped beating: it died with its server."""
    age = timezone.now() - turn.heartbeat_at
    return age > timedelta(seconds=settings.CTXHUB_CHAT_STALE_SECONDS)


def begin(session: AgentSession, actor: Any, prompt: str, control_channel: str) -> ChatTurn:
    """A new running turn; Conflict while another turn of the session runs.

    A running turn whose process died is closed first (``lost``), with synthetic results for
    the tool calls it left, so one crashed server never blocks a session.
    """
    if not prompt.strip():
        raise Invalid("type a message first", field="prompt")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise Invalid(f"a message is limited to {MAX_PROMPT_CHARS:,} characters", field="prompt")
    if "\x00" in prompt:
        raise Invalid("a message cannot hold a NUL character", field="prompt")
    # An agent that talks to its model through the gateway owns its conversation: a prompt here
    # would add messages its next request does not carry, and it would go on in a new session.
    if AgentSession.objects.filter(pk=session.pk, gateway__isnull=False).exists():
        raise Conflict(
            "this session is an agent's conversation through the gateway: prompt the agent, or "
            "fork the session to chat with it here; /compact, /clear and /pin work as usual",
            field="prompt",
        )
    current = running_turn(session)
    if current is not None and is_stale(current):
        finish(current, TurnStatus.LOST, error="its server stopped while it ran")
    try:
        with transaction.atomic():
            return ChatTurn.objects.create(
                session=session,
                actor=actor if getattr(actor, "is_authenticated", False) else None,
                prompt=prompt,
                model=chat_model_name(session),
                control_channel=control_channel,
            )
    except IntegrityError:
        raise TurnRunning(
            "a turn is still running: wait for its answer or press Stop, then send again",
            field="prompt",
        ) from None


def save_live(turn: ChatTurn, live: dict[str, Any], requests: int) -> None:
    """What is in flight, for pages that connect mid-turn; also the turn's heartbeat."""
    ChatTurn.objects.filter(pk=turn.pk, status=TurnStatus.RUNNING).update(
        live=live, requests=requests, heartbeat_at=timezone.now()
    )


def record_seqs(turn: ChatTurn, rows: list[Message]) -> None:
    """The log range the turn wrote."""
    if not rows:
        return
    if turn.first_seq is None:
        turn.first_seq = rows[0].seq
    turn.last_seq = rows[-1].seq
    ChatTurn.objects.filter(pk=turn.pk).update(first_seq=turn.first_seq, last_seq=turn.last_seq)


def finish(turn: ChatTurn, status: str, *, error: str = "") -> ChatTurn:
    """Close a turn: the tool calls it left without results get synthetic ones in the log."""
    rows = close_dangling_calls(turn.session)
    record_seqs(turn, rows)
    turn.status = status
    turn.error = error
    turn.live = {}
    turn.finished_at = timezone.now()
    ChatTurn.objects.filter(pk=turn.pk).update(
        status=status, error=error, live={}, finished_at=turn.finished_at
    )
    return turn


def close_dangling_calls(session: AgentSession) -> list[Message]:
    """When the log ends with a response calling tools, append their results as interrupted,
    so the next request pairs every call with its result (what providers require)."""
    last = Message.objects.filter(session=session).order_by("-seq").first()
    if last is None:
        return []
    message = last.message
    if not isinstance(message, ModelResponse):
        return []
    calls = [part for part in message.parts if isinstance(part, ToolCallPart)]
    if not calls:
        return []
    results = ModelRequest(
        parts=[
            ToolReturnPart(
                call.tool_name, INTERRUPTED, tool_call_id=call.tool_call_id, outcome="interrupted"
            )
            for call in calls
        ]
    )
    return append_messages(session, [results], source=MessageSource.CHAT)
