"""An independent, naive effective history: every payload parsed afresh, records applied one by
one, as docs/governed-session.md states the rules. What the fast path must equal."""

from __future__ import annotations

from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    SystemPromptPart,
)

from ctxhub.governance import Governed, Policy, govern
from ctxhub.governance.counting import MARK
from ctxhub.governance.facts import message_facts
from ctxhub.governance.tokens import tokenizer_for
from sessions.models import AgentSession, Clear, Compaction, Message, Pin
from sessions.payloads import message_from_payload


def _system_parts(messages: list[ModelMessage]) -> list[SystemPromptPart]:
    """The system prompt parts the model sees from where they sit on (not request-scoped)."""
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, SystemPromptPart) and part.scope != "request"
    ]


def _same_prompt(a: SystemPromptPart, b: SystemPromptPart) -> bool:
    if a.context_id or b.context_id:
        return a.context_id == b.context_id
    return a.dynamic_ref is not None and a.dynamic_ref == b.dynamic_ref


def naive_kept(
    clear: Clear, before: list[ModelMessage], others: list[ModelMessage]
) -> ModelRequest | None:
    """What a clear keeps, as docs/governed-session.md states it: the system prompt parts of the log
    before it (a prompt stated again kept once with its latest value, where first stated, unless
    that value is empty; a text stated again kept once), less those another message of the effective
    history states; and the latest instructions before it, unless a message of the effective history
    carries its own."""
    kept: list[SystemPromptPart] = []
    for part in _system_parts(before):
        same = [i for i, k in enumerate(kept) if _same_prompt(k, part)]
        if same:
            kept[same[0]] = part
        elif (
            part.context_id
            or part.dynamic_ref
            or part.content not in [k.content for k in kept if not (k.context_id or k.dynamic_ref)]
        ):
            kept.append(part)
    stated = _system_parts(others)
    parts: list[SystemPromptPart] = []
    for part in kept:
        again = any(part.content == s.content or _same_prompt(part, s) for s in stated)
        if part.content and not again and part.content not in [p.content for p in parts]:
            parts.append(part)
    instructions = next(
        (
            m.instructions
            for m in reversed(before)
            if isinstance(m, ModelRequest) and m.instructions is not None
        ),
        None,
    )
    if any(isinstance(m, ModelRequest) and m.instructions is not None for m in others):
        instructions = None
    if not parts and instructions is None:
        return None
    return ModelRequest(
        parts=list(parts), instructions=instructions, metadata={MARK: {"clear": clear.pk}}
    )


def naive_history(session: AgentSession) -> tuple[list[ModelMessage], list[int | None]]:
    """The effective history (fresh objects) and the log seq of each position (None: a message
    a record wrote)."""
    messages, seqs, _ = _naive(session)
    return messages, seqs


def _naive(session: AgentSession) -> tuple[list[ModelMessage], list[int | None], set[int]]:
    """The effective history, its seqs and its pinned positions."""
    log = {m.seq: m.payload for m in Message.objects.filter(session=session)}
    pins = set(Pin.objects.filter(session=session, undone_at=None).values_list("seq", flat=True))
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
    # Pinned messages before the clear stay, after what the clear keeps, but a tool call only
    # with exactly its results pinned right after it (and they only with it).
    tokenizer = tokenizer_for(session.model)
    facts = {s: message_facts(message_from_payload(log[s]), tokenizer) for s in pins if s < start}
    for seq in sorted(facts):
        calls, results = set(facts[seq].call_ids), set(facts[seq].result_ids)
        after, previous = facts.get(seq + 1), facts.get(seq - 1)
        if calls and (after is None or set(after.result_ids) != calls):
            continue
        if results and (previous is None or set(previous.call_ids) != results):
            continue
        messages.append(message_from_payload(log[seq]))
        seqs.append(seq)
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
    positions = {p for p, s in enumerate(seqs) if s is not None and s in pins}
    if clear is not None:
        # What the clear keeps, first, and held as a pin is.
        before = [message_from_payload(log[s]) for s in sorted(log) if s < start]
        kept = naive_kept(clear, before, messages)
        if kept is not None:
            messages.insert(0, kept)
            seqs.insert(0, None)
            positions = {0} | {p + 1 for p in positions}
    return messages, seqs, positions


def naive_governed(session: AgentSession, policy: Policy, *, model: str | None = None) -> Governed:
    """A cold ``govern`` of the naive effective history, pins (and what a clear keeps) as
    positions (counted with ``model``'s tokenizer, if given, instead of the session's)."""
    messages, _, positions = _naive(session)
    return govern(
        messages,
        policy,
        model=model or session.model,
        pinned=positions,
        context_window_tokens=session.context_window,
    )


def dump(messages: list[ModelMessage]) -> list[Any]:
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")
