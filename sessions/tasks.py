"""Background jobs. Each takes ids, not objects, so it can be retried after a restart."""

from __future__ import annotations

from typing import Any

from ctxhub.celery import app
from sessions import services
from sessions.models import AgentSession


@app.task(acks_late=True)
def recount_session_tokens(session_id: str) -> dict[str, Any]:
    """Recount a session's tokens and push the new meter to everyone watching it."""
    session = AgentSession.objects.get(pk=session_id)
    totals = services.recount_tokens(session)
    return {"session": session_id, "messages": totals.messages, "tokens": totals.tokens}


@app.task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_compaction(job_id: str) -> str:
    """One delivery of a compaction job (see ``sessions.jobs.compaction``). The message is
    acknowledged only once the job is finished, retried or found taken: a worker killed
    mid-job leaves it for the next delivery or the sweeper."""
    from sessions.jobs.compaction import run_job

    return run_job(job_id)


@app.task(ignore_result=True)
def sweep_jobs() -> dict[str, int]:
    """Re-queue compaction jobs whose worker died or whose broker message was lost."""
    from sessions.jobs.compaction import sweep

    return sweep()


@app.task(ignore_result=True)
def settle_session(session_id: str, auto_compact: bool) -> None:
    """After appends: check automatic compaction and store the snapshot a fresh process reads
    (``sessions.services.log.settle_later``)."""
    from sessions.services.log import settle

    settle(session_id, auto_compact)
