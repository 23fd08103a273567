"""The fixed structure every compaction summary takes: six sections, always in one order.

``SummaryDraft`` is what a summariser is asked for; ``render_draft`` writes it as the summary
text and ``parse_draft`` pours a free-text answer back into it. Compaction (``compact.py``) and
the offline extractive summariser (``offline/extractive.py``) both build on it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

SECTIONS: tuple[tuple[str, str], ...] = (
    ("goal", "Goal"),
    ("decisions", "Decisions"),
    ("files_and_identifiers", "Files and identifiers"),
    ("errors_and_fixes", "Errors and fixes"),
    ("pending_tasks", "Pending tasks"),
    ("current_state", "Current state"),
)


class SummaryDraft(BaseModel):
    """The structure every summary takes, whatever the summariser answered."""

    goal: str = Field(description="What the user is trying to achieve.")
    decisions: list[str] = Field(default_factory=list)
    files_and_identifiers: list[str] = Field(default_factory=list)
    errors_and_fixes: list[str] = Field(default_factory=list)
    pending_tasks: list[str] = Field(default_factory=list)
    current_state: str = Field(description="Where the work stands now.")


def render_draft(draft: SummaryDraft) -> str:
    """The summary text: every section, always in the same order."""
    blocks: list[str] = []
    for field, title in SECTIONS:
        value: Any = getattr(draft, field)
        if isinstance(value, list):
            items = [" ".join(str(v).split()) for v in value if str(v).strip()]
            body = "\n".join(f"- {v}" for v in items) if items else "- none recorded"
        else:
            body = str(value).strip() or "not recorded"
        blocks.append(f"## {title}\n{body}")
    return "\n\n".join(blocks)


_HEADING = re.compile(r"^\s*#{1,6}\s*\**\s*(.+?)\s*\**\s*:?\s*$")


def parse_draft(text: str) -> SummaryDraft:
    """A free-text answer poured into the structure: known headings become fields, the rest
    is the current state."""
    titles = {title.lower(): field for field, title in SECTIONS}
    sections: dict[str, list[str]] = {}
    loose: list[str] = []
    field: str | None = None
    for line in text.splitlines():
        match = _HEADING.match(line)
        if match and match.group(1).lower() in titles:
            field = titles[match.group(1).lower()]
            sections.setdefault(field, [])
            continue
        (sections[field] if field is not None else loose).append(line)

    def listed(name: str) -> list[str]:
        lines = [ln.strip() for ln in sections.get(name, []) if ln.strip()]
        return [ln[2:].strip() if ln.startswith(("- ", "* ")) else ln for ln in lines]

    def prose(name: str) -> str:
        return "\n".join(sections.get(name, [])).strip()

    state = "\n".join([prose("current_state"), *loose]).strip()
    return SummaryDraft(
        goal=prose("goal"),
        decisions=listed("decisions"),
        files_and_identifiers=listed("files_and_identifiers"),
        errors_and_fixes=listed("errors_and_fixes"),
        pending_tasks=listed("pending_tasks"),
        current_state=state,
    )


def fit_draft(draft: SummaryDraft, tokens: int, count: Callable[[str], int]) -> SummaryDraft:
    """``draft`` cut until its text takes at most ``tokens`` (as ``count`` counts them): the
    oldest entry of the longest list first (lists run oldest to newest), then the ends of the
    goal and the current state. A summariser may write past the length it was asked for; the
    room it was given is the compaction's promise."""
    if count(render_draft(draft)) <= tokens:
        return draft
    lists = {field: list(getattr(draft, field)) for field, _ in SECTIONS if field in _LISTS}
    fitted = draft
    while any(lists.values()):
        longest = max(lists, key=lambda field: len(lists[field]))
        del lists[longest][0]
        fitted = draft.model_copy(update=lists)
        if count(render_draft(fitted)) <= tokens:
            return fitted
    for field in ("goal", "current_state"):
        text: str = getattr(fitted, field)
        while text and count(render_draft(fitted)) > tokens:
            text = text[: len(text) // 2].rstrip() + "…" if len(text) > 8 else ""
            fitted = fitted.model_copy(update={field: text})
    return fitted


_LISTS = frozenset({"decisions", "files_and_identifiers", "errors_and_fixes", "pending_tasks"})
