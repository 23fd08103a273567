"""One-line builders for sessions and messages in web, storage and live tests."""

from __future__ import annotations

from typing import Any

from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from sessions.models import AgentSession


def make_session(
    owner: Any, title: str = "Fix the build", model: str = "openai:gpt-4o", **kw: Any
) -> AgentSession:
    return AgentSession.objects.create(owner=owner, title=title, model=model, **kw)


def user(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)])


def reply(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


def call(tool: str, call_id: str, **args: Any) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=call_id)])


def result(tool: str, call_id: str, content: Any) -> ModelRequest:
    return ModelRequest(parts=[ToolReturnPart(tool, content, tool_call_id=call_id)])


def agent_turns(turns: int, calls: int, output: str, first: str = "start") -> list[Any]:
    """``turns`` user turns of ``calls`` tool call/return pairs each (returning ``output``)
    and a closing reply: an agent's history, with earlier turns the window can cut."""
    history: list[Any] = []
    for t in range(turns):
        history.append(user(first if t == 0 else f"next task {t}"))
        for c in range(calls):
            call_id = f"c{t}_{c}"
            history += [
                call("read", call_id, path=f"src/m{t}_{c}.py"),
                result("read", call_id, output),
            ]
        history.append(reply(f"turn {t} done"))
    return history
