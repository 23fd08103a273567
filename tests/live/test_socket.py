"""The session socket on a real ASGI server process, with the Redis channel layer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from sessions import services
from tests.conftest import ARTIFACTS, required_env
from tests.factories import make_session, result, user
from tests.processes import asgi_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[str]:
    required_env("REDIS_URL")
    with asgi_server(ARTIFACTS / "logs" / "daphne-socket.log") as url:
        yield url


def _cookie(user_obj: object) -> str:
    client = Client()
    client.force_login(user_obj)
    return f"sessionid={client.cookies['sessionid'].value}"


def _open(server: str, session_id: object, cookie: str | None) -> ClientConnection:
    headers = {"Cookie": cookie} if cookie else {}
    return connect(
        f"{server.replace('http', 'ws')}/ws/sessions/{session_id}/",
        origin=server,
        additional_headers=headers,
        open_timeout=10,
    )


def test_a_message_appended_elsewhere_reaches_the_socket_as_html(
    server: str, alice: object
) -> None:
    session = make_session(alice)
    services.append_message(session, user("first"))
    with _open(server, session.pk, _cookie(alice)) as socket:
        # This process appends; the server process forwards what Redis delivers to it.
        services.append_messages(
            session, [user("Run the tests"), result("run_tests", "c9", "42 passed in 3.1s")]
        )
        html = socket.recv(timeout=15)
    assert 'hx-swap-oob="beforeend"' in html
    assert 'id="msg-1"' in html
    assert 'id="msg-2"' in html
    assert "Run the tests" in html
    assert "42 passed in 3.1s" in html
    assert '<strong data-testid="message-total">3</strong>' in html


def test_a_quiet_socket_stays_open_and_still_receives(server: str, alice: object) -> None:
    # Longer than a Redis client's default read timeout: the layer's blocking receive must
    # not end the socket while nothing happens.
    session = make_session(alice)
    with _open(server, session.pk, _cookie(alice)) as socket:
        time.sleep(7)
        services.append_message(session, user("after a quiet spell"))
        html = socket.recv(timeout=15)
    assert "after a quiet spell" in html


def test_another_user_is_refused(server: str, alice: object, bob: object) -> None:
    session = make_session(alice)
    with pytest.raises(InvalidStatus) as exc:
        _open(server, session.pk, _cookie(bob))
    assert exc.value.response.status_code == 403


def test_staff_may_watch_another_users_session(
    server: str, alice: object, django_user_model: Any
) -> None:
    staff = django_user_model.objects.create_user("carol", password="pw", is_staff=True)
    session = make_session(alice)
    with _open(server, session.pk, _cookie(staff)) as socket:
        services.append_message(session, user("watched by staff"))
        assert "watched by staff" in socket.recv(timeout=10)


def test_an_anonymous_socket_is_refused(server: str, alice: object) -> None:
    session = make_session(alice)
    with pytest.raises(InvalidStatus) as exc:
        _open(server, session.pk, None)
    assert exc.value.response.status_code == 403


def test_a_foreign_origin_is_refused(server: str, alice: object) -> None:
    session = make_session(alice)
    with pytest.raises(InvalidStatus) as exc:
        connect(
            f"{server.replace('http', 'ws')}/ws/sessions/{session.pk}/",
            origin="http://evil.example",
            additional_headers={"Cookie": _cookie(alice)},
            open_timeout=10,
        )
    assert exc.value.response.status_code == 403
