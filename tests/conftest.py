from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from config.celery import app as celery_app
from sessions.api import limits
from sessions.api.keys import forget_checked

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

# CI replays the same examples on every run, so a landing never depends on luck; a developer's
# runs explore new ones (a failure prints the example to replay).
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # pytest-playwright leaves an event loop running in the main thread, which breaks any
    # asyncio test after it: browser tests go last.
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.fixture(autouse=True)
def eager_jobs() -> Iterator[None]:
    """Jobs run in-process unless a test asks for the real worker."""
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = previous


@pytest.fixture(autouse=True)
def no_keys_checked() -> None:
    """Each test starts from a process that has checked no API key (``FRESH_SECONDS``)."""
    forget_checked()


@pytest.fixture(autouse=True)
def cheap_passwords(settings: Any) -> None:
    """Users are made in almost every test; hashing their passwords properly takes 0.5 s."""
    settings.PASSWORD_HASHERS = ["tests.hashers.OneIterationPBKDF2"]


@pytest.fixture
def mid_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rate limiter's clock held in the middle of a minute: it counts a key's requests per
    minute of the clock, and a minute that turned between a test's requests would start the
    count again."""
    middle = (time.time() // limits.WINDOW_SECONDS + 0.5) * limits.WINDOW_SECONDS
    monkeypatch.setattr(limits, "time", SimpleNamespace(time=lambda: middle))


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice", password="alice-password")


@pytest.fixture
def bob(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("bob", password="bob-password")


def required_env(name: str) -> str:
    """A service URL the real-service tests need; its absence fails the test, never skips it."""
    value = os.environ.get(name, "")
    if not value:
        pytest.fail(f"{name} is not set: run the suite with scripts/test.sh, which starts it")
    return value
