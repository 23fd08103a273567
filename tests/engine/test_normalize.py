"""Pair integrity: dangling calls answered, orphans removed, aborted markers kept."""

from __future__ import annotations

import copy

from engine_builders import MODEL, _call, _calls, _off, _ret, _rets, _text, _tight, _user
from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart

from ctxhub.governance import Policy, govern
from ctxhub.governance.steps.normalize import pairing_problems

BIG = 100_000


def _plain() -> Policy:
    return _tight(BIG, **_off())


def test_dangling_call_gets_a_synthetic_result_right_after_it() -> None:
    history = [_user("go"), _call("read", id="c1"), _user("next")]
    governed = govern(history, _plain(), model=MODEL)
    assert pairing_problems(governed.messages) == []
    answer = governed.messages[2]
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
    history = [_user("go"), _calls(("a", "c1"), ("b", "c2"))]
    governed = govern(history, _plain(), model=MODEL)
    assert len(governed.messages) == 3
    assert [p.tool_call_id for p in governed.messages[2].parts] == ["c1", "c2"]  # type: ignore[union-attr]
    assert pairing_problems(governed.messages) == []


def test_dangling_text_is_configurable() -> None:
    policy = _tight(BIG, **_off(), dangling_call_text="aborted")
    governed = govern([_user("go"), _call("x", id="c1")], policy, model=MODEL)
    assert governed.messages[-1].parts[0].content == "aborted"  # type: ignore[union-attr]


def test_orphan_result_is_removed_and_reported() -> None:
    history = [_user("go"), _ret("read", "stale", id="gone"), _text("ok"), _user("again")]
    governed = govern(history, _plain(), model=MODEL)
    assert pairing_problems(governed.messages) == []
    assert len(governed.messages) == 3
    report = governed.report.messages[1]
    assert (report.kept, report.parts[0].action) == (False, "dropped")


def test_orphan_next_to_a_valid_result_removes_only_the_orphan() -> None:
    history = [_user("go"), _call("a", id="c1"), _rets(("a", "fine", "c1"), ("b", "x", "zz"))]
    governed = govern(history, _plain(), model=MODEL)
    assert [p.tool_call_id for p in governed.messages[2].parts] == ["c1"]  # type: ignore[union-attr]
    actions = [p.action for p in governed.report.messages[2].parts]
    assert actions == ["kept", "dropped"]


def test_turn_aborted_markers_are_kept() -> None:
    interrupted = ModelRequest(parts=[], state="interrupted")
    marker = _user("<turn_aborted>user pressed ctrl-c</turn_aborted>")
    history = [_user("go"), _text("hm"), interrupted, marker, _text("ok"), _user("again")]
    governed = govern(history, _plain(), model=MODEL)
    assert interrupted in governed.messages
    assert marker in governed.messages


def test_valid_history_passes_through_as_the_same_objects() -> None:
    history = [_user("go"), _call("a", id="c1"), _ret("a", "r", id="c1"), _text("done")]
    governed = govern(history, _plain(), model=MODEL)
    assert all(a is b for a, b in zip(governed.messages, history, strict=True))
    assert [s.step for s in governed.report.steps] == []


def test_input_is_never_mutated() -> None:
    history = [_user("go"), _call("a", id="c1"), _ret("zz", "orphan", id="nope")]
    snapshot = copy.deepcopy(history)
    govern(history, _plain(), model=MODEL)
    assert history == snapshot
