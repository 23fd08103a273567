"""ContextReport: what governance did to a history, in a shape the dashboard and API draw as is;
and how one ``govern`` call builds it from its working state.

The report says what happened to every message and part, so on a 20,000-message history it
holds 20,000 message reports. It is built from the messages' facts and the working state
alone (no message is read: a caller passing stored facts never loads the messages governance
dropped), and mostly from reports built by earlier calls: a growing history's messages keep
their report call after call, and the long run the window drops is taken from them in bulk.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from functools import lru_cache
from operator import is_
from threading import Lock
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from .counting import MessageFacts, message_facts
from .names import Action, Detail, StepName, Zone

if TYPE_CHECKING:
    from ._work import Work
    from .parts import PartState, Transform
    from .steps.normalize import Normalized


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class PartReport(_Model):
    """One part of a message: what happened to it and its tokens before and after."""

    part_kind: str
    tool_name: str | None = None
    action: Action
    tokens_before: int
    tokens_after: int
    ref: str | None = None
    """The eviction reference, when the part was evicted."""


class MessageReport(_Model):
    """One message: its input index (None for a message governance added), zone and parts."""

    index: int | None
    kind: Literal["request", "response"]
    zone: Zone
    kept: bool
    tokens_before: int
    tokens_after: int
    parts: list[PartReport]


class StepReport(_Model):
    """One step that ran: how many parts it changed and the tokens that removed."""

    step: StepName
    parts: int
    tokens_removed: int
    detail: str = ""


class ContextReport(_Model):
    """The budget, the tokens before and after, and the fate of every message and part.

    ``budget_tokens`` is what the history may take: the window minus system prompt and
    instructions, tool definitions, reserved output and the safety margin, optionally capped.
    ``tokens_before`` and ``tokens_after`` count everything sent (system prompt and
    instructions included), so ``tokens_after == count_tokens(governed.messages)``; the history
    fits when ``tokens_after - system_tokens <= budget_tokens``.
    """

    model: str | None
    encoding: str
    exact: bool
    window_tokens: int
    system_tokens: int
    tool_definition_tokens: int
    reserved_output_tokens: int
    safety_margin_tokens: int
    history_cap_tokens: int | None
    budget_tokens: int
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    fits: bool
    reason: str | None = None
    steps: list[StepReport]
    messages: list[MessageReport]
    evicted_refs: list[str]

    @property
    def history_tokens_after(self) -> int:
        """Tokens of the governed history, system prompt and instructions excluded."""
        return self.tokens_after - self.system_tokens


# --- building the report of one govern call --------------------------------------------------


RepairedEntry = tuple[
    MessageFacts,
    MessageFacts | None,
    Any,
    tuple[Any, ...],
    MessageReport,
    dict[StepName, list[int]],
]
"""A repaired message's facts and its input's, its changes, the rest of what its report was
built from, the report, and what it adds to each step's tally."""


@dataclass
class ReportCache:
    """Message reports of earlier calls on one growing history, by input index.

    A message pair repair left as it is has a report decided by its facts, its zone, whether
    it was kept, its changes (caps and masks) and its tokens after; the same facts object at an
    index means the same message. The window's cut moves back and forth from one call to the
    next, so a message's report as dropped by the window is kept apart from its other one.
    Lists rather than dicts, so a stretch of messages is checked and taken in a few C-level
    passes. Calls on one history may build their reports in several threads at once: ``lock``
    keeps each entry's columns consistent.
    """

    lock: Lock = field(default_factory=Lock, repr=False)

    window_facts: list[MessageFacts | None] = field(default_factory=list)
    window_reports: list[MessageReport | None] = field(default_factory=list)
    """Each message's report as dropped by the window (zone middle), from these facts."""
    facts: list[MessageFacts | None] = field(default_factory=list)
    fates: list[tuple[Zone, bool] | None] = field(default_factory=list)
    changes: list[Any] = field(default_factory=list)
    after: array[int] = field(default_factory=lambda: array("q"))
    reports: list[MessageReport | None] = field(default_factory=list)
    """Each message's other latest report, from these facts, zone and kept flag, changes and
    tokens after."""
    repaired: dict[int, RepairedEntry] = field(default_factory=dict)
    """By the identity of its facts, the last report of each message pair repair rebuilt or
    added, with what it was built from and what it adds to the tally."""

    def grow(self, size: int) -> None:
        """Make room for a history of ``size`` messages."""
        missing = size - len(self.facts)
        if missing > 0:
            for column in (
                self.window_facts,
                self.window_reports,
                self.facts,
                self.fates,
                self.changes,
                self.reports,
            ):
                column.extend([None] * missing)
            self.after.extend(array("q", (-1,)) * missing)


@dataclass(frozen=True)
class PartTotals:
    """Parts and their tokens in the messages before each input index (prefix sums), so the
    window's dropped stretches are tallied in constant time each."""

    parts: array[int] = field(default_factory=lambda: array("q", (0,)))
    tokens: array[int] = field(default_factory=lambda: array("q", (0,)))

    def extended(
        self, facts: Sequence[MessageFacts], counted: int, *, in_place: bool
    ) -> PartTotals:
        """The totals of ``facts``, whose first ``counted`` messages are the ones these count.

        ``in_place`` appends to these arrays (for the one history that takes them over, see
        ``govern._take``): every holder reads them at indices up to its own length, which
        appending leaves alone. Otherwise the first ``counted`` are copied (another history
        may have appended to them meanwhile); machine-integer arrays copy as memory.
        """
        if in_place:
            totals = self
        else:
            totals = PartTotals(self.parts[: counted + 1], self.tokens[: counted + 1])
        parts, tokens = totals.parts, totals.tokens
        for fact in facts[counted:]:
            parts.append(parts[-1] + len(fact.part_tokens))
            tokens.append(tokens[-1] + sum(fact.part_tokens))
        return totals


class _Tally:
    """Parts touched and tokens removed, per step."""

    def __init__(self) -> None:
        self.totals: dict[StepName, list[int]] = {}

    def add(self, step: StepName | None, before: int, after: int, parts: int = 1) -> None:
        if step is not None:
            totals = self.totals.setdefault(step, [0, 0])
            totals[0] += parts
            totals[1] += before - after


@dataclass(frozen=True, slots=True)
class _PairRepair:
    """What pair repair did to the parts of one position."""

    removed: tuple[int, ...] = ()
    """Input part indices it took out of the input message there."""
    moved_away: frozenset[int] = frozenset()
    """Those of them it moved to the request after their call."""
    moved_here: frozenset[int] = frozenset()
    """Part numbers of the late results it moved into this position."""


def _moved_away(normalized: Normalized) -> dict[int, frozenset[int]]:
    """Input index -> indices of its parts pair repair moved to the request after their call."""
    found: dict[int, set[int]] = {}
    for sources in normalized.moved.values():
        for index, part in sources.values():
            found.setdefault(index, set()).add(part)
    return {index: frozenset(parts) for index, parts in found.items()}


def build_report(
    work: Work,
    normalized: Normalized,
    input_facts: list[MessageFacts],
    steps: list[tuple[StepName, Detail]],
    summary: dict[str, Any],
    messages_after: int,
    evicted: dict[str, str],
    cache: ReportCache,
    totals: PartTotals,
) -> ContextReport:
    """The report of a finished ``govern`` call; ``cache`` is reused and updated."""
    tally = _Tally()
    with cache.lock:
        reports, notice_at = _message_reports(work, normalized, input_facts, cache, totals, tally)
    if work.notice is not None:
        notice = message_facts(work.notice, work.tokenizer)
        tally.add("window", 0, -notice.tokens)
        reports.insert(
            len(reports) if notice_at is None else notice_at,
            MessageReport(
                index=None,
                kind="request",
                zone="middle",
                kept=True,
                tokens_before=0,
                tokens_after=notice.tokens,
                parts=[_part(notice.part_kinds[0], None, "synthesized", 0, notice.tokens)],
            ),
        )
    step_reports = [
        StepReport(
            step=name,
            parts=tally.totals.get(name, [0, 0])[0],
            tokens_removed=tally.totals.get(name, [0, 0])[1],
            detail=detail if isinstance(detail, str) else detail(),
        )
        for name, detail in steps
    ]
    return ContextReport(
        model=summary["model"],
        encoding=work.tokenizer.encoding_name,
        exact=work.tokenizer.exact,
        window_tokens=summary["window_tokens"],
        system_tokens=summary["system_tokens"],
        tool_definition_tokens=summary["tool_definition_tokens"],
        reserved_output_tokens=work.policy.reserved_output_tokens,
        safety_margin_tokens=summary["safety_margin_tokens"],
        history_cap_tokens=work.policy.history_cap_tokens or None,
        budget_tokens=summary["budget_tokens"],
        tokens_before=summary["tokens_before"],
        tokens_after=summary["tokens_after"],
        messages_before=len(input_facts),
        messages_after=messages_after,
        fits=summary["fits"],
        reason=summary["reason"],
        steps=step_reports,
        messages=reports,
        evicted_refs=sorted(evicted),
    )


def _message_reports(
    work: Work,
    normalized: Normalized,
    input_facts: list[MessageFacts],
    cache: ReportCache,
    totals: PartTotals,
    tally: _Tally,
) -> tuple[list[MessageReport], int | None]:
    """Every input message's report in input order, each message pair repair added after the
    one before it; and where the window notice goes among them.

    Positions are taken in stretches that share a fate: kept in one zone, or dropped by the
    window (only the window drops messages between the head and the tail; groups are dropped
    in the current turn, at or after the tail; neither drops a pinned message). A stretch ends
    where pair repair or the last-resort shrink changed a message, at a pinned message, at a
    zone's edge, where the notice goes and where a run of input messages ends (an input left
    out may come next); those positions are reported one by one.
    """
    cache.grow(len(input_facts))
    reports: list[MessageReport] = []
    kept, index_of = work.kept, work.index
    origins, states, pinned = work.origins, work.states, work.pinned_positions
    # Inputs pair repair emptied and left out (in input order), reported where they were.
    dropped_inputs = normalized.dropped
    next_dropped = 0
    notice_at: int | None = None
    middle_start, middle_end = work.head_end + 1, work.tail_start
    breaks = sorted(
        {
            *origins,
            *states,
            *pinned,
            *(run[1] for run in normalized.runs or ()),
            middle_start,
            middle_end,
            -1 if work.notice_before is None else work.notice_before,
        }
    )
    repaired: dict[int, RepairedEntry] = {}
    moved_away = _moved_away(normalized)

    def repair_at(position: int, index: int | None) -> _PairRepair:
        moved_here = normalized.moved.get(position)
        if index is None:
            return _PairRepair(moved_here=frozenset(moved_here or ()))
        return _PairRepair(
            tuple(normalized.removed.get(index, ())),
            moved_away.get(index, frozenset()),
            frozenset(moved_here or ()),
        )

    position, size = 0, len(index_of)
    while position < size:
        index = index_of[position]
        if index is not None:
            while next_dropped < len(dropped_inputs) and dropped_inputs[next_dropped] < index:
                dropped = dropped_inputs[next_dropped]
                reports.append(_dropped_input(dropped, input_facts, moved_away, tally))
                next_dropped += 1
        if position == work.notice_before:
            notice_at = len(reports)
        if position in states:
            # Parts the last-resort shrink cut: reported from their states.
            fact = input_facts[index] if index is not None else None
            reports.append(_message_report(work, position, fact, tally, repair_at(position, index)))
            position += 1
            continue
        if index is None or position in origins:
            fact = input_facts[index] if index is not None else None
            repair = repair_at(position, index)
            reports.append(_repaired_report(work, position, fact, repair, cache, repaired, tally))
            position += 1
            continue
        if position in pinned:
            end = position + 1
        else:
            at = bisect_right(breaks, position)
            end = breaks[at] if at < len(breaks) and breaks[at] < size else size
        if kept[position]:
            with suppress(ValueError):
                end = kept.index(False, position, end)
            _kept_stretch(work, position, end, index, cache, reports, tally)
        elif middle_start <= position < middle_end and position not in pinned:
            with suppress(ValueError):
                end = kept.index(True, position, end)
            _window_dropped(work.facts[position:end], index, cache, reports)
            first, last = index, index + end - position
            parts = totals.parts[last] - totals.parts[first]
            tally.add("window", totals.tokens[last] - totals.tokens[first], 0, parts)
        else:
            end = position + 1
            _dropped(work, position, index, cache, reports, tally)
        position = end
    for index in dropped_inputs[next_dropped:]:
        reports.append(_dropped_input(index, input_facts, moved_away, tally))
    # Only the repaired messages of this call are remembered: the others are gone for good.
    cache.repaired = repaired
    return reports, notice_at


def _window_dropped(
    stretch: list[MessageFacts], first: int, cache: ReportCache, reports: list[MessageReport]
) -> None:
    """Report a stretch of messages the window dropped, input indices from ``first`` on."""
    last = first + len(stretch)
    known = cache.window_facts
    if not all(map(is_, known[first:last], stretch)):
        for index, fact in enumerate(stretch, first):
            if known[index] is not fact:
                cache.window_reports[index] = _plain_report(index, fact, "middle", False, None, 0)
                known[index] = fact
    reports.extend(cache.window_reports[first:last])  # type: ignore[arg-type]


def _kept_stretch(
    work: Work,
    start: int,
    end: int,
    first: int,
    cache: ReportCache,
    reports: list[MessageReport],
    tally: _Tally,
) -> None:
    """Report a stretch of kept messages in one zone, input indices from ``first`` on."""
    last = first + end - start
    stretch = work.facts[start:end]
    fate = (_zone(work, start), True)
    # A position governed as it is records its changes as ().
    changes = [changed or None for changed in work.changes[start:end]]
    after = work.tokens[start:end]
    for fact, changed in zip(stretch, changes, strict=True):
        for number, transform in changed or ():
            tally.add(transform.step, fact.part_tokens[number], transform.tokens)
    if not (
        all(map(is_, cache.facts[first:last], stretch))
        and cache.fates[first:last].count(fate) == end - start
        and cache.after[first:last] == after
        and all(map(is_, cache.changes[first:last], changes))
    ):
        for offset, (fact, changed, tokens) in enumerate(zip(stretch, changes, after, strict=True)):
            _remember(cache, first + offset, fact, fate, changed, tokens)
    reports.extend(cache.reports[first:last])  # type: ignore[arg-type]


def _dropped(
    work: Work,
    position: int,
    index: int,
    cache: ReportCache,
    reports: list[MessageReport],
    tally: _Tally,
) -> None:
    """Report a message dropped other than by the window (an iteration group)."""
    fact = work.facts[position]
    tally.add(work.dropped_by[position], sum(fact.part_tokens), 0, len(fact.part_tokens))
    _remember(cache, index, fact, (_zone(work, position), False), None, 0)
    reports.append(cache.reports[index])  # type: ignore[arg-type]


def _remember(
    cache: ReportCache,
    index: int,
    fact: MessageFacts,
    fate: tuple[Zone, bool],
    changed: tuple[tuple[int, Transform], ...] | None,
    after: int,
) -> None:
    """Build the report at an index unless the cached one was built for the same."""
    if (
        cache.facts[index] is fact
        and cache.fates[index] == fate
        and cache.changes[index] is changed
        and cache.after[index] == after
    ):
        return
    cache.reports[index] = _plain_report(index, fact, fate[0], fate[1], changed, after)
    cache.facts[index] = fact
    cache.fates[index] = fate
    cache.changes[index] = changed
    cache.after[index] = after


def _repaired_report(
    work: Work,
    position: int,
    fact: MessageFacts | None,
    repair: _PairRepair,
    cache: ReportCache,
    repaired: dict[int, RepairedEntry],
    tally: _Tally,
) -> MessageReport:
    """The report of a message pair repair rebuilt (``fact`` its input's facts) or added
    (``fact`` None), reused from the previous call when built from the same."""
    facts = work.facts[position]
    kept = bool(work.kept[position])
    changed = (work.changes[position] or None) if kept else None
    key = (
        work.index[position],
        _zone(work, position),
        kept,
        work.tokens[position] if kept else 0,
        None if kept else work.dropped_by.get(position),
        tuple(work.origins.get(position, ())),
        repair,
    )
    entry = cache.repaired.get(id(facts))
    if (
        entry is not None
        and entry[0] is facts
        and entry[1] is fact
        and entry[2] is changed
        and entry[3] == key
    ):
        report, added = entry[4], entry[5]
    else:
        own = _Tally()
        report = _message_report(work, position, fact, own, repair)
        added = own.totals
    repaired[id(facts)] = (facts, fact, changed, key, report, added)
    for step, (parts, tokens) in added.items():
        tally.add(step, tokens, 0, parts)
    return report


def _zone(work: Work, position: int) -> Zone:
    if position in work.pinned_positions:
        return "pinned"
    if position <= work.head_end:
        return "head"
    if position >= work.tail_start:
        return "tail"
    return "middle"


# Part reports are frozen values and most recur (the same kind, tool and tokens, dropped or
# kept), in one report and from call to call: one object serves every message that has it.
@lru_cache(maxsize=1 << 16)
def _part(
    kind: str, tool_name: str | None, action: Any, before: int, after: int, ref: str | None = None
) -> PartReport:
    return PartReport(
        part_kind=kind,
        tool_name=tool_name,
        action=action,
        tokens_before=before,
        tokens_after=after,
        ref=ref,
    )


def _kind(fact: MessageFacts) -> Literal["request", "response"]:
    return "request" if fact.request else "response"


def _plain_report(
    index: int,
    fact: MessageFacts,
    zone: Zone,
    kept: bool,
    changed: tuple[tuple[int, Transform], ...] | None,
    tokens_after: int,
) -> MessageReport:
    """The report of an input message kept as it is, changed by caps and masks, or dropped."""
    names = fact.part_tool_names
    action = "kept" if kept else "dropped"
    parts = [
        _part(kind, names[number], action, count, count if kept else 0)
        for number, (kind, count) in enumerate(zip(fact.part_kinds, fact.part_tokens, strict=True))
    ]
    for number, transform in changed or ():
        parts[number] = _part(
            fact.part_kinds[number],
            names[number],
            transform.action,
            fact.part_tokens[number],
            transform.tokens,
            transform.ref,
        )
    return MessageReport(
        index=index,
        kind=_kind(fact),
        zone=zone,
        kept=kept,
        tokens_before=fact.tokens,
        tokens_after=tokens_after,
        parts=parts,
    )


def _dropped_input(
    index: int,
    input_facts: list[MessageFacts],
    moved_away: dict[int, frozenset[int]],
    tally: _Tally,
) -> MessageReport:
    """The report of an input message pair repair emptied (of orphans, or of late results it
    moved) and left out."""
    fact = input_facts[index]
    moved = moved_away.get(index, frozenset())
    parts = []
    for number, (kind, name, count) in enumerate(
        zip(fact.part_kinds, fact.part_tool_names, fact.part_tokens, strict=True)
    ):
        parts.append(_removed_part(kind, name, count, number in moved, tally))
    return MessageReport(
        index=index,
        kind=_kind(fact),
        zone="middle",
        kept=False,
        tokens_before=fact.tokens,
        tokens_after=0,
        parts=parts,
    )


def _message_report(
    work: Work,
    position: int,
    fact: MessageFacts | None,
    tally: _Tally,
    repair: _PairRepair,
) -> MessageReport:
    """One input message pair repair changed (``fact`` given) or one it added (``fact`` None),
    or one the last-resort shrink changed."""
    kept = bool(work.kept[position])
    states = work.states_of(position)
    drop_step = work.dropped_by.get(position)
    by_origin = {s.origin: s for s in states if s.origin is not None}
    repaired = work.facts[position]
    parts: list[PartReport] = []
    if fact is not None:
        for number, (kind, name, count) in enumerate(
            zip(fact.part_kinds, fact.part_tool_names, fact.part_tokens, strict=True)
        ):
            if number in repair.removed:
                moved = number in repair.moved_away
                parts.append(_removed_part(kind, name, count, moved, tally))
                continue
            parts.append(_state_report(kind, name, by_origin[number], kept, drop_step, tally))
    for number, state in enumerate(states):
        if state.origin is None:
            kind, name = repaired.part_kinds[number], repaired.part_tool_names[number]
            if number in repair.moved_here:
                count = repaired.part_tokens[number]
                parts.append(_moved_here(kind, name, count, state, kept, drop_step, tally))
            else:
                parts.append(_state_report(kind, name, state, kept, drop_step, tally))
    return MessageReport(
        index=work.index[position],
        kind=_kind(fact or repaired),
        zone=_zone(work, position),
        kept=kept,
        tokens_before=fact.tokens if fact is not None else 0,
        tokens_after=work.tokens[position] if kept else 0,
        parts=parts,
    )


def _state_report(
    kind: str,
    tool_name: str | None,
    state: PartState,
    kept: bool,
    drop_step: StepName | None,
    tally: _Tally,
) -> PartReport:
    if not kept:
        tally.add(drop_step, state.tokens_before, 0)
        return _part(kind, tool_name, "dropped", state.tokens_before, 0)
    tally.add(state.step, state.tokens_before, state.tokens_after)
    return _part(kind, tool_name, state.action, state.tokens_before, state.tokens_after, state.ref)


def _removed_part(
    kind: str, tool_name: str | None, tokens: int, moved: bool, tally: _Tally
) -> PartReport:
    """A part pair repair took out of an input message: moved to the request after its call
    (its tokens are counted there), or dropped (an orphan or a duplicate: a loss)."""
    if moved:
        return _part(kind, tool_name, "moved", tokens, 0)
    tally.add("normalize", tokens, 0)
    return _part(kind, tool_name, "dropped", tokens, 0)


def _moved_here(
    kind: str,
    tool_name: str | None,
    tokens: int,
    state: PartState,
    kept: bool,
    drop_step: StepName | None,
    tally: _Tally,
) -> PartReport:
    """A late result where pair repair moved it: its own tokens, the output the tool gave.

    Its state is that of a part governance added (nothing before it here); the tokens it
    brought are its own, so a later step's change or drop is measured from them.
    """
    if not kept:
        tally.add(drop_step, tokens, 0)
        return _part(kind, tool_name, "dropped", tokens, 0)
    if state.action == "synthesized":
        # The working state marks every part repair put in as synthesized; this one no later
        # step changed: moved as it is, a part changed and no token lost.
        tally.add("normalize", tokens, tokens)
        return _part(kind, tool_name, "moved", tokens, tokens)
    tally.add(state.step, tokens, state.tokens_after)
    return _part(kind, tool_name, state.action, tokens, state.tokens_after, state.ref)
