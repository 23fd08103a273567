"""PostgreSQL restarted under a running hub: the connections its pool held died with the server,
and none of them is handed to a request (each is checked before use). An agent that goes on
appending and reading its context, on one keep-alive connection, sees no error."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ARTIFACTS
from tests.processes import ROOT, OwnPostgres, asgi_server


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[OwnPostgres]:
    server = OwnPostgres()
    server.start()
    try:
        env = {**os.environ, "DATABASE_URL": server.url}
        manage = [sys.executable, str(ROOT / "manage.py")]
        subprocess.run([*manage, "migrate", "--verbosity=0"], env=env, check=True, cwd=ROOT)
        yield server
    finally:
        server.stop()


def _key(server: OwnPostgres) -> str:
    env = {**os.environ, "DATABASE_URL": server.url, "DJANGO_SUPERUSER_PASSWORD": "unused-pw"}
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run(
        [*manage, "createsuperuser", "--noinput", "--username=ops", "--email=ops@example.com"],
        env=env,
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    made = subprocess.run(
        [*manage, "create_api_key", "ops", "--scopes=read,write"],
        env=env,
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return made.stdout.strip()


def _message(n: int) -> dict[str, Any]:
    return {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": f"step {n}"}]}


def test_an_agent_sees_no_error_after_postgresql_restarts(own_postgres: OwnPostgres) -> None:
    env = {"DATABASE_URL": own_postgres.url, "CTXHUB_DB_POOL_SIZE": "4", "DEBUG": "false"}
    with asgi_server(ARTIFACTS / "logs" / "web-pg-restart.log", env=env) as url:
        api = httpx.Client(base_url=f"{url}/api/v1", timeout=30)
        api.headers["Authorization"] = f"Bearer {_key(own_postgres)}"
        created = api.post("/sessions", json={"title": "Restart", "model": "openai:gpt-4o"})
        assert created.status_code == 201, created.text
        session = f"/sessions/{created.json()['id']}"
        # The pool fills: several connections are held, idle, when the server goes.
        for n in range(8):
            assert api.post(f"{session}/messages", json={"messages": [_message(n)]}).is_success
            assert api.get(f"{session}/context").is_success

        own_postgres.restart()

        answers = []
        for n in range(8, 38):
            answers.append(api.post(f"{session}/messages", json={"messages": [_message(n)]}))
            answers.append(api.get(f"{session}/context"))
        failed = [(a.request.method, a.status_code, a.text[:200]) for a in answers if a.is_error]
        assert failed == []
        context = api.get(f"{session}/context").json()
        assert [m["parts"][0]["content"] for m in context["messages"]] == [
            f"step {n}" for n in range(38)
        ]
