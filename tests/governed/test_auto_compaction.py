"""Automatic compaction when knowledge starts to go: below the soft threshold, a session whose
next request leaves out a stretch of messages no summary covers is compacted in the background,
once that costs no cache write (the prompt cache has gone cold, or the Governor acts anyway),
at most once per interval, and the fleet says why while it runs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from ctxhub.governance import is_summary
from sessions import services
from sessions.figures import job_words
from sessions.history import effective_tokens
from sessions.models import AgentSession, Compaction, CompactionJob, JobStatus, SentRequest
from sessions.services.auto_compaction import hidden
from sessions.services.fleet import fleet
from sessions.services.sending import GOVERNOR_ACTIONS
from tests.factories import make_session
from tests.governed.builders import turn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.smoke]

# A window trigger drops all but the 20 newest messages past 40, long before the history
# nears its budget (small turns): only what the window hides calls for a compaction.
TRIGGERED: dict[str, Any] = {
    "context_window": 16_000,
    "reserved_output_tokens": 500,
    "window": {
        "triggers": [{"kind": "messages", "value": 40}],
        "keep": {"kind": "messages", "value": 20},
    },
}


def hidden_jobs(session: AgentSession) -> list[CompactionJob]:
    return list(CompactionJob.objects.filter(session=session, plan__reason="hidden"))


def test_a_stretch_the_window_leaves_out_is_compacted_once_the_cache_is_cold(alice: Any) -> None:
    session = make_session(alice, policy=TRIGGERED)
    n = 0
    while not hidden_jobs(session):
        services.append_messages(session, turn(n, size=20, calls=1))
        n += 1
        assert n < 30, "no compaction for what the window left out"
    # Below the soft threshold: what the window left out called for it.
    assert effective_tokens(session) < services.soft_threshold(session)
    (job,) = hidden_jobs(session)
    assert (job.trigger, job.status, job.outcome) == ("auto", JobStatus.DONE, "summarized")
    # Nothing was ever sent: no cache to keep.
    assert not SentRequest.objects.filter(session=session).exists()
    assert job.plan["detail"].startswith("the window leaves out ")
    assert job.plan["detail"].endswith(
        "messages no summary covers, and the prompt cache has gone cold"
    )
    record = Compaction.objects.get(job=job)
    context = services.governed_context(session)
    # The model reads a summary where the window's notice was, and nothing is left out now
    # that no summary covers.
    assert sum(1 for m in context.messages if is_summary(m)) == 1
    assert hidden(context).dropped < 20
    assert record.summarized_seqs
    # The fleet says what it did, in the words of its record.
    (row,) = fleet(alice).rows
    assert row.last_compaction == job_words(job)
    assert row.last_compaction.startswith("compacted: the model gets a summary of ")


def test_a_warm_cache_waits_until_the_governor_acts(alice: Any) -> None:
    policy = {**TRIGGERED, "compaction": {"min_interval_seconds": 0}}
    session = make_session(alice, policy=policy)
    for n in range(40):
        services.append_messages(session, turn(n, size=20, calls=1))
        jobs = hidden_jobs(session)
        if jobs:
            # Queued at the append after which the next request acts anyway.
            assert jobs[0].plan["detail"].endswith("and the Governor acts on the next request")
            return
        context = services.governed_context(session)
        # Not queued: either nothing is hidden enough yet, or rewriting the warm cache now
        # would cost a write the Governor would not pay.
        assert context.governed.acted not in GOVERNOR_ACTIONS or hidden(context).dropped < 20
        services.send_context(session)
    pytest.fail("no compaction while the Governor acted")


def test_one_compaction_for_what_was_hidden_per_interval(alice: Any) -> None:
    session = make_session(alice, policy=TRIGGERED)
    n = 0
    while not hidden_jobs(session):
        services.append_messages(session, turn(n, size=20, calls=1))
        n += 1
    for m in range(n, n + 12):  # the window leaves out a new stretch within the interval
        services.append_messages(session, turn(m, size=20, calls=1))
    assert len(hidden_jobs(session)) == 1
    assert hidden(services.governed_context(session)).dropped >= 20
    # Once the interval has passed, the next append compacts again.
    CompactionJob.objects.filter(session=session).update(
        created_at=timezone.now() - timedelta(seconds=601)
    )
    services.append_messages(session, turn(n + 12, size=20, calls=1))
    assert len(hidden_jobs(session)) == 2


def test_automatic_compaction_off_leaves_the_gap(alice: Any) -> None:
    session = make_session(alice, policy={**TRIGGERED, "compaction": {"auto": False}})
    for n in range(20):
        services.append_messages(session, turn(n, size=20, calls=1))
    assert hidden(services.governed_context(session)).dropped >= 20
    assert not CompactionJob.objects.filter(session=session).exists()


def test_the_fleet_says_why_an_automatic_compaction_runs(alice: Any, client: Client) -> None:
    session = make_session(alice, title="Gappy", policy=TRIGGERED)
    detail = (
        "the window leaves out 42 messages no summary covers, and the prompt cache has gone cold"
    )
    CompactionJob.objects.create(
        session=session,
        key="k",
        trigger="auto",
        status=JobStatus.QUEUED,
        plan={"reason": "hidden", "detail": detail},
        policy={},
    )
    (row,) = fleet(alice).rows
    assert (row.status, row.status_detail) == (
        "compacting",
        f"compaction queued (automatic: {detail})",
    )
    client.force_login(alice)
    page = client.get("/").content.decode()
    assert f'data-testid="status-detail">compaction queued (automatic: {detail})<' in page
