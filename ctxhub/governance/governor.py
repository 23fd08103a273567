"""``Governor``: governs one session's requests, keeping the prompt cache warm.

Providers bill the unchanged prefix of a request at a fraction of the input price (a tenth,
for Anthropic's cache reads), so a governor that rewrites the early part of the request every
turn makes the session pay full price every turn. A ``Governor`` acts only at a high-water
mark, cutting down to a low-water mark, and between actions replays its last decisions — the
same window cut and notice, the same masked results, the same outputs counted as older — so
what it sent before goes out byte-identical with the new messages appended. A request that
would pass the budget always triggers an action.

Its state is plain data (``state()``), and a Governor rebuilt from it (``from_state``) sends
the same next request as the one that wrote it: the same sequence of histories gives the same
requests in any process. An edited history (a message changed or removed, other pins) is a new
start. Besides that state, a Governor keeps what makes the next call cost only its new
messages (``WorkCache``); dropping it changes no request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from hashlib import blake2b
from threading import Lock
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.messages import ModelMessage

from ._work import Work
from .carry import seed
from .counting import MessageFacts
from .governed import Acted, Governed, ToolDefinitions
from .pipeline import (
    Setup,
    Steps,
    act,
    caps_steps,
    dedupe_step,
    finish,
    masked_step,
    new_work,
    sent_tokens,
    set_up,
)
from .policy import LARGEST, Policy
from .prepare import WorkCache
from .steps.mask import mask
from .steps.window import replay_window, triggered


class _State(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Plan(_State):
    """What the last action decided, in positions of the repaired history."""

    turn_start: int = Field(ge=0, le=LARGEST)
    """Outputs before this position are capped as older ones; later ones as the current
    turn's, until the next action."""
    head_end: int = Field(ge=-1, le=LARGEST)
    cut: int | None = Field(default=None, ge=0, le=LARGEST)
    """Where the kept tail starts; the window drops what lies between head and cut but the
    ``spared`` positions. None: the window dropped nothing."""
    spared: tuple[int, ...] = ()
    omitted: int = Field(default=0, ge=0, le=LARGEST)
    """The count the window's notice states."""
    mask_span: tuple[int, int, int, int] | None = None
    """First and last (position, part) of the masked results, inclusive."""
    repeated: tuple[tuple[int, int, int, int], ...] = ()
    """(position, part) of an older copy of an output and of its newest copy then."""
    anchors: tuple[tuple[int, int | None], ...] = ()
    """(position, input index) of the positions above: the history must still repair to
    the same message there for the plan to hold."""
    replayable: bool = True
    """False when the action took a last resort (iteration groups dropped, outputs shrunk):
    the next request acts again."""


class GovernorState(_State):
    """A Governor's decisions, as JSON (see ``Governor.state``)."""

    version: Literal[1] = 1
    size: int = Field(default=0, ge=0, le=LARGEST)
    """How many messages the last request's history had."""
    digest: str = Field(default="", max_length=64)
    """Of the facts of all but the last of those messages (the latest request may still be
    completed in place, by an agent run adding its instructions)."""
    pinned: tuple[int, ...] = ()
    """Positions pinned in the last request."""
    plan: Plan | None = None
    sent: int = Field(default=0, ge=0, le=LARGEST)
    """Tokens of the messages of the last request."""
    growth: int = Field(default=0, ge=0, le=LARGEST)
    """Tokens a request adds to the one before, on average lately."""


class Governor:
    """Governs the requests of one agent run or stored session (see the module docstring).

    >>> governor = Governor(policy, model="openai:gpt-4o")
    >>> governed = governor.govern(history)    # before every request
    >>> state = governor.state()               # JSON-ready; Governor.from_state continues it

    Calls are serialised (a Governor may be shared by threads). Messages are values: a caller
    changes an older message by replacing it in the list, as pydantic-ai does.
    """

    def __init__(self, policy: Policy | None = None, *, model: str | None = None) -> None:
        self.policy = policy or Policy()
        self.model = model
        self._state = GovernorState()
        self._cache = WorkCache()
        self._lineage = _Lineage()
        self._lock = Lock()

    @classmethod
    def from_state(
        cls,
        state: GovernorState | dict[str, Any],
        policy: Policy | None = None,
        *,
        model: str | None = None,
    ) -> Self:
        """A Governor that continues from ``state`` (``GovernorState`` or its JSON); a state
        that is not one raises pydantic's ``ValidationError``."""
        governor = cls(policy, model=model)
        governor._state = GovernorState.model_validate(state)
        return governor

    def state(self) -> dict[str, Any]:
        """What this Governor decided, as JSON-ready plain data."""
        with self._lock:
            state = self._state
            if self._lineage.facts is not None:
                state = state.model_copy(update={"digest": self._lineage.digest(state.size)})
            return state.model_dump(mode="json")

    def restart(self) -> None:
        """Forget the decisions: the next request is a new start, as after an edit (what makes
        calls cheap is kept)."""
        with self._lock:
            self._state = GovernorState()
            self._lineage = _Lineage()

    def govern(
        self,
        messages: Sequence[ModelMessage],
        *,
        pinned: frozenset[int] | set[int] = frozenset(),
        tool_definitions: ToolDefinitions = (),
        tool_tokens: int | None = None,
        instructions: str | None = None,
        context_window_tokens: int | None = None,
        facts: Sequence[MessageFacts] | None = None,
    ) -> Governed:
        """The next request for ``messages``: what to send, and a report of why.

        ``pinned`` holds input indices that must survive verbatim. Tool definitions are
        counted from ``tool_definitions`` unless ``tool_tokens`` gives their count.
        ``instructions`` overrides the latest request's instructions (what an agent run
        sends). The context window is ``policy.context_window``, else
        ``context_window_tokens``, else the model's default.

        ``facts`` are the messages' facts for the model's encoding (``message_facts``, perhaps
        stored with ``MessageFacts.to_json``), one object per message. Given them, governance
        tokenises no input and reads ``messages`` only by position (``messages[i]``) and only
        where it must: messages it sends, messages it changes (caps, masks, pair repair) and
        the request whose instructions it uses; the report comes from the facts. So
        ``messages`` may load each message on demand.
        """
        with self._lock:
            setup = set_up(
                messages,
                self.policy,
                self._cache,
                model=self.model,
                pinned=pinned,
                tool_definitions=tool_definitions,
                tool_tokens=tool_tokens,
                instructions=instructions,
                context_window_tokens=context_window_tokens,
                facts=facts,
            )
            return self._govern(setup)

    def _govern(self, setup: Setup) -> Governed:
        hysteresis = self.policy.hysteresis
        if not hysteresis.enabled:
            work, steps = act(setup, setup.limit())
            self._remember(setup, None, same_lineage=False)
            return finish(setup, work, steps, self._cache, None)
        started = self._started(setup)
        plan = self._state.plan if started is None else None
        if plan is None or not _holds(plan, setup):
            started = started or "edited"
            plan = _fresh(setup)
        continued = started is None
        replayed, replay_steps = replay(setup, plan)
        now = sent_tokens(replayed)
        state = self._state
        growth = _growth(state, now) if continued else state.growth
        due = _due(setup, replayed, hysteresis.high_water)
        if due is None:
            self._remember(setup, plan, now, growth, same_lineage=continued)
            return finish(setup, replayed, replay_steps, self._cache, started)
        work, steps = _cheapest_action(setup, plan, replayed, growth)
        work.materialised |= replayed.materialised  # read to find the action due
        sent = sent_tokens(work)
        if due == "high_water" and continued and now - sent < hysteresis.min_reclaim_tokens:
            # Below the budget, an action must free enough to pay for the cache it breaks.
            replayed.materialised |= work.materialised  # read to weigh the action
            self._remember(setup, plan, now, growth, same_lineage=True)
            return finish(setup, replayed, replay_steps, self._cache, None)
        self._remember(setup, plan_of(setup, work, steps), sent, growth, same_lineage=continued)
        return finish(setup, work, steps, self._cache, started or due)

    def _started(self, setup: Setup) -> Acted | None:
        """Whether this request is a new start ("start": the first, "edited": a history that
        does not begin with the last one's), None when it continues the last one."""
        state = self._state
        facts = setup.prepared.facts
        if state.size == 0:
            return "start"  # nothing governed yet, or an empty history: no prefix to keep
        if len(facts) < state.size or state.pinned != _pinned(setup):
            return "edited"
        if setup.prepared.follows is not None and setup.prepared.follows == self._lineage.serial:
            return None  # the pass over this history extended the last one's
        # Otherwise compared by digest: a Governor rebuilt from its state, a history copied.
        known = state.digest if self._lineage.facts is None else self._lineage.digest(state.size)
        lineage = _Lineage(facts)
        if lineage.digest(state.size) != known:
            return "edited"
        self._lineage = lineage
        return None

    def _remember(
        self,
        setup: Setup,
        plan: Plan | None,
        sent: int = 0,
        growth: int = 0,
        *,
        same_lineage: bool,
    ) -> None:
        prepared = setup.prepared
        if not same_lineage:
            self._lineage = _Lineage()
        self._lineage.facts = prepared.facts
        self._lineage.serial = prepared.serial
        self._state = GovernorState(
            size=len(prepared.facts),
            pinned=_pinned(setup),
            plan=plan,
            sent=sent,
            growth=growth,
        )


class _Lineage:
    """The histories a Governor governed since its last new start, each beginning with the one
    before: the digest of their facts, worked out only when asked for (``state``, or a history
    not known to extend the last one), and then only for the facts not digested yet."""

    def __init__(self, facts: list[MessageFacts] | None = None) -> None:
        self.facts = facts
        self.serial: int | None = None
        self._hasher = blake2b(digest_size=16)
        self._count = 0

    def digest(self, size: int) -> str:
        """The digest of all but the last of the first ``size`` facts (the latest request may
        still be completed in place, by an agent run adding its instructions)."""
        assert self.facts is not None
        end = max(size - 1, 0)
        for fact in self.facts[self._count : end]:
            self._hasher.update(json.dumps(fact.to_json(), sort_keys=True).encode())
            self._hasher.update(b"\n")
        self._count = max(self._count, end)
        return self._hasher.hexdigest()


def _growth(state: GovernorState, now: int) -> int:
    """The average growth per request, updated with this one's (recent requests weigh most)."""
    added = max(now - state.sent, 0)
    return added if state.growth == 0 else (3 * state.growth + added) // 4


def _cheapest_action(setup: Setup, plan: Plan, replayed: Work, growth: int) -> tuple[Work, Steps]:
    """The action that costs the session least per request until the next, each candidate
    costed as a provider bills cached and written input: masking a batch of older results
    alone, within the window as it stands (which keeps the request's prefix up to the first
    result it masks), or moving the window too (which rewrites everything after the head, but
    leaves more room before the next action). Only moving the window is sure to reach the
    low-water mark; the others must at least get under the high-water mark."""
    hysteresis = setup.policy.hysteresis
    low, high = setup.limit(hysteresis.low_water), setup.limit(hysteresis.high_water)
    full = act(setup, low)
    if sent_tokens(full[0]) < low // 2 and any(name == "window" for name, _ in full[1]):
        # The window stopped far below the mark, at a message too large for the room left:
        # aiming at the high-water mark keeps the context that message and those after it
        # carry, rather than a request of next to nothing.
        full = act(setup, high)
    candidates = [full]
    if setup.policy.masking.enabled:
        candidates.append(_remasked(setup, plan))
        if plan.cut is not None:
            candidates.append(act(setup, low, masked_enough=high))
    fitting = [c for c in candidates[1:] if not c[0].exact_over(high)]
    pace = max(growth, setup.budget // 100, 1)
    chosen = min(
        [full, *fitting],
        key=lambda action: _cost_per_request(replayed, action[0], high, pace),
    )
    for work, _ in candidates:
        chosen[0].materialised |= work.materialised  # read to weigh the candidates
    return chosen


def _remasked(setup: Setup, plan: Plan) -> tuple[Work, Steps]:
    """``plan`` with masking planned again over the messages its window keeps."""
    probe = new_work(setup, setup.limit())
    if plan.cut is not None:
        replay_window(probe, plan.head_end, plan.cut, plan.spared, plan.omitted)
    mask(probe)
    if probe.mask_span is None or probe.mask_span == plan.mask_span:
        return replay(setup, plan)
    return replay(setup, plan.model_copy(update={"mask_span": probe.mask_span}))


def _cost_per_request(before: Work, after: Work, high: int, pace: int) -> float:
    """Cache-weighted input per request from this action to the next: the action's request
    (its unchanged prefix read from the cache, the rest written), then requests growing by
    ``pace`` until the high-water mark (each read from the cache but what it adds)."""
    tokens = sent_tokens(after)
    prefix = _unchanged_prefix(before, after)
    following = max(high - tokens, 0) / pace
    action = CACHE_WRITE * (tokens - prefix) + CACHE_READ * prefix
    rest = following * (CACHE_READ * (tokens + high) / 2 + CACHE_WRITE * pace)
    return (action + rest) / (following + 1)


CACHE_READ, CACHE_WRITE = 0.1, 1.25
"""What providers bill for cached input read and written, per input token (Anthropic's)."""


def _unchanged_prefix(before: Work, after: Work) -> int:
    """Tokens of the leading messages two plans of one history send alike."""
    total = 0
    kept_before, kept_after = before.kept, after.kept
    for position in range(len(kept_after)):
        notices = (
            before.notice if before.notice_before == position else None,
            after.notice if after.notice_before == position else None,
        )
        if notices != (None, None):
            if notices[0] != notices[1]:
                break
            total += after.notice_tokens()
        if kept_before[position] != kept_after[position]:
            break
        if kept_after[position]:
            # None stands for the message as it is (not read: it may load on demand).
            if before.messages[position] != after.messages[position]:
                break
            total += after.tokens[position]
    return total


def replay(setup: Setup, plan: Plan) -> tuple[Work, Steps]:
    """The request with ``plan``'s decisions: the new messages get only their caps."""
    work = new_work(
        setup,
        setup.limit(),
        turn_start=plan.turn_start,
        repeated={(a, b): (c, d) for a, b, c, d in plan.repeated},
    )
    steps = caps_steps(setup)
    if plan.mask_span is not None:
        work.mask_span = plan.mask_span
        steps.append(("mask", masked_step(work)))
    seed(work)
    if plan.cut is not None:
        replay_window(work, plan.head_end, plan.cut, plan.spared, plan.omitted)
        steps.append(("window", f"{plan.omitted} messages omitted"))
    dedupe_step(work, steps)
    return work, steps


def plan_of(setup: Setup, work: Work, steps: Steps) -> Plan:
    """The decisions of an action, to replay until the next."""
    taken = {name for name, _ in steps}
    cut: int | None = None
    spared: list[int] = []
    if work.notice is not None:
        cut = work.tail_start
        kept = work.kept
        at = kept.find(1, work.head_end + 1, cut)
        while at >= 0:
            spared.append(at)
            at = kept.find(1, at + 1, cut)
    span = work.mask_span
    repeated = tuple((*older, *newest) for older, newest in work.duplicates.items())
    positions = {work.turn_start, work.head_end, *spared}
    if cut is not None:
        positions.update((cut - 1, cut))
    if span is not None:
        positions.update((span[0], span[2]))
    index = setup.normalized.index
    return Plan(
        turn_start=work.turn_start,
        head_end=work.head_end,
        cut=cut,
        spared=tuple(spared),
        omitted=work.notice_omitted if cut is not None else 0,
        mask_span=span,
        repeated=repeated,
        anchors=tuple((p, index[p]) for p in sorted(positions) if 0 <= p < len(index)),
        replayable=not taken.intersection(("drop_groups", "shrink")),
    )


def _fresh(setup: Setup) -> Plan:
    """The plan of a new start, which has no cached prefix to keep: the caps, older copies of
    repeated outputs replaced, and masking if the policy masks always; nothing dropped."""
    work = new_work(setup, setup.limit())
    policy = setup.policy.masking
    if policy.enabled and policy.apply == "always":
        mask(work)
    return plan_of(setup, work, [])


def _holds(plan: Plan, setup: Setup) -> bool:
    """Whether the repaired history still has the plan's messages where the plan put them."""
    if not plan.replayable:
        return False
    index = setup.normalized.index
    size = len(index)
    if plan.turn_start > size or (plan.cut is not None and plan.cut > size):
        return False
    return all(p < size and index[p] == at for p, at in plan.anchors)


def _due(setup: Setup, work: Work, high_water: float) -> Acted | None:
    """Why the replayed request calls for an action, or None when it may go as it is."""
    if work.exact_over(setup.limit()):
        return "over_budget"
    if work.exact_over(setup.limit(high_water)):
        return "high_water"
    if triggered(work):
        return "trigger"
    return None


def _pinned(setup: Setup) -> tuple[int, ...]:
    return tuple(sorted(setup.pinned_positions))


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
    """Govern one request on its own: a fresh ``Governor``'s first (see ``Governor.govern``).

    An agent or session that governs request after request keeps one ``Governor`` instead:
    it pays only for the new messages, and keeps the prompt cache warm.
    """
    return Governor(policy, model=model).govern(
        messages,
        pinned=pinned,
        tool_definitions=tool_definitions,
        tool_tokens=tool_tokens,
        instructions=instructions,
        context_window_tokens=context_window_tokens,
        facts=facts,
    )
