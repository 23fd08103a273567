"""The pipeline: ``govern(messages, policy, model=...) -> Governed``.

Sync, pure and deterministic: no I/O, no clock, no randomness, and the input list and its
messages are never mutated (changed messages are rebuilt with ``dataclasses.replace``).

Order, graduated as in Duragent (001): pair repair always; then the per-output caps (eviction,
truncation) the policy applies; then, only while the history is over budget, masking, the
sliding window (which also fires on its own triggers), iteration-group dropping and a last
proportional shrink of the newest outputs — stopping as soon as it fits.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import compress
from operator import attrgetter
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest
from pydantic_ai.tools import ToolDefinition
from pydantic_core import to_json

from ._work import Carry, Landmarks, PartState, Work
from .counting import MessageFacts, message_facts
from .policy import Policy
from .report import ContextReport, MessageReport, PartReport, StepName, StepReport, Zone
from .steps.drop_groups import drop_groups
from .steps.mask import mask, masked_count
from .steps.normalize import Normalized, Pairing, normalize
from .steps.shrink import shrink
from .steps.window import notice_omitted, window
from .tokens import Tokenizer, context_window, instructions_of, tokenizer_for

ToolDefinitions = Sequence[ToolDefinition | Mapping[str, Any]]
Detail = str | Callable[[], str]
"""A step's detail for the report, or how to work it out when the report is built."""


def tool_definition_tokens(definitions: ToolDefinitions, tokenizer: Tokenizer) -> int:
    """Tokens the tool definitions take in a request (name, description, JSON schema)."""
    total = 0
    for definition in definitions:
        if isinstance(definition, ToolDefinition):
            data: Mapping[str, Any] = {
                "name": definition.name,
                "description": definition.description,
                "parameters": definition.parameters_json_schema,
            }
        else:
            data = definition
        total += tokenizer.count(to_json(data).decode())
    return total


class Governed:
    """The governed history (``messages``), evicted full texts and, on demand, the report."""

    def __init__(
        self,
        messages: list[ModelMessage],
        evicted: dict[str, str],
        work: Work,
        summary: dict[str, Any],
        normalized: Normalized,
        inputs: list[ModelMessage],
        input_facts: list[MessageFacts],
        steps: list[tuple[StepName, Detail]],
    ) -> None:
        self.messages = messages
        """What to send to the model."""
        self.evicted = evicted
        """Full texts of evicted outputs by reference; store them where the read tool finds them."""
        self.fits: bool = summary["fits"]
        self.budget_tokens: int = summary["budget_tokens"]
        self.tokens_before: int = summary["tokens_before"]
        self.tokens_after: int = summary["tokens_after"]
        self._work = work
        self._summary = summary
        self._normalized = normalized
        self._inputs = inputs
        self._input_facts = input_facts
        self._steps = steps

    @cached_property
    def report(self) -> ContextReport:
        """The full report, built on first access (the hot path before a request skips it)."""
        return _build_report(self)

    def __repr__(self) -> str:
        return (
            f"Governed({len(self.messages)} messages, {self.tokens_after} tokens, "
            f"budget {self.budget_tokens}, fits={self.fits})"
        )


def govern(
    messages: Sequence[ModelMessage],
    policy: Policy | None = None,
    *,
    model: str | None = None,
    pinned: frozenset[int] | set[int] = frozenset(),
    tool_definitions: ToolDefinitions = (),
    tool_tokens: int | None = None,
    instructions: str | None = None,
    context_window_tokens: int | None = None,
) -> Governed:
    """Govern a history: what the next model request should see, and a report of why.

    ``pinned`` holds input indices that must survive verbatim. Tool definitions are counted
    from ``tool_definitions`` unless ``tool_tokens`` gives their count. ``instructions``
    overrides the latest request's instructions (what an agent run sends). The context window
    is ``policy.context_window``, else ``context_window_tokens``, else the model's default.
    """
    policy = policy or Policy()
    tokenizer = tokenizer_for(model)
    token_ids: dict[int, tuple[str, list[int]]] = {}
    prepared = _prepare(messages, tokenizer, token_ids, _truncated_above(policy))
    # Outputs tokenised by earlier calls but not truncated yet (the current turn's, which
    # truncation scope "older" leaves whole until the turn ends) are truncated from their ids.
    for key, entry in _IDS.get(tokenizer.encoding_name, {}).items():
        token_ids.setdefault(key, entry)
    input_facts = prepared.facts

    window_tokens = policy.context_window or context_window_tokens or context_window(model)
    if instructions is not None:
        instructions_text: str | None = instructions
    elif prepared.instructions_at is not None:
        instructions_text = messages[prepared.instructions_at].instructions  # type: ignore[union-attr]
    else:
        instructions_text = None
    instructions_tokens = tokenizer.count(instructions_text) if instructions_text else 0
    system_parts = sum(input_facts[i].system_tokens for i in prepared.system_at)
    tools = (
        tool_tokens
        if tool_tokens is not None
        else tool_definition_tokens(tool_definitions, tokenizer)
    )
    margin = int(window_tokens * policy.safety_margin)
    budget = (
        window_tokens
        - system_parts
        - instructions_tokens
        - tools
        - policy.reserved_output_tokens
        - margin
    )
    if policy.history_cap_tokens:
        budget = min(budget, policy.history_cap_tokens)
    budget = max(budget, 0)

    normalized = normalize(
        messages, input_facts, tokenizer, policy.dangling_call_text, prepared.pairing
    )
    turn_start, latest_prompt = _current_turn(normalized)
    pinned_positions = (
        frozenset(p for p, i in enumerate(normalized.index) if i is not None and i in pinned)
        if pinned
        else frozenset()
    )
    landmarks = _landmarks(prepared, normalized)
    work = Work(
        policy=policy,
        tokenizer=tokenizer,
        base=normalized.messages,
        facts=normalized.facts,
        index=normalized.index,
        origins=normalized.origins,
        removed=normalized.removed,
        token_ids=token_ids,
        pinned_positions=pinned_positions,
        limit=budget + system_parts,
        turn_start=turn_start,
        latest_prompt=latest_prompt,
        window_tokens=window_tokens,
        carried=prepared.extends.carry if prepared.extends is not None else None,
        landmarks=landmarks,
    )
    prepared.extends = None
    steps: list[tuple[StepName, Detail]] = []
    if normalized.changed:
        synthesized = sum(o.count(None) for o in normalized.origins.values())
        orphans = sum(len(r) for r in normalized.removed.values())
        steps.append(("normalize", f"{synthesized} results synthesized, {orphans} orphans removed"))
    if policy.eviction.enabled:
        steps.append(("evict", ""))
    if policy.tool_output.enabled or policy.text.enabled:
        steps.append(("truncate", ""))
    _budget_steps(work, steps)
    output = _assemble(work)
    prepared.carry = work.carry()
    _IDS[tokenizer.encoding_name] = _newest_ids(token_ids)
    if instructions is not None:
        out_instructions: str | None = instructions
    elif instructions_text is None:
        # No input message carries instructions, so no output message does.
        out_instructions = None
    else:
        out_instructions = instructions_of(output)
    out_instr_tokens = tokenizer.count(out_instructions) if out_instructions else 0
    # Every kept position holds its governed message's count (a dropped one 0), and system
    # prompt parts are never rewritten, so the output's totals need no pass over its messages.
    tokens_after = sum(work.tokens) + work.notice_tokens() + out_instr_tokens
    system_after = (
        sum(work.facts[p].system_tokens for p in landmarks.system if work.kept[p])
        + out_instr_tokens
    )
    fits = tokens_after - system_after <= budget
    summary = {
        "model": model,
        "window_tokens": window_tokens,
        "system_tokens": system_after,
        "tool_definition_tokens": tools,
        "safety_margin_tokens": margin,
        "budget_tokens": budget,
        "tokens_before": prepared.tokens + instructions_tokens,
        "tokens_after": tokens_after,
        "fits": fits,
        "reason": None if fits else _reason(work, budget, system_parts, instructions_tokens),
    }
    return Governed(
        output, dict(work.evicted), work, summary, normalized, list(messages), input_facts, steps
    )


@dataclass
class _Prepared:
    """What a left-to-right pass over a history knows, kept to extend on the next call."""

    messages: list[ModelMessage]
    parts: list[Sequence[Any]]
    """Each message's parts list as seen, to notice a message edited in place."""
    sizes: list[int]
    facts: list[MessageFacts]
    pairing: Pairing
    instructions_at: int | None
    """Index of the latest request carrying instructions."""
    system_at: list[int]
    aborted_at: list[int]
    notices_at: list[int]
    latest_call: dict[str, int]
    """Input indices of the window's landmarks (see ``Landmarks``)."""
    tokens: int
    """Tokens of all the messages."""
    carry: Carry | None = None
    """What the last call on this history governed, for the next call to reuse."""
    extends: _Prepared | None = None
    """The remembered history this one extends (only until this one's call is done)."""


# The histories governed last, per encoding, most recent first: an agent governs the same list
# plus a message or two before every request, so the shared prefix is recognised by identity (a
# few C-level passes) and only the new messages are looked at. Two entries let an agent's
# history survive one other history governed in between (a dashboard, another session); more
# would keep more histories, with all their text, alive. A history that extends none of them
# (shrunk, reordered, a message replaced or its parts list changed) is prepared from scratch.
_LAST: dict[str, list[_Prepared]] = {}
_KEEP_LAST = 2


# Token ids of long texts not truncated yet, per encoding, newest first: the current turn's
# outputs are tokenised when they arrive and truncated only once a later turn makes them older,
# a call or several later. Truncating takes an entry out; the oldest go first beyond the cap
# (ids are Python ints, about 36 bytes a token, so 1M tokens hold about 36 MB).
_IDS: dict[str, dict[int, tuple[str, list[int]]]] = {}
_KEEP_IDS_TOKENS = 1_000_000


def _truncated_above(policy: Policy) -> float:
    """Below how many tokens a text's ids are not worth keeping (inf: token truncation is off).

    Half the smallest token limit: a part is truncated by its count with framing, which the
    text alone may be a little under.
    """
    limits = [
        truncation.limit
        for truncation in (policy.tool_output, policy.text)
        if truncation.enabled and truncation.unit == "tokens" and truncation.limit
    ]
    return min(limits, default=float("inf")) / 2


def _newest_ids(
    token_ids: dict[int, tuple[str, list[int]]],
) -> dict[int, tuple[str, list[int]]]:
    """The first (newest) entries of ``token_ids`` holding at most ``_KEEP_IDS_TOKENS`` ids."""
    kept: dict[int, tuple[str, list[int]]] = {}
    room = _KEEP_IDS_TOKENS
    for key, entry in token_ids.items():
        room -= len(entry[1])
        if room < 0:
            break
        kept[key] = entry
    return kept


def _extends(
    previous: _Prepared, messages: Sequence[ModelMessage], parts: list[Any], sizes: list[int]
) -> bool:
    """Whether ``messages`` (with these parts lists and sizes) begins with ``previous``'s."""
    size = len(previous.messages)
    return (
        size <= len(messages)
        and (size == 0 or previous.messages[-1] is messages[size - 1])
        and all(map(operator.is_, previous.messages, messages))
        and all(map(operator.is_, previous.parts, parts))
        and previous.sizes == sizes[:size]
    )


_PARTS = attrgetter("parts")


def _prepare(
    messages: Sequence[ModelMessage],
    tokenizer: Tokenizer,
    token_ids: dict[int, tuple[str, list[int]]],
    keep_above: float = 0,
) -> _Prepared:
    """Facts, pairing and the latest instructions of a history; long texts' token ids are kept
    for the newest few longer than ``keep_above`` tokens (shorter ones are never truncated)."""
    room = [4_000_000]

    def sink(part: Any, text: str, ids: list[int]) -> None:
        # Only the newest outputs can survive the window, so only theirs are worth keeping.
        if room[0] > 0 and len(ids) > keep_above:
            token_ids[id(part)] = (text, ids)
            room[0] -= len(ids)

    parts = list(map(_PARTS, messages))
    sizes = list(map(len, parts))
    recent = _LAST.setdefault(tokenizer.encoding_name, [])
    previous: _Prepared | None = None
    for candidate in recent:
        if _extends(candidate, messages, parts, sizes) and (
            previous is None or len(candidate.messages) > len(previous.messages)
        ):
            previous = candidate
    known = len(previous.messages) if previous is not None else 0
    facts: list[MessageFacts] = [None] * len(messages)  # type: ignore[list-item]
    if known:
        assert previous is not None
        facts[:known] = previous.facts
    for position in range(len(messages) - 1, known - 1, -1):
        facts[position] = message_facts(messages[position], tokenizer, sink)
    instructions_at = previous.instructions_at if known and previous is not None else None
    for position in range(known, len(messages)):
        message = messages[position]
        if isinstance(message, ModelRequest) and message.instructions is not None:
            instructions_at = position
    pairing = (previous.pairing if known and previous is not None else Pairing()).extended(facts)
    if previous is not None:
        system_at, aborted_at = list(previous.system_at), list(previous.aborted_at)
        notices_at, latest_call = list(previous.notices_at), dict(previous.latest_call)
        tokens = previous.tokens
    else:
        system_at, aborted_at, notices_at, latest_call, tokens = [], [], [], {}, 0
    for position in range(known, len(messages)):
        fact = facts[position]
        tokens += fact.tokens
        if fact.system_tokens:
            system_at.append(position)
        if fact.aborted:
            aborted_at.append(position)
        if fact.notice:
            notices_at.append(position)
        if not fact.request:
            for name in fact.tool_names:
                latest_call[name] = position
    prepared = _Prepared(
        list(messages),
        parts,
        sizes,
        facts,
        pairing,
        instructions_at,
        system_at,
        aborted_at,
        notices_at,
        latest_call,
        tokens,
        None,
        previous,
    )
    # The history extended is superseded by this one; the others stay, newest first.
    recent[:] = [prepared, *(c for c in recent if c is not previous)][:_KEEP_LAST]
    return prepared


def _landmarks(prepared: _Prepared, normalized: Normalized) -> Landmarks:
    """The landmarks of the repaired history, from the input indices ``_prepare`` collected.

    Pair repair keeps the system prompt, abort markers and notices of the messages it rebuilds,
    never rebuilds a response, and adds only plain requests of results.
    """
    position_of = normalized.position_of

    def mapped(indices: list[int]) -> list[int]:
        return [p for p in map(position_of, indices) if p is not None]

    latest: dict[str, int] = {}
    for name, index in prepared.latest_call.items():
        position = position_of(index)
        if position is not None:
            latest[name] = position
    return Landmarks(
        mapped(prepared.system_at),
        mapped(prepared.aborted_at),
        mapped(prepared.notices_at),
        latest,
    )


def _current_turn(normalized: Normalized) -> tuple[int, int | None]:
    """Start of the current turn and position of the latest user request, if any.

    The turn starts at the latest user request, or earlier when that request also carries
    results (pair repair may have put them there) whose calls come before it.
    """
    facts = normalized.facts
    for position in range(len(normalized.messages) - 1, -1, -1):
        fact = facts[position]
        message = normalized.messages[position]
        if fact.request and fact.user_prompt and notice_omitted(message) is None:
            start = position
            needed = set(fact.result_ids)
            earlier = position - 1
            while needed and earlier >= 0:
                if needed.intersection(facts[earlier].call_ids):
                    needed.difference_update(facts[earlier].call_ids)
                    start = earlier
                earlier -= 1
            return start, position
    return 0, None


def _budget_steps(work: Work, steps: list[tuple[StepName, Detail]]) -> None:
    policy = work.policy
    if policy.masking.enabled and (policy.masking.apply == "always" or work.exact_over()):
        mask(work)
        # Counting the masked results walks the masked span: left to the report.
        steps.append(("mask", lambda: f"{masked_count(work)} results masked"))
    omitted = window(work)
    if omitted is not None:
        steps.append(("window", f"{omitted} messages omitted"))
    if policy.drop_groups and work.exact_over():
        dropped = drop_groups(work)
        steps.append(("drop_groups", f"{dropped} iteration groups dropped"))
    if policy.shrink_newest and work.exact_over():
        shrunk = shrink(work)
        steps.append(("shrink", f"{shrunk} outputs shrunk"))


def _assemble(work: Work) -> list[ModelMessage]:
    kept = work.kept
    positions = list(compress(range(len(work.base)), kept))
    if not work.materialised.issuperset(positions):
        for position in positions:
            work.materialise(position)
    output = list(compress(work.messages, kept))
    if work.notice is not None:
        at = len(output) if work.notice_before is None else sum(kept[: work.notice_before])
        output.insert(at, work.notice)
    return output


def _reason(work: Work, budget: int, system_parts: int, instructions: int) -> str:
    """Why the budget could not be met: what is left that governance may not remove."""
    if budget == 0:
        return (
            "no budget left for history: system prompt, instructions, tool definitions, "
            "reserved output and safety margin take the whole window"
        )
    latest = work.tokens[work.latest_prompt] if work.latest_prompt is not None else 0
    pinned = sum(work.tokens[p] for p in work.pinned_positions if work.kept[p])
    return (
        f"over budget after every step: {budget} tokens of budget; the latest user request "
        f"takes {latest}, pinned messages {pinned}, system prompt parts {system_parts}, "
        f"instructions {instructions}; the rest of the current turn was shrunk as far as the "
        "policy allows"
    )


def _zone(work: Work, position: int) -> Zone:
    if position in work.pinned_positions:
        return "pinned"
    if position <= work.head_end:
        return "head"
    if position >= work.tail_start:
        return "tail"
    return "middle"


class _Tally:
    """Parts touched and tokens removed, per step."""

    def __init__(self) -> None:
        self.totals: dict[StepName, list[int]] = {}

    def add(self, step: StepName | None, before: int, after: int) -> None:
        if step is not None:
            totals = self.totals.setdefault(step, [0, 0])
            totals[0] += 1
            totals[1] += before - after


def _part(part: Any, action: Any, before: int, after: int, ref: str | None = None) -> PartReport:
    return PartReport(
        part_kind=part.part_kind,
        tool_name=getattr(part, "tool_name", None),
        action=action,
        tokens_before=before,
        tokens_after=after,
        ref=ref,
    )


def _build_report(governed: Governed) -> ContextReport:
    work = governed._work
    normalized = governed._normalized
    inputs = governed._inputs
    input_facts = governed._input_facts
    summary = governed._summary
    tally = _Tally()
    reports: list[MessageReport] = []
    dropped_inputs = set(normalized.dropped)
    positions_of = {i: p for p, i in enumerate(work.index) if i is not None}
    notice_at: int | None = None

    for index, message in enumerate(inputs):
        fact = input_facts[index]
        position = positions_of.get(index)
        if position is None or index in dropped_inputs:
            parts = [
                _part(p, "dropped", t, 0)
                for p, t in zip(message.parts, fact.part_tokens, strict=True)
            ]
            for report in parts:
                tally.add("normalize", report.tokens_before, 0)
            reports.append(
                MessageReport(
                    index=index,
                    kind=message.kind,
                    zone="middle",
                    kept=False,
                    tokens_before=fact.tokens,
                    tokens_after=0,
                    parts=parts,
                )
            )
            continue
        if position == work.notice_before:
            notice_at = len(reports)
        reports.append(
            _message_report(work, position, message, fact, tally, normalized.removed.get(index, ()))
        )
        following = position + 1
        while following < len(work.index) and work.index[following] is None:
            if following == work.notice_before:
                notice_at = len(reports)
            synthetic = work.base[following]
            reports.append(_message_report(work, following, synthetic, None, tally, ()))
            following += 1
    if work.notice is not None:
        notice_tokens = message_facts(work.notice, work.tokenizer).tokens
        tally.add("window", 0, -notice_tokens)
        reports.insert(
            len(reports) if notice_at is None else notice_at,
            MessageReport(
                index=None,
                kind="request",
                zone="middle",
                kept=True,
                tokens_before=0,
                tokens_after=notice_tokens,
                parts=[_part(work.notice.parts[0], "synthesized", 0, notice_tokens)],
            ),
        )
    steps = [
        StepReport(
            step=name,
            parts=tally.totals.get(name, [0, 0])[0],
            tokens_removed=tally.totals.get(name, [0, 0])[1],
            detail=detail if isinstance(detail, str) else detail(),
        )
        for name, detail in governed._steps
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
        messages_before=len(inputs),
        messages_after=len(governed.messages),
        fits=summary["fits"],
        reason=summary["reason"],
        steps=steps,
        messages=reports,
        evicted_refs=sorted(governed.evicted),
    )


def _message_report(
    work: Work,
    position: int,
    message: ModelMessage,
    fact: MessageFacts | None,
    tally: _Tally,
    removed: Sequence[int],
) -> MessageReport:
    """One input message (``fact`` given) or one added by pair repair (``fact`` None)."""
    kept = work.kept[position]
    states = work.states_of(position)
    drop_step = work.dropped_by.get(position)
    by_origin = {s.origin: s for s in states if s.origin is not None}
    parts: list[PartReport] = []
    if fact is not None:
        for number, part in enumerate(message.parts):
            if number in removed:
                tally.add("normalize", fact.part_tokens[number], 0)
                parts.append(_part(part, "dropped", fact.part_tokens[number], 0))
                continue
            state = by_origin[number]
            parts.append(_state_report(part, state, kept, drop_step, tally))
    base_parts = work.base[position].parts
    for state, part in zip(states, base_parts, strict=True):
        if state.origin is None:
            parts.append(_state_report(part, state, kept, drop_step, tally))
    return MessageReport(
        index=work.index[position],
        kind=message.kind,
        zone=_zone(work, position),
        kept=kept,
        tokens_before=fact.tokens if fact is not None else 0,
        tokens_after=work.tokens[position] if kept else 0,
        parts=parts,
    )


def _state_report(
    part: Any, state: PartState, kept: bool, drop_step: StepName | None, tally: _Tally
) -> PartReport:
    if not kept:
        tally.add(drop_step, state.tokens_before, 0)
        return _part(part, "dropped", state.tokens_before, 0)
    tally.add(state.step, state.tokens_before, state.tokens_after)
    return _part(part, state.action, state.tokens_before, state.tokens_after, state.ref)
