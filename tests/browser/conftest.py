from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.chromium import CHROMIUM_ARGS
from tests.conftest import ARTIFACTS, required_env
from tests.processes import asgi_server


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """Launch the system Chromium: browsers cannot be downloaded by Playwright everywhere."""
    executable = os.environ.get("CTXHUB_CHROMIUM") or shutil.which("chromium")
    if not executable:
        pytest.fail("Chromium not found: install it (scripts/test.sh does) or set CTXHUB_CHROMIUM")
    return {**browser_type_launch_args, "executable_path": executable, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session", autouse=True)
def _orm_beside_playwright() -> Iterator[None]:
    # Playwright's sync API runs an event loop in this thread from its first use to the end of
    # the session (database teardown included); the ORM calls here are still sequential code.
    # Browser tests run last, so no other test runs with this check relaxed.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]


@pytest.fixture(scope="module")
def live_url(django_db_setup: None) -> Iterator[str]:
    required_env("REDIS_URL")
    with asgi_server(ARTIFACTS / "logs" / "web-browser.log") as url:
        yield url
