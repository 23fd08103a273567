"""How one ``govern`` call builds its ContextReport from its working state.

It is built from the messages' facts and the working state alone (no message is read: a caller
passing stored facts never loads the messages governance dropped), and mostly from reports
built by earlier calls: a growing history's messages keep their report call after call, and
the long run the window drops is taken from them in bulk.
"""

from __future__ import annotations

from bisect import bisect_right
from contextlib import suppress
from operator import is_
from typing import TYPE_CHECKING, Any

from .facts import MessageFacts, message_facts
from .message_reports import (
    PairRepair,
    Tally,
    dropped_input,
    message_report,
    part_report,
    plain_report,
    zone_of,
)
from .names import Detail, StepName, Zone
from .report import ContextReport, MessageReport, PartTotals, RepairedEntry, ReportCache, StepReport

if TYPE_CHECKING:
    from ._work import Work
    from .parts import Transform
    from .steps.repaired import Normalized


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
    tally = Tally()
    with cache.lock:
        reports, notice_at, note_at = _message_reports(
            work, normalized, input_facts, cache, totals, tally
        )
    added: list[tuple[int, int, MessageReport]] = []
    if work.notice is not None:
        notice = message_facts(work.notice, work.tokenizer)
        tally.add("window", 0, -notice.tokens)
        at = len(reports) if notice_at is None else notice_at
        added.append((at, 0, _added_report(notice, "middle")))
    if work.note_message is not None:
        note = message_facts(work.note_message, work.tokenizer)
        at = len(reports) if note_at is None else note_at
        # Written where the conversation stands (the tail), and kept there until the next
        # action, which does not move the tail before it.
        added.append((at, 1, _added_report(note, "tail")))
    # The later first, so each goes where it was found; the notice before the note at one place.
    for at, _, report in sorted(added, key=lambda item: (item[0], item[1]), reverse=True):
        reports.insert(at, report)
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
        budget_note=summary.get("budget_note"),
    )


def _added_report(facts: MessageFacts, zone: Zone) -> MessageReport:
    """The report of a message governance added to the request (the window's notice, the
    budget note): one part, synthesized."""
    return MessageReport(
        index=None,
        kind="request",
        zone=zone,
        kept=True,
        tokens_before=0,
        tokens_after=facts.tokens,
        parts=[part_report(facts.part_kinds[0], None, "synthesized", 0, facts.tokens)],
    )


def _message_reports(
    work: Work,
    normalized: Normalized,
    input_facts: list[MessageFacts],
    cache: ReportCache,
    totals: PartTotals,
    tally: Tally,
) -> tuple[list[MessageReport], int | None, int | None]:
    """Every input message's report in input order, each message pair repair added after the
    one before it; and where the window notice and the budget note go among them.

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
    note_at: int | None = None
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
            -1 if work.note_before is None else work.note_before,
        }
    )
    repaired: dict[int, RepairedEntry] = {}
    moved_away = _moved_away(normalized)

    def repair_at(position: int, index: int | None) -> PairRepair:
        moved_here = normalized.moved.get(position)
        if index is None:
            return PairRepair(moved_here=frozenset(moved_here or ()))
        return PairRepair(
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
                reports.append(dropped_input(dropped, input_facts, moved_away, tally))
                next_dropped += 1
        if position == work.notice_before:
            notice_at = len(reports)
        if position == work.note_before:
            note_at = len(reports)
        if position in states:
            # Parts the last-resort shrink cut: reported from their states.
            fact = input_facts[index] if index is not None else None
            reports.append(message_report(work, position, fact, tally, repair_at(position, index)))
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
        reports.append(dropped_input(index, input_facts, moved_away, tally))
    # Only the repaired messages of this call are remembered: the others are gone for good.
    cache.repaired = repaired
    return reports, notice_at, note_at


def _window_dropped(
    stretch: list[MessageFacts], first: int, cache: ReportCache, reports: list[MessageReport]
) -> None:
    """Report a stretch of messages the window dropped, input indices from ``first`` on."""
    last = first + len(stretch)
    known = cache.window_facts
    if not all(map(is_, known[first:last], stretch)):
        for index, fact in enumerate(stretch, first):
            if known[index] is not fact:
                cache.window_reports[index] = plain_report(index, fact, "middle", False, None, 0)
                known[index] = fact
    reports.extend(cache.window_reports[first:last])  # type: ignore[arg-type]


def _kept_stretch(
    work: Work,
    start: int,
    end: int,
    first: int,
    cache: ReportCache,
    reports: list[MessageReport],
    tally: Tally,
) -> None:
    """Report a stretch of kept messages in one zone, input indices from ``first`` on."""
    last = first + end - start
    stretch = work.facts[start:end]
    fate = (zone_of(work, start), True)
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
    tally: Tally,
) -> None:
    """Report a message dropped other than by the window (an iteration group)."""
    fact = work.facts[position]
    tally.add(work.dropped_by[position], sum(fact.part_tokens), 0, len(fact.part_tokens))
    _remember(cache, index, fact, (zone_of(work, position), False), None, 0)
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
    cache.reports[index] = plain_report(index, fact, fate[0], fate[1], changed, after)
    cache.facts[index] = fact
    cache.fates[index] = fate
    cache.changes[index] = changed
    cache.after[index] = after


def _repaired_report(
    work: Work,
    position: int,
    fact: MessageFacts | None,
    repair: PairRepair,
    cache: ReportCache,
    repaired: dict[int, RepairedEntry],
    tally: Tally,
) -> MessageReport:
    """The report of a message pair repair rebuilt (``fact`` its input's facts) or added
    (``fact`` None), reused from the previous call when built from the same."""
    facts = work.facts[position]
    kept = bool(work.kept[position])
    changed = (work.changes[position] or None) if kept else None
    key = (
        work.index[position],
        zone_of(work, position),
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
        own = Tally()
        report = message_report(work, position, fact, own, repair)
        added = own.totals
    repaired[id(facts)] = (facts, fact, changed, key, report, added)
    for step, (parts, tokens) in added.items():
        tally.add(step, tokens, 0, parts)
    return report
