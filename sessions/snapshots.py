"""Snapshots of governed contexts, for a process that has not governed a session yet.

A snapshot is derived data, like a message's counting cache: a session's governed messages, its
report and the seq of each position, stored under the key of everything that decides them (the
records revision, the newest seq, the pins, the policy, the model and window, the tool
definitions the agent sends, the version of the session's Governor state, and the engine's own
code). A snapshot whose key differs is never read, so a stale one costs nothing but its row;
it is rewritten freely. A process that governed the session already carries its own work over
instead (``sessions.history``), so snapshots are written where that is not so: when a process
governs a session cold, and by the job that refreshes them after appends.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path

from django.db import connection
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from ctxhub import governance
from ctxhub.governance import ContextReport
from sessions import history
from sessions.history import log_heads
from sessions.models import AgentSession, GovernedSnapshot


@cache
def engine_fingerprint() -> str:
    """A hash of the code that decides a governed context, the engine's and the effective
    history's (``sessions.history``): a snapshot made by other code is not read."""
    digest = hashlib.sha256()
    for root in (Path(governance.__file__).parent, Path(history.__file__).parent):
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{root.name}/{path.relative_to(root).as_posix()}".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def key(session: AgentSession, pins: list[int], governor_version: int) -> str:
    """The key of what the session's governed context is now, its Governor continuing from
    the state of version ``governor_version`` (see ``sessions.services.sending``)."""
    revision, last_seq = log_heads(session)
    decided_by = {
        "governor": governor_version,
        "engine": engine_fingerprint(),
        "revision": revision,
        "last_seq": last_seq,
        "pins": pins,
        "policy": session.policy,
        "model": session.model,
        "window": session.context_window,
        "tools": session.tool_definitions or [],
    }
    return hashlib.sha256(json.dumps(decided_by, sort_keys=True).encode()).hexdigest()


def read(
    session: AgentSession, wanted: str
) -> tuple[list[ModelMessage], ContextReport, list[int | None]] | None:
    """The governed messages, report and seqs stored under ``wanted``, if they are."""
    row = (
        GovernedSnapshot.objects.filter(session=session, key=wanted)
        .values_list("messages", "report", "seqs")
        .first()
    )
    if row is None:
        return None
    messages, report, seqs = row
    return (
        ModelMessagesTypeAdapter.validate_json(messages),
        ContextReport.model_validate_json(report),
        json.loads(seqs),
    )


def write(
    session: AgentSession,
    current: str,
    messages: list[ModelMessage],
    report: ContextReport,
    seqs: list[int | None],
) -> None:
    """Store a governed context as the session's snapshot under ``current`` (unless it is
    already, or the state it was made from may still roll back)."""
    if connection.in_atomic_block:
        return
    if GovernedSnapshot.objects.filter(session=session, key=current).exists():
        return
    GovernedSnapshot.objects.update_or_create(
        session=session,
        defaults={
            "key": current,
            "messages": ModelMessagesTypeAdapter.dump_json(messages).decode(),
            "report": report.model_dump_json(),
            "seqs": json.dumps(seqs),
            "tokens": report.tokens_after + report.tool_definition_tokens,
            "budget": report.budget_tokens,
            "room": request_room(report),
            "last_seq": max((s for s in seqs if s is not None), default=-1),
        },
    )


def request_room(report: ContextReport) -> int:
    """Tokens a request may carry in all under ``report``'s limits."""
    room = report.window_tokens - report.reserved_output_tokens - report.safety_margin_tokens
    return max(room, 0)
