"""Compaction jobs on a real Redis broker, run by real Celery worker processes, summarised over
HTTP by a local fake of the OpenAI API: progress, kills, lost messages, retries, idempotency."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from pydantic_ai.messages import ModelMessagesTypeAdapter

from config.celery import app as celery_app
from sessions import live, services, snapshots, tasks
from sessions.history import REMEMBERED, effective_tokens
from sessions.models import AuditEvent, Compaction, CompactionJob, GovernedSnapshot, Message
from sessions.services import governed as governed_module
from sessions.services.governed import wait_for_warm_up
from sessions.services.sending import stored_state
from tests.conftest import ARTIFACTS, required_env
from tests.factories import make_session
from tests.fakes.openai_server import FakeOpenAI, fake_openai  # noqa: F401  (fixture)
from tests.governed.builders import SMALL_POLICY, agentic_session, turn
from tests.processes import OwnRedis, celery_worker
from tests.pushes import listening_layer

pytestmark = pytest.mark.django_db(transaction=True)

SUMMARIZER = "openai-chat:gpt-4o-mini"
SUMMARY = (
    "Goal: fix the failing modules.\nDecisions: patch each module.\n"
    "Current state: every task so far is done."
)
LOGS = ARTIFACTS / "logs"


def worker_env(fake: FakeOpenAI, redis_url: str | None = None) -> dict[str, str]:
    env = {
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_API_KEY": "test-key",
        "CTXHUB_JOB_STALE_SECONDS": "3",
        "CTXHUB_JOB_HEARTBEAT_SECONDS": "1",
        "CTXHUB_SWEEP_SECONDS": "1",
    }
    if redis_url:
        env["REDIS_URL"] = redis_url
    return env


def wait_for(check: Callable[[], Any], timeout: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")


async def receive(layer: Any, channel: str) -> dict[str, Any]:
    return await asyncio.wait_for(layer.receive(channel), timeout=10)  # type: ignore[no-any-return]


def job_status(job: CompactionJob) -> str:
    job.refresh_from_db()
    return job.status


def log_snapshot(session: Any) -> list[tuple[int, str, Any]]:
    return list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "content_hash", "payload")
    )


@pytest.fixture
def broker() -> Iterator[None]:
    required_env("REDIS_URL")
    celery_app.conf.task_always_eager = False
    return


@pytest.fixture
def summarised(fake_openai: FakeOpenAI) -> FakeOpenAI:  # noqa: F811
    fake_openai.replies = [SUMMARY] * 50
    return fake_openai


def session_for(owner: Any, **kw: Any) -> Any:
    session = agentic_session(owner, **kw)
    session.summarizer = SUMMARIZER
    session.save()
    return session


def test_a_worker_compacts_and_pushes_its_progress_to_the_session_group(
    broker: None, summarised: FakeOpenAI, alice: Any
) -> None:
    session = session_for(alice)
    layer = listening_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(live.mark_watched)(session.pk)  # as an open page's socket does
    async_to_sync(layer.group_add)(session.group_name, channel)
    with celery_worker(LOGS / "compaction-worker.log", env=worker_env(summarised)):
        job = services.request_compaction(session, focus="the modules").job
        wait_for(lambda: job_status(job) == "done", what="the job to finish")

    stages = []
    while not stages or stages[-1] != "done":
        html = async_to_sync(receive)(layer, channel)["html"]
        if 'id="job-progress"' in html:
            stages.append(html.split('data-stage="')[1].split('"')[0])
    assert stages == ["queued", "planning", "summarising", "writing", "done"]
    record = Compaction.objects.get(job=job)
    assert record.outcome == "summarized"
    assert "fix the failing modules" in record.summary
    assert record.focus == "the modules"
    assert len(summarised.requests) == 1
    assert "the modules" in str(summarised.requests[0]["messages"])


def test_a_worker_killed_mid_compaction_is_recovered_by_the_sweeper(
    broker: None, summarised: FakeOpenAI, alice: Any
) -> None:
    session = session_for(alice)
    before = log_snapshot(session)
    summarised.delay = 30  # the summariser is slow: the kill lands mid-request
    log = LOGS / "compaction-worker-killed.log"
    with celery_worker(log, env=worker_env(summarised)) as proc:
        job = services.request_compaction(session).job
        wait_for(lambda: summarised.requests, what="the summariser to be called")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    job.refresh_from_db()
    assert (job.status, job.deliveries) == ("running", 1)
    assert not Compaction.objects.filter(session=session).exists()
    assert log_snapshot(session) == before

    summarised.delay = 0
    with celery_worker(log, env=worker_env(summarised), beat=True):
        wait_for(lambda: job_status(job) == "done", timeout=90, what="the job to be re-run")

    job.refresh_from_db()
    assert job.deliveries == 2
    assert Compaction.objects.filter(session=session).count() == 1
    assert AuditEvent.objects.filter(session=session, verb="compact").count() == 1
    assert log_snapshot(session) == before


def test_a_job_that_always_kills_its_worker_ends_failed(
    broker: None, summarised: FakeOpenAI, alice: Any
) -> None:
    session = session_for(alice)
    current: dict[str, str] = {}
    # The job's summariser call kills the worker running it, beat and all.
    summarised.on_request = lambda body: subprocess.run(
        ["pkill", "-KILL", "-f", f"hostname={current['worker']}"], check=False
    )
    log = LOGS / "compaction-worker-killer.log"
    job = None
    for attempt in range(3):
        current["worker"] = f"killed-{attempt}-{time.monotonic_ns()}@localhost"
        with celery_worker(
            log, env=worker_env(summarised), beat=True, hostname=current["worker"], wait=False
        ) as proc:
            if job is None:
                job = services.request_compaction(session).job
            proc.wait(timeout=90)
        job.refresh_from_db()
        assert job.deliveries == attempt + 1
    assert job is not None
    summarised.on_request = None
    with celery_worker(log, env=worker_env(summarised), beat=True):
        wait_for(lambda: job_status(job) == "failed", timeout=60, what="the job to give up")
    job.refresh_from_db()
    assert "gave up after 3 attempts" in job.error
    assert len(summarised.requests) == 3
    assert not Compaction.objects.filter(session=session).exists()


def test_a_rate_limited_summariser_is_retried_after_its_retry_after(
    broker: None, summarised: FakeOpenAI, alice: Any
) -> None:
    session = session_for(alice)
    # The OpenAI client retries twice on its own; the third 429 reaches the job.
    summarised.failures = [(429, {"retry-after": "2"})] * 3
    with celery_worker(LOGS / "compaction-worker-429.log", env=worker_env(summarised)):
        job = services.request_compaction(session).job
        wait_for(lambda: job_status(job) == "done", what="the retried job to finish")
    job.refresh_from_db()
    assert job.retries == 1
    assert job.deliveries == 2
    assert job.outcome == "summarized"
    # The retry waited what the provider asked for.
    assert job.run_after is not None
    assert job.started_at is not None
    assert (job.run_after - job.started_at).total_seconds() >= 2
    assert Compaction.objects.filter(session=session).count() == 1
    assert len(summarised.requests) == 4


def test_a_run_of_transient_failures_is_counted_as_retries_not_killed_workers(
    broker: None, summarised: FakeOpenAI, alice: Any
) -> None:
    """More retried deliveries than CTXHUB_JOB_MAX_DELIVERIES (3), each of which finished:
    none was a killed worker, so the job goes on until the summariser answers."""
    session = session_for(alice)
    # Three job-level failures: the OpenAI client retries twice on its own each time.
    summarised.failures = [(429, {"retry-after": "0"})] * 9
    with celery_worker(LOGS / "compaction-worker-retries.log", env=worker_env(summarised)):
        job = services.request_compaction(session).job
        wait_for(lambda: job_status(job) in ("done", "failed"), timeout=120, what="the job")
    job.refresh_from_db()
    assert (job.status, job.error) == ("done", "")
    assert job.retries == 3
    assert job.deliveries == 4
    assert Compaction.objects.filter(session=session).count() == 1


def test_the_same_request_twice_makes_one_summariser_call_and_concurrent_ones_are_told(
    broker: None, summarised: FakeOpenAI, alice: Any
) -> None:
    session = session_for(alice)
    outcomes: list[Any] = []

    def ask(focus: str) -> None:
        try:
            outcomes.append(services.request_compaction(session, focus=focus))
        except services.Conflict as conflict:
            outcomes.append(conflict)
        finally:
            from django.db import connection

            connection.close()

    threads = [threading.Thread(target=ask, args=(f"focus {n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    created = [o for o in outcomes if isinstance(o, services.JobRequest)]
    refused = [o for o in outcomes if isinstance(o, services.Conflict)]
    assert len(created) == 1
    assert len(refused) == 1
    assert refused[0].details["job"].pk == created[0].job.pk

    again = services.request_compaction(session, focus=created[0].job.focus)
    assert not again.created
    assert again.job.pk == created[0].job.pk
    with celery_worker(LOGS / "compaction-worker-once.log", env=worker_env(summarised)):
        wait_for(lambda: job_status(again.job) == "done", what="the job to finish")
    assert len(summarised.requests) == 1
    assert CompactionJob.objects.filter(session=session).count() == 1


def test_auto_compaction_fires_once_and_not_again_while_it_runs(
    broker: None, summarised: FakeOpenAI, alice: Any
) -> None:
    policy = {**SMALL_POLICY, "compaction": {"auto": True, "soft_threshold": 0.8}}
    session = make_session(alice, policy=policy, summarizer=SUMMARIZER)
    threshold = services.soft_threshold(session)
    summarised.delay = 3
    with celery_worker(LOGS / "compaction-worker-auto.log", env=worker_env(summarised)):
        # Up to the append that crosses the threshold, then the worker's check queues the job.
        # (Appending on until it does would make what it summarises depend on the worker's
        # speed: far enough past, the window alone keeps the request small and a summary would
        # only add to it, which the growth guard refuses.)
        n = 0
        while effective_tokens(session) < threshold:
            services.append_messages(session, turn(n, size=40))
            n += 1
        job = wait_for(
            lambda: CompactionJob.objects.filter(session=session).first(),
            what="the automatic compaction to be queued",
        )
        assert job.trigger == "auto"
        # Appends go on while it runs: none waits for it, none starts another.
        for m in range(n, n + 3):
            started = time.monotonic()
            services.append_messages(session, turn(m, size=40))
            assert time.monotonic() - started < 2
        assert job_status(job) in ("queued", "running")
        assert CompactionJob.objects.filter(session=session).count() == 1
        wait_for(lambda: job_status(job) == "done", what="the auto job to finish")
    assert job.outcome == "summarized", job.error
    # What it summarised (up to the crossing append) came back under the threshold.
    assert Compaction.objects.get(job=job).tokens_after < threshold


# --- Redis lost and restarted empty ------------------------------------------------------------


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    required_env("REDIS_URL")
    server = OwnRedis(tmp_path)
    server.start()
    previous = celery_app.conf.broker_url

    def use(url: str) -> None:
        # Connection pools are kept per broker URL: drop the app's references so the next
        # publish takes (or makes) the pool of ``url``; the suite's own pool stays open.
        celery_app.conf.broker_url = url
        celery_app._pool = None
        celery_app.amqp._producer_pool = None

    use(server.url)
    celery_app.conf.task_always_eager = False
    try:
        yield server
    finally:
        celery_app.pool.force_close_all()  # this test's server only
        use(previous)
        if server.up():
            server.stop()


def test_redis_restarted_empty_mid_job_loses_no_job(
    own_redis: OwnRedis, summarised: FakeOpenAI, alice: Any
) -> None:
    running = session_for(alice)
    waiting = session_for(alice)
    summarised.delay = 4
    log = LOGS / "compaction-worker-redis.log"
    env = worker_env(summarised, redis_url=own_redis.url)
    with celery_worker(log, env=env, beat=True):
        first = services.request_compaction(running).job
        wait_for(lambda: summarised.requests, what="the first job to be summarising")
        second = services.request_compaction(waiting).job  # queued behind it, in Redis only

        own_redis.stop()
        # The database is the truth: reading governed contexts needs no Redis.
        assert services.governed_context(waiting).report.messages
        services.append_messages(waiting, turn(50))
        own_redis.start()  # empty: the second job's message is gone

        summarised.delay = 0
        wait_for(lambda: job_status(first) == "done", timeout=90, what="the running job")
        wait_for(lambda: job_status(second) == "done", timeout=90, what="the lost job")
    assert Compaction.objects.filter(session=running).count() == 1
    assert Compaction.objects.filter(session=waiting).count() == 1
    second.refresh_from_db()
    assert second.deliveries == 1


def test_a_worker_refreshes_the_snapshot_after_an_append(
    broker: None, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = agentic_session(alice, turns=6)
    with celery_worker(LOGS / "snapshot-worker.log"):
        services.append_messages(session, turn(30))
        current = snapshots.key(session, [], stored_state(session).version)
        wait_for(
            lambda: GovernedSnapshot.objects.filter(session=session, key=current).exists(),
            what="the worker to refresh the snapshot",
        )
    # A process that never governed the session reads it, and it is what governing gives.
    REMEMBERED.clear()
    with monkeypatch.context() as patched:
        patched.setattr(governed_module, "_govern", _must_not_govern)
        served = services.governed_context(session)
    wait_for_warm_up(session)
    REMEMBERED.clear()
    GovernedSnapshot.objects.filter(session=session).delete()
    governed = services.governed_context(session)
    assert ModelMessagesTypeAdapter.dump_python(served.messages, mode="json") == (
        ModelMessagesTypeAdapter.dump_python(governed.messages, mode="json")
    )
    assert served.report == governed.report


def _must_not_govern(*args: Any) -> Any:
    raise AssertionError("governed instead of reading the snapshot")


def test_the_worker_outlives_redis_restarts_while_it_holds_messages(
    own_redis: OwnRedis, summarised: FakeOpenAI, alice: Any
) -> None:
    """Every append queues a settle run the worker holds until its countdown: Redis restarting
    under such unacknowledged messages must not end the worker (kombu can fail while it
    restores them); afterwards it runs jobs as before."""
    log = LOGS / "compaction-worker-restarts.log"
    env = worker_env(summarised, redis_url=own_redis.url)
    with celery_worker(log, env=env, beat=True) as proc:
        for attempt in range(2):
            session = session_for(alice)
            tasks.settle_session.apply_async(args=(str(session.pk), False), countdown=30)
            time.sleep(1)  # the worker has it, unacknowledged, waiting for its countdown
            own_redis.stop()
            own_redis.start()
            time.sleep(2)
            assert proc.poll() is None, f"the worker ended at restart {attempt + 1}"
        session = session_for(alice)
        job = services.request_compaction(session).job
        wait_for(lambda: job_status(job) == "done", timeout=90, what="a job after the restarts")
