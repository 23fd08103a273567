"""A session as an export: its header, its messages in seq order, then its records."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.db import models

from sessions.models import (
    AgentSession,
    AuditEvent,
    Clear,
    Compaction,
    EvictedOutput,
    Pin,
)
from sessions.services.tools import canonical
from sessions.services.transfer.format import FORMAT_VERSION, HEADER_KEY, REFERENCES


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


def _when(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _actor(row: Any, attribute: str = "actor") -> str | None:
    user = getattr(row, attribute)
    return None if user is None else str(user.get_username())


def _ordinals(rows: list[Any]) -> dict[int, int]:
    return {row.pk: position for position, row in enumerate(rows)}


def _oldest_first(model: type[models.Model], session: AgentSession) -> list[Any]:
    # Created order, ids breaking ties: imported in this order, the newest record stays the
    # newest (the active clear and the compaction that wins an overlap are the newest).
    rows = model._default_manager.filter(session=session).order_by("created_at", "id")
    return list(rows if model is EvictedOutput else rows.select_related("actor"))


def export_lines(session: AgentSession) -> Iterator[str]:
    """The session as JSONL, a line at a time (a long log is streamed, never held whole)."""
    yield _line(
        {
            HEADER_KEY: FORMAT_VERSION,
            "session": {
                "title": session.title,
                "model": session.model,
                "context_window": session.context_window,
                "policy": session.policy or {},
                "summarizer": session.summarizer,
                "chat_model": session.chat_model,
                "tool_definitions": canonical(session.tool_definitions or []),
            },
        }
    )
    rows = session.messages.order_by("seq").values_list("seq", "source", "created_at", "payload")
    for seq, source, created_at, payload in rows.iterator(chunk_size=200):
        yield _line(
            {
                "type": "message",
                "seq": seq,
                "source": source,
                "created_at": _when(created_at),
                "message": payload,
            }
        )
    compactions = _oldest_first(Compaction, session)
    clears = _oldest_first(Clear, session)
    pins = _oldest_first(Pin, session)
    ordinals = {
        "compaction": _ordinals(compactions),
        "clear": _ordinals(clears),
        "pin": _ordinals(pins),
    }
    for c in compactions:
        yield _line(
            {
                "type": "compaction",
                "first_seq": c.first_seq,
                "last_seq": c.last_seq,
                # The facts of its own messages are this hub's counts: the importer counts.
                "replacement": [
                    {"seq": item["seq"]} if "seq" in item else {"message": item["message"]}
                    for item in c.replacement
                ],
                "summary": c.summary,
                "summary_message": c.summary_message,
                "ledger": c.ledger,
                "outcome": c.outcome,
                "error": c.error,
                "summarizer": c.summarizer,
                "policy": c.policy,
                "focus": c.focus,
                "summarized_seqs": c.summarized_seqs,
                "tokens_before": c.tokens_before,
                "tokens_after": c.tokens_after,
                "messages_before": c.messages_before,
                "messages_after": c.messages_after,
                "supersedes": ordinals["compaction"].get(c.supersedes_id or -1),
                "started_at": _when(c.started_at),
                "finished_at": _when(c.finished_at),
                "trigger": c.trigger,
                "usage": c.usage,
                **_undoable(c),
            }
        )
    for clear in clears:
        yield _line({"type": "clear", "from_seq": clear.from_seq, **_undoable(clear)})
    for pin in pins:
        yield _line({"type": "pin", "seq": pin.seq, **_undoable(pin)})
    for evicted in _oldest_first(EvictedOutput, session):
        yield _line(
            {
                "type": "evicted_output",
                "ref": evicted.ref,
                "text": evicted.text,
                "created_at": _when(evicted.created_at),
            }
        )
    for event in _oldest_first(AuditEvent, session):
        yield _line(
            {
                "type": "audit_event",
                "verb": event.verb,
                "actor": _actor(event),
                "tokens_before": event.tokens_before,
                "tokens_after": event.tokens_after,
                "data": _refer(event.data or {}, ordinals),
                "created_at": _when(event.created_at),
            }
        )


def _undoable(record: Any) -> dict[str, Any]:
    return {
        # Who acted: one of this hub's people, or whom the hub it came from named.
        "actor": _actor(record) or record.actor_name or None,
        "created_at": _when(record.created_at),
        "undone_at": _when(record.undone_at),
    }


def _refer(data: dict[str, Any], ordinals: dict[str, dict[int, int]]) -> dict[str, Any]:
    """An audit event's data with the records it names by id named by ordinal (None for one
    no longer there)."""
    out = dict(data)
    for kind in REFERENCES:
        if isinstance(out.get(kind), int) and not isinstance(out[kind], bool):
            out[kind] = ordinals[kind].get(out[kind])
    return out


def export_jsonl(session: AgentSession) -> str:
    return "".join(export_lines(session))


def export_filename(session: AgentSession, extension: str) -> str:
    """A download name that says what it holds: the title, made safe, and the id."""
    stem = re.sub(r"[^A-Za-z0-9]+", "-", session.title).strip("-").lower()[:60] or "session"
    return f"{stem}-{str(session.pk)[:8]}.{extension}"
