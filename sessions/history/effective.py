"""The effective history built from the log, its records and the messages' stored facts; a
process carries it over from one request to the next (``sessions.history`` says how)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet, Subquery, Sum, TextField
from django.db.models.functions import Cast

from ctxhub.governance import Governor, Policy
from ctxhub.governance.facts import MessageFacts, message_facts
from ctxhub.governance.tokens import Tokenizer, tokenizer_for
from sessions.history.lazy import LazyMessages, Source
from sessions.history.memory import Remembered
from sessions.models import AgentSession, Clear, Compaction, Message, Pin
from sessions.payloads import message_from_payload

GOVERNORS_KEPT = 4
"""Governors kept per history: the session's own, and a few previews."""


@dataclass(frozen=True, slots=True)
class RecordState:
    """The records that shape the effective history, at one revision of the session."""

    revision: int
    from_seq: int
    clear_id: int | None
    compactions: tuple[AppliedCompaction, ...]
    """Applied compactions, in log order (non-overlapping)."""
    pins: tuple[int, ...]
    """Seqs of the active pins, ascending (a pin is a record: it moves the revision too)."""


@dataclass(frozen=True, slots=True)
class AppliedCompaction:
    id: int
    first_seq: int
    last_seq: int
    replacement: tuple[dict[str, Any], ...]


@dataclass
class EffectiveHistory:
    """The list the engine governs for a session, with where each position comes from."""

    session_id: Any
    encoding: str
    state: RecordState
    last_seq: int
    """The newest seq of the log (-1 for an empty log)."""
    sources: list[Source]
    facts: list[MessageFacts]
    messages: LazyMessages
    inline: dict[int, dict[str, Any]]
    tokens: int
    """Tokens of the effective history (instructions not included)."""
    evicted_refs: set[str] = field(default_factory=set)
    """References of evicted outputs known to be stored (shared as the history grows)."""
    governors: dict[tuple[str, str], Governor] = field(default_factory=dict)
    """The Governors of this history, by policy and model (shared as the history grows, so
    each call pays only for the new messages; a history rebuilt after a record changed starts
    with none)."""

    _positions: dict[int, int] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.sources)

    def position_of(self, seq: int) -> int | None:
        """The position of a log message in the effective history; None if it is not shown."""
        if self._positions is None:
            self._positions = {s.seq: p for p, s in enumerate(self.sources) if s.seq is not None}
        return self._positions.get(seq)

    def seq_at(self, position: int) -> int | None:
        return self.sources[position].seq

    def governor(self, policy: Policy, model: str) -> Governor:
        """The Governor of this history under ``policy`` and ``model`` (a few are kept: a
        preview of another policy or model must not evict the session's own)."""
        key = (policy.model_dump_json(), model)
        governor = self.governors.pop(key, None)
        if governor is None:
            governor = Governor(policy, model=model)
        self.governors[key] = governor  # the most recent last
        while len(self.governors) > GOVERNORS_KEPT:
            del self.governors[next(iter(self.governors))]
        return governor

    def positions(self, seqs: Sequence[int]) -> frozenset[int]:
        """Positions of those of ``seqs`` the effective history shows."""
        found = (self.position_of(s) for s in seqs)
        return frozenset(p for p in found if p is not None)


def record_state(session: AgentSession, revision: int | None = None) -> RecordState:
    """The active clear and applied compactions of a session."""
    if revision is None:
        revision = AgentSession.objects.values_list("revision", flat=True).get(pk=session.pk)
    clear = (
        Clear.objects.filter(session=session, undone_at__isnull=True)
        .order_by("-created_at", "-id")
        .values_list("id", "from_seq")
        .first()
    )
    from_seq = clear[1] if clear else 0
    rows = (
        Compaction.objects.filter(session=session, undone_at__isnull=True, last_seq__gte=from_seq)
        .order_by("-created_at", "-id")
        .values_list("id", "first_seq", "last_seq", "replacement")
    )
    applied: list[AppliedCompaction] = []
    for pk, first, last, replacement in rows:
        # The newest compaction wins where ranges overlap: it was made over the older one's
        # summary. One that began before the clear is hidden by the clear.
        if first < from_seq or any(first <= a.last_seq and a.first_seq <= last for a in applied):
            continue
        applied.append(AppliedCompaction(pk, first, last, tuple(replacement)))
    applied.sort(key=lambda a: a.first_seq)
    pins = tuple(pinned_seqs(session))
    return RecordState(revision, from_seq, clear[0] if clear else None, tuple(applied), pins)


def _facts(data: Any, encoding: str, wanted: str) -> MessageFacts | None:
    if data is None or encoding != wanted:
        return None
    try:
        return MessageFacts.from_json(data)
    except ValueError:
        return None


def _refresh_facts(
    session_id: Any, seqs: list[int], tokenizer: Tokenizer
) -> dict[int, MessageFacts]:
    """Facts of messages stored without them (or for another encoding), computed and cached."""
    refreshed: dict[int, MessageFacts] = {}
    rows = Message.objects.filter(session_id=session_id, seq__in=seqs).only("pk", "seq", "payload")
    with transaction.atomic():
        for row in rows:
            facts = message_facts(row.message, tokenizer)
            refreshed[row.seq] = facts
            Message.objects.filter(pk=row.pk).update(
                facts=facts.to_json(),
                tokens=facts.tokens,
                encoding=tokenizer.encoding_name,
                tokens_exact=tokenizer.exact,
            )
    return refreshed


def _visible(session_id: Any, state: RecordState, after_seq: int) -> QuerySet[Message]:
    """The log messages after ``after_seq`` the records leave visible."""
    first = max(after_seq + 1, state.from_seq)
    rows = Message.objects.filter(session_id=session_id, seq__gte=first)
    hidden = Q()
    kept: list[int] = []
    for compaction in state.compactions:
        if compaction.last_seq > after_seq:
            hidden |= Q(seq__gte=compaction.first_seq, seq__lte=compaction.last_seq)
            kept += [item["seq"] for item in compaction.replacement if "seq" in item]
    return rows.filter(~hidden | Q(seq__in=kept)) if hidden else rows


def _log_rows(
    session_id: Any,
    state: RecordState,
    after_seq: int,
    tokenizer: Tokenizer,
    *,
    payloads: dict[int, str] | None = None,
) -> list[tuple[int, MessageFacts]]:
    """(seq, facts) of the log messages after ``after_seq`` the records leave visible.
    ``payloads``: also read their raw payloads into it, in the same query (for the few
    messages appended since a history was built: the engine reads each of them)."""
    rows = _visible(session_id, state, after_seq).order_by("seq")
    if payloads is None:
        found = list(rows.values_list("seq", "facts", "encoding"))
    else:
        with_raw = rows.annotate(raw=Cast("payload", output_field=TextField()))
        found = []
        for seq, data, encoding, raw in with_raw.values_list("seq", "facts", "encoding", "raw"):
            found.append((seq, data, encoding))
            payloads[seq] = raw
    wanted = tokenizer.encoding_name
    parsed = [(seq, _facts(data, encoding, wanted)) for seq, data, encoding in found]
    stale = [seq for seq, facts in parsed if facts is None]
    refreshed = _refresh_facts(session_id, stale, tokenizer) if stale else {}
    return [(seq, facts if facts is not None else refreshed[seq]) for seq, facts in parsed]


def _compaction_items(
    compaction: AppliedCompaction, log: dict[int, MessageFacts], tokenizer: Tokenizer
) -> Iterator[tuple[Source, MessageFacts, dict[str, Any] | None]]:
    for item in compaction.replacement:
        if "seq" in item:
            seq = item["seq"]
            if seq in log:
                yield Source(seq, compaction.id), log[seq], None
            continue
        payload = item["message"]
        facts = _facts(item.get("facts"), item.get("encoding", ""), tokenizer.encoding_name)
        if facts is None:
            facts = message_facts(message_from_payload(payload), tokenizer)
        yield Source(None, compaction.id), facts, payload


def _build(
    session_id: Any,
    encoding: str,
    state: RecordState,
    rows: list[tuple[int, MessageFacts]],
    tokenizer: Tokenizer,
    base: EffectiveHistory | None,
    payloads: dict[int, str] | None = None,
) -> EffectiveHistory:
    """The effective history from log rows (after ``base``, when extending it, with the new
    rows' ``payloads`` if they were read)."""
    if base is not None:
        sources, facts, inline = list(base.sources), list(base.facts), dict(base.inline)
        tokens, last_seq = base.tokens, base.last_seq
    else:
        sources, facts, inline, tokens, last_seq = [], [], {}, 0, -1
    log = dict(rows)
    seqs = [seq for seq, _ in rows]
    # Log messages and compaction replacements, merged in seq order. A history extended by
    # appends has no compaction after its end: compactions only cover messages already stored.
    at = 0
    pending = [c for c in state.compactions if c.first_seq > last_seq]
    for compaction in pending:
        while at < len(seqs) and seqs[at] < compaction.first_seq:
            sources.append(Source(seqs[at]))
            facts.append(log[seqs[at]])
            at += 1
        for source, fact, payload in _compaction_items(compaction, log, tokenizer):
            if payload is not None:
                inline[len(sources)] = payload
            sources.append(source)
            facts.append(fact)
        at = bisect_left(seqs, compaction.last_seq + 1)
    for seq in seqs[at:]:
        sources.append(Source(seq))
        facts.append(log[seq])
    new = facts[len(base.facts) if base is not None else 0 :]
    tokens += sum(f.tokens for f in new)
    if seqs:
        last_seq = max(last_seq, seqs[-1])
    messages = (
        base.messages.extended(sources, inline, payloads or {})
        if base is not None
        else LazyMessages(session_id, sources, inline)
    )
    return EffectiveHistory(
        session_id,
        encoding,
        state,
        last_seq,
        sources,
        facts,
        messages,
        inline,
        tokens,
        base.evicted_refs if base is not None else set(),
        base.governors if base is not None else {},
    )


REMEMBERED: Remembered[EffectiveHistory] = Remembered()
"""The effective histories this process built last (see ``sessions.history``)."""


def log_heads(session: AgentSession) -> tuple[int, int]:
    """The session's records revision and the newest seq of its log, in one query."""
    newest = Message.objects.filter(session_id=session.pk).order_by("-seq").values("seq")[:1]
    revision, last = (
        AgentSession.objects.filter(pk=session.pk)
        .annotate(last=Subquery(newest))
        .values_list("revision", "last")
        .get()
    )
    return revision, -1 if last is None else last


def effective_history(session: AgentSession, *, upto_seq: int | None = None) -> EffectiveHistory:
    """The effective history of a session now (or as it was up to ``upto_seq``, if given)."""
    tokenizer = tokenizer_for(session.model)
    encoding = tokenizer.encoding_name
    revision, last_seq = log_heads(session)
    if upto_seq is not None:
        state = record_state(session, revision)
        rows = [r for r in _log_rows(session.pk, state, -1, tokenizer) if r[0] <= upto_seq]
        return _build(session.pk, encoding, state, rows, tokenizer, None)
    key = session.pk
    known = REMEMBERED.get(key)
    if (
        known is not None
        and known.encoding == encoding
        and known.state.revision == revision
        and known.last_seq <= last_seq
    ):
        if known.last_seq == last_seq:
            return known
        payloads: dict[int, str] = {}
        rows = _log_rows(session.pk, known.state, known.last_seq, tokenizer, payloads=payloads)
        history = _build(session.pk, encoding, known.state, rows, tokenizer, known, payloads)
    else:
        state = record_state(session, revision)
        rows = _log_rows(session.pk, state, -1, tokenizer)
        history = _build(session.pk, encoding, state, rows, tokenizer, None)
    # Inside a transaction the state read may never commit: only committed states are shared.
    if not connection.in_atomic_block:
        REMEMBERED.put(key, history)
    return history


def effective_tokens(session: AgentSession) -> int:
    """Tokens of the effective history, without building it: this process's count if it holds
    the history as it is, else one sum over the stored counts (cheap enough for every append)."""
    revision, last_seq = log_heads(session)
    known = REMEMBERED.get(session.pk)
    if known is not None and (known.state.revision, known.last_seq) == (revision, last_seq):
        return known.tokens
    state = record_state(session, revision)
    stored = _visible(session.pk, state, -1).aggregate(total=Sum("tokens"))["total"] or 0
    written = sum(
        int(item["facts"]["tokens"])
        for compaction in state.compactions
        for item in compaction.replacement
        if "message" in item
    )
    return int(stored) + written


def is_remembered(session: AgentSession) -> bool:
    """Whether this process holds an effective history of the session it could carry over."""
    known = REMEMBERED.get(session.pk)
    return known is not None and known.encoding == tokenizer_for(session.model).encoding_name


def pinned_seqs(session: AgentSession) -> list[int]:
    """The seqs of a session's active pins."""
    return list(
        Pin.objects.filter(session=session, undone_at__isnull=True)
        .order_by("seq")
        .values_list("seq", flat=True)
    )
