"""A request continued from the last one sent and the new messages alone is the request the
Governor sends for the whole history, or there is none (and the whole history is governed)."""

from __future__ import annotations

import copy

import pytest
from engine_builders import MODEL
from hypothesis import given
from hypothesis import strategies as st
from long_histories import Spec, build
from pydantic_ai.messages import ModelMessage, ModelRequest
from test_properties import long_policies, seeded, specs

from ctxhub.governance import Governed, Governor, GovernorState, Policy
from ctxhub.governance.continuation import Continued, LastRequest, continued
from ctxhub.governance.facts import MessageFacts, message_facts
from ctxhub.governance.tokens import tokenizer_for
from tests.messages import agent_turns, tool_call, tool_result, user, words

pytestmark = pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")


def _walk(history: list[ModelMessage], policy: Policy, tool_tokens: int = 0) -> tuple[int, int]:
    """Govern every request of ``history`` with one Governor, as a hub would from stored facts,
    and continue each from the one before: wherever a continuation answers, it is the
    Governor's request. How many requests were continued, of how many that could be."""
    tokenizer = tokenizer_for(MODEL)
    facts = [message_facts(message, tokenizer) for message in history]
    governor = Governor(policy, model=MODEL)
    last: LastRequest | None = None
    previous: list[ModelMessage] = []
    answered = tried = 0
    for end in range(1, len(history) + 1):
        if not isinstance(history[end - 1], ModelRequest):
            continue
        prefix = copy.deepcopy(history[:end])
        governed = governor.govern(prefix, facts=facts[:end], tool_tokens=tool_tokens)
        state = GovernorState.model_validate(governor.state())
        if last is not None:
            size = last.state.size
            tried += 1
            found = continued(
                policy,
                last,
                prefix[size:],
                facts[size:end],
                model=MODEL,
                tool_tokens=tool_tokens,
            )
            if found is not None:
                _same(found, governed, state, last, previous)
                answered += 1
        tail = facts[max(end - 2, 0) : end]
        last = _last(governed, state, tail)
        previous = governed.messages
    return answered, tried


def _last(governed: Governed, state: GovernorState, tail: list[MessageFacts]) -> LastRequest:
    messages = governed.messages
    return LastRequest(
        len(messages), messages[-1], governed.report, state, tail, governed.acted is not None
    )


def _same(
    found: Continued,
    governed: Governed,
    state: GovernorState,
    last: LastRequest,
    previous: list[ModelMessage],
) -> None:
    assert governed.messages == [*previous, *found.added]
    assert found.report == governed.report
    assert found.state == state
    assert found.prefix_tokens == governed.prefix_tokens
    assert found.added_reports == found.report.messages[len(last.report.messages) :]
    evicted = governed.evicted
    assert found.evicted.items() <= evicted.items()
    assert set(evicted) - set(last.report.evicted_refs) <= set(found.evicted)


@st.composite
def _policies(draw: st.DrawFn) -> Policy:
    """Every mechanism varied, and in most examples none of the rules that rule a
    continuation out (masking always, keyed reads, the budget note, window triggers)."""
    policy: Policy = draw(long_policies())
    if draw(st.integers(0, 3)) == 0:
        return policy
    data = policy.model_dump()
    data["masking"]["apply"] = draw(st.sampled_from(["over_budget", "never"]))
    data["dedupe"]["keys"] = {}
    data["awareness"]["budget_note"] = False
    data["window"]["triggers"] = []
    return Policy.model_validate(data)


@seeded(max_examples=25)
@given(spec=specs(), policy=_policies(), tools=st.sampled_from([0, 0, 150]))
def test_a_continued_request_is_the_one_the_governor_sends(
    spec: Spec, policy: Policy, tools: int
) -> None:
    # Histories with broken pairing too: a continuation must see what pair repair would do.
    _walk(build(spec)[:400], policy, tools)


def test_an_agent_between_the_governors_actions_is_continued() -> None:
    """An agent's tool loop under the default policy: every request but the Governor's
    actions (and the first) is continued, and user turns too."""
    history = agent_turns(30, 6, words(300))
    answered, tried = _walk(history, Policy(context_window=40_000, reserved_output_tokens=0))
    print(answered, tried)
    assert tried > 150
    assert answered >= tried - 12


@pytest.mark.parametrize(
    ("why", "new"),
    [
        ("a result answering an earlier call", [tool_result("read", "late", id="c0_0")]),
        ("a call its results do not follow", [tool_call("read", id="x"), user("go on")]),
        ("a response still waiting for its results", [tool_call("read", id="y")]),
    ],
)
def test_a_request_pair_repair_would_touch_is_not_continued(
    why: str, new: list[ModelMessage]
) -> None:
    policy = Policy(context_window=1_000_000)
    history = agent_turns(3, 2, words(50))
    tokenizer = tokenizer_for(MODEL)
    facts = [message_facts(message, tokenizer) for message in history]
    governor = Governor(policy, model=MODEL)
    governed = governor.govern(history, facts=facts)
    state = GovernorState.model_validate(governor.state())
    last = _last(governed, state, facts[-2:])
    new_facts: list[MessageFacts] = [message_facts(m, tokenizer) for m in new]
    assert continued(policy, last, new, new_facts, model=MODEL, tool_tokens=0) is None, why
