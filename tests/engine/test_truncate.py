"""Truncation of tool outputs and of long user / assistant text."""

from __future__ import annotations

import json

from engine_builders import MODEL, _off, _tight
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from ctxhub.governance import count_tokens, govern
from ctxhub.governance.steps.truncate import truncate_text
from ctxhub.governance.tokens import tokenizer_for
from tests.messages import reply, tool_call, tool_result, user, words

TOKENIZER = tokenizer_for(MODEL)
BIG = 1_000_000


def _cut(text: str, limit: int, **kw: object) -> str | None:
    options: dict[str, object] = {"unit": "tokens", "strategy": "head", "tokenizer": TOKENIZER}
    options.update(kw)
    return truncate_text(text, limit, **options)  # type: ignore[arg-type]


def _old_output(content: object) -> list:  # type: ignore[type-arg]
    """An output in an older turn, followed by a new turn."""
    return [
        user("go"),
        tool_call("read", id="c1"),
        tool_result("read", content, id="c1"),
        reply("ok"),
        user("next"),
    ]


def test_head_keeps_the_beginning_with_an_indicator() -> None:
    text = "\n".join(f"line {n}" for n in range(2000))
    cut = _cut(text, 100)
    assert cut is not None
    assert cut.startswith("line 0\nline 1")
    assert cut.endswith("of ~8999 tokens (head); 2000 lines total]")
    assert "[truncated: kept first ~" in cut
    assert TOKENIZER.count(cut) <= 100


def test_tail_keeps_the_end() -> None:
    text = "\n".join(f"line {n}" for n in range(2000))
    cut = _cut(text, 100, strategy="tail")
    assert cut is not None
    assert cut.startswith("[truncated: kept last ~")
    assert cut.endswith("line 1999")
    assert TOKENIZER.count(cut) <= 100


def test_both_keeps_half_of_each_end_around_the_indicator() -> None:
    text = "\n".join(f"line {n}" for n in range(2000))
    cut = _cut(text, 200, strategy="both")
    assert cut is not None
    head, _marker, tail = cut.partition("\n[truncated: kept first+last ~")
    assert head.startswith("line 0")
    assert tail.endswith("line 1999")
    assert abs(TOKENIZER.count(head) - TOKENIZER.count(tail.split("]\n", 1)[1])) <= 3
    assert TOKENIZER.count(cut) <= 200


def test_chars_unit_cuts_by_characters() -> None:
    cut = _cut("x" * 5000, 1000, unit="chars")
    assert cut is not None
    assert len(cut) <= 1000
    assert "of ~5000 chars (head)" in cut


def test_text_within_the_limit_is_left_alone() -> None:
    assert _cut("short", 100) is None
    assert _cut("short", 1000, unit="chars") is None


def test_truncating_twice_changes_nothing() -> None:
    cut = _cut(words(5000), 300, strategy="both")
    assert cut is not None
    assert _cut(cut, 300, strategy="both") is None


def test_older_tool_output_is_truncated_but_the_current_turn_is_not() -> None:
    policy = _tight(BIG, **_off(tool_output={"limit": 200}))
    history = [
        *_old_output(words(3000)),
        tool_call("read", id="c2"),
        tool_result("read", words(3000), id="c2"),
    ]
    governed = govern(history, policy, model=MODEL)
    old, new = governed.messages[2].parts[0], governed.messages[6].parts[0]
    assert count_tokens(old.content, model=MODEL) <= 200  # type: ignore[union-attr]
    assert new.content == words(3000)  # type: ignore[union-attr]
    assert [p.action for p in governed.report.messages[2].parts] == ["truncated"]


def test_write_time_scope_truncates_the_current_turn_too() -> None:
    policy = _tight(BIG, **_off(tool_output={"limit": 200, "scope": "all"}))
    history = [user("go"), tool_call("read", id="c1"), tool_result("read", words(3000), id="c1")]
    governed = govern(history, policy, model=MODEL)
    assert "[truncated:" in governed.messages[2].parts[0].content  # type: ignore[union-attr]


def test_dict_output_is_measured_and_cut_as_json() -> None:
    payload = {"rows": [{"id": n, "name": f"row {n}"} for n in range(2000)]}
    policy = _tight(BIG, **_off(tool_output={"limit": 300, "unit": "chars"}))
    governed = govern(_old_output(payload), policy, model=MODEL)
    content = governed.messages[2].parts[0].content  # type: ignore[union-attr]
    assert isinstance(content, str)
    assert content.startswith(json.dumps(payload, separators=(",", ":"))[:50])
    assert len(content) <= 300


def test_long_user_and_assistant_text_in_older_turns_is_truncated() -> None:
    policy = _tight(BIG, **_off(text={"limit": 100, "strategy": "both"}))
    history = [user(words(2000)), reply(words(2000)), user(words(2000))]
    governed = govern(history, policy, model=MODEL)
    first, answer, latest = (m.parts[0] for m in governed.messages)
    assert isinstance(first, UserPromptPart)
    assert isinstance(answer, TextPart)
    assert count_tokens(first.content, model=MODEL) <= 100  # type: ignore[arg-type]
    assert count_tokens(answer.content, model=MODEL) <= 100
    assert latest.content == words(2000)  # type: ignore[union-attr]


def test_latest_user_request_survives_even_at_write_time() -> None:
    policy = _tight(BIG, **_off(text={"limit": 100, "scope": "all"}))
    governed = govern([user(words(2000))], policy, model=MODEL)
    assert governed.messages[0].parts[0].content == words(2000)  # type: ignore[union-attr]


def test_truncation_rebuilds_messages_and_keeps_the_rest() -> None:
    policy = _tight(BIG, **_off(tool_output={"limit": 100}))
    history = _old_output(words(1000))
    governed = govern(history, policy, model=MODEL)
    assert governed.messages[2] is not history[2]
    assert history[2].parts[0].content == words(1000)  # type: ignore[union-attr]
    assert all(governed.messages[n] is history[n] for n in (0, 1, 3, 4))
    assert isinstance(governed.messages[2], ModelRequest)
    assert isinstance(governed.messages[1], ModelResponse)
