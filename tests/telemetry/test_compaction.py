"""A compaction job's spans: the job under the API call that asked for it, its plan, the
summariser's call (with pydantic-ai's spans of it) and the write, carrying what the job
stored."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from opentelemetry.trace import SpanKind

from sessions import services, telemetry
from sessions.api.keys import create_key
from sessions.jobs.compaction import run_job
from sessions.models import Compaction, CompactionJob
from tests.factories import make_session
from tests.telemetry.conftest import migration
from tests.tracing import ancestors, one, parent_of

# The job is queued when the request's transaction commits, and (jobs run in-process here)
# runs there, inside the request.
pytestmark = pytest.mark.django_db(transaction=True)


def test_a_compaction_job_is_a_span_with_plan_summarise_and_write(spans: Any, alice: Any) -> None:
    session = make_session(alice, model="openai:gpt-4o")  # its model's 128,000-token window
    services.append_messages(session, migration(), auto_compact=False)
    key = create_key(alice, name="agent", scopes=["read", "write", "govern"])[1]
    response = Client().post(
        f"/api/v1/sessions/{session.pk}/compactions",
        data={"focus": "db-west"},
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 202

    job = CompactionJob.objects.get()
    record = Compaction.objects.get()
    assert job.status == "done"
    done = spans.get_finished_spans()
    call = one(done, "POST /api/v1/sessions/{session_id}/compactions")
    span = one(done, telemetry.COMPACTION)
    assert span.kind == SpanKind.CONSUMER
    # It continues the trace of the call that queued it (from the task's headers).
    assert parent_of(span, done) is call
    plan, summarise, write = (
        one(done, name)
        for name in (
            telemetry.COMPACTION_PLAN,
            telemetry.COMPACTION_SUMMARISE,
            telemetry.COMPACTION_WRITE,
        )
    )
    assert parent_of(plan, done) is parent_of(summarise, done) is parent_of(write, done) is span
    assert plan.end_time <= summarise.start_time
    assert summarise.end_time <= write.start_time

    attributes = span.attributes
    assert attributes["ctxhub.job.id"] == str(job.pk)
    assert (
        attributes["ctxhub.session.id"] == attributes["gen_ai.conversation.id"] == str(session.pk)
    )
    assert attributes["ctxhub.job.trigger"] == "manual"
    assert attributes["ctxhub.job.delivery"] == 1
    assert attributes["ctxhub.summarizer"] == "offline:extractive"
    assert attributes["ctxhub.job.outcome"] == job.outcome == record.outcome
    assert attributes["ctxhub.job.status"] == "done"
    assert attributes["ctxhub.compaction.id"] == record.pk
    assert attributes["ctxhub.tokens.before"] == record.tokens_before
    assert attributes["ctxhub.tokens.after"] == record.tokens_after
    assert attributes["ctxhub.tokens.sent_before"] == job.result["sent_before"]
    assert attributes["ctxhub.tokens.sent_after"] == job.result["sent_after"]
    assert attributes["ctxhub.tokens.sent_after"] < attributes["ctxhub.tokens.sent_before"]
    assert attributes["ctxhub.compaction.fact_score"] == job.result["fact_score"]

    assert plan.attributes["ctxhub.compaction.last_seq"] == session.messages.count() - 1
    assert plan.attributes["ctxhub.messages.before"] == record.messages_before
    summarised = summarise.attributes
    assert summarised["gen_ai.request.model"] == "extractive"
    assert summarised["ctxhub.compaction.outcome"] == record.outcome
    assert summarised["ctxhub.tokens.before"] == record.tokens_before
    assert summarised["ctxhub.tokens.after"] == record.tokens_after
    assert summarised["ctxhub.messages.after"] == record.messages_after
    assert summarised["ctxhub.compaction.summarized_messages"] > 0
    assert write.attributes["ctxhub.compaction.written"] is True

    # The summariser's own calls, as pydantic-ai traces them, under the summarise span.
    calls = [s for s in done if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert calls
    for model_call in calls:
        assert telemetry.COMPACTION_SUMMARISE in ancestors(model_call, done)
        # What was summarised is left out of them: the parts' kinds only.
        assert '"type":"text"' in model_call.attributes["gen_ai.input.messages"]
        assert "migrated" not in model_call.attributes["gen_ai.input.messages"]

    # Delivered again, the job is found done: a span that says so, and nothing under it.
    spans.clear()
    assert run_job(str(job.pk)) == "skipped"
    (again,) = spans.get_finished_spans()
    assert again.name == telemetry.COMPACTION
    assert again.attributes["ctxhub.job.outcome"] == "skipped"
    assert again.parent is None
