"""The budget note through the API and the client, against a real server process: a policy
that turns it on (the policy JSON), the context the hub sends with it, ``POST /govern`` with
the state sent back, and an external agent whose model receives it through
``RemoteGovernor``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from pydantic_ai import Agent, models
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    SystemPromptPart,
    TextPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxhub.client import AsyncHub, Hub, RemoteGovernor
from ctxhub.governance.facts import is_budget_note
from tests.api.test_client import key, server
from tests.messages import agent_turns, reply, user, words

__all__ = ["key", "server"]  # the fixtures, imported for pytest

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = {"awareness": {"budget_note": True}}


def _note(messages: list[ModelMessage]) -> str:
    (note,) = [m for m in messages if is_budget_note(m)]
    (part,) = note.parts
    assert isinstance(part, SystemPromptPart)
    return part.content


def test_the_context_carries_the_note_its_policy_asks_for(server: str, key: str) -> None:
    with Hub(server, key) as hub:
        session = hub.create_session(
            "Noted", model="openai:gpt-4o", context_window=16_000, policy=NOTE
        )
        assert session.policy["awareness"]["budget_note"] is True
        history = agent_turns(3, 2, words(200), "Fix OPS-1")[:-1]
        hub.append(session.id, history)
        first = hub.context(session.id)
        note = first.report.budget_note
        assert note is not None
        assert note.written
        assert _note(first.messages) == note.text
        assert note.used_tokens == first.report.history_tokens_after
        assert note.budget_tokens == first.report.budget_tokens
        assert note.window_tokens == 16_000
        # The next request, a turn later: the same note, where it was.
        hub.append(session.id, [reply("done"), user("and now the tests")])
        second = hub.context(session.id)
        assert second.report.budget_note is not None
        assert not second.report.budget_note.written
        assert _note(second.messages) == note.text
        # Off again: a new start, and no note.
        hub.update_session(session.id, policy={})
        assert hub.context(session.id).report.budget_note is None
        assert not any(is_budget_note(m) for m in hub.context(session.id).messages)


def test_govern_with_the_state_sent_back_keeps_the_note(server: str, key: str) -> None:
    history = agent_turns(4, 2, words(200), "Fix OPS-1")
    policy = {"context_window": 16_000, **NOTE}

    def govern(messages: list[ModelMessage], state: Any) -> dict[str, Any]:
        body = {
            "messages": json.loads(ModelMessagesTypeAdapter.dump_json(messages)),
            "model": "openai:gpt-4o",
            "policy": policy,
            "state": state,
        }
        headers = {"Authorization": f"Bearer {key}"}
        answer = httpx.post(f"{server}/api/v1/govern", json=body, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    first = govern(history[:3], None)
    second = govern(history[:5], first["state"])
    note = first["report"]["budget_note"]
    assert note["written"]
    assert second["acted"] is None
    assert second["report"]["budget_note"]["text"] == note["text"]
    assert not second["report"]["budget_note"]["written"]
    sent = ModelMessagesTypeAdapter.validate_python(second["messages"])
    assert _note(sent) == note["text"]


async def test_an_external_agents_model_receives_the_note(
    server: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", False)
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart("noted")])

    async with AsyncHub(server, key) as hub:
        session = await hub.create_session(
            "External, noted", model="openai:gpt-4o", context_window=16_000, policy=NOTE
        )
        agent = Agent(FunctionModel(model), capabilities=[RemoteGovernor(hub, session.id)])
        await agent.run("hello")
        await agent.run("and again")
        context = await hub.context(session.id)
    note = context.report.budget_note
    assert note is not None
    texts: list[Any] = [
        [
            p.content
            for m in request
            for p in m.parts
            if isinstance(getattr(p, "content", None), str)
        ]
        for request in seen
    ]
    # Each request carried the hub's note, in system voice (a FunctionModel takes no system
    # prompt mid-conversation, so pydantic-ai tags it into the request it joins).
    for sent in texts:
        assert sum("Context budget" in text for text in sent) == 1
        assert any(text.startswith("<system>Context budget") for text in sent)
