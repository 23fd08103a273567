"""Forking a session at a message: a new session whose log is the original's up to and
including that message, with the records over that prefix, to try another policy, model or
prompt from that point.

The fork copies rows rather than sharing them. The log is append-only and a message belongs to
one session (a foreign key), so a shared prefix would make every query of the log, the records,
the snapshots and the live pushes ask "which session's rows, up to where" instead of "this
session's rows". Copying costs storage (the prefix is stored twice) and buys a fork that is an
ordinary session: appending to it, governing it, compacting or clearing it touch it alone and
the original never sees them. Payloads are copied as they are stored (not re-serialised, so the
fork's messages are byte for byte the original's), and so is their counting cache (tokens,
encoding, facts): nothing is recounted, and the fork plans from the same facts (unless the fork
is given a model that counts with another encoding: it is recounted once, after the copy).

What the fork carries, so that its governed context is what the original's would have been
with the log ending at the message forked at:

- compactions whose covered seqs (the range, what they summarised, what they kept) all lie at
  or before it, with their summary, ledger and replacement; a compaction that superseded
  another copied one points at its copy;
- clears from a seq at or before it (one made right after it, from the next seq on, is not
  copied: the fork starts with the conversation as it stood at the message, which is what
  forking there asks for);
- pins at or before it;
- the evicted outputs the copied messages and records can reach, so a reference in a copied
  summary, or one the model quoted, still reads back.

The copies are the fork's own records: new ids (the message a clear keeps names the fork's
clear), made at the fork's time, in the order the originals were made (where records compete,
the newest winning, the same one wins), and no compaction job behind them.

Undone records are not copied: undoing one gives the view without it, which is exactly the
fork's view, and a fork starts with records that shape its history, not the original's
history of changing its mind.

What it does not carry: the requests the original sent and its Governor's state. Those record
what was sent to a model, by the original, under its policy; the fork starts a fresh Governor,
as a new session does, which is the point of trying another policy or model from a message.
(Nor the compaction jobs, nor a paused automatic compaction: the fork runs its own.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from django.db import transaction
from django.db.models import Max

from ctxhub.governance import Policy
from ctxhub.governance.parts import plain_output, tool_output_text
from ctxhub.governance.steps.evict import eviction_ref
from ctxhub.governance.tokens import context_window, tokenizer_for
from sessions.models import (
    AgentSession,
    AuditEvent,
    Clear,
    Compaction,
    EvictedOutput,
    Message,
    MessagePiece,
    Pin,
)
from sessions.payloads import message_from_payload
from sessions.services.errors import Invalid
from sessions.services.governed import ensure_room, session_policy
from sessions.services.log import keep_log_counts, recount_tokens
from sessions.services.records import lock_session
from sessions.services.tools import tool_fields

# Messages are copied this many at a time: a long session is never held in memory at once.
BATCH = 1_000

# A reference to an evicted output, wherever it is quoted (a summary, a model's tool call).
_QUOTED_REF = re.compile(r"ev_[0-9a-f]{20}")

TITLE_LENGTH = 200  # AgentSession.title's max_length


def fork_title(title: str, seq: int) -> str:
    """The default title of a fork: the original's, saying where it was forked."""
    suffix = f" (fork at #{seq})"
    return title[: TITLE_LENGTH - len(suffix)] + suffix


def _checked_seq(session: AgentSession, seq: Any) -> int:
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise Invalid("seq: must be a whole number", field="seq")
    last = session.messages.aggregate(last=Max("seq"))["last"]
    if last is None:
        raise Invalid("seq: the session has no messages to fork at", field="seq")
    if not 0 <= seq <= last:
        raise Invalid(f"seq: must be from 0 to {last}, the session's last message", field="seq")
    return seq


def _covered(compaction: Compaction) -> Iterator[int]:
    """Every seq a compaction stands for or keeps."""
    yield compaction.first_seq
    yield compaction.last_seq
    yield from (int(s) for s in compaction.summarized_seqs or ())
    yield from (int(item["seq"]) for item in compaction.replacement if "seq" in item)


def _output_refs(payload: dict[str, Any]) -> set[str]:
    """The references the engine gives the tool outputs of a stored message when it evicts
    them (of their text), and any reference the message quotes."""
    refs = set(_QUOTED_REF.findall(json.dumps(payload, ensure_ascii=False)))
    parts = payload.get("parts") or ()
    if payload.get("kind") != "request" or not any(
        isinstance(p, dict) and p.get("part_kind") == "tool-return" for p in parts
    ):
        return refs  # only tool outputs are evicted: the rest is not parsed
    for part in message_from_payload(payload).parts:
        output = plain_output(part)
        text = tool_output_text(output) if output is not None else None
        if text is not None:
            refs.add(eviction_ref(text))
    return refs


def fork_session(
    session: AgentSession,
    seq: Any,
    *,
    actor: Any,
    title: str | None = None,
    model: str | None = None,
    policy: Policy | None = None,
) -> AgentSession:
    """A new session owned by ``actor`` whose log is ``session``'s up to and including message
    ``seq``, with the active records over it (see the module). Same model, policy, window and
    tool definitions unless ``model`` or ``policy`` are given; titled ``"<title> (fork at #N)"``
    unless ``title`` is. Refused (``Invalid``, naming the field) for a seq the log does not hold,
    or a policy that leaves the history no room. One transaction: all or nothing."""
    seq = _checked_seq(session, seq)
    new_model = model or session.model
    new_policy = policy if policy is not None else session_policy(session)
    if policy is not None or model is not None:  # the original's own were checked when set
        window = session.context_window or context_window(new_model)
        ensure_room(new_policy, window, field="policy" if policy is not None else "model")
    with transaction.atomic():
        # The source holds still while it is read: appends and records wait for the copy.
        lock_session(session)
        fork = AgentSession.objects.create(
            owner=actor,
            title=title or fork_title(session.title, seq),
            model=new_model,
            context_window=session.context_window,
            policy=new_policy.overrides(),
            summarizer=session.summarizer,
            chat_model=session.chat_model,
            **_tools(session, new_model),
        )
        refs = _copy_messages(session, fork, seq)
        refs |= _copy_records(session, fork, seq)
        _copy_evicted(session, fork, refs)
        AuditEvent.objects.create(
            session=session,
            actor=actor,
            verb="fork",
            data={
                "seq": seq,
                "fork": str(fork.pk),
                "title": fork.title,
                "text": f"forked at #{seq} into {fork.title!r} ({fork.pk})",
            },
        )
        AuditEvent.objects.create(
            session=fork,
            actor=actor,
            verb="forked",
            data={
                "seq": seq,
                "source": str(session.pk),
                "title": session.title,
                "text": f"forked from {session.title!r} ({session.pk}) at #{seq}",
            },
        )
    if tokenizer_for(new_model).encoding_name != tokenizer_for(session.model).encoding_name:
        recount_tokens(fork)  # the copied counts are the other encoding's
    return fork


def _tools(session: AgentSession, model: str) -> dict[str, Any]:
    """The tool definitions, with their counts as stored when the encoding is the same."""
    if tokenizer_for(model).encoding_name == tokenizer_for(session.model).encoding_name:
        return {
            "tool_definitions": session.tool_definitions,
            "tool_tokens": session.tool_tokens,
            "tool_encoding": session.tool_encoding,
        }
    return tool_fields(session.tool_definitions or [], model)


_MESSAGE_FIELDS = (
    "seq",
    "kind",
    "payload",
    "tokens",
    "encoding",
    "tokens_exact",
    "facts",
    "reported_input_tokens",
    "content_hash",
    "source",
)


def _copy_messages(session: AgentSession, fork: AgentSession, seq: int) -> set[str]:
    """Copy the log up to ``seq``; the evicted-output references its messages can reach."""
    refs: set[str] = set()
    rows = session.messages.filter(seq__lte=seq).order_by("seq").values(*_MESSAGE_FIELDS)
    batch: list[Message] = []
    for row in rows.iterator(chunk_size=BATCH):
        refs |= _output_refs(row["payload"])
        batch.append(Message(session=fork, **row))
        if len(batch) == BATCH:
            Message.objects.bulk_create(batch)
            batch = []
    if batch:
        Message.objects.bulk_create(batch)
    keep_log_counts(fork)
    _copy_pieces(session, fork, seq)
    return refs


def _copy_pieces(session: AgentSession, fork: AgentSession, seq: int) -> None:
    """Copy the searchable pieces of the copied messages (``recall`` searches the fork's)."""
    rows = session.pieces.filter(seq__lte=seq).values(*_PIECE_FIELDS)
    batch: list[MessagePiece] = []
    for row in rows.iterator(chunk_size=BATCH):
        batch.append(MessagePiece(session=fork, **row))
        if len(batch) == BATCH:
            MessagePiece.objects.bulk_create(batch)
            batch = []
    MessagePiece.objects.bulk_create(batch)


_PIECE_FIELDS = ("seq", "part", "offset", "kind", "tool_name", "text")


_COMPACTION_FIELDS = ("actor_id", *Compaction.CONTENT_FIELDS)


def _copy_records(session: AgentSession, fork: AgentSession, seq: int) -> set[str]:
    """Copy the active records over the log up to ``seq``; the evicted-output references they
    quote.

    Each kind is copied in the order it was made (one insert, ids ascending): where records
    compete (the newest clear, the newest of overlapping compactions), the fork's history picks
    the one the original's did.
    """
    refs: set[str] = set()
    active = {"session": session, "undone_at__isnull": True}
    compactions = [
        c
        for c in Compaction.objects.filter(**active, last_seq__lte=seq).order_by("created_at", "id")
        if max(_covered(c)) <= seq
    ]
    copies = Compaction.objects.bulk_create(
        [
            Compaction(session=fork, **{f: getattr(c, f) for f in _COMPACTION_FIELDS})
            for c in compactions
        ]
    )
    new_id = {c.pk: copy.pk for c, copy in zip(compactions, copies, strict=True)}
    for original, copy in zip(compactions, copies, strict=True):
        refs |= set(
            _QUOTED_REF.findall(
                json.dumps([original.replacement, original.ledger, original.summary])
            )
        )
        # A compaction supersedes an older one, so the copy it points at exists by now; set in
        # the transaction that made the copy (the only write a copied record ever gets).
        if original.supersedes_id in new_id:
            Compaction.objects.filter(pk=copy.pk).update(
                supersedes_id=new_id[original.supersedes_id]
            )
    Clear.objects.bulk_create(
        Clear(session=fork, actor_id=c.actor_id, from_seq=c.from_seq)
        for c in Clear.objects.filter(**active, from_seq__lte=seq).order_by("created_at", "id")
    )
    Pin.objects.bulk_create(
        Pin(session=fork, actor_id=p.actor_id, seq=p.seq)
        for p in Pin.objects.filter(**active, seq__lte=seq).order_by("created_at", "id")
    )
    return refs


def _copy_evicted(session: AgentSession, fork: AgentSession, refs: set[str]) -> None:
    if not refs:
        return
    EvictedOutput.objects.bulk_create(
        EvictedOutput(session=fork, ref=e.ref, text=e.text, tokens=e.tokens)
        for e in EvictedOutput.objects.filter(session=session, ref__in=refs).order_by("id")
    )
