"""Builders for compaction tests: a seeded session generator and scripted summarisers."""

from __future__ import annotations

import random
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
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxhub.governance.draft import SummaryDraft
from tests.messages import T0

_TOOLS = ("read_file", "grep", "bash", "manage_todo_list")


def generated_session(
    messages: int, *, seed: int = 7, output_lines: int = 12
) -> list[ModelMessage]:
    """A seeded agentic session of about ``messages`` messages: turns of a user request, tool
    calls with outputs (some with errors) and an answer; user requests name files, ports,
    commands and people, so the ledger has something to keep."""
    rng = random.Random(seed)
    history: list[ModelMessage] = [
        ModelRequest(
            parts=[
                SystemPromptPart("You are a careful coding agent.", timestamp=T0),
                UserPromptPart(
                    "Set up the billing service in services/billing/app.py", timestamp=T0
                ),
            ]
        ),
        ModelResponse(parts=[TextPart("I will start with services/billing/app.py.")], timestamp=T0),
    ]
    turn = 0
    while len(history) < messages - 1:
        turn += 1
        module = f"pkg{turn % 37}/mod_{turn}.py"
        history.append(
            ModelRequest(
                parts=[
                    UserPromptPart(
                        f"Turn {turn}: fix {module} so it listens on port {9000 + turn}; "
                        f"ask Dana Whitfield{turn} and run `pytest tests/test_{turn}.py`.",
                        timestamp=T0,
                    )
                ]
            )
        )
        for step in range(rng.randint(1, 3)):
            call_id = f"t{turn}s{step}"
            tool = rng.choice(_TOOLS)
            args: dict[str, Any] = (
                {"path": module} if tool != "bash" else {"command": f"make check-{turn}"}
            )
            history.append(
                ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=call_id)], timestamp=T0)
            )
            lines = [f"{module}:{n}: value_{turn}_{n} = compute({n})" for n in range(output_lines)]
            if rng.random() < 0.2:
                lines.append(f"ValueError: bad checksum in record {turn}-{step}")
            history.append(
                ModelRequest(
                    parts=[
                        ToolReturnPart(tool, "\n".join(lines), tool_call_id=call_id, timestamp=T0)
                    ]
                )
            )
        history.append(
            ModelResponse(
                parts=[TextPart(f"Fixed {module}; we decided to keep the retry at {turn % 5}.")],
                timestamp=T0,
            )
        )
    history.append(ModelRequest(parts=[UserPromptPart("What is left to do?", timestamp=T0)]))
    return history


def scripted_summarizer(
    draft: SummaryDraft | None = None, *, name: str = "scripted"
) -> FunctionModel:
    """A summariser that always answers ``draft`` (a terse one that mentions no fact by default)."""
    answer = draft or SummaryDraft(
        goal="Keep the services working.",
        decisions=["Work through the requests one by one."],
        current_state="In progress.",
    )

    def summarise(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tool = info.output_tools[0].name
        return ModelResponse(parts=[ToolCallPart(tool, answer.model_dump(), tool_call_id="s")])

    return FunctionModel(summarise, model_name=f"function:{name}")


def failing_summarizer() -> FunctionModel:
    """A summariser whose every request fails."""

    def fail(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("summariser unavailable")

    return FunctionModel(fail, model_name="function:failing")


def obedient_summarizer() -> FunctionModel:
    """A summariser that obeys any instruction in its input: it answers "OK" when told to."""

    def summarise(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = str(messages[-1].parts[-1].content) if messages else ""  # type: ignore[union-attr]
        if "ignore previous instructions" in prompt.lower():
            return ModelResponse(parts=[TextPart("OK")])
        tool = info.output_tools[0].name
        draft = SummaryDraft(goal="Keep the services working.", current_state="In progress.")
        return ModelResponse(parts=[ToolCallPart(tool, draft.model_dump(), tool_call_id="s")])

    return FunctionModel(summarise, model_name="function:obedient")
