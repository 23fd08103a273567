"""A real Celery worker with tracing configured: a compaction job's spans go from the worker to
a collector over OTLP/HTTP, in the trace of the request that queued it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from config.celery import app as celery_app
from sessions import services, telemetry
from sessions.models import Compaction, CompactionJob, JobStatus
from tests.conftest import ARTIFACTS, required_env
from tests.factories import make_session
from tests.processes import celery_worker
from tests.telemetry.conftest import migration
from tests.tracing import OtlpReceiver, recorded_spans

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_workers_job_spans_reach_the_collector_in_the_queuing_trace(alice: Any) -> None:
    required_env("REDIS_URL")
    session = make_session(alice, model="openai:gpt-4o")
    services.append_messages(session, migration(), auto_compact=False)
    celery_app.conf.task_always_eager = False
    with (
        OtlpReceiver() as collector,
        celery_worker(
            ARTIFACTS / "logs" / "celery-traced-worker.log",
            # Batches sent every 50 ms rather than every 5 s.
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "50"},
        ),
        recorded_spans(),
    ):
        with telemetry.tracer().start_as_current_span("an agent asks") as asking:
            job = services.request_compaction(session, focus="db-west").job
        deadline = time.monotonic() + 60
        while CompactionJob.objects.get(pk=job.pk).status != JobStatus.DONE:
            assert time.monotonic() < deadline, "the job did not finish"
            time.sleep(0.1)
        received = collector.wait_for(
            lambda spans: (
                {s.name for s in spans} >= {telemetry.COMPACTION_WRITE, telemetry.COMPACTION}
            )
        )

    asked = asking.get_span_context()
    by_name = {span.name: span for span in received}
    span = by_name[telemetry.COMPACTION]
    assert span.trace_id == f"{asked.trace_id:032x}"
    assert span.parent_span_id == f"{asked.span_id:016x}"
    assert span.resource["ctxhub.process"] == "worker"
    assert span.attributes["ctxhub.job.id"] == str(job.pk)
    assert span.attributes["ctxhub.compaction.id"] == Compaction.objects.get().pk
    for step in (
        telemetry.COMPACTION_PLAN,
        telemetry.COMPACTION_SUMMARISE,
        telemetry.COMPACTION_WRITE,
    ):
        assert by_name[step].parent_span_id == span.span_id
