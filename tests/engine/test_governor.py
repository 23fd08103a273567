"""A Governor governs a session: between its actions a request is the previous one with the new
messages appended, no request passes its budget, and its state is plain data another Governor
continues from."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from engine_builders import MODEL, rebuilt
from hypothesis import given, note, settings
from hypothesis import strategies as st
from long_histories import Spec, build
from pydantic import ValidationError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest
from test_properties import assert_history_invariants, long_policies, seeded, specs

from ctxhub.governance import Governor, GovernorState, Policy, govern
from ctxhub.governance.counting import message_tokens
from ctxhub.governance.tokens import tokenizer_for
from tests.messages import agent_turns, words

# Long histories hold retry prompts of the older form, as stored sessions do.
pytestmark = pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")


def _requests(history: list[ModelMessage]) -> list[list[ModelMessage]]:
    """The history before each model request: it ends with the request the model answers."""
    return [
        history[:end]
        for end in range(1, len(history) + 1)
        if isinstance(history[end - 1], ModelRequest)
    ]


def _json(messages: list[ModelMessage]) -> list[bytes]:
    return [ModelMessagesTypeAdapter.dump_json([m]) for m in messages]


@seeded(max_examples=15)
@given(spec=specs(), policy=long_policies())
def test_between_actions_a_request_is_the_previous_one_grown(spec: Spec, policy: Policy) -> None:
    # Pairing left intact: a result arriving late is moved by pair repair into an earlier
    # request, which changes the history already sent (as an edit would).
    history = build(dataclasses.replace(spec, broken=0))
    governor = Governor(policy, model=MODEL)
    tokenizer = tokenizer_for(MODEL)
    previous: list[bytes] | None = None
    for prefix in _requests(history)[:120]:
        snapshot = copy.deepcopy(prefix)
        governed = governor.govern(prefix)
        assert prefix == snapshot  # the input is never changed
        assert_history_invariants(prefix, governed.messages, frozenset())
        # The budget is never exceeded where a request on its own would meet it.
        if not governed.fits:
            assert not govern(copy.deepcopy(prefix), policy, model=MODEL).fits
        sent = _json(governed.messages)
        if governed.acted is None and previous is not None:
            note(f"request of {len(prefix)} messages")
            # Byte-identical but for the previous request's last message (the request it
            # answered, which pair repair completes once its results arrive).
            assert sent[: len(previous) - 1] == previous[:-1]
        # The prefix the Governor reports is the one sent byte-identical (0 at a new start:
        # it does not compare an edited history with what it sent).
        same = 0
        while same < min(len(sent), len(previous or [])) and sent[same] == previous[same]:
            same += 1
        counted = sum(message_tokens(m, tokenizer) for m in governed.messages[:same])
        if governed.acted in ("start", "edited"):
            counted = 0
        assert governed.prefix_tokens == counted, (governed.acted, same, len(previous or []))
        previous = sent


def _session(turns: int) -> list[ModelMessage]:
    """An agent's session: each turn two reads of about 300 tokens and an answer."""
    return agent_turns(turns, 2, words(300, "w"))


def test_a_session_acts_seldom_and_appends_in_between() -> None:
    session = _session(60)
    governor = Governor(Policy(context_window=16_000, reserved_output_tokens=0), model=MODEL)
    acted = [governor.govern(prefix).acted for prefix in _requests(session)]
    assert acted[0] == "start"
    actions = [a for a in acted[1:] if a is not None]
    assert actions
    assert set(actions) <= {"high_water", "over_budget"}
    assert len(actions) < len(acted) / 4


def test_an_action_never_leaves_next_to_nothing_where_the_budget_holds_more() -> None:
    # Every output is the same text (older copies become references) and the newest five
    # stay whole: at the low-water mark the window's walk stops at the first of them, so the
    # action aims higher rather than send the newest exchange alone.
    session = agent_turns(40, 2, "row\n" * 300, "Fix OPS-1")
    policy = Policy(context_window=16_000)
    governor = Governor(policy, model=MODEL)
    actions = 0
    for prefix in _requests(session)[-30:]:
        governed = governor.govern(prefix)
        if governed.acted is not None:
            actions += 1
            assert governed.tokens_after >= governed.budget_tokens * policy.hysteresis.low_water / 2
    assert actions > 2


def test_two_governors_fed_the_same_histories_send_the_same_requests() -> None:
    session = _session(30)
    policy = Policy(context_window=8_000, reserved_output_tokens=0)
    first, second = Governor(policy, model=MODEL), Governor(policy, model=MODEL)
    for prefix in _requests(session):
        assert first.govern(prefix).messages == second.govern(copy.deepcopy(prefix)).messages
    assert first.state() == second.state()


def test_the_state_is_json_and_continues_in_another_governor() -> None:
    session = _session(30)
    policy = Policy(context_window=8_000, reserved_output_tokens=0)
    governor = Governor(policy, model=MODEL)
    requests = _requests(session)
    for prefix in requests[:-1]:
        governor.govern(prefix)
    state = governor.state()
    assert json.loads(json.dumps(state)) == state
    other = Governor.from_state(state, policy, model=MODEL)
    assert (
        other.govern(copy.deepcopy(requests[-1])).messages == governor.govern(requests[-1]).messages
    )


@pytest.mark.parametrize(
    "state",
    [
        {"version": 2},
        {"size": -1},
        {"size": 10**400},
        {"plan": {"turn_start": "x", "head_end": 0}},
        {"plan": {"turn_start": 0, "head_end": 0, "spared": [[1]]}},
        {"digest": "x" * 1000},
        {"unknown": 1},
        [],
    ],
)
def test_a_state_that_is_not_one_is_refused(state: object) -> None:
    with pytest.raises(ValidationError):
        Governor.from_state(state)  # type: ignore[arg-type]


def test_a_state_that_does_not_fit_the_history_is_a_new_start() -> None:
    session = _session(10)
    policy = Policy(context_window=8_000, reserved_output_tokens=0)
    plan = {"turn_start": 10**6, "head_end": 10**6, "cut": 10**6, "omitted": 3}
    state = GovernorState.model_validate({"size": 3, "digest": "0" * 32, "plan": plan})
    governed = Governor.from_state(state, policy, model=MODEL).govern(session)
    assert governed.acted == "edited"
    assert governed.messages == govern(session, policy, model=MODEL).messages


def test_restarting_forgets_the_decisions_but_not_the_history() -> None:
    session = _session(30)
    policy = Policy(context_window=8_000, reserved_output_tokens=0)
    governor = Governor(policy, model=MODEL)
    for prefix in _requests(session)[:-1]:
        governor.govern(prefix)
    twin = rebuilt(governor)
    governor.restart()
    restarted = governor.govern(session)
    assert restarted.acted == "start"
    assert restarted.messages == govern(copy.deepcopy(session), policy, model=MODEL).messages
    assert twin.govern(copy.deepcopy(session)).acted != "start"


@settings(deadline=None)  # the first examples tokenise cold: a timing, not a property
@given(turns=st.integers(1, 30), grown=st.integers(1, 5))
def test_a_governor_that_continues_sends_what_one_rebuilt_from_its_state_sends(
    turns: int, grown: int
) -> None:
    session = _session(turns + grown)
    requests = _requests(session)
    policy = Policy(context_window=6_000, reserved_output_tokens=0)
    governor = Governor(policy, model=MODEL)
    for prefix in requests[: len(requests) - grown]:
        governor.govern(prefix)
    twin = rebuilt(governor)
    for prefix in requests[len(requests) - grown :]:
        assert governor.govern(prefix).messages == twin.govern(copy.deepcopy(prefix)).messages


@seeded(max_examples=12)
@given(
    spec=specs(),
    policy=long_policies(),
    schedule=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=40, max_size=40),
)
def test_governors_taking_turns_on_a_session_send_what_one_governor_sends(
    spec: Spec, policy: Policy, schedule: list[tuple[bool, bool]]
) -> None:
    """Two processes serve one session's requests in turn, each with its own Governor: before
    a request it adopts the state the last request left, and a preview (a request governed but
    not sent) may come in between. Every request sent is the one a single Governor sends."""
    history = build(dataclasses.replace(spec, broken=0))
    alone = Governor(policy, model=MODEL)
    processes = [Governor(policy, model=MODEL), Governor(policy, model=MODEL)]
    state: dict[str, object] | None = None
    for prefix, (second, preview) in zip(_requests(history), schedule, strict=False):
        process = processes[second]
        if preview:  # a page shows the next request; nothing is sent
            process.adopt(state)
            process.govern(prefix)
        process.adopt(state)
        governed = process.govern(prefix)
        expected = alone.govern(copy.deepcopy(prefix))
        note(f"request of {len(prefix)} messages, served by {int(second)}")
        assert governed.messages == expected.messages
        assert governed.acted == expected.acted
        state = process.state()
        assert state == alone.state()


def test_adopting_a_state_made_on_another_history_is_a_new_start() -> None:
    policy = Policy(context_window=8_000, reserved_output_tokens=0)
    one, other = _session(12), agent_turns(12, 2, words(300, "z"))
    governor = Governor(policy, model=MODEL)
    governor.govern(one)
    elsewhere = Governor(policy, model=MODEL)
    elsewhere.govern(other)
    governor.adopt(elsewhere.state())
    governed = governor.govern(one)
    assert governed.acted == "edited"
    assert governed.messages == govern(copy.deepcopy(one), policy, model=MODEL).messages
    governor.adopt(None)
    assert governor.govern(one).acted == "start"
