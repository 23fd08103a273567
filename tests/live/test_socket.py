"""The session socket on a real ASGI server process, with the Redis channel layer."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import Client
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from sessions import services
from sessions.api.keys import create_key
from tests.conftest import ARTIFACTS, required_env
from tests.factories import make_session, result, user
from tests.processes import asgi_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[str]:
    required_env("REDIS_URL")
    with asgi_server(ARTIFACTS / "logs" / "web-socket.log") as url:
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


@pytest.fixture(scope="module")
def two_processes(django_db_setup: None) -> Iterator[tuple[str, Path]]:
    required_env("REDIS_URL")
    log = ARTIFACTS / "logs" / "web-two-processes.log"
    log.unlink(missing_ok=True)
    with asgi_server(log, workers=2) as url:
        yield url, log


def _process_of_each_socket(log: Path) -> list[str]:
    return re.findall(r"\[(\d+)\] \[INFO\] connection open", log.read_text())


def test_every_socket_hears_every_append_whichever_process_holds_it(
    two_processes: tuple[str, Path], alice: object
) -> None:
    """Each web process has its own inbox in Redis: sockets of both hear every push, whichever
    process answered the append (copies of one inbox would take each other's pushes)."""
    server, log = two_processes
    session = make_session(alice)
    _, key = create_key(alice, name="agent", scopes=["write"])
    cookie = _cookie(alice)
    with contextlib.ExitStack() as opened:
        sockets = []
        # Enough sockets that both processes hold some (the kernel picks the process).
        while len(set(_process_of_each_socket(log))) < 2 and len(sockets) < 40:
            sockets.append(opened.enter_context(_open(server, session.pk, cookie)))
            time.sleep(0.05)
        assert len(set(_process_of_each_socket(log))) == 2
        api = httpx.Client(base_url=server, headers={"Authorization": f"Bearer {key}"})
        for turn in range(6):
            answer = api.post(
                f"/api/v1/sessions/{session.pk}/messages",
                json={"messages": [{"kind": "request", "parts": [
                    {"part_kind": "user-prompt", "content": f"turn {turn}"}]}]},
            )  # fmt: skip
            assert answer.status_code == 201
        for socket in sockets:
            heard: set[str] = set()
            while len(heard) < 6:
                heard |= set(re.findall(r'id="msg-(\d+)"', str(socket.recv(timeout=15))))
            assert heard == {str(seq) for seq in range(6)}
