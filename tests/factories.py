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
