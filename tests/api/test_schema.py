"""Schemathesis over the API's own OpenAPI schema: generated requests, valid and not, to every
operation, with a key of every scope; every check of schemathesis holds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings

from sessions import services
from sessions.api.keys import create_key
from tests.factories import make_session
from tests.messages import reply, user

app = get_wsgi_application()
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app)


@pytest.fixture
def keep_connection() -> Iterator[None]:
    """Requests end by closing the database connection, the test's own here: as Django's test
    client does, not for these requests."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def target(keep_connection: None, django_user_model: Any) -> tuple[dict[str, str], str]:
    """A key of every scope, and a session of its owner with a short history."""
    owner = django_user_model.objects.create_user("schema-owner")
    session = make_session(owner, title="Target")
    services.append_messages(session, [user("hello"), reply("hi")], auto_compact=False)
    _, key = create_key(owner, name="fuzz", scopes=["read", "write", "govern"])
    return {"Authorization": f"Bearer {key}"}, str(session.pk)


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_check_holds(case: Any, target: tuple[dict[str, str], str]) -> None:
    """Every schemathesis check (``schemathesis.toml``): no server error, every status, header,
    content type and body as documented, invalid data refused, valid data accepted."""
    headers, session_id = target
    positive = case.meta is None or case.meta.generation.mode.is_positive
    # Valid requests reach a session that exists, with a working key, so they get past the
    # lookup to the real work; an invalid one keeps what makes it invalid (a malformed id, the
    # key left out), with our key in place of a generated one.
    if positive and case.path_parameters and "session_id" in case.path_parameters:
        case.path_parameters["session_id"] = session_id
    if positive or "Authorization" in (case.headers or {}):
        case.headers = {**(case.headers or {}), **headers}
    case.call_and_validate()
