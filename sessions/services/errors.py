"""Errors the services raise; views and the API turn them into 4xx answers."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """A request the services refuse, with a stable code and the field at fault, if any."""

    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details


class NotFound(ServiceError):
    code = "not_found"


class Invalid(ServiceError):
    code = "invalid"


class Conflict(ServiceError):
    """The request contradicts the session's current state (it changed, or a job runs)."""

    code = "conflict"
