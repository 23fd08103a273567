"""The chat's views: who may chat, what a refusal says, a new chat from the fleet."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import AsyncClient, Client

from sessions import services
from sessions.chat import runner, turns
from sessions.models import AgentSession, ChatTurn, Message, TurnStatus
from tests.factories import make_session
from tests.messages import agent_turns

pytestmark = pytest.mark.django_db


def send_url(session: Any) -> str:
    return f"/sessions/{session.pk}/chat/"


@pytest.fixture
def chat(alice: Any) -> Any:
    return make_session(alice, title="Chat", model="offline:demo")


@pytest.fixture
def staff(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("carol", password="carol-pw", is_staff=True)


@pytest.fixture
async def owner_client(alice: Any) -> AsyncIterator[AsyncClient]:
    client = AsyncClient()
    await client.aforce_login(alice)
    yield client
    await sync_to_async(connections.close_all)()


@pytest.mark.django_db(transaction=True)
async def test_a_prompt_is_accepted_and_answered(owner_client: AsyncClient, alice: Any) -> None:
    session = await sync_to_async(make_session)(alice, title="Chat", model="offline:demo")
    response = await owner_client.post(send_url(session), {"prompt": "list the files"})
    assert response.status_code == 202
    # A second prompt while it runs: refused where the composer shows it.
    refused = await owner_client.post(send_url(session), {"prompt": "again"})
    assert refused.status_code == 409
    assert refused["HX-Retarget"] == "#chat-answer"
    assert "still running" in refused.content.decode()
    await asyncio.wait_for(runner.wait_for_turn(session), timeout=30)
    turn = await ChatTurn.objects.aget(session=session)
    assert turn.status == TurnStatus.DONE
    assert await Message.objects.filter(session=session).acount() == 4
    # The fragment a reconnecting page reads says so.
    fragment = await owner_client.get(f"/sessions/{session.pk}/chat/turn/")
    assert 'data-status="done"' in fragment.content.decode()
    stop = await owner_client.post(f"/sessions/{session.pk}/chat/stop/")
    assert stop.status_code == 409
    assert "no turn is running" in stop.content.decode()


def test_a_command_answers_with_its_note(client: Client, alice: Any, chat: Any) -> None:
    client.force_login(alice)
    response = client.post(send_url(chat), {"prompt": "/help"})
    assert response.status_code == 200
    assert response["HX-Retarget"] == "#chat-notes"
    assert response["HX-Reswap"] == "beforeend"
    assert 'data-command="help"' in response.content.decode()
    assert not ChatTurn.objects.exists()


@pytest.mark.parametrize(
    ("prompt", "status", "reason"),
    [("", 422, "type a message"), ("/nope", 422, "not a command"), ("/unpin 3", 404, "pinned")],
)
def test_refusals_name_the_prompt(
    client: Client, alice: Any, chat: Any, prompt: str, status: int, reason: str
) -> None:
    client.force_login(alice)
    response = client.post(send_url(chat), {"prompt": prompt})
    assert response.status_code == status
    assert reason in response.content.decode()
    assert 'data-field="prompt"' in response.content.decode()
    assert not ChatTurn.objects.exists()
    assert not Message.objects.exists()


def test_only_the_owner_chats(client: Client, bob: Any, staff: Any, chat: Any, alice: Any) -> None:
    client.force_login(bob)
    for url in (send_url(chat), f"/sessions/{chat.pk}/chat/stop/"):
        assert client.post(url, {"prompt": "hi"}).status_code == 404
    assert client.get(f"/sessions/{chat.pk}/chat/turn/").status_code == 404
    client.force_login(staff)
    assert client.post(send_url(chat), {"prompt": "hi"}).status_code == 403
    assert client.get(f"/sessions/{chat.pk}/chat/turn/").status_code == 200
    page = client.get(chat.get_absolute_url()).content.decode()
    assert 'id="chat-turn"' in page
    assert 'data-testid="chat-prompt"' not in page
    client.force_login(alice)
    page = client.get(chat.get_absolute_url()).content.decode()
    assert 'data-testid="chat-prompt"' in page
    assert "offline:demo" in page
    assert not ChatTurn.objects.exists()


def test_a_prompt_needs_the_csrf_token(alice: Any, chat: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(send_url(chat), {"prompt": "hi"}).status_code == 403
    assert not ChatTurn.objects.exists()


def test_a_new_chat_from_the_fleet(client: Client, alice: Any, settings: Any) -> None:
    client.force_login(alice)
    page = client.get("/").content.decode()
    assert 'data-testid="new-chat"' in page
    response = client.post("/chats/new/", {"title": "", "model": ""})
    session = AgentSession.objects.get(owner=alice)
    assert response.status_code == 302
    assert response["Location"] == session.get_absolute_url() + "#chat"
    assert session.model == session.chat_model == settings.CTXHUB_CHAT_MODEL == "offline:demo"
    assert session.title == "Chat with offline:demo"
    assert turns.chat_model_name(session) == "offline:demo"

    form = {"title": "Ask GPT", "model": "openai:gpt-4o"}
    htmx = client.post("/chats/new/", form, headers={"HX-Request": "true"})
    asked = AgentSession.objects.get(title="Ask GPT")
    assert htmx.status_code == 204
    assert htmx["HX-Redirect"].startswith(asked.get_absolute_url())
    assert asked.chat_model == "openai:gpt-4o"


@pytest.mark.parametrize(
    ("model", "reason"),
    [("offline:nope", "not an offline model"), ("gpt 4", "without spaces"), ("gpt-4o", "provider")],
)
def test_a_new_chat_with_a_bad_model_is_refused(
    client: Client, alice: Any, model: str, reason: str
) -> None:
    client.force_login(alice)
    response = client.post("/chats/new/", {"model": model})
    assert response.status_code == 422
    assert reason in response.content.decode()
    assert not AgentSession.objects.exists()


def test_the_setting_picks_the_model_of_sessions_without_their_own(
    alice: Any, settings: Any
) -> None:
    settings.CTXHUB_CHAT_MODEL = "anthropic:claude-sonnet-4-5"
    session = make_session(alice)
    assert turns.chat_model_name(session) == "anthropic:claude-sonnet-4-5"
    session.chat_model = "offline:demo"
    assert turns.chat_model_name(session) == "offline:demo"


def test_a_finished_turn_gives_way_to_what_the_log_holds_after_it(alice: Any, chat: Any) -> None:
    client = Client()
    client.force_login(alice)
    rows = services.append_messages(chat, agent_turns(1, 1, "x"))
    stopped = ChatTurn.objects.create(
        session=chat, prompt="p", model="offline:demo", status=TurnStatus.STOPPED
    )
    turns.record_seqs(stopped, rows)
    url = f"/sessions/{chat.pk}/chat/turn/"
    assert "chat-stopped" in client.get(url).content.decode()
    # An agent appended after it: the note would stand over newer messages.
    services.append_messages(chat, agent_turns(1, 1, "y"))
    assert 'data-status="stopped"' not in client.get(url).content.decode()
    # A failed turn stays: it holds the prompt that was never sent.
    ChatTurn.objects.create(
        session=chat, prompt="lost words", model="offline:demo", status=TurnStatus.FAILED
    )
    assert "lost words" in client.get(url).content.decode()
