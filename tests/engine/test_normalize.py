"""Pair integrity: every call answered in the very next request, every result right after its
call, orphans and duplicates removed, late results brought back, aborted markers kept."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
from engine_builders import MODEL, _off, _tight
from provider_rules import assert_provider_valid, provider_violations, result_ids
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    RetryPromptPart,
    ToolReturnPart,
    UserPromptPart,
)
from report_oracle import reference_report
from test_stored import LazyRecorder

from ctxhub.governance import Governor, Policy, govern, pairing_problems
from ctxhub.governance.facts import message_facts
from ctxhub.governance.steps.normalize import normalize
from ctxhub.governance.steps.pairing import Pairing
from ctxhub.governance.tokens import tokenizer_for
from tests.messages import T0, reply, tool_call, tool_calls, tool_result, tool_results, user, words

BIG = 100_000

# Histories may hold legacy retry prompts; copying one warns that the class is deprecated.
pytestmark = pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")


def _plain() -> Policy:
    return _tight(BIG, **_off())


def _retry(name: str, text: str, *, id: str) -> ModelRequest:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        part = RetryPromptPart(text, tool_name=name, tool_call_id=id, timestamp=T0)
    return ModelRequest(parts=[part])


def _aborted() -> ModelRequest:
    return ModelRequest(parts=[], state="interrupted")


def _answers(message: ModelMessage) -> dict[str, Any]:
    """Call id → content of each tool result of a request."""
    return {
        p.tool_call_id: p.content
        for p in message.parts
        if isinstance(p, ToolReturnPart | RetryPromptPart)
    }


def _governed(history: list[ModelMessage], policy: Policy | None = None) -> list[ModelMessage]:
    """Govern, check the output is provider-valid and idempotent, and the input untouched."""
    snapshot = copy.deepcopy(history)
    policy = policy or _plain()
    governed = govern(history, policy, model=MODEL)
    assert history == snapshot
    assert_provider_valid(governed.messages)
    assert pairing_problems(governed.messages) == []
    again = govern(governed.messages, policy, model=MODEL)
    assert again.messages == governed.messages
    report = governed.report
    assert [m.index for m in report.messages if m.index is not None] == list(range(len(history)))
    assert sum(m.tokens_after for m in report.messages) == report.tokens_after
    return governed.messages


# --- the oracle itself ------------------------------------------------------------------------

VALID: dict[str, list[ModelMessage]] = {
    "no tools": [user("go"), reply("ok"), user("more")],
    "one call": [
        user("go"),
        tool_call("a", id="c1"),
        tool_result("a", "r", id="c1"),
        reply("done"),
    ],
    "parallel": [
        user("go"),
        tool_calls(("a", "c1"), ("b", "c2")),
        tool_results(("b", 1, "c2"), ("a", 2, "c1")),
    ],
    "retry answers": [user("go"), tool_call("a", id="c1"), _retry("a", "bad args", id="c1")],
    "results then a prompt": [
        user("go"),
        tool_call("a", id="c1"),
        ModelRequest(parts=[*tool_result("a", "r", id="c1").parts, *user("and now").parts]),
    ],
}

BROKEN: dict[str, list[ModelMessage]] = {
    "late return": [
        user("go"),
        tool_call("a", id="c1"),
        user("next"),
        tool_result("a", "late", id="c1"),
    ],
    "late after a response": [
        user("go"),
        tool_call("a", id="c1"),
        reply("hm"),
        tool_result("a", "x", id="c1"),
    ],
    "return before its call": [
        user("go"),
        tool_result("a", "early", id="c1"),
        tool_call("a", id="c1"),
    ],
    "duplicated return": [
        user("go"),
        tool_call("a", id="c1"),
        tool_results(("a", 1, "c1"), ("a", 2, "c1")),
    ],
    "duplicate a turn later": [
        user("go"),
        tool_call("a", id="c1"),
        tool_result("a", "r", id="c1"),
        reply("ok"),
        tool_result("a", "again", id="c1"),
    ],
    "unknown id": [
        user("go"),
        tool_call("a", id="c1"),
        tool_results(("a", 1, "c1"), ("z", 2, "zz")),
    ],
    "result opening the history": [tool_result("a", "stale", id="c0"), user("go")],
    "dangling mid-history": [user("go"), tool_call("a", id="c1"), user("next"), reply("ok")],
    "dangling at the end": [user("go"), tool_calls(("a", "c1"), ("b", "c2"))],
    "call followed by a response": [user("go"), tool_call("a", id="c1"), reply("ok")],
    "parallel across two requests": [
        user("go"),
        tool_calls(("a", "c1"), ("b", "c2")),
        tool_result("a", "one", id="c1"),
        tool_result("b", "two", id="c2"),
    ],
    "interrupted turn": [
        user("go"),
        tool_calls(("a", "c1"), ("b", "c2")),
        _aborted(),
        user("<turn_aborted>stopped</turn_aborted>"),
        tool_result("b", "late", id="c2"),
    ],
    "retry a message late": [
        user("go"),
        tool_call("a", id="c1"),
        user("x"),
        _retry("a", "no", id="c1"),
    ],
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_the_oracle_accepts_valid_histories(name: str) -> None:
    assert provider_violations(VALID[name]) == []


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_oracle_rejects_broken_histories(name: str) -> None:
    assert provider_violations(BROKEN[name]) != []


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_every_broken_history_is_repaired_and_stays_so(name: str) -> None:
    _governed(BROKEN[name])


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_histories_pass_through_untouched(name: str) -> None:
    history = VALID[name]
    governed = govern(history, _plain(), model=MODEL)
    assert all(a is b for a, b in zip(governed.messages, history, strict=True))
    assert len(governed.messages) == len(history)


# --- dangling calls -----------------------------------------------------------------------------


def test_dangling_call_gets_a_synthetic_result_right_after_it() -> None:
    history: list[ModelMessage] = [user("go"), tool_call("read", id="c1"), user("next")]
    out = _governed(history)
    answer = out[2]
    assert isinstance(answer, ModelRequest)
    result = answer.parts[0]
    assert isinstance(result, ToolReturnPart)
    assert (result.tool_call_id, result.content, result.outcome) == (
        "c1",
        "Interrupted by user.",
        "interrupted",
    )
    assert isinstance(answer.parts[1], UserPromptPart)


def test_dangling_call_at_the_end_gets_a_new_request() -> None:
    history: list[ModelMessage] = [user("go"), tool_calls(("a", "c1"), ("b", "c2"))]
    out = _governed(history)
    assert len(out) == 3
    assert [p.tool_call_id for p in out[2].parts] == ["c1", "c2"]  # type: ignore[union-attr]


def test_call_followed_by_a_response_gets_a_request_in_between() -> None:
    history: list[ModelMessage] = [user("go"), tool_call("a", id="c1"), reply("ok"), user("more")]
    out = _governed(history)
    assert len(out) == 5
    assert result_ids(out[2]) == ["c1"]
    assert out[3] is history[2]


def test_dangling_text_is_configurable() -> None:
    policy = _tight(BIG, **_off(), dangling_call_text="aborted")
    governed = govern([user("go"), tool_call("x", id="c1")], policy, model=MODEL)
    assert governed.messages[-1].parts[0].content == "aborted"  # type: ignore[union-attr]


# --- orphans and duplicates ---------------------------------------------------------------------


def test_orphan_result_is_removed_and_reported() -> None:
    history: list[ModelMessage] = [
        user("go"),
        tool_result("read", "stale", id="gone"),
        reply("ok"),
        user("again"),
    ]
    governed = govern(history, _plain(), model=MODEL)
    assert_provider_valid(governed.messages)
    assert len(governed.messages) == 3
    report = governed.report.messages[1]
    assert (report.kept, report.parts[0].action) == (False, "dropped")


def test_orphan_next_to_a_valid_result_removes_only_the_orphan() -> None:
    history: list[ModelMessage] = [
        user("go"),
        tool_call("a", id="c1"),
        tool_results(("a", "fine", "c1"), ("b", "x", "zz")),
    ]
    governed = govern(history, _plain(), model=MODEL)
    assert [p.tool_call_id for p in governed.messages[2].parts] == ["c1"]  # type: ignore[union-attr]
    actions = [p.action for p in governed.report.messages[2].parts]
    assert actions == ["kept", "dropped"]


def test_a_result_before_its_call_is_removed_and_the_call_answered() -> None:
    out = _governed(BROKEN["return before its call"])
    assert len(out) == 3
    assert _answers(out[2]) == {"c1": "Interrupted by user."}


def test_a_duplicated_result_keeps_the_first() -> None:
    out = _governed(BROKEN["duplicated return"])
    assert _answers(out[2]) == {"c1": 1}
    assert len(out[2].parts) == 1


def test_a_duplicate_a_turn_later_is_removed() -> None:
    out = _governed(BROKEN["duplicate a turn later"])
    assert [_answers(m) for m in out if isinstance(m, ModelRequest)][1:] == [{"c1": "r"}, {}]


# --- late results -------------------------------------------------------------------------------


def test_a_late_result_moves_to_the_request_right_after_its_call() -> None:
    history = BROKEN["late return"]
    governed = govern(history, _plain(), model=MODEL)
    out = _governed(history)
    assert out == governed.messages
    assert len(out) == 4
    # The real result, not a synthetic one, now answers the call, ahead of the prompt.
    moved = out[2].parts[0]
    assert isinstance(moved, ToolReturnPart)
    assert moved is history[3].parts[0]
    assert isinstance(out[2].parts[1], UserPromptPart)
    # The request it came from is left empty at the end of the history.
    assert out[3].parts == []
    # The report accounts for every token: it left its request and joined the other.
    report = governed.report
    assert [p.action for p in report.messages[3].parts] == ["moved"]
    assert [p.action for p in report.messages[2].parts] == ["kept", "moved"]
    assert report.tokens_after == sum(m.tokens_after for m in report.messages)


def test_a_result_two_messages_late_is_reported_moved_where_it_was_and_where_it_went() -> None:
    history: list[ModelMessage] = [
        user("go"),
        tool_call("read", id="c1"),
        user("and check the tests"),
        tool_result("read", words(300), id="c1"),
        reply("done"),
        user("more"),
    ]
    governor = Governor(_plain(), model=MODEL)
    governed = governor.govern(history)
    # The result now sits right after its call, ahead of the prompt it came after.
    assert [m.parts for m in governed.messages[:2]] == [m.parts for m in history[:2]]
    assert governed.messages[2].parts == [history[3].parts[0], history[2].parts[0]]
    assert governed.messages[3:] == history[4:]
    assert pairing_problems(governed.messages) == []
    tokens = message_facts(history[3], tokenizer_for(MODEL)).part_tokens[0]
    report = governed.report
    assert [m.index for m in report.messages] == [0, 1, 2, 3, 4, 5]
    # Where it went: with its tokens, as it was.
    went = report.messages[2]
    assert went.kept
    assert [(p.action, p.tool_name) for p in went.parts] == [("kept", None), ("moved", "read")]
    assert (went.parts[1].tokens_before, went.parts[1].tokens_after) == (tokens, tokens)
    # Where it was: the emptied request is left out, its part moved, not lost.
    was = report.messages[3]
    assert not was.kept
    assert [(p.action, p.tool_name) for p in was.parts] == [("moved", "read")]
    assert (was.parts[0].tokens_before, was.parts[0].tokens_after) == (tokens, 0)
    assert "synthesized" not in {p.action for m in report.messages for p in m.parts}
    assert "dropped" not in {p.action for m in report.messages for p in m.parts}
    # A move loses no token: one part changed by pair repair, nothing removed.
    normalize = next(s for s in report.steps if s.step == "normalize")
    assert (normalize.parts, normalize.tokens_removed) == (1, 0)
    assert report.tokens_before - report.tokens_after == 3  # the emptied request's framing
    assert report.tokens_after == sum(m.tokens_after for m in report.messages)
    expected = reference_report(
        governed, history, pinned=frozenset(), state=governor.state(), policy=_plain()
    )
    assert report.model_dump() == expected


def test_a_late_result_moved_out_of_a_request_that_stays_is_reported_moved_in_it() -> None:
    late = ModelRequest(
        parts=[
            ToolReturnPart("read", words(200), tool_call_id="c1", timestamp=T0),
            UserPromptPart("also this", timestamp=T0),
        ]
    )
    history: list[ModelMessage] = [user("go"), tool_call("read", id="c1"), user("wait"), late]
    governor = Governor(_plain(), model=MODEL)
    governed = governor.govern(history)
    assert governed.messages[2].parts == [late.parts[0], history[2].parts[0]]
    assert governed.messages[3].parts == [late.parts[1]]
    report = governed.report
    assert [p.action for p in report.messages[2].parts] == ["kept", "moved"]
    was = report.messages[3]
    assert was.kept
    assert [p.action for p in was.parts] == ["moved", "kept"]
    assert was.parts[0].tokens_after == 0
    assert was.tokens_after == sum(p.tokens_after for p in was.parts) + 3
    assert report.tokens_after == report.tokens_before
    expected = reference_report(
        governed, history, pinned=frozenset(), state=governor.state(), policy=_plain()
    )
    assert report.model_dump() == expected


def test_a_late_result_after_a_response_gets_a_request_after_its_call() -> None:
    history: list[ModelMessage] = [*BROKEN["late after a response"], user("again")]
    out = _governed(history)
    assert len(out) == 5
    assert _answers(out[2]) == {"c1": "x"}
    assert out[3] is history[2]
    assert out[4] is history[4]


def test_parallel_results_split_over_two_requests_are_joined() -> None:
    history: list[ModelMessage] = [
        *BROKEN["parallel across two requests"],
        reply("done"),
        user("more"),
    ]
    out = _governed(history)
    assert len(out) == 5
    assert _answers(out[2]) == {"c1": "one", "c2": "two"}
    assert out[3:] == history[4:]


def test_a_late_result_across_turns_still_answers_its_call() -> None:
    history: list[ModelMessage] = [
        user("go"),
        tool_calls(("a", "c1"), ("b", "c2")),
        tool_result("a", "one", id="c1"),
        reply("partial"),
        user("next"),
        reply("ok"),
        tool_results(("b", "two", "c2"), ("z", "?", "zz")),
        user("last"),
    ]
    out = _governed(history)
    assert _answers(out[2]) == {"c1": "one", "c2": "two"}
    assert all(not result_ids(m) for m in out[3:])


def test_a_late_retry_prompt_moves_like_a_return() -> None:
    out = _governed(BROKEN["retry a message late"])
    assert list(_answers(out[2])) == ["c1"]
    assert isinstance(out[2].parts[0], RetryPromptPart)


def test_interrupted_turn_gets_its_late_result_and_keeps_the_markers() -> None:
    history = BROKEN["interrupted turn"]
    out = _governed([*history, user("again")])
    assert _answers(out[2]) == {"c1": "Interrupted by user.", "c2": "late"}
    assert isinstance(out[2], ModelRequest)
    assert out[2].state == "interrupted"
    assert history[3] in out


def test_a_reused_id_is_answered_by_its_newest_call() -> None:
    history: list[ModelMessage] = [
        user("go"),
        tool_call("a", id="c1"),
        user("next"),
        tool_call("a", id="c1"),
        tool_result("a", "for the second", id="c1"),
    ]
    out = _governed(history)
    assert _answers(out[2]) == {"c1": "Interrupted by user."}
    assert _answers(out[4]) == {"c1": "for the second"}


def test_a_repeated_id_within_one_response_is_answered_twice() -> None:
    history: list[ModelMessage] = [
        user("go"),
        tool_calls(("a", "c1"), ("a", "c1")),
        tool_result("a", "first", id="c1"),
        tool_result("a", "second", id="c1"),
    ]
    out = _governed(history)
    assert [p.content for p in out[2].parts] == ["first", "second"]  # type: ignore[union-attr]


def test_repairs_survive_the_window_and_group_dropping() -> None:
    history: list[ModelMessage] = [user("start"), reply("ok")]
    for n in range(12):
        history += [
            user(f"task {n}"),
            tool_calls(("read", f"a{n}"), ("grep", f"b{n}")),
            tool_result("read", words(300), id=f"a{n}"),
            reply("thinking"),
            tool_result("grep", words(300), id=f"b{n}"),
            tool_call("read", id=f"c{n}"),
        ]
    history.append(user("now"))
    for budget in (1_500, 3_000, 6_000):
        policy = _tight(budget, **_off(window={"enabled": True}, drop_groups=True))
        _governed(history, policy)


# --- incremental pairing ------------------------------------------------------------------------


def _normalize_grown(history: list[ModelMessage]) -> list[list[ModelMessage]]:
    """Normalise every prefix of a history, the pairing and the repair carried from one prefix
    to the next (the repair taken up where it starts to differ), each against a cold one."""
    tokenizer = tokenizer_for(MODEL)
    facts = [message_facts(m, tokenizer) for m in history]
    pairing = Pairing()
    previous = None
    outputs = []
    for size in range(len(history) + 1):
        pairing = pairing.extended(facts[:size])
        carried = normalize(history[:size], facts[:size], tokenizer, "stop", pairing, previous)
        previous = carried
        cold = normalize(history[:size], facts[:size], tokenizer, "stop")
        messages = [carried.messages[p] for p in range(len(carried.messages))]
        assert messages == [cold.messages[p] for p in range(len(cold.messages))]
        assert carried.facts == cold.facts
        assert (list(carried.index), carried.origins, carried.removed, carried.dropped) == (
            list(cold.index),
            cold.origins,
            cold.removed,
            cold.dropped,
        )
        assert (carried.runs, carried.moved) == (cold.runs, cold.moved)
        for index in range(size):
            position = carried.position_of(index)
            if position is not None:
                assert carried.index[position] == index
            else:
                assert index in carried.dropped or index in carried.removed
        outputs.append(messages)
    return outputs


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_pairing_carried_over_a_growing_history_repairs_as_a_fresh_one(name: str) -> None:
    for messages in _normalize_grown([*BROKEN[name], reply("ok"), user("more")]):
        assert_provider_valid(messages)


def test_a_grown_history_is_repaired_again_only_from_where_its_repair_changes() -> None:
    # Forty interrupted turns (a call never answered), then a call answered late: taking the
    # last repair up reads only the sites from the late result's call on (here the late result
    # alone), where repairing afresh reads every interrupted turn's call and the prompt after.
    history: list[ModelMessage] = []
    for n in range(40):
        history += [user(f"task {n}"), tool_call("read", id=f"c{n}")]
    history += [user("go on"), tool_call("read", id="late"), reply("waiting")]
    tokenizer = tokenizer_for(MODEL)
    facts = [message_facts(m, tokenizer) for m in history]
    pairing = Pairing().extended(facts)
    before = normalize(history, facts, tokenizer, "stop", pairing)
    grown = [*history, tool_result("read", "the late result", id="late"), user("thanks")]
    grown_facts = [*facts, *(message_facts(m, tokenizer) for m in grown[-2:])]
    taken_up = LazyRecorder(grown)
    carried = normalize(
        taken_up, grown_facts, tokenizer, "stop", pairing.extended(grown_facts), before
    )
    assert taken_up.read == {len(history)}
    afresh = LazyRecorder(grown)
    cold = normalize(afresh, grown_facts, tokenizer, "stop")
    assert afresh.read == {*range(1, len(history) - 2), len(history)}
    assert [carried.messages[p] for p in range(len(carried.messages))] == [
        cold.messages[p] for p in range(len(cold.messages))
    ]
    assert (carried.facts, carried.runs, carried.moved, carried.removed, carried.dropped) == (
        cold.facts,
        cold.runs,
        cold.moved,
        cold.removed,
        cold.dropped,
    )
    assert carried.moved == {len(history) - 1: {0: (len(history), 0)}}


def test_a_history_grown_past_its_last_repair_is_taken_up_before_its_last_message() -> None:
    # One call interrupted at the start, then turns that need no repair: each grown history
    # takes the pass up just before its last message, not at the one repair however far back,
    # and the messages copied since stay one run.
    tokenizer = tokenizer_for(MODEL)
    history = [user("task"), tool_call("read", id="lost"), user("go on")]
    pairing, previous = Pairing(), None
    for n in range(30):
        history += [tool_call("read", id=f"c{n}"), tool_result("read", f"out {n}", id=f"c{n}")]
        facts = [message_facts(m, tokenizer) for m in history]
        pairing = pairing.extended(facts)
        carried = normalize(history, facts, tokenizer, "stop", pairing, previous)
        cold = normalize(history, facts, tokenizer, "stop")
        assert (carried.facts, carried.runs, list(carried.index)) == (
            cold.facts,
            cold.runs,
            list(cold.index),
        )
        if previous is not None:
            assert carried.shared == len(previous.facts)
        assert carried.runs is not None
        assert len(carried.runs) <= 4
        previous = carried


def test_normalize_records_where_a_moved_result_came_from() -> None:
    history = [*BROKEN["parallel across two requests"], reply("done"), user("more")]
    tokenizer = tokenizer_for(MODEL)
    facts = [message_facts(m, tokenizer) for m in history]
    normalized = normalize(history, facts, tokenizer, "stop")
    # The second result left request 3 (emptied, so left out) for part 1 of position 2.
    assert normalized.moved == {2: {1: (3, 0)}}
    assert normalized.removed == {3: [0]}
    assert normalized.dropped == [3]
    assert normalized.origins[2] == [0, None]
    assert normalized.messages[2].parts[1] is history[3].parts[0]


# --- markers, identity, purity ------------------------------------------------------------------


def test_turn_aborted_markers_are_kept() -> None:
    interrupted = _aborted()
    marker = user("<turn_aborted>user pressed ctrl-c</turn_aborted>")
    history: list[ModelMessage] = [
        user("go"),
        reply("hm"),
        interrupted,
        marker,
        reply("ok"),
        user("again"),
    ]
    governed = govern(history, _plain(), model=MODEL)
    assert interrupted in governed.messages
    assert marker in governed.messages


def test_valid_history_passes_through_as_the_same_objects() -> None:
    history: list[ModelMessage] = [
        user("go"),
        tool_call("a", id="c1"),
        tool_result("a", "r", id="c1"),
        reply("done"),
    ]
    governed = govern(history, _plain(), model=MODEL)
    assert all(a is b for a, b in zip(governed.messages, history, strict=True))
    assert [s.step for s in governed.report.steps] == []


def test_input_is_never_mutated() -> None:
    history: list[ModelMessage] = [
        user("go"),
        tool_call("a", id="c1"),
        tool_result("zz", "orphan", id="nope"),
    ]
    snapshot = copy.deepcopy(history)
    govern(history, _plain(), model=MODEL)
    assert history == snapshot
