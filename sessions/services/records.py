"""Records over the log a person (or an agent) writes directly: clear, pins, undo, and the
session's policy.

Each change is one transaction that locks the session row (appends and other changes wait),
writes the record, bumps the session's records revision and writes an audit event; the governed
tokens before and after are measured outside the lock. Nothing here touches a message.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ctxhub.governance import Policy
from ctxhub.governance.tokens import tokenizer_for
from sessions import events
from sessions.history import effective_history, kept_message, record_state
from sessions.models import AgentSession, AuditEvent, Clear, Compaction, Message, Pin, Undoable
from sessions.services.errors import Conflict, Invalid, NotFound
from sessions.services.governed import governed_context

log = logging.getLogger(__name__)


def lock_session(session: AgentSession) -> None:
    """Lock the session row until commit: appends and other changes to it wait."""
    AgentSession.objects.select_for_update().filter(pk=session.pk).values_list("pk").get()


def bump_revision(session: AgentSession) -> None:
    """Tell every process that the records changed (their remembered histories are stale)."""
    AgentSession.objects.filter(pk=session.pk).update(
        revision=F("revision") + 1, updated_at=timezone.now()
    )


def governed_tokens(session: AgentSession) -> int:
    return governed_context(session).tokens


def audit(
    session: AgentSession,
    actor: Any,
    verb: str,
    *,
    tokens_before: int | None,
    tokens_after: int | None = None,
    **data: Any,
) -> AuditEvent:
    return AuditEvent.objects.create(
        session=session,
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        verb=verb,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        data=data,
    )


def measure_after(session: AgentSession, event: AuditEvent) -> None:
    """Fill in an audit event's governed tokens after its change, once the change is committed:
    governing a long session takes a while, and appends must not wait for it under the lock. An
    append that lands in between is counted in (as one before the change is in the before)."""
    try:
        tokens = governed_tokens(session)
    except Exception:  # the change stands; the page that shows the session says what failed
        log.exception("measuring session %s after %s failed", session.pk, event.verb)
        return
    event.measured_after(tokens)


def _actor(actor: Any) -> Any:
    return actor if getattr(actor, "is_authenticated", False) else None


class _Change:
    """One change to a session's records, being made (see ``_change``)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.unchanged = False


@contextmanager
def _change(session: AgentSession, actor: Any, verb: str) -> Iterator[_Change]:
    """Make a change in one transaction with the session locked: the body writes its record
    and notes what to audit in ``data`` (or sets ``unchanged``); the records revision is bumped,
    an audit event records the change, and pages are told.

    Nothing is governed under the lock. The tokens before are those of the session as the
    change was asked for (the context the page or agent asking has just read: warm in this
    process); the tokens after are governed once the change is committed (``measure_after``).
    """
    change = _Change()
    before = governed_tokens(session)
    with transaction.atomic():
        lock_session(session)
        yield change
        if change.unchanged:
            return
        bump_revision(session)
        event = audit(session, actor, verb, tokens_before=before, **change.data)
    events.send_on_commit(events.records_changed, session=session)
    measure_after(session, event)


@dataclass(frozen=True)
class Cleared:
    """A clear just made, and what the model still sees of the history before it."""

    record: Clear
    system_prompt: bool
    """Whether it kept system prompt parts."""
    instructions: bool
    """Whether it kept instructions."""
    kept_tokens: int
    """Tokens of the system prompt parts and instructions it kept."""
    pinned: int
    """Pinned messages from before it, which stay."""
    dropped: int
    """Messages the model saw before it and no longer sees."""

    def summary(self) -> str:
        """What stays and what goes, in a line (the chat and the API answer with it)."""
        said = [
            name
            for name, held in (
                ("system prompt", self.system_prompt),
                ("instructions", self.instructions),
            )
            if held
        ]
        if said:
            kept = f"kept the {' and '.join(said)} ({self.kept_tokens:,} tokens)"
        else:
            kept = "kept no system prompt or instructions (there were none to keep)"
        if self.pinned:
            kept += f" and {_count(self.pinned, 'pinned message')}"
        return f"{kept}; dropped {_count(self.dropped, 'message')}"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def clear(session: AgentSession, *, actor: Any = None) -> Cleared:
    """``/clear``: the model no longer sees the conversation stored so far (the log keeps it).

    What stays (``sessions.history.effective``): the system prompt parts of the history before
    the clear and the latest instructions, in one message the clear keeps at the start of the
    effective history; and the pinned messages, after it in log order, since a pin means "keep
    this verbatim" (a pinned tool call or result only with its other half pinned too: alone it
    could not be sent as it is). Everything else goes: the user's and the model's messages,
    tool calls and results, summaries. Undoing the clear gives the earlier view back exactly.
    """
    with _change(session, actor, "clear") as change:
        last = Message.objects.filter(session=session).order_by("-seq").values("seq").first()
        from_seq = 0 if last is None else last["seq"] + 1
        current = (
            Clear.objects.filter(session=session, undone_at__isnull=True)
            .order_by("-created_at", "-id")
            .first()
        )
        if from_seq == 0:
            raise Conflict("nothing to clear: the log is empty")
        if current is not None and current.from_seq == from_seq:
            raise Conflict("nothing to clear: nothing was stored since the last clear")
        before = effective_history(session)
        record = Clear.objects.create(session=session, from_seq=from_seq, actor=_actor(actor))
        # Read in this transaction, where the new clear is visible: the history this process
        # remembers is still the one before it.
        state = record_state(session)
        kept = kept_message(session.pk, state, tokenizer_for(session.model))
        stays = sum(1 for seq in state.kept_pins if before.position_of(seq) is not None)
        result = Cleared(
            record=record,
            system_prompt=kept is not None and kept[2].system_parts > 0,
            instructions=kept is not None and kept[2].instructions,
            kept_tokens=kept[2].tokens if kept is not None else 0,
            pinned=len(state.kept_pins),
            dropped=len(before) - stays - (before.kept is not None),
        )
        change.data.update(
            clear=record.pk,
            from_seq=from_seq,
            kept_tokens=result.kept_tokens,
            pinned=result.pinned,
            dropped=result.dropped,
        )
    return result


def pin(session: AgentSession, seq: int, *, actor: Any = None) -> Pin:
    """Pin a message of the effective history: governance keeps it verbatim. Pinning a pinned
    message changes nothing."""
    with _change(session, actor, "pin") as change:
        if effective_history(session).position_of(seq) is None:
            if not Message.objects.filter(session=session, seq=seq).exists():
                raise NotFound(f"message #{seq} does not exist in this session", field="seq")
            raise Invalid(
                f"message #{seq} is not in the effective history (cleared or summarised); undo "
                "that first to pin it",
                field="seq",
            )
        record = Pin.objects.filter(session=session, seq=seq, undone_at__isnull=True).first()
        if record is not None:
            change.unchanged = True
        else:
            record = Pin.objects.create(session=session, seq=seq, actor=_actor(actor))
            change.data.update(pin=record.pk, seq=seq)
    return record


def unpin(session: AgentSession, seq: int, *, actor: Any = None) -> Pin:
    with _change(session, actor, "unpin") as change:
        record = Pin.objects.filter(session=session, seq=seq, undone_at__isnull=True).first()
        if record is None:
            raise NotFound(f"message #{seq} is not pinned", field="seq")
        _stamp(record, actor)
        change.data.update(pin=record.pk, seq=seq)
    return record


def _stamp(record: Undoable, actor: Any) -> None:
    record.undone_at = timezone.now()
    record.undone_by = _actor(actor)
    record.save(update_fields=["undone_at", "undone_by"])


def undo(session: AgentSession, record: Compaction | Clear, *, actor: Any = None) -> None:
    """Undo a compaction or a clear: the effective history is again what it was without it."""
    kind = "compaction" if isinstance(record, Compaction) else "clear"
    with _change(session, actor, f"undo_{kind}") as change:
        fresh = type(record).objects.select_for_update().filter(pk=record.pk, session=session)
        current = fresh.first()
        if current is None:
            raise NotFound(f"no such {kind} in this session")
        if current.undone_at is not None:
            raise Conflict(f"this {kind} was already undone at {current.undone_at:%Y-%m-%d %H:%M}")
        _stamp(current, actor)
        record.undone_at, record.undone_by = current.undone_at, current.undone_by
        change.data[kind] = record.pk


def undo_compaction(session: AgentSession, compaction_id: int, *, actor: Any = None) -> Compaction:
    record = Compaction.objects.filter(pk=compaction_id, session=session).first()
    if record is None:
        raise NotFound("no such compaction in this session")
    undo(session, record, actor=actor)
    return record


def undo_clear(session: AgentSession, clear_id: int, *, actor: Any = None) -> Clear:
    record = Clear.objects.filter(pk=clear_id, session=session).first()
    if record is None:
        raise NotFound("no such clear in this session")
    undo(session, record, actor=actor)
    return record


def set_policy(session: AgentSession, policy: Policy, *, actor: Any = None) -> None:
    """Store a session's policy (what differs from the defaults), validated where it was
    edited: the form or the API, which also check it leaves the history room in the session's
    window. What the model sees changes at once: audited and pushed like a record."""
    overrides = policy.overrides()
    with _change(session, actor, "policy") as change:
        previous = AgentSession.objects.values_list("policy", flat=True).get(pk=session.pk)
        if previous == overrides:
            change.unchanged = True
            return
        AgentSession.objects.filter(pk=session.pk).update(policy=overrides)
        session.policy = overrides
        change.data.update(before=previous, after=overrides)
