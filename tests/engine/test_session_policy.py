"""What a user configures is what happens in a Governor session too: a window trigger that fires
moves the window as ``govern()`` does on the same history, and what the policy applies to every
request (``masking.apply`` always, ``dedupe.keys``) is applied to every request, though that
rewrites a message the request before sent.

The property checks every request of a session against oracles outside the Governor: the
trigger's condition recomputed on what is sent (messages counted, tokens counted), and
``govern()`` of the same history for what masking always masks and a later read supersedes.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from engine_builders import MODEL
from hypothesis import given, note
from hypothesis import strategies as st
from long_histories import Spec, build
from pydantic_ai import Agent, models
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from test_governor import _requests
from test_properties import seeded, specs

from ctxhub.governance import (
    ContextGovernor,
    Governed,
    Governor,
    Masking,
    Policy,
    Threshold,
    count_tokens,
    govern,
)
from ctxhub.governance.policy import DEFAULT_NOTICE
from tests.messages import reply, tool_call, tool_result, user, words

# Long histories hold retry prompts of the older form, as stored sessions do.
pytestmark = pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")

TRIGGERS = (
    {"kind": "messages", "value": 12},
    {"kind": "messages", "value": 40},
    {"kind": "tokens", "value": 2_500},
    {"kind": "tokens", "value": 9_000},
    {"kind": "fraction", "value": 0.3},
    {"kind": "fraction", "value": 0.7},
)
KEEPS = (
    None,
    {"kind": "messages", "value": 6},
    {"kind": "tokens", "value": 800},
    {"kind": "fraction", "value": 0.1},
)


@st.composite
def session_policies(draw: st.DrawFn) -> Policy:
    """Window triggers of each kind with every keep, masking mostly always, reads keyed by path,
    budgets from far below a long session's size to above it."""
    return Policy.model_validate(
        {
            "context_window": draw(st.sampled_from([3_000, 8_000, 20_000, 60_000])),
            "reserved_output_tokens": 0,
            "safety_margin": draw(st.sampled_from([0, 0.1])),
            "hysteresis": {
                "high_water": draw(st.sampled_from([1.0, 0.85])),
                "min_reclaim_tokens": draw(st.sampled_from([0, 2_000])),
            },
            "tool_output": {"limit": draw(st.sampled_from([None, 200, 2_000]))},
            "eviction": {"threshold_tokens": draw(st.sampled_from([None, 3_000]))},
            "masking": {
                "keep_first": draw(st.integers(0, 2)),
                "keep_last": draw(st.integers(0, 3)),
                "apply": draw(st.sampled_from(["always", "always", "over_budget"])),
                "inputs": draw(st.booleans()),
            },
            "window": {
                "triggers": draw(st.lists(st.sampled_from(TRIGGERS), max_size=2)),
                "keep": draw(st.sampled_from(KEEPS)),
                "head": draw(st.sampled_from([None, {"kind": "messages", "value": 3}])),
                "notice": draw(st.sampled_from([DEFAULT_NOTICE, None])),
            },
            "dedupe": {"keys": draw(st.sampled_from([{"read": ["path"]}, {}]))},
        }
    )


def _fires(trigger: Threshold, messages: list[ModelMessage], window: int) -> bool:
    """Whether ``trigger``'s condition holds on a request of ``messages`` (no instructions nor
    tool definitions besides them): counted here, not read from a report."""
    kind, value = trigger.resolve(window)
    if kind == "messages":
        return len(messages) > value
    return count_tokens(messages, model=MODEL) > value


MASKED = "[result masked"
SUPERSEDED = re.compile(r"\[superseded by the later \S+ call (\S+) of the same")
PLACEHOLDERS = (MASKED, "[superseded by", "[same output as")


def _results(messages: list[ModelMessage]) -> dict[str, str]:
    """Each tool result's text by its call's id (ids are unique in these sessions)."""
    return {
        part.tool_call_id: part.model_response_str()
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }


def _as_read(text: str | None) -> bool:
    """Whether a result goes out as the tool's text (perhaps truncated), not as a placeholder."""
    return text is not None and not text.startswith(PLACEHOLDERS)


def assert_as_configured(policy: Policy, governed: Governed, alone: Governed) -> None:
    """``governed`` (a Governor's request) leaves no trigger firing that ``alone`` (``govern()``
    of the same history) quiets, and carries no result as the tool's text that ``alone`` masks
    by masking always, or supersedes by a later read it sends too."""
    window = governed.window_tokens
    if policy.window.enabled:
        for trigger in policy.window.triggers:
            if _fires(trigger, governed.messages, window):
                assert _fires(trigger, alone.messages, window), trigger
    sent, expected = _results(governed.messages), _results(alone.messages)
    for call_id, text in expected.items():
        if not _as_read(sent.get(call_id)):
            continue
        if policy.masking.apply == "always":
            assert not text.startswith(MASKED), call_id
        superseded = SUPERSEDED.match(text)
        if superseded is not None:
            assert not _as_read(sent.get(superseded.group(1))), call_id


@seeded(max_examples=20)
@given(spec=specs(), policy=session_policies())
def test_each_request_of_a_session_is_governed_as_configured(spec: Spec, policy: Policy) -> None:
    # Pairing left intact, so that call ids are unique and name one result each.
    history = build(dataclasses.replace(spec, broken=0))
    governor = Governor(policy, model=MODEL)
    for prefix in _requests(history)[:120]:
        governed = governor.govern(prefix)
        alone = govern(prefix, policy, model=MODEL)
        note(f"request of {len(prefix)} messages: {governed.acted}")
        assert_as_configured(policy, governed, alone)


def _chat(turns: int) -> list[ModelMessage]:
    """``turns`` exchanges of a question and an answer, then the next question."""
    history: list[ModelMessage] = []
    for turn in range(turns):
        history += [user(f"q{turn}"), reply(f"a{turn}")]
    return [*history, user("q")]


def test_a_trigger_that_fires_under_the_budget_windows_as_govern_does() -> None:
    history = _chat(4)
    policy = Policy.model_validate(
        {
            "window": {
                "triggers": [{"kind": "messages", "value": 6}],
                "keep": {"kind": "messages", "value": 3},
            }
        }
    )
    governor = Governor(policy, model=MODEL)
    acted = []
    for size in range(5, 10):
        governed = governor.govern(history[:size])
        assert governed.messages == govern(history[:size], policy, model=MODEL).messages
        acted.append(governed.acted)
    # The head (the first question and its answer), the notice and 3 kept: 6 messages, so
    # every message added fires the trigger again.
    assert len(governed.messages) == 6
    assert acted == ["start", None, "trigger", "trigger", "trigger"]


def test_between_trigger_cuts_a_session_sends_the_previous_request_grown() -> None:
    history = _chat(30)
    policy = Policy.model_validate(
        {
            "window": {
                "triggers": [{"kind": "messages", "value": 12}],
                "keep": {"kind": "messages", "value": 4},
            }
        }
    )
    governor = Governor(policy, model=MODEL)
    previous: list[ModelMessage] = []
    acted = []
    for prefix in _requests(history):
        governed = governor.govern(prefix)
        assert len(governed.messages) <= 12
        if governed.acted is None:
            assert governed.messages[: len(previous)] == previous
        else:
            assert governed.messages == govern(prefix, policy, model=MODEL).messages
        acted.append(governed.acted)
        previous = governed.messages
    # The head (the first question and its answer), the notice and 4 kept are 7 messages:
    # two requests of two messages more each go as they are, the third fires the trigger.
    assert acted == ["start", *[None] * 5, *["trigger", None, None] * 8, "trigger"]


def _masked(messages: list[ModelMessage]) -> list[bool]:
    return [text.startswith(MASKED) for text in _results(messages).values()]


async def test_masking_always_masks_on_every_request_of_a_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", False)
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        if len(seen) < 5:
            return ModelResponse(
                parts=[ToolCallPart("dump", {"n": len(seen)}, tool_call_id=f"d{len(seen)}")]
            )
        return ModelResponse(parts=[TextPart("done")])

    policy = Policy(masking=Masking(apply="always", keep_last=1))
    runs: list[Governed] = []
    governor = ContextGovernor(policy, tokenizer_model=MODEL, on_governed=runs.append)
    agent = Agent(FunctionModel(model), capabilities=[governor])

    @agent.tool_plain
    def dump(n: int) -> str:
        """Return a large output."""
        return words(300, f"chunk{n}")

    result = await agent.run("go")
    assert len(seen) == 5
    # The first two results are kept (keep_first), the newest one too; the third is masked
    # as soon as a fourth arrives, as govern() masks it.
    assert _masked(seen[-1]) == [False, False, True, False]
    history = result.all_messages()
    assert len(runs) == len(seen)
    for sent in seen:
        alone = govern(history[: len(sent)], policy, model=MODEL)
        assert _masked(sent) == _masked(alone.messages)
    assert [governed.acted for governed in runs] == ["start", None, None, None, "always"]


def test_a_read_superseded_in_a_session_is_replaced_by_the_request_reading_it_again() -> None:
    policy = Policy.model_validate({"dedupe": {"keys": {"read_file": ["path"]}}})
    history: list[ModelMessage] = [user("fix the bug")]
    for n, path in enumerate(["a.py", "b.py", "a.py"]):
        history += [
            tool_call("read_file", id=f"r{n}", path=path),
            tool_result("read_file", words(400, f"v{n}"), id=f"r{n}"),
        ]
    history += [reply("fixed"), user("thanks")]
    governor = Governor(policy, model=MODEL)
    acted = []
    for prefix in _requests(history):
        governed = governor.govern(prefix)
        assert governed.messages == govern(prefix, policy, model=MODEL).messages
        acted.append(governed.acted)
    stale = _results(governed.messages)["r0"]
    assert stale.startswith("[superseded by the later read_file call r2 of the same path")
    # The request that carries the second read of a.py replaces the first, sent before.
    assert acted == ["start", None, None, "always", None]
