"""``Governor``: governs one session's requests, keeping the prompt cache warm.

Providers bill the unchanged prefix of a request at a fraction of the input price (a tenth,
for Anthropic's cache reads), so a governor that rewrites the early part of the request every
turn makes the session pay full price every turn. A ``Governor`` acts only at a high-water
mark, cutting down to a low-water mark, and between actions replays its last decisions — the
same window cut and notice, the same masked results, the same outputs counted as older — so
what it sent before goes out byte-identical with the new messages appended. A request that
would pass the budget, or on which a window trigger fires, always triggers an action; and what
the policy applies always (masking ``always``, ``Dedupe.keys``) is applied to every request, as
``govern()`` applies it, though it rewrites an output sent before (``acted`` says so).

Its state is plain data (``state()``), and a Governor rebuilt from it (``from_state``) sends
the same next request as the one that wrote it: the same sequence of histories gives the same
requests in any process. An edited history (a message changed or removed, other pins) is a new
start. Besides that state, a Governor keeps what makes the next call cost only its new
messages (``WorkCache``); dropping it changes no request.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import fields
from hashlib import blake2b
from threading import Lock
from typing import Any, Literal, Self

from pydantic import Field
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_core import to_json

from ._work import Work
from .actions import action_due, cheapest_action
from .assemble import assemble, request_tokens, sent_tokens, shared_prefix_tokens
from .facts import MessageFacts
from .governed import Acted, Governed, ToolDefinitions
from .pipeline import (
    Setup,
    Steps,
    act,
    finish,
    set_up,
)
from .plans import (
    Plan,
    State,
    applied,
    fresh_plan,
    note_is_current,
    plan_holds,
    plan_of,
    replay,
    with_note,
    write_note,
)
from .policy import LARGEST, Policy
from .prepared import WorkCache


class GovernorState(State):
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
    messages: int = Field(default=0, ge=0, le=LARGEST)
    """How many messages the last request sent."""
    last: str = Field(default="", max_length=64)
    """The digest of the last of them (the next request may complete it: see ``_sent``)."""
    last_tokens: int = Field(default=0, ge=0, le=LARGEST)
    """Its tokens."""
    instructions_tokens: int | None = Field(default=None, ge=0, le=LARGEST)
    """Tokens of the instructions of the last request's history (its latest request's);
    None in a state written before it was kept."""
    system_tokens: int | None = Field(default=None, ge=0, le=LARGEST)
    """Tokens of the system prompt parts of that history."""


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

    def adopt(self, state: GovernorState | dict[str, Any] | None) -> None:
        """Continue from ``state`` (another process's, say; None: a new start), keeping what
        makes calls cheap. The next request is the one a Governor rebuilt from ``state`` would
        send, and it costs only its new messages when this Governor's last history is the
        start of the one ``state`` was made on (as with processes taking turns on a session).
        A state that is not one raises pydantic's ``ValidationError``."""
        adopted = GovernorState() if state is None else GovernorState.model_validate(state)
        with self._lock:
            self._state = adopted
            self._lineage.adopted = True

    def state(self) -> dict[str, Any]:
        """What this Governor decided, as JSON-ready plain data."""
        with self._lock:
            state = self._state
            lineage = self._lineage
            if lineage.facts is not None and not lineage.adopted:
                digest = lineage.digest(state.size)
                if digest is None:  # digested further since: only the facts know
                    digest = _Lineage(lineage.facts).digest(state.size)
                state = state.model_copy(update={"digest": digest})
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
            if setup.note_on:
                sent_tokens(work)
                write_note(setup, work)  # every request on its own: the note too
            self._remember(setup, None, same_lineage=False)
            return finish(setup, work, steps, self._cache, None)
        started = self._started(setup)
        plan = self._state.plan if started is None else None
        if plan is None or not plan_holds(plan, setup):
            started = started or "edited"
            plan = fresh_plan(setup)
        continued = started is None
        # The previous request, grown; and what goes out unless an action is due: that request
        # with what the policy applies to every request (masking always, dedupe keys).
        grown, replay_steps = replay(setup, plan)
        replayed, rules = grown, applied(setup, plan)
        if rules is not plan:
            plan = rules
            replayed, replay_steps = replay(setup, plan)
            if continued:
                sent_tokens(grown)  # compared with what goes out: every kept message governed
                replayed.materialised |= grown.materialised
        state = self._state
        # Only a continued request is measured whole before the action is decided: a new start
        # keeps the whole history in its replay, and governing all of it (every older output
        # truncated) would cost far more than the action that then cuts it down.
        now = sent_tokens(replayed) if continued else None
        growth = state.growth if now is None else growth_with(state, now + replayed.note_tokens())
        due = action_due(setup, replayed, hysteresis.high_water)
        if due is None:
            return self._replayed(setup, grown, replayed, replay_steps, plan, growth, started)
        work, steps = cheapest_action(setup, plan, grown, growth, started=not continued)
        work.materialised |= replayed.materialised  # read to find the action due
        sent = sent_tokens(work)
        if due == "high_water" and now is not None and now - sent < hysteresis.min_reclaim_tokens:
            # Below the budget, an action must free enough to pay for the cache it breaks.
            replayed.materialised |= work.materialised  # read to weigh the action
            return self._replayed(setup, grown, replayed, replay_steps, plan, growth, started)
        new_plan = plan_of(setup, work, steps)
        if setup.note_on:
            new_plan = with_note(setup, new_plan, write_note(setup, work))
        # The replayed plan sends the previous request, grown: what the action keeps of it.
        shared = shared_prefix_tokens(grown, work) if continued else None
        governed = finish(setup, work, steps, self._cache, started or due)
        return self._sent(setup, governed, work, new_plan, growth, continued, shared)

    def _replayed(
        self,
        setup: Setup,
        grown: Work,
        replayed: Work,
        steps: Steps,
        plan: Plan,
        growth: int,
        started: Acted | None,
    ) -> Governed:
        """Send ``replayed``, no action taken: the previous request grown (``grown``), but
        for what the policy applies to every request, which may change messages it sent."""
        continued = started is None
        acted: Acted | None = started
        shared = None
        if continued and replayed is not grown:
            sent = self._state.messages
            if assemble(replayed)[:sent] != assemble(grown)[:sent]:
                acted = "always"
                shared = shared_prefix_tokens(grown, replayed)
        plan, rewritten = _noted(setup, replayed, plan, continued)
        if rewritten is not None:
            shared = rewritten if shared is None else min(shared, rewritten)
        governed = finish(setup, replayed, steps, self._cache, acted)
        return self._sent(setup, governed, replayed, plan, growth, continued, shared)

    def _sent(
        self,
        setup: Setup,
        governed: Governed,
        work: Work,
        plan: Plan,
        growth: int,
        continued: bool,
        shared: int | None = None,
    ) -> Governed:
        """Remember what ``governed`` sends, and say how much of it the previous request sent
        as it is (``Governed.prefix_tokens``)."""
        state = self._state
        messages = governed.messages
        last = message_digest(messages[-1]) if messages else ""
        kept = 0
        if continued and state.messages:
            # Pair repair may complete the previous request's last message (the request the
            # model answered) once the results it waited for arrive.
            at = state.messages - 1
            found = last if at == len(messages) - 1 else None
            unchanged = at < len(messages) and (found or message_digest(messages[at])) == state.last
            kept = state.sent if unchanged else state.sent - state.last_tokens
            if shared is not None:
                kept = min(kept, shared)
        governed.prefix_tokens = kept
        self._remember(
            setup,
            plan,
            request_tokens(work),
            growth,
            same_lineage=continued,
            tail=(len(messages), last, _last_tokens(work)),
        )
        return governed

    def _started(self, setup: Setup) -> Acted | None:
        """Whether this request is a new start ("start": the first, "edited": a history that
        does not begin with the last one's), None when it continues the last one."""
        state = self._state
        facts = setup.prepared.facts
        if state.size == 0:
            return "start"  # nothing governed yet, or an empty history: no prefix to keep
        if len(facts) < state.size or state.pinned != _pinned(setup):
            return "edited"
        lineage = self._lineage
        extends = setup.prepared.follows is not None and setup.prepared.follows == lineage.serial
        if extends and not lineage.adopted:
            return None  # the pass over this history extended the last one's
        # Otherwise compared by digest: a Governor rebuilt from its state or given another's,
        # a history copied. A history that extends the last one is digested where that one's
        # digest stopped.
        known: str | None
        if lineage.facts is None or lineage.adopted:
            known = state.digest
        else:
            known = lineage.digest(state.size)
        if extends and lineage.facts is not None:
            lineage.facts = facts
            found = lineage.digest(state.size)
        else:
            found = None
        if found is None:
            lineage = _Lineage(facts)
            found = lineage.digest(state.size)
        if found != known:
            return "edited"
        lineage.adopted = False
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
        tail: tuple[int, str, int] = (0, "", 0),
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
            messages=tail[0],
            last=tail[1],
            last_tokens=tail[2],
            instructions_tokens=setup.instructions_tokens,
            system_tokens=setup.system_parts,
        )


class _Lineage:
    """The histories a Governor governed since its last new start, each beginning with the one
    before: the digest of their facts, worked out only when asked for (``state``, or a history
    not known to extend the last one), and then only for the facts not digested yet."""

    KNOWN = 8
    """Digests remembered at the sizes asked for last: a state adopted from another process
    may be older than what this one digested since."""

    def __init__(self, facts: list[MessageFacts] | None = None) -> None:
        self.facts = facts
        self.serial: int | None = None
        self.adopted = False
        """Whether the Governor's state was adopted since: the next history is compared with
        the state by digest, not assumed to continue the lineage."""
        self._digest = ""
        self._count = 0
        self._known: dict[int, str] = {}

    def digest(self, size: int) -> str | None:
        """The digest of all but the last of the first ``size`` facts (the latest request may
        still be completed in place, by an agent run adding its instructions); None when this
        lineage has digested past that point without remembering it (see ``chained``)."""
        assert self.facts is not None
        end = max(size - 1, 0)
        if end < self._count:
            return self._known.get(end)
        self._digest = chained(self._digest, self.facts[self._count : end])
        self._count = end
        found = self._known[end] = self._digest
        while len(self._known) > self.KNOWN:
            del self._known[next(iter(self._known))]
        return found


def chained(digest: str, facts: Iterable[MessageFacts]) -> str:
    """``digest`` (of the facts before these; "" for none) carried over ``facts``: a chain, so
    a history grown by some messages is digested from the last digest and the new facts alone.
    Timestamps are left out: providers are not sent them, and a client that omits them gets
    new ones each time its history is parsed."""
    for fact in facts:
        line = to_json([_sorted(getattr(fact, name)) for name in _DIGESTED])
        digest = blake2b(digest.encode() + b"\n" + line, digest_size=16).hexdigest()
    return digest


_DIGESTED = tuple(f.name for f in fields(MessageFacts) if f.name != "timestamp")
"""What a digest covers of each message's facts: all but the time."""


def _sorted(value: object) -> object:
    """A set's items in order (their iteration order differs from process to process)."""
    return sorted(value) if isinstance(value, frozenset) else value


def message_digest(message: ModelMessage) -> str:
    """What tells a message sent apart from any other (``GovernorState.last``)."""
    return blake2b(ModelMessagesTypeAdapter.dump_json([message]), digest_size=16).hexdigest()


def _noted(setup: Setup, work: Work, plan: Plan, continued: bool) -> tuple[Plan, int | None]:
    """The plan of a request sent without an action, with its budget note: the plan's own,
    replayed where it was written, unless the request starts anew (a new start writes one) or
    the window or budget it states changed; and, when the note is written again, how much of
    the previous request the new one keeps (up to where the old note stood)."""
    if not setup.note_on or (continued and note_is_current(setup, plan.note)):
        return plan, None
    old = work.note_before if work.note_message is not None else None
    kept = None
    if continued and work.note_message is not None:
        end = len(work.kept) if old is None else old
        kept = sum(work.tokens[:end])
        notice = len(work.kept) if work.notice_before is None else work.notice_before
        if work.notice is not None and notice <= end:
            kept += work.notice_tokens()
    return with_note(setup, plan, write_note(setup, work)), kept


def _last_tokens(work: Work) -> int:
    """Tokens of the last message a plan sends (the budget note or the window's notice, when
    it comes last)."""
    if work.note_message is not None and work.note_before is None:
        return work.note_tokens()
    if work.notice is not None and work.notice_before is None:
        return work.notice_tokens()
    last = work.kept.rfind(1)
    return work.tokens[last] if last >= 0 else 0


def growth_with(state: GovernorState, now: int) -> int:
    """The average growth per request, updated with this one's (recent requests weigh most)."""
    added = max(now - state.sent, 0)
    return added if state.growth == 0 else (3 * state.growth + added) // 4


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
