"""The budget note (``Policy.awareness.budget_note``): the model is told its window, the tokens
its history takes and the governor's next action, in a note that keeps the prompt cache: it is
written where the conversation stands when the governor acts and stays there, word for word,
until the next action."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from engine_builders import MODEL, rebuilt
from pydantic_ai import Agent, models
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxhub.governance import (
    ContextGovernor,
    Governed,
    Governor,
    Policy,
    compact,
    count_tokens,
    govern,
)
from ctxhub.governance.budget_note import reserve
from ctxhub.governance.counting import message_tokens
from ctxhub.governance.facts import is_budget_note
from ctxhub.governance.offline import demo_model, demo_toolset
from ctxhub.governance.recovery import shrink_history
from ctxhub.governance.tokens import tokenizer_for
from tests.messages import agent_turns, reply, tool_call, tool_result, user, words


def _policy(**overrides: Any) -> Policy:
    return Policy.model_validate(
        {
            "context_window": 16_000,
            "reserved_output_tokens": 0,
            "awareness": {"budget_note": True},
            **overrides,
        }
    )


def _requests(history: list[ModelMessage]) -> list[list[ModelMessage]]:
    """The history before each model request: it ends with the request the model answers."""
    return [
        history[:end]
        for end in range(1, len(history) + 1)
        if isinstance(history[end - 1], ModelRequest)
    ]


def _notes(governed: Governed) -> list[tuple[int, str]]:
    """Where the request carries a budget note, and its text."""
    found = []
    for at, message in enumerate(governed.messages):
        if is_budget_note(message):
            (part,) = message.parts
            assert isinstance(part, SystemPromptPart)
            found.append((at, part.content))
    return found


def _json(messages: list[ModelMessage]) -> list[bytes]:
    return [ModelMessagesTypeAdapter.dump_json([m]) for m in messages]


SESSION = agent_turns(40, 2, words(300, "w"), "Fix OPS-1")


def test_off_by_default_nothing_is_added() -> None:
    policy = Policy(context_window=16_000, reserved_output_tokens=0)
    governor = Governor(policy, model=MODEL)
    for prefix in _requests(SESSION):
        governed = governor.govern(prefix)
        assert _notes(governed) == []
        assert governed.report.budget_note is None
    assert "note" not in governor.state()["plan"]


def test_the_note_states_the_figures_of_the_request_it_is_written_in() -> None:
    history = [user("Fix OPS-1", system="You are careful."), reply("on it"), user("go on")]
    governed = govern(history, _policy(), model=MODEL)
    report = governed.report
    note = report.budget_note
    assert note is not None
    ((at, text),) = _notes(governed)
    # In front of the request the model answers; the first request stays first.
    assert at == len(governed.messages) - 2
    assert governed.messages[-1] == history[-1]
    assert governed.messages[0] == history[0]
    assert text == note.text
    assert note.written
    # Its figures are the request's, its own tokens counted in the history it states.
    assert note.window_tokens == report.window_tokens == 16_000
    assert note.budget_tokens == report.budget_tokens
    assert note.used_tokens == report.history_tokens_after
    assert note.acts_at_tokens == report.budget_tokens  # high water at 100 % of the budget
    assert note.cuts_to_tokens == int(report.budget_tokens * 0.4)
    assert note.acts == ["mask", "window"]
    assert f"Context window: {16_000:,} tokens" in text
    assert f"history may use {report.budget_tokens:,}" in text
    assert f"History here: {report.history_tokens_after:,} tokens" in text
    assert f"about {note.cuts_to_tokens:,} tokens" in text
    # Counted: in what is sent, as history, and reported as a message governance added.
    assert report.tokens_after == count_tokens(governed.messages, model=MODEL)
    assert sum(m.tokens_after for m in report.messages) == report.tokens_after
    (added,) = [m for m in report.messages if m.index is None]
    assert [p.part_kind for p in added.parts] == ["system-prompt"]
    assert added.tokens_after == note.tokens == _tokens(governed.messages[at])
    # Not a system prompt of the history: the budget is the window's less the real one.
    assert report.system_tokens == governed.report.messages[0].parts[0].tokens_after
    # Its room, held back while planning, is at least what it takes.
    assert note.tokens <= reserve(_policy(), 16_000, tokenizer_for(MODEL))


@pytest.mark.parametrize(
    ("history", "before"),
    [
        # The model answers tool results: the note goes before the call, never between.
        ([user("go"), tool_call("read", id="c1"), tool_result("read", "x", id="c1")], 1),
        # A first request alone: the note follows it (it stays the standing system prompt).
        ([user("go", system="Be brief.")], 1),
        # A history that ends with an answer: after it.
        ([user("go"), reply("done")], 2),
    ],
)
def test_the_note_never_parts_a_call_from_its_result_nor_leads_the_request(
    history: list[ModelMessage], before: int
) -> None:
    governed = govern(history, _policy(), model=MODEL)
    ((at, _),) = _notes(governed)
    assert at == before


def test_between_actions_the_note_is_sent_again_word_for_word_and_the_prefix_is_kept() -> None:
    policy = _policy()
    governor = Governor(policy, model=MODEL)
    previous: list[bytes] | None = None
    texts: list[str] = []
    actions = 0
    for prefix in _requests(SESSION):
        governed = governor.govern(prefix)
        report = governed.report
        note = report.budget_note
        assert note is not None
        ((at, text),) = _notes(governed)
        sent = _json(governed.messages)
        if governed.acted is None:
            # The previous request with the new messages appended, the note where it was.
            assert previous is not None
            assert sent[: len(previous) - 1] == previous[:-1]
            assert text == texts[-1]
            assert not note.written
        else:
            # Written at the action (or the first request) with that request's figures.
            actions += governed.acted != "start"
            assert note.written
            assert note.used_tokens == report.history_tokens_after
            # Where the conversation stands: before the newest exchange.
            assert at >= len(governed.messages) - 3
            if texts:
                assert text != texts[-1]
        assert report.tokens_after == count_tokens(governed.messages, model=MODEL)
        assert report.fits
        # The prefix the Governor reports is exactly the one sent again byte for byte.
        same = 0
        while same < min(len(sent), len(previous or [])) and sent[same] == previous[same]:
            same += 1
        counted = sum(_tokens(m) for m in governed.messages[:same])
        if governed.acted != "start":
            assert governed.prefix_tokens == counted
        texts.append(text)
        previous = sent
    assert actions >= 2
    # Most requests carried the note of an earlier one.
    assert len(set(texts)) <= actions + 1 < len(texts) / 4


def _tokens(message: ModelMessage) -> int:
    return message_tokens(message, tokenizer_for(MODEL))


def test_a_governor_rebuilt_from_its_state_sends_the_same_note() -> None:
    policy = _policy()
    governor = Governor(policy, model=MODEL)
    requests = _requests(SESSION)
    for count, prefix in enumerate(requests):
        twin = rebuilt(governor)
        adopted = Governor(policy, model=MODEL)
        adopted.govern(requests[0])  # another process, which served the session before
        adopted.adopt(json.loads(json.dumps(governor.state())))
        warm = governor.govern(prefix)
        cold = twin.govern(copy.deepcopy(prefix))
        again = adopted.govern(copy.deepcopy(prefix))
        assert _json(warm.messages) == _json(cold.messages) == _json(again.messages), count
        assert warm.report.model_dump() == cold.report.model_dump()
        assert warm.prefix_tokens == cold.prefix_tokens
    plan = governor.state()["plan"]
    assert plan["note"]["used"] > 0


def test_another_budget_writes_the_note_again_without_an_action() -> None:
    policy = _policy()
    governor = Governor(policy, model=MODEL)
    requests = _requests(SESSION)[:6]
    for prefix in requests[:-1]:
        before = governor.govern(prefix)
    tools = [{"name": "search", "description": words(200), "parameters": {"type": "object"}}]
    governed = governor.govern(requests[-1], tool_definitions=tools)
    note = governed.report.budget_note
    assert governed.acted is None
    assert note is not None
    assert note.written
    assert note.budget_tokens == governed.budget_tokens < before.budget_tokens
    # The request keeps what came before the old note, no more.
    ((old_at, _),) = _notes(before)
    assert governed.prefix_tokens == sum(_tokens(m) for m in before.messages[:old_at])
    # And the next request sends it again as it is.
    nxt = governor.govern([*requests[-1], reply("ok"), user("more")], tool_definitions=tools)
    assert nxt.acted is None
    assert _notes(nxt)[0][1] == _notes(governed)[0][1]
    assert not nxt.report.budget_note.written  # type: ignore[union-attr]


def test_with_hysteresis_off_every_request_states_its_own_figures() -> None:
    policy = _policy(hysteresis={"enabled": False})
    governor = Governor(policy, model=MODEL)
    for prefix in _requests(SESSION)[::10]:
        governed = governor.govern(prefix)
        note = governed.report.budget_note
        assert note is not None
        assert note.written
        assert note.used_tokens == governed.report.history_tokens_after
        assert note.cuts_to_tokens is None
        assert "until it fits" in note.text


def test_the_note_never_takes_the_request_past_its_budget() -> None:
    history = agent_turns(12, 3, words(900, "z"), "Fix OPS-1")
    for window in (6_000, 9_000, 20_000):
        plain = govern(history, Policy(context_window=window, reserved_output_tokens=0))
        policy = Policy(
            context_window=window, reserved_output_tokens=0, awareness={"budget_note": True}
        )
        noted = govern(history, policy, model=MODEL)
        assert noted.report.budget_note is not None
        assert plain.fits
        assert noted.fits
        assert noted.tokens_after - noted.system_tokens <= noted.budget_tokens


def test_a_window_too_small_for_the_note_sends_none() -> None:
    policy = Policy(context_window=900, reserved_output_tokens=0, awareness={"budget_note": True})
    governed = govern([user("go"), reply("ok"), user("again")], policy, model=MODEL)
    assert _notes(governed) == []
    assert governed.report.budget_note is None


def test_a_governed_request_governed_again_keeps_its_one_note() -> None:
    policy = _policy(context_window=8_000)
    governed = govern(SESSION, policy, model=MODEL)
    ((_, text),) = _notes(governed)
    again = govern(governed.messages, policy, model=MODEL)
    assert again.messages == governed.messages
    # Overflow recovery shrinks the governed request: its note stays, no second one.
    shrunk = shrink_history(governed.messages, 1_500, policy=policy, model=MODEL)
    kept = [m.parts[0] for m in shrunk.messages if is_budget_note(m)]
    assert [getattr(part, "content", None) for part in kept] == [text]


class _Recorder:
    """A FunctionModel body that reads a large output ``iterations`` times, then answers; it
    keeps every request it receives."""

    def __init__(self, iterations: int) -> None:
        self.iterations = iterations
        self.seen: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        done = len(self.seen)
        if done <= self.iterations:
            return ModelResponse(parts=[ToolCallPart("dump", {"n": done}, tool_call_id=f"d{done}")])
        return ModelResponse(parts=[TextPart("finished")])


async def test_the_model_of_an_agent_run_receives_the_note(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", False)
    recorder = _Recorder(iterations=12)
    results: list[Governed] = []
    governor = ContextGovernor(
        Policy(
            context_window=12_000,
            reserved_output_tokens=500,
            eviction={"threshold_tokens": None},
            awareness={"budget_note": True},
        ),
        tokenizer_model=MODEL,
        on_governed=results.append,
    )
    agent = Agent(FunctionModel(recorder), capabilities=[governor])

    @agent.tool_plain
    def dump(n: int) -> str:
        """Return a large output."""
        return words(1500, f"chunk{n}")

    result = await agent.run("investigate", instructions="Be thorough.")
    assert result.output == "finished"
    assert len(recorder.seen) == len(results) == 13
    texts = []
    for sent, governed in zip(recorder.seen, results, strict=True):
        note = governed.report.budget_note
        assert note is not None
        assert note.window_tokens == 12_000
        # What the model received carries the note, once: pydantic-ai sends a system prompt
        # in the middle of a conversation as it stands there (to a model that takes none
        # there, as ``<system>``-tagged text in the request it joins).
        texts_sent = [
            p.content for m in sent for p in m.parts if isinstance(getattr(p, "content", None), str)
        ]
        assert sum(note.text in text for text in texts_sent) == 1
        assert f"<system>{note.text}</system>" in texts_sent
        if governed.acted is None:
            assert note.text == texts[-1]
        else:
            assert note.used_tokens == governed.report.history_tokens_after
        texts.append(note.text)
    assert any(g.acted in ("high_water", "over_budget") for g in results)
    assert len(set(texts)) < len(texts)
    # The run's own history holds no note: it is part of the request, not of the history.
    assert not any(is_budget_note(m) for m in result.all_messages())


async def test_the_offline_demo_model_reads_the_note_as_no_prompt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The note reaches a function model as <system>-tagged user text, joined to a request of
    # tool results after an action: taken for the prompt, the demo model planned again after
    # every action and never answered.
    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", False)
    policy = Policy(context_window=16_000, reserved_output_tokens=1_000)
    governor = ContextGovernor(policy.model_copy(update={"awareness": _policy().awareness}))
    agent = Agent(demo_model(), toolsets=[demo_toolset()], capabilities=[governor])
    history: list[ModelMessage] = []
    prompts = ["read README.md", "read docs/engine.md", "list sessions/api"]
    prompts += ["read docs/governed-session.md", "read docs/dashboard.md", "read docs/api.md"]
    for prompt in prompts:
        result = await agent.run(prompt, message_history=history)
        assert "Here is what I found" in result.output
        assert len(result.new_messages()) <= 6
        history = result.all_messages()


async def test_a_compaction_keeps_no_note_in_the_history_it_makes() -> None:
    # The compacted history is what the window keeps, the summary where it cut: a note there
    # would be stored with the compaction and sent forever after.
    policy = _policy(context_window=8_000)
    compacted = await compact(SESSION, policy, summarizer="offline:extractive", model=MODEL)
    assert compacted.report.outcome == "summarized"
    assert not any(is_budget_note(m) for m in compacted.messages)
    # The next request still carries one, the Governor's own.
    governed = govern(compacted.messages, policy, model=MODEL)
    assert len(_notes(governed)) == 1
