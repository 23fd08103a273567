"""The queue: what runs on a worker, and when it is put there.

Each task takes ids, not objects, so it can be retried after a restart. Work is queued on what
the services report (``sessions.events``): a compaction job that waits for a worker, and after
an append the session's settle run (its automatic-compaction check and its snapshot).
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from celery import Task, current_app, shared_task
from django.core.cache import cache
from django.dispatch import receiver
from django.utils import timezone

from sessions import events, services, telemetry
from sessions.jobs.compaction import run_job, sweep
from sessions.models import AgentSession, CompactionJob, Message
from sessions.services.governed import refresh_snapshot

log = logging.getLogger(__name__)


@shared_task(acks_late=True)
def recount_session_tokens(session_id: str) -> dict[str, Any]:
    """Recount a session's tokens and push the new meter to everyone watching it."""
    session = AgentSession.objects.get(pk=session_id)
    totals = services.recount_tokens(session)
    return {
        "session": session_id,
        "messages": totals.messages,
        "tokens": totals.tokens,
        "encoding": totals.encoding,
        "recounted": totals.recounted,
    }


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_compaction(self: Task[Any, Any], job_id: str) -> str:
    """One delivery of a compaction job (see ``sessions.jobs.compaction``). The message is
    acknowledged only once the job is finished, retried or found taken: a worker killed
    mid-job leaves it for the next delivery or the sweeper. Its headers carry the trace
    context of whoever queued it."""
    return run_job(job_id, self.request.headers)


@shared_task(ignore_result=True)
def sweep_jobs() -> dict[str, int]:
    """Re-queue compaction jobs whose worker died or whose broker message was lost."""
    return sweep()


@shared_task(ignore_result=True)
def settle_session(session_id: str, auto_compact: bool) -> None:
    """After appends: check automatic compaction and store the snapshot a fresh process reads
    (``settle_later``)."""
    settle(session_id, auto_compact)


@receiver(events.job_ready)
def queue_job(sender: object, job: CompactionJob, countdown: float, **kwargs: Any) -> None:
    """Send the broker message that wakes a worker for ``job``; a broker that is down is
    logged, not raised: the sweeper sends it again later."""
    CompactionJob.objects.filter(pk=job.pk).update(dispatched_at=timezone.now())
    try:
        run_compaction.apply_async(
            args=(str(job.pk),), countdown=countdown, headers=telemetry.carrier()
        )
    except Exception as error:  # the broker is unreachable: the row stays queued
        log.warning("could not queue compaction job %s (%s); the sweeper will", job.pk, error)


@receiver(events.messages_appended)
def settle_after_append(
    sender: object,
    session: AgentSession,
    totals: services.TokenTotals,
    auto_compact: bool,
    **kwargs: Any,
) -> None:
    # The whole log is an upper bound of what the model sees: a log below the soft threshold
    # and too short for a stretch the window could leave out calls for no compaction, and the
    # check costs nothing more.
    settle_later(
        session,
        auto_compact=auto_compact and services.may_be_due(session, totals.tokens, totals.messages),
    )


@receiver(events.snapshot_stale)
def refresh_snapshot_later(sender: object, session: AgentSession, **kwargs: Any) -> None:
    settle_later(session, auto_compact=False)


# --- settling a session after appends ------------------------------------------------------------

SNAPSHOT_QUIET_SECONDS = 5.0
"""A session's snapshot is refreshed once no message has come for this long. A snapshot serves
a process that comes to the session later (a page opened, an agent resuming); while the session
is busy the processes serving it carry their own state over, and a snapshot refreshed between
two appends would be stale before anyone read it."""


def settle_later(session: AgentSession, *, auto_compact: bool = True) -> None:
    """After an append: check automatic compaction (``auto_compact``: the session may be past
    its soft threshold) and refresh the session's snapshot.

    Neither is needed for the append's answer, and together they cost more than the append
    itself, so with a worker they run there, at most one pending run per session (and kind):
    the appends that come while one waits are settled by it. A compaction check runs at once,
    a snapshot refresh once the session is quiet (``SNAPSHOT_QUIET_SECONDS``). Without a
    worker (jobs run in-process) only the compaction check runs, here. A failure never turns
    the committed append into an error.
    """
    pk = str(session.pk)
    try:
        if current_app.conf.task_always_eager:
            if auto_compact:
                services.auto_compact(session)
        elif cache.add(key := settle_key(pk, auto_compact), 1, timeout=60):
            delay = 0 if auto_compact else SNAPSHOT_QUIET_SECONDS
            try:
                settle_session.apply_async(args=(pk, auto_compact), countdown=delay)
            except Exception:
                cache.delete(key)  # not pending after all: the next append asks again
                raise
    except Exception:  # the append is committed; the next one settles the session instead
        log.exception("settling session %s after an append failed", pk)


def settle_key(session_id: str, auto_compact: bool) -> str:
    """The cache key that says a settle run of the session is pending."""
    return f"settle:{session_id}:{int(auto_compact)}"


def settle(session_id: str, auto_compact: bool) -> None:
    """A worker's settle run (``settle_later``): what the session is now, not at the append."""
    key = settle_key(session_id, auto_compact)
    if not auto_compact and (busy := _seconds_to_quiet(session_id)) > 0:
        # Still pending: the appends meanwhile keep joining this run, which looks again later.
        cache.touch(key, timeout=60)
        countdown = min(busy, SNAPSHOT_QUIET_SECONDS)  # bounded whatever the clocks say
        settle_session.apply_async(args=(session_id, auto_compact), countdown=countdown)
        return
    # First: an append from here on asks for another run rather than joining this one.
    cache.delete(key)
    session = AgentSession.objects.filter(pk=session_id).first()
    if session is None:
        return
    if auto_compact:
        services.auto_compact(session)
    refresh_snapshot(session)


def _seconds_to_quiet(session_id: str) -> float:
    """How long until the session has had no new message for ``SNAPSHOT_QUIET_SECONDS``."""
    newest = (
        Message.objects.filter(session_id=UUID(session_id))
        .order_by("-seq")
        .values_list("created_at", flat=True)
        .first()
    )
    if newest is None:
        return 0.0
    return SNAPSHOT_QUIET_SECONDS - (timezone.now() - newest).total_seconds()
