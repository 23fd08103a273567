"""``POST /api/v1/sessions/{id}/fork``: scopes, isolation, bad input named by its field, the
answer a new session, a retry with its key forking once; and the client's ``fork`` against a
real server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from ctxhub.client import AsyncHub, Hub, HubError
from sessions import services
from sessions.api.keys import create_key
from sessions.models import AgentSession, Message, Pin
from tests.api.test_contract import Api, error
from tests.conftest import ARTIFACTS
from tests.factories import make_session
from tests.messages import agent_turns, reply, user
from tests.processes import asgi_server

ALL = ["read", "write", "govern"]


@pytest.fixture
def api(alice: Any) -> Api:
    return Api(create_key(alice, name="agent", scopes=ALL)[1])


@pytest.fixture
def source(alice: Any) -> AgentSession:
    session = make_session(alice, title="Pushed", model="openai:gpt-4o")
    services.append_messages(
        session, [user("one"), reply("two"), user("three"), reply("four")], auto_compact=False
    )
    services.pin(session, 1)
    return session


@pytest.mark.django_db
def test_a_fork_is_a_new_session_of_the_key_owner(
    api: Api, source: AgentSession, alice: Any
) -> None:
    response = api.call("post", f"/sessions/{source.pk}/fork", {"seq": 2})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["title"] == "Pushed (fork at #2)"
    assert (body["model"], body["messages"]) == ("openai:gpt-4o", 3)
    fork = AgentSession.objects.get(pk=body["id"])
    assert fork.owner == alice
    assert list(Pin.objects.filter(session=fork).values_list("seq", flat=True)) == [1]
    assert Message.objects.filter(session=source).count() == 4

    other = api.call(
        "post",
        f"/sessions/{source.pk}/fork",
        {
            "seq": 0,
            "title": "Try B",
            "model": "openai:gpt-4o-mini",
            "policy": {"masking": {"keep_last": 3}},
        },
    )
    assert other.status_code == 201, other.content
    assert (other.json()["title"], other.json()["model"], other.json()["policy"]) == (
        "Try B",
        "openai:gpt-4o-mini",
        {"masking": {"keep_last": 3}},
    )


@pytest.mark.django_db
def test_reading_the_source_is_not_enough_to_fork_it(alice: Any, source: AgentSession) -> None:
    reader = Api(create_key(alice, name="reader", scopes=["read"])[1])
    assert reader.call("get", f"/sessions/{source.pk}").status_code == 200
    response = reader.call("post", f"/sessions/{source.pk}/fork", {"seq": 1})
    assert response.status_code == 403
    assert error(response)["field"] == "scope"
    writer = Api(create_key(alice, name="writer", scopes=["write"])[1])
    assert writer.call("post", f"/sessions/{source.pk}/fork", {"seq": 1}).status_code == 403
    assert AgentSession.objects.count() == 1


@pytest.mark.django_db
def test_another_users_session_is_a_404(bob: Any, source: AgentSession) -> None:
    bob_api = Api(create_key(bob, name="bob", scopes=ALL)[1])
    response = bob_api.call("post", f"/sessions/{source.pk}/fork", {"seq": 1})
    assert response.status_code == 404
    assert error(response)["code"] == "not_found"
    assert AgentSession.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"seq": 4}, "seq"),  # past the last message
        ({"seq": -1}, "seq"),
        ({"seq": 2**40}, "seq"),
        ({"seq": "2"}, "seq"),
        ({"seq": 1.5}, "seq"),
        ({"seq": True}, "seq"),
        ({}, "seq"),
        ({"seq": 1, "title": ""}, "title"),
        ({"seq": 1, "model": ""}, "model"),
        ({"seq": 1, "policy": {"masking": {"keep_last": "many"}}}, "policy.masking.keep_last"),
        ({"seq": 1, "policy": {"reserved_output_tokens": 127_000}}, "policy"),
    ],
)
def test_bad_input_is_a_422_naming_its_field(
    api: Api, source: AgentSession, body: dict[str, Any], field: str
) -> None:
    response = api.call("post", f"/sessions/{source.pk}/fork", body)
    assert response.status_code == 422, response.content
    assert error(response)["field"] == field
    assert AgentSession.objects.count() == 1


@pytest.mark.django_db
def test_a_retry_with_the_same_key_forks_once(api: Api, source: AgentSession) -> None:
    headers = {"Idempotency-Key": "fork-1"}
    first = api.call("post", f"/sessions/{source.pk}/fork", {"seq": 2}, headers)
    again = api.call("post", f"/sessions/{source.pk}/fork", {"seq": 2}, headers)
    assert (first.status_code, again.status_code) == (201, 201)
    assert first.json() == again.json()
    assert AgentSession.objects.count() == 2


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[str]:
    with asgi_server(ARTIFACTS / "logs" / "web-api.log") as url:
        yield url


@pytest.mark.django_db(transaction=True)
def test_the_client_forks_and_the_fork_goes_its_own_way(server: str, alice: Any) -> None:
    key = create_key(alice, name="client", scopes=ALL)[1]
    history = agent_turns(3, 2, "row\n" * 40, "Deploy db-west-3")
    with Hub(server, key) as hub:
        made = hub.create_session(
            "Deploy", model="openai:gpt-4o", policy={"masking": {"keep_last": 6}}
        )
        hub.append(made.id, history)
        fork = hub.fork(made.id, 5)
        assert fork.id != made.id
        assert (fork.title, fork.messages, fork.policy) == (
            "Deploy (fork at #5)",
            6,
            {"masking": {"keep_last": 6}},
        )
        assert [m.message for m in hub.messages(fork.id)] == history[:6]
        hub.append(fork.id, [user("Roll back instead")], expected_seq=6)
        assert hub.session(made.id).messages == len(history)
        with pytest.raises(HubError) as refused:
            hub.fork(made.id, len(history))
        assert (refused.value.status, refused.value.field) == (422, "seq")

    async def fork_async() -> Any:
        async with AsyncHub(server, key) as hub:
            return await hub.fork(made.id, 0, title="From the start", model="openai:gpt-4o-mini")

    other = asyncio.run(fork_async())
    assert (other.title, other.model, other.messages) == ("From the start", "openai:gpt-4o-mini", 1)
    assert AgentSession.objects.filter(owner=alice).count() == 3


@pytest.mark.django_db
def test_the_schema_lists_the_fork(api: Api) -> None:
    schema = api.call("get", "/openapi.json").json()
    operation = schema["paths"]["/api/v1/sessions/{session_id}/fork"]["post"]
    assert {"201", "404", "422"} <= set(operation["responses"])
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    fields = schema["components"]["schemas"][body["$ref"].rpartition("/")[2]]
    assert fields["required"] == ["seq"]
    assert set(fields["properties"]) == {"seq", "title", "model", "policy"}
