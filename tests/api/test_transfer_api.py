"""Export and import through the API: keys and scopes, the download, a bad file refused naming
its line, and a round trip through the real client against a server process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from pydantic_ai.messages import ModelMessagesTypeAdapter

from ctxhub.client import AsyncHub, Hub, HubError
from sessions import services
from sessions.api.keys import create_key
from sessions.models import AgentSession, Message, Pin
from sessions.services.transfer import export_lines
from tests.conftest import ARTIFACTS
from tests.factories import make_session
from tests.messages import agent_turns, reply, user
from tests.processes import asgi_server

pytestmark = pytest.mark.django_db(transaction=True)

ALL = ["read", "write", "govern"]


def _session(owner: Any) -> AgentSession:
    session = make_session(owner, title="Exported: a run", model="openai:gpt-4o")
    services.append_messages(
        session, agent_turns(3, 2, "row\n" * 40, "Deploy db-west-3"), auto_compact=False
    )
    services.pin(session, 0)
    return session


def _get(key: str | None, path: str) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return Client().get(f"/api/v1{path}", headers=headers)


def _post(key: str | None, body: bytes | str) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return Client().post(
        "/api/v1/sessions/import", data=body, content_type="application/x-ndjson", headers=headers
    )


def test_export_needs_a_read_key_of_the_owner(alice: Any, bob: Any) -> None:
    session = _session(alice)
    path = f"/sessions/{session.pk}/export"
    assert _get(None, path).status_code == 401
    assert _get(create_key(alice, name="w", scopes=["write"])[1], path).status_code == 403
    bobs = _get(create_key(bob, name="b", scopes=ALL)[1], path)
    assert bobs.status_code == 404
    assert bobs.json()["error"]["code"] == "not_found"

    response = _get(create_key(alice, name="r", scopes=["read"])[1], path)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    assert response["Content-Disposition"] == (
        f'attachment; filename="exported-a-run-{str(session.pk)[:8]}.jsonl"'
    )
    lines = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert lines[0]["ctxhub_export"] == 1
    assert [line["seq"] for line in lines if line.get("type") == "message"] == list(
        range(session.messages.count())
    )
    assert [line["seq"] for line in lines if line.get("type") == "pin"] == [0]

    markdown = _get(create_key(alice, name="m", scopes=["read"])[1], f"{path}?format=markdown")
    assert markdown["Content-Type"].startswith("text/markdown")
    assert b"".join(markdown.streaming_content).decode().startswith("# Exported: a run\n")
    bad = _get(create_key(alice, name="x", scopes=["read"])[1], f"{path}?format=pdf")
    assert bad.status_code == 422
    assert bad.json()["error"]["field"] == "format"


def test_import_needs_a_write_key_and_makes_a_session_of_its_owner(alice: Any, bob: Any) -> None:
    text = "".join(export_lines(_session(alice)))
    sessions, messages = AgentSession.objects.count(), Message.objects.count()
    assert _post(None, text).status_code == 401
    read_only = _post(create_key(bob, name="r", scopes=["read"])[1], text)
    assert read_only.status_code == 403
    assert read_only.json()["error"]["field"] == "scope"
    assert (AgentSession.objects.count(), Message.objects.count()) == (sessions, messages)

    response = _post(create_key(bob, name="w", scopes=["write"])[1], text)
    assert response.status_code == 201
    made = AgentSession.objects.get(pk=response.json()["id"])
    assert made.owner == bob
    assert response.json()["messages"] == made.messages.count() == messages
    assert list(Pin.objects.filter(session=made).values_list("seq", flat=True)) == [0]


def test_a_bad_line_is_a_422_naming_it_and_stores_nothing(alice: Any) -> None:
    key = create_key(alice, name="w", scopes=ALL)[1]
    lines = "".join(export_lines(_session(alice))).splitlines()
    bad = json.loads(lines[2])
    bad["message"]["parts"][0]["content"] = "\ud83d"
    sessions, messages = AgentSession.objects.count(), Message.objects.count()
    response = _post(key, "\n".join([*lines[:2], json.dumps(bad), *lines[3:]]))
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["message"].startswith("line 3: message.parts[0].content: contains a lone")
    assert (error["line"], error["field"]) == (3, "message.parts[0].content")
    not_text = _post(key, b"\xff\xfe")
    assert not_text.status_code == 422
    assert not_text.json()["error"]["field"] == "body"
    assert (AgentSession.objects.count(), Message.objects.count()) == (sessions, messages)


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[str]:
    with asgi_server(ARTIFACTS / "logs" / "web-transfer.log") as url:
        yield url


def _governed(session_id: Any) -> tuple[bytes, int]:
    context = services.governed_context(AgentSession.objects.get(pk=session_id))
    return ModelMessagesTypeAdapter.dump_json(context.messages), context.tokens


def test_a_round_trip_through_the_client(server: str, alice: Any) -> None:
    key = create_key(alice, name="client", scopes=ALL)[1]
    with Hub(server, key) as hub:
        made = hub.create_session("Round trip", model="openai:gpt-4o")
        hub.append(made.id, [user("hello"), reply("hi"), *agent_turns(2, 2, "x\n" * 30, "go")])
        text = hub.export_session(made.id)
        markdown = hub.export_session(made.id, format="markdown")
        copy = hub.import_session(text)
        original = hub.session(made.id)
        with pytest.raises(HubError) as refused:
            hub.import_session(text.replace('"ctxhub_export":1', '"ctxhub_export":9'))
    assert markdown.startswith("# Round trip\n")
    assert copy.id != made.id
    assert (copy.title, copy.messages, copy.tokens) == (
        "Round trip (imported)",  # beside the session it was exported from
        original.messages,
        original.tokens,
    )
    assert _governed(copy.id) == _governed(made.id)
    assert (refused.value.status, refused.value.field) == (422, "ctxhub_export")
    assert refused.value.message.startswith("line 1: ctxhub_export: version 9")


async def test_the_async_client_exports_and_imports(server: str, alice: Any) -> None:
    from asgiref.sync import sync_to_async

    key = await sync_to_async(lambda: create_key(alice, name="async", scopes=ALL)[1])()
    async with AsyncHub(server, key) as hub:
        made = await hub.create_session("Async", model="openai:gpt-4o")
        await hub.append(made.id, [user("hello"), reply("hi")])
        copy = await hub.import_session(await hub.export_session(made.id))
    assert (copy.title, copy.messages) == ("Async (imported)", 2)
