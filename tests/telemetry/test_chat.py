"""A chat turn's spans: the hub's turn, pydantic-ai's run of the agent under it (its model
calls and tools), and under each model call the request the hub governed for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from sessions import telemetry
from sessions.chat import runner
from sessions.models import ChatTurn, SentRequest
from tests.factories import make_session
from tests.tracing import ancestors, named, one, parent_of

pytestmark = pytest.mark.django_db(transaction=True)

PROMPT = "read README.md and list sessions/chat"


@pytest.fixture
async def owner(django_user_model: Any, settings: Any) -> AsyncIterator[Any]:
    settings.CTXHUB_DEMO_PACE_MS = 1
    yield await django_user_model.objects.acreate(username="chatter")
    await sync_to_async(connections.close_all)()


async def run_turn(owner: Any) -> tuple[Any, ChatTurn]:
    session = await sync_to_async(make_session)(owner, title="Chat", model="offline:demo")
    await runner.start_turn(session, owner, PROMPT)
    await asyncio.wait_for(runner.wait_for_turn(session), timeout=30)
    return session, await ChatTurn.objects.aget(session=session)


async def test_the_agents_spans_nest_under_the_turn_and_each_governed_request(
    spans: Any, owner: Any
) -> None:
    session, turn = await run_turn(owner)

    done = spans.get_finished_spans()
    span = one(done, telemetry.CHAT_TURN)
    assert span.parent is None  # a turn outlives the request that started it
    assert span.attributes["ctxhub.turn.id"] == str(turn.pk)
    assert span.attributes["ctxhub.turn.status"] == turn.status == "done"
    assert span.attributes["ctxhub.turn.requests"] == turn.requests == 3
    assert span.attributes["gen_ai.request.model"] == "demo"

    # pydantic-ai's run of the agent, under the turn, for the session's conversation.
    run = one(done, "invoke_agent agent")
    assert parent_of(run, done) is span
    assert run.attributes["gen_ai.conversation.id"] == str(session.pk)
    calls = [s for s in done if s.attributes.get("gen_ai.operation.name") == "chat"]
    tools = [s for s in done if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert len(calls) == 3
    assert [t.attributes["gen_ai.tool.name"] for t in tools] == ["list_files", "read_file"]
    assert all(parent_of(s, done) is run for s in [*calls, *tools])
    # Nothing the user or the tools wrote is in them (the parts' kinds only).
    for call in calls:
        assert "README" not in call.attributes["gen_ai.input.messages"]

    # Each model call carries the request the hub governed and recorded for it.
    sends = named(done, telemetry.CONTEXT_SENT)
    rows = [row async for row in SentRequest.objects.filter(session=session).order_by("number")]
    assert len(sends) == len(rows) == 3
    for send, call, row in zip(sends, calls, rows, strict=True):
        assert parent_of(send, done) is call
        assert ancestors(send, done)[-1] == telemetry.CHAT_TURN
        assert send.attributes["gen_ai.conversation.id"] == str(session.pk)
        assert send.attributes["ctxhub.request.number"] == row.number
        assert send.attributes["gen_ai.usage.input_tokens"] == row.tokens + row.tool_tokens


async def test_prompts_and_answers_go_into_the_spans_only_when_asked(
    spans: Any, owner: Any, settings: Any
) -> None:
    settings.CTXHUB_TRACE_CONTENT = True  # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
    await run_turn(owner)

    first = next(
        s for s in spans.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "chat"
    )
    assert PROMPT in first.attributes["gen_ai.input.messages"]


async def test_without_tracing_the_agent_is_not_instrumented(
    owner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents = []

    def chat_agent(*args: Any) -> Any:
        agents.append(agent := build(*args))
        return agent

    build = runner.chat_agent
    monkeypatch.setattr(runner, "chat_agent", chat_agent)
    _, turn = await run_turn(owner)

    assert turn.status == "done"
    (agent,) = agents
    assert agent.instrument is None
