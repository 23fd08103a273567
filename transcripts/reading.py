"""What a transcript reader gives, whatever the agent that wrote the file: the conversation
of each session the file holds, as pydantic-ai messages with the lines they came from, the
compactions the agent made, the lines kept as they were and those that could not be read.

A reader reads lines from where the last read stopped and never sees the file whole: that is
what lets an import be run again, and a running agent be followed, at the cost of what it
adds. It stops before a group of lines that may not be finished (a response the agent is still
writing, a compaction whose summary is not there yet) unless it is told the file is done.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest
from pydantic_ai.usage import RequestUsage

from gateway.wire import BodyError
from sessions.payloads import no_constant

MAX_LINE_BYTES = 64 * 2**20
"""A longer line is reported, not read: no agent writes one (Claude Code's largest, a tool
result with images, are a few MB)."""


@dataclass(frozen=True, slots=True)
class Line:
    number: int
    """From 1, in the whole file."""
    text: str
    end: int
    """The byte offset just past it (its newline included)."""


@dataclass(slots=True)
class Said:
    """A message of the conversation, from one line or several (a response written a content
    block a line)."""

    view: ModelMessage
    lines: list[int]
    at: datetime | None


@dataclass(slots=True)
class Compacted:
    """The agent replaced the conversation so far by a summary of it."""

    summary: str
    trigger: str
    """manual or auto, as the agent recorded it ('' when it did not)."""
    lines: list[int]
    at: datetime | None
    usage: RequestUsage | None = None
    """The usage of the model call that wrote the summary, where the agent recorded it."""
    prompts_kept: int = 0
    """Tokens of the user's own prompts the agent keeps beside the summary, the newest first
    (Codex keeps 20,000; Claude Code none)."""


@dataclass(slots=True)
class Kept:
    """A line with no message of the conversation, kept as it was."""

    line: int
    kind: str
    raw: str


@dataclass(slots=True)
class Titled:
    """The agent named the session."""

    line: int
    title: str


type Unit = Said | Compacted | Kept | Titled


def first_line(unit: Unit) -> int:
    """The line a unit starts at."""
    if isinstance(unit, Said | Compacted):
        return unit.lines[0] if unit.lines else 0
    return unit.line


@dataclass(slots=True)
class Stream:
    """One session's part of a file: a file holds its session's conversation and, in Claude
    Code's older layout, its sub-agents' too."""

    source: str
    """The agent's id of the session."""
    parent: str = ""
    """The agent's id of the session it is a sub-agent of."""
    model: str = ""
    """The model that answered first, as ctxhub names it (``anthropic:claude-…``)."""
    title: str = ""
    """The first prompt's opening words."""
    units: list[Unit] = field(default_factory=list)

    def joined_results(self, view: ModelMessage, line: int) -> bool:
        """Whether ``view`` (tool results) joined the results just before it: the results of
        one response's calls, written a line each, are one request, as the model got them."""
        last = self.units[-1] if self.units else None
        if not (isinstance(last, Said) and _results_only(view) and _results_only(last.view)):
            return False
        last.view.parts = [*last.view.parts, *view.parts]
        last.lines.append(line)
        return True


def _results_only(view: ModelMessage) -> bool:
    return (
        isinstance(view, ModelRequest)
        and bool(view.parts)
        and all(part.part_kind == "tool-return" for part in view.parts)
    )


@dataclass(slots=True)
class Reading:
    """What a read of a file's lines gave."""

    streams: dict[str, Stream] = field(default_factory=dict)
    """By source, in the order they first appeared."""
    broken: list[tuple[int, str]] = field(default_factory=list)
    """The lines that could not be read: number and why."""
    state: dict[str, Any] = field(default_factory=dict)
    """The reader's state to carry to the next read."""
    hold: int | None = None
    """The line the next read must start from, when the lines from there on may belong to a
    group the agent is still writing (None: every line was read)."""

    def stream(self, source: str) -> Stream:
        return self.streams.setdefault(source, Stream(source))


def lines_from(data: bytes, start: int, first_number: int) -> Iterator[Line]:
    """The whole lines of ``data`` (a file's bytes from offset ``start`` on), numbered from
    ``first_number``; a last line with no newline yet is not given (the agent may be writing
    it). Bytes that are not UTF-8 are read as U+FFFD, as the line's JSON would fail to say."""
    position, number = 0, first_number
    while True:
        newline = data.find(b"\n", position)
        if newline < 0:
            return
        text = data[position:newline].decode("utf-8", "replace").rstrip("\r")
        position = newline + 1
        yield Line(number, text, start + position)
        number += 1


def parsed_line(line: Line) -> dict[str, Any] | str:
    """A line's JSON object, or why it is not one."""
    if len(line.text) > MAX_LINE_BYTES:
        return f"longer than {MAX_LINE_BYTES // 2**20} MB"
    try:
        value = json.loads(line.text, parse_constant=no_constant)
    except RecursionError:
        return "nested too deep"
    except ValueError as exc:
        return f"not JSON ({exc})"
    if not isinstance(value, dict):
        return "not a JSON object"
    return value


MAX_TOKENS = 100_000_000
"""More tokens than any request has carried: a usage figure above it is not one (and would not
fit the columns that keep it)."""


def checked_usage(usage: Any, field: str) -> None:
    """BodyError (naming ``field``) when a usage's counts are not whole numbers of tokens a
    request could have."""
    if usage is None:
        return
    if not isinstance(usage, dict):
        raise BodyError(field, "must be an object")
    for name, value in usage.items():
        if isinstance(value, bool) or not isinstance(value, int):
            continue  # a figure this reader does not use (service_tier, a nested breakdown)
        if not 0 <= value <= MAX_TOKENS:
            raise BodyError(f"{field}.{name}", f"{value} is not a count of tokens")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def timestamp(value: Any) -> datetime | None:
    """An ISO 8601 time as agents write them (``2025-06-01T12:00:00.123Z``); None otherwise."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def opening(text: str, words: int = 12) -> str:
    """A title from a prompt: its first line's opening words."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    title = " ".join(first.split()[:words])
    return title[:120] + ("…" if len(title) > 120 else "")
