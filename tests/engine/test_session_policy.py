"""What a user configures is what happens in a Governor session too: a window trigger that fires
moves the window as ``govern()`` does on the same history."""

from __future__ import annotations

from engine_builders import MODEL
from pydantic_ai.messages import ModelMessage
from test_governor import _requests

from ctxhub.governance import Governor, Policy, govern
from tests.messages import reply, user


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
