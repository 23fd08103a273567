"""One request through the pipeline: prepare the history, repair its pairs, plan the steps on
a ``Work``, assemble what to send.

Sync and deterministic: no I/O, no clock, no randomness, and the input list and its messages
are never mutated (changed messages are rebuilt with ``dataclasses.replace``).

Order, graduated as in Duragent (001): pair repair always; then the per-output caps (eviction,
truncation) the policy applies; then, only while the history is over the limit an action aims
at, masking, the sliding window (which also fires on its own triggers), iteration-group
dropping and a last proportional shrink of the newest outputs — stopping as soon as it fits.
Which limit, and whether to act at all or replay the last action, is the ``Governor``'s call.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage

from ._work import Work
from .assemble import assemble
from .budget_note import LARGEST_SHARE, reserve
from .carried import Carry
from .carry import carry_of, over_with_caps, seed
from .facts import MessageFacts, is_budget_note
from .governed import Acted, Governed, ToolDefinitions, tool_definition_tokens
from .landmarks import current_turn, duplicates, landmarks
from .names import Detail, StepName
from .policy import Policy
from .positions import Landmarks, Messages
from .prepare import newest_ids, prepare, prepare_stored, truncated_above
from .prepared import Prepared, WorkCache
from .steps.dedupe import dedupe
from .steps.drop_groups import drop_groups
from .steps.mask import mask, masked_count
from .steps.normalize import normalize
from .steps.repaired import Normalized
from .steps.shrink import shrink
from .steps.window import window
from .tokens import Tokenizer, context_window, instructions_of, tokenizer_for

Steps = list[tuple[StepName, Detail]]


@dataclass
class Setup:
    """One request's history prepared and repaired, and its budget: what every plan for the
    request starts from."""

    policy: Policy
    tokenizer: Tokenizer
    model: str | None
    prepared: Prepared
    normalized: Normalized
    token_ids: dict[int, tuple[str, list[int]]]
    instructions: str | None
    """Instructions given for the request (overriding the history's)."""
    instructions_text: str | None
    """The instructions the request carries, given or from the history."""
    instructions_tokens: int
    system_parts: int
    """Tokens of the system prompt parts in the history (always sent)."""
    tool_tokens: int
    margin: int
    window_tokens: int
    budget: int
    """Tokens the history may take."""
    turn_start: int
    latest_prompt: int | None
    pinned_positions: frozenset[int]
    landmarks: Landmarks
    duplicates: dict[tuple[int, int], tuple[int, int]]
    carried: Carry | None
    carried_shared: int | None
    note_reserve: int = 0
    """Room held back for the budget note (0: the request carries none; see ``budget_note``)."""

    @property
    def note_on(self) -> bool:
        """Whether the request carries a budget note."""
        return self.note_reserve > 0

    def limit(self, share: float = 1.0) -> int:
        """Most tokens the messages may take to use ``share`` of the history budget (system
        prompt parts are in the messages and always kept), the budget note's room held back."""
        return max(int(self.budget * share) - self.note_reserve, 0) + self.system_parts


def set_up(
    messages: Sequence[ModelMessage],
    policy: Policy,
    cache: WorkCache,
    *,
    model: str | None,
    pinned: frozenset[int] | set[int],
    tool_definitions: ToolDefinitions,
    tool_tokens: int | None,
    instructions: str | None,
    context_window_tokens: int | None,
    facts: Sequence[MessageFacts] | None,
) -> Setup:
    """Prepare and repair a history and work out its budget (see ``Governor.govern``)."""
    tokenizer = tokenizer_for(model)
    token_ids: dict[int, tuple[str, list[int]]] = {}
    prepared, source = _prepared(messages, facts, policy, cache, tokenizer, token_ids)
    if policy.dedupe.enabled and policy.dedupe.keys:
        prepared.reads.extend(prepared.facts, source, policy.dedupe.keys)
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
    budget = policy.history_budget(window_tokens, system_parts + instructions_tokens + tools)
    note_reserve = _note_reserve(policy, window_tokens, budget, tokenizer, prepared, source)
    normalized, carried, shared = _repaired(prepared, source, policy, tokenizer)
    turn_start, latest_prompt = current_turn(normalized)
    pinned_indices = (i for i in pinned if 0 <= i < len(input_facts))
    pinned_positions = frozenset(
        p for p in map(normalized.position_of, pinned_indices) if p is not None
    )
    return Setup(
        policy=policy,
        tokenizer=tokenizer,
        model=model,
        prepared=prepared,
        normalized=normalized,
        token_ids=token_ids,
        instructions=instructions,
        instructions_text=instructions_text,
        instructions_tokens=instructions_tokens,
        system_parts=system_parts,
        tool_tokens=tools,
        margin=int(window_tokens * policy.safety_margin),
        window_tokens=window_tokens,
        budget=budget,
        turn_start=turn_start,
        latest_prompt=latest_prompt,
        pinned_positions=pinned_positions,
        landmarks=landmarks(prepared, normalized),
        duplicates=duplicates(prepared, normalized) if policy.dedupe.enabled else {},
        carried=carried,
        carried_shared=shared,
        note_reserve=note_reserve,
    )


def _note_reserve(
    policy: Policy,
    window: int,
    budget: int,
    tokenizer: Tokenizer,
    prepared: Prepared,
    source: Messages,
) -> int:
    """The room the budget note takes at most, when the request carries one: the policy asks
    for it, the history has messages and no note of an earlier pass (a governed request governed
    again keeps its own), and the note takes at most a tenth of the budget."""
    if not policy.awareness.budget_note or not prepared.facts:
        return 0
    if any(is_budget_note(source[index]) for index in prepared.system_at):
        return 0
    tokens = reserve(policy, window, tokenizer)
    return 0 if tokens * LARGEST_SHARE > budget else tokens


def _prepared(
    messages: Sequence[ModelMessage],
    facts: Sequence[MessageFacts] | None,
    policy: Policy,
    cache: WorkCache,
    tokenizer: Tokenizer,
    token_ids: dict[int, tuple[str, list[int]]],
) -> tuple[Prepared, Messages]:
    """The pass over the history (extending the cache's) and the messages to read it from."""
    source: Messages
    if facts is None:
        prepared = prepare(messages, tokenizer, cache, token_ids, truncated_above(policy))
        assert prepared.messages is not None
        source = prepared.messages
    else:
        if len(facts) != len(messages):
            raise ValueError(f"{len(facts)} facts given for {len(messages)} messages")
        prepared = prepare_stored(facts, cache)
        source = messages
    # Outputs tokenised by earlier calls but not truncated yet (the current turn's, which
    # truncation scope "older" leaves whole until the turn ends) are truncated from their ids.
    for key, entry in cache.token_ids.items():
        token_ids.setdefault(key, entry)
    return prepared, source


def _repaired(
    prepared: Prepared, source: Messages, policy: Policy, tokenizer: Tokenizer
) -> tuple[Normalized, Carry | None, int | None]:
    """The history's pair repair (taking up the previous call's), what that call carried, and
    how many leading positions the two repairs share (None: to be compared)."""
    extends = prepared.extends
    normalized = normalize(
        source,
        prepared.facts,
        tokenizer,
        policy.dangling_call_text,
        prepared.pairing,
        extends.normalized if extends is not None else None,
        in_place=prepared.grows,
    )
    prepared.normalized = normalized
    carried = extends.carry if extends is not None else None
    shared = (
        normalized.shared
        if carried is not None
        and extends is not None
        and extends.normalized is not None
        and carried.facts is extends.normalized.facts
        else None
    )
    return normalized, carried, shared


def new_work(
    setup: Setup,
    limit: int,
    *,
    turn_start: int | None = None,
    repeated: dict[tuple[int, int], tuple[int, int]] | None = None,
) -> Work:
    """A fresh plan for the request, aiming at ``limit`` tokens of messages; outputs from
    ``turn_start`` on (default: the current turn's start) count as the current turn's, and
    ``repeated`` (default: every repeated output) are the copies de-duplication may replace."""
    normalized = setup.normalized
    return Work(
        policy=setup.policy,
        tokenizer=setup.tokenizer,
        base=normalized.messages,
        facts=normalized.facts,
        index=normalized.index,
        origins=normalized.origins,
        removed=normalized.removed,
        token_ids=setup.token_ids,
        pinned_positions=setup.pinned_positions,
        limit=limit,
        budget_limit=setup.limit(),
        turn_start=setup.turn_start if turn_start is None else turn_start,
        latest_prompt=setup.latest_prompt,
        window_tokens=setup.window_tokens,
        landmarks=setup.landmarks,
        outside_tokens=setup.instructions_tokens + setup.tool_tokens + setup.note_reserve,
        note_room=setup.note_reserve,
        carried=setup.carried,
        carried_shared=setup.carried_shared,
        duplicates=setup.duplicates if repeated is None else repeated,
    )


def caps_steps(setup: Setup) -> Steps:
    """The steps every request takes before any budget step: pair repair and the caps."""
    steps: Steps = []
    normalized, policy = setup.normalized, setup.policy
    if normalized.changed:
        # Counting walks every repaired message: left to the report.
        steps.append(("normalize", lambda: _repairs(normalized)))
    if policy.eviction.enabled:
        steps.append(("evict", ""))
    if policy.tool_output.enabled or policy.text.enabled:
        steps.append(("truncate", ""))
    return steps


def act(setup: Setup, limit: int, *, masked_enough: int | None = None) -> tuple[Work, Steps]:
    """A new plan: every budget step the policy has, while the messages exceed ``limit``; or,
    when masking alone brings them to ``masked_enough`` tokens or fewer, masking alone (it
    keeps the request's prefix up to the first result it masks, where moving the window would
    rewrite everything after the head)."""
    work = new_work(setup, limit)
    steps = caps_steps(setup)
    policy = work.policy
    if policy.masking.enabled and (policy.masking.apply == "always" or over_with_caps(work)):
        mask(work)
        steps.append(("mask", masked_step(work)))
    # With masking planned, what the previous call governed that still holds is taken over.
    seed(work)
    enough = masked_enough is not None and work.mask_span is not None
    if enough and not work.exact_over(masked_enough):
        dedupe_step(work, steps)
        return work, steps
    omitted = window(work)
    if omitted is not None:
        steps.append(("window", f"{omitted} messages omitted"))
    # The last resorts cut into the current turn: only as far as the budget needs, whatever
    # lower mark the action aimed at.
    work.limit = setup.limit()
    if policy.drop_groups and work.exact_over():
        dropped = drop_groups(work)
        steps.append(("drop_groups", f"{dropped} iteration groups dropped"))
    dedupe_step(work, steps)
    if policy.shrink_newest and work.exact_over():
        shrunk = shrink(work)
        steps.append(("shrink", f"{shrunk} outputs shrunk"))
    return work, steps


def masked_step(work: Work) -> Callable[[], str]:
    """Masking's detail: counting the masked results walks the span, so left to the report."""
    return lambda: f"{masked_count(work)} results masked"


def dedupe_step(work: Work, steps: Steps) -> None:
    """Replace the older copies of repeated outputs, if any, and say so."""
    if work.duplicates:
        referenced = dedupe(work)
        if referenced:
            steps.append(("dedupe", f"{referenced} repeated outputs replaced by a reference"))


def finish(
    setup: Setup, work: Work, steps: Steps, cache: WorkCache, acted: Acted | None
) -> Governed:
    """The governed request from a finished plan; what the next call may carry over is kept."""
    prepared = setup.prepared
    output = assemble(work)
    prepared.extends = None
    prepared.carry = carry_of(work)
    cache.token_ids = newest_ids(setup.token_ids)
    if setup.instructions is not None:
        out_instructions: str | None = setup.instructions
    elif setup.instructions_text is None:
        # No input message carries instructions, so no output message does.
        out_instructions = None
    else:
        out_instructions = instructions_of(output)
    tokenizer = setup.tokenizer
    out_instr_tokens = tokenizer.count(out_instructions) if out_instructions else 0
    # Every kept position holds its governed message's count (a dropped one 0), and system
    # prompt parts are never rewritten, so the output's totals need no pass over its messages.
    note_tokens = work.note_tokens()
    tokens_after = work.total_tokens + work.notice_tokens() + note_tokens + out_instr_tokens
    system_after = (
        sum(work.facts[p].system_tokens for p in setup.landmarks.system if work.kept[p])
        + out_instr_tokens
    )
    budget = setup.budget
    fits = tokens_after - system_after <= budget
    summary = {
        "model": setup.model,
        "window_tokens": setup.window_tokens,
        "system_tokens": system_after,
        "tool_definition_tokens": setup.tool_tokens,
        "safety_margin_tokens": setup.margin,
        "budget_tokens": budget,
        "tokens_before": prepared.tokens + setup.instructions_tokens,
        "tokens_after": tokens_after,
        "fits": fits,
        "reason": None if fits else _reason(setup, work),
        "acted": acted,
        "budget_note": None
        if work.note is None
        else {**work.note.figures(), "tokens": note_tokens, "written": work.note_written},
    }
    governed = Governed(
        output,
        work.evicted(),
        work,
        summary,
        setup.normalized,
        prepared.facts,
        steps,
        prepared.reports,
        prepared.totals,
    )
    prepared.result = weakref.ref(governed)
    return governed


def _repairs(normalized: Normalized) -> str:
    """What pair repair did, in a step's words."""
    synthesized = sum(o.count(None) for o in normalized.origins.values())
    orphans = sum(len(r) for r in normalized.removed.values())
    return f"{synthesized} results synthesized, {orphans} orphans removed"


def _reason(setup: Setup, work: Work) -> str:
    """Why the budget could not be met: what is left that governance may not remove."""
    if setup.budget == 0:
        return (
            "no budget left for history: system prompt, instructions, tool definitions, "
            "reserved output and safety margin take the whole window"
        )
    latest = work.tokens[work.latest_prompt] if work.latest_prompt is not None else 0
    pinned = sum(work.tokens[p] for p in work.pinned_positions if work.kept[p])
    return (
        f"over budget after every step: {setup.budget} tokens of budget; the latest user "
        f"request takes {latest}, pinned messages {pinned}, system prompt parts "
        f"{setup.system_parts}, instructions {setup.instructions_tokens}; the rest of the "
        "current turn was shrunk as far as the policy allows"
    )
