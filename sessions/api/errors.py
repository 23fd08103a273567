"""One error shape for every answer that is not a success:
``{"error": {"code": ..., "message": ..., "field": ... | null, ...details}}``."""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from sessions.services import Conflict, NotFound, ServiceError


class ApiError(Exception):
    """A refusal of the API itself (auth, scope, size, rate), with its status."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    field: str | None = None,
    headers: dict[str, str] | None = None,
    **details: Any,
) -> HttpResponse:
    body = {"error": {"code": code, "message": message, "field": field, **details}}
    response = JsonResponse(body, status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def service_error(error: ServiceError) -> HttpResponse:
    status = 409 if isinstance(error, Conflict) else 404 if isinstance(error, NotFound) else 422
    details = {
        key: str(value.pk) if hasattr(value, "pk") else value
        for key, value in error.details.items()
    }
    body = {"error": {"code": error.code, "message": error.message, "field": error.field}}
    body["error"].update(details)
    return JsonResponse(body, status=status)


def field_path(loc: list[Any] | tuple[Any, ...]) -> str:
    """``["body", "payload", "messages", 3, "parts", 0]`` → ``messages[3].parts[0]``;
    ``["query", "query"]`` → ``query`` (a parameter may be named like its location)."""
    rest = list(loc)
    if rest and rest[0] in ("body", "query", "path", "header"):
        where = rest.pop(0)
        if where == "body" and rest[:1] in (["body"], ["payload"]):  # the body parameter's name
            rest.pop(0)
    path = ""
    for segment in rest:
        if isinstance(segment, int) or (isinstance(segment, str) and segment.isdigit()):
            path += f"[{segment}]"
        else:
            path += f".{segment}" if path else str(segment)
    # Nothing below the body: the body itself is at fault (not a JSON object, say).
    return path or ("body" if "body" in loc else "")


def dotted_to_path(prefix: str, dotted: str) -> str:
    """A payload error's ``parts.0.tool_call_id`` under ``messages[3]``."""
    inner = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", f".{dotted}") if dotted else ""
    return prefix + inner


def handle(request: HttpRequest, exc: Exception) -> HttpResponse:
    """ApiError and ServiceError, as the error shape."""
    if isinstance(exc, ApiError):
        return error_response(
            exc.status, exc.code, exc.message, field=exc.field, headers=exc.headers
        )
    assert isinstance(exc, ServiceError)
    return service_error(exc)
