"""Automatic compaction: a session past its soft threshold is compacted in the background,
and a session that automatic runs cannot bring under it is stopped, saying why, until someone
resumes it."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ctxhub.governance import Policy
from sessions.history import effective_tokens
from sessions.models import (
    AgentSession,
    AuditEvent,
    CompactionJob,
    JobStatus,
)
from sessions.services.compaction import active_job, request_compaction
from sessions.services.errors import Conflict
from sessions.services.governed import session_policy
from sessions.services.limits import stored_limits
from sessions.services.records import audit

RUNAWAY_RUNS = 3
"""Automatic runs in a row that leave the session above its soft threshold before it stops."""


def soft_threshold(session: AgentSession, policy: Policy | None = None) -> int:
    """Effective-history tokens past which the session is compacted in the background (see
    ``sessions.services.limits``)."""
    return stored_limits(session, policy).soft_threshold


def _ineffective(job: CompactionJob, threshold: int) -> bool:
    if job.status == JobStatus.FAILED or job.outcome in ("nothing_to_compact", "refused"):
        return True
    after = job.result.get("tokens_after")
    return not isinstance(after, int) or after >= threshold


def auto_compact(session: AgentSession) -> CompactionJob | None:
    """Queue a compaction if the effective history passed the soft threshold and none runs.

    After ``RUNAWAY_RUNS`` automatic runs in a row that did not bring the session under its
    threshold (failed, refused, or not shrunk enough) automatic compaction stops for the
    session and says why (``auto_compaction_paused``) until someone resumes it.
    """
    policy = session_policy(session)
    if not policy.compaction.auto:
        return None
    paused = AgentSession.objects.values_list("auto_compaction_paused", flat=True).get(
        pk=session.pk
    )
    if paused:
        return None
    threshold = soft_threshold(session, policy)
    tokens = effective_tokens(session)
    if tokens < threshold or active_job(session) is not None:
        return None
    # Runs before someone last resumed automatic compaction do not count again.
    resumed = (
        AuditEvent.objects.filter(session=session, verb="auto_compaction_resumed")
        .order_by("-created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    runs = CompactionJob.objects.filter(session=session)
    if resumed is not None:
        runs = runs.filter(created_at__gt=resumed)
    recent = list(runs.order_by("-created_at")[:RUNAWAY_RUNS])
    if len(recent) == RUNAWAY_RUNS and all(
        j.trigger == "auto" and _ineffective(j, threshold) for j in recent
    ):
        reason = (
            f"stopped after {RUNAWAY_RUNS} automatic compactions in a row left the session "
            f"above its soft threshold of {threshold} tokens ({tokens} now)"
        )
        with transaction.atomic():
            AgentSession.objects.filter(pk=session.pk).update(auto_compaction_paused=reason)
            audit(session, None, "auto_compaction_paused", tokens_before=tokens,
                  tokens_after=tokens, reason=reason)  # fmt: skip
        session.auto_compaction_paused = reason
        return None
    try:
        return request_compaction(session, trigger="auto").job
    except Conflict:  # another request won the race: it runs, which is what was wanted
        return None


def resume_auto_compaction(session: AgentSession, *, actor: Any = None) -> None:
    """Let automatic compaction run again for a session it stopped for."""
    with transaction.atomic():
        AgentSession.objects.filter(pk=session.pk).update(auto_compaction_paused="")
        audit(session, actor, "auto_compaction_resumed", tokens_before=None, tokens_after=None)
    session.auto_compaction_paused = ""
