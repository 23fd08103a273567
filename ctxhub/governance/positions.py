"""Positions in a repaired history: the history read by position, the few messages the window
looks for, and which step left each dropped position out."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import chain, compress
from typing import Protocol

from pydantic_ai.messages import ModelMessage

from .names import StepName


class Messages(Protocol):
    """A history read by position: a list, or a caller's sequence that loads a message only
    when it is asked for (governance reads only the messages it sends or changes)."""

    def __len__(self) -> int: ...

    def __getitem__(self, position: int, /) -> ModelMessage: ...


@dataclass(frozen=True, slots=True)
class Landmarks:
    """Positions of the few messages the window looks for, known without a pass over all."""

    system: list[int]
    """Messages with a system prompt part."""
    aborted: list[int]
    """Turn-aborted markers."""
    notices: list[int]
    """Window notices from earlier governance passes."""
    latest_call: dict[str, int]
    """Tool name → the latest response calling it."""
    first_text: int | None = None
    """The first response with text (where the head ends)."""
    results_between: tuple[int, int] | None = None
    """First and last positions that may hold a tool output (None: no position does)."""


class Drops(Mapping[int, StepName]):
    """The step that left each dropped position out: the window's drops kept as one range.

    The window drops thousands of positions of a long history on every call; recording them
    one by one would be a Python pass over the history. Other drops are few and kept by
    position.
    """

    __slots__ = ("_end", "_mask", "_start", "_step", "_steps")

    def __init__(self) -> None:
        self._steps: dict[int, StepName] = {}
        self._start = self._end = 0
        self._mask = bytearray()
        self._step: StepName = "window"

    def add(self, position: int, step: StepName) -> None:
        """Record one dropped position."""
        self._steps[position] = step

    def add_range(self, start: int, mask: bytearray, step: StepName) -> None:
        """Record the positions from ``start`` on whose ``mask`` entry is true (one range)."""
        assert not self._mask, "one range of drops per call"
        self._start, self._end, self._mask, self._step = start, start + len(mask), mask, step

    def __getitem__(self, position: int) -> StepName:
        step = self._steps.get(position)
        if step is not None:
            return step
        if self._start <= position < self._end and self._mask[position - self._start]:
            return self._step
        raise KeyError(position)

    def __iter__(self) -> Iterator[int]:
        ranged = compress(range(self._start, self._end), self._mask)
        return chain((p for p in ranged if p not in self._steps), self._steps)

    def __len__(self) -> int:
        return sum(1 for _ in self)
