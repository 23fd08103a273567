"""Where evicted tool outputs live, and how an agent reads them back.

``govern`` stays pure: it returns evicted texts in ``Governed.evicted`` and never writes
anywhere. Whoever runs it puts them in an ``EvictionStore`` — the capability keeps them in
memory, the hub in its database — and ``read_evicted`` serves a slice of one back to the model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Protocol, runtime_checkable


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
    if grep:
        try:
            pattern = re.compile(grep)
        except re.error as error:
            return f"Invalid grep pattern {grep!r}: {error}."
        numbered = [(n, line) for n, line in numbered if pattern.search(line)]
    selected = numbered[offset : offset + limit]
    what = f"matches of {grep!r}" if grep else "lines"
    header = (
        f"[{ref}: {what} {offset}-{offset + len(selected) - 1 if selected else offset} "
        f"of {len(numbered)}; the output has {len(lines)} lines]"
    )
    body = "\n".join(f"{n}: {line}" for n, line in selected)
    return f"{header}\n{body}" if body else header
