"""An external agent's tool definitions through the API: given when a session is made or
changed, counted into what its requests carry (``/context``'s report), and sent with a
stateless ``/govern`` for that call alone."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from ctxhub.governance import tool_definition_tokens
from ctxhub.governance.tokens import tokenizer_for
from sessions import services
from sessions.api.keys import create_key
from sessions.models import AgentSession, Message
from sessions.payloads import message_to_payload
from sessions.services.tools import canonical
from tests.governed.builders import turn
from tests.messages import agent_turns

pytestmark = pytest.mark.django_db


def schema(words: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "where " * words}},
        "required": ["path"],
    }


READ = {"name": "read_log", "description": "Read a job's log.", "parameters": schema(4_500)}
DEPLOY = {"name": "deploy", "description": "Deploy a build.", "parameters": schema(500)}


def tokens_of(*tools: dict[str, Any], model: str = "openai:gpt-4o") -> int:
    return tool_definition_tokens(list(tools), tokenizer_for(model))


class Api:
    def __init__(self, key: str) -> None:
        self.client = Client()
        self.auth = {"Authorization": f"Bearer {key}"}

    def call(self, method: str, path: str, body: Any = None) -> Any:
        if method == "get":
            return self.client.get(f"/api/v1{path}", headers=self.auth)
        return getattr(self.client, method)(
            f"/api/v1{path}", json.dumps(body), content_type="application/json", headers=self.auth
        )


@pytest.fixture
def api(alice: Any) -> Api:
    return Api(create_key(alice, name="agent", scopes=["read", "write", "govern"])[1])


def made(api: Api, **body: Any) -> dict[str, Any]:
    answer = api.call("post", "/sessions", {"title": "Nightly", "model": "openai:gpt-4o", **body})
    assert answer.status_code == 201, answer.content
    found: dict[str, Any] = answer.json()
    return found


def test_tools_given_to_a_session_are_in_its_context_and_shrink_the_budget(api: Api) -> None:
    window = {"context_window": 16_000}
    tooled = made(api, policy=window, tools=[READ, DEPLOY])
    bare = made(api, policy=window)
    assert [(t["name"], t["tokens"]) for t in tooled["tools"]] == [
        ("read_log", tokens_of(READ)),
        ("deploy", tokens_of(DEPLOY)),
    ]
    assert tooled["tool_tokens"] == tokens_of(READ, DEPLOY) > 4_500
    assert tooled["tools"][0]["parameters"] == READ["parameters"]
    assert (bare["tools"], bare["tool_tokens"]) == ([], 0)

    history = [message for n in range(8) for message in turn(n)]
    for session in (tooled, bare):
        stored = AgentSession.objects.get(pk=session["id"])
        services.append_messages(stored, history, auto_compact=False)
    with_tools = api.call("get", f"/sessions/{tooled['id']}/context").json()["report"]
    without = api.call("get", f"/sessions/{bare['id']}/context").json()["report"]
    assert with_tools["tool_definition_tokens"] == tokens_of(READ, DEPLOY)
    assert without["tool_definition_tokens"] == 0
    assert with_tools["budget_tokens"] == without["budget_tokens"] - tokens_of(READ, DEPLOY)
    assert with_tools["tokens_after"] < without["tokens_after"]  # governed down to the room left
    assert with_tools["fits"]


def test_tools_are_changed_recounted_and_cleared_by_patch(api: Api) -> None:
    session = made(api, tools=[READ])
    path = f"/sessions/{session['id']}"
    services.append_messages(
        AgentSession.objects.get(pk=session["id"]),
        agent_turns(2, 1, "row\n" * 20, "Fix OPS-2"),
        auto_compact=False,
    )

    def context_tools() -> int:
        tokens: int = api.call("get", f"{path}/context").json()["report"]["tool_definition_tokens"]
        return tokens

    assert context_tools() == tokens_of(READ)
    patched = api.call("patch", path, {"tools": [READ, DEPLOY]})
    assert patched.status_code == 200, patched.content
    assert [t["name"] for t in patched.json()["tools"]] == ["read_log", "deploy"]
    assert context_tools() == tokens_of(READ, DEPLOY)

    # Left out or null: unchanged. A new model counts them with its tokenizer.
    assert api.call("patch", path, {"title": "Renamed", "tools": None}).status_code == 200
    assert api.call("get", path).json()["tool_tokens"] == tokens_of(READ, DEPLOY)
    other = "openai:gpt-4-turbo"
    moved = api.call("patch", path, {"model": other}).json()
    stored = AgentSession.objects.get(pk=session["id"])
    assert stored.tool_encoding == "cl100k_base"
    # Counted from the stored JSON, whose keys PostgreSQL keeps in an order of its own.
    recounted = tokens_of(*canonical(stored.tool_definitions), model=other)
    assert abs(recounted - tokens_of(READ, DEPLOY, model=other)) < 10
    assert moved["tool_tokens"] == recounted
    assert context_tools() == recounted

    cleared = api.call("patch", path, {"tools": []}).json()
    assert (cleared["tools"], cleared["tool_tokens"]) == ([], 0)
    assert context_tools() == 0


def test_govern_counts_the_tools_sent_with_the_call(api: Api) -> None:
    history = [message_to_payload(m) for m in agent_turns(6, 2, "row\n" * 600, "Fix OPS-3")]
    body = {"messages": history, "model": "openai:gpt-4o", "policy": {"context_window": 16_000}}
    bare = api.call("post", "/govern", body).json()["report"]
    answer = api.call("post", "/govern", {**body, "tools": [READ, DEPLOY]})
    assert answer.status_code == 200, answer.content
    report = answer.json()["report"]
    assert report["tool_definition_tokens"] == tokens_of(READ, DEPLOY)
    assert report["budget_tokens"] == bare["budget_tokens"] - tokens_of(READ, DEPLOY)
    assert report["fits"]
    assert not Message.objects.exists()
    assert not AgentSession.objects.exists()


def test_the_schema_shows_the_tools(client: Client) -> None:
    schemas = client.get("/api/v1/openapi.json").json()["components"]["schemas"]
    for name in ("SessionIn", "SessionPatch", "GovernIn"):
        assert "tools" in schemas[name]["properties"], name
    assert set(schemas["ToolIn"]["properties"]) == {"name", "description", "parameters"}
    assert schemas["ToolIn"]["required"] == ["name"]
    assert {"tools", "tool_tokens"} <= set(schemas["SessionOut"]["properties"])
