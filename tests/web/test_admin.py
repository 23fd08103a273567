"""The admin pages: governed usage per session, a way to its x-ray, records read-only."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from sessions import services
from sessions.chat import turns
from tests.factories import make_session
from tests.messages import agent_turns

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


@pytest.fixture
def admin_user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("root", password="root-password")


def test_the_session_list_shows_governed_usage_and_links_to_the_xray(
    client: Client, admin_user: Any, alice: Any
) -> None:
    session = make_session(alice, title="Admin view")
    services.append_messages(session, agent_turns(3, 2, "x " * 500))
    context = services.governed_context(session)  # a first governance leaves the figures
    client.force_login(admin_user)
    page = client.get("/admin/agent_sessions/agentsession/").content.decode()
    assert f"{context.tokens:,} / {context.report.budget_tokens:,}" in page
    assert f'href="{session.get_absolute_url()}">open the x-ray' in page


def test_the_policy_is_not_edited_in_the_admin(client: Client, admin_user: Any, alice: Any) -> None:
    session = make_session(alice, policy={"masking": {"keep_last": 2}})
    client.force_login(admin_user)
    page = client.get(f"/admin/agent_sessions/agentsession/{session.pk}/change/").content
    assert b'name="policy"' not in page
    assert b"keep_last" in page


def test_chat_turns_are_listed_read_only(client: Client, admin_user: Any, alice: Any) -> None:
    session = make_session(alice, title="Chatty", model="offline:demo")
    turn = turns.begin(session, alice, "what is in the README?", "")
    turns.finish(turn, "failed", error="provider down")
    client.force_login(admin_user)
    page = client.get("/admin/agent_sessions/chatturn/?q=README").content.decode()
    assert "Chatty" in page
    assert "failed" in page
    change = client.get(f"/admin/agent_sessions/chatturn/{turn.pk}/change/").content.decode()
    assert "provider down" in change
    assert 'name="_save"' not in change
