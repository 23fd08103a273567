"""A reference ``ContextReport``: built message by message from the message objects themselves,
with none of the engine's shortcuts (facts for part kinds, cached reports, stretches reported in
bulk, the masked results counted from facts). A governed report must equal it."""

from __future__ import annotations

from typing import Any

from provider_rules import provider_violations
from pydantic_ai.messages import ModelMessage

from ctxhub.governance import Governed
from ctxhub.governance._work import Work
from ctxhub.governance.counting import message_facts
from ctxhub.governance.names import StepName
from ctxhub.governance.parts import PartState
from ctxhub.governance.report import ContextReport, MessageReport, PartReport


def reference_report(governed: Governed, inputs: list[ModelMessage]) -> dict[str, Any]:
    """``governed.report.model_dump()`` as the straightforward algorithm builds it.

    The governed history it reports on must be one a provider accepts, whatever governance
    dropped after pair repair (window, iteration groups).
    """
    problems = provider_violations(governed.messages)
    assert not problems, problems
    work: Work = governed._work
    normalized = governed._normalized
    tally: dict[StepName, list[int]] = {}

    # A late result pair repair moved is the input's own part object in a message that did not
    # hold it (synthetic results are new objects): reported "moved" where it went, with its
    # tokens, and where it came from, with none. A move loses no token.
    input_parts = {id(p) for message in inputs for p in message.parts}

    def arrived(position: int) -> set[int]:
        index = work.index[position]
        own = {id(p) for p in inputs[index].parts} if index is not None else set()
        return {
            number
            for number, p in enumerate(work.base[position].parts)
            if id(p) in input_parts and id(p) not in own
        }

    moved = {
        id(work.base[position].parts[number])
        for position in range(len(work.index))
        for number in arrived(position)
    }

    def add(step: StepName | None, before: int, after: int) -> None:
        if step is not None:
            totals = tally.setdefault(step, [0, 0])
            totals[0] += 1
            totals[1] += before - after

    def part(p: Any, action: Any, before: int, after: int, ref: str | None = None) -> PartReport:
        return PartReport(
            part_kind=p.part_kind,
            tool_name=getattr(p, "tool_name", None),
            action=action,
            tokens_before=before,
            tokens_after=after,
            ref=ref,
        )

    def state_report(p: Any, state: PartState, kept: bool, drop: StepName | None) -> PartReport:
        if not kept:
            add(drop, state.tokens_before, 0)
            return part(p, "dropped", state.tokens_before, 0)
        add(state.step, state.tokens_before, state.tokens_after)
        return part(p, state.action, state.tokens_before, state.tokens_after, state.ref)

    def moved_report(
        p: Any, count: int, state: PartState, kept: bool, drop: StepName | None
    ) -> PartReport:
        if not kept:
            add(drop, count, 0)
            return part(p, "dropped", count, 0)
        if state.action == "synthesized":  # no step after pair repair changed it
            add("normalize", count, count)
            return part(p, "moved", count, count)
        add(state.step, count, state.tokens_after)
        return part(p, state.action, count, state.tokens_after, state.ref)

    def removed_report(p: Any, count: int) -> PartReport:
        if id(p) in moved:
            return part(p, "moved", count, 0)
        add("normalize", count, 0)
        return part(p, "dropped", count, 0)

    def zone(position: int) -> Any:
        if position in work.pinned_positions:
            return "pinned"
        if position <= work.head_end:
            return "head"
        if position >= work.tail_start:
            return "tail"
        return "middle"

    def message_report(position: int, message: ModelMessage, input_index: int | None) -> Any:
        kept = bool(work.kept[position])
        states = work.states_of(position)
        drop = work.dropped_by.get(position)
        by_origin = {s.origin: s for s in states if s.origin is not None}
        removed = normalized.removed.get(input_index, ()) if input_index is not None else ()
        parts = []
        if input_index is not None:
            for number, p in enumerate(message.parts):
                count = message_facts(message, work.tokenizer).part_tokens[number]
                if number in removed:
                    parts.append(removed_report(p, count))
                else:
                    parts.append(state_report(p, by_origin[number], kept, drop))
        here = work.base[position]
        came = arrived(position)
        for number, (state, p) in enumerate(zip(states, here.parts, strict=True)):
            if state.origin is None:
                if number in came:
                    count = message_facts(here, work.tokenizer).part_tokens[number]
                    parts.append(moved_report(p, count, state, kept, drop))
                else:
                    parts.append(state_report(p, state, kept, drop))
        before = message_facts(message, work.tokenizer).tokens if input_index is not None else 0
        return MessageReport(
            index=work.index[position],
            kind=message.kind,
            zone=zone(position),
            kept=kept,
            tokens_before=before,
            tokens_after=work.tokens[position] if kept else 0,
            parts=parts,
        )

    reports: list[MessageReport] = []
    positions_of = {i: p for p, i in enumerate(work.index) if i is not None}
    notice_at = None
    for index, message in enumerate(inputs):
        position = positions_of.get(index)
        if position is None:
            counts = message_facts(message, work.tokenizer).part_tokens
            parts = [removed_report(p, t) for p, t in zip(message.parts, counts, strict=True)]
            reports.append(
                MessageReport(
                    index=index,
                    kind=message.kind,
                    zone="middle",
                    kept=False,
                    tokens_before=message_facts(message, work.tokenizer).tokens,
                    tokens_after=0,
                    parts=parts,
                )
            )
            continue
        if position == work.notice_before:
            notice_at = len(reports)
        reports.append(message_report(position, message, index))
        following = position + 1
        while following < len(work.index) and work.index[following] is None:
            if following == work.notice_before:
                notice_at = len(reports)
            reports.append(message_report(following, work.base[following], None))
            following += 1
    if work.notice is not None:
        tokens = message_facts(work.notice, work.tokenizer).tokens
        add("window", 0, -tokens)
        reports.insert(
            len(reports) if notice_at is None else notice_at,
            MessageReport(
                index=None,
                kind="request",
                zone="middle",
                kept=True,
                tokens_before=0,
                tokens_after=tokens,
                parts=[part(work.notice.parts[0], "synthesized", 0, tokens)],
            ),
        )
    report = governed.report
    steps = []
    for step in report.steps:
        totals = tally.get(step.step, [0, 0])
        detail = step.detail
        if step.step == "mask":
            detail = f"{_masked_count(work)} results masked"
        steps.append(
            step.model_copy(
                update={"parts": totals[0], "tokens_removed": totals[1], "detail": detail}
            )
        )
    expected = ContextReport.model_validate(
        {**report.model_dump(), "steps": steps, "messages": reports}
    )
    return expected.model_dump()


def _masked_count(work: Work) -> int:
    span = work.mask_span
    if span is None:
        return 0
    return sum(len(work.masked_at(p) or ()) for p in range(span[0], span[2] + 1))
