"""In-run summarisation: ``ContextGovernor(summarizer=...)`` compacts a long run before the
request that would cross its threshold, and the summary stands in for the rest of the run."""

from __future__ import annotations

import gc
import weakref

import pytest
from compact_builders import failing_summarizer
from pydantic_ai import Agent, models
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxhub.governance import (
    Compacted,
    ContextGovernor,
    Policy,
    count_tokens,
    is_summary,
    pairing_problems,
)
from ctxhub.governance.ledger import is_summary_text
from tests.messages import words

MODEL = "openai:gpt-4o"
PROMPT = "Audit every service log under /srv/logs and report the host db-west-3 issues."


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", False)


class Reader:
    """A model that reads ``files`` logs one tool call at a time, then answers."""

    def __init__(self, files: int) -> None:
        self.files = files
        self.seen: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        done = len(self.seen)
        if done <= self.files:
            args = {"path": f"/srv/logs/service_{done}.log"}
            return ModelResponse(parts=[ToolCallPart("read_log", args, tool_call_id=f"r{done}")])
        return ModelResponse(parts=[TextPart("All logs read.")])


def _agent(reader: Reader, governor: ContextGovernor) -> Agent[None, str]:
    agent = Agent(FunctionModel(reader), capabilities=[governor])

    @agent.tool_plain
    def read_log(path: str) -> str:
        """Read one log file."""
        return f"{path}\n" + words(400, path.rsplit("/", 1)[-1].split(".")[0])

    return agent


def _policy() -> Policy:
    # Room for about ten raw outputs: forty must be summarised, not only dropped.
    return Policy.model_validate(
        {
            "context_window": 16_000,
            "reserved_output_tokens": 1_000,
            "safety_margin": 0.05,
            "eviction": {"threshold_tokens": None},
        }
    )


def _summaries(messages: list[ModelMessage]) -> list[str]:
    """The summaries a request carries (the model may receive one merged into the request
    before it)."""
    return [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart) and isinstance(p.content, str)
        if is_summary_text(p.content)
    ]


def _prompts(message: ModelMessage) -> list[str]:
    return [
        p.content
        for p in message.parts
        if isinstance(p, UserPromptPart) and isinstance(p.content, str)
    ]


async def test_a_one_prompt_agent_is_summarised_inside_its_run() -> None:
    reader = Reader(files=40)
    compactions: list[Compacted] = []
    budgets: list[int] = []
    governor = ContextGovernor(
        _policy(),
        tokenizer_model=MODEL,
        summarizer="offline:extractive",
        on_compacted=compactions.append,
        on_governed=lambda g: budgets.append(g.budget_tokens),
    )
    result = await _agent(reader, governor).run(PROMPT)
    assert result.output == "All logs read."
    assert len(reader.seen) == 41

    # Summarised a few times, not on every request.
    assert 1 <= len(compactions) <= 10
    assert all(c.report.outcome == "summarized" for c in compactions)
    first = next(n for n, sent in enumerate(reader.seen) if _summaries(sent))
    for sent, budget in zip(reader.seen, budgets, strict=True):
        assert pairing_problems(sent) == []
        assert count_tokens(sent, model=MODEL) <= budget
    for sent in reader.seen[first:]:
        # The user's request opens every request; one summary stands for what is gone; the
        # newest result is there verbatim.
        assert _prompts(sent[0])[0] == PROMPT
        assert len(_summaries(sent)) == 1
        assert isinstance(sent[-1].parts[-1], ToolReturnPart | UserPromptPart)
    # Facts the summary must carry whatever the summariser wrote: the paths acted on.
    summary = _summaries(reader.seen[-1])[0]
    assert "/srv/logs/service_1.log" in summary
    # Later requests kept the summary: its text reached the model until the next compaction.
    assert sum(1 for sent in reader.seen if _summaries(sent)) == len(reader.seen) - first
    # The run's own history is intact.
    outputs = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert len(outputs) == 40
    assert all(len(p.content) > 2_000 for p in outputs)


async def test_a_failing_summariser_leaves_its_marker_and_the_run_goes_on() -> None:
    reader = Reader(files=20)
    compactions: list[Compacted] = []
    governor = ContextGovernor(
        _policy(),
        tokenizer_model=MODEL,
        summarizer=failing_summarizer(),
        on_compacted=compactions.append,
    )
    result = await _agent(reader, governor).run(PROMPT)
    assert result.output == "All logs read."
    assert compactions
    assert {c.report.outcome for c in compactions} == {"fallback"}
    assert _summaries(reader.seen[-1])
    assert "/srv/logs/service_1.log" in _summaries(reader.seen[-1])[0]


async def test_without_a_summariser_nothing_is_summarised() -> None:
    reader = Reader(files=20)
    governor = ContextGovernor(_policy(), tokenizer_model=MODEL)
    await _agent(reader, governor).run(PROMPT)
    assert not any(_summaries(sent) for sent in reader.seen)


async def test_runs_keep_their_summaries_apart() -> None:
    made: list[weakref.ref[ModelMessage]] = []

    def compacted(compaction: Compacted) -> None:
        made.extend(weakref.ref(m) for m in compaction.messages if is_summary(m))

    governor = ContextGovernor(
        _policy(),
        tokenizer_model=MODEL,
        summarizer="offline:extractive",
        on_compacted=compacted,
    )
    first, second = Reader(files=20), Reader(files=3)
    await _agent(first, governor).run(PROMPT)
    await _agent(second, governor).run("Just read three logs.")
    assert _summaries(first.seen[-1])
    assert not any(_summaries(sent) for sent in second.seen)
    # A run's summary goes with the run: once the model's copies of the requests are gone,
    # nothing holds the summaries it made.
    assert made
    first.seen.clear()
    gc.collect()
    assert [ref() for ref in made] == [None] * len(made)


def test_the_threshold_is_a_share() -> None:
    with pytest.raises(ValueError, match="summarize_at"):
        ContextGovernor(summarize_at=1.5)
