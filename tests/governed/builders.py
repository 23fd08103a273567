"""Agentic turns and small-window sessions for the governed-session tests."""

from __future__ import annotations

from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)

from sessions import services
from sessions.models import AgentSession
from tests.factories import make_session
from tests.messages import reply, user

# A window small enough that a dozen turns need governing and compaction has a middle, and
# large enough that the request governing sends carries more than the head and the latest
# turn: a compaction (which never makes the next request larger) has room for its summary.
SMALL_POLICY: dict[str, Any] = {
    "context_window": 16_000,
    "reserved_output_tokens": 500,
    "compaction": {"auto": False},
}


def varied_words(n: int, word: str = "line") -> str:
    """About ``n`` tokens of text over lines of ten words, no two lines alike (nothing in it
    is a repeat the engine would fold)."""
    return "\n".join(" ".join([f"{word}{i}"] * 10) for i in range(max(1, n // 10)))


def turn(n: int, *, size: int = 300, calls: int = 2, dangling: bool = False) -> list[ModelMessage]:
    """One user request, one round of tool calls and their results, and an answer."""
    system = "You are a careful engineer." if n == 0 else None
    out: list[ModelMessage] = [
        user(f"Task {n}: fix src/module_{n}.py on host db-west-{n}", system=system)
    ]
    parts = [
        ToolCallPart("read_file", {"path": f"src/module_{n}_{i}.py"}, tool_call_id=f"c{n}_{i}")
        for i in range(calls)
    ]
    out.append(ModelResponse(parts=list(parts)))
    if dangling:
        return out
    out.append(
        ModelRequest(
            parts=[
                ToolReturnPart(
                    "read_file", varied_words(size, f"t{n}x{i}"), tool_call_id=f"c{n}_{i}"
                )
                for i in range(calls)
            ]
        )
    )
    out.append(reply(f"Fixed module {n}; tests pass."))
    return out


def agentic_session(owner: Any, turns: int = 12, **policy: Any) -> AgentSession:
    session = make_session(owner, title="Agentic work", policy={**SMALL_POLICY, **policy})
    for n in range(turns):
        services.append_messages(session, turn(n))
    return session
