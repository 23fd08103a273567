"""Sliding window: triggers, keep, head, pins, protected tools, safe cut, notice."""

from __future__ import annotations

from engine_builders import MODEL, _off, _tight
from pydantic_ai.messages import ModelMessage, ModelRequest

from ctxhub.governance import count_tokens, govern, pairing_problems
from tests.messages import reply, tool_call, tool_result, user, words


def _turns(n: int, size: int = 50) -> list[ModelMessage]:
    """A first run, then ``n`` turns of: prompt, tool call, result, answer."""
    history: list[ModelMessage] = [user("start", system="be brief"), reply("hello")]
    for turn in range(n):
        history += [
            user(f"q{turn}"),
            tool_call("read", id=f"c{turn}"),
            tool_result("read", words(size, f"w{turn}"), id=f"c{turn}"),
            reply(f"a{turn}"),
        ]
    return history


def _window(**window: object) -> dict[str, object]:
    return _off(window={"enabled": True, **window})


def _prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if p.part_kind == "user-prompt" and isinstance(p.content, str)
    ]


def test_over_budget_keeps_head_and_as_much_recent_history_as_fits() -> None:
    history = _turns(40)
    policy = _tight(1500, **_window())
    governed = govern(history, policy, model=MODEL)
    assert governed.fits
    assert governed.messages[:2] == history[:2]
    assert governed.messages[-4:] == history[-4:]
    assert pairing_problems(governed.messages) == []
    prompts = _prompts(governed.messages)
    assert prompts[0] == "start"
    assert prompts[1].startswith("[conversation truncated — ")
    assert prompts[-1] == "q39"
    report = governed.report
    assert report.tokens_after <= report.budget_tokens + report.system_tokens
    zones = [m.zone for m in report.messages if m.index is not None]
    assert zones[:2] == ["head", "head"]
    assert zones[-1] == "tail"
    assert "middle" in zones


def test_the_notice_counts_the_omitted_messages() -> None:
    history = _turns(40)
    governed = govern(history, _tight(1500, **_window()), model=MODEL)
    omitted = sum(not m.kept for m in governed.report.messages)
    assert f"— {omitted} older messages omitted]" in _prompts(governed.messages)[1]


def test_message_trigger_with_message_keep() -> None:
    trigger = {
        "triggers": [{"kind": "messages", "value": 30}],
        "keep": {"kind": "messages", "value": 10},
    }
    governed = govern(_turns(10), _tight(1_000_000, **_window(**trigger)), model=MODEL)
    # The keep counts the tail's messages, the turn's own request among them: nine, as a
    # tenth would be a result parted from its call.
    kept_tail = [m for m in governed.report.messages if m.zone == "tail"]
    assert len(kept_tail) == 9
    assert _prompts(governed.messages)[-1] == "q9"
    assert pairing_problems(governed.messages) == []


def test_trigger_that_does_not_fire_leaves_history_alone() -> None:
    trigger = {"triggers": [{"kind": "messages", "value": 100}]}
    history = _turns(10)
    governed = govern(history, _tight(1_000_000, **_window(**trigger)), model=MODEL)
    assert governed.messages == history


def test_token_and_fraction_triggers_fire_on_either() -> None:
    history = _turns(20)
    total = count_tokens(history, model=MODEL)
    triggers = [{"kind": "messages", "value": 1000}, {"kind": "fraction", "value": 0.5}]
    policy = _tight(
        total + 100, **_window(triggers=triggers, keep={"kind": "tokens", "value": 400})
    )
    governed = govern(history, policy, model=MODEL)
    assert len(governed.messages) < len(history)
    tail = sum(m.tokens_after for m in governed.report.messages if m.zone == "tail")
    current_turn = count_tokens(history[-4:], model=MODEL)
    assert tail <= 400 + current_turn


def test_pinned_messages_survive_with_their_pair() -> None:
    history = _turns(40)
    pinned = frozenset({12})  # the tool result of turn 2 (its call is at 11)
    governed = govern(history, _tight(1500, **_window()), model=MODEL, pinned=pinned)
    assert history[12] in governed.messages
    assert history[11] in governed.messages
    assert history[10] not in governed.messages
    assert pairing_problems(governed.messages) == []
    zones = {m.index: m.zone for m in governed.report.messages}
    assert zones[12] == "pinned"


def test_latest_protected_tool_pair_survives() -> None:
    history = _turns(40)
    history[25:25] = [
        tool_call("manage_todo_list", id="todo"),
        tool_result("manage_todo_list", "1. x", id="todo"),
    ]
    governed = govern(history, _tight(1500, **_window()), model=MODEL)
    assert history[25] in governed.messages
    assert history[26] in governed.messages


def test_the_cut_never_separates_a_call_from_its_result() -> None:
    history = _turns(30)
    for budget in range(400, 2000, 37):
        governed = govern(history, _tight(budget, **_window()), model=MODEL)
        assert pairing_problems(governed.messages) == []


def test_windowing_its_own_output_changes_nothing() -> None:
    policy = _tight(1500, **_window())
    once = govern(_turns(40), policy, model=MODEL)
    twice = govern(once.messages, policy, model=MODEL)
    assert twice.messages == once.messages


def test_a_later_window_folds_the_earlier_notice_into_its_count() -> None:
    policy = _tight(1500, **_window())
    once = govern(_turns(40), policy, model=MODEL)
    more = once.messages + _turns(10)[2:]
    twice = govern(more, policy, model=MODEL)
    notices = [p for p in _prompts(twice.messages) if p.startswith("[conversation truncated")]
    assert len(notices) == 1
    first = int(_prompts(once.messages)[1].split("— ")[1].split(" ")[0])
    second = int(notices[0].split("— ")[1].split(" ")[0])
    assert second > first


def test_head_too_large_shrinks_to_the_first_request() -> None:
    history = [
        user("start"),
        tool_call("read", id="h1"),
        tool_result("read", words(900), id="h1"),
        reply("hi"),
    ]
    history += _turns(10)[2:]
    governed = govern(history, _tight(1200, **_window()), model=MODEL)
    assert governed.messages[0] is history[0]
    assert history[2] not in governed.messages
    assert pairing_problems(governed.messages) == []


def test_window_disabled_never_drops() -> None:
    history = _turns(40)
    governed = govern(history, _tight(1500, **_off()), model=MODEL)
    assert governed.messages == history
    assert not governed.fits
    assert governed.report.reason
