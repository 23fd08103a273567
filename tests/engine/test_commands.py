"""Manual commands: /compact in the two-message form, /clear and /history."""

from __future__ import annotations

from engine_builders import MODEL
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
)

from ctxhub.governance import count_tokens, pairing_problems
from ctxhub.governance.commands import Command, parse_command, run_command
from ctxhub.governance.summaries import ACKNOWLEDGEMENT, COMPACT_PREFIX, summary_count
from tests.messages import reply, tool_call, tool_result, user, words


def _history() -> list[ModelMessage]:
    history: list[ModelMessage] = [user("Plan the launch", system="Be brief."), reply("Ok.")]
    for k in range(12):
        history += [
            user(f"step {k}: check launch/{k}.md"),
            tool_call("read_file", id=f"c{k}", path=f"launch/{k}.md"),
            tool_result("read_file", words(120, f"w{k}"), id=f"c{k}"),
            reply(f"checked {k}"),
        ]
    return history


def test_it_parses_the_commands() -> None:
    assert parse_command("/compact keep the API decisions") == Command(
        "compact", "keep the API decisions"
    )
    assert parse_command(" /compact ") == Command("compact")
    assert parse_command("/clear") == Command("clear")
    assert parse_command("/HISTORY") == Command("history")
    assert parse_command("/unknown") is None
    assert parse_command("compact please") is None


async def test_compact_produces_the_two_message_form() -> None:
    history = _history()
    result = await run_command(
        Command("compact", "launch files"), history, summarizer="offline:extractive", model=MODEL
    )
    assert result.messages is not None
    first, second = result.messages
    assert isinstance(first, ModelRequest)
    assert isinstance(second, ModelResponse)
    assert isinstance(first.parts[0], SystemPromptPart)
    summary = first.parts[-1].content
    assert isinstance(summary, str)
    assert summary.startswith(f"{COMPACT_PREFIX}\n## Goal")
    assert "launch/0.md" in summary
    assert second.parts == [TextPart(ACKNOWLEDGEMENT)]
    # The user's own words stay verbatim, the newest included.
    assert any(getattr(p, "content", None) == "step 11: check launch/11.md" for p in first.parts)
    assert result.compacted is not None
    assert result.compacted.report.focus == "launch files"
    assert result.text.startswith("Compacted: 50 messages summarised into 2")
    again = await run_command(
        Command("compact"),
        [*result.messages, *history[2:10]],
        summarizer="offline:extractive",
        model=MODEL,
    )
    assert again.messages is not None
    assert summary_count(again.messages) == 1
    assert pairing_problems(again.messages) == []


async def test_clear_and_history() -> None:
    history = _history()
    cleared = await run_command(Command("clear"), history, summarizer="offline:extractive")
    assert cleared.messages == []
    assert cleared.text == "Cleared 50 messages."
    shown = await run_command(
        Command("history"), history, summarizer="offline:extractive", model=MODEL
    )
    assert shown.messages is None
    figures = shown.figures
    assert figures is not None
    assert (figures.messages, figures.user_turns, figures.tool_calls, figures.tool_results) == (
        50,
        13,
        12,
        12,
    )
    assert figures.window_tokens == 128_000
    assert 0 < figures.percent_of_window < 5
    assert shown.text.startswith("13 user turns, 50 messages (12 tool calls), ")
    # Figures with separators and units, as the dashboard writes them.
    assert shown.text.endswith(" % of a 128,000-token window")
    assert f"{count_tokens(history, model=MODEL):,} tokens = " in shown.text
