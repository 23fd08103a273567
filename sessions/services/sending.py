"""The session's Governor across processes, and the requests it sent.

A ``Governor`` keeps the prompt cache warm by acting seldom and otherwise sending what it sent
before with the new messages appended; that takes memory of what it decided. The hub keeps that
memory with the session (``SessionGovernor``): a process about to send a request continues
from the stored state and writes the state it leaves, only over the version it read, so
processes taking turns on a session send what one Governor would. Each request sent is
recorded (``SentRequest``): what it carried, what it kept of the request before, and the action
that changed what was sent, if one did. Reading the next request (a page, a preview) records
nothing and moves no state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from pydantic_core import to_json

from ctxhub.governance import Acted, ContextReport
from sessions.models import AgentSession, SentRequest, SessionGovernor

GOVERNOR_ACTIONS = ("high_water", "over_budget", "trigger", "always")
"""Why a request changed what the ones before it sent, other than a new start (its first, or
after an edit: those are the records' own changes): the Governor's actions, and a rule the
policy applies to every request (masking always, keyed reads) reaching an output sent before."""


@dataclass(frozen=True, slots=True)
class StoredState:
    """The session's Governor state as a process read it."""

    version: int
    """Requests sent so far (0: none): the version a write must find to replace it."""
    state: dict[str, Any] | None
    """None: the next request is a new start (nothing sent yet, or the state was made under
    another policy, model or window)."""
    heads: tuple[int, int] | None = None
    """The session's records revision and newest log seq, read with the state (None: no state
    is stored)."""


def governor_key(session: AgentSession) -> str:
    """Of what a Governor's state is made under: the session's policy, model and window."""
    decided_by = {
        "policy": session.policy or {},
        "model": session.model,
        "window": session.context_window,
    }
    return hashlib.sha256(json.dumps(decided_by, sort_keys=True).encode()).hexdigest()


def stored_state(session: AgentSession) -> StoredState:
    """The state the session's last request left, and the session's heads (one query)."""
    row = SessionGovernor.objects.filter(session=session).values_list(
        "key", "state", "version", "session__revision", "session__log_messages"
    )
    found = row.first()
    if found is None:
        return StoredState(0, None)
    key, state, version, revision, messages = found
    fits = key == governor_key(session)
    return StoredState(version, state if fits else None, (revision, messages - 1))


@dataclass(frozen=True, slots=True)
class Sent:
    """What a request sent carried, as the Governor reported it."""

    figures: ContextReport
    """The report's figures (its message reports are not read)."""
    acted: Acted | None
    prefix_tokens: int | None
    last_seq: int
    action: str = ""
    """The action in words (``action_words``), for a request that acted."""


def record_sent(
    session: AgentSession, read: StoredState, state: dict[str, Any], sent: Sent
) -> bool:
    """Store the state a request left and record the request, if the stored state is still the
    one ``read``; False when another process sent a request of the session since (the caller
    governs again from that one's state)."""
    row = _sent_row(session, read, sent)
    if read.version and connection.vendor == "postgresql":
        return _recorded_in_one_statement(session.pk, row, read, state)
    try:
        with transaction.atomic():
            if read.version == 0:
                SessionGovernor.objects.create(
                    session=session, key=row["key"], state=state, version=row["number"]
                )
            else:
                replaced = SessionGovernor.objects.filter(
                    session=session, version=read.version
                ).update(key=row["key"], state=state, version=row["number"])
                if not replaced:
                    return False
            SentRequest.objects.create(session=session, state=read.state, **row)
    except IntegrityError:  # another process wrote the session's first state first
        return False
    return True


def _sent_row(session: AgentSession, read: StoredState, sent: Sent) -> dict[str, Any]:
    """The columns of the request's ``SentRequest`` but its session and the state it was
    governed from."""
    figures = sent.figures
    return {
        "number": read.version + 1,
        "last_seq": sent.last_seq,
        "tokens": figures.tokens_after,
        "tool_tokens": figures.tool_definition_tokens,
        "history_tokens": figures.tokens_before,
        "prefix_tokens": sent.prefix_tokens,
        "window_tokens": figures.window_tokens,
        "budget_tokens": figures.budget_tokens,
        "acted": sent.acted or "",
        "action": sent.action,
        "key": governor_key(session),
    }


def _recorded_in_one_statement(
    session_id: Any, row: dict[str, Any], read: StoredState, state: dict[str, Any]
) -> bool:
    """``record_sent`` over a stored state, on PostgreSQL: the state replaced and the request
    inserted by one statement, in one round trip. The state it was governed from is copied
    from the replaced row, not sent back. Nothing is written when the version moved on: the
    update waits for a concurrent writer's commit and then finds it moved."""
    name = connection.ops.quote_name
    governor = name(SessionGovernor._meta.db_table)
    sent = name(SentRequest._meta.db_table)
    columns = ", ".join(map(name, row))
    values = ", ".join(f"%({column})s" for column in row)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH before AS (
                SELECT state FROM {governor}
                WHERE session_id = %(session)s AND version = %(read)s
            ), replaced AS (
                UPDATE {governor}
                SET "key" = %(key)s, state = %(state)s::jsonb, version = %(number)s,
                    updated_at = %(now)s
                WHERE session_id = %(session)s AND version = %(read)s
                RETURNING session_id
            )
            INSERT INTO {sent} (session_id, state, created_at, {columns})
            SELECT replaced.session_id, CASE WHEN %(from_state)s THEN before.state END,
                %(now)s, {values}
            FROM replaced, before
            """,
            {
                **row,
                "session": session_id,
                "read": read.version,
                "state": to_json(state).decode(),
                "from_state": read.state is not None,
                "now": timezone.now(),
            },
        )
        return bool(cursor.rowcount == 1)


def action_words(report: ContextReport, seq_of: Callable[[int | None], int | None]) -> str:
    """What a request that acted sends now, in words: the log messages the window omits (as
    seq ranges), the results masked, the outputs truncated or evicted."""
    dropped: list[int] = []
    counts = {"masked": 0, "truncated": 0, "evicted": 0, "deduplicated": 0}
    for entry in report.messages:
        if not entry.kept:
            seq = seq_of(entry.index)
            if seq is not None:
                dropped.append(seq)
            continue
        for part in entry.parts:
            if part.action in counts:
                counts[part.action] += 1
    said = []
    if dropped:
        said.append(f"window: {_ranges(dropped)} omitted ({_counted(len(dropped), 'message')})")
    said += [f"{_counted(count, 'result')} {verb}" for verb, count in counts.items() if count]
    return "; ".join(said) or "nothing omitted or shortened"


def _counted(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _ranges(seqs: list[int]) -> str:
    """``#3-#212, #230`` (with an en dash) for seqs: at most three ranges, then how many
    more."""
    runs: list[tuple[int, int]] = []
    for seq in sorted(seqs):
        if runs and seq == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    words = [f"#{a}" if a == b else f"#{a}\N{EN DASH}#{b}" for a, b in runs[:3]]
    if len(runs) > 3:
        words.append(f"{len(runs) - 3} more ranges")
    return ", ".join(words)
