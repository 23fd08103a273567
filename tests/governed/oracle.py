"""An independent, naive effective history: every payload parsed afresh, records applied one by
one, as the README states the rules. What the fast path must equal."""

from __future__ import annotations

from typing import Any

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from ctxhub.governance import Governed, Policy, govern
from sessions.models import AgentSession, Clear, Compaction, Message, Pin
from sessions.payloads import message_from_payload


def naive_history(session: AgentSession) -> tuple[list[ModelMessage], list[int | None]]:
    """The effective history (fresh objects) and the log seq of each position."""
    log = {m.seq: m.payload for m in Message.objects.filter(session=session)}
    clear = (
        Clear.objects.filter(session=session, undone_at=None).order_by("-created_at", "-id").first()
    )
    start = clear.from_seq if clear else 0
    applied: list[Compaction] = []
    for compaction in Compaction.objects.filter(session=session, undone_at=None).order_by(
        "-created_at", "-id"
    ):
        overlaps = any(
            compaction.first_seq <= other.last_seq and other.first_seq <= compaction.last_seq
            for other in applied
        )
        if not overlaps and compaction.first_seq >= start:
            applied.append(compaction)
    messages: list[ModelMessage] = []
    seqs: list[int | None] = []
    for seq in sorted(log):
        if seq < start:
            continue
        covering = next((c for c in applied if c.first_seq <= seq <= c.last_seq), None)
        if covering is None:
            messages.append(message_from_payload(log[seq]))
            seqs.append(seq)
        elif seq == covering.first_seq:
            for item in covering.replacement:
                if "seq" in item:
                    messages.append(message_from_payload(log[item["seq"]]))
                    seqs.append(item["seq"])
                else:
                    messages.append(message_from_payload(item["message"]))
                    seqs.append(None)
    return messages, seqs


def naive_governed(session: AgentSession, policy: Policy, *, model: str | None = None) -> Governed:
    """A cold ``govern`` of the naive effective history, pins as positions (counted with
    ``model``'s tokenizer, if given, instead of the session's)."""
    messages, seqs = naive_history(session)
    pinned = set(Pin.objects.filter(session=session, undone_at=None).values_list("seq", flat=True))
    positions = {p for p, s in enumerate(seqs) if s is not None and s in pinned}
    return govern(
        messages,
        policy,
        model=model or session.model,
        pinned=positions,
        context_window_tokens=session.context_window,
    )


def dump(messages: list[ModelMessage]) -> list[Any]:
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")
