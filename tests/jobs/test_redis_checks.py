"""Redis must keep every key until it is deleted: the queue and the live groups live there. A
server that evicts keys is reported by ``manage.py check`` and at a worker's start."""

from __future__ import annotations

import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings

from sessions.checks import EVICTION_POLICY_ID, eviction_policy_warnings
from tests.conftest import ARTIFACTS, required_env
from tests.processes import OwnRedis, celery_worker


@pytest.fixture
def evicting_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    required_env("REDIS_URL")
    server = OwnRedis(tmp_path, ["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"])
    server.start()
    yield server
    server.stop()


def test_check_warns_about_a_redis_that_evicts_keys(evicting_redis: OwnRedis) -> None:
    [warning] = eviction_policy_warnings(evicting_redis.url)
    assert warning.id == EVICTION_POLICY_ID
    assert "allkeys-lru" in warning.msg
    assert "noeviction" in warning.hint

    output = StringIO()
    with override_settings(REDIS_URL=evicting_redis.url):
        call_command("check", stdout=output, stderr=output)
    assert EVICTION_POLICY_ID in output.getvalue()


def test_check_is_quiet_about_the_suites_redis_and_without_redis() -> None:
    # The test command starts Redis with noeviction; unreachable or absent, nothing to say.
    assert eviction_policy_warnings(required_env("REDIS_URL")) == []
    assert eviction_policy_warnings("redis://127.0.0.1:9/0") == []
    assert eviction_policy_warnings(None) == []


@pytest.mark.django_db(transaction=True)
def test_a_worker_on_an_evicting_redis_warns_at_start(evicting_redis: OwnRedis) -> None:
    log = ARTIFACTS / "evicting-redis-worker.log"
    log.unlink(missing_ok=True)
    with celery_worker(log, env={"REDIS_URL": evicting_redis.url}, wait=False):
        deadline = time.monotonic() + 60
        while EVICTION_POLICY_ID not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
    assert "maxmemory-policy allkeys-lru" in log.read_text()
