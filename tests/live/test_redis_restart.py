"""Live updates through a Redis that restarts or loses its data: handshakes keep working, and
open sockets that lost their groups close with a code their page reconnects after, so the page
rejoins and catches up from the log."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from channels_redis.core import RedisChannelLayer
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from sessions.consumers import SERVICE_RESTART
from tests.conftest import ARTIFACTS, required_env
from tests.factories import make_session
from tests.processes import OwnRedis, asgi_server

pytestmark = pytest.mark.django_db(transaction=True)

# What a page's websocket extension reconnects after (static/vendor/htmx-ext-ws.min.js).
RECONNECTED_AFTER = {1006, 1011, 1012, 1013}


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnRedis]:
    required_env("REDIS_URL")
    server = OwnRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    if server.up():
        server.stop()


@pytest.fixture(scope="module")
def web(own_redis: OwnRedis, django_db_setup: None) -> Iterator[str]:
    """A web server whose channel layer is that Redis, its sockets beating every second."""
    env = {"REDIS_URL": own_redis.url, "CTXHUB_SOCKET_HEARTBEAT_SECONDS": "1"}
    with asgi_server(ARTIFACTS / "logs" / "web-redis-restart.log", env=env) as url:
        yield url


def _cookie(owner: Any) -> str:
    client = Client()
    client.force_login(owner)
    return f"sessionid={client.cookies['sessionid'].value}"


def _open(url: str, session_id: object, cookie: str) -> ClientConnection:
    return connect(
        f"{url.replace('http', 'ws')}/ws/sessions/{session_id}/",
        origin=url,
        additional_headers={"Cookie": cookie},
        open_timeout=10,
    )


def _push(own_redis: OwnRedis, group: str, html: str) -> None:
    """A push as the web server's own processes make it, through its Redis."""
    layer = RedisChannelLayer(hosts=[own_redis.url], prefix="ctxhub")
    async_to_sync(layer.group_send)(group, {"type": "html.push", "html": html})


def _close_code(socket: ClientConnection, within: float = 15) -> int | None:
    try:
        while True:
            socket.recv(timeout=within)
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else 1006
    except TimeoutError:
        return None


def test_a_restart_closes_open_sockets_for_their_pages_to_reconnect(
    own_redis: OwnRedis, web: str, alice: Any
) -> None:
    sessions = [make_session(alice) for _ in range(4)]
    cookie = _cookie(alice)
    # Several sockets at once: the layer's pool holds several connections, all dead after.
    with contextlib.ExitStack() as opened:
        sockets = [opened.enter_context(_open(web, s.pk, cookie)) for s in sessions]
        own_redis.stop()
        own_redis.start()  # empty, and every pooled connection is dead
        for socket in sockets:
            assert _close_code(socket) in RECONNECTED_AFTER
    # The pages' next handshakes are accepted (each takes a pooled connection, dead or not),
    # and hear what follows.
    for session in sessions:
        with _open(web, session.pk, cookie) as socket:
            _push(own_redis, session.group_name, "<p>after the restart</p>")
            assert socket.recv(timeout=10) == "<p>after the restart</p>"


def test_a_socket_whose_groups_were_lost_asks_its_page_to_reconnect(
    own_redis: OwnRedis, web: str, alice: Any
) -> None:
    session = make_session(alice)
    cookie = _cookie(alice)
    with _open(web, session.pk, cookie) as socket:
        _push(own_redis, session.group_name, "<p>before</p>")
        assert socket.recv(timeout=10) == "<p>before</p>"
        # Redis keeps its connections but loses every key: the memberships are gone.
        redis.Redis.from_url(own_redis.url).flushall()
        assert _close_code(socket, within=10) == SERVICE_RESTART
    with _open(web, session.pk, cookie) as socket:
        _push(own_redis, session.group_name, "<p>rejoined</p>")
        assert socket.recv(timeout=10) == "<p>rejoined</p>"


def test_a_socket_that_keeps_its_groups_stays_open(
    own_redis: OwnRedis, web: str, alice: Any
) -> None:
    session = make_session(alice)
    with _open(web, session.pk, _cookie(alice)) as socket:
        assert _close_code(socket, within=4) is None  # four heartbeats came back
        _push(own_redis, session.group_name, "<p>still here</p>")
        assert socket.recv(timeout=10) == "<p>still here</p>"
