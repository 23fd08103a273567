"""What a Governor's action decided, in positions of the repaired history, and how a later
request replays it: the same window cut and notice, the same masked results, the same outputs
counted as older, the same repeated outputs referenced, the same budget note where it was
written."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from ._work import Work
from .budget_note import BudgetNote, acts_of, position
from .carry import seed
from .pipeline import (
    Setup,
    Steps,
    caps_steps,
    dedupe_step,
    masked_step,
    new_work,
)
from .policy import LARGEST
from .steps.mask import mask
from .steps.window import replay_window


class State(BaseModel):
    """Plain data a Governor keeps: JSON in, JSON out, nothing else accepted."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Plan(State):
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
    note: BudgetNote | None = None
    """The budget note written with the plan (``Policy.awareness.budget_note``), sent where it
    was written until the next action."""

    @model_serializer(mode="wrap")
    def _without_no_note(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Without a note, the JSON is that of a plan before notes were: a stored state stays
        byte for byte what it was."""
        data: dict[str, Any] = handler(self)
        if data.get("note") is None:
            data.pop("note", None)
        return data


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
    if plan.note is not None and setup.note_on:
        place(work, plan.note)
    return work, steps


def place(work: Work, note: BudgetNote | None) -> None:
    """Send ``note`` with the request ``work`` plans (None: no note)."""
    work.note = note
    work.note_message = None if note is None else note.message()
    work.note_before = None if note is None or note.before >= len(work.facts) else note.before
    work.note_written = False


def write_note(setup: Setup, work: Work) -> BudgetNote:
    """Write the budget note for the request ``work`` plans (every kept message governed:
    ``sent_tokens``) where the conversation stands, with that request's figures (see
    ``budget_note``); the note replaces any the plan carried."""
    policy = setup.policy
    hysteresis = policy.hysteresis
    budget = setup.budget
    before = position(work.facts)
    system = sum(work.facts[p].system_tokens for p in setup.landmarks.system if work.kept[p])
    others = work.total_tokens + work.notice_tokens() - system
    note = BudgetNote(
        before=before,
        at=work.facts[before - 1].timestamp,
        window=setup.window_tokens,
        budget=budget,
        used=max(others, 0),
        acts_at=int(budget * hysteresis.high_water) if hysteresis.enabled else budget,
        cuts_to=int(budget * hysteresis.low_water) if hysteresis.enabled else None,
        acts=acts_of(policy),
    )
    # The figure counts the note itself: a figure's tokens grow only with its digits, so the
    # point where the two agree is found in a step or two.
    for _ in range(8):
        place(work, note)
        used = max(others + work.note_tokens(), 0)
        if used == note.used:
            break
        note = note.model_copy(update={"used": used})
    place(work, note)
    work.note_written = True
    return note


def with_note(setup: Setup, plan: Plan, note: BudgetNote) -> Plan:
    """``plan`` carrying ``note``; the message before the note is anchored too, so the note
    is replayed only where the history still repairs to the same message."""
    index = setup.normalized.index
    anchors = set(plan.anchors)
    at = note.before - 1
    if 0 <= at < len(index):
        anchors.add((at, index[at]))
    return plan.model_copy(update={"note": note, "anchors": tuple(sorted(anchors))})


def note_is_current(setup: Setup, note: BudgetNote | None) -> bool:
    """Whether a plan's note still states the request's window and budget (another window, or
    other tool definitions or instructions, change the start of the request: the note is
    written again then, at no cost to the cache)."""
    return note is not None and note.window == setup.window_tokens and note.budget == setup.budget


def plan_of(setup: Setup, work: Work, steps: Steps) -> Plan:
    """The decisions of an action, to replay until the next."""
    taken = {name for name, _ in steps}
    cut: int | None = None
    spared: list[int] = []
    if work.windowed:
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


def applied(setup: Setup, plan: Plan) -> Plan:
    """``plan`` with what the policy applies to every request, as ``govern()`` applies it to
    the history: the results masking ``always`` masks, and the older reads of a resource read
    again (``Dedupe.keys``) replaced. The user chose them over the prompt cache: a request
    sends them as they stand, though it changes what the one before sent."""
    policy = setup.policy
    update: dict[str, Any] = {}
    if policy.masking.enabled and policy.masking.apply == "always":
        probe = new_work(setup, setup.limit())
        mask(probe)
        # Worked out again on every request, the span is not anchored: anchors would pile up
        # in the state as its end moves on with the newest results.
        if probe.mask_span not in (None, plan.mask_span):
            update["mask_span"] = probe.mask_span
    keys = policy.dedupe.keys
    if keys and setup.duplicates:
        facts, known = setup.normalized.facts, set(plan.repeated)
        reads = tuple(
            pair
            for older, newer in setup.duplicates.items()
            if facts[older[0]].part_tool_names[older[1]] in keys
            and (pair := (*older, *newer)) not in known
        )
        if reads:
            update["repeated"] = plan.repeated + reads
    return plan.model_copy(update=update) if update else plan


def fresh_plan(setup: Setup) -> Plan:
    """The plan of a new start, which has no cached prefix to keep: the caps, older copies of
    repeated outputs replaced, and masking if the policy masks always; nothing dropped."""
    work = new_work(setup, setup.limit())
    policy = setup.policy.masking
    if policy.enabled and policy.apply == "always":
        mask(work)
    return plan_of(setup, work, [])


def plan_holds(plan: Plan, setup: Setup) -> bool:
    """Whether the repaired history still has the plan's messages where the plan put them (a
    state from elsewhere is checked whole: every position and part it names must exist)."""
    if not plan.replayable:
        return False
    index, facts = setup.normalized.index, setup.normalized.facts
    size = len(index)

    def part(position: int, number: int) -> bool:
        return 0 <= position < size and 0 <= number < len(facts[position].part_tokens)

    if plan.turn_start > size or plan.head_end >= size:
        return False
    if plan.cut is not None and not plan.head_end < plan.cut <= size:
        return False
    if not all(0 <= p < size for p in plan.spared):
        return False
    span = plan.mask_span
    if span is not None and not (part(span[0], span[1]) and part(span[2], span[3])):
        return False
    if plan.note is not None and plan.note.before > size:
        return False
    if not all(part(a, b) and part(c, d) for a, b, c, d in plan.repeated):
        return False
    return all(0 <= p < size and index[p] == at for p, at in plan.anchors)
