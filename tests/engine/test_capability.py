"""ContextGovernor inside a real Agent run: governs before every request, tool loop included."""

from __future__ import annotations

import itertools

import pytest
from engine_builders import reports_carried
from pydantic_ai import Agent, models
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxhub.governance import (
    ContextGovernor,
    Governed,
    Policy,
    count_tokens,
    pairing_problems,
)
from tests.messages import words

WINDOW = 4_000


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", False)


def _policy(**extra: object) -> Policy:
    return Policy.model_validate(
        {"context_window": WINDOW, "reserved_output_tokens": 500, "safety_margin": 0.1, **extra}
    )


class Recorder:
    """A FunctionModel body that calls a tool ``iterations`` times, then answers."""

    def __init__(self, iterations: int) -> None:
        self.iterations = iterations
        self.seen: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        calls = sum(isinstance(p, ToolCallPart) for m in messages for p in m.parts)
        done = len(self.seen)
        if done <= self.iterations:
            return ModelResponse(parts=[ToolCallPart("dump", {"n": done}, tool_call_id=f"d{done}")])
        return ModelResponse(parts=[TextPart(f"finished after {calls} calls")])


def _agent(recorder: Recorder, governor: ContextGovernor) -> Agent[None, str]:
    agent = Agent(FunctionModel(recorder), capabilities=[governor])

    @agent.tool_plain
    def dump(n: int) -> str:
        """Return a large output."""
        return words(1500, f"chunk{n}")

    return agent


async def test_model_never_receives_more_than_the_budget_nor_orphans() -> None:
    recorder = Recorder(iterations=8)
    results: list[Governed] = []
    governor = ContextGovernor(
        _policy(eviction={"threshold_tokens": None}),
        tokenizer_model="openai:gpt-4o",
        on_governed=results.append,
    )
    result = await _agent(recorder, governor).run("investigate", instructions="Be thorough.")
    assert result.output.startswith("finished")
    assert len(recorder.seen) == 9
    for sent, governed in zip(recorder.seen, results, strict=True):
        assert pairing_problems(sent) == []
        tokens = count_tokens(sent, model="openai:gpt-4o") - count_tokens("Be thorough.")
        assert tokens <= governed.budget_tokens
    last = results[-1]
    assert last.report.fits
    assert any(s.step in {"mask", "drop_groups", "shrink"} for s in last.report.steps)
    full = result.all_messages()
    outputs = [p for m in full for p in m.parts if isinstance(p, ToolReturnPart)]
    assert all(len(p.content) > 10_000 for p in outputs)  # the run's own history stays intact


async def test_governs_between_tool_iterations_counting_tool_definitions() -> None:
    recorder = Recorder(iterations=3)
    seen: list[int] = []
    governor = ContextGovernor(
        _policy(),
        tokenizer_model="openai:gpt-4o",
        on_governed=lambda g: seen.append(g.report.tool_definition_tokens),
    )
    await _agent(recorder, governor).run("go")
    assert len(seen) == 4
    assert all(tokens > 10 for tokens in seen)


async def test_evicted_outputs_can_be_read_back_through_the_tool() -> None:
    read_back: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert "read_evicted_output" in [t.name for t in info.function_tools]
        last = messages[-1].parts[0]
        if isinstance(last, ToolReturnPart) and last.tool_name == "dump":
            ref = str(last.content).split("reference ")[1].split(".")[0]
            return ModelResponse(
                parts=[
                    ToolCallPart(
                        "read_evicted_output",
                        {"ref": ref, "offset": 3, "limit": 2},
                        tool_call_id="r1",
                    )
                ]
            )
        if isinstance(last, ToolReturnPart) and last.tool_name == "read_evicted_output":
            read_back.append(str(last.content))
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("dump", {"n": 1}, tool_call_id="d1")])

    governor = ContextGovernor(
        Policy(eviction={"threshold_tokens": 1000, "preview_chars": 200}),
        tokenizer_model="openai:gpt-4o",
    )
    agent = Agent(FunctionModel(model), capabilities=[governor])

    @agent.tool_plain
    def dump(n: int) -> str:
        """Return a large output."""
        return words(3000, "line")

    result = await agent.run("go")
    assert result.output == "done"
    assert len(governor.store) == 1  # type: ignore[arg-type]
    assert read_back[0].splitlines()[1:] == [f"{n}: " + " ".join(["line"] * 10) for n in (3, 4)]


async def test_each_request_of_a_run_extends_the_history_governed_before() -> None:
    # The run's Governor takes each request's history as the last one grown: what it reports
    # as before (the prompt, the calls, the outputs sent whole) keeps its report, built once.
    recorder = Recorder(iterations=5)
    governed: list[Governed] = []

    def remembered(result: Governed) -> None:
        result.report  # noqa: B018 (read before the next request, as a meter would)
        governed.append(result)

    governor = ContextGovernor(_policy(), tokenizer_model="openai:gpt-4o", on_governed=remembered)
    await _agent(recorder, governor).run("investigate")
    assert len(governed) == 6
    assert governed[0].acted == "start"
    carried = [reports_carried(before, after) for before, after in itertools.pairwise(governed)]
    assert [reused for _, reused in carried] == [alike for alike, _ in carried]
    assert sum(alike for alike, _ in carried) > 5
