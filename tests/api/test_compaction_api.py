"""Compaction through the API, with the Python client, a real server and a real worker: a
600-message session at 64k compacts (a summary in place of what the window dropped), what the
preview, the job and the context say agrees with what is sent, and undo gives back the context
from before."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessagesTypeAdapter

from ctxhub.client import Hub, Job
from ctxhub.governance import is_summary
from sessions.api.keys import create_key
from sessions.figures import compaction_outcome
from tests.conftest import ARTIFACTS
from tests.engine.compact_builders import generated_session
from tests.processes import asgi_server, celery_worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[str]:
    with (
        asgi_server(ARTIFACTS / "logs" / "web-compaction-api.log") as url,
        celery_worker(ARTIFACTS / "logs" / "worker-compaction-api.log"),
    ):
        yield url


@pytest.fixture
def key(alice: Any) -> str:
    return create_key(alice, name="compaction", scopes=["read", "write", "govern"])[1]


def finished(hub: Hub, job: Job) -> Job:
    deadline = time.monotonic() + 120
    while job.active and time.monotonic() < deadline:
        time.sleep(0.2)
        job = hub.job(job.id)
    assert not job.active, job
    return job


def test_a_600_message_session_at_64k_compacts_and_undo_gives_its_context_back(
    server: str, key: str
) -> None:
    history = generated_session(600)
    with Hub(server, key) as hub:
        session = hub.create_session(
            "Six hundred messages",
            model="openai:gpt-4o",
            policy={"context_window": 64_000, "compaction": {"auto": False}},
        )
        for start in range(0, len(history), 200):
            hub.append(session.id, history[start : start + 200])
        before = hub.context(session.id)
        sent_now = before.report.tokens_after + before.report.tool_definition_tokens
        # The window drops or cuts a third of the log: a compaction gives the model a summary
        # of it.
        preview = hub.preview_compaction(session.id)
        assert not preview.nothing_to_compact
        assert not preview.refused
        assert preview.sent_now == sent_now
        assert preview.unseen > 150
        assert preview.message.startswith(
            f"the model gets a summary of {preview.messages:,} messages, "
            f"{preview.unseen:,} of which it no longer saw in full; next request "
            f"{sent_now:,} → at most {preview.sent_after_max:,} tokens"
        )

        job = finished(hub, hub.compact(session.id, expected=preview.fingerprint))
        assert (job.status, job.outcome) == ("done", "summarized"), job.error
        result = job.result
        after = hub.context(session.id)
        assert result["sent_before"] == sent_now
        assert result["sent_after"] == (
            after.report.tokens_after + after.report.tool_definition_tokens
        )
        # The preview's promise holds, ledger included.
        assert result["sent_after"] <= preview.sent_after_max
        assert result["sent_after"] <= max(result["low_water"], sent_now)
        assert job.message == f"compacted: {compaction_outcome(result)}"
        assert job.message.startswith(
            f"compacted: the model gets a summary of {result['messages']:,} messages"
        )
        assert sum(1 for m in after.messages if is_summary(m)) == 1

        # Compacting again finds nothing new before the kept tail.
        again = hub.preview_compaction(session.id)
        assert again.nothing_to_compact
        assert again.message.startswith("nothing to compact")

        hub.undo_compaction(result["compaction"])
        restored = hub.context(session.id)
    dump = ModelMessagesTypeAdapter.dump_json
    assert dump(restored.messages) == dump(before.messages)
    assert restored.report.tokens_after == before.report.tokens_after
