"""``/clear`` through the service: the system prompt, the latest instructions and the pins stay,
the conversation goes, and undo gives the earlier view back. Every context is checked against a
cold ``govern`` of the effective history built naively (tests/governed/oracle.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    SystemPromptPart,
    ToolReturnPart,
    UserPromptPart,
)

from ctxhub.governance.tokens import instructions_of, tokenizer_for
from sessions import services
from sessions.history import REMEMBERED, effective_history, effective_tokens, kept_parts
from sessions.models import Message
from tests.factories import make_session
from tests.governed.builders import SMALL_POLICY, agentic_session, turn
from tests.governed.oracle import dump, naive_governed, naive_history
from tests.messages import T0, agent_turns, reply, user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.smoke]

SYSTEM = "You are a careful engineer."  # the system prompt of turn(0)


def request(text: str, *, system: str | None = None, instructions: str | None = None) -> Any:
    """A request as an agent run sends it: its system prompt first, if any, and instructions."""
    parts: list[Any] = [SystemPromptPart(system, timestamp=T0)] if system else []
    return ModelRequest(
        parts=[*parts, UserPromptPart(text, timestamp=T0)], instructions=instructions
    )


def system_texts(messages: list[ModelMessage]) -> list[str]:
    return [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, SystemPromptPart)
    ]


def assert_matches_cold_govern(session: Any) -> Any:
    """The context (this process's carried work, then a fresh process's) equals a cold govern
    of the naive effective history; the context is returned."""
    session.refresh_from_db()
    cold = naive_governed(session, services.session_policy(session))
    for fresh in (False, True):
        if fresh:
            REMEMBERED.clear()
        context = services.governed_context(session)
        assert dump(context.messages) == dump(cold.messages), fresh
        assert context.report.model_dump() == cold.report.model_dump(), fresh
    REMEMBERED.clear()
    assert effective_tokens(session) == effective_history(session).tokens
    return context


def test_a_clear_keeps_the_system_prompt_and_drops_the_conversation(alice: Any) -> None:
    session = agentic_session(alice, turns=6)
    before = len(naive_history(session)[0])

    cleared = services.clear(session)

    context = assert_matches_cold_govern(session)
    assert len(context.messages) == 1
    first = context.messages[0]
    assert isinstance(first, ModelRequest)
    assert [type(p) for p in first.parts] == [SystemPromptPart]
    assert system_texts([first]) == [SYSTEM]
    assert context.report.system_tokens > 0
    assert cleared.system_prompt
    assert not cleared.instructions
    assert cleared.kept_tokens == context.report.system_tokens
    assert cleared.dropped == before == 24
    assert cleared.summary() == (
        f"kept the system prompt ({cleared.kept_tokens:,} tokens); dropped 24 messages"
    )
    # The conversation is gone: no user prompt, tool call or answer is sent.
    assert SYSTEM in str(dump(context.messages))
    assert "Task 0" not in str(dump(context.messages))


def test_a_clear_keeps_the_latest_instructions_until_a_request_carries_its_own(
    alice: Any,
) -> None:
    session = make_session(alice, policy=SMALL_POLICY)
    services.append_messages(
        session,
        [
            request("first", instructions="Answer in French."),
            reply("D'accord."),
            request("second", instructions="Answer in English."),
            reply("Sure."),
        ],
    )

    cleared = services.clear(session)

    context = assert_matches_cold_govern(session)
    assert instructions_of(context.messages) == "Answer in English."
    assert context.report.system_tokens > 0
    assert system_texts(context.messages) == []
    assert cleared.instructions
    assert not cleared.system_prompt
    assert cleared.kept_tokens == tokenizer_for(session.model).count("Answer in English.")
    assert cleared.summary().startswith(f"kept the instructions ({cleared.kept_tokens:,} tokens)")
    # An agent that sends none of its own still has them sent...
    services.append_messages(session, [request("third"), reply("Done.")])
    context = assert_matches_cold_govern(session)
    assert instructions_of(context.messages) == "Answer in English."
    # ...and one that does has its own, the kept copy gone (warm and cold alike).
    services.governed_context(session)
    services.append_messages(session, [request("fourth", instructions="Answer briefly.")])
    context = assert_matches_cold_govern(session)
    assert instructions_of(context.messages) == "Answer briefly."
    assert len(context.messages) == 3


def test_undo_of_a_clear_restores_the_earlier_view_exactly(alice: Any) -> None:
    session = agentic_session(alice, turns=8)
    services.append_messages(session, [request("go on", instructions="Be terse."), reply("ok")])
    history = dump(naive_history(session)[0])
    context = services.governed_context(session)
    sent, report = dump(context.messages), context.report.model_dump()

    cleared = services.clear(session)
    assert dump(naive_history(session)[0]) != history
    services.undo_clear(session, cleared.record.pk)

    assert dump(naive_history(session)[0]) == history
    after = assert_matches_cold_govern(session)
    assert dump(after.messages) == sent
    assert after.report.model_dump() == report


def test_a_system_prompt_sent_again_after_the_clear_is_not_sent_twice(alice: Any) -> None:
    session = agentic_session(alice, turns=4)
    services.clear(session)
    # This process holds the history as it was right after the clear: the append extends it.
    assert system_texts(services.governed_context(session).messages) == [SYSTEM]

    # An agent's next run sends its system prompt again, in its first request.
    services.append_messages(session, [request("Task 9", system=SYSTEM), reply("On it.")])
    context = assert_matches_cold_govern(session)
    assert system_texts(context.messages) == [SYSTEM]
    # The agent's own copy, where it sent it; the kept one is gone.
    assert naive_history(session)[1] == [16, 17]

    # Another system prompt is the agent's own: the kept one stays beside it.
    services.clear(session)
    services.governed_context(session)
    services.append_messages(session, [request("Task 10", system="You review code."), reply("Ok")])
    context = assert_matches_cold_govern(session)
    assert system_texts(context.messages) == [SYSTEM, "You review code."]


def test_a_clear_on_a_log_without_system_prompt_or_instructions_keeps_nothing_extra(
    alice: Any,
) -> None:
    session = make_session(alice, policy=SMALL_POLICY)
    services.append_messages(session, agent_turns(3, 2, "line\n" * 50))

    cleared = services.clear(session)

    context = assert_matches_cold_govern(session)
    assert context.messages == []
    assert context.report.system_tokens == 0
    assert (cleared.system_prompt, cleared.instructions, cleared.kept_tokens) == (False, False, 0)
    assert cleared.summary() == (
        "kept no system prompt or instructions (there were none to keep); dropped 18 messages"
    )
    services.append_messages(session, [user("fresh start"), reply("hello")])
    assert naive_history(session)[1] == [18, 19]
    assert_matches_cold_govern(session)


def test_pinned_messages_survive_a_clear_verbatim_after_the_system_prompt(alice: Any) -> None:
    session = agentic_session(alice, turns=5)  # turn n: its request at 4n, calls, results, answer
    for seq in (4, 9, 10, 13):  # turn 1's request, turn 2's calls and results, turn 3's calls
        services.pin(session, seq)

    cleared = services.clear(session)

    # A tool call stays with its results; alone, turn 3's calls could not be sent as they are.
    assert cleared.pinned == 3
    assert cleared.dropped == 17
    assert " and 3 pinned messages; dropped 17 messages" in cleared.summary()
    history, seqs = naive_history(session)
    assert seqs == [None, 4, 9, 10]
    assert system_texts(history) == [SYSTEM]
    context = assert_matches_cold_govern(session)
    stored = Message.objects.filter(session=session, seq__in=[4, 9, 10]).order_by("seq")
    assert dump(context.messages[1:]) == [m.payload for m in stored]
    # Unpinned, a message before the clear is cleared like the rest; it cannot be pinned back.
    services.unpin(session, 4)
    assert naive_history(session)[1] == [None, 9, 10]
    with pytest.raises(services.Invalid):
        services.pin(session, 4)
    assert_matches_cold_govern(session)


def test_a_second_clear_keeps_what_the_first_kept(alice: Any) -> None:
    session = agentic_session(alice, turns=2)
    services.clear(session)
    services.append_messages(session, turn(5))
    with_first = dump(services.governed_context(session).messages[:1])

    services.clear(session)

    context = assert_matches_cold_govern(session)
    assert dump(context.messages) == [
        {**with_first[0], "metadata": dump(context.messages)[0]["metadata"]}
    ]
    with pytest.raises(services.Conflict, match="nothing to clear"):
        services.clear(session)


def test_a_compaction_after_a_clear_keeps_what_the_clear_kept(alice: Any) -> None:
    session = agentic_session(alice, turns=3)
    services.clear(session)
    services.append_messages(session, [m for n in range(10, 20) for m in turn(n)])
    job = services.request_compaction(session).job
    job.refresh_from_db()
    assert job.status == "done", job.error

    context = assert_matches_cold_govern(session)
    assert system_texts(context.messages)[:1] == [SYSTEM]
    assert naive_history(session)[1][0] is None


def test_a_compaction_may_begin_right_after_what_a_clear_kept(alice: Any) -> None:
    # Cleared while a tool call waited for its results: they come after the clear, answer no
    # call the model sees, and pair repair drops them, so the compaction begins right there.
    session = agentic_session(alice, turns=3, window={"keep_head": False})
    services.append_messages(session, turn(5, dangling=True))
    services.clear(session)
    results = [ToolReturnPart("read_file", "x" * 400, tool_call_id=f"c5_{i}") for i in range(2)]
    services.append_messages(session, [ModelRequest(parts=results)])
    services.append_messages(session, [m for n in range(10, 20) for m in turn(n)])
    job = services.request_compaction(session).job
    job.refresh_from_db()
    assert job.status == "done", job.error

    context = assert_matches_cold_govern(session)
    assert naive_history(session)[1][0] is None
    assert system_texts(context.messages)[:1] == [SYSTEM]


# --- which system prompt parts a clear keeps (no database) --------------------------------------


def part(content: str, **kw: Any) -> dict[str, Any]:
    return {"part_kind": "system-prompt", "content": content, **kw}


def test_several_system_prompts_are_kept_once_each_in_order() -> None:
    before = [
        part("You are a careful engineer."),
        {"part_kind": "user-prompt", "content": "hi"},
        part("Today is Monday.", dynamic_ref="today"),
        part("Remaining budget: 10.", scope="request"),  # seen in its own request only
        part("You are a careful engineer."),  # the same text again
        part("Today is Tuesday.", dynamic_ref="today"),  # the prompt's latest value
        part("Repo: ctxhub", context_id="system_prompt:repo"),
        part("", context_id="system_prompt:repo"),  # withdrawn
    ]
    assert [p["content"] for p in kept_parts(before)] == [
        "You are a careful engineer.",
        "Today is Tuesday.",
    ]


def test_what_the_history_states_again_is_not_kept() -> None:
    before = [part("A"), part("Monday", dynamic_ref="today"), part("B")]
    elsewhere = [part("A"), part("Tuesday", dynamic_ref="today"), part("B", scope="request")]
    # "B" was stated again only for one request: the clear still keeps it.
    assert [p["content"] for p in kept_parts(before, elsewhere)] == ["B"]
