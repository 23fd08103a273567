"""Concurrent writers get unique, gap-free seq numbers (PostgreSQL row locks)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from sessions import services
from sessions.models import AgentSession
from tests.factories import make_session
from tests.messages import user

pytestmark = pytest.mark.django_db(transaction=True)


def _append_many(session: AgentSession, writer: int, count: int) -> None:
    try:
        for i in range(count):
            services.append_messages(session, [user(f"writer {writer} message {i}")] * 2)
    finally:
        connection.close()


def test_concurrent_appends_get_consecutive_seqs(alice: object) -> None:
    assert connection.vendor == "postgresql"
    session = make_session(alice)
    with ThreadPoolExecutor(4) as pool:
        for future in [pool.submit(_append_many, session, w, 10) for w in range(4)]:
            future.result(timeout=120)
    rows = list(session.messages.values_list("seq", "payload"))
    assert [seq for seq, _ in rows] == list(range(80))
    # Each batch of two landed side by side: batches are atomic and never interleave.
    for first in range(0, 80, 2):
        assert rows[first][1]["parts"][0]["content"] == rows[first + 1][1]["parts"][0]["content"]
