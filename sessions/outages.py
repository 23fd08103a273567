"""What the hub answers while a service it needs is saturated or away: a 503 with
``Retry-After``, never a 500. Clients (ours included) wait and retry; nothing was written, as
every write is one transaction that never began or was rolled back."""

from __future__ import annotations

import sys

from django.db import OperationalError
from django.http import HttpRequest, HttpResponse
from django.views import defaults

from sessions.api.errors import error_response

RETRY_AFTER_SECONDS = 2


def database_unavailable(error: BaseException | None) -> bool:
    """The database refused or timed out rather than the code failing: every connection of
    the pool busy past its timeout, PostgreSQL at max_connections, restarting, or a lock held
    past the wait (SQLite)."""
    return isinstance(error, OperationalError)


def unavailable(request: HttpRequest, what: str) -> HttpResponse:
    message = f"{what} is busy or unavailable; nothing was changed, retry shortly"
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    if request.path.startswith("/api/"):
        return error_response(503, "unavailable", message, headers=headers)
    # No template: the base page reads the user, who lives in the very database that is away.
    page = f"<!doctype html><title>Busy · ctxhub</title><p>{message}.</p>"
    response = HttpResponse(page, status=503)
    response["Retry-After"] = headers["Retry-After"]
    return response


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: an exception no view handled. A database that is away is a 503."""
    if database_unavailable(sys.exc_info()[1]):
        return unavailable(request, "the database")
    return defaults.server_error(request)
