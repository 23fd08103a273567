"""After an append, the session is settled by a worker (its compaction check and snapshot),
with at most one run pending per session: the appends that come meanwhile are settled by it."""

from __future__ import annotations

from typing import Any

import pytest

from config.celery import app as celery_app
from sessions import services, tasks
from sessions.models import GovernedSnapshot
from sessions.tasks import SNAPSHOT_QUIET_SECONDS, settle
from tests.conftest import required_env
from tests.factories import make_session
from tests.messages import user

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Settle runs sent to the broker (none runs: no worker listens here); the pending flag is
    the real one, in Redis."""
    required_env("REDIS_URL")
    celery_app.conf.task_always_eager = False
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        tasks.settle_session, "apply_async", lambda args, countdown: sent.append((*args, countdown))
    )
    return sent


def test_appends_while_a_run_is_pending_are_settled_by_it(
    queued: list[tuple[Any, ...]], alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = make_session(alice)
    for n in range(3):
        services.append_message(session, user(f"step {n}"))
    # Far below the soft threshold: a snapshot refresh only, once the session is quiet.
    assert queued == [(str(session.pk), False, SNAPSHOT_QUIET_SECONDS)]

    monkeypatch.setattr(tasks, "SNAPSHOT_QUIET_SECONDS", 0.0)  # the session has been quiet
    settle(str(session.pk), False)  # the worker's run: the next append asks for another
    assert GovernedSnapshot.objects.filter(session=session).exists()
    services.append_message(session, user("step 3"))
    assert len(queued) == 2
    assert session.messages.count() == 4


def test_a_busy_session_is_looked_at_again_later_not_governed(
    queued: list[tuple[Any, ...]], alice: Any
) -> None:
    session = make_session(alice)
    services.append_message(session, user("step 0"))
    settle(str(session.pk), False)  # a message came a moment ago: the session is busy

    assert not GovernedSnapshot.objects.filter(session=session).exists()
    (_, _, _), (pk, auto_compact, again) = queued
    assert (pk, auto_compact) == (str(session.pk), False)
    assert 0 < again <= SNAPSHOT_QUIET_SECONDS
    # Still pending: appends meanwhile join that run rather than queue another.
    services.append_message(session, user("step 1"))
    assert len(queued) == 2
