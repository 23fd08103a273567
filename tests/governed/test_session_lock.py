"""A change to a session's records holds the session row lock (appends wait on it) only for its
writes: governing, which takes a while on a long session, happens before and after.

PostgreSQL only (SQLite has no row locks), so not in the smoke run.
"""

from __future__ import annotations

import threading
from itertools import pairwise
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from ctxhub.governance import Policy
from sessions import services
from sessions.models import AgentSession, AuditEvent
from sessions.services import records
from tests.conftest import required_env
from tests.governed.builders import SMALL_POLICY, agentic_session

pytestmark = pytest.mark.django_db(transaction=True)


def locked_elsewhere(session: AgentSession) -> bool:
    """Whether another connection holds the session's row lock now."""
    outcome: dict[str, bool] = {}

    def probe() -> None:
        try:
            with transaction.atomic():
                rows = AgentSession.objects.select_for_update(nowait=True).filter(pk=session.pk)
                list(rows.values_list("pk"))
            outcome["locked"] = False
        except DatabaseError:
            outcome["locked"] = True
        finally:
            connection.close()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return outcome["locked"]


@pytest.fixture
def probed(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For every govern of a change's before or after figure: whether the lock was held."""
    assert "postgres" in required_env("DATABASE_URL")
    seen: list[bool] = []
    govern = records.governed_context

    def probing(session: AgentSession, *args: Any, **kwargs: Any) -> Any:
        seen.append(locked_elsewhere(session))
        return govern(session, *args, **kwargs)

    monkeypatch.setattr(records, "governed_context", probing)
    return seen


def test_the_probe_sees_a_held_lock(alice: Any) -> None:
    session = agentic_session(alice, turns=2)
    assert not locked_elsewhere(session)
    with transaction.atomic():
        records.lock_session(session)
        assert locked_elsewhere(session)


def test_no_change_governs_under_the_session_lock(alice: Any, probed: list[bool]) -> None:
    session = agentic_session(alice)
    pinned = 3

    services.pin(session, pinned)
    services.unpin(session, pinned)
    services.set_policy(
        session, Policy.model_validate({**SMALL_POLICY, "masking": {"keep_last": 2}})
    )
    job = services.request_compaction(session).job
    job.refresh_from_db()
    assert job.status == "done", job.error
    cleared = services.clear(session).record
    services.undo_clear(session, cleared.pk)

    assert len(probed) == 12  # six changes, each governed before and after
    assert not any(probed)
    events = AuditEvent.objects.filter(session=session).order_by("created_at")
    assert [e.verb for e in events] == [
        "pin",
        "unpin",
        "policy",
        "compact",
        "clear",
        "undo_clear",
    ]
    # Each figure after is the session as governed right after the change: the next change's
    # figure before (nothing was appended in between).
    for event, following in pairwise(events):
        assert event.tokens_after == following.tokens_before
    session.refresh_from_db()
    assert events.last().tokens_after == services.governed_context(session).tokens  # type: ignore[union-attr]


def test_a_figure_after_is_filled_in_once(alice: Any) -> None:
    session = agentic_session(alice, turns=2)
    event = records.audit(session, alice, "pin", tokens_before=10)
    event.measured_after(20)
    event.measured_after(30)
    event.refresh_from_db()
    assert event.tokens_after == 20
