"""The report of one message: built from its facts and what the steps did to its parts."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from .facts import MessageFacts
from .names import StepName, Zone
from .report import MessageReport, PartReport

if TYPE_CHECKING:
    from ._work import Work
    from .parts import PartState, Transform


class Tally:
    """Parts touched and tokens removed, per step."""

    def __init__(self) -> None:
        self.totals: dict[StepName, list[int]] = {}

    def add(self, step: StepName | None, before: int, after: int, parts: int = 1) -> None:
        if step is not None:
            totals = self.totals.setdefault(step, [0, 0])
            totals[0] += parts
            totals[1] += before - after


@dataclass(frozen=True, slots=True)
class PairRepair:
    """What pair repair did to the parts of one position."""

    removed: tuple[int, ...] = ()
    """Input part indices it took out of the input message there."""
    moved_away: frozenset[int] = frozenset()
    """Those of them it moved to the request after their call."""
    moved_here: frozenset[int] = frozenset()
    """Part numbers of the late results it moved into this position."""


def zone_of(work: Work, position: int) -> Zone:
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
def part_report(
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


def plain_report(
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
        part_report(kind, names[number], action, count, count if kept else 0)
        for number, (kind, count) in enumerate(zip(fact.part_kinds, fact.part_tokens, strict=True))
    ]
    for number, transform in changed or ():
        parts[number] = part_report(
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


def dropped_input(
    index: int,
    input_facts: list[MessageFacts],
    moved_away: dict[int, frozenset[int]],
    tally: Tally,
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


def message_report(
    work: Work,
    position: int,
    fact: MessageFacts | None,
    tally: Tally,
    repair: PairRepair,
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
        zone=zone_of(work, position),
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
    tally: Tally,
) -> PartReport:
    if not kept:
        tally.add(drop_step, state.tokens_before, 0)
        return part_report(kind, tool_name, "dropped", state.tokens_before, 0)
    tally.add(state.step, state.tokens_before, state.tokens_after)
    return part_report(
        kind, tool_name, state.action, state.tokens_before, state.tokens_after, state.ref
    )


def _removed_part(
    kind: str, tool_name: str | None, tokens: int, moved: bool, tally: Tally
) -> PartReport:
    """A part pair repair took out of an input message: moved to the request after its call
    (its tokens are counted there), or dropped (an orphan or a duplicate: a loss)."""
    if moved:
        return part_report(kind, tool_name, "moved", tokens, 0)
    tally.add("normalize", tokens, 0)
    return part_report(kind, tool_name, "dropped", tokens, 0)


def _moved_here(
    kind: str,
    tool_name: str | None,
    tokens: int,
    state: PartState,
    kept: bool,
    drop_step: StepName | None,
    tally: Tally,
) -> PartReport:
    """A late result where pair repair moved it: its own tokens, the output the tool gave.

    Its state is that of a part governance added (nothing before it here); the tokens it
    brought are its own, so a later step's change or drop is measured from them.
    """
    if not kept:
        tally.add(drop_step, tokens, 0)
        return part_report(kind, tool_name, "dropped", tokens, 0)
    if state.action == "synthesized":
        # The working state marks every part repair put in as synthesized; this one no later
        # step changed: moved as it is, a part changed and no token lost.
        tally.add("normalize", tokens, tokens)
        return part_report(kind, tool_name, "moved", tokens, tokens)
    tally.add(state.step, tokens, state.tokens_after)
    return part_report(kind, tool_name, state.action, tokens, state.tokens_after, state.ref)
