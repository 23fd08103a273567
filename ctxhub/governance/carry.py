"""What one ``govern`` call hands the next on the same history grown, and how the next takes it.

A long-lived session governs the same history plus a message or two before every request. The
counts before caps, and the governed versions that still hold, are carried from one call to
the next, so a call pays for what is new rather than for the history.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import compress
from operator import and_, is_
from typing import TYPE_CHECKING

from .carried import Carry

if TYPE_CHECKING:
    from ._work import Work


def carried_size(work: Work) -> int:
    """How many leading positions may take what the carried call worked out: those it
    governed, or, when this call grew its facts list in place, those before the first whose
    facts changed (past it, the list holds this call's facts only)."""
    carried = work.carried
    assert carried is not None
    return min(carried.size, work.shared) if carried.facts is work.facts else carried.size


def over_with_caps(work: Work) -> bool:
    """Whether the history, with caps alone (before masking), exceeds the budget.

    Proven like ``Work.exact_over``, newest first, reading the previous call's counts where
    they hold (see ``Carry``) and governing only the other messages.
    """
    limit = work.limit
    if work.total_tokens <= limit:  # caps only ever shrink a message
        return False
    carried = work.carried
    facts, capped = work.facts, work.capped
    if carried is None or carried.settings != (work.cap_key, work.pinned_positions):
        below = 0
    else:
        below = min(len(facts), carried_size(work))
        if not _same_governing(work, carried):
            below = min(below, work.turn_start, carried.turn[0])
    known, old_facts = (carried.capped, carried.facts) if carried is not None else ((), ())
    total = 0
    for position in range(len(facts) - 1, -1, -1):
        count = known[position] if position < below else -1
        if count >= 0 and facts[position] is old_facts[position]:
            capped[position] = count
        else:
            count = work.materialise(position)
        total += count
        if total > limit:
            return True
    return False


def _same_governing(work: Work, carried: Carry) -> bool:
    """Whether a message governs the same in both calls wherever masking leaves it alone."""
    return carried.turn == (work.turn_start, work.latest_prompt) and carried.settings == (
        work.cap_key,
        work.pinned_positions,
    )


def carry_of(work: Work) -> Carry:
    """What a call worked out, for the next call on the history grown."""
    return Carry(
        work.facts,
        work.base_tokens,
        work.base_total,
        work.messages,
        work.governed_tokens,
        work.known,
        work.changes,
        work.mask_span,
        (work.turn_start, work.latest_prompt),
        work.governed_from,
        frozenset(work.states),
        (work.cap_key, work.pinned_positions),
        work.capped,
        work.evicting,
    )


def seed(work: Work) -> None:
    """Take the governed versions the previous call made that are still valid (see
    ``Carry``); called once masking has planned its span, before anything is dropped."""
    carried = work.carried
    if carried is None or carried.settings != (work.cap_key, work.pinned_positions):
        return
    span, old = work.mask_span, carried.span
    if span is None or old is None:
        return
    limit = min(len(work.facts), carried_size(work))
    if not _same_governing(work, carried):
        limit = min(limit, work.turn_start, carried.turn[0])
    offered = carried.governed_from
    # Before both masked spans no output is masked: the head, governed on every call. (The
    # response before a span's first results masks its calls' inputs with them, and so does
    # the response before its last: each is governed again.)
    _take(work, _carried(work, 0, min(span[0], old[0], limit) - 1))
    # Strictly inside both spans every output is masked.
    start, end = max(span[0], old[0], offered - 1) + 1, min(span[2], old[2], limit) - 1
    positions = _carried(work, start, end)
    if positions:
        first, last = positions[0], positions[-1] + 1
        if last - first == len(positions):
            # The usual case: one run (the previous call governed its newest positions).
            work.total_tokens += sum(carried.tokens[first:last]) - sum(work.tokens[first:last])
            work.messages[first:last] = carried.messages[first:last]
            work.tokens[first:last] = carried.tokens[first:last]
            work.governed_tokens[first:last] = carried.tokens[first:last]
            work.known[first:last] = carried.known[first:last]
            work.changes[first:last] = carried.changes[first:last]
            work.seeded = (first, last)
        else:
            _take(work, positions)
            # The newest run, for the walks that skip it (see ``seeded``).
            at = len(positions) - 1
            while at and positions[at - 1] == positions[at] - 1:
                at -= 1
            work.seeded = (positions[at], last)
    # After both spans no output is masked.
    _take(work, _carried(work, max(span[2], old[2], offered - 1) + 1, limit))


def _carried(work: Work, start: int, end: int) -> Sequence[int]:
    """Positions in ``[start, end)`` whose carried governed versions hold (C-level)."""
    carried = work.carried
    assert carried is not None
    if end <= start:
        return ()
    # A position this call already governed (the budget check) and whose result masking
    # now replaces was invalidated, so its carried version is its version too.
    known = carried.known[start:end]
    gap = known.rfind(0)  # the last position the previous call did not govern (-1: none)
    low = start + gap + 1
    # A facts list this call grew in place holds the same facts up to ``end`` (see
    # ``carried_size``): nothing to compare.
    grown = carried.facts is work.facts
    positions: Sequence[int]
    if known.find(1, 0, max(gap, 0)) < 0 and (
        grown or all(map(is_, work.facts[low:end], carried.facts[low:end]))
    ):
        # The usual case: what it governed is one run up to the end, found without a list.
        positions = range(low, end)
    elif grown:
        positions = list(compress(range(start, end), known))
    else:
        same = map(is_, work.facts[start:end], carried.facts[start:end])
        positions = list(compress(range(start, end), map(and_, same, known)))
    if carried.altered:
        positions = [p for p in positions if p not in carried.altered]
    return positions


def _take(work: Work, positions: Iterable[int]) -> None:
    """Take the carried governed versions of ``positions``."""
    carried = work.carried
    assert carried is not None
    for position in positions:
        work.messages[position] = carried.messages[position]
        work.set_tokens(position, carried.tokens[position])
        work.governed_tokens[position] = carried.tokens[position]
        work.known[position] = 1
        work.changes[position] = carried.changes[position]
        if position in carried.evicting:
            work.evicting.add(position)
