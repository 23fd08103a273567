"""A job enqueued on a real Redis broker and run by a real Celery worker process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from asgiref.sync import async_to_sync

from config.celery import app as celery_app
from ctxhub.governance.facts import message_facts
from ctxhub.governance.tokens import tokenizer_for
from sessions import live, services, tasks
from sessions.models import Message
from tests.conftest import ARTIFACTS, required_env
from tests.factories import make_session
from tests.messages import tool_result, user
from tests.processes import celery_worker
from tests.pushes import listening_layer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker() -> Iterator[None]:
    required_env("REDIS_URL")
    celery_app.conf.task_always_eager = False
    with celery_worker(ARTIFACTS / "logs" / "celery-worker.log"):
        yield


def test_a_worker_recounts_tokens_and_pushes_the_meter(worker: None, alice: object) -> None:
    session = make_session(alice, model="openai:gpt-4o")
    services.append_messages(
        session, [user("Why is the build red?"), tool_result("build", "error: " * 300, id="c1")]
    )
    # The model changes: the cached counts (o200k) are now stale for gpt-4 (cl100k).
    session.model = "openai:gpt-4"
    session.save()
    layer = listening_layer()
    assert type(layer).__name__ == "RedisChannelLayer"
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(live.mark_watched)(session.pk)  # as an open page's socket does
    async_to_sync(layer.group_add)(session.group_name, channel)

    outcome = tasks.recount_session_tokens.delay(str(session.pk)).get(timeout=60)

    rows = list(Message.objects.filter(session=session))
    expected = sum(message_facts(r.message, tokenizer_for("openai:gpt-4")).tokens for r in rows)
    assert {r.encoding for r in rows} == {"cl100k_base"}
    assert outcome == {
        "session": str(session.pk),
        "messages": 2,
        "tokens": expected,
        "encoding": "cl100k_base",
        "recounted": 2,  # both counts were o200k's
    }
    event = async_to_sync(layer.receive)(channel)
    assert f'<strong data-testid="token-total">{expected}</strong>' in event["html"]
    assert (
        f"Recounted 2 messages with <code>cl100k_base</code>: {expected:,} tokens; "
        "2 counts changed" in event["html"]
    )
