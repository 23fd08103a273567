from __future__ import annotations

import base64
import re

import pytest
from django.test import Client
from pydantic_ai.messages import (
    BinaryContent,
    FilePart,
    ImageUrl,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)

from gateway.models import GatewaySession, Mode
from sessions import services
from sessions.chat.views import EXAMPLE_PROMPTS
from tests.factories import make_session
from tests.messages import reply, tool_call, tool_result, user

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


@pytest.fixture
def session(alice: object) -> object:
    session = make_session(alice, title="Fix the parser")
    services.append_messages(
        session,
        [
            user("Why does test_bom fail?"),
            tool_call("read_file", id="call_7", path="src/parser.py"),
            tool_result("read_file", "x = 1\n" * 400, id="call_7"),
            reply("The BOM is not stripped."),
        ],
    )
    return session


def test_the_list_shows_own_sessions_with_totals(
    client: Client, alice: object, session: object
) -> None:
    client.force_login(alice)
    page = client.get("/").content.decode()
    assert "Fix the parser" in page
    governed = services.governed_context(session)
    # What the next request carries against the budget, and the raw log beside it.
    assert (
        f'data-governed="{governed.tokens}" data-budget="{governed.report.budget_tokens}"' in page
    )
    assert f"{governed.tokens:,}</span> / {governed.report.budget_tokens:,}" in page
    assert f"{services.token_totals(session).tokens:,} <span" in page


def test_the_detail_shows_messages_with_token_counts(
    client: Client, alice: object, session: object
) -> None:
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    for row in session.messages.all():
        assert f'id="msg-{row.seq}"' in page
        assert f"{row.tokens:,} tokens" in page
    assert "Why does test_bom fail?" in page
    assert "call_7" in page
    assert f'ws-connect="/ws/sessions/{session.pk}/"' in page


def test_long_parts_are_cut_and_loaded_in_full_on_demand(
    client: Client, alice: object, session: object
) -> None:
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    assert "x = 1\n" * 400 not in page
    assert "Original (in full)" in page
    full = client.get(
        f"/sessions/{session.pk}/messages/2/", headers={"HX-Request": "true"}
    ).content.decode()
    assert "x = 1\n" * 400 in full
    assert "<html" not in full


def test_a_missing_message_is_404(client: Client, alice: object, session: object) -> None:
    client.force_login(alice)
    assert client.get(f"/sessions/{session.pk}/messages/99/").status_code == 404


def test_pages_refuse_other_methods(client: Client, alice: object, session: object) -> None:
    client.force_login(alice)
    assert client.post(f"/sessions/{session.pk}/").status_code == 405
    assert client.get(f"/sessions/{session.pk}/recount/").status_code == 405


def test_catch_up_returns_only_later_messages_with_the_meter(
    client: Client, alice: object, session: object
) -> None:
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/messages/?after=1").content.decode()
    assert 'id="msg-0"' not in page
    assert 'id="msg-1"' not in page
    assert 'id="msg-2"' in page
    assert 'id="msg-3"' in page
    assert 'id="meter" class="meter" hx-swap-oob="true"' in page


def test_catch_up_from_the_start_returns_everything(
    client: Client, alice: object, session: object
) -> None:
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/messages/").content.decode()
    assert page.count('<article class="msg') == 4


@pytest.mark.parametrize("param", ["after", "before"])
@pytest.mark.parametrize("value", ["x", "1.5", ""])
def test_message_queries_refuse_a_bad_seq_naming_it(
    client: Client, alice: object, session: object, param: str, value: str
) -> None:
    client.force_login(alice)
    response = client.get(f"/sessions/{session.pk}/messages/?{param}={value}")
    assert response.status_code == 400
    assert response.content.startswith(f"{param}:".encode())


def test_catch_up_hides_other_users_sessions(client: Client, bob: object, session: object) -> None:
    client.force_login(bob)
    assert client.get(f"/sessions/{session.pk}/messages/?after=-1").status_code == 404


def test_media_shows_as_its_type_and_size_never_its_bytes(client: Client, alice: object) -> None:
    session = make_session(alice)
    image = BinaryContent(data=bytes(range(256)) * 1200, media_type="image/png")
    services.append_messages(
        session,
        [
            ModelRequest(
                parts=[
                    UserPromptPart(
                        ["what is this?", image, ImageUrl(url="https://example.com/a.png")]
                    )
                ]
            ),
            ModelResponse(parts=[TextPart("A chart."), FilePart(content=image)]),
        ],
    )
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    assert page.count("image/png, 300 KB") == 2
    assert "https://example.com/a.png" in page
    assert base64.b64encode(image.data[:300]).decode() not in page


@pytest.fixture
def long_session(alice: object) -> object:
    session = make_session(alice, title="A long run")
    services.append_messages(session, [user(f"step {i}") for i in range(250)])
    return session


def test_the_detail_shows_the_newest_page_and_offers_earlier_ones(
    client: Client, alice: object, long_session: object
) -> None:
    client.force_login(alice)
    page = client.get(f"/sessions/{long_session.pk}/").content.decode()
    assert page.count('<article class="msg') == 200
    assert 'id="msg-49"' not in page
    assert 'id="msg-50"' in page
    assert 'id="msg-249"' in page
    assert f"/sessions/{long_session.pk}/messages/?before=50" in page
    assert '<strong data-testid="message-total">250</strong>' in page


def test_the_earliest_page_ends_the_paging(
    client: Client, alice: object, long_session: object
) -> None:
    client.force_login(alice)
    page = client.get(f"/sessions/{long_session.pk}/messages/?before=50").content.decode()
    assert page.count('<article class="msg') == 50
    assert 'id="msg-0"' in page
    assert 'id="msg-49"' in page
    assert '<div id="earlier" class="earlier" hx-swap-oob="true">' in page
    assert "?before=" not in page


def test_a_new_chat_offers_its_tools_and_prompts_to_its_owner_while_empty(
    client: Client, alice: object, bob: object
) -> None:
    chat = make_session(alice, title="New", model="offline:demo")
    through_gateway = make_session(alice, title="An agent's")
    GatewaySession.objects.create(session=through_gateway, wire="anthropic", mode=Mode.OBSERVE)
    client.force_login(alice)
    page = client.get(chat.get_absolute_url()).content.decode()
    assert 'data-testid="chat-start"' in page
    assert "<code>list_files</code>" in page
    # Each tool is said in a whole sentence (a docstring wraps mid-sentence).
    listed = re.findall(r"<li><code>(\w+)</code>: ([^<]*)</li>", page)
    assert {name for name, _ in listed} >= {"list_files", "read_file", "recall"}
    assert all(said.endswith(".") for _, said in listed), listed
    assert all(f'data-prompt="{prompt}"' in page for prompt in EXAMPLE_PROMPTS)
    # Not on a session an agent drives through the gateway, nor once the chat has begun.
    page = client.get(through_gateway.get_absolute_url()).content.decode()
    assert 'data-testid="chat-start"' not in page
    services.append_messages(chat, [user("Hello")])
    page = client.get(chat.get_absolute_url()).content.decode()
    assert 'data-testid="chat-start"' not in page
    # Nor to staff reading another's empty session: they cannot send to it.
    empty = make_session(alice, title="Empty")
    bob.is_staff = True  # type: ignore[attr-defined]
    bob.save()  # type: ignore[attr-defined]
    client.force_login(bob)
    page = client.get(empty.get_absolute_url()).content.decode()
    assert "read-only" in page
    assert 'data-testid="chat-start"' not in page
