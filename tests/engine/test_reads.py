"""Reads of one resource (``Dedupe.keys``): a re-read of a path supersedes the older read, even
when the file changed in between."""

from __future__ import annotations

from typing import Any

import pytest
from engine_builders import MODEL, _off
from pydantic import ValidationError
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart

from ctxhub.governance import Governor, Policy, govern
from tests.messages import reply, tool_call, tool_result, user, words

KEYED = {"dedupe": {"keys": {"read_file": ["path"]}, "min_tokens": 50}}


def _policy(**overrides: Any) -> Policy:
    return Policy.model_validate(_off(**overrides))


def _read(history: list[ModelMessage], call_id: str, text: str, **args: Any) -> None:
    history += [
        tool_call("read_file", id=call_id, **args),
        tool_result("read_file", text, id=call_id),
        reply(f"read {args}"),
    ]


def _session() -> list[ModelMessage]:
    history: list[ModelMessage] = [user("fix the parser")]
    _read(history, "c1", words(400, "old"), path="src/parser.py")
    _read(history, "c2", words(400, "other"), path="src/lexer.py")
    history.append(user("I edited it, look again"))
    _read(history, "c3", words(400, "new"), path="src/parser.py")
    history.append(user("now fix it"))
    return history


def _output(messages: list[ModelMessage], call_id: str) -> Any:
    for message in messages:
        for part in message.parts:
            if getattr(part, "tool_call_id", None) == call_id and part.part_kind == "tool-return":
                return part.content
    raise AssertionError(f"no output for {call_id}")


def test_a_re_read_of_a_path_supersedes_the_older_read_though_the_file_changed() -> None:
    history = _session()
    governed = govern(history, _policy(**KEYED), model=MODEL)
    assert _output(governed.messages, "c1") == (
        "[superseded by the later read_file call c3 of the same path — ~442 tokens]"
    )
    assert _output(governed.messages, "c2") == _output(history, "c2")  # another path
    assert _output(governed.messages, "c3") == _output(history, "c3")  # the newest, whole
    assert "dedupe" in [step.step for step in governed.report.steps]
    assert governed.tokens_after < govern(history, _policy(), model=MODEL).tokens_after
    # Governing the result again changes nothing.
    assert govern(governed.messages, _policy(**KEYED), model=MODEL).messages == governed.messages


def test_without_keys_only_identical_outputs_are_deduplicated() -> None:
    history = _session()
    governed = govern(history, _policy(dedupe={"min_tokens": 50}), model=MODEL)
    assert _output(governed.messages, "c1") == _output(history, "c1")


def test_a_call_that_does_not_name_the_key_or_sends_bad_json_reads_nothing_keyed() -> None:
    history = _session()
    # The newer read names no path, then one whose arguments are not JSON: neither supersedes.
    history[8] = tool_call("read_file", id="c3", file="src/parser.py")
    assert govern(history, _policy(**KEYED), model=MODEL).messages == history
    history[8] = ModelResponse(parts=[ToolCallPart("read_file", '{"path": ', tool_call_id="c3")])
    assert govern(history, _policy(**KEYED), model=MODEL).messages == history


def test_arguments_sent_as_a_json_string_name_the_same_path() -> None:
    history = _session()
    history[8] = ModelResponse(
        parts=[ToolCallPart("read_file", '{"path": "src/parser.py"}', tool_call_id="c3")]
    )
    governed = govern(history, _policy(**KEYED), model=MODEL)
    assert _output(governed.messages, "c1").startswith("[superseded by the later read_file")


def test_a_truncated_read_is_superseded_by_a_later_truncated_read_of_the_path() -> None:
    # Both reads are cut to 200 tokens: governed again, the later read's cut text is an output
    # like any other, so the first pass must already supersede the older read by it.
    policy = _policy(**KEYED, tool_output={"limit": 200})
    history = _session()
    governed = govern(history, policy, model=MODEL)
    assert _output(governed.messages, "c1").startswith("[superseded by the later read_file c")
    assert "[truncated: kept" in _output(governed.messages, "c3")
    assert govern(governed.messages, policy, model=MODEL).messages == governed.messages


def test_reads_are_ordered_by_their_calls_when_a_result_arrives_late() -> None:
    # c3's result arrives after c4's: pair repair sends it after its call, before c4, so c3's
    # read is the older one, in this request and whenever it is governed again.
    history: list[ModelMessage] = [user("fix the parser")]
    history += [
        tool_call("read_file", id="c3", path="src/parser.py"),
        tool_call("read_file", id="c4", path="src/parser.py"),
        tool_result("read_file", words(400, "newer"), id="c4"),
        tool_result("read_file", words(400, "older"), id="c3"),
        user("now fix it"),
    ]
    governed = govern(history, _policy(**KEYED), model=MODEL)
    assert _output(governed.messages, "c3").startswith("[superseded by the later read_file c")
    assert _output(governed.messages, "c4") == _output(history, "c4")
    again = govern(governed.messages, _policy(**KEYED), model=MODEL)
    assert again.messages == governed.messages


def test_a_governor_supersedes_as_the_history_grows() -> None:
    # Each request between actions is the previous one with the new messages appended, so the
    # older read is superseded when the Governor next acts, and every request stays in budget.
    policy = _policy(
        **KEYED,
        context_window=3_000,
        reserved_output_tokens=0,
        hysteresis={"enabled": True},
        masking={"apply": "never"},
    )
    governor = Governor(policy, model=MODEL)
    history: list[ModelMessage] = [user("fix the parser")]
    for n in range(8):
        _read(history, f"c{n}", words(300, f"v{n}"), path="src/parser.py")
        history.append(user(f"look again {n}"))
        governed = governor.govern(history)
        assert governed.tokens_after <= policy.history_budget(3_000)
    superseded = [
        n
        for n in range(7)
        if str(_output_or_none(governed.messages, f"c{n}")).startswith("[superseded")
    ]
    assert superseded
    assert _output(governed.messages, "c7") == _output(history, "c7")


def _output_or_none(messages: list[ModelMessage], call_id: str) -> Any:
    try:
        return _output(messages, call_id)
    except AssertionError:
        return None


@pytest.mark.parametrize(
    "bad", [{"read_file": []}, {"": ["path"]}, {"read_file": [""]}, {"read_file": "path"}]
)
def test_keys_are_validated(bad: object) -> None:
    with pytest.raises(ValidationError, match=r"dedupe\.keys"):
        Policy.model_validate({"dedupe": {"keys": bad}})
