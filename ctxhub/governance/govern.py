"""The pipeline: ``govern(messages, policy, model=...) -> Governed``.

Sync, pure and deterministic: no I/O, no clock, no randomness, and the input list and its
messages are never mutated (changed messages are rebuilt with ``dataclasses.replace``).

Order, graduated as in Duragent (001): pair repair always; then the per-output caps (eviction,
truncation) the policy applies; then, only while the history is over budget, masking, the
sliding window (which also fires on its own triggers), iteration-group dropping and a last
proportional shrink of the newest outputs — stopping as soon as it fits.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from threading import Lock
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest
from pydantic_ai.tools import ToolDefinition
from pydantic_core import to_json

from ._work import Landmarks, Messages, Work
from .caches import memory
from .carry import Carry, carry_of, over_with_caps, seed
from .counting import MessageFacts, message_facts
from .policy import Policy
from .report import ContextReport, Detail, PartTotals, ReportCache, StepName, build_report
from .steps.dedupe import dedupe
from .steps.drop_groups import drop_groups
from .steps.mask import mask, masked_count
from .steps.normalize import Normalized, Pairing, Repaired, normalize
from .steps.shrink import shrink
from .steps.window import window
from .tokens import Tokenizer, context_window, instructions_of, tokenizer_for

ToolDefinitions = Sequence[ToolDefinition | Mapping[str, Any]]


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
        input_facts: list[MessageFacts],
        steps: list[tuple[StepName, Detail]],
        reports: ReportCache,
        totals: PartTotals,
    ) -> None:
        self.messages = messages
        """What to send to the model."""
        self.evicted = evicted
        """Full texts of the evicted outputs ``messages`` refer to, by reference; store them
        where the read tool finds them."""
        self.fits: bool = summary["fits"]
        self.budget_tokens: int = summary["budget_tokens"]
        self.tokens_before: int = summary["tokens_before"]
        self.tokens_after: int = summary["tokens_after"]
        self.system_tokens: int = summary["system_tokens"]
        """Tokens of the system prompt parts and instructions sent (never governed away)."""
        self.window_tokens: int = summary["window_tokens"]
        self._work = work
        self._summary = summary
        self._normalized = normalized
        self._input_facts = input_facts
        self._steps = steps
        self._reports = reports
        self._totals = totals

    @cached_property
    def report(self) -> ContextReport:
        """The full report, built on first access (the hot path before a request skips it)."""
        return build_report(
            self._work,
            self._normalized,
            self._input_facts,
            self._steps,
            self._summary,
            len(self.messages),
            self.evicted,
            self._reports,
            self._totals,
        )

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
    facts: Sequence[MessageFacts] | None = None,
) -> Governed:
    """Govern a history: what the next model request should see, and a report of why.

    ``pinned`` holds input indices that must survive verbatim. Tool definitions are counted
    from ``tool_definitions`` unless ``tool_tokens`` gives their count. ``instructions``
    overrides the latest request's instructions (what an agent run sends). The context window
    is ``policy.context_window``, else ``context_window_tokens``, else the model's default.

    ``facts`` are the messages' facts for the model's encoding (``message_facts``, perhaps
    stored with ``MessageFacts.to_json``), one object per message. Given them, governance
    tokenises no input and reads ``messages`` only by position (``messages[i]``) and only where
    it must: messages it sends, messages it changes (caps, masks, pair repair) and the request
    whose instructions it uses; the report comes from the facts. So ``messages`` may load each
    message on demand. A call on the same history grown (the same facts objects first) reuses
    what the previous call worked out, as it does for the same message objects without facts.
    """
    policy = policy or Policy()
    tokenizer = tokenizer_for(model)
    token_ids: dict[int, tuple[str, list[int]]] = {}
    source: Messages
    if facts is None:
        prepared = _prepare(messages, tokenizer, token_ids, _truncated_above(policy))
        assert prepared.messages is not None
        source = prepared.messages
    else:
        if len(facts) != len(messages):
            raise ValueError(f"{len(facts)} facts given for {len(messages)} messages")
        prepared = _prepare_stored(facts, tokenizer)
        source = messages
    # Outputs tokenised by earlier calls but not truncated yet (the current turn's, which
    # truncation scope "older" leaves whole until the turn ends) are truncated from their ids.
    for key, entry in memory.token_ids.get(tokenizer.encoding_name, {}).items():
        token_ids.setdefault(key, entry)
    input_facts = prepared.facts

    window_tokens = policy.context_window or context_window_tokens or context_window(model)
    if instructions is not None:
        instructions_text: str | None = instructions
    elif prepared.instructions_at is not None:
        instructions_text = source[prepared.instructions_at].instructions  # type: ignore[union-attr]
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

    extends = prepared.extends
    normalized = normalize(
        source,
        input_facts,
        tokenizer,
        policy.dangling_call_text,
        prepared.pairing,
        extends.normalized if extends is not None else None,
        in_place=prepared.grows,
    )
    prepared.normalized = normalized
    turn_start, latest_prompt = _current_turn(normalized)
    pinned_indices = (i for i in pinned if 0 <= i < len(input_facts))
    pinned_positions = frozenset(
        p for p in map(normalized.position_of, pinned_indices) if p is not None
    )
    landmarks = _landmarks(prepared, normalized)
    carried = extends.carry if extends is not None else None
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
        landmarks=landmarks,
        carried=carried,
        carried_shared=(
            normalized.shared
            if carried is not None
            and extends is not None
            and extends.normalized is not None
            and carried.facts is extends.normalized.facts
            else None
        ),
        duplicates=_duplicates(prepared, normalized) if policy.dedupe.enabled else {},
    )
    prepared.extends = None
    steps: list[tuple[StepName, Detail]] = []
    if normalized.changed:
        # Counting walks every repaired message: left to the report.
        steps.append(("normalize", lambda: _repairs(normalized)))
    if policy.eviction.enabled:
        steps.append(("evict", ""))
    if policy.tool_output.enabled or policy.text.enabled:
        steps.append(("truncate", ""))
    _budget_steps(work, steps)
    output = _assemble(work)
    prepared.carry = carry_of(work)
    memory.token_ids[tokenizer.encoding_name] = _newest_ids(token_ids)
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
    tokens_after = work.total_tokens + work.notice_tokens() + out_instr_tokens
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
    governed = Governed(
        output,
        work.evicted(),
        work,
        summary,
        normalized,
        input_facts,
        steps,
        prepared.reports,
        prepared.totals,
    )
    prepared.result = weakref.ref(governed)
    return governed


@dataclass
class _Prepared:
    """What a left-to-right pass over a history knows, kept to extend on the next call."""

    messages: list[ModelMessage] | None
    """The messages (None when the caller gave their facts and loads messages on demand)."""
    size: int
    """How many messages the history has (``facts`` may since have been grown in place by the
    history extending this one: see ``grows``)."""
    tail: list[tuple[Sequence[Any], int]] | None
    """The parts list and its length of each of the last ``_EDITABLE`` messages, as seen, to
    notice one edited in place."""
    facts: list[MessageFacts]
    pairing: Pairing
    instructions_at: int | None
    """Index of the latest request carrying instructions."""
    system_at: list[int]
    aborted_at: list[int]
    notices_at: list[int]
    latest_call: dict[str, int]
    """Input indices of the window's landmarks (see ``Landmarks``)."""
    first_text: int | None
    """Input index of the first response with text."""
    outputs_at: tuple[int, int] | None
    """Input indices of the first and last requests holding a tool output (None: none)."""
    calls_at: tuple[int, int] | None
    """Input indices of the first and last responses making a tool call (None: none)."""
    newest_output: dict[str, int]
    """Output digest → input index of the newest request holding that output."""
    older_copies: list[tuple[int, str]]
    """(input index, digest) of each output the same tool returned again later."""
    tokens: int
    """Tokens of all the messages."""
    reports: ReportCache
    """Message reports of earlier calls on this history, for the next report to reuse."""
    totals: PartTotals
    """Prefix sums of the messages' parts and part tokens, for the report."""
    carry: Carry | None = None
    """What the last call on this history governed, for the next call to reuse."""
    normalized: Normalized | None = None
    """The last call's pair repair of this history, for the next call to take up."""
    extends: _Prepared | None = None
    """The remembered history this one extends and took over, for its pair repair and carried
    state (only until this one's call is done). A call that could not take it over (another
    call extending it at the same time did) does not read them: the taker may be growing them
    in place."""
    grows: bool = False
    """Whether this history grows the one it extends in place, its facts list and its pair
    repair's (taken over, and the result of its call read no more: see ``_unread``)."""
    taken: bool = False
    """Whether a later history extending this one took its landmark and output containers."""
    result: weakref.ReferenceType[Governed] | None = None
    """The result of this history's call, once the call is done."""


# The histories governed last (``memory.histories``), per encoding, most recent first: an
# agent governs the same list plus a message or two before every request, so the shared prefix
# is recognised by identity (a few C-level passes) and only the new messages are looked at. Two
# entries let an agent's history survive one other history governed in between (a dashboard,
# another session); more would keep more histories, with all their text, alive. A history that
# extends none of them (shrunk, reordered, a message replaced, or one of its last messages given
# another parts list) is prepared from scratch.
_KEEP_LAST = 2

# How many of a remembered history's last messages are checked for an edit in place. An agent
# run edits only its latest request (pydantic-ai adds instructions and capability parts to it);
# an older message changes by being replaced, which the identity check sees. Reading every
# message's parts list instead would cost a pass over the history's objects on every call; a
# caller that does edit an older message in place calls ``memory.clear()``.
_EDITABLE = 16


# Token ids of long texts not truncated yet (``memory.token_ids``), per encoding, newest
# first: the current turn's outputs are tokenised when they arrive and truncated only once a
# later turn makes them older, a call or several later. Truncating takes an entry out; the
# oldest go first beyond the cap (ids are Python ints, about 36 bytes a token, so 1M tokens hold
# about 36 MB).
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


# Whether a history begins with a remembered one: its last remembered message must be the same
# object, and the rest is decided by list comparisons: C-level, and an item that is the same
# object as the remembered one is equal without being looked at (a few nanoseconds an item,
# where a Python-level identity check costs tens). An item that is not the same object is
# compared by value: a message (or parts list) replaced by an equal copy is as good as the same,
# since everything carried from the remembered history follows from its value (the governed
# versions carried by position are checked by identity of their facts where they are taken;
# see ``Work.seed``).


def _extends(previous: _Prepared, messages: list[ModelMessage]) -> bool:
    """Whether ``messages`` begins with ``previous``'s, its last messages not edited since."""
    if previous.messages is None or previous.tail is None:
        return False
    size = len(previous.messages)
    if size > len(messages):
        return False
    if size == 0:
        return True
    return (
        previous.messages[-1] is messages[size - 1]
        and _starts_with(messages, previous.messages)
        and _tail(messages[max(size - _EDITABLE, 0) : size]) == previous.tail
    )


def _tail(messages: list[ModelMessage]) -> list[tuple[Sequence[Any], int]]:
    """Each message's parts list and its length."""
    return [(message.parts, len(message.parts)) for message in messages]


def _ends_like(previous: _Prepared, facts: Sequence[MessageFacts]) -> bool:
    """Whether ``facts`` may begin with ``previous``'s facts: they are as many or more, and the
    last of them is the same object."""
    size = previous.size
    return size <= len(facts) and (size == 0 or previous.facts[size - 1] is facts[size - 1])


def _extends_facts(
    recent: list[_Prepared], facts: Sequence[MessageFacts]
) -> tuple[_Prepared | None, list[MessageFacts], bool]:
    """The remembered history ``facts`` extends, if any (the longest); ``facts`` as a list of
    this call's own; and whether this call took the remembered history over (``_take``).

    A remembered history taken over whose result is read no more has its facts list grown in
    place to ``facts``: proving that ``facts`` begins with it is then one list comparison,
    with no copy of a long history's facts on every call.
    """
    if not isinstance(facts, list):
        facts = list(facts)  # compared by list comparisons
    held: list[MessageFacts] | None = None
    for candidate in sorted(
        (c for c in recent if _ends_like(c, facts)), key=attrgetter("size"), reverse=True
    ):
        taken = _take(candidate)
        if taken and _unread(candidate):
            if _grown(candidate, facts):
                return candidate, candidate.facts, True
        else:
            if held is None:
                held = list(facts)
            # A list another call grew in place is left to it.
            if len(candidate.facts) == candidate.size and _starts_with(held, candidate.facts):
                return candidate, held, taken
        if taken:
            _untake(candidate)
    return None, list(facts) if held is None else held, False


def _grown(previous: _Prepared, facts: Sequence[MessageFacts]) -> bool:
    """Whether ``facts`` begins with ``previous``'s facts, growing ``previous``'s list to
    ``facts`` in place if it does (``previous`` is taken over and its result read no more)."""
    items = previous.facts
    items += facts[previous.size :]
    if items == facts:  # C-level; an item that is the same object is not looked at
        return True
    del items[previous.size :]
    return False


def _starts_with(items: list[Any], prefix: Sequence[Any]) -> bool:
    """Whether ``items`` (a list of this call's own) begins with ``prefix``, by one list
    comparison; the items past the prefix are set aside meanwhile rather than the prefix
    copied (a copy would touch every item of a long history again)."""
    size = len(prefix)
    if size == len(items):
        return items == prefix
    rest = items[size:]
    del items[size:]
    try:
        return items == prefix
    finally:
        items.extend(rest)


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

    held = list(messages)
    recent: list[_Prepared] = memory.histories.setdefault(tokenizer.encoding_name, [])
    previous = _longest(c for c in recent if _extends(c, held))
    known = previous.size if previous is not None else 0
    taken = previous is not None and _take(previous)
    # Newest first, so the token ids kept for truncation are the newest outputs'.
    new = [message_facts(held[p], tokenizer, sink) for p in range(len(held) - 1, known - 1, -1)]
    if previous is None:
        facts = []
    elif taken and _unread(previous):
        facts = previous.facts  # grown in place (see ``_extends_facts``)
    else:
        facts = previous.facts[:known]
    facts.extend(reversed(new))
    # Read from the messages, not their cached facts: an agent run sets a request's
    # instructions after the request is in the history.
    instructions_at = previous.instructions_at if previous is not None else None
    for position in range(known, len(held)):
        message = held[position]
        if isinstance(message, ModelRequest) and message.instructions is not None:
            instructions_at = position
    return _prepared(
        recent, previous, taken, facts, instructions_at, held, _tail(held[-_EDITABLE:])
    )


def _prepare_stored(facts: Sequence[MessageFacts], tokenizer: Tokenizer) -> _Prepared:
    """``_prepare`` from facts the caller holds: the messages are not read."""
    recent: list[_Prepared] = memory.histories.setdefault(tokenizer.encoding_name, [])
    previous, held, taken = _extends_facts(recent, facts)
    instructions_at = previous.instructions_at if previous is not None else None
    for position in range(previous.size if previous is not None else 0, len(held)):
        if held[position].instructions:
            instructions_at = position
    return _prepared(recent, previous, taken, held, instructions_at, None, None)


def _longest(candidates: Iterable[_Prepared]) -> _Prepared | None:
    """The remembered history with the most messages among ``candidates``."""
    return max(candidates, key=attrgetter("size"), default=None)


def _prepared(
    recent: list[_Prepared],
    previous: _Prepared | None,
    taken: bool,
    facts: list[MessageFacts],
    instructions_at: int | None,
    messages: list[ModelMessage] | None,
    tail: list[tuple[Sequence[Any], int]] | None,
) -> _Prepared:
    """The pass over ``facts`` extended from ``previous``'s (``taken``: taken over, see
    ``_take``), remembered in ``recent``."""
    # The pairing's mappings are taken over as the containers below are; another call
    # extending the same history at the same time pairs from the start, as it cannot know how
    # far the taker got.
    carried = previous.pairing if previous is not None and taken else Pairing()
    pairing = carried.extended(facts, in_place=taken)
    if taken:
        assert previous is not None
        # Extended in place rather than copied: the containers grow with the history, and
        # copying them on every call would be a pass over it.
        known = previous.size
        system_at, aborted_at = previous.system_at, previous.aborted_at
        notices_at, latest_call = previous.notices_at, previous.latest_call
        first_text, outputs_at, calls_at = (
            previous.first_text,
            previous.outputs_at,
            previous.calls_at,
        )
        tokens = previous.tokens
        newest_output, older_copies = previous.newest_output, previous.older_copies
    else:
        known = 0
        system_at, aborted_at, notices_at, latest_call = [], [], [], {}
        first_text, outputs_at, calls_at = None, None, None
        tokens = 0
        newest_output, older_copies = {}, []
    if previous is not None:
        reports = previous.reports
        totals = previous.totals.extended(facts, previous.size, in_place=taken)
    else:
        reports, totals = ReportCache(), PartTotals().extended(facts, 0, in_place=True)
    for position in range(known, len(facts)):
        fact = facts[position]
        tokens += fact.tokens
        if fact.system_tokens:
            system_at.append(position)
        if fact.aborted:
            aborted_at.append(position)
        if fact.notice:
            notices_at.append(position)
        if fact.request:
            if fact.outputs:
                outputs_at = (position if outputs_at is None else outputs_at[0], position)
            for digest in fact.output_digests:
                older = newest_output.get(digest)
                if older is not None:
                    older_copies.append((older, digest))
                newest_output[digest] = position
        else:
            for name in fact.tool_names:
                latest_call[name] = position
            if fact.call_ids:
                calls_at = (position if calls_at is None else calls_at[0], position)
            if first_text is None and fact.text_response:
                first_text = position
    prepared = _Prepared(
        messages,
        len(facts),
        tail,
        facts,
        pairing,
        instructions_at,
        system_at,
        aborted_at,
        notices_at,
        latest_call,
        first_text,
        outputs_at,
        calls_at,
        newest_output,
        older_copies,
        tokens,
        reports,
        totals,
        extends=previous if taken else None,
        grows=previous is not None and facts is previous.facts,
    )
    # The history extended is superseded by this one; the others stay, newest first.
    recent[:] = [prepared, *(c for c in recent if c is not previous)][:_KEEP_LAST]
    return prepared


def _take(previous: _Prepared) -> bool:
    """Whether this call may extend ``previous``'s containers in place: only one call may,
    once ``previous``'s own call is done, and another call that extends it at the same time
    (another thread) collects them afresh."""
    with _TAKING:
        if previous.taken or previous.result is None:
            return False
        previous.taken = True
        return True


def _untake(previous: _Prepared) -> None:
    """Give ``previous`` back: this call does not extend it after all."""
    with _TAKING:
        previous.taken = False


def _unread(previous: _Prepared) -> bool:
    """Whether nothing reads ``previous``'s lists any more: the result of its call is gone, or
    its report (which reads them when first asked for) is built. A history taken over may then
    have its lists grown in place."""
    if previous.result is None:
        return False  # its call is not done
    governed = previous.result()
    return governed is None or "report" in vars(governed)


_TAKING = Lock()


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
    # Responses are never rebuilt nor dropped, so a response's position is known; a request
    # holding outputs may be emptied and dropped, when the bound falls back to the end.
    size = len(normalized.facts)
    low, high = size, -1
    if prepared.outputs_at is not None:
        first, last = map(position_of, prepared.outputs_at)
        low = 0 if first is None else first
        high = size - 1 if last is None else last
    if prepared.calls_at is not None:
        first, last = map(position_of, prepared.calls_at)
        low = min(low, 0 if first is None else first + 1)
        high = max(high, size - 1 if last is None else last + 1)
    return Landmarks(
        mapped(prepared.system_at),
        mapped(prepared.aborted_at),
        mapped(prepared.notices_at),
        latest,
        None if prepared.first_text is None else position_of(prepared.first_text),
        (low, min(high, size - 1)) if low <= high else None,
    )


def _duplicates(
    prepared: _Prepared, normalized: Normalized
) -> dict[tuple[int, int], tuple[int, int]]:
    """(position, part) of each older copy of a repeated output → (position, part) of its
    newest copy, in the repaired history."""
    found: dict[tuple[int, int], tuple[int, int]] = {}
    facts = normalized.facts
    # A late result pair repair moved sits in the request after its call, not at its index.
    moved_to = {
        index: position
        for position, parts in normalized.moved.items()
        for index, _ in parts.values()
    }

    def located(index: int, digest: str) -> tuple[int, int] | None:
        for position in (normalized.position_of(index), moved_to.get(index)):
            if position is not None:
                number = _output_part(facts[position], digest)
                if number is not None:
                    return position, number
        return None

    for index, digest in prepared.older_copies:
        older = located(index, digest)
        newest = located(prepared.newest_output[digest], digest)
        if older is not None and newest is not None and older[0] != newest[0]:
            found[older] = newest
    return found


def _output_part(fact: MessageFacts, digest: str) -> int | None:
    """The part number of the output with ``digest`` in a message (None: it holds none)."""
    for number, candidate in zip(fact.outputs, fact.output_digests, strict=True):
        if candidate == digest:
            return number
    return None


def _current_turn(normalized: Normalized) -> tuple[int, int | None]:
    """Start of the current turn and position of the latest user request, if any.

    The turn starts at the latest user request, or earlier when that request also carries
    results (pair repair may have put them there) whose calls come before it.
    """
    facts = normalized.facts
    for position in range(len(facts) - 1, -1, -1):
        fact = facts[position]
        if fact.request and fact.user_prompt and not fact.notice:
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


def _repairs(normalized: Normalized) -> str:
    """What pair repair did, in a step's words."""
    synthesized = sum(o.count(None) for o in normalized.origins.values())
    orphans = sum(len(r) for r in normalized.removed.values())
    return f"{synthesized} results synthesized, {orphans} orphans removed"


def _budget_steps(work: Work, steps: list[tuple[StepName, Detail]]) -> None:
    policy = work.policy
    if policy.masking.enabled and (policy.masking.apply == "always" or over_with_caps(work)):
        mask(work)
        # Counting the masked results walks the masked span: left to the report.
        steps.append(("mask", lambda: f"{masked_count(work)} results masked"))
    # With masking planned, what the previous call governed that still holds is taken over.
    seed(work)
    omitted = window(work)
    if omitted is not None:
        steps.append(("window", f"{omitted} messages omitted"))
    if policy.drop_groups and work.exact_over():
        dropped = drop_groups(work)
        steps.append(("drop_groups", f"{dropped} iteration groups dropped"))
    if work.duplicates:
        referenced = dedupe(work)
        if referenced:
            steps.append(("dedupe", f"{referenced} repeated outputs replaced by a reference"))
    if policy.shrink_newest and work.exact_over():
        shrunk = shrink(work)
        steps.append(("shrink", f"{shrunk} outputs shrunk"))


def _assemble(work: Work) -> list[ModelMessage]:
    """The governed history: each kept position's governed message, and the window's notice.

    The kept positions are a few runs (the head, sticky messages, the tail), found with
    C-level searches of the kept flags, and each run is read in one pass that calls no Python
    function per message, so this costs little more than the list it returns.
    """
    known = work.known
    runs = _runs(work.kept)
    for start, end in runs:
        position = known.find(0, start, end)
        while position >= 0:
            work.materialise(position)
            position = known.find(0, position + 1, end)
    output: list[ModelMessage] = []
    for start, end in runs:
        governed = work.messages[start:end]
        read, indices = _reader(work.base, start, end, governed)
        # A position's base message is read only where it is sent as it is: a caller's
        # history may load each message on demand.
        output += [
            read(index) if message is None else message  # type: ignore[arg-type]
            for index, message in zip(indices, governed, strict=True)
        ]
    if work.notice is not None:
        before = work.notice_before
        at = len(output) if before is None else work.kept.count(1, 0, before)
        output.insert(at, work.notice)
    return output


def _reader(
    base: Messages, start: int, end: int, governed: list[ModelMessage | None]
) -> tuple[Callable[[int], ModelMessage], Sequence[int | None]]:
    """How to read the base messages of positions ``[start, end)``: a function and the index
    to call it with at each position (see ``Repaired.reader``)."""
    if isinstance(base, Repaired):
        return base.reader(start, end, governed)
    return base.__getitem__, range(start, end)


def _runs(kept: bytearray) -> list[tuple[int, int]]:
    """The runs of kept positions, as (first, last + 1)."""
    runs = []
    start = kept.find(1)
    while start >= 0:
        end = kept.find(0, start)
        if end < 0:
            end = len(kept)
        runs.append((start, end))
        start = kept.find(1, end)
    return runs


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
