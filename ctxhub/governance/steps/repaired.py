"""The history pair repair hands on: its messages, read from the input only where repair
changed nothing, and how each position relates to the input (see ``normalize``)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from pydantic_ai.messages import ModelMessage

from ..facts import MessageFacts
from ..positions import Messages

_AFTER_ANY = 1 << 62
"""Larger than any position, so a bisect on (index, _AFTER_ANY) lands after that index's run."""


class Repaired:
    """The repaired history's messages, each read from the input only when asked for.

    Messages pair repair rebuilt or added are held here; every other position is the input
    message at its index, so a history given lazily is loaded only where governance looks.
    """

    __slots__ = ("_index", "_inputs", "_own")

    def __init__(
        self, inputs: Messages, index: list[int | None], own: dict[int, ModelMessage]
    ) -> None:
        self._inputs = inputs
        self._index = index
        self._own = own

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, position: int) -> ModelMessage:
        own = self._own.get(position)
        if own is not None:
            return own
        index = self._index[position]
        assert index is not None
        return self._inputs[index]

    def reader(
        self, start: int, end: int, governed: list[ModelMessage | None]
    ) -> tuple[Callable[[int], ModelMessage], Sequence[int | None]]:
        """How to read positions ``[start, end)`` in one C-level pass: a function of input
        indices and the input index of each position. ``governed`` (the governed messages of
        those positions; None where a position sends its repaired message) is given the
        messages repair rebuilt or added there, so the function is asked only for input
        messages."""
        own = self._own
        positions = list(own)  # keyed in increasing order, as repair adds them
        for at in range(bisect_left(positions, start), bisect_left(positions, end)):
            position = positions[at]
            if governed[position - start] is None:
                governed[position - start] = own[position]
        return self._inputs.__getitem__, self._index[start:end]


@dataclass
class Normalized:
    """The repaired history and how each of its messages relates to the input."""

    messages: Messages
    facts: list[MessageFacts]
    index: Sequence[int | None]
    """Input index of each message; None for a message added to hold answers."""
    origins: dict[int, list[int | None]]
    """For changed messages: the input part index of each part (None when repair put it there:
    synthesized, or moved from a later message — see ``moved``)."""
    removed: dict[int, list[int]]
    """Input message index → indices of its parts removed: orphans, duplicates, and results
    moved to the request after their call."""
    dropped: list[int]
    """Input indices of messages emptied by repair and left out."""
    changed: bool
    runs: list[tuple[int, int, int]] | None = None
    """(first input index, its position, length) of each run of input messages kept in order;
    None when nothing was repaired (every message at its own index)."""
    moved: dict[int, dict[int, tuple[int, int]]] = field(default_factory=dict)
    """Position → {part number: (input index, part index)} of the late results repair moved
    there; each is also in ``removed`` at its input index."""
    own: dict[int, ModelMessage] = field(default_factory=dict)
    """Position → message repair rebuilt or added there."""
    checkpoints: list[Checkpoint] = field(default_factory=list)
    """Where the pass that made this could be taken up again, in input order (see ``resume``)."""
    inputs: int = 0
    """How many input messages were repaired."""
    text: str = ""
    """The text of synthetic results."""
    shared: int | None = None
    """How many leading ``facts`` are those of the repair this one took up (None: unknown)."""

    def position_of(self, index: int) -> int | None:
        """The position of an input message in the repaired history; None if it was dropped."""
        if self.runs is None:
            return index
        at = bisect_right(self.runs, (index, _AFTER_ANY, 0)) - 1
        if at < 0:
            return None
        first, position, length = self.runs[at]
        return position + index - first if index < first + length else None


class Checkpoint(NamedTuple):
    """The state of a repair pass before it reaches an input message with nothing pending."""

    site: int
    """Input index the pass is about to look at."""
    length: int
    """Messages in the repaired history so far."""
    runs: int
    """Runs recorded so far."""
    copied: int
    """Input messages read so far (those before ``site`` not yet in a run are copied next)."""
