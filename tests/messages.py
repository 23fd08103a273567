"""The messages every test builds, the engine's and the hub's: one line per message.

Timestamps are fixed (``T0``): a history built twice is the same history, byte for byte.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def user(text: str, *, system: str | None = None) -> ModelRequest:
    """A user's request, after a system prompt if given."""
    parts: list[Any] = [SystemPromptPart(system, timestamp=T0)] if system else []
    return ModelRequest(parts=[*parts, UserPromptPart(text, timestamp=T0)])


def reply(text: str) -> ModelResponse:
    """The model's answer in text."""
    return ModelResponse(parts=[TextPart(text)], timestamp=T0)


def tool_call(name: str, *, id: str, **args: Any) -> ModelResponse:
    """The model calling one tool with ``args``."""
    return ModelResponse(parts=[ToolCallPart(name, args or {}, tool_call_id=id)], timestamp=T0)


def tool_calls(*calls: tuple[str, str]) -> ModelResponse:
    """The model calling several tools at once: (name, id) each, no arguments."""
    return ModelResponse(
        parts=[ToolCallPart(name, {}, tool_call_id=id) for name, id in calls], timestamp=T0
    )


def tool_result(name: str, content: Any, *, id: str) -> ModelRequest:
    """What the tool called ``id`` returned."""
    return ModelRequest(parts=[ToolReturnPart(name, content, tool_call_id=id, timestamp=T0)])


def tool_results(*results: tuple[str, Any, str]) -> ModelRequest:
    """Several tools' returns in one request: (name, content, id) each."""
    return ModelRequest(
        parts=[ToolReturnPart(n, c, tool_call_id=i, timestamp=T0) for n, c, i in results]
    )


def words(n: int, word: str = "alpha") -> str:
    """About ``n`` tokens of text (one token per word), spread over lines of ten words."""
    return "\n".join(" ".join([word] * 10) for _ in range(max(1, n // 10)))


def agent_turns(turns: int, calls: int, output: str, first: str = "start") -> list[ModelMessage]:
    """``turns`` user turns of ``calls`` tool call/return pairs each (returning ``output``)
    and a closing reply: an agent's history, with earlier turns the window can cut."""
    history: list[ModelMessage] = []
    for t in range(turns):
        history.append(user(first if t == 0 else f"next task {t}"))
        for c in range(calls):
            call_id = f"c{t}_{c}"
            history += [
                tool_call("read", id=call_id, path=f"src/m{t}_{c}.py"),
                tool_result("read", output, id=call_id),
            ]
        history.append(reply(f"turn {t} done"))
    return history
