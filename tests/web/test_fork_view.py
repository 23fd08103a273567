"""The "Fork here" view: whoever sees a session may fork it into a session of their own; htmx
is sent to the fork with HX-Redirect, a plain form redirected; a bad seq is refused."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from sessions import services
from sessions.models import AgentSession, Message
from tests.factories import make_session
from tests.messages import reply, user

pytestmark = pytest.mark.django_db


@pytest.fixture
def session(alice: Any) -> AgentSession:
    session = make_session(alice, title="Deploy")
    services.append_messages(session, [user("a"), reply("b"), user("c")], auto_compact=False)
    return session


def client_of(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_htmx_is_sent_to_the_new_session(alice: Any, session: AgentSession) -> None:
    response = client_of(alice).post(
        f"/sessions/{session.pk}/messages/1/fork/", headers={"HX-Request": "true"}
    )
    assert response.status_code == 204
    fork = AgentSession.objects.exclude(pk=session.pk).get()
    assert response["HX-Redirect"] == fork.get_absolute_url()
    assert (fork.owner, fork.title) == (alice, "Deploy (fork at #1)")
    assert Message.objects.filter(session=fork).count() == 2


def test_a_plain_post_is_redirected_and_the_page_offers_fork_here(
    alice: Any, session: AgentSession
) -> None:
    client = client_of(alice)
    response = client.post(f"/sessions/{session.pk}/messages/2/fork/")
    fork = AgentSession.objects.exclude(pk=session.pk).get()
    assert response.status_code == 302
    assert response["Location"] == fork.get_absolute_url()
    page = client.get(f"/sessions/{session.pk}/fates/", {"from": 0, "to": 2}).content.decode()
    assert f'/sessions/{session.pk}/messages/2/fork/"' in page
    assert client.get(f"/sessions/{session.pk}/messages/2/fork/").status_code == 405


def test_staff_fork_a_session_they_may_only_see(
    alice: Any, bob: Any, session: AgentSession
) -> None:
    bob.is_staff = True
    bob.save()
    client = client_of(bob)
    page = client.get(f"/sessions/{session.pk}/fates/", {"from": 0, "to": 2}).content.decode()
    assert "Fork here" in page
    assert 'data-testid="pin-' not in page  # they change nothing of alice's
    response = client.post(f"/sessions/{session.pk}/messages/0/fork/")
    assert response.status_code == 302
    fork = AgentSession.objects.exclude(pk=session.pk).get()
    assert fork.owner == bob


def test_another_users_session_is_a_404(bob: Any, session: AgentSession) -> None:
    response = client_of(bob).post(f"/sessions/{session.pk}/messages/0/fork/")
    assert response.status_code == 404
    assert AgentSession.objects.count() == 1


def test_a_seq_past_the_log_is_refused(alice: Any, session: AgentSession) -> None:
    response = client_of(alice).post(
        f"/sessions/{session.pk}/messages/3/fork/", headers={"HX-Request": "true"}
    )
    assert response.status_code == 422
    assert "seq" in response.content.decode()
    assert AgentSession.objects.count() == 1
