"""One hub process and one fake provider for every gateway test that needs a real server:
booting the production web server takes seconds, the tests a fraction of that."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import ARTIFACTS
from tests.gateway.fake_upstream import FakeUpstream, running_fake_upstream
from tests.gateway.waiting import wait_until_quiet
from tests.processes import asgi_server

TIMEOUT_SECONDS = 3
"""How long the hub waits on a silent upstream here (a test makes it wait longer)."""


@pytest.fixture(scope="session")
def served(django_db_setup: None) -> Iterator[tuple[str, FakeUpstream]]:
    """The hub's URL, forwarding both providers' formats to the fake."""
    with running_fake_upstream() as upstream:
        env = {
            "CTXHUB_GATEWAY_ANTHROPIC_URL": upstream.url,
            "CTXHUB_GATEWAY_OPENAI_URL": upstream.url + "/v1",
            "CTXHUB_GATEWAY_TIMEOUT_SECONDS": str(TIMEOUT_SECONDS),
        }
        with asgi_server(ARTIFACTS / "logs" / "web-gateway.log", env=env) as url:
            yield url, upstream


@pytest.fixture
def upstream(served: tuple[str, FakeUpstream]) -> Iterator[FakeUpstream]:
    """The fake provider, with nothing received or scripted yet; at the test's end, the hub
    done recording what the test sent."""
    served[1].reset()
    yield served[1]
    wait_until_quiet()
