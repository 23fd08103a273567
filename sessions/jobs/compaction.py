"""The compaction job: claim, summarise, write the record, or retry, or fail with the reason.

The job row is the truth; a broker message only says "look at job X". So a message delivered
twice, a worker killed mid-job or a Redis that lost its queue change nothing but timing:

* ``claim`` takes the job in a row lock, counting the delivery; a job already done, or running
  with a fresh heartbeat elsewhere, is left alone. After ``CTXHUB_JOB_MAX_DELIVERIES`` claims that
  never finished (each killed its worker) the job is failed instead of run again; a delivery
  that ended in a retry finished, and counts against ``CTXHUB_JOB_MAX_RETRIES`` only.
* While it runs, a thread beats ``heartbeat_at``; ``sweep`` re-queues a running job whose beat
  stopped (its worker died) and a queued job whose message went missing.
* The record is written in one transaction, and only if the session's records are still those
  the summary was made from (appends after the summarised range are fine). Otherwise an
  automatic job plans again on the new state, and a requested one fails saying why.
* Transient summariser errors (429, 5xx, timeouts, connection) are retried with backoff, waiting
  at least what the provider's Retry-After asked; other summariser errors fall back to the
  engine's marker, as ``compact`` does.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelRateLimitError,
    ModelRequestTimeout,
    ModelServerError,
    ModelUnavailableError,
)
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from ctxhub.governance import Compacted, CompactionReport, Policy, compact, resolve_model
from ctxhub.governance.tokens import tokenizer_for
from sessions import events, telemetry
from sessions.history import effective_history
from sessions.models import AgentSession, Compaction, CompactionJob, JobStatus
from sessions.services.compaction import (
    SessionState,
    keep_threshold,
    replacement_for,
    session_state,
)
from sessions.services.costs import compaction_costs
from sessions.services.governed import session_window
from sessions.services.records import (
    audit,
    bump_revision,
    governed_tokens,
    lock_session,
    measure_after,
)
from sessions.services.tools import session_tools

log = logging.getLogger(__name__)

TRANSIENT = (
    ModelRateLimitError,
    ModelUnavailableError,
    ModelServerError,
    ModelConnectionError,
    ModelRequestTimeout,
    TimeoutError,
)
MAX_BACKOFF_SECONDS = 3600.0


class Transient(Exception):
    """The summariser failed in a way worth retrying, after ``retry_after`` seconds if known."""

    def __init__(self, reason: str, retry_after: float | None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class ObservedModel(WrapperModel):
    """The summariser, watched: a transient error is remembered before ``compact`` falls back."""

    def __init__(self, wrapped: Any) -> None:
        super().__init__(wrapped)
        self.transient: BaseException | None = None

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        try:
            return await super().request(messages, model_settings, model_request_parameters)
        except TRANSIENT as error:
            self.transient = error
            raise


# --- claiming ------------------------------------------------------------------------------------


def _stale_before() -> Any:
    return timezone.now() - timedelta(seconds=settings.CTXHUB_JOB_STALE_SECONDS)


def claim(job_id: str) -> CompactionJob | None:
    """Take the job for this worker, or None when it is finished or being worked on."""
    with transaction.atomic():
        job = CompactionJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status in (JobStatus.DONE, JobStatus.FAILED):
            return None
        now = timezone.now()
        if job.status == JobStatus.RUNNING and (
            job.heartbeat_at is not None and job.heartbeat_at > _stale_before()
        ):
            return None
        if job.run_after is not None and job.run_after > now + timedelta(seconds=1):
            return None  # an early duplicate of a retry: the retry's own message comes later
        if _killed(job) >= settings.CTXHUB_JOB_MAX_DELIVERIES:
            _finish(job, JobStatus.FAILED, error=_killed_reason(job))
            return None
        job.status = JobStatus.RUNNING
        job.deliveries += 1
        job.started_at = job.started_at or now
        job.heartbeat_at = now
        job.save(update_fields=["status", "deliveries", "started_at", "heartbeat_at"])
    return job


def _killed(job: CompactionJob) -> int:
    """Deliveries of the job that never finished. Every delivery is counted when claimed; one
    that ended in a retry (the summariser failed in a way worth retrying) did finish, and is
    counted against ``CTXHUB_JOB_MAX_RETRIES`` instead."""
    return job.deliveries - job.retries


def _killed_reason(job: CompactionJob) -> str:
    return (
        f"gave up after {_killed(job)} attempts that never finished: each one ended with its "
        "worker (killed, or out of memory)"
    )


def _finish(job: CompactionJob, status: str, *, outcome: str = "", error: str = "") -> None:
    job.status = status
    job.outcome = outcome or job.outcome
    job.error = error
    job.finished_at = timezone.now()
    job.save(update_fields=["status", "outcome", "error", "finished_at"])
    stage = "done" if status == JobStatus.DONE else "failed"
    events.send_on_commit(events.job_progressed, job=job, stage=stage, data={})


class Heartbeat:
    """A thread that beats the job's ``heartbeat_at`` while the job works, and reports the
    progress events the summariser's event loop posts (that loop must not block on the
    database or the channel layer)."""

    _STOP = object()

    def __init__(self, job: CompactionJob) -> None:
        self._job = job
        self._events: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{job.pk}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._events.put(self._STOP)
        self._thread.join()

    def post(self, stage: str, **data: Any) -> None:
        self._events.put((stage, data))

    def flush(self) -> None:
        """Wait until every posted event is reported, so later ones arrive after them."""
        self._events.join()

    def _run(self) -> None:
        try:
            while True:
                try:
                    event = self._events.get(timeout=settings.CTXHUB_JOB_HEARTBEAT_SECONDS)
                except queue.Empty:
                    CompactionJob.objects.filter(pk=self._job.pk, status=JobStatus.RUNNING).update(
                        heartbeat_at=timezone.now()
                    )
                    continue
                try:
                    if event is self._STOP:
                        return
                    stage, data = event
                    progress(self._job, stage, **data)
                finally:
                    self._events.task_done()
        finally:
            connection.close()


def progress(job: CompactionJob, stage: str, **data: Any) -> None:
    """Record and push a progress event (queued, planning, summarising, writing, ...)."""
    event = {"stage": stage, **data}
    CompactionJob.objects.filter(pk=job.pk).update(progress=event, heartbeat_at=timezone.now())
    job.progress = event
    events.send(events.job_progressed, job=job, stage=stage, data=data)


# --- running -------------------------------------------------------------------------------------


def run_job(job_id: str, trace_headers: Mapping[str, Any] | None = None) -> str:
    """The body of the Celery task: run one delivery of a job; what became of it. Its span
    continues the trace of whoever queued it, when ``trace_headers`` carry one."""
    with telemetry.compaction_job(job_id, trace_headers) as span:
        job = claim(job_id)
        outcome = "skipped" if job is None else _deliver(job)
        telemetry.job_finished(span, outcome, job)
    return outcome


def _deliver(job: CompactionJob) -> str:
    try:
        with Heartbeat(job) as heartbeat:
            return _run(job, heartbeat)
    except Transient as error:
        return _retry(job, str(error), error.retry_after)
    except Exception as error:
        log.exception("compaction job %s failed", job.pk)
        with transaction.atomic():
            _finish(job, JobStatus.FAILED, error=f"{type(error).__name__}: {error}")
        return "failed"
    finally:
        close_old_connections()


def _retry(job: CompactionJob, reason: str, retry_after: float | None) -> str:
    if job.retries >= settings.CTXHUB_JOB_MAX_RETRIES:
        with transaction.atomic():
            _finish(
                job,
                JobStatus.FAILED,
                error=f"the summariser kept failing ({job.retries} retries): {reason}",
            )
        return "failed"
    backoff = min(5.0 * 2**job.retries, MAX_BACKOFF_SECONDS)
    delay = min(retry_after, MAX_BACKOFF_SECONDS) if retry_after is not None else backoff
    job.retries += 1
    job.status = JobStatus.QUEUED
    job.run_after = timezone.now() + timedelta(seconds=delay)
    job.error = reason
    job.save(update_fields=["retries", "status", "run_after", "error"])
    progress(job, "retrying", reason=reason, seconds=round(delay, 1), retry=job.retries)
    events.send(events.job_ready, job=job, countdown=delay)
    return "retrying"


@dataclass(frozen=True)
class _Basis:
    """What the summary is made from: the state and the compacted history."""

    state: SessionState
    compacted: Compacted
    messages: list[ModelMessage]
    history: Any


def _run(job: CompactionJob, heartbeat: Heartbeat) -> str:
    session = AgentSession.objects.get(pk=job.session_id)
    telemetry.job_claimed(job, session)
    for _ in range(2):
        basis = _summarise(job, session, heartbeat)
        if basis is None:
            return "failed"
        report = basis.compacted.report
        heartbeat.flush()
        if report.outcome in ("nothing_to_compact", "refused"):
            with transaction.atomic():
                # What stays, for the sentence saying why nothing was written.
                job.result = {
                    "tokens_before": report.tokens_before,
                    "kept": report.kept,
                    "summarised": report.covered_before,
                }
                job.save(update_fields=["result"])
                _finish(job, JobStatus.DONE, outcome=report.outcome, error=report.error or "")
            return report.outcome
        heartbeat.flush()
        progress(job, "writing")
        with telemetry.compaction_step(telemetry.COMPACTION_WRITE) as span:
            written = _write(job, session, basis)
            # None: the session's records changed meanwhile, and the job plans again.
            span.set_attribute("ctxhub.compaction.written", written not in (None, "failed"))
        if written is not None:
            return written
    with transaction.atomic():
        _finish(job, JobStatus.FAILED, error="the session kept changing while it was summarised")
    return "failed"


def _planned_state(job: CompactionJob, session: AgentSession) -> SessionState | None:
    """The state to summarise: the one requested, or (automatic jobs) the current one."""
    planned = SessionState(job.plan["revision"], job.plan["last_seq"], tuple(job.plan["pins"]))
    current = session_state(session)
    if (current.revision, current.pins) == (planned.revision, planned.pins):
        return planned
    if job.trigger == "auto":
        job.plan = {**job.plan, **current.as_dict()}
        CompactionJob.objects.filter(pk=job.pk).update(plan=job.plan)
        return current
    with transaction.atomic():
        _finish(
            job,
            JobStatus.FAILED,
            error=(
                "the session's records changed after the request (a clear, a compaction, an "
                "undo or a pin): preview and compact again"
            ),
        )
    return None


def _summarise(job: CompactionJob, session: AgentSession, heartbeat: Heartbeat) -> _Basis | None:
    with telemetry.compaction_step(telemetry.COMPACTION_PLAN) as span:
        state = _planned_state(job, session)
        if state is None:
            return None
        progress(job, "planning")
        history = effective_history(session, upto_seq=state.last_seq)
        messages = list(history.messages)
        # What the session's next request carries now, as its own Governor sends it.
        sent_now = governed_tokens(session)
        span.set_attributes(
            {
                "ctxhub.compaction.revision": state.revision,
                "ctxhub.compaction.last_seq": state.last_seq,
                "ctxhub.messages.before": len(messages),
                "ctxhub.tokens.before": history.tokens,
            }
        )
    summarizer = ObservedModel(resolve_model(job.summarizer))

    def on_chunk(round_number: int, done: int, total: int) -> None:
        heartbeat.post("summarising", round=round_number, chunk=done, chunks=total)

    with telemetry.compaction_step(telemetry.COMPACTION_SUMMARISE) as span:
        try:
            compacted = asyncio.run(
                asyncio.wait_for(
                    compact(
                        messages,
                        Policy.model_validate(job.policy),
                        # Each of its calls a span of its own under this one, when tracing.
                        summarizer=telemetry.instrumented(summarizer),
                        model=session.model,
                        pinned=history.positions(state.pins),
                        focus=job.focus or None,
                        keep=keep_threshold(history, job.plan.get("keep_from")),
                        on_chunk=on_chunk,
                        tool_tokens=session_tools(session).total,
                        sent_now=sent_now,
                    ),
                    timeout=settings.CTXHUB_JOB_TIME_LIMIT,
                )
            )
        except TimeoutError:
            raise Transient(
                f"the summariser took longer than {settings.CTXHUB_JOB_TIME_LIMIT} s", None
            ) from None
        telemetry.summarised(span, job.summarizer, compacted.report)
    if compacted.report.outcome == "fallback" and summarizer.transient is not None:
        # The marker stood in because of an error worth retrying: retry instead of writing it.
        error = summarizer.transient
        retry_after = error.retry_after if isinstance(error, ModelAPIError) else None
        raise Transient(f"{type(error).__name__}: {error}", retry_after)
    return _Basis(state, compacted, messages, history)


def _write(job: CompactionJob, session: AgentSession, basis: _Basis) -> str | None:
    """Write the compaction if the records are unchanged; None to plan again."""
    compacted = basis.compacted
    tokenizer = tokenizer_for(session.model)
    report = compacted.report
    replacement = replacement_for(
        basis.history, basis.messages, compacted.messages, tokenizer, report.summarized_indices
    )
    with transaction.atomic():
        lock_session(session)
        current = session_state(session)
        if (current.revision, current.pins) != (basis.state.revision, basis.state.pins):
            if job.trigger != "auto":
                _finish(
                    job,
                    JobStatus.FAILED,
                    error=(
                        "the session's records changed while it was summarised (a clear, a "
                        "compaction, an undo or a pin): nothing was written"
                    ),
                )
                return "failed"
            job.plan = {**job.plan, **current.as_dict()}
            job.save(update_fields=["plan"])
            return None
        superseded = (
            Compaction.objects.filter(
                session=session,
                undone_at__isnull=True,
                first_seq__lte=replacement.last_seq,
                last_seq__gte=replacement.first_seq,
            )
            .order_by("-created_at")
            .first()
        )
        record = Compaction.objects.create(
            session=session,
            job=job,
            first_seq=replacement.first_seq,
            last_seq=replacement.last_seq,
            replacement=replacement.items,
            summary=compacted.summary or "",
            summary_message=replacement.summary_message,
            ledger=[item.model_dump(mode="json") for item in report.ledger],
            outcome=report.outcome,
            error=report.error or "",
            summarizer=job.summarizer,
            policy=job.policy,
            focus=job.focus,
            summarized_seqs=replacement.summarized_seqs,
            tokens_before=report.tokens_before,
            tokens_after=report.tokens_after,
            messages_before=report.messages_before,
            messages_after=report.messages_after,
            supersedes=superseded,
            actor=job.actor,
            started_at=job.started_at,
            finished_at=timezone.now(),
        )
        bump_revision(session)
        job.result = _result(job, session, record, report)
        job.save(update_fields=["result"])
        _finish(job, JobStatus.DONE, outcome=report.outcome, error=report.error or "")
        event = audit(
            session,
            job.actor,
            "compact",
            tokens_before=report.sent_before,
            compaction=record.pk,
            job=str(job.pk),
            trigger=job.trigger,
            first_seq=replacement.first_seq,
            last_seq=replacement.last_seq,
            summarized=len(replacement.summarized_seqs),
        )
    events.send_on_commit(events.records_changed, session=session)
    measure_after(session, event)
    return report.outcome


def _result(
    job: CompactionJob, session: AgentSession, record: Compaction, report: CompactionReport
) -> dict[str, Any]:
    """What a job that wrote its compaction says: what the model gets, the next request before
    and after (tool definitions included) against the low-water mark, the effective history,
    how well the facts held, and what it cost and saves."""
    return {
        "compaction": record.pk,
        "messages": report.summarized_messages,
        "unseen": min(report.hidden_messages, report.summarized_messages),
        "sent_before": report.sent_before,
        "sent_after": report.sent_after,
        "sent_after_max": report.sent_after_max,
        "low_water": report.low_water,
        "window": session_window(session),
        "tokens_before": report.tokens_before,
        "tokens_after": report.tokens_after,
        # How well the compacted history held the summarised facts before the ledger's
        # missing ones were appended (see ``ctxhub.governance.ledger.reconcile``).
        "facts": len(report.ledger),
        "facts_in_summary": len(report.kept_by_summarizer),
        "facts_left_out": report.ledger_omitted,
        "fact_score": report.fact_score,
        "missing_facts": report.missing_facts,
        **compaction_costs(
            session, job.summarizer, report, saved_tokens=report.sent_before - report.sent_after
        ),
    }


# --- the sweeper -------------------------------------------------------------------------------


def sweep() -> dict[str, int]:
    """Re-queue jobs whose worker died (stale heartbeat) or whose message was lost (queued, not
    started, its message sent long ago); fail those past their deliveries."""
    stale = _stale_before()
    now = timezone.now()
    requeued = failed = 0
    dead = CompactionJob.objects.filter(status=JobStatus.RUNNING, heartbeat_at__lt=stale)
    lost = CompactionJob.objects.filter(status=JobStatus.QUEUED, dispatched_at__lt=stale).exclude(
        run_after__gt=now
    )
    undispatched = CompactionJob.objects.filter(
        status=JobStatus.QUEUED, dispatched_at__isnull=True, created_at__lt=stale
    )
    candidates = [
        *dead.values_list("pk", flat=True),
        *lost.values_list("pk", flat=True),
        *undispatched.values_list("pk", flat=True),
    ]
    for job_id in candidates:
        with transaction.atomic():
            job = CompactionJob.objects.select_for_update().filter(pk=job_id).first()
            if job is None or job.status not in (JobStatus.RUNNING, JobStatus.QUEUED):
                continue
            if job.status == JobStatus.RUNNING and (
                job.heartbeat_at is None or job.heartbeat_at >= stale
            ):
                continue
            if _killed(job) >= settings.CTXHUB_JOB_MAX_DELIVERIES:
                _finish(job, JobStatus.FAILED, error=_killed_reason(job))
                failed += 1
                continue
            job.status = JobStatus.QUEUED
            job.save(update_fields=["status"])
            events.send_on_commit(events.job_ready, job=job, countdown=0)
            requeued += 1
    return {"requeued": requeued, "failed": failed}
