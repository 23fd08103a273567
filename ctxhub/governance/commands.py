"""Manual commands as engine functions: ``/compact [focus]``, ``/clear`` and ``/history``.

The hub parses what the user typed with ``parse_command`` and calls ``run_command``; each
command returns the new history (None when it leaves the history as it is) and a line to show.

* ``/compact [focus]`` summarises the history into co-cli's two-message form: one request
  holding the system prompt, the user's recent messages and ``[Compacted conversation
  summary]`` with the summary, then ``Understood. I have the conversation context.``; pinned
  messages and protected tools' results follow, verbatim.
* ``/clear`` empties the history.
* ``/history`` reports figures: turns, messages, tool calls, tokens and the share of the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models import Model

from .compact import Compacted, compact
from .counting import is_tool_result
from .facts import count_tokens
from .policy import Policy
from .summaries import is_summary
from .tokens import context_window, tokenizer_for

CommandName = Literal["compact", "clear", "history"]


@dataclass(frozen=True)
class Command:
    """A parsed command and its argument (the focus of ``/compact``)."""

    name: CommandName
    argument: str | None = None


def parse_command(text: str) -> Command | None:
    """The command in a line the user typed, or None when it is not one of ours."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    word, _, rest = stripped[1:].partition(" ")
    name = word.lower()
    if name == "compact":
        return Command("compact", rest.strip() or None)
    if name in ("clear", "history"):
        return Command(name)  # type: ignore[arg-type]
    return None


class HistoryFigures(BaseModel):
    """What ``/history`` shows."""

    model_config = ConfigDict(frozen=True)

    messages: int
    requests: int
    responses: int
    user_turns: int
    """Requests carrying a user prompt (compaction summaries excluded)."""
    tool_calls: int
    tool_results: int
    summaries: int
    tokens: int
    window_tokens: int
    percent_of_window: float
    encoding: str
    exact: bool

    def line(self) -> str:
        """One line for a chat transcript."""
        approx = "" if self.exact else "~"
        share = self.percent_of_window
        percent = "<0.1 %" if 0 < share < 0.1 else f"{share:.1f} %"
        return (
            f"{_count(self.user_turns, 'user turn')}, {_count(self.messages, 'message')} "
            f"({_count(self.tool_calls, 'tool call')}), {approx}{self.tokens:,} tokens = "
            f"{percent} of a {self.window_tokens:,}-token window"
            + (f", {_count(self.summaries, 'summary', 'summaries')}" if self.summaries else "")
        )


def _count(number: int, one: str, many: str | None = None) -> str:
    """``1 tool call``, ``2,048 tool calls``."""
    return f"{number:,} {one if number == 1 else many or one + 's'}"


def history_figures(
    messages: Sequence[ModelMessage], *, model: str | None = None, policy: Policy | None = None
) -> HistoryFigures:
    """Figures of a history; read-only."""
    policy = policy or Policy()
    tokenizer = tokenizer_for(model)
    window = policy.context_window or context_window(model)
    tokens = count_tokens(messages, model=model)
    requests = [m for m in messages if isinstance(m, ModelRequest)]
    return HistoryFigures(
        messages=len(messages),
        requests=len(requests),
        responses=sum(1 for m in messages if isinstance(m, ModelResponse)),
        user_turns=sum(
            1
            for m in requests
            if not is_summary(m) and any(isinstance(p, UserPromptPart) for p in m.parts)
        ),
        tool_calls=sum(
            1
            for m in messages
            if isinstance(m, ModelResponse)
            for p in m.parts
            if isinstance(p, ToolCallPart)
        ),
        tool_results=sum(1 for m in requests for p in m.parts if is_tool_result(p)),
        summaries=sum(1 for m in messages if is_summary(m)),
        tokens=tokens,
        window_tokens=window,
        percent_of_window=round(100 * tokens / window, 2) if window else 0.0,
        encoding=tokenizer.encoding_name,
        exact=tokenizer.exact,
    )


def clear(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """``/clear``: an empty history (the log keeps everything; the hub records the clear)."""
    del messages
    return []


async def compact_command(
    messages: Sequence[ModelMessage],
    policy: Policy | None = None,
    *,
    summarizer: Model | str,
    focus: str | None = None,
    model: str | None = None,
    pinned: frozenset[int] | set[int] = frozenset(),
) -> Compacted:
    """``/compact [focus]``: the whole history in the two-message form of co-cli."""
    return await compact(
        messages,
        policy,
        summarizer=summarizer,
        model=model,
        pinned=pinned,
        focus=focus,
        form="two_message",
    )


@dataclass(frozen=True)
class CommandResult:
    """What a command did: the new history (None: unchanged) and a line to show."""

    command: CommandName
    messages: list[ModelMessage] | None
    text: str
    figures: HistoryFigures | None = None
    compacted: Compacted | None = None


async def run_command(
    command: Command,
    messages: Sequence[ModelMessage],
    policy: Policy | None = None,
    *,
    summarizer: Model | str,
    model: str | None = None,
    pinned: frozenset[int] | set[int] = frozenset(),
) -> CommandResult:
    """Run a parsed command on a history."""
    if command.name == "clear":
        return CommandResult(
            command="clear", messages=clear(messages), text=f"Cleared {len(messages)} messages."
        )
    if command.name == "history":
        figures = history_figures(messages, model=model, policy=policy)
        return CommandResult(command="history", messages=None, text=figures.line(), figures=figures)
    compacted = await compact_command(
        messages, policy, summarizer=summarizer, focus=command.argument, model=model, pinned=pinned
    )
    report = compacted.report
    if report.outcome in ("nothing_to_compact", "refused"):
        reason = report.error or "nothing to compact"
        return CommandResult(
            command="compact", messages=None, text=f"Not compacted: {reason}.", compacted=compacted
        )
    how = "summarised" if report.outcome == "summarized" else "trimmed (the summariser failed)"
    text = (
        f"Compacted: {report.messages_before} messages {how} into {report.messages_after}; "
        f"{report.tokens_before} → {report.tokens_after} tokens."
    )
    return CommandResult(
        command="compact", messages=compacted.messages, text=text, compacted=compacted
    )
