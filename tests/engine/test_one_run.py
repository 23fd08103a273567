"""One long run: an agent on a single request through many tool iterations is governed like a
chatty one — windowed, summarised and brought under budget inside its own turn."""

from __future__ import annotations

import asyncio

import pytest
from compact_builders import scripted_summarizer
from engine_builders import MODEL, _off, _tight
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    RetryPromptPart,
    ToolCallPart,
)
from pydantic_ai.messages import TextPart as Text
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxhub.governance import compact, govern, pairing_problems
from ctxhub.governance.draft import SummaryDraft
from ctxhub.governance.summaries import is_summary
from tests.messages import T0, reply, tool_call, tool_result, user, words


def _one_prompt(groups: int, size: int = 400) -> list[ModelMessage]:
    """One user request, then ``groups`` tool call/return pairs: no turn ever ends."""
    history: list[ModelMessage] = [user("migrate the billing tables", system="be careful")]
    for i in range(groups):
        history += [
            tool_call("run", id=f"r{i}"),
            tool_result("run", words(size, f"out{i}"), id=f"r{i}"),
        ]
    return history


def _retries(count: int, size: int = 400, *, legacy: bool = False) -> list[ModelMessage]:
    """One user request, then ``count`` large invalid answers, each refused by retry feedback
    (or by the older retry prompt)."""
    history: list[ModelMessage] = [user("answer in JSON", system="be careful")]
    for i in range(count):
        feedback: RetryFeedbackPart | RetryPromptPart = (
            RetryPromptPart(f"invalid JSON #{i}", timestamp=T0)
            if legacy
            else RetryFeedbackPart(
                f"invalid JSON #{i}", retry=RetryInfo("validation_error"), timestamp=T0
            )
        )
        history += [
            ModelResponse(parts=[Text(words(size, f"bad{i}"))], timestamp=T0),
            ModelRequest(parts=[feedback]),
        ]
    return history


def _window(**window: object) -> dict[str, object]:
    return _off(window={"enabled": True, **window})


def test_the_window_cuts_inside_one_long_turn() -> None:
    history = _one_prompt(30)
    governed = govern(history, _tight(3000, **_window()), model=MODEL)
    assert governed.fits
    out = governed.messages
    # The request and the newest group stay; the oldest groups go first.
    assert out[0] is history[0]
    assert out[-2:] == history[-2:]
    assert history[1] not in out
    assert pairing_problems(out) == []
    notice = out[1]
    assert isinstance(notice, ModelRequest)
    assert "older messages omitted" in str(notice.parts[0].content)
    dropped = [m.index for m in governed.report.messages if m.index is not None and not m.kept]
    assert dropped == list(range(1, 1 + len(dropped)))
    assert len(dropped) % 2 == 0
    assert "window" in [s.step for s in governed.report.steps]


def test_message_triggers_act_inside_one_turn() -> None:
    history = _one_prompt(30, size=20)
    policy = _tight(
        1_000_000,
        **_window(
            triggers=[{"kind": "messages", "value": 40}], keep={"kind": "messages", "value": 10}
        ),
    )
    governed = govern(history, policy, model=MODEL)
    kept = [m for m in governed.report.messages if m.index is not None and m.kept]
    # Ten messages, the request counted: it and four whole groups (a cut never parts a call
    # from its result).
    assert [m.index for m in kept] == [0, *range(53, 61)]
    again = govern(governed.messages, policy, model=MODEL)
    assert again.messages == governed.messages


def test_compact_summarises_the_older_groups_of_one_turn() -> None:
    history = _one_prompt(30)
    compacted = asyncio.run(
        compact(history, _tight(20_000), summarizer=scripted_summarizer(), model=MODEL)
    )
    assert compacted.report.outcome == "summarized"
    out = compacted.messages
    assert out[0] is history[0]
    assert is_summary(out[1])
    assert out[-2:] == history[-2:]
    assert pairing_problems(out) == []
    assert compacted.report.summarized_indices[0] == 1
    # The compacted history still begins its turn at the user's request, not at the summary.
    governed = govern(out, _tight(20_000, **_window()), model=MODEL)
    request = next(m for m in governed.report.messages if m.index == 0)
    assert request.kept
    assert request.parts[-1].action == "kept"


def test_retry_loops_are_dropped_by_the_window() -> None:
    history = _retries(12)
    governed = govern(history, _tight(2500, **_window()), model=MODEL)
    assert governed.fits
    assert governed.messages[0] is history[0]
    assert governed.messages[-2:] == history[-2:]
    assert history[1] not in governed.messages


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")
def test_retry_exchanges_are_droppable_groups(legacy: bool) -> None:
    history = _retries(12, legacy=legacy)
    governed = govern(history, _tight(2500, **_off(drop_groups=True)), model=MODEL)
    assert governed.fits
    assert governed.messages[0] is history[0]
    assert governed.messages[-2:] == history[-2:]
    step = next(s for s in governed.report.steps if s.step == "drop_groups")
    assert step.tokens_removed > 0


def test_a_token_keep_counts_the_current_turn_as_a_message_keep_does() -> None:
    # Two turns; the current one holds its request and 20 messages of about 40 tokens.
    history: list[ModelMessage] = [user("start"), reply("ok")]
    for turn in range(5):
        history += [user(f"old {turn}"), reply(words(40, f"old{turn}"))]
    history.append(user("migrate the billing tables"))
    for i in range(10):
        history += [
            tool_call("run", id=f"c{i}"),
            tool_result("run", words(30, f"x{i}"), id=f"c{i}"),
        ]
    by_messages = govern(
        history,
        _tight(
            1_000_000,
            **_window(
                triggers=[{"kind": "messages", "value": 25}],
                keep={"kind": "messages", "value": 8},
            ),
        ),
        model=MODEL,
    )
    tokens_of_eight = sum(
        m.tokens_after
        for m in by_messages.report.messages
        if m.kept and m.index is not None and m.index >= 12
    )
    by_tokens = govern(
        history,
        _tight(
            1_000_000,
            **_window(
                triggers=[{"kind": "messages", "value": 25}],
                keep={"kind": "tokens", "value": tokens_of_eight},
            ),
        ),
        model=MODEL,
    )
    # Both keeps measure the same tail, the turn's request included: the older turns go,
    # and as many of the current turn's groups stay either way.
    assert [m.index for m in by_tokens.report.messages if m.kept] == [
        m.index for m in by_messages.report.messages if m.kept
    ]
    assert all(not m.kept for m in by_tokens.report.messages if 2 <= (m.index or 0) < 12)


def test_a_token_trigger_measures_the_whole_request() -> None:
    # A large pinned message and head; the other messages are few and small.
    history: list[ModelMessage] = [user(words(2000, "head")), reply("ok")]
    history += [user(words(2000, "pinned")), reply("noted")]
    for turn in range(4):
        history += [user(f"q{turn}"), reply(f"a{turn}")]
    policy = _tight(
        1_000_000,
        **_window(
            triggers=[{"kind": "tokens", "value": 1000}], keep={"kind": "tokens", "value": 50}
        ),
    )
    governed = govern(history, policy, model=MODEL, pinned={2})
    # The head and the pin count toward the trigger, as peer libraries count them, though
    # the window keeps them whatever it drops.
    assert "window" in [s.step for s in governed.report.steps]
    assert governed.messages[:3] == history[:3]
    assert governed.messages[-2:] == history[-2:]
    assert history[3] not in governed.messages


def test_the_summary_of_one_turn_knows_the_request_it_serves() -> None:
    seen: list[str] = []

    def summarise(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(str(messages[-1].parts[-1].content))  # type: ignore[union-attr]
        draft = SummaryDraft(goal="Migrate the billing tables.", current_state="Reading logs.")
        tool = info.output_tools[0].name
        return ModelResponse(parts=[ToolCallPart(tool, draft.model_dump(), tool_call_id="s")])

    history = _one_prompt(30)
    compacted = asyncio.run(
        compact(history, _tight(20_000), summarizer=FunctionModel(summarise), model=MODEL)
    )
    assert compacted.report.outcome == "summarized"
    assert seen
    assert "migrate the billing tables" in seen[0]
    # The extractive summariser takes its goal from it too.
    offline = asyncio.run(
        compact(history, _tight(20_000), summarizer="offline:extractive", model=MODEL)
    )
    assert offline.summary is not None
    assert "## Goal\nmigrate the billing tables" in offline.summary
