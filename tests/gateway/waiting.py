"""Waiting for what the gateway records after its client had the answer."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.db import connection


def wait_for(condition: Callable[[], bool], what: str = "", timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what or condition}"
        time.sleep(0.05)


QUIET_SECONDS = 0.2


def wait_until_quiet(timeout: float = 15) -> None:
    """Until no other connection to the test database has been working for ``QUIET_SECONDS``:
    a hub records an exchange after its client had the answer, and a test's end must not clear
    the tables under it."""
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < QUIET_SECONDS:
        assert time.monotonic() < deadline, "the hub kept working past the test's end"
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state IN ('active', 'idle in transaction')"
            )
            (working,) = cursor.fetchone()
        if working:
            quiet_since = time.monotonic()
        time.sleep(0.02)
