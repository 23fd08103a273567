"""Automatic compaction: a session is compacted in the background past its soft threshold, and
once the model stops seeing a stretch of messages no summary covers (the window left them out,
or masking hid most of their results), so it reads a summary of them rather than a gap.

A compaction rewrites the request, which costs a prompt-cache write; one for what the window
hid waits until that costs nothing more: the Governor acts on the next request anyway, or the
provider's cache has gone cold (no request for its TTL). It is rate-limited too. A session
that soft-threshold runs cannot bring under the threshold is stopped, saying why, until
someone resumes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from ctxhub.governance import Policy
from sessions.history import effective_tokens
from sessions.models import (
    AgentSession,
    AuditEvent,
    CompactionJob,
    JobStatus,
    SentRequest,
)
from sessions.services.compaction import active_job, request_compaction
from sessions.services.errors import Conflict
from sessions.services.governed import GovernedContext, governed_context, session_policy
from sessions.services.limits import stored_limits
from sessions.services.records import audit
from sessions.services.sending import GOVERNOR_ACTIONS

RUNAWAY_RUNS = 3
"""Automatic runs in a row that leave the session above its soft threshold before it stops."""


def soft_threshold(session: AgentSession, policy: Policy | None = None) -> int:
    """Effective-history tokens past which the session is compacted in the background (see
    ``sessions.services.limits``)."""
    return stored_limits(session, policy).soft_threshold


def may_be_due(session: AgentSession, log_tokens: int, log_messages: int) -> bool:
    """Whether a log of this size could call for an automatic compaction (the whole log is
    an upper bound of what the model sees): past the soft threshold, or long enough for a
    stretch of messages the window could leave out."""
    policy = session_policy(session)
    rules = policy.compaction
    # The count first: the threshold costs two queries, and most logs are past the count.
    return rules.auto and (
        log_messages >= rules.hidden_messages or log_tokens >= soft_threshold(session, policy)
    )


def _ineffective(job: CompactionJob, threshold: int) -> bool:
    if job.status == JobStatus.FAILED or job.outcome in ("nothing_to_compact", "refused"):
        return True
    after = job.result.get("tokens_after")
    return not isinstance(after, int) or after >= threshold


@dataclass(frozen=True, slots=True)
class Hidden:
    """What the next request hides that no summary covers."""

    dropped: int
    """Messages the window leaves out."""
    masked: int
    """Tool results it masks."""
    results: int
    """Tool results no summary covers."""

    def reason(self, policy: Policy) -> str | None:
        """Why this calls for a compaction under ``policy``, in words; None when it does not."""
        rules = policy.compaction
        if self.dropped >= rules.hidden_messages:
            return f"the window leaves out {self.dropped:,} messages no summary covers"
        stretch = self.results >= rules.hidden_messages
        if stretch and self.masked >= rules.masked_share * self.results:
            return (
                f"masking hides {self.masked:,} of the {self.results:,} tool results no "
                "summary covers"
            )
        return None


def hidden(context: GovernedContext) -> Hidden:
    """What a session's next request hides of its log (a summary's own messages aside)."""
    dropped = masked = results = 0
    for message in context.report.messages:
        if context.seq_of(message.index) is None:
            continue  # a summary, a notice: no log message
        if not message.kept:
            dropped += 1
            continue
        for part in message.parts:
            if part.part_kind == "tool-return":
                results += 1
                masked += part.action == "masked"
    return Hidden(dropped, masked, results)


def _cache_cold(session: AgentSession, ttl: int) -> bool:
    """Whether the provider's prompt cache of the session has expired: no request sent within
    ``ttl`` seconds (or none ever: nothing cached to keep)."""
    last = (
        SentRequest.objects.filter(session=session)
        .order_by("-number")
        .values_list("created_at", flat=True)
        .first()
    )
    return last is None or (timezone.now() - last).total_seconds() >= ttl


def _hidden_reason(session: AgentSession, policy: Policy) -> str | None:
    """Why the session is due a compaction for what its next request hides, now that it
    costs no cache write; None when it is not (or not yet)."""
    rules = policy.compaction
    last = (
        CompactionJob.objects.filter(session=session)
        .order_by("-created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    if last is not None and (timezone.now() - last).total_seconds() < rules.min_interval_seconds:
        return None
    context = governed_context(session)
    acts = context.governed.acted in GOVERNOR_ACTIONS
    if not acts and not _cache_cold(session, rules.cache_ttl_seconds):
        return None  # rewriting the request now would cost the session its cached prefix
    reason = hidden(context).reason(policy)
    if reason is None:
        return None
    when = "the Governor acts on the next request" if acts else "the prompt cache has gone cold"
    return f"{reason}, and {when}"


def auto_compact(session: AgentSession) -> CompactionJob | None:
    """Queue a compaction if none runs and the effective history passed the soft threshold,
    or the next request hides a stretch of messages no summary covers (see the module).

    After ``RUNAWAY_RUNS`` soft-threshold runs in a row that did not bring the session under
    its threshold (failed, refused, or not shrunk enough) automatic compaction stops for the
    session and says why (``auto_compaction_paused``) until someone resumes it.
    """
    policy = session_policy(session)
    if not policy.compaction.auto:
        return None
    paused = AgentSession.objects.values_list("auto_compaction_paused", flat=True).get(
        pk=session.pk
    )
    if paused or active_job(session) is not None:
        return None
    threshold = soft_threshold(session, policy)
    tokens = effective_tokens(session)
    if tokens < threshold:
        reason = _hidden_reason(session, policy)
        if reason is None:
            return None
        return _queue(session, HIDDEN, reason)
    # Runs before someone last resumed automatic compaction do not count again.
    resumed = (
        AuditEvent.objects.filter(session=session, verb="auto_compaction_resumed")
        .order_by("-created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    runs = CompactionJob.objects.filter(session=session).exclude(plan__reason=HIDDEN)
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
    detail = f"the effective history passed its soft threshold of {threshold:,} tokens"
    return _queue(session, SOFT_THRESHOLD, detail)


SOFT_THRESHOLD, HIDDEN = "soft_threshold", "hidden"
"""Why an automatic job was queued (its ``plan["reason"]``; ``plan["detail"]`` says it in
words): the soft threshold, or what the window hid."""


def _queue(session: AgentSession, reason: str, detail: str) -> CompactionJob | None:
    try:
        return request_compaction(session, trigger="auto", reason=reason, detail=detail).job
    except Conflict:  # another request won the race: it runs, which is what was wanted
        return None


def resume_auto_compaction(session: AgentSession, *, actor: Any = None) -> None:
    """Let automatic compaction run again for a session it stopped for."""
    with transaction.atomic():
        AgentSession.objects.filter(pk=session.pk).update(auto_compaction_paused="")
        audit(session, actor, "auto_compaction_resumed", tokens_before=None, tokens_after=None)
    session.auto_compaction_paused = ""
