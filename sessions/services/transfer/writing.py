"""Writing a read export: one transaction, a new session owned by the importer."""

from __future__ import annotations

from datetime import datetime
from itertools import groupby
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from ctxhub.governance.facts import message_facts
from ctxhub.governance.tokens import tokenizer_for
from sessions.models import (
    AgentSession,
    AuditEvent,
    Clear,
    Compaction,
    EvictedOutput,
    Pin,
)
from sessions.payloads import (
    storable_payload,
)
from sessions.services.log import append_messages
from sessions.services.transfer.format import REFERENCES
from sessions.services.transfer.reading import ParsedExport, parse_export


def import_session(text: str, owner: Any) -> AgentSession:
    """A new session of ``owner`` made from an export: validated whole (``parse_export``),
    then written in one transaction."""
    return write_import(parse_export(text), owner)


def _dated(row: models.Model, when: datetime | None) -> None:
    """Give a record the time it was made on its hub (``auto_now_add`` stamps the import's):
    the newest record is the one that applies, so the order must be the original's. Only the
    stamp is written, past the records' append-only ``save``."""
    if when is not None:
        type(row)._default_manager.filter(pk=row.pk).update(created_at=when)


def _unused_title(owner: Any, title: str) -> str:
    """``title``, or, when the owner has a session of that title (the one exported, say),
    ``title (imported)``, ``(imported 2)``…: two sessions never read the same in the fleet."""
    taken = set(
        AgentSession.objects.filter(owner=owner, title__startswith=title[:150]).values_list(
            "title", flat=True
        )
    )
    limit = AgentSession._meta.get_field("title").max_length
    assert limit is not None
    candidate, number = title, 1
    while candidate in taken:
        suffix = " (imported)" if number == 1 else f" (imported {number})"
        candidate = title[: limit - len(suffix)] + suffix
        number += 1
    return candidate


def write_import(parsed: ParsedExport, owner: Any) -> AgentSession:
    with transaction.atomic():
        title = _unused_title(owner, parsed.session["title"])
        session = AgentSession.objects.create(owner=owner, **{**parsed.session, "title": title})
        # The normal append path: this hub counts the tokens and facts and hashes the payloads.
        # One call per run of messages from one source, so each keeps where it came from.
        for source, run in groupby(parsed.messages, key=lambda item: item[0]):
            append_messages(
                session, [message for _, message in run], source=source, auto_compact=False
            )
        tokenizer = tokenizer_for(session.model)
        ids: dict[str, list[int]] = {"compaction": [], "clear": [], "pin": []}
        for record in parsed.compactions:
            fields = dict(record.fields)
            created = fields.pop("created_at")
            supersedes = fields.pop("supersedes")
            items: list[dict[str, Any]] = []
            for item in fields.pop("replacement"):
                if isinstance(item, int):
                    items.append({"seq": item})
                    continue
                message = item["message"]
                items.append(
                    {
                        "message": storable_payload(message),
                        "facts": message_facts(message, tokenizer).to_json(),
                        "encoding": tokenizer.encoding_name,
                    }
                )
            compaction = Compaction.objects.create(
                session=session,
                replacement=items,
                summary_message=storable_payload(fields.pop("summary_message")),
                supersedes_id=None if supersedes is None else ids["compaction"][supersedes],
                **fields,
            )
            _dated(compaction, created)
            ids["compaction"].append(compaction.pk)
        for kind, model, records in (
            ("clear", Clear, parsed.clears),
            ("pin", Pin, parsed.pins),
        ):
            for record in records:
                fields = dict(record.fields)
                created = fields.pop("created_at")
                row = model._default_manager.create(session=session, **fields)
                _dated(row, created)
                ids[kind].append(row.pk)
        for record in parsed.evicted:
            fields = dict(record.fields)
            created = fields.pop("created_at")
            evicted = EvictedOutput.objects.create(
                session=session, tokens=tokenizer.count(fields["text"]), **fields
            )
            _dated(evicted, created)
        for record in parsed.audit:
            fields = dict(record.fields)
            created = fields.pop("created_at")
            data = dict(fields.pop("data"))
            for kind in REFERENCES:
                value = data.get(kind)
                if isinstance(value, int) and not isinstance(value, bool):
                    data[kind] = ids[kind][value]
            AuditEvent.objects.create(
                session=session, data=data, created_at=created or timezone.now(), **fields
            )
    return session
