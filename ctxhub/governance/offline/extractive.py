"""``offline:extractive``: a deterministic summariser that copies rather than writes.

It reads the transcript compaction sends (between ``<transcript>`` tags) and picks: the goal
(an earlier summary's, else the first user message), sentences that state decisions or
pending work, the paths, URLs, identifiers and commands mentioned, the error lines, and the
latest assistant message as the current state. Same input, same summary; no model, no network.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.profiles import ModelProfile

from ..draft import SummaryDraft, parse_draft, render_draft
from ..fact_finders import commands_in, errors_in, identifiers_in, paths_in, urls_in

OFFLINE_EXTRACTIVE = "offline:extractive"
DEFAULT_WINDOW = 32_000
"""The window the summariser declares, so compaction chunks transcripts to this size."""

_ENTRY = re.compile(
    r"^\[(user|assistant|tool call [^\]]*|tool result [^\]]*|retry|earlier summary|"
    r"summary of part \d+ of \d+)\]",
    re.M,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_DECISION = re.compile(
    r"\b(decid\w*|chose|chosen|choose|will use|going to|instead|switch\w* to|settled on|"
    r"agreed|prefer|we'll|let's)\b",
    re.I,
)
_PENDING = re.compile(
    r"\b(todo|to do|next|pending|remaining|still need|need to|needs to|not yet|later|"
    r"follow[- ]up|open question)\b",
    re.I,
)
_ITEM_CHARS = 240
_MAX_DECISIONS = 8
_MAX_PENDING = 6
_MAX_FILES = 40
_MAX_ERRORS = 8


def _entries(transcript: str) -> list[tuple[str, str]]:
    """(kind, text) of each transcript entry, in order."""
    marks = list(_ENTRY.finditer(transcript))
    entries = []
    for number, mark in enumerate(marks):
        end = marks[number + 1].start() if number + 1 < len(marks) else len(transcript)
        entries.append((mark.group(1), transcript[mark.end() : end].strip()))
    return entries


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _ITEM_CHARS else text[: _ITEM_CHARS - 1] + "…"


def _unique(values: Iterable[str], limit: int, *, newest: bool = False) -> list[str]:
    seen: dict[str, None] = {}
    for value in values:
        value = _short(value)
        if value:
            seen.setdefault(value, None)
    items = list(seen)
    return items[-limit:] if newest else items[:limit]


def _sentences(texts: Iterable[str], pattern: re.Pattern[str]) -> list[str]:
    return [s for text in texts for s in _SENTENCE.split(text) if pattern.search(s)]


def extractive_draft(transcript: str) -> SummaryDraft:
    """The extractive summary of a transcript."""
    entries = _entries(transcript) or [("user", transcript)]
    earlier = [parse_draft(text) for kind, text in entries if kind == "earlier summary"]
    earlier += [parse_draft(text) for kind, text in entries if kind.startswith("summary of part")]
    users = [text for kind, text in entries if kind == "user"]
    prose = [text for kind, text in entries if kind in ("user", "assistant")]
    assistant = [text for kind, text in entries if kind == "assistant"]

    goal = next((d.goal for d in earlier if d.goal.strip()), "")
    if not goal:
        goal = _short(_SENTENCE.split(users[0])[0]) if users else "not recorded"
    decisions = _unique(
        [*(x for d in earlier for x in d.decisions), *_sentences(assistant, _DECISION)],
        _MAX_DECISIONS,
        newest=True,
    )
    pending = _unique(
        [*(x for d in earlier for x in d.pending_tasks), *_sentences(prose[-6:], _PENDING)],
        _MAX_PENDING,
        newest=True,
    )
    calls = [text for kind, text in entries if kind.startswith("tool call")]
    mentioned = [text for text in [*prose, *calls]]
    files = _unique(
        [
            *(x for d in earlier for x in d.files_and_identifiers),
            *(p for text in mentioned for p in paths_in(text)),
            *(u for text in mentioned for u in urls_in(text)),
            *(c for text in mentioned for c in commands_in(text)),
            *(i for text in prose for i in identifiers_in(text, prose=False)),
        ],
        _MAX_FILES,
        newest=True,
    )
    errors = _unique(
        [
            *(x for d in earlier for x in d.errors_and_fixes),
            *(
                e
                for kind, text in entries
                if not kind.startswith("summary")
                for e in errors_in(text)
            ),
        ],
        _MAX_ERRORS,
        newest=True,
    )
    if assistant:
        state = _short(assistant[-1])
    elif earlier:
        state = _short(earlier[-1].current_state)
    else:
        state = _short(entries[-1][1])
    return SummaryDraft(
        goal=goal,
        decisions=decisions,
        files_and_identifiers=files,
        errors_and_fixes=errors,
        pending_tasks=pending,
        current_state=state or "not recorded",
    )


def _transcript(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    text = part.content
                    start = text.find("<transcript>")
                    end = text.rfind("</transcript>")
                    if start != -1 and end > start:
                        return text[start + len("<transcript>") : end]
                    return text
    return ""


def _summarise(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    draft = extractive_draft(_transcript(messages))
    if info.output_tools:
        tool = info.output_tools[0]
        return ModelResponse(
            parts=[ToolCallPart(tool.name, draft.model_dump(), tool_call_id="offline-summary")],
            model_name=OFFLINE_EXTRACTIVE,
        )
    return ModelResponse(parts=[TextPart(render_draft(draft))], model_name=OFFLINE_EXTRACTIVE)


def extractive_model(window: int = DEFAULT_WINDOW) -> FunctionModel:
    """The offline extractive summariser as a pydantic-ai model named ``offline:extractive``."""
    return FunctionModel(
        _summarise,
        model_name=OFFLINE_EXTRACTIVE,
        profile=ModelProfile(
            supports_json_schema_output=True,
            supports_json_object_output=True,
            context_window=window,
        ),
    )
