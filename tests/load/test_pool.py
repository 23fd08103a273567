"""Database connections under load, on the production web server: each process holds at most
CTXHUB_DB_POOL_SIZE of them, and a request that finds them all busy waits
CTXHUB_DB_POOL_TIMEOUT seconds, then gets a 503 with Retry-After. Nothing is half-written."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from django.db import connection, transaction
from django.test import Client

from sessions.api.keys import create_key
from sessions.models import AgentSession
from tests.conftest import ARTIFACTS
from tests.processes import asgi_server, free_port

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGE = {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "go"}]}


@pytest.fixture(scope="module")
def one_connection(django_db_setup: None) -> Iterator[str]:
    """A web process whose pool holds a single connection and waits one second for it."""
    env = {"CTXHUB_DB_POOL_SIZE": "1", "CTXHUB_DB_POOL_TIMEOUT": "1", "DEBUG": "false"}
    with asgi_server(ARTIFACTS / "logs" / "web-pool.log", env=env) as url:
        yield url


def _wait_until_blocked_on_a_lock() -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.05)
    pytest.fail("the append never waited for the session's lock")


def test_a_request_that_finds_every_connection_busy_gets_503_and_loses_nothing(
    one_connection: str, alice: Any
) -> None:
    session = AgentSession.objects.create(owner=alice, title="Busy", model="openai:gpt-4o")
    _, key = create_key(alice, name="agent", scopes=["read", "write"])
    api = httpx.Client(base_url=f"{one_connection}/api/v1/sessions/{session.pk}", timeout=30)
    api.headers["Authorization"] = f"Bearer {key}"
    browser = Client()
    browser.force_login(alice)
    cookies = {"sessionid": browser.cookies["sessionid"].value}

    with ThreadPoolExecutor(1) as background:
        with transaction.atomic():
            # The session's row locked here: an append takes the server's only connection and
            # waits on this lock with it.
            AgentSession.objects.select_for_update().get(pk=session.pk)
            appending = background.submit(
                api.post, "/messages", json={"messages": [MESSAGE], "expected_seq": 0}
            )
            _wait_until_blocked_on_a_lock()

            busy = api.get("/context")
            assert busy.status_code == 503
            assert busy.headers["Retry-After"].isdigit()
            assert busy.json()["error"]["code"] == "unavailable"

            page = httpx.get(
                f"{one_connection}{session.get_absolute_url()}", cookies=cookies, timeout=30
            )
            assert page.status_code == 503
            assert page.headers["Retry-After"].isdigit()
            assert "retry" in page.text

        appended = appending.result(timeout=30)
    assert appended.status_code == 201, appended.text
    assert list(session.messages.values_list("seq", flat=True)) == [0]
    # With its connection handed back, the process serves again.
    assert api.get("/context").status_code == 200


def test_a_client_that_gives_up_mid_request_strands_no_connection(
    one_connection: str, alice: Any
) -> None:
    """The request runs to its end and hands its connection back (cancelling it would strand
    the connection in the thread running the view, and the process would answer 503 for good)."""
    session = AgentSession.objects.create(owner=alice, title="Dropped", model="openai:gpt-4o")
    _, key = create_key(alice, name="agent", scopes=["read", "write"])
    api = httpx.Client(base_url=f"{one_connection}/api/v1/sessions/{session.pk}", timeout=30)
    api.headers["Authorization"] = f"Bearer {key}"

    with transaction.atomic():
        AgentSession.objects.select_for_update().get(pk=session.pk)
        with pytest.raises(httpx.ReadTimeout):
            api.post("/messages", json={"messages": [MESSAGE]}, timeout=0.5)
        _wait_until_blocked_on_a_lock()

    deadline = time.monotonic() + 20
    while not session.messages.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(session.messages.values_list("seq", flat=True)) == [0]
    for _ in range(3):
        assert api.get("/context").status_code == 200


@pytest.fixture(scope="module")
def redis_away(django_db_setup: None) -> Iterator[str]:
    """A web process whose Redis (channel layer, broker, rate counts) does not answer."""
    env = {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "DEBUG": "false"}
    with asgi_server(ARTIFACTS / "logs" / "web-redis-away.log", env=env) as url:
        yield url


def test_the_api_answers_while_redis_is_away(redis_away: str, alice: Any) -> None:
    """Rate counts fail open, live pushes and settle runs are skipped: appends and contexts
    are answered from PostgreSQL, never a 500."""
    session = AgentSession.objects.create(owner=alice, title="No Redis", model="openai:gpt-4o")
    _, key = create_key(alice, name="agent", scopes=["read", "write"])
    api = httpx.Client(base_url=f"{redis_away}/api/v1/sessions/{session.pk}", timeout=30)
    api.headers["Authorization"] = f"Bearer {key}"
    appended = api.post("/messages", json={"messages": [MESSAGE], "expected_seq": 0})
    assert appended.status_code == 201, appended.text
    assert api.get("/context").status_code == 200
    assert api.get(f"{redis_away}/api/v1/sessions").status_code == 200
    assert list(session.messages.values_list("seq", flat=True)) == [0]
