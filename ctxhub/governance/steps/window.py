"""Sliding window: drop the oldest middle messages, keep head, pins and a recent tail.

* Triggers (pydantic-deep, 004): any of messages / tokens / fraction of the window fires it, and
  exceeding the budget always does. What to keep: messages / tokens / fraction, never more than
  the budget allows; by default as much as the budget allows (Duragent's render-time fill).
* The head is the first run — up to the first response with text, as co-cli finds it — and is
  kept, unless it would take more than half the budget, when only the first request is.
* Kept whatever the window: messages with a system prompt, pinned messages, the latest call and
  result of each protected tool (AgenticLoop's ``manage_todo_list``), turn-aborted markers, and
  the current turn (from the latest user request on; ``drop_groups`` governs inside it). Each
  kept message keeps the other half of its tool-call pairs.
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


def _fired(work: Work, head_end: int, sticky: set[int]) -> bool:
    """Whether the history is over budget or any trigger fires."""
    triggers = work.policy.window.triggers
    # With triggers a fitting history may still be windowed, and the messages it drops must
    # have been governed first, as they are when nothing fires.
    if work.exact_over(eager=bool(triggers)):
        return True
    window_tokens = work.window_tokens
    for trigger in triggers:
        kind, value = trigger.resolve(window_tokens)
        if kind == "messages":
            movable = sum(
                1
                for p in range(head_end + 1, len(work.facts))
                if work.kept[p] and p not in sticky and not work.facts[p].notice
            )
            if movable > value:
                return True
        elif work.exact_over(value):
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
    if not policy.enabled or work.turn_start <= head_end + 1:
        return None
    sticky = sticky_positions(work)
    if not _fired(work, head_end, sticky):
        return None

    start = work.turn_start
    size = len(work.facts)
    middle_sticky = sorted(p for p in sticky if head_end < p < start)
    fixed = sum(
        work.materialise(p)
        for p in chain(range(head_end + 1), middle_sticky, range(start, size))
        if work.kept[p]
    )
    notices = [p for p in notice_positions(work) if head_end < p < start and p not in sticky]
    previous = sum(work.facts[p].omitted for p in notices)
    # Reserve room for the notice at its largest (every middle message omitted).
    worst = build_notice(work, previous + start, work.facts[start].timestamp)
    available = work.limit - fixed - message_facts(worst, work.tokenizer).tokens
    max_messages: int | None = None
    # The keep target applies however the window fired: a budget-driven cut that kept more
    # would let a trigger fire again on the output, and governing twice must change nothing.
    if policy.keep is not None:
        kind, value = policy.keep.resolve(work.window_tokens)
        if kind == "messages":
            max_messages = value
        else:
            available = min(available, value)

    taken = 0
    # A message keep counts the whole tail, the current turn included.
    count = sum(work.kept[start:])
    # Results in the kept turn whose calls come before it: the cut must go below those calls.
    open_results: set[str] = set()
    calls_in_turn: set[str] = set()
    for position in range(start, len(work.facts)):
        calls_in_turn.update(work.facts[position].call_ids)
        open_results.update(set(work.facts[position].result_ids) - calls_in_turn)
    cut = start if not open_results else head_end + 1
    # The hottest loop of a warm call (one pass over the kept tail): names bound locally, and
    # positions already governed read straight from the token list.
    facts, kept, tokens = work.facts, work.kept, work.tokens
    materialised, materialise = work.materialised, work.materialise
    limit_messages = max_messages if max_messages is not None else len(work.facts) + 1
    for position in range(start - 1, head_end, -1):
        fact = facts[position]
        if kept[position] and position not in sticky:
            taken += tokens[position] if position in materialised else materialise(position)
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
    work.tail_start = cut
    if not dropped:
        return 0
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
