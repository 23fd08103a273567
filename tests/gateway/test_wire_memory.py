"""A process reads what a conversation's next request adds, not the whole conversation again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gateway import chain
from gateway.wire import anthropic, openai_chat, openai_responses, spans


@pytest.fixture(autouse=True)
def forgotten() -> Iterator[None]:
    spans.forget_all()
    yield
    spans.forget_all()


def _body(messages: list[dict[str, Any]], **extra: Any) -> bytes:
    return json.dumps(
        {"model": "claude-x", "max_tokens": 64, "messages": messages, **extra}
    ).encode()


def _chat(*contents: str) -> bytes:
    """A Chat Completions body of user messages, spaced as a hand would write them."""
    messages = " , ".join(f'{{"role": "user", "content": "{c}"}}' for c in contents)
    return f'{{"model": "m", "messages": [{messages}]}}'.encode()


def _call(call_id: str, path: str) -> dict[str, Any]:
    block = {"type": "tool_use", "id": call_id, "name": "Read", "input": {"path": path}}
    return {"role": "assistant", "content": [block]}


def _result(call_id: str, text: str) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": text}
    return {"role": "user", "content": [block]}


TURNS = [
    {"role": "user", "content": "read a.py"},
    _call("t1", "a.py"),
    _result("t1", "print(1)"),
    {"role": "assistant", "content": [{"type": "text", "text": "It prints 1."}]},
]


def _parts(view: Any) -> list[tuple[str, Any]]:
    """A view's parts as what they say (their timestamps aside)."""
    return [
        (type(part).__name__, getattr(part, "content", None) or part.args) for part in view.parts
    ]


def _same(read: Any, fresh: Any) -> None:
    assert [m.raw for m in read.messages] == [m.raw for m in fresh.messages]
    assert [m.value for m in read.messages] == [m.value for m in fresh.messages]
    assert [_parts(m.view) for m in read.messages] == [_parts(m.view) for m in fresh.messages]
    assert read.text == fresh.text


def test_the_next_request_takes_what_was_read_before_and_reads_only_what_it_adds() -> None:
    first = anthropic.parse(_body(TURNS[:3], system="Be brief."))
    hashes = chain.hashes(anthropic.WIRE, first.messages)
    body = _body([*TURNS, {"role": "user", "content": "and b.py?"}], system="Be brief.")
    second = anthropic.parse(body)

    known = second.members["messages"].known
    assert known is not None
    assert len(known.items) == 3
    assert all(a is b for a, b in zip(first.messages[1:], second.messages[1:4], strict=True))
    # The same request read by a process that never saw the conversation.
    spans.forget_all()
    fresh = anthropic.parse(body)
    assert fresh.members["messages"].known is None
    _same(second, fresh)
    # The tool's name comes from a call read in the earlier request.
    assert second.messages[3].view.parts[0].tool_name == "Read"
    assert chain.hashes(anthropic.WIRE, second.messages)[:4] == hashes
    assert chain.hashes(anthropic.WIRE, second.messages) == chain.hashes(
        anthropic.WIRE, fresh.messages
    )


def test_a_rewritten_history_or_another_system_prompt_is_read_for_what_it_says() -> None:
    anthropic.parse(_body(TURNS[:3], system="Be brief."))
    second = anthropic.parse(_body([*TURNS[:2], _result("t1", "print(2)")], system="Be brief."))
    known = second.members["messages"].known
    assert known is None
    assert json.loads(second.messages[-1].raw)["content"][0]["content"] == "print(2)"
    # The messages array opens alike; the system prompt differs, and so does the chain.
    other = anthropic.parse(_body(TURNS[:3], system="Be thorough."))
    assert other.members["messages"].known is not None
    assert _parts(other.messages[0].view) != _parts(second.messages[0].view)
    assert (
        chain.hashes(anthropic.WIRE, other.messages)[1]
        != chain.hashes(anthropic.WIRE, second.messages)[1]
    )


def test_an_item_that_goes_on_is_not_taken_for_the_one_remembered() -> None:
    openai_chat.parse(_chat("hi"))
    read = openai_chat.parse(_chat("hi", "there"))
    assert read.members["messages"].known is not None
    assert [m.value["content"] for m in read.messages] == ["hi", "there"]
    # An array whose last item is a number opens the text of one whose item is a longer one.
    arrays = frozenset({"a"})
    _, members = spans.read_body(b'{"a": [{"x": 1}, 1]}', arrays, reader="test")
    spans.remember("test", members["a"], ["x", "1"], {})
    _, members = spans.read_body(b'{"a": [{"x": 1}, 12]}', arrays, reader="test")
    assert members["a"].known is None
    assert members["a"].value == [{"x": 1}, 12]
    # A shorter array of the same opening, and a broken one, are read as they are.
    spans.forget_all()
    openai_chat.parse(_chat("hi", "there"))
    assert [m.value["content"] for m in openai_chat.parse(_chat("hi")).messages] == ["hi"]
    with pytest.raises(spans.BodyError) as refused:
        openai_chat.parse(_chat("hi", "there")[:-2] + b"}")
    assert refused.value.field == "messages"


def test_another_wire_format_reads_the_same_items_its_own_way() -> None:
    items = b'[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}]'
    chat = openai_chat.parse(b'{"model": "m", "messages": ' + items + b"}")
    responses = openai_responses.parse(b'{"model": "m", "input": ' + items + b"}")
    assert responses.members["input"].known is None
    assert not any(a is b for a, b in zip(chat.messages, responses.messages, strict=True))


def test_the_memory_keeps_the_newest_arrays_within_its_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spans._Memory, "ARRAYS", 3)
    for n in range(5):
        openai_chat.parse(_chat(str(n)))
    seen = [
        openai_chat.parse(_chat(str(n), "next")).members["messages"].known is not None
        for n in (4, 3, 2, 1, 0)
    ]
    assert seen == [True, True, True, False, False]


def test_a_process_told_to_remember_nothing_reads_every_body_whole() -> None:
    openai_chat.parse(_chat("first"))
    assert openai_chat.parse(_chat("first", "next")).members["messages"].known is not None
    spans.remember_at_most(0)  # CTXHUB_GATEWAY_READ_MEMORY_MB=0
    try:
        assert openai_chat.parse(_chat("first", "next", "again")).members["messages"].known is None
        openai_chat.parse(_chat("second"))
        assert openai_chat.parse(_chat("second", "next")).members["messages"].known is None
    finally:
        spans.remember_at_most(spans._Memory.CHARACTERS)
    openai_chat.parse(_chat("third"))
    assert openai_chat.parse(_chat("third", "next")).members["messages"].known is not None


def test_a_body_mostly_remembered_is_read_within_a_small_budget_and_a_new_one_stops_early() -> None:
    history = [
        _result(f"t{n}", "x" * 2_000) if n % 2 else _call(f"t{n}", "a.py") for n in range(40)
    ]
    body = _body([{"role": "user", "content": "go"}, *history[:-1]], system="Be brief.")
    budget = 4_096
    assert len(body) > 10 * budget
    with pytest.raises(spans.TooMuchToRead), spans.reading_at_most(budget):
        anthropic.parse(body)  # nothing of it remembered: it stops at the budget
    first = anthropic.parse(body)  # read whole, as a thread reads it
    following = _body([{"role": "user", "content": "go"}, *history], system="Be brief.")
    with spans.reading_at_most(budget):
        read = anthropic.parse(following)  # one result new: well within the budget
    assert read.members["messages"].known is not None
    assert len(read.messages) == len(first.messages) + 1
    assert all(a is b for a, b in zip(first.messages[1:], read.messages[1:-1], strict=True))
    spans.forget_all()
    _same(read, anthropic.parse(following))
