"""Observation masking (Duragent, 001): keep the first N and last M tool results, mask the rest.

The calls stay visible, so the model knows what it did; a masked result says how many tokens
were removed: ``[result masked — ~12000 tokens removed]``. Pinned messages, protected tools and
results governance already replaced (placeholders, previews) are left as they are.
"""

from __future__ import annotations

from itertools import compress
from operator import attrgetter, not_
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._work import Work

_MASKABLE = attrgetter("maskable")
_TOOL_NAMES = attrgetter("tool_names")


def _results(work: Work, wanted: int, *, backward: bool) -> list[tuple[int, int]]:
    """The first (or last) ``wanted`` tool results of kept messages, from that end inwards."""
    found: list[tuple[int, int]] = []
    facts, kept = work.facts, work.kept
    between = work.landmarks.results_between
    if between is None:
        return found
    low, high = between
    for position in range(high, low - 1, -1) if backward else range(low, high + 1):
        outputs = facts[position].outputs
        if outputs and kept[position]:
            for number in reversed(outputs) if backward else outputs:
                found.append((position, number))
                if len(found) == wanted:
                    return found
    return found


def _newest_exchange(work: Work) -> int:
    """How many results the newest exchange holds: those after the latest response that made
    calls, when the history ends with them."""
    facts, kept = work.facts, work.kept
    count = 0
    for position in range(len(facts) - 1, -1, -1):
        fact = facts[position]
        if not fact.request:
            return count if fact.call_ids else 0
        if fact.user_prompt:
            return 0
        if kept[position]:
            count += len(fact.outputs)
    return 0


def mask(work: Work) -> None:
    """Plan masking of the middle tool results (all but the first N and last M).

    Only the two ends of the middle are found, walking in from either end of the history; the
    middle itself is a span every later step reads through ``Work.masked_at``, so masking costs
    the same on a history of 100 messages as on one of 20,000.
    """
    policy = work.policy.masking
    first = _results(work, policy.keep_first + 1, backward=False)
    # The results of the newest exchange are the model's to read now: never masked.
    keep_last = max(policy.keep_last, _newest_exchange(work))
    last = _results(work, keep_last + 1, backward=True)
    if len(first) <= policy.keep_first or len(last) <= keep_last:
        return
    low, high = first[policy.keep_first], last[keep_last]
    if low > high:
        return
    work.mask_span = (*low, *high)
    # Versions governed before masking was planned (the budget check) must be rebuilt masked.
    for position in sorted(work.materialised):
        if work.masked_at(position):
            work.invalidate(position)


def masked_count(work: Work) -> int:
    """The number of results masking replaced (for the report).

    Inside the span every maskable result is masked but in exempt messages, so the inside is
    counted from the facts in a few C-level passes; only the span's two ends are looked at.
    """
    span = work.mask_span
    if span is None:
        return 0
    first, last = span[0], span[2]
    ends = {first, last}
    count = sum(len(work.masked_at(p) or ()) for p in ends)
    inside = work.facts[first + 1 : last]
    count += sum(map(len, map(_MASKABLE, inside)))
    exempt = {p for p in work.pinned_positions if first < p < last}
    if work.protected:
        touching = map(not_, map(work.protected.isdisjoint, map(_TOOL_NAMES, inside)))
        exempt.update(compress(range(first + 1, last), touching))
    return count - sum(len(work.facts[p].maskable) for p in exempt)
