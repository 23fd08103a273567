"""The session socket on a real ASGI server process, with the Redis channel layer."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from sessions import services
from sessions.api.keys import create_key
from sessions.revocation import REVOKED
from tests.conftest import ARTIFACTS, required_env
from tests.factories import make_session
from tests.messages import tool_result, user
from tests.processes import asgi_server
from tests.pushes import listening_layer

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
            session, [user("Run the tests"), tool_result("run_tests", "42 passed in 3.1s", id="c9")]
        )
        html = socket.recv(timeout=15)
    assert 'hx-swap-oob="beforeend"' in html
    assert 'id="msg-1"' in html
    assert 'id="msg-2"' in html
    assert "Run the tests" in html
    assert "42 passed in 3.1s" in html
    assert '<strong data-testid="message-total">3</strong>' in html


def test_a_push_is_rendered_only_while_a_socket_watches(server: str, alice: object) -> None:
    session = make_session(alice)
    layer = listening_layer()
    listener = async_to_sync(layer.new_channel)()
    # In the session's group, but not a page's socket: the session is not marked as watched.
    async_to_sync(layer.group_add)(session.group_name, listener)
    services.append_message(session, user("nobody watches"))
    with _open(server, session.pk, _cookie(alice)) as socket:
        services.append_message(session, user("a page watches"))
        html = socket.recv(timeout=15)
    first = async_to_sync(_receive)(layer, listener)
    assert "a page watches" in html
    # The first push the group had is the watched append's: the first append pushed nothing.
    assert "a page watches" in first["html"]
    assert "nobody watches" not in first["html"]


async def _receive(layer: Any, channel: str) -> dict[str, Any]:
    return await asyncio.wait_for(layer.receive(channel), timeout=15)


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


def _closed_with(socket: ClientConnection, code: int) -> bool:
    """Whether the server closes ``socket`` with ``code`` within a few seconds."""
    from websockets.exceptions import ConnectionClosed

    try:
        while True:
            socket.recv(timeout=10)
    except ConnectionClosed as closed:
        return closed.rcvd is not None and closed.rcvd.code == code
    except TimeoutError:
        return False


def test_logging_out_closes_that_logins_sockets_only(server: str, alice: object) -> None:
    session = make_session(alice)
    phone, laptop = Client(), Client()
    phone.force_login(alice)
    laptop.force_login(alice)
    cookie = {c: f"sessionid={c.cookies['sessionid'].value}" for c in (phone, laptop)}
    with (
        _open(server, session.pk, cookie[phone]) as on_phone,
        _open(server, session.pk, cookie[laptop]) as on_laptop,
    ):
        assert phone.post("/logout/").status_code == 302
        assert _closed_with(on_phone, REVOKED)
        # The other login still watches, and still hears appends.
        services.append_message(session, user("still watching"))
        assert "still watching" in on_laptop.recv(timeout=15)
    # Logged out, the page's reconnection is refused.
    with pytest.raises(InvalidStatus):
        _open(server, session.pk, cookie[phone])


@pytest.mark.parametrize("change", ["deactivated", "no longer staff", "deleted"])
def test_a_user_whose_rights_go_loses_every_socket(
    server: str, alice: object, django_user_model: Any, change: str
) -> None:
    session = make_session(alice)
    carol = django_user_model.objects.create_user("carol", password="pw", is_staff=True)
    with _open(server, session.pk, _cookie(carol)) as socket:
        if change == "deactivated":
            carol.is_active = False
            carol.save()
        elif change == "no longer staff":
            carol.is_staff = False
            carol.save(update_fields=["is_staff"])
        else:
            carol.delete()
        assert _closed_with(socket, REVOKED)


def test_a_users_other_changes_leave_their_sockets_open(server: str, alice: Any) -> None:
    session = make_session(alice)
    with _open(server, session.pk, _cookie(alice)) as socket:
        alice.first_name = "Alice"
        alice.save()
        services.append_message(session, user("after the edit"))
        assert "after the edit" in socket.recv(timeout=15)


@pytest.mark.parametrize(
    "path",
    [
        "/static/..%2f..%2fctxhub%2fsettings.py",
        "/static/..%2F..%2Fpyproject.toml",
        "/static/%2e%2e/%2e%2e/config/settings.py",
        "/static/css/..%2f..%2f..%2fctxhub%2fsettings.py",
    ],
)
def test_a_static_path_climbing_out_is_a_404_on_the_server(server: str, path: str) -> None:
    # The web server serves static files itself (config/asgi.py): Django's refusal to open a
    # path outside the static directories was a server error there.
    answer = httpx.get(f"{server}{path}", timeout=10)
    assert answer.status_code == 404
    assert b"SECRET_KEY" not in answer.content
    assert b"[project]" not in answer.content
    assert httpx.get(f"{server}/static/css/ctxhub.css", timeout=10).status_code == 200
