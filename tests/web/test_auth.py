from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import make_session

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


@pytest.mark.parametrize("path", ["/", "/sessions/00000000-0000-0000-0000-000000000000/"])
def test_it_sends_anonymous_users_to_login(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


def test_it_logs_in_and_out(client: Client, alice: object) -> None:
    response = client.post("/login/", {"username": "alice", "password": "alice-password"})
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/").status_code == 200
    assert client.post("/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_it_refuses_a_wrong_password(client: Client, alice: object) -> None:
    response = client.post("/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b"didn't match" in response.content


def test_admin_pages_need_staff(client: Client, alice: object) -> None:
    client.force_login(alice)
    assert client.get("/admin/").status_code == 302


def test_healthz_needs_no_login(client: Client) -> None:
    response = client.get("/healthz")
    assert (response.status_code, response.content) == (200, b"ok")


def test_it_hides_other_users_sessions(client: Client, alice: object, bob: object) -> None:
    session = make_session(alice, title="Alice's secret refactor")
    client.force_login(bob)
    assert client.get(f"/sessions/{session.pk}/").status_code == 404
    assert client.get(f"/sessions/{session.pk}/messages/0/").status_code == 404
    assert client.post(f"/sessions/{session.pk}/recount/").status_code == 404
    assert b"Alice&#x27;s secret refactor" not in client.get("/").content
