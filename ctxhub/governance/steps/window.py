"""Sliding window: drop the oldest middle messages, keep head, pins and a recent tail.

* Triggers (pydantic-deep, 004): any of messages / tokens / fraction of the window fires it, and
  exceeding the budget always does. What to keep: messages / tokens / fraction, never more than
  the budget allows; by default as much as the budget allows (Duragent's render-time fill).
* As users of peer libraries expect: a message trigger counts every message sent, a token or
  fraction trigger the whole request (system prompt, instructions, tool definitions, head and
  pins included); a keep counts the kept tail, the current turn's request included (pins and
  system prompts are kept like the head, uncounted).
* The head (``steps.head``) is kept.
* Kept whatever the window: messages with a system prompt, pinned messages, the latest call and
  result of each protected tool (AgenticLoop's ``manage_todo_list``), turn-aborted markers, the
  user request that opened the current turn, and the newest exchange (the latest response and
  what follows it). Each kept message keeps the other half of its tool-call pairs.
* The window reaches into the current turn: an agent working on one request through dozens of
  tool iterations has its older iteration groups (and retry exchanges) dropped — and, through
  ``compact``, summarised — like older turns, oldest first.
* The cut never separates a call from its result: the tail starts only where no result in it
  answers a call before it (after pair repair, at a message holding no result, each result
  being right after its call; the newest exchange's results are checked whole).
* A notice in Duragent's format says how many messages were omitted; a notice from an earlier
  governance pass is folded into the new one, so windowing again never stacks notices.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from datetime import datetime
from itertools import accumulate, chain

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from .._work import Work
from ..counting import MARK, message_tokens
from ..facts import window_notice
from ..recall import mention
from .head import find_head_end

CARRY_BELOW_CUT = 1_024
"""How many positions below where the walk stopped the next call is offered, at least (see
``Carry``)."""
CARRY_HELD = 4 * CARRY_BELOW_CUT
"""How far below the stop an earlier offer is kept: the stop swings by hundreds of positions
from one call to the next (a turn's outputs arrive whole, then are truncated when it ends), and
an offer raised with it would drop what the call after needs."""


def notice_omitted(message: ModelMessage) -> int | None:
    """The omitted count of a window notice governance wrote; None for any other message."""
    return window_notice(message)


def build_notice(work: Work, omitted: int, timestamp: datetime) -> ModelRequest | None:
    """The message telling the model how many messages were omitted (None if the policy cuts
    silently)."""
    if work.policy.window.notice is None:
        return None
    text = work.policy.window.notice.format(omitted=omitted)
    awareness = work.policy.awareness
    if awareness.recall:
        text = f"{text} {mention(awareness.recall_tool_name)}"
    return ModelRequest(
        parts=[UserPromptPart(text, timestamp=timestamp)],
        metadata={MARK: {"notice": "window", "omitted": omitted}},
    )


def sticky_positions(work: Work) -> set[int]:
    """Positions kept whatever the window, closed over their tool-call partners."""
    policy = work.policy.window
    sticky = set(work.pinned_positions)
    if work.latest_prompt is not None:
        # The request that opened the current turn (with any results it carries).
        sticky.update(range(work.turn_start, work.latest_prompt + 1))
    landmarks = work.landmarks
    sticky.update(landmarks.system)
    latest_call = landmarks.latest_call
    sticky.update(latest_call[n] for n in policy.protected_tools if n in latest_call)
    if policy.keep_turn_aborted:
        sticky.update(landmarks.aborted)
    return _close_over_pairs(work, sticky)


def notice_positions(work: Work) -> list[int]:
    """Positions of window notices from earlier governance passes."""
    return work.landmarks.notices


def _close_over_pairs(work: Work, positions: set[int]) -> set[int]:
    """``positions`` with the other half of each of their tool-call pairs, closed.

    After pair repair every call is answered in the very next message and every result sits
    right after its call, so a partner is always next door — by position, never by id: an id
    a later call uses again names another pair.
    """
    facts = work.facts
    size = len(facts)
    closed = set(positions)
    todo = list(positions)
    while todo:
        position = todo.pop()
        fact = facts[position]
        partners = []
        if fact.call_ids and position + 1 < size:
            partners.append(position + 1)
        if fact.result_ids and position > 0:
            partners.append(position - 1)
        for partner in partners:
            if partner not in closed:
                closed.add(partner)
                todo.append(partner)
    return closed


def tail_floor(work: Work) -> int:
    """First position of the newest exchange, which the window always keeps: the latest
    response of the current turn and what follows it (the turn's request on when the turn has
    no response yet)."""
    opened = work.turn_start if work.latest_prompt is None else work.latest_prompt + 1
    facts = work.facts
    for position in range(len(facts) - 1, opened - 1, -1):
        if not facts[position].request:
            return position
    return work.turn_start


def _fired(work: Work) -> bool:
    """Whether the history is over budget or any trigger fires."""
    # With triggers a fitting history may still be windowed, and the messages it drops must
    # have been governed first, as they are when nothing fires.
    if work.exact_over(eager=bool(work.policy.window.triggers)):
        return True
    return triggered(work)


def triggered(work: Work) -> bool:
    """Whether a trigger fires on the request as planned: a message trigger counts every
    message sent, a token or fraction trigger the whole request (system prompt, instructions,
    tool definitions, head and pins included), as users of peer libraries expect. A disabled
    window has no triggers."""
    policy = work.policy.window
    triggers = policy.triggers
    if not triggers or not policy.enabled:
        return False
    messages = work.kept.count(1) + work.added_messages()  # a notice is a message sent
    for trigger in triggers:
        kind, value = trigger.resolve(work.window_tokens)
        if kind == "messages":
            if messages > value:
                return True
        elif work.exact_over(value - work.outside_tokens):
            return True
    return False


def _walk(
    work: Work,
    head_end: int,
    floor: int,
    sticky: set[int],
    available: int,
    count: int,
    limit_messages: int,
    cut: int,
) -> tuple[int, int]:
    """Walk back from the newest exchange, taking messages while they fit: where the kept tail
    starts (``cut``) and the position where the walk stopped (0 when it never did).

    Each kept message that is neither sticky nor the newest exchange's adds its tokens (and,
    unless it is a notice, one to the count); the walk stops at the first that makes either
    exceed its room. The tail may start at any position the walk got past that holds no tool
    result (pair repair puts every result right after its call, so a result's message starts
    no tail without the call before it).

    Positions whose governed versions were carried from the previous call (one run, see
    ``Work.seed``) are taken a run at a time: running sums over the run (C-level) and a
    bisection find where the walk stops in it, instead of a Python step per message.
    """
    facts, kept, tokens = work.facts, work.kept, work.tokens
    governed, materialise = work.governed_tokens, work.materialise
    seeded = work.seeded
    taken = 0
    position = floor - 1
    while position > head_end:
        if (
            seeded is not None
            and seeded[0] <= position < seeded[1]
            and taken <= available
            and count <= limit_messages
        ):
            low = max(seeded[0], head_end + 1)
            stop, run_tokens, run_count = _through_run(
                work, low, position, sticky, available - taken, limit_messages - count
            )
            first = low if stop is None else stop + 1
            # The lowest position the walk got past that holds no result, if any.
            while first <= position and facts[first].result_ids:
                first += 1
            if first <= position:
                cut = first
            if stop is not None:
                return cut, stop
            taken += run_tokens
            count += run_count
            position = low - 1
            continue
        fact = facts[position]
        if kept[position] and position not in sticky:
            taken += tokens[position] if governed[position] >= 0 else materialise(position)
            if not fact.notice:
                count += 1
            if taken > available or count > limit_messages:
                return cut, position
        if not fact.result_ids:
            cut = position
        position -= 1
    return cut, 0


def _through_run(
    work: Work, low: int, high: int, sticky: set[int], room: int, room_count: int
) -> tuple[int | None, int, int]:
    """The walk through governed positions ``high`` down to ``low``: where it stops (None if it
    gets through), and the tokens and count it takes before stopping (or in all).

    Taken a stretch at a time, newest first: the run carried over reaches well below where the
    walk usually stops, and summing past the stop would be work for nothing.
    """
    taken = counted = 0
    while high >= low:
        start = max(low, high - _STRETCH + 1)
        stop, tokens, count = _through(
            work, start, high, sticky, room - taken, room_count - counted
        )
        if stop is not None:
            return stop, taken + tokens, counted + count
        taken, counted, high = taken + tokens, counted + count, start - 1
    return None, taken, counted


_STRETCH = 512


def _through(
    work: Work, low: int, high: int, sticky: set[int], room: int, room_count: int
) -> tuple[int | None, int, int]:
    """``_through_run`` over one stretch, with C-level running sums and a bisection."""
    tokens = work.tokens[low : high + 1]
    counted = work.kept[low : high + 1]  # a dropped position counts 0 tokens already
    for position in sticky:
        if low <= position <= high:
            tokens[position - low] = 0
            counted[position - low] = 0
    for position in work.landmarks.notices:
        if low <= position <= high:
            counted[position - low] = 0
    total, count = sum(tokens), counted.count(1)
    if total <= room and count <= room_count:
        return None, total, count  # the walk gets through: no running sums needed
    taken = list(accumulate(reversed(tokens)))
    # With room left (both at least 0), the first sum past its room is where a message that
    # counts was added: the step at which the walk stops.
    at = bisect_right(taken, room)
    if count > room_count:
        at = min(at, bisect_right(list(accumulate(reversed(counted))), room_count))
    # The walk stops at ``high - at``: the positions it takes are those above, and that one.
    return high - at, taken[at], counted[len(counted) - 1 - at :].count(1)


def window(work: Work) -> int | None:
    """Apply the sliding window; the number of messages omitted, or None when it did not fire."""
    policy = work.policy.window
    head_end = find_head_end(work)
    work.head_end = head_end
    work.tail_start = work.turn_start
    floor = tail_floor(work)
    if not policy.enabled or floor <= head_end + 1:
        return None
    sticky = sticky_positions(work)
    if not _fired(work):
        return None

    size = len(work.facts)
    middle_sticky = sorted(p for p in sticky if head_end < p < floor)
    floor_kept = [p for p in range(floor, size) if work.kept[p]]
    fixed = sum(work.materialise(p) for p in chain(range(head_end + 1), middle_sticky, floor_kept))
    notices = [p for p in notice_positions(work) if head_end < p < floor and p not in sticky]
    previous = sum(work.facts[p].omitted for p in notices)
    # Reserve room for the notice at its largest (every middle message omitted).
    worst = build_notice(work, previous + floor, work.facts[floor].timestamp)
    notice = 0 if worst is None else message_tokens(worst, work.tokenizer)
    # The keep counts the messages of the whole tail, the newest exchange and the current
    # turn's request included (pins and system prompts are kept like the head, uncounted).
    counted = [
        p
        for p in chain(middle_sticky, floor_kept)
        if (p >= floor or p >= work.turn_start) and not work.facts[p].notice
    ]
    # Sent besides what the walk counts: the head, the other sticky messages, the notice and
    # the budget note (the notice is not written yet: ``added_messages`` counts the note).
    kept_anyway = head_end + 1 + len(middle_sticky) + len(floor_kept) - len(counted)
    uncounted = kept_anyway + (worst is not None) + work.added_messages()
    available, limit_messages = _kept_at_most(work, counted, fixed + notice, uncounted)
    start = _walk_start(work, head_end, floor)
    cut, stopped = _walk(
        work, head_end, floor, sticky, available, len(counted), limit_messages, start
    )

    dropped, first_dropped = work.drop_range(head_end + 1, cut, middle_sticky, "window")
    if first_dropped is None:
        # Nothing left the history: the tail is the current turn, as when the window is idle.
        work.tail_start = min(cut, work.turn_start)
        return 0
    work.tail_start = cut
    work.windowed = True
    if not policy.triggers:
        _offer_below(work, stopped)
    # Earlier notices are folded into the new one, not counted as omitted messages.
    window_dropped = work.dropped_by.get
    omitted = previous + dropped - sum(1 for p in notices if window_dropped(p) == "window")
    work.notice = build_notice(work, omitted, work.facts[cut - 1].timestamp)
    work.notice_omitted = omitted
    try:
        work.notice_before = work.kept.index(True, first_dropped)
    except ValueError:
        work.notice_before = None
    return omitted


def _kept_at_most(work: Work, counted: list[int], fixed: int, uncounted: int) -> tuple[int, int]:
    """The tokens and the messages the tail may hold, the messages ``counted`` among them:
    what the plan aims at, no more than the keep, and no more than leaves every trigger quiet
    that what is sent anyway (``fixed`` tokens, ``uncounted`` messages) leaves room under.

    The keep and the triggers apply however the window fired: a cut that left a trigger
    firing would be cut again on the next request (a Governor would move the window on every
    one), and governing the output again must change nothing."""
    policy = work.policy.window
    available, messages = work.limit - fixed, len(work.facts) + 1
    for trigger in policy.triggers:
        kind, value = trigger.resolve(work.window_tokens)
        if kind == "messages" and value - uncounted >= len(counted):
            messages = min(messages, value - uncounted)
        elif kind == "tokens" and value - work.outside_tokens - fixed >= 0:
            available = min(available, value - work.outside_tokens - fixed)
    if policy.keep is not None:
        kind, value = policy.keep.resolve(work.window_tokens)
        if kind == "messages":
            messages = min(messages, value)
        else:
            available = min(available, value - sum(work.tokens[p] for p in counted))
    return available, messages


def _walk_start(work: Work, head_end: int, floor: int) -> int:
    """Where the walk down from the floor may start cutting: the floor, or just after the head
    when results in the kept tail answer calls before it (the cut must go below those calls)."""
    calls_in_tail: set[str] = set()
    for position in range(floor, len(work.facts)):
        calls_in_tail.update(work.facts[position].call_ids)
        if not calls_in_tail.issuperset(work.facts[position].result_ids):
            return head_end + 1
    return floor


def _offer_below(work: Work, stopped: int) -> None:
    """Below where the walk stopped this call governed only what it carried over and what
    proving the history over budget took (with a trigger it governed every kept message, to
    measure them). The next call is offered what lies a little below the stop: the cut moves
    back when room frees up (an output masked, a turn's outputs truncated), about as far as
    one output is worth in masked messages, and each time it would govern those messages
    again."""
    offered = stopped - CARRY_BELOW_CUT
    if work.carried is not None:
        offered = max(min(offered, work.carried.governed_from), stopped - CARRY_HELD)
    work.governed_from = max(offered, 0)


def replay_window(work: Work, head_end: int, cut: int, spared: Sequence[int], omitted: int) -> None:
    """Drop what an earlier window dropped, with the same notice: the messages between the
    head and ``cut`` but the ``spared`` ones."""
    work.head_end = head_end
    work.tail_start = cut
    work.governed_from = cut  # nothing below the cut is sent until the window moves
    _, first_dropped = work.drop_range(head_end + 1, cut, spared, "window")
    if first_dropped is None:
        return
    work.windowed = True
    work.notice = build_notice(work, omitted, work.facts[cut - 1].timestamp)
    work.notice_omitted = omitted
    try:
        work.notice_before = work.kept.index(True, first_dropped)
    except ValueError:
        work.notice_before = None
