"""What one ``govern`` call hands the next on the same history grown (``Carry``), and the counts
the next takes from it before anything else (``base_counts``)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from pydantic_ai.messages import ModelMessage

from .facts import MessageFacts
from .parts import Transform


@dataclass(frozen=True, slots=True)
class Carry:
    """What one ``govern`` call worked out, for the next call on the same history grown.

    The next call's normalised history begins like this one's (up to where pair repair treats
    the new messages differently, found in a few C-level comparisons), so the counts before
    caps are taken from ``base_tokens``. A position's governed version depends only on its
    message, the part-cap settings, the pinned positions, whether it is before the current
    turn (or is its latest user request) and whether masking replaces its results. Before both
    calls' current turns (or anywhere, when both are in the same turn), strictly inside both
    masked spans (every output masked) and past both spans (no output masked), the next call
    takes the versions this one governed as they are,
    when the facts at the position are the same object (the same message: facts are cached by
    message identity, and a caller passing stored facts keeps one object per message). Only
    positions from ``governed_from`` on are offered: below it the window dropped the history,
    most of it unread, so looking there would be a pass over the history for next to nothing.

    Whether the history is over budget with caps alone decides masking, and proving it walks
    from the newest message back until the budget is spent. The counts with caps alone that
    the walk took are carried by the same rule (before both current turns, or anywhere in the
    same turn, for the same facts object), so the next call's walk reads them instead of
    governing those messages again.
    """

    facts: list[MessageFacts]
    """The call's facts. The call extending it may since have taken the list over (cut back
    to where their pair repairs differ and grown again in place): read within
    ``carried_size`` only."""
    base_tokens: array[int]
    """Tokens of each position before caps and masks."""
    base_total: int
    messages: list[ModelMessage | None]
    tokens: array[int]
    """Governed tokens of each position; -1 where the call did not govern it."""
    known: bytearray
    """1 where the call governed the position."""
    changes: list[tuple[tuple[int, Transform], ...]]
    span: tuple[int, int, int, int] | None
    turn: tuple[int, int | None]
    """Where the current turn starts and its latest user request."""
    governed_from: int
    altered: frozenset[int]
    """Positions whose messages a step changed past their governed versions (``set_part``)."""
    settings: tuple[int, frozenset[int]]
    """The part-cap settings key and the pinned positions."""
    capped: array[int]
    """Tokens of each position with caps alone (no mask); -1 where the call did not count it."""
    evicting: set[int]
    """Positions whose governed versions evict an output."""

    @property
    def size(self) -> int:
        """How many positions the call governed."""
        return len(self.known)


def common_prefix(old: list[Any], new: list[Any]) -> int:
    """How many leading items two lists share (equal items; the same object is equal).

    A few C-level list comparisons, halving the stretch that differs: on lists that agree
    but for their last few items this costs about two passes, never a Python loop.
    """
    size = min(len(old), len(new))
    if old[:size] == new[:size]:
        return size
    low, high = 0, size  # old[:low] == new[:low]; the first difference is before high
    while high - low > 1:
        middle = (low + high) // 2
        if old[low:middle] == new[low:middle]:
            low = middle
        else:
            high = middle
    return low


def base_counts(
    carried: Carry | None, facts: list[MessageFacts], shared: int | None
) -> tuple[array[int], int, int]:
    """Tokens of each position before caps and masks, their sum, and how many leading facts
    are the carried call's (``shared``, compared when None), whose counts are taken whole."""
    # Machine-integer arrays rather than lists: copying, slicing and filling them is a memory
    # copy, with no reference counts to touch on every item.
    if carried is None:
        base = array("q", map(_TOKENS, facts))
        return base, sum(base), 0
    same = common_prefix(carried.facts, facts) if shared is None else shared
    same = min(same, carried.size)  # the carried list may since have been grown in place
    base = carried.base_tokens[:same]
    base.extend(map(_TOKENS, facts[same:]))
    total = carried.base_total - sum(carried.base_tokens[same:]) + sum(base[same:])
    return base, total, same


_TOKENS = attrgetter("tokens")
