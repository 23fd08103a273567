"""Truncation of large tool-call arguments (a file written in full) in older turns.

A call's long string values are cut like tool outputs, by the tool-output limit, with the same
indicator; the arguments stay valid JSON of the same shape and type, and the call keeps its name
and id, so it still pairs with its result.
"""

from __future__ import annotations

import json
from typing import Any

from engine_builders import MODEL, _off, _tight
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart

from ctxhub.governance import count_tokens, govern, pairing_problems
from ctxhub.governance.counting import cached_part_tokens
from ctxhub.governance.facts import MessageFacts, message_facts
from ctxhub.governance.policy import MIN_TRUNCATION_TOKENS
from ctxhub.governance.steps.truncate import truncate_args
from ctxhub.governance.tokens import APPROXIMATE_FALLBACK, Tokenizer, tokenizer_for
from tests.messages import T0, reply, tool_result, user

TOKENIZER = tokenizer_for(MODEL)
BIG = 1_000_000
PATH = "src/app/services/storage/writer.py"
CONTENT = "\n".join(
    f'def handler_{n}(request):\n    return render(request, "page_{n}.html", {{"n": {n}}})'
    for n in range(80)
)[:5_000]
LINES = CONTENT.count("\n") + 1
LIMIT = 200


def _args() -> dict[str, Any]:
    return {"path": PATH, "content": CONTENT, "overwrite": True, "mode": 420}


def _write(args: dict[str, Any] | str | None = None, *, id: str = "w1") -> ModelResponse:
    part = ToolCallPart("write_file", _args() if args is None else args, tool_call_id=id)
    return ModelResponse(parts=[TextPart("writing it"), part], timestamp=T0)


def _older(call: ModelResponse) -> list[ModelMessage]:
    """The call and its result in an older turn, followed by a new turn."""
    return [
        user("write the writer"),
        call,
        tool_result("write_file", "written", id="w1"),
        reply("done"),
        user("now test it"),
    ]


def _current(call: ModelResponse) -> list[ModelMessage]:
    """The call and its result in the current turn."""
    return [user("write the writer"), call, tool_result("write_file", "written", id="w1")]


def _policy(**tool_output: Any) -> Any:
    return _tight(BIG, **_off(tool_output={"limit": LIMIT, **tool_output}))


def _call_of(messages: list[ModelMessage], position: int = 1) -> ToolCallPart:
    part = messages[position].parts[1]
    assert isinstance(part, ToolCallPart)
    return part


def _assert_cut(call: ToolCallPart, limit: int = LIMIT, unit: str = "tokens") -> dict[str, Any]:
    """The call is the write call with its content cut to fit ``limit``; its arguments."""
    assert call.tool_name == "write_file"
    assert call.tool_call_id == "w1"
    text = call.args_as_json_str()
    args = json.loads(text)
    assert list(args) == ["path", "content", "overwrite", "mode"]
    assert args["path"] == PATH
    assert args["overwrite"] is True
    assert args["mode"] == 420
    assert args["content"] != CONTENT
    assert args["content"].startswith(CONTENT[:60])
    assert "[truncated: kept first ~" in args["content"]
    assert f" {unit} (head); {LINES} lines total]" in args["content"]
    size = count_tokens(text, model=MODEL) if unit == "tokens" else len(text)
    assert size <= limit
    assert "INVALID_JSON" not in args
    return args  # type: ignore[no-any-return]


def test_a_large_write_in_an_older_turn_is_cut_to_valid_json() -> None:
    history = _older(_write())
    governed = govern(history, _policy(), model=MODEL)
    call = _call_of(governed.messages)
    assert isinstance(call.args, dict)
    _assert_cut(call)
    assert pairing_problems(governed.messages) == []
    # The call's message is rebuilt around the cut part; everything else is left as it was.
    assert governed.messages[1] is not history[1]
    assert governed.messages[1].parts[0] is history[1].parts[0]
    assert all(governed.messages[n] is history[n] for n in (0, 2, 3, 4))
    # The input is never touched.
    assert _call_of(history).args == _args()


def test_the_report_shows_the_call_truncated() -> None:
    history = _older(_write())
    governed = govern(history, _policy(), model=MODEL)
    before = cached_part_tokens(_call_of(history), TOKENIZER)
    after = cached_part_tokens(_call_of(governed.messages), TOKENIZER)
    assert after < before
    parts = governed.report.messages[1].parts
    assert [p.action for p in parts] == ["kept", "truncated"]
    assert parts[1].part_kind == "tool-call"
    assert parts[1].tool_name == "write_file"
    assert (parts[1].tokens_before, parts[1].tokens_after) == (before, after)
    steps = {s.step: s for s in governed.report.steps}
    assert steps["truncate"].parts == 1
    assert steps["truncate"].tokens_removed == before - after
    assert governed.report.tokens_after == count_tokens(governed.messages, model=MODEL)


def test_json_string_arguments_stay_a_json_string() -> None:
    governed = govern(_older(_write(json.dumps(_args(), indent=2))), _policy(), model=MODEL)
    call = _call_of(governed.messages)
    assert isinstance(call.args, str)
    assert json.loads(call.args) == json.loads(call.args_as_json_str())
    _assert_cut(call)


def test_the_current_turn_is_left_whole_in_scope_older() -> None:
    history = _current(_write())
    governed = govern(history, _policy(), model=MODEL)
    assert governed.messages[1] is history[1]
    assert [p.action for p in governed.report.messages[1].parts] == ["kept", "kept"]


def test_the_current_turn_is_cut_in_scope_all() -> None:
    for args in (_args(), json.dumps(_args())):
        governed = govern(_current(_write(args)), _policy(scope="all"), model=MODEL)
        call = _call_of(governed.messages)
        assert type(call.args) is type(args)
        _assert_cut(call)
        assert [p.action for p in governed.report.messages[1].parts] == ["kept", "truncated"]


def test_pinned_and_protected_calls_are_left_whole() -> None:
    history = _older(_write())
    pinned = govern(history, _policy(), model=MODEL, pinned={1})
    assert pinned.messages[1] is history[1]
    policy = _tight(
        BIG,
        **_off(
            tool_output={"limit": LIMIT},
            window={"enabled": False, "protected_tools": ["write_file"]},
        ),
    )
    protected = govern(history, policy, model=MODEL)
    assert protected.messages[1] is history[1]
    assert [p.action for p in protected.report.messages[1].parts] == ["kept", "kept"]


def test_governing_the_output_again_changes_nothing() -> None:
    for args in (_args(), json.dumps(_args())):
        for scope in ("older", "all"):
            policy = _policy(scope=scope)
            once = govern(_older(_write(args)), policy, model=MODEL)
            assert "[truncated: kept first ~" in _call_of(once.messages).args_as_json_str()
            twice = govern(list(once.messages), policy, model=MODEL)
            assert twice.messages == once.messages
            assert _call_of(twice.messages).args == _call_of(once.messages).args
            actions = {p.action for m in twice.report.messages for p in m.parts}
            assert actions == {"kept"}


def test_arguments_within_the_limit_are_left_alone() -> None:
    small = {"path": PATH, "content": "print('hi')\n"}
    history = _older(_write(small))
    governed = govern(history, _policy(scope="all"), model=MODEL)
    assert governed.messages[1] is history[1]


def test_characters_unit_measures_the_json_arguments() -> None:
    governed = govern(_older(_write()), _policy(unit="chars", limit=1_000), model=MODEL)
    _assert_cut(_call_of(governed.messages), limit=1_000, unit="chars")


def test_stored_facts_still_lead_to_the_call() -> None:
    """A message whose largest part is its call is governed, from facts stored as JSON too."""
    history = _older(_write())
    facts = [MessageFacts.from_json(message_facts(m, TOKENIZER).to_json()) for m in history]
    assert facts[1].largest > LIMIT
    governed = govern(history, _policy(), model=MODEL, facts=facts)
    _assert_cut(_call_of(governed.messages))


def test_nested_strings_share_the_limit_and_keep_their_shape() -> None:
    args = {
        "files": [
            {"path": "a.py", "content": CONTENT},
            {"path": "b.py", "content": CONTENT.upper()},
        ],
        "message": "two files",
    }
    governed = govern(_older(_write(args)), _policy(), model=MODEL)
    call = _call_of(governed.messages)
    new = json.loads(call.args_as_json_str())
    assert new["message"] == "two files"
    assert [f["path"] for f in new["files"]] == ["a.py", "b.py"]
    for file, original in zip(new["files"], (CONTENT, CONTENT.upper()), strict=True):
        assert file["content"].startswith(original[:40])
        assert "[truncated: kept first ~" in file["content"]
    assert count_tokens(call.args_as_json_str(), model=MODEL) <= LIMIT


def test_unparsable_string_arguments_are_cut_as_one_string_value() -> None:
    """Invalid JSON is sent as ``{"INVALID_JSON": raw}``: the raw text is cut as that value."""
    raw = '{"path": "' + PATH + '", "content": "' + CONTENT
    governed = govern(_older(_write(raw)), _policy(), model=MODEL)
    call = _call_of(governed.messages)
    assert isinstance(call.args, str)
    assert call.args.startswith(raw[:60])
    assert "[truncated: kept first ~" in call.args
    sent = json.loads(call.args_as_json_str())
    assert list(sent) == ["INVALID_JSON"]
    assert count_tokens(call.args_as_json_str(), model=MODEL) <= LIMIT
    again = govern(list(governed.messages), _policy(), model=MODEL)
    assert again.messages == governed.messages


def _cut_args(args: Any, limit: int = LIMIT, **kw: Any) -> Any:
    options: dict[str, Any] = {"unit": "tokens", "strategy": "head", "tokenizer": TOKENIZER}
    options.update(kw)
    return truncate_args(args, limit, **options)


def _size(args: Any, unit: str = "tokens", tokenizer: Tokenizer = TOKENIZER) -> int:
    text = ToolCallPart("t", args).args_as_json_str()
    return len(text) if unit == "chars" else tokenizer.count(text)


def test_every_strategy_keeps_its_end_and_fits() -> None:
    for strategy, kept in (("head", CONTENT[:40]), ("tail", CONTENT[-40:]), ("both", None)):
        for unit, limit in (("tokens", LIMIT), ("chars", 1_000)):
            cut = _cut_args(_args(), limit, unit=unit, strategy=strategy)
            content = cut["content"]
            if kept is None:
                assert content.startswith(CONTENT[:20])
                assert content.endswith(CONTENT[-20:])
            else:
                assert kept in content
            assert f"({strategy}); {LINES} lines total]" in content
            assert _size(cut, unit) <= limit
            # Close to the limit: the share left by the short values is used.
            assert _size(cut, unit) > limit * 0.8
            assert _cut_args(cut, limit, unit=unit, strategy=strategy) is None


def test_counting_bytes_when_the_encoding_is_missing() -> None:
    approximate = Tokenizer(APPROXIMATE_FALLBACK, exact=False)
    cut = _cut_args(_args(), tokenizer=approximate)
    assert cut["path"] == PATH
    assert "[truncated: kept first ~" in cut["content"]
    assert _size(cut, tokenizer=approximate) <= LIMIT
    assert _cut_args(cut, tokenizer=approximate) is None


def test_too_many_long_values_are_each_cut_to_the_floor_once() -> None:
    """When the limit cannot be met, every long value keeps room for its indicator and a little
    more, and cutting the result again changes nothing."""
    many = {f"part_{n}": CONTENT[: 600 + n] for n in range(30)}
    cut = _cut_args(many)
    assert list(cut) == list(many)
    assert _size(cut) < _size(many) / 2
    for key, value in cut.items():
        assert value.startswith(many[key][:30])
        assert "[truncated: kept first ~" in value
        assert TOKENIZER.count(value) <= MIN_TRUNCATION_TOKENS
    assert _cut_args(cut) is None


def test_only_short_values_leave_nothing_to_cut() -> None:
    short = {f"key_{n}": f"value {n}" for n in range(500)}
    assert _size(short) > LIMIT
    assert _cut_args(short) is None
    assert _cut_args(json.dumps(short)) is None


def test_a_json_string_that_is_no_object_is_cut_as_raw_text() -> None:
    listed = json.dumps([CONTENT])
    cut = _cut_args(listed)
    assert isinstance(cut, str)
    assert cut.startswith(listed[:40])
    assert _size(cut) <= LIMIT
    assert _cut_args(None) is None
    assert _cut_args("") is None
    assert _cut_args({}) is None
