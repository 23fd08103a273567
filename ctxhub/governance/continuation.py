"""The next request from the last one sent and the new messages alone.

Between a Governor's actions the next request is the previous one with the new messages
appended, each with only its caps (``plans.replay``): the earlier messages go out as they went.
So whoever holds the last request sent, its report and the state it left can answer the next
one from the new messages alone, in time and reads that grow with them, not with the history
(a web process that never held the session, say). ``continued`` does that, and gives exactly
what ``Governor.govern`` would for the whole history, or None when it cannot be sure of that
and the whole history must be governed:

* the Governor would act: the request would pass the high-water mark or the budget, or the
  policy has window triggers;
* the policy applies a rule to every request (masking ``always``, ``Dedupe.keys``) or writes a
  budget note, which may rewrite earlier messages or add one at the end;
* pair repair would touch the new messages or the ones before them: a call not answered right
  after it, a result not answering the response right before it, or a last message sent that
  was a response still waiting for its results;
* a new message states what decides the rest of the request: a system prompt part, a notice
  governance wrote, an aborted turn, instructions given without being counted as such; or a
  new user prompt where the policy truncates user prompts in every message (the latest one is
  spared, so the one it replaces as latest would change);
* the last request was a new start or an action (its report's zones are the action's);
* the state was written before it kept the figures this needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage, ModelRequest

from .facts import MessageFacts
from .governor import GovernorState, chained, growth_with, message_digest
from .message_reports import plain_report
from .parts import Transform
from .policy import Policy
from .report import ContextReport, MessageReport, StepReport
from .steps.cap import governed_version, smallest_cap
from .tokens import Tokenizer, context_window, tokenizer_for


@dataclass(frozen=True, slots=True)
class LastRequest:
    """A request a Governor sent, as far as the next is continued from it: how many messages
    it sent and the last of them, its report, and the state it left."""

    sent: int
    """How many messages it sent."""
    last_message: ModelMessage
    """The last of them."""
    report: ContextReport
    """Its figures; its message reports are not read (see ``Continued.added``)."""
    state: GovernorState
    tail_facts: Sequence[MessageFacts]
    """The facts of the last two messages of the history it was governed from (of its one
    message, for a history of one)."""
    acted: bool
    """Whether it was a new start or an action (``Governed.acted``): its report then draws
    the zones of the action's plan, which the requests after it do not (a window that cut
    nothing leaves no head), so the one after it is governed whole."""


@dataclass(frozen=True, slots=True)
class Continued:
    """The next request, continued from the last one: what ``Governor.govern`` gives for the
    whole history, with its state (``Governor.state``)."""

    added: list[ModelMessage]
    """The new messages as sent: the request is the last one's messages, then these."""
    report: ContextReport
    """The report's figures and steps; its message reports are the last report's (as given:
    none when it was given without them) followed by ``added_reports``."""
    added_reports: list[MessageReport]
    evicted: dict[str, str]
    """Full texts of the outputs the new messages evicted, by reference."""
    state: GovernorState
    prefix_tokens: int
    """Tokens of the last request's messages, all sent again as they were."""


def continued(
    policy: Policy,
    last: LastRequest,
    new: Sequence[ModelMessage],
    new_facts: Sequence[MessageFacts],
    *,
    model: str | None,
    tool_tokens: int,
    context_window_tokens: int | None = None,
) -> Continued | None:
    """The request for the last one's history grown by ``new`` (with their ``new_facts``),
    as a Governor continuing from ``last.state`` sends it; None when only governing the whole
    history can tell (see the module docstring). The caller vouches that the history is the
    last one's with ``new`` appended, under the same pins, and that ``policy`` is the one the
    last request was governed under."""
    state = last.state
    plan = state.plan
    report = last.report
    if (
        not new
        or last.acted
        or len(new) != len(new_facts)
        or plan is None
        or not plan.replayable
        or state.instructions_tokens is None
        or state.system_tokens is None
        or state.messages != last.sent
        or not _replays_alone(policy)
        or not _stands_alone(last.tail_facts, new_facts)
    ):
        return None
    tokenizer = tokenizer_for(model)
    window = policy.context_window or context_window_tokens or context_window(model)
    # What the last request carried besides its messages, checked against its report.
    sent_instructions = report.tokens_after - state.sent
    outside = state.system_tokens + state.instructions_tokens
    if (
        report.model != model
        or report.encoding != tokenizer.encoding_name
        or report.system_tokens != state.system_tokens + sent_instructions
        or report.budget_tokens
        != policy.history_budget(report.window_tokens, outside + report.tool_definition_tokens)
        or message_digest(last.last_message) != state.last
    ):
        return None
    latest = _latest_prompt(new_facts)
    if latest is not None and policy.text.limit and policy.text.scope == "all":
        return None
    agree, instructions = _instructions(new, new_facts)
    if not agree:
        return None
    if instructions is None:
        instructions_tokens, sent_after = state.instructions_tokens, sent_instructions
    else:
        instructions_tokens = sent_after = tokenizer.count(instructions) if instructions else 0
    budget = policy.history_budget(window, state.system_tokens + instructions_tokens + tool_tokens)

    capping = _Capping(policy, tokenizer, new_facts, latest)
    governed = [capping.governed(number, message) for number, message in enumerate(new)]
    now = state.sent + sum(tokens for _, tokens, _ in governed)
    # Past the high-water mark or the budget (``actions.action_due``, ``Setup.limit``), the
    # Governor acts.
    shares = (1.0, policy.hysteresis.high_water)
    if any(now > max(int(budget * share), 0) + state.system_tokens for share in shares):
        return None

    added = [message for message, _, _ in governed]
    count = last.sent + len(added)
    evicted: dict[str, str] = {}
    tally: dict[str, list[int]] = {}
    added_reports = []
    for number, ((_, tokens, changes), fact) in enumerate(zip(governed, new_facts, strict=True)):
        for part, transform in changes:
            if transform.evicted is not None and transform.ref is not None:
                evicted[transform.ref] = transform.evicted
            counts = tally.setdefault(transform.step, [0, 0])
            counts[0] += 1
            counts[1] += fact.part_tokens[part] - transform.tokens
        index = state.size + number
        added_reports.append(plain_report(index, fact, "tail", True, changes or None, tokens))
    tokens_after = now + sent_after
    system_after = state.system_tokens + sent_after
    figures = {
        "window_tokens": window,
        "system_tokens": system_after,
        "tool_definition_tokens": tool_tokens,
        "safety_margin_tokens": int(window * policy.safety_margin),
        "budget_tokens": budget,
        "tokens_before": report.tokens_before
        - state.instructions_tokens
        + sum(fact.tokens for fact in new_facts)
        + instructions_tokens,
        "tokens_after": tokens_after,
        "messages_before": report.messages_before + len(new),
        "messages_after": count,
        "fits": tokens_after - system_after <= budget,
        "reason": None,
        "steps": [_tallied(step, tally) for step in report.steps],
        "messages": [*report.messages, *added_reports],
        "evicted_refs": sorted({*report.evicted_refs, *evicted}),
    }
    grown = state.model_copy(
        update={
            "size": state.size + len(new),
            "digest": chained(state.digest, [last.tail_facts[-1], *new_facts[:-1]]),
            "sent": now,
            "growth": growth_with(state, now),
            "messages": count,
            "last": message_digest(added[-1]),
            "last_tokens": governed[-1][1],
            "instructions_tokens": instructions_tokens,
        }
    )
    return Continued(
        added,
        report.model_copy(update=figures),
        added_reports,
        evicted,
        grown,
        state.sent,
    )


def _replays_alone(policy: Policy) -> bool:
    """Whether, between actions, the policy sends the earlier messages as they went: no rule
    applied to every request, no budget note, no window trigger to weigh."""
    masking, window = policy.masking, policy.window
    return (
        policy.hysteresis.enabled
        and not (masking.enabled and masking.apply == "always")
        and not (policy.dedupe.enabled and policy.dedupe.keys)
        and not policy.awareness.budget_note
        and not (window.enabled and window.triggers)
    )


def _stands_alone(tail: Sequence[MessageFacts], new: Sequence[MessageFacts]) -> bool:
    """Whether pair repair leaves the new messages, and those before them, as they are: the
    last message before them sent as it was (no response waiting for results, no request
    with results other than exactly those of the response right before it), every new call
    answered in the request right after it, every new result answering the response right
    before it, and no new message empty (repair leaves those out). Nor does a new message
    state what decides the rest of the request (system prompt parts, a notice, an aborted
    turn)."""
    before = tail[-1]
    if not _answers(tail[-2] if len(tail) > 1 else None, before) or before.aborted:
        return False
    if not before.request and before.call_ids:
        return False
    previous = before
    for fact in new:
        if not fact.part_tokens or fact.system_tokens or fact.notice or fact.aborted:
            return False
        if fact.request and not _answers(previous, fact):
            return False
        if not fact.request and not previous.request and previous.call_ids:
            return False  # a response after a response still waiting
        if len(set(fact.call_ids)) != len(fact.call_ids):
            return False
        previous = fact
    return previous.request or not previous.call_ids


def _answers(previous: MessageFacts | None, request: MessageFacts) -> bool:
    """Whether ``request`` (a request, not empty) holds exactly the results of the calls of
    the response right before it (``previous``), and no other."""
    if not request.part_tokens:
        return False
    asked = () if previous is None or previous.request else previous.call_ids
    return sorted(request.result_ids) == sorted(asked)


def _latest_prompt(facts: Sequence[MessageFacts]) -> int | None:
    """The new message holding the history's latest user prompt, if one does."""
    for number in range(len(facts) - 1, -1, -1):
        fact = facts[number]
        if fact.request and fact.user_prompt and not fact.notice:
            return number
    return None


def _instructions(
    new: Sequence[ModelMessage], facts: Sequence[MessageFacts]
) -> tuple[bool, str | None]:
    """Whether the new requests' instructions and facts agree, and the instructions of the
    latest new request carrying some (None: none carries any)."""
    found: str | None = None
    for message, fact in zip(new, facts, strict=True):
        if isinstance(message, ModelRequest):
            if (message.instructions is not None) != fact.instructions:
                return False, None
            if message.instructions is not None:
                found = message.instructions
    return True, found


class _Capping:
    """Caps for the new messages (by their number among them), as the replayed plan applies
    them: their turn started with the plan, so caps scoped to older messages leave them whole,
    and none is pinned or masked (the ``Work`` protocol of ``steps.cap``)."""

    turn_start = 0

    def __init__(
        self,
        policy: Policy,
        tokenizer: Tokenizer,
        facts: Sequence[MessageFacts],
        latest_prompt: int | None,
    ) -> None:
        self.policy = policy
        self.tokenizer = tokenizer
        self.facts = facts
        self.latest_prompt = latest_prompt
        self.token_ids: dict[int, tuple[str, list[int]]] = {}
        self._protected = frozenset(policy.window.protected_tools)
        self._smallest = smallest_cap(policy)

    def exempt(self, position: int) -> bool:
        protected = self._protected
        return bool(protected) and not self.facts[position].tool_names.isdisjoint(protected)

    def governed(
        self, position: int, message: ModelMessage
    ) -> tuple[ModelMessage, int, tuple[tuple[int, Transform], ...]]:
        facts = self.facts[position]
        if facts.largest <= self._smallest:
            return message, facts.tokens, ()
        return governed_version(self, position, message, facts, frozenset())


def _tallied(step: StepReport, tally: dict[str, list[int]]) -> StepReport:
    counts = tally.get(step.step)
    if counts is None:
        return step
    return step.model_copy(
        update={"parts": step.parts + counts[0], "tokens_removed": step.tokens_removed + counts[1]}
    )
