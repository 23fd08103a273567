"""Keeps and triggers as users of peer libraries configure them.

pydantic-ai-harness's sliding window, summarization-pydantic-ai and LangChain's summarization
middleware all count the current request in a keep and measure the whole context for a token
or fraction trigger. These are their scenarios, stated as a user of those libraries would.
"""

from __future__ import annotations

from engine_builders import MODEL, _off, _tight
from pydantic_ai.messages import ModelMessage

from ctxhub.governance import Governor, count_tokens, govern
from ctxhub.governance.steps.window import notice_omitted
from tests.messages import reply, tool_call, tool_result, user, words


def _chat(turns: int) -> list[ModelMessage]:
    """``turns`` exchanges of a question and an answer, then the next question."""
    history: list[ModelMessage] = []
    for turn in range(turns):
        history += [user(f"question {turn}"), reply(f"answer {turn}")]
    history.append(user("the question now"))
    return history


def _window(**window: object) -> dict[str, object]:
    return _off(window={"enabled": True, "keep_head": False, **window})


def _conversation(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The messages sent but the window's notice."""
    return [m for m in messages if notice_omitted(m) is None]


def test_a_keep_of_n_messages_sends_the_last_n_the_current_request_among_them() -> None:
    history = _chat(20)
    policy = _tight(
        1_000_000,
        **_window(
            triggers=[{"kind": "messages", "value": 10}], keep={"kind": "messages", "value": 6}
        ),
    )
    governed = govern(history, policy, model=MODEL)
    assert _conversation(governed.messages) == history[-6:]


def test_a_message_trigger_counts_every_message_sent() -> None:
    policy = _tight(
        1_000_000,
        **_window(
            triggers=[{"kind": "messages", "value": 10}], keep={"kind": "messages", "value": 4}
        ),
    )
    # Eleven messages fire a trigger of ten; ten do not.
    assert len(govern(_chat(5), policy, model=MODEL).messages) < 11
    assert govern(_chat(4)[:10], policy, model=MODEL).messages == _chat(4)[:10]


def test_a_fraction_trigger_fires_on_the_whole_context() -> None:
    # The system prompt alone takes most of the trigger's share of the window: counted, it
    # makes a short conversation fire.
    history = _chat(6)
    history[0] = user("question 0", system=words(3_000, "rule"))
    policy = _tight(
        10_000,
        **_window(
            keep_head=True,
            triggers=[{"kind": "fraction", "value": 0.3}],
            keep={"kind": "messages", "value": 4},
        ),
    )
    conversation = count_tokens(history[1:], model=MODEL)
    assert conversation < 3_000 < count_tokens(history, model=MODEL)
    governed = govern(history, policy, model=MODEL)
    assert "window" in [step.step for step in governed.report.steps]
    assert governed.messages[0] is history[0]  # the system prompt stays
    assert _conversation(governed.messages)[-4:] == history[-4:]


def test_a_token_keep_counts_the_current_request() -> None:
    history = _chat(10)
    history[-1] = user(words(150, "now"))
    keep = count_tokens(history[-3:], model=MODEL)
    policy = _tight(
        1_000_000,
        **_window(
            triggers=[{"kind": "messages", "value": 10}], keep={"kind": "tokens", "value": keep}
        ),
    )
    governed = govern(history, policy, model=MODEL)
    assert _conversation(governed.messages) == history[-3:]


def test_a_window_without_a_notice_sends_the_kept_messages_alone() -> None:
    policy = _tight(
        1_000_000,
        **_window(
            triggers=[{"kind": "messages", "value": 10}],
            keep={"kind": "messages", "value": 6},
            notice=None,
        ),
    )
    governed = govern(_chat(20), policy, model=MODEL)
    assert governed.messages == _chat(20)[-6:]
    assert [s.detail for s in governed.report.steps if s.step == "window"] == [
        "35 messages omitted"
    ]
    assert govern(governed.messages, policy, model=MODEL).messages == governed.messages


def test_a_governor_without_a_notice_keeps_what_it_sent_between_cuts() -> None:
    policy = _tight(
        1_000_000,
        **_window(
            triggers=[{"kind": "messages", "value": 20}],
            keep={"kind": "messages", "value": 8},
            notice=None,
        ),
    )
    governor = Governor(policy, model=MODEL)
    history = _chat(3)
    previous = governor.govern(history).messages
    cuts = 0
    for turn in range(25):
        history += [reply(f"answer {turn}"), user(f"question {turn}")]
        sent = governor.govern(history).messages
        assert len(sent) <= 20
        if sent[: len(previous)] != previous:
            cuts += 1
            assert sent == history[-8:]
        else:
            assert sent == previous + history[-2:]
        previous = sent
    # 8 kept, a cut past 20 sent, 2 messages a turn: a cut every 7 turns.
    assert cuts == 3


def test_a_head_of_n_messages_keeps_the_first_n_besides_the_kept_tail() -> None:
    history = _chat(20)
    policy = _tight(
        1_000_000,
        **_window(
            keep_head=True,
            head={"kind": "messages", "value": 4},
            triggers=[{"kind": "messages", "value": 12}],
            keep={"kind": "messages", "value": 6},
        ),
    )
    governed = govern(history, policy, model=MODEL)
    assert governed.messages[:4] == history[:4]
    assert _conversation(governed.messages) == history[:4] + history[-6:]


def test_a_head_in_tokens_keeps_the_leading_messages_that_fit() -> None:
    history = _chat(20)
    history[1] = reply(words(200, "plan"))
    fits = count_tokens(history[:3], model=MODEL)  # the first run is two of them
    policy = _tight(
        1_000_000,
        **_window(
            keep_head=True,
            head={"kind": "tokens", "value": fits + 5},
            triggers=[{"kind": "messages", "value": 12}],
            keep={"kind": "messages", "value": 6},
        ),
    )
    governed = govern(history, policy, model=MODEL)
    assert _conversation(governed.messages) == history[:3] + history[-6:]


def test_a_head_cut_between_a_call_and_its_result_keeps_the_result() -> None:
    history: list[ModelMessage] = [
        user("start"),
        tool_call("read_file", id="h1", path="PLAN.md"),
        tool_result("read_file", "the plan", id="h1"),
        reply("read it"),
    ]
    history += _chat(20)[1:]
    policy = _tight(
        1_000_000,
        **_window(
            keep_head=True,
            head={"kind": "messages", "value": 2},
            triggers=[{"kind": "messages", "value": 12}],
            keep={"kind": "messages", "value": 6},
        ),
    )
    governed = govern(history, policy, model=MODEL)
    assert _conversation(governed.messages) == history[:3] + history[-6:]


def test_keeping_no_result_masks_every_older_one_but_what_the_model_just_asked_for() -> None:
    # Anthropic's clear_tool_uses with keep 0: every older result is cleared, the calls stay.
    history: list[ModelMessage] = [user("look at both files")]
    for n in range(3):
        history += [
            tool_call("read_file", id=f"c{n}", path=f"f{n}.py"),
            tool_result("read_file", words(300, f"file{n}"), id=f"c{n}"),
        ]
    policy = _tight(1_000_000, **_off(masking={"keep_first": 0, "keep_last": 0, "apply": "always"}))
    governed = govern(history, policy, model=MODEL)
    contents = [m.parts[0].content for m in governed.messages[2::2]]  # type: ignore[union-attr]
    assert [c.startswith("[result masked") for c in contents] == [True, True, False]
    # Once the model answered, the newest results are older too.
    history += [reply("both read"), user("thanks")]
    governed = govern(history, policy, model=MODEL)
    contents = [m.parts[0].content for m in governed.messages[2:7:2]]  # type: ignore[union-attr]
    assert all(c.startswith("[result masked") for c in contents)
