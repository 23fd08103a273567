"""A gateway session's page: it says how its requests go upstream, links the sessions it
branched from and into, and its owner switches its mode."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from gateway import chain
from gateway.models import GatewaySession
from gateway.threads import thread
from gateway.wire import anthropic
from sessions.models import AgentSession
from tests.factories import make_session

pytestmark = pytest.mark.django_db


def gateway_session(owner: Any, system: str, *, marker: str = "client-1") -> AgentSession:
    body = {
        "model": "claude-sonnet-4-6",
        "system": system,
        "metadata": {"user_id": marker},
        "messages": [{"role": "user", "content": f"task for {system}"}],
    }
    request = anthropic.parse(json.dumps(body).encode())
    hashes = chain.hashes(request.wire, request.messages)
    return thread(
        owner.pk, request, hashes, provider="anthropic", named=None, asked_mode="observe"
    ).session


def test_the_page_says_the_mode_and_links_parent_and_sub_agents(client: Client, alice: Any) -> None:
    parent = gateway_session(alice, "You are the main agent.")
    child = gateway_session(alice, "You are a search sub-agent.")
    client.force_login(alice)
    page = client.get(parent.get_absolute_url()).content.decode()
    assert 'data-testid="gateway-panel"' in page
    assert "observed: the upstream gets the agent's own request" in page
    assert child.get_absolute_url() in page
    child_page = client.get(child.get_absolute_url()).content.decode()
    assert f'Started beside <a href="{parent.get_absolute_url()}">' in child_page
    assert 'data-testid="gateway-branched"' not in child_page
    plain = make_session(alice, title="not through the gateway")
    assert (
        'data-testid="gateway-panel"' not in client.get(plain.get_absolute_url()).content.decode()
    )


def test_the_owner_switches_the_mode_and_no_one_else_can(
    client: Client, alice: Any, bob: Any
) -> None:
    session = gateway_session(alice, "You are the main agent.")
    url = f"/sessions/{session.pk}/gateway/mode/"
    client.force_login(bob)
    assert client.post(url, {"mode": "govern"}).status_code == 404
    client.force_login(alice)
    assert client.post(url, {"mode": "sideways"}).status_code == 422
    answer = client.post(url, {"mode": "govern"})
    assert answer.status_code == 200
    assert "governed: the upstream gets the Governor's request" in answer.content.decode()
    assert GatewaySession.objects.get(session=session).mode == "govern"
    plain = make_session(alice, title="not through the gateway")
    assert client.post(f"/sessions/{plain.pk}/gateway/mode/", {"mode": "govern"}).status_code == 404


def test_a_prompt_in_the_chat_is_refused_the_agent_owns_the_conversation(
    client: Client, alice: Any
) -> None:
    session = gateway_session(alice, "You are the main agent.")
    client.force_login(alice)
    # The page offers the commands, not a conversation with the hub's own model.
    page = client.get(session.get_absolute_url()).content.decode()
    assert 'data-testid="chat-commands-only"' in page
    assert 'data-testid="chat-model"' not in page
    assert 'placeholder="/compact, /clear, /pin' in page
    plain = client.get(make_session(alice, title="a chat").get_absolute_url()).content.decode()
    assert 'data-testid="chat-model"' in plain
    assert 'data-testid="chat-commands-only"' not in plain
    refused = client.post(f"/sessions/{session.pk}/chat/", {"prompt": "hello"})
    assert refused.status_code == 409
    assert "an agent&#x27;s conversation through the gateway" in refused.content.decode()
    assert session.messages.count() == 2  # the system prompt and the agent's task, nothing more
    note = client.post(f"/sessions/{session.pk}/chat/", {"prompt": "/history"})
    assert note.status_code == 200
