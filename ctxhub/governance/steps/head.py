"""The head the sliding window keeps: the first run — up to the first response with text, as
co-cli finds it, when that answer came before the current turn (else the first request) — or
the first messages or tokens the policy sizes it to (``Window.head``).

It is closed over its tool calls' results, and shrinks to the first request when it would take
more than half the budget.
"""

from __future__ import annotations

from .._work import Work
from ..policy import Threshold


def find_head_end(work: Work) -> int:
    """Last position of the head (-1 for none): the first run, or the size the policy gives it,
    or just the first request."""
    policy = work.policy.window
    if not policy.keep_head:
        return -1
    if policy.head is not None:
        end = _sized_head(work, policy.head)
    else:
        first_text = work.landmarks.first_text
        # Without a text response before the current turn, the head is the first request:
        # governing an output whose head was cut to its first request (the answer left out)
        # must find that same head again.
        if first_text is None or first_text >= work.turn_start:
            end = _first_request(work)
        else:
            end = first_text
    end = min(end, work.turn_start - 1)
    if end < 0:
        return -1
    end = _close_head(work, end)
    head_tokens = sum(work.materialise(p) for p in range(end + 1))
    # Against the budget, not the mark an action aims at: the head stays the same from one
    # action to the next, and with it the start of the request.
    if head_tokens > work.budget_limit // 2:
        first = next((p for p in range(end + 1) if work.facts[p].request), -1)
        end = _close_head(work, first)
    return end


def _sized_head(work: Work, head: Threshold) -> int:
    """The last position of a head of ``head``'s messages, or of the leading messages that fit
    its tokens; it ends before an earlier cut's notice (governing an output again must find
    the same head, not one reaching across the cut)."""
    kind, value = head.resolve(work.window_tokens)
    notices = work.landmarks.notices
    stop = min(work.turn_start, len(work.facts), notices[0] if notices else len(work.facts))
    if kind == "messages":
        return min(value, stop) - 1
    end, total = -1, 0
    for position in range(stop):
        total += work.materialise(position)
        if total > value:
            break
        end = position
    return end


def _first_request(work: Work) -> int:
    return next((p for p, fact in enumerate(work.facts) if fact.request), -1)


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
