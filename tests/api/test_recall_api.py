"""``GET /api/v1/sessions/{id}/recall``: what the next request hides, searched; bad input named by
its field; other owners' sessions unseen; and ``RemoteGovernor``'s recall tool against a real
server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxhub.client import AsyncHub, Hub, RemoteGovernor
from sessions import services
from sessions.api.keys import create_key
from sessions.models import AgentSession
from sessions.services.recall import hidden_now
from tests.api.test_contract import Api, error
from tests.conftest import ARTIFACTS
from tests.factories import make_session
from tests.processes import asgi_server
from tests.recall_session import Fact, planted_session, settings_session

ALL = ["read", "write", "govern"]


@pytest.fixture
def api(alice: Any) -> Api:
    return Api(create_key(alice, name="agent", scopes=ALL)[1])


def _planted(owner: Any, facts: int = 120) -> tuple[AgentSession, Fact]:
    session = make_session(owner, model="openai:gpt-4o", policy={"context_window": 32_000})
    history, planted = planted_session(facts)
    services.append_messages(session, history, auto_compact=False)
    found = hidden_now(session)
    fact = next(f for f in planted if f.seq in found.messages or (f.seq, 0) in found.parts)
    return session, fact


@pytest.mark.django_db
def test_recall_answers_with_the_hidden_passage_and_the_tools_text(api: Api, alice: Any) -> None:
    session, fact = _planted(alice)
    response = api.call("get", f"/sessions/{session.pk}/recall?query={quote(fact.query)}&limit=3")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["query"] == fact.query
    assert 1 <= len(body["hits"]) <= 3
    top = body["hits"][0]
    assert fact.value in top["excerpt"]
    assert (top["seq"], top["part"], top["kind"], top["tool_name"]) == (
        fact.seq,
        0,
        "tool output",
        "read_file",
    )
    assert top["fate"] in ("masked", "dropped")
    assert body["text"].startswith(f"{len(body['hits'])} passage")
    assert f"#{fact.seq} tool output of read_file ({top['fate']})" in body["text"]


@pytest.mark.django_db
def test_recall_finds_a_setting_by_the_words_a_model_asks_with(api: Api, alice: Any) -> None:
    session = make_session(alice, model="openai:gpt-4o", policy={"context_window": 16_000})
    history, settings = settings_session(40)
    services.append_messages(session, history, auto_compact=False)
    found = hidden_now(session)
    setting = next(s for s in settings if s.seq in found.messages or (s.seq, 0) in found.parts)
    response = api.call("get", f"/sessions/{session.pk}/recall?query={quote(setting.query)}")
    assert response.status_code == 200, response.content
    hits = response.json()["hits"]
    assert any(setting.value in hit["excerpt"] for hit in hits), (setting.lines(), hits)
    assert setting.value in response.json()["text"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("", "query"),
        ("?!", "query"),
        ("x" * 1_001, "query"),
        ("a&limit=0", "limit"),
        ("a&limit=21", "limit"),
        ("a&limit=many", "limit"),
    ],
)
def test_bad_input_is_a_422_naming_its_field(api: Api, alice: Any, query: str, field: str) -> None:
    session = make_session(alice, model="openai:gpt-4o")
    response = api.call("get", f"/sessions/{session.pk}/recall?query={query}")
    assert response.status_code == 422, response.content
    assert field in error(response)["field"]


@pytest.mark.django_db
def test_a_missing_query_is_named(api: Api, alice: Any) -> None:
    session = make_session(alice, model="openai:gpt-4o")
    response = api.call("get", f"/sessions/{session.pk}/recall")
    assert response.status_code == 422
    assert "query" in error(response)["field"]


@pytest.mark.django_db
def test_another_owners_session_is_not_found_and_a_key_needs_read(
    api: Api, alice: Any, bob: Any
) -> None:
    theirs = make_session(bob, model="openai:gpt-4o")
    assert api.call("get", f"/sessions/{theirs.pk}/recall?query=vault").status_code == 404
    mine = make_session(alice, model="openai:gpt-4o")
    writer = Api(create_key(alice, name="writer", scopes=["write"])[1])
    assert writer.call("get", f"/sessions/{mine.pk}/recall?query=vault").status_code == 403


@pytest.mark.django_db
def test_the_schema_lists_recall(api: Api) -> None:
    schema = api.call("get", "/openapi.json").json()
    operation = schema["paths"]["/api/v1/sessions/{session_id}/recall"]["get"]
    assert {"200", "404", "422"} <= set(operation["responses"])
    params = {p["name"]: p for p in operation["parameters"]}
    assert params["query"]["required"] is True
    assert params["limit"]["schema"]["maximum"] == 20


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[str]:
    with asgi_server(ARTIFACTS / "logs" / "web-recall.log") as url:
        yield url


@pytest.mark.django_db(transaction=True)
def test_an_external_agent_recalls_through_remote_governor(server: str, alice: Any) -> None:
    key = create_key(alice, name="client", scopes=ALL)[1]
    session, fact = _planted(alice)
    with Hub(server, key) as hub:
        recalled = hub.recall(session.pk, fact.query, limit=2)
        assert fact.value in recalled.hits[0].excerpt

    answers: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert "recall" in [tool.name for tool in info.function_tools]
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            answers.append(str(returns[0].content))
            return ModelResponse(parts=[TextPart("found it")])
        return ModelResponse(parts=[ToolCallPart("recall", {"query": fact.query, "limit": 2})])

    async def run() -> None:
        async with AsyncHub(server, key) as hub:
            agent = Agent(FunctionModel(respond), capabilities=[RemoteGovernor(hub, session.pk)])
            await agent.run(f"What is the {fact.attribute} of project {fact.entity}?")

    asyncio.run(run())
    assert len(answers) == 1
    assert fact.value in answers[0]
    assert f"#{fact.seq} tool output of read_file" in answers[0]
