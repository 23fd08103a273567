"""Where evicted tool outputs live, and how an agent reads them back.

``govern`` stays pure: it returns evicted texts in ``Governed.evicted`` and never writes
anywhere. Whoever runs it puts them in an ``EvictionStore`` — the capability keeps them in
memory, the hub in its database — and ``read_evicted`` serves a slice of one back to the model.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import regex


@runtime_checkable
class EvictionStore(Protocol):
    """Storage for evicted outputs, by reference."""

    def put(self, ref: str, text: str) -> None:
        """Keep ``text`` under ``ref`` (refs derive from content, so a repeat is a no-op)."""

    def get(self, ref: str) -> str | None:
        """The text stored under ``ref``, or None."""


class InMemoryEvictionStore:
    """An ``EvictionStore`` in a dict, for one process."""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}

    def put(self, ref: str, text: str) -> None:
        """Keep ``text`` under ``ref``."""
        self._texts.setdefault(ref, text)

    def put_all(self, texts: Mapping[str, str]) -> None:
        """Keep every text of a ``Governed.evicted`` mapping."""
        for ref, text in texts.items():
            self.put(ref, text)

    def get(self, ref: str) -> str | None:
        """The text stored under ``ref``, or None."""
        return self._texts.get(ref)

    def __len__(self) -> int:
        return len(self._texts)


MAX_LINES = 2_000


def read_evicted(
    text: str | None, ref: str, *, offset: int = 0, limit: int = 200, grep: str | None = None
) -> str:
    """Lines of an evicted output, numbered: ``limit`` lines from ``offset`` (0-based).

    With ``grep`` (a regular expression), only matching lines are listed, still numbered, and
    ``offset`` / ``limit`` apply to the matches.
    """
    if text is None:
        return f"No evicted output with reference {ref!r}."
    limit = max(1, min(limit, MAX_LINES))
    offset = max(0, offset)
    lines = text.splitlines()
    numbered = list(enumerate(lines))
    stopped = ""
    if grep:
        try:
            pattern = regex.compile(grep)
        except regex.error as error:
            return f"Invalid grep pattern {grep!r}: {error}."
        numbered, stopped_at = _matching(pattern, numbered)
        if stopped_at is not None:
            stopped = (
                f"; grep stopped at line {stopped_at} after {GREP_SECONDS:g} s (the pattern "
                "backtracks too much: simplify it), so the matches are those before it"
            )
    selected = numbered[offset : offset + limit]
    what = f"matches of {grep!r}" if grep else "lines"
    header = (
        f"[{ref}: {what} {offset}-{offset + len(selected) - 1 if selected else offset} "
        f"of {len(numbered)}; the output has {len(lines)} lines{stopped}]"
    )
    body = "\n".join(f"{n}: {line}" for n, line in selected)
    return f"{header}\n{body}" if body else header


GREP_SECONDS = 1.0
"""The time one grep may take: a pattern that backtracks (``(\\w+\\s?)*$`` over a long line)
can otherwise hold a CPU for minutes."""


def _matching(
    pattern: regex.Pattern[str], numbered: list[tuple[int, str]]
) -> tuple[list[tuple[int, str]], int | None]:
    """The numbered lines ``pattern`` finds something in, and the line where the time ran out
    (None when it did not)."""
    deadline = time.monotonic() + GREP_SECONDS
    found = []
    for number, line in numbered:
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            if pattern.search(line, timeout=left):
                found.append((number, line))
        except TimeoutError:
            return found, number
    return found, None
