"""A reference ``ContextReport``: built message by message from what a caller holds — the input
messages, their pair repair as providers must receive them, and the governed request — with
none of the engine's shortcuts (facts for part kinds, cached reports, stretches reported in
bulk, the masked results counted from facts). A governed report must equal it.

What each part became is read from the request itself: a part sent as it was is kept, one
governance rewrote carries its note (evicted, masked, a reference to a repeated output) or,
without one, was truncated; tokens after are counted on what is sent. Where the head ends, where
the window's cut put the tail and which results masking replaced are read from the state of the
Governor that governed the request (``Governor.state()``), when the caller gives it.

What governance decided and nothing given shows is taken from the report and checked: which
messages are sent (they must be the request's, in order), where the head ends and the tail
starts without a state (every zone must follow from those two and the pins), how many results
masking replaced without a state and a policy (at least those replaced in the request, at most
those and every result left out or too small to replace), and, when both ran, how the truncated
parts divide between the caps and the last-resort shrink (together they must account for every
truncated part and its tokens).
"""

from __future__ import annotations

from typing import Any

from provider_rules import provider_violations
from pydantic_ai.messages import ModelMessage, ModelRequest

from ctxhub.governance import (
    ContextReport,
    Governed,
    MessageReport,
    PartReport,
    Policy,
)
from ctxhub.governance.counting import MARK
from ctxhub.governance.facts import is_budget_note, message_facts, window_notice
from ctxhub.governance.steps.normalize import normalize
from ctxhub.governance.tokens import tokenizer_for

TRUNCATED = "truncated by a cap or the shrink"
"""The tally of truncated parts: a part does not say which step cut it."""


def reference_report(
    governed: Governed,
    inputs: list[ModelMessage],
    *,
    pinned: frozenset[int] | None = None,
    state: dict[str, Any] | None = None,
    policy: Policy | None = None,
) -> dict[str, Any]:
    """``governed.report.model_dump()`` as the straightforward algorithm builds it.

    ``pinned`` (input indices) are the pins the request was governed with; without them, the
    messages the report says are pinned are taken as pinned (and must be sent as they were).
    ``state`` is that of the Governor whose first request ``governed`` is, and ``policy`` its
    policy. The governed history must be one a provider accepts, whatever governance dropped
    after pair repair (window, iteration groups).
    """
    problems = provider_violations(governed.messages)
    assert not problems, problems
    report = governed.report
    tokenizer = tokenizer_for(report.model)
    assert (tokenizer.encoding_name, tokenizer.exact) == (report.encoding, report.exact)
    facts = [message_facts(message, tokenizer) for message in inputs]
    # Pair repair as providers must receive the history: position -> input index (None for a
    # message it added) and the repaired message.
    repaired = normalize(inputs, facts, tokenizer, (policy or Policy()).dangling_call_text)
    index = list(repaired.index)
    base = [repaired.messages[position] for position in range(len(index))]
    size = len(index)
    positions_of = {i: p for p, i in enumerate(index) if i is not None}

    # The report's entries in input order, each message pair repair added after the one
    # before it (the window notice aside).
    order: list[tuple[int | None, int | None]] = []
    for i in range(len(inputs)):
        position = positions_of.get(i)
        order.append((i, position))
        if position is not None:
            following = position + 1
            while following < size and index[following] is None:
                order.append((None, following))
                following += 1
    entries = [entry for entry in report.messages if not _is_notice_entry(entry)]
    assert [entry.index for entry in entries] == [i for i, _ in order]
    decided = {p: entry for entry, (_, p) in zip(entries, order, strict=True) if p is not None}

    # The messages sent: the kept positions in order, and the notice and the budget note of
    # this request.
    sent = governed.messages
    repaired_ids = {id(message) for message in base}
    notices = [
        k
        for k, message in enumerate(sent)
        if window_notice(message) is not None and id(message) not in repaired_ids
    ]
    assert len(notices) <= 1, notices
    notice_k = notices[0] if notices else None
    notes = [
        k
        for k, message in enumerate(sent)
        if is_budget_note(message) and id(message) not in repaired_ids
    ]
    assert len(notes) <= 1, notes
    note_k = notes[0] if notes else None
    assert (note_k is not None) == (report.budget_note is not None)
    added = {k for k in (notice_k, note_k) if k is not None}
    kept_positions = [p for p in range(size) if decided[p].kept]
    sent_kept = [message for k, message in enumerate(sent) if k not in added]
    assert len(kept_positions) == len(sent_kept), (kept_positions, len(sent_kept))
    out = dict(zip(kept_positions, sent_kept, strict=True))
    for position, message in out.items():
        assert _same_shape(base[position], message), (position, base[position], message)

    # Zones: the pins, and the head and the tail as the report draws them.
    if pinned is not None:
        pins = {p for p, i in enumerate(index) if i is not None and i in pinned}
    else:
        pins = {p for p, entry in decided.items() if entry.zone == "pinned"}
    for position in pins:
        assert position in out, position
        assert out[position] == base[position], position
    zones = {p: entry.zone for p, entry in decided.items() if p not in pins}
    head_end = max((p for p, z in zones.items() if z == "head"), default=-1)
    tail_start = min((p for p, z in zones.items() if z == "tail"), default=size)
    plan = state["plan"] if state is not None else None
    if plan is not None:
        # The Governor's first request: its plan is that request's (see ``Plan``).
        assert state is not None
        assert state["size"] == len(inputs)
        head_end = plan["head_end"]
        if plan["cut"] is not None:
            tail_start = plan["cut"]

    def zone(position: int) -> Any:
        if position in pins:
            return "pinned"
        if position <= head_end:
            return "head"
        if position >= tail_start:
            return "tail"
        return "middle"

    # Only the window drops between the head and the tail; iteration groups go from the tail.
    def drop_step(position: int) -> str:
        return "window" if head_end < position < tail_start else "drop_groups"

    tally: dict[str, list[int]] = {}

    def add(step: str | None, before: int, after: int) -> None:
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

    # A late result pair repair moved is the input's own part object in a message that did not
    # hold it (synthetic results are new objects): reported "moved" where it went, with its
    # tokens, and where it came from, with none. A move loses no token.
    input_parts = {id(p) for message in inputs for p in message.parts}

    def own_number(position: int, p: Any) -> int | None:
        i = index[position]
        if i is None:
            return None
        return next((n for n, q in enumerate(inputs[i].parts) if q is p), None)

    moved = {
        id(p)
        for position in range(size)
        for p in base[position].parts
        if id(p) in input_parts and own_number(position, p) is None
    }
    evicted_refs: list[str] = []
    masked_sent = 0
    maskable_unmasked = 0

    def removed_report(p: Any, count: int) -> PartReport:
        if id(p) in moved:
            return part(p, "moved", count, 0)
        add("normalize", count, 0)
        return part(p, "dropped", count, 0)

    def part_report(position: int, number: int) -> PartReport:
        nonlocal masked_sent, maskable_unmasked
        p = base[position].parts[number]
        origin = own_number(position, p)
        count = message_facts(base[position], tokenizer).part_tokens[number]
        if origin is not None:
            before = facts[index[position]].part_tokens[origin]  # type: ignore[index]
        elif id(p) in input_parts:
            before = count  # moved here: its own tokens
        else:
            before = 0  # synthesized: nothing was there
        maskable = number in message_facts(base[position], tokenizer).maskable
        if position not in out:
            maskable_unmasked += maskable
            add(drop_step(position), before, 0)
            return part(p, "dropped", before, 0)
        sent_message = out[position]
        now = sent_message.parts[number]
        after = message_facts(sent_message, tokenizer).part_tokens[number]
        if now is p or now == p:
            maskable_unmasked += maskable
            if origin is not None:
                assert before == after
                return part(p, "kept", before, after)
            if id(p) in input_parts:
                add("normalize", before, after)
                return part(p, "moved", before, after)
            add("normalize", before, after)
            return part(p, "synthesized", before, after)
        action, step, ref = _rewritten(now)
        if ref is not None:
            evicted_refs.append(ref)
        masked_sent += action == "masked" and now.part_kind == "tool-return"
        add(step, before, after)
        return part(p, action, before, after, ref)

    def message_report(position: int) -> MessageReport:
        i = index[position]
        message = base[position]
        parts = []
        if i is not None:
            here = {id(p): n for n, p in enumerate(message.parts)}
            counts = facts[i].part_tokens
            for p, count in zip(inputs[i].parts, counts, strict=True):
                number = here.get(id(p))
                if number is None:
                    parts.append(removed_report(p, count))
                else:
                    parts.append(part_report(position, number))
        for number, p in enumerate(message.parts):
            if own_number(position, p) is None:
                parts.append(part_report(position, number))
        kept = position in out
        return MessageReport(
            index=i,
            kind=(inputs[i] if i is not None else message).kind,
            zone=zone(position),
            kept=kept,
            tokens_before=facts[i].tokens if i is not None else 0,
            tokens_after=message_facts(out[position], tokenizer).tokens if kept else 0,
            parts=parts,
        )

    reports: list[MessageReport] = []
    for i, position in order:
        if position is None:
            assert i is not None
            counts = zip(inputs[i].parts, facts[i].part_tokens, strict=True)
            reports.append(
                MessageReport(
                    index=i,
                    kind=inputs[i].kind,
                    zone="middle",
                    kept=False,
                    tokens_before=facts[i].tokens,
                    tokens_after=0,
                    parts=[removed_report(p, count) for p, count in counts],
                )
            )
        else:
            reports.append(message_report(position))
    # The notice and the note go right before the first message sent after them (the note
    # after the notice at one place); the note is written where the conversation stands, in
    # the tail, and stays there until the next action.
    inserts = []
    for k in sorted(added):
        message = sent[k]
        tokens = message_facts(message, tokenizer).tokens
        kept_before = k - sum(1 for other in added if other < k)
        following = kept_positions[kept_before] if kept_before < len(kept_positions) else None
        if k == notice_k:
            add("window", 0, -tokens)
        where = "middle" if k == notice_k else "tail"
        at = len(reports)
        if following is not None:
            at = next(j for j, (_, p) in enumerate(order) if p == following)
        entry = MessageReport(
            index=None,
            kind="request",
            zone=where,
            kept=True,
            tokens_before=0,
            tokens_after=tokens,
            parts=[part(message.parts[0], "synthesized", 0, tokens)],
        )
        inserts.append((at, k, entry))
    for at, _, entry in sorted(inserts, key=lambda item: (item[0], item[1]), reverse=True):
        reports.insert(at, entry)

    assert sorted(governed.evicted) == sorted(set(evicted_refs))
    truncated = tally.pop(TRUNCATED, [0, 0])
    ran = {step.step for step in report.steps}
    if not ran & {"truncate", "shrink"}:
        assert truncated == [0, 0], truncated
    steps = []
    for step in report.steps:
        totals = list(tally.get(step.step, [0, 0]))
        detail = step.detail
        if step.step == "mask" and plan is not None and policy is not None:
            span = plan["mask_span"]
            masked = 0 if span is None else _masked_count(base, span, pins, policy, tokenizer)
            detail = f"{masked} results masked"
        elif step.step == "mask":
            # Masking counts the results of the messages left out too.
            low, high = masked_sent, masked_sent + maskable_unmasked
            if not low <= _leading_count(detail) <= high:
                detail = f"{low} to {high} results masked"
        elif step.step == "shrink" and "truncate" in ran:
            shrunk = _leading_count(detail)  # "N outputs shrunk": the parts it last cut
            totals = [shrunk, step.tokens_removed]
        elif step.step == "shrink" or (step.step == "truncate" and "shrink" not in ran):
            totals = [totals[0] + truncated[0], totals[1] + truncated[1]]
        elif step.step == "truncate":
            shrink = next(s for s in report.steps if s.step == "shrink")
            shrunk = _leading_count(shrink.detail)
            totals = [truncated[0] - shrunk, truncated[1] - shrink.tokens_removed]
        steps.append(
            step.model_copy(
                update={"parts": totals[0], "tokens_removed": totals[1], "detail": detail}
            )
        )
    expected = ContextReport.model_validate(
        {
            **report.model_dump(),
            "messages_before": len(inputs),
            "messages_after": len(sent),
            "evicted_refs": sorted(set(evicted_refs)),
            "steps": steps,
            "messages": reports,
        }
    )
    return expected.model_dump()


def _is_notice_entry(entry: MessageReport) -> bool:
    """Whether a report entry is the window notice or the budget note (the only user prompt
    and the only system prompt governance adds)."""
    return (
        entry.index is None
        and len(entry.parts) == 1
        and entry.parts[0].part_kind in ("user-prompt", "system-prompt")
        and entry.parts[0].action == "synthesized"
    )


def _same_shape(repaired: ModelMessage, sent: ModelMessage) -> bool:
    """Whether ``sent`` is ``repaired`` as governance may send it: the same kind of message,
    part for part the same kind and tool call (caps, masks and references rewrite a part's
    content only)."""
    if isinstance(repaired, ModelRequest) != isinstance(sent, ModelRequest):
        return False
    if len(repaired.parts) != len(sent.parts):
        return False
    return all(
        a.part_kind == b.part_kind
        and getattr(a, "tool_call_id", None) == getattr(b, "tool_call_id", None)
        for a, b in zip(repaired.parts, sent.parts, strict=True)
    )


def _rewritten(part: Any) -> tuple[str, str, str | None]:
    """What governance did to a part it sends rewritten (action, step, eviction reference),
    from the note it leaves on it (on a call, the marker masking leaves in its arguments); a
    part cut without one was truncated."""
    if part.part_kind == "tool-call":
        # A call has no metadata: masking leaves its marker in the arguments.
        masked = "[input masked — " in part.args_as_json_str()
        return ("masked", "mask", None) if masked else ("truncated", TRUNCATED, None)
    metadata = getattr(part, "metadata", None)
    note = metadata.get(MARK) if isinstance(metadata, dict) else None
    if isinstance(note, dict):
        if "evicted" in note:
            return "evicted", "evict", note["evicted"]
        if "masked" in note:
            return "masked", "mask", None
        if "duplicate_of" in note:
            return "deduplicated", "dedupe", None
    return "truncated", TRUNCATED, None


def _masked_count(
    base: list[ModelMessage],
    span: list[int],
    pins: set[int],
    policy: Policy,
    tokenizer: Any,
) -> int:
    """The results masking replaces: every ordinary output governance did not write, from the
    span's first (position, part) to its last, but in pinned messages and protected tools'."""
    first, low, last, high = span
    protected = set(policy.window.protected_tools)
    count = 0
    for position in range(first, last + 1):
        fact = message_facts(base[position], tokenizer)
        if position in pins or not protected.isdisjoint(fact.tool_names):
            continue
        start = low if position == first else 0
        end = high if position == last else len(fact.part_tokens) - 1
        count += sum(1 for number in fact.maskable if start <= number <= end)
    return count


def _leading_count(detail: str) -> int:
    """The number a step's detail starts with ("12 results masked")."""
    return int(detail.split()[0])
