"""The effective history built from the log, its records and the messages' stored facts; a
process carries it over from one request to the next (``sessions.history`` says how).

After a clear the history holds, in order: the message the clear keeps (the system prompt and
instructions of the log before it, see ``kept_message``), the pinned messages from before it
that can be sent as they are (``standing``), and the log from the clear on, with its
compactions.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet, Sum, TextField
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast
from pydantic_core import from_json

from ctxhub.governance import Governor, Policy
from ctxhub.governance.counting import MARK
from ctxhub.governance.facts import FACTS_VERSION, MessageFacts, message_facts
from ctxhub.governance.tokens import Tokenizer, tokenizer_for
from sessions.history.lazy import LazyMessages, Source
from sessions.history.memory import Remembered
from sessions.models import AgentSession, Clear, Compaction, Message, MessageKind, Pin
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
    kept_pins: tuple[int, ...] = ()
    """Seqs of the pinned messages before the active clear that stay (``standing``)."""


@dataclass(frozen=True, slots=True)
class AppliedCompaction:
    id: int
    first_seq: int
    last_seq: int
    replacement: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Kept:
    """The message a clear keeps, at ``position`` of the effective history."""

    clear: int
    position: int
    system_parts: int
    """How many system prompt parts it carries."""
    system_tokens: int
    instructions: bool
    """Whether it carries instructions (the latest request's before the clear)."""
    instructions_tokens: int

    @property
    def tokens(self) -> int:
        """What it adds to the request: its system prompt parts and instructions."""
        return self.system_tokens + self.instructions_tokens


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
    kept: Kept | None = None
    """The message the active clear keeps, if it keeps any."""

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
        """Positions of those of ``seqs`` the effective history shows (the pins), and that of
        the message a clear kept: it is held as a pin is, so the system prompt and instructions
        a clear keeps survive verbatim (a compaction never summarises them, a window never
        drops them)."""
        found = (self.position_of(s) for s in seqs)
        pinned = {p for p in found if p is not None}
        if self.kept is not None:
            pinned.add(self.kept.position)
        return frozenset(pinned)


def record_state(
    session: AgentSession, revision: int | None = None, *, as_of: datetime | None = None
) -> RecordState:
    """The active clear and applied compactions of a session (``as_of``: those that were
    active then, for a request sent then)."""
    if revision is None:
        revision = AgentSession.objects.values_list("revision", flat=True).get(pk=session.pk)
    active = _active(as_of)
    clear = (
        Clear.objects.filter(active, session=session)
        .order_by("-created_at", "-id")
        .values_list("id", "from_seq")
        .first()
    )
    from_seq = clear[1] if clear else 0
    rows = (
        Compaction.objects.filter(active, session=session, last_seq__gte=from_seq)
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
    pins = tuple(pinned_seqs(session, as_of=as_of))
    before = [seq for seq in pins if seq < from_seq]
    kept_pins = standing(session, before) if before else ()
    return RecordState(
        revision, from_seq, clear[0] if clear else None, tuple(applied), pins, kept_pins
    )


def standing(session: AgentSession, seqs: Sequence[int]) -> tuple[int, ...]:
    """Those of the pinned ``seqs`` before a clear that stay after it: every one that can be
    sent as it is without what the clear hides. A tool call is sent with its results, so a
    pinned response with tool calls stays only with the request holding exactly their results
    pinned right after it, and that request only with it; a message with neither stays."""
    tool_ids: dict[int, tuple[frozenset[str], frozenset[str]]] = {}
    rows = (
        Message.objects.filter(session=session, seq__in=seqs).order_by().values_list("seq", "facts")
    )
    for seq, data in rows:
        try:
            facts = MessageFacts.from_json(data)
        except ValueError:  # stored without facts, or another version's: read the message
            row = Message.objects.only("payload").get(session=session, seq=seq)
            facts = message_facts(row.message, tokenizer_for(session.model))
        tool_ids[seq] = frozenset(facts.call_ids), frozenset(facts.result_ids)
    kept: list[int] = []
    for seq in seqs:
        calls, results = tool_ids[seq]
        if calls and tool_ids.get(seq + 1, (None, None))[1] != calls:
            continue
        if results and tool_ids.get(seq - 1, (None, None))[0] != results:
            continue
        kept.append(seq)
    return tuple(kept)


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
    """The log messages after ``after_seq`` the records leave visible: from the active clear
    on, and the pinned ones before it."""
    first = max(after_seq + 1, state.from_seq)
    shown = Q(seq__gte=first)
    pinned = [seq for seq in state.kept_pins if seq > after_seq]
    if pinned:
        shown |= Q(seq__in=pinned)
    rows = Message.objects.filter(shown, session_id=session_id)
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
    # The facts as text, decoded in one pass: JSON decoded row by row costs more than the rest
    # of building a long history.
    rows = (
        _visible(session_id, state, after_seq)
        .order_by("seq")
        .annotate(facts_text=Cast("facts", output_field=TextField()))
    )
    if payloads is None:
        found = list(rows.values_list("seq", "facts_text", "encoding"))
    else:
        with_raw = rows.annotate(raw=Cast("payload", output_field=TextField()))
        found = []
        for seq, text, encoding, raw in with_raw.values_list(
            "seq", "facts_text", "encoding", "raw"
        ):
            found.append((seq, text, encoding))
            payloads[seq] = raw
    wanted = tokenizer.encoding_name
    decoded = from_json("[" + ",".join(text or "null" for _, text, _ in found) + "]")
    parsed = [
        (seq, _facts(data, encoding, wanted))
        for (seq, _, encoding), data in zip(found, decoded, strict=True)
    ]
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


# --- what a clear keeps ----------------------------------------------------------------------

SYSTEM_PROMPT = "system-prompt"

# Rows whose stored facts cannot say what they hold (none stored, or another version's): their
# payloads are read instead.
_UNTRUSTED = Q(facts__isnull=True) | ~Q(facts__v=FACTS_VERSION)


def _prompt(part: dict[str, Any]) -> tuple[str, str] | None:
    """Which prompt a system prompt part states, when it can be stated again with another
    value: the ``<pyai:context>`` element it is sent as, else its dynamic prompt's ref."""
    if part.get("context_id"):
        return ("context", str(part["context_id"]))
    if part.get("dynamic_ref"):
        return ("dynamic", str(part["dynamic_ref"]))
    return None


def _lasting(parts: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The system prompt parts among ``parts`` the model sees for the rest of the conversation
    (a request-scoped one is seen only in its own request)."""
    return [
        p
        for p in parts
        if p.get("part_kind") == SYSTEM_PROMPT and p.get("scope", "conversation") != "request"
    ]


def kept_parts(
    before: Iterable[dict[str, Any]], elsewhere: Iterable[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """The system prompt parts a clear keeps, as stored (JSON), in log order.

    ``before``: the parts of the log before the clear, in order. Of those, a request-scoped
    part is not kept (the model saw it only in its own request); a prompt stated several times
    (one ``context_id``, or one ``dynamic_ref``) is kept once, with its latest value, where it
    was first stated, and not at all if that value is empty (it was withdrawn); a text stated
    several times is kept once, where it first was. ``elsewhere``: the parts the effective
    history carries in other messages (a pinned one, or one stored after the clear: an agent
    that sends its system prompt again): what they state is not kept twice.
    """
    kept: list[dict[str, Any]] = []
    at: dict[tuple[str, str], int] = {}
    for part in _lasting(before):
        key = _prompt(part) or ("text", str(part.get("content", "")))
        if key in at:
            if key[0] != "text":
                kept[at[key]] = part
            continue
        at[key] = len(kept)
        kept.append(part)
    later = _lasting(elsewhere)
    stated = {_prompt(p) for p in later} - {None}
    texts = {str(p.get("content", "")) for p in later}
    out: list[dict[str, Any]] = []
    for part in kept:
        text = str(part.get("content", ""))
        if text and text not in texts and _prompt(part) not in stated:
            texts.add(text)
            out.append(part)
    return out


def _parts_of(rows: QuerySet[Message]) -> list[dict[str, Any]]:
    """The parts (JSON) of the requests among ``rows`` that hold system prompt parts, in log
    order: only those rows are read, and of each only its parts."""
    found = (
        rows.filter(Q(facts__system_tokens__gt=0) | _UNTRUSTED, kind=MessageKind.REQUEST)
        .order_by("seq")
        .values_list(KeyTransform("parts", "payload"), flat=True)
    )
    return [part for parts in found if isinstance(parts, list) for part in parts]


def _latest_instructions(rows: QuerySet[Message]) -> str | None:
    """The instructions of the latest request among ``rows`` that carried some. Found from the
    stored facts: only that request's instructions are read from its payload (and those of any
    newer request whose facts cannot say)."""
    requests = rows.filter(kind=MessageKind.REQUEST)
    said = (
        requests.filter(facts__instructions=True)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    unsure = requests.filter(_UNTRUSTED)
    if said is not None:
        unsure = unsure.filter(seq__gt=said)
    seqs = list(unsure.order_by("-seq").values_list("seq", flat=True))
    if said is not None:
        seqs.append(said)
    if not seqs:
        return None
    text = KeyTextTransform("instructions", "payload")
    found = dict(requests.filter(seq__in=seqs).order_by().values_list("seq", text))
    return next((found[seq] for seq in seqs if found.get(seq) is not None), None)


def _written(state: RecordState) -> Iterator[dict[str, Any]]:
    """The payloads of the messages the applied compactions wrote."""
    for compaction in state.compactions:
        for item in compaction.replacement:
            if "message" in item:
                yield item["message"]


def kept_message(
    session_id: Any, state: RecordState, tokenizer: Tokenizer, *, upto_seq: int | None = None
) -> tuple[dict[str, Any], MessageFacts, Kept] | None:
    """The message the active clear keeps (its payload, facts and figures), if it keeps any.

    It is a request carrying the system prompt parts of the log before the clear (see
    ``kept_parts``) and the instructions of the latest request before it that carried some,
    less what the effective history carries anyway: a part stated again by a pinned message or
    one stored after the clear, and instructions once a later message carries its own (the
    latest request's instructions are what a model is sent). None when nothing is left to
    keep, or no clear is active. The messages after ``upto_seq`` are not looked at.

    Planned from the stored facts: only the few requests that hold system prompt parts are
    read, and of each only its parts; of the requests with instructions, only the latest's.
    """
    if state.clear_id is None:
        return None
    before = Message.objects.filter(session_id=session_id, seq__lt=state.from_seq)
    shown = _visible(session_id, state, -1)
    if upto_seq is not None:
        shown = shown.filter(seq__lte=upto_seq)
    written = list(_written(state))
    elsewhere = _parts_of(shown) + [p for m in written for p in m.get("parts", [])]
    parts = kept_parts(_parts_of(before), elsewhere)
    instructions = _latest_instructions(before)
    if instructions is not None and (
        _latest_instructions(shown) is not None
        or any(m.get("instructions") is not None for m in written)
    ):
        instructions = None
    if not parts and instructions is None:
        return None
    payload: dict[str, Any] = {
        "kind": "request",
        "parts": parts,
        "instructions": instructions,
        "metadata": {MARK: {"clear": state.clear_id}},
    }
    facts = message_facts(message_from_payload(payload), tokenizer)
    kept = Kept(
        clear=state.clear_id,
        position=0,
        system_parts=len(parts),
        system_tokens=facts.system_tokens,
        instructions=instructions is not None,
        instructions_tokens=tokenizer.count(instructions) if instructions else 0,
    )
    return payload, facts, kept


def _unsettles(
    known: EffectiveHistory, rows: list[tuple[int, MessageFacts]], payloads: dict[int, str]
) -> bool:
    """Whether messages appended to ``known`` (``rows``, their raw ``payloads``) state again
    what its clear kept (a system prompt part, or instructions of their own): the history is
    then built afresh, without the kept copy."""
    kept = known.kept
    if kept is None:
        return False
    held = known.inline[kept.position]["parts"]
    for seq, facts in rows:
        if kept.instructions and facts.instructions:
            return True
        if kept.system_parts and facts.system_tokens:
            parts = json.loads(payloads[seq]).get("parts", [])
            if kept_parts(held, parts) != held:
                return True
    return False


def _build(
    session_id: Any,
    encoding: str,
    state: RecordState,
    rows: list[tuple[int, MessageFacts]],
    tokenizer: Tokenizer,
    base: EffectiveHistory | None,
    payloads: dict[int, str] | None = None,
    *,
    upto_seq: int | None = None,
) -> EffectiveHistory:
    """The effective history from log rows (after ``base``, when extending it, with the new
    rows' ``payloads`` if they were read; up to ``upto_seq``, when the rows stop there)."""
    kept: Kept | None = None
    if base is not None:
        sources, facts, inline = list(base.sources), list(base.facts), dict(base.inline)
        tokens, last_seq, kept = base.tokens, base.last_seq, base.kept
    else:
        sources, facts, inline, tokens, last_seq = [], [], {}, 0, -1
        found = kept_message(session_id, state, tokenizer, upto_seq=upto_seq)
        if found is not None:
            kept_payload, fact, kept = found
            inline[0] = kept_payload
            sources.append(Source(None, clear=state.clear_id))
            facts.append(fact)
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
    if base is None and state.clear_id is not None:
        # The log reaches the clear even when nothing after it shows yet: a history extended
        # later must not read the messages before it again.
        last_seq = max(last_seq, state.from_seq - 1)
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
        kept,
    )


REMEMBERED: Remembered[EffectiveHistory] = Remembered()
"""The effective histories this process built last (see ``sessions.history``)."""


def log_heads(session: AgentSession) -> tuple[int, int]:
    """The session's records revision and the newest seq of its log (-1: none), as its row
    holds them now."""
    revision, messages = AgentSession.objects.values_list("revision", "log_messages").get(
        pk=session.pk
    )
    return revision, messages - 1


def effective_history(
    session: AgentSession, *, upto_seq: int | None = None, as_of: datetime | None = None
) -> EffectiveHistory:
    """The effective history of a session now, or as it was up to ``upto_seq`` (with the
    records as they were ``as_of``, if given)."""
    tokenizer = tokenizer_for(session.model)
    encoding = tokenizer.encoding_name
    revision, last_seq = log_heads(session)
    if upto_seq is not None:
        state = record_state(session, revision, as_of=as_of)
        rows = [r for r in _log_rows(session.pk, state, -1, tokenizer) if r[0] <= upto_seq]
        return _build(session.pk, encoding, state, rows, tokenizer, None, upto_seq=upto_seq)
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
        if _unsettles(known, rows, payloads):
            rows = _log_rows(session.pk, known.state, -1, tokenizer)
            history = _build(session.pk, encoding, known.state, rows, tokenizer, None)
        else:
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
    kept = kept_message(session.pk, state, tokenizer_for(session.model))
    return int(stored) + written + (kept[1].tokens if kept is not None else 0)


def is_remembered(session: AgentSession) -> bool:
    """Whether this process holds an effective history of the session it could carry over."""
    known = REMEMBERED.get(session.pk)
    return known is not None and known.encoding == tokenizer_for(session.model).encoding_name


def pinned_seqs(session: AgentSession, *, as_of: datetime | None = None) -> list[int]:
    """The seqs of a session's active pins (``as_of``: those active then)."""
    return list(
        Pin.objects.filter(_active(as_of), session=session)
        .order_by("seq")
        .values_list("seq", flat=True)
    )


def _active(as_of: datetime | None) -> Q:
    """Records active now, or at ``as_of``: made by then and not undone by then."""
    if as_of is None:
        return Q(undone_at__isnull=True)
    return Q(created_at__lte=as_of) & (Q(undone_at__isnull=True) | Q(undone_at__gt=as_of))
