"""Sliding window: drop the oldest middle messages, keep head, pins and a recent tail.

* Triggers (pydantic-deep, 004): any of messages / tokens / fraction of the window fires it, and
  exceeding the budget always does. What to keep: messages / tokens / fraction, never more than
  the budget allows; by default as much as the budget allows (Duragent's render-time fill).
* Triggers and keeps measure the same thing: the *movable* messages, those after the head that
  are neither kept whatever the window (below) nor a window notice. So a keep smaller than a
  trigger of its kind never lets the window fire again on its own output. Exceeding the budget
  is measured on everything sent.
* The head is the first run — up to the first response with text, as co-cli finds it — and is
  kept, unless it would take more than half the budget, when only the first request is.
* Kept whatever the window: messages with a system prompt, pinned messages, the latest call and
  result of each protected tool (AgenticLoop's ``manage_todo_list``), turn-aborted markers, the
  user request that opened the current turn, and the newest exchange (the latest response and
  what follows it). Each kept message keeps the other half of its tool-call pairs.
* The window reaches into the current turn: an agent working on one request through dozens of
  tool iterations has its older iteration groups (and retry exchanges) dropped — and, through
  ``compact``, summarised — like older turns, oldest first.
* The cut never separates a call from its result: the tail starts only where no result in it
  answers a call before it.
* A notice in Duragent's format says how many messages were omitted; a notice from an earlier
  governance pass is folded into the new one, so windowing again never stacks notices.
"""

from __future__ import annotations

from bisect import bisect_left
from datetime import datetime
from itertools import chain, compress
from operator import attrgetter, not_

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from .._work import MARK, Work
from ..counting import message_facts, window_notice

_SYSTEM_TOKENS = attrgetter("system_tokens")
_TOOL_NAMES = attrgetter("tool_names")
_ABORTED = attrgetter("aborted")
_NOTICE = attrgetter("notice")


def notice_omitted(message: ModelMessage) -> int | None:
    """The omitted count of a window notice governance wrote; None for any other message."""
    return window_notice(message)


def build_notice(work: Work, omitted: int, timestamp: datetime) -> ModelRequest:
    """The message telling the model how many messages were omitted."""
    text = work.policy.window.notice.format(omitted=omitted)
    return ModelRequest(
        parts=[UserPromptPart(text, timestamp=timestamp)],
        metadata={MARK: {"notice": "window", "omitted": omitted}},
    )


def find_head_end(work: Work) -> int:
    """Last position of the head (-1 for none): the first run, or just the first request."""
    if not work.policy.window.keep_head:
        return -1
    end = next((p for p, f in enumerate(work.facts) if f.text_response), -1)
    end = min(end, work.turn_start - 1)
    if end < 0:
        return -1
    end = _close_head(work, end)
    head_tokens = sum(work.materialise(p) for p in range(end + 1))
    if head_tokens > work.limit // 2:
        first = next((p for p in range(end + 1) if work.facts[p].request), -1)
        end = _close_head(work, first)
    return end


def _close_head(work: Work, end: int) -> int:
    """Extend the head until every call in it has its result in it (or in the current turn)."""
    waiting: set[str] = set()
    for position in range(end + 1):
        waiting.update(work.facts[position].call_ids)
        waiting.difference_update(work.facts[position].result_ids)
    while waiting and end + 1 < work.turn_start:
        end += 1
        waiting.update(work.facts[end].call_ids)
        waiting.difference_update(work.facts[end].result_ids)
    return end


def sticky_positions(work: Work) -> set[int]:
    """Positions kept whatever the window, closed over their tool-call partners."""
    policy = work.policy.window
    sticky = set(work.pinned_positions)
    if work.latest_prompt is not None:
        # The request that opened the current turn (with any results it carries).
        sticky.update(range(work.turn_start, work.latest_prompt + 1))
    protected = frozenset(policy.protected_tools)
    landmarks = work.landmarks
    if landmarks is not None:
        sticky.update(landmarks.system)
        sticky.update(landmarks.latest_call[n] for n in protected if n in landmarks.latest_call)
        if policy.keep_turn_aborted:
            sticky.update(landmarks.aborted)
        return _close_over_pairs(work, sticky)
    facts = work.facts
    everywhere = range(len(facts))
    # Each scan below is a C-level pass over the facts.
    sticky.update(compress(everywhere, map(_SYSTEM_TOKENS, facts)))
    if protected:
        latest_protected: dict[str, int] = {}
        touching = map(not_, map(protected.isdisjoint, map(_TOOL_NAMES, facts)))
        for position in compress(everywhere, touching):
            fact = facts[position]
            if not fact.request:
                for name in fact.tool_names & protected:
                    latest_protected[name] = position
        sticky.update(latest_protected.values())
    if policy.keep_turn_aborted:
        sticky.update(compress(everywhere, map(_ABORTED, facts)))
    return _close_over_pairs(work, sticky)


def notice_positions(work: Work) -> list[int]:
    """Positions of window notices from earlier governance passes."""
    if work.landmarks is not None:
        return work.landmarks.notices
    return list(compress(range(len(work.facts)), map(_NOTICE, work.facts)))


def _close_over_pairs(work: Work, positions: set[int]) -> set[int]:
    if not any(work.facts[p].call_ids or work.facts[p].result_ids for p in positions):
        return positions
    call_at: dict[str, int] = {}
    result_at: dict[str, int] = {}
    for position, fact in enumerate(work.facts):
        for call_id in fact.call_ids:
            call_at[call_id] = position
        for call_id in fact.result_ids:
            result_at[call_id] = position
    closed = set(positions)
    todo = list(positions)
    while todo:
        position = todo.pop()
        fact = work.facts[position]
        for call_id in fact.call_ids:
            partner = result_at.get(call_id)
            if partner is not None and partner not in closed:
                closed.add(partner)
                todo.append(partner)
        for call_id in fact.result_ids:
            partner = call_at.get(call_id)
            if partner is not None and partner not in closed:
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


def movable(work: Work, head_end: int, sticky: set[int]) -> list[int]:
    """Kept positions after the head the window may drop: not sticky, not a notice."""
    facts, kept = work.facts, work.kept
    return [
        p
        for p in range(head_end + 1, len(facts))
        if kept[p] and p not in sticky and not facts[p].notice
    ]


def _fired(work: Work, head_end: int, sticky: set[int]) -> bool:
    """Whether the history is over budget or any trigger fires."""
    triggers = work.policy.window.triggers
    # With triggers a fitting history may still be windowed, and the messages it drops must
    # have been governed first, as they are when nothing fires.
    if work.exact_over(eager=bool(triggers)):
        return True
    if not triggers:
        return False
    positions = movable(work, head_end, sticky)
    tokens = work.tokens
    for trigger in triggers:
        kind, value = trigger.resolve(work.window_tokens)
        size = len(positions) if kind == "messages" else sum(tokens[p] for p in positions)
        if size > value:
            return True
    return False


def _among(ordered: list[int], value: int) -> bool:
    at = bisect_left(ordered, value)
    return at < len(ordered) and ordered[at] == value


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
    if not _fired(work, head_end, sticky):
        return None

    size = len(work.facts)
    middle_sticky = sorted(p for p in sticky if head_end < p < floor)
    floor_kept = [p for p in range(floor, size) if work.kept[p]]
    fixed = sum(
        work.materialise(p) for p in chain(range(head_end + 1), middle_sticky, floor_kept)
    )
    notices = [p for p in notice_positions(work) if head_end < p < floor and p not in sticky]
    previous = sum(work.facts[p].omitted for p in notices)
    # Reserve room for the notice at its largest (every middle message omitted).
    worst = build_notice(work, previous + floor, work.facts[floor].timestamp)
    available = work.limit - fixed - message_facts(worst, work.tokenizer).tokens
    # The keep counts the movable messages of the whole tail, the newest exchange included.
    floor_movable = [p for p in floor_kept if p not in sticky and not work.facts[p].notice]
    count = len(floor_movable)
    max_messages: int | None = None
    # The keep target applies however the window fired: a budget-driven cut that kept more
    # would let a trigger fire again on the output, and governing twice must change nothing.
    if policy.keep is not None:
        kind, value = policy.keep.resolve(work.window_tokens)
        if kind == "messages":
            max_messages = value
        else:
            available = min(available, value - sum(work.tokens[p] for p in floor_movable))

    taken = 0
    # Results in the kept tail whose calls come before it: the cut must go below those calls.
    open_results: set[str] = set()
    calls_in_tail: set[str] = set()
    for position in range(floor, size):
        calls_in_tail.update(work.facts[position].call_ids)
        open_results.update(set(work.facts[position].result_ids) - calls_in_tail)
    cut = floor if not open_results else head_end + 1
    # The hottest loop of a warm call (one pass over the kept tail): names bound locally, and
    # positions already governed read straight from the token list.
    facts, kept, tokens = work.facts, work.kept, work.tokens
    materialised, materialise = work.materialised, work.materialise
    limit_messages = max_messages if max_messages is not None else size + 1
    for position in range(floor - 1, head_end, -1):
        fact = facts[position]
        if kept[position] and position not in sticky:
            taken += tokens[position] if position in materialised else materialise(position)
            if not fact.notice:
                count += 1
            if taken > available or count > limit_messages:
                break
        if fact.result_ids:
            open_results.update(fact.result_ids)
        if open_results and fact.call_ids:
            open_results.difference_update(fact.call_ids)
        if not open_results:
            cut = position

    dropped = work.drop_range(head_end + 1, cut, middle_sticky, "window")
    if not dropped:
        # Nothing left the history: the tail is the current turn, as when the window is idle.
        work.tail_start = min(cut, work.turn_start)
        return 0
    work.tail_start = cut
    # Earlier notices are folded into the new one, not counted as omitted messages.
    omitted = previous + len(dropped) - sum(1 for p in notices if _among(dropped, p))
    first_dropped = dropped[0]
    work.notice = build_notice(work, omitted, work.facts[cut - 1].timestamp)
    work.notice_omitted = omitted
    try:
        work.notice_before = work.kept.index(True, first_dropped)
    except ValueError:
        work.notice_before = None
    return omitted
