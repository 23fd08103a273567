"""``/api/v1``: sessions, their messages, the governed context, compactions, clears, pins,
evicted outputs, and stateless governance. Thin: access and scopes in ``sessions.api.access``,
operations in ``sessions.api.routes``, the rest in ``sessions.services``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer

from sessions import outages
from sessions.api import limits
from sessions.api.errors import ApiError, error_response, field_path, handle
from sessions.api.keys import live_key
from sessions.api.routes import context, messages, records
from sessions.api.routes import sessions as session_routes
from sessions.history import UnreadableMessage
from sessions.models import ApiKey
from sessions.services import ServiceError


class KeyAuth(HttpBearer):
    """A live API key; also where a body over the limit and a key over its rate stop."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            raise _too_large()
        key = live_key(token)
        if key is not None:
            limits.check(key)
        return key


def _too_large() -> ApiError:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return ApiError(413, "too_large", f"the body is over the {limit:,}-byte limit; nothing stored")


api = NinjaAPI(
    title="ctxhub",
    version="1",
    description="Push an agent's history, pull the governed context, steer it.",
    urls_namespace="api",
    auth=KeyAuth(),
)


@api.exception_handler(ApiError)
def _api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return handle(request, exc)


@api.exception_handler(ServiceError)
def _service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    return handle(request, exc)


@api.exception_handler(UnreadableMessage)
def _unreadable(request: HttpRequest, exc: UnreadableMessage) -> HttpResponse:
    # The session's stored state is at fault, not the request: 409, saying which message.
    return error_response(409, "unreadable_message", str(exc), field="seq", seq=exc.seq)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(
        401,
        "unauthenticated",
        "a valid API key is required: Authorization: Bearer <key> (missing, wrong, revoked "
        "or expired)",
        headers={"WWW-Authenticate": "Bearer"},
    )


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = [
        {
            # A value refused for what it holds names the place inside it (``_storable``).
            "field": field_path([*error.get("loc", ()), *error.get("ctx", {}).get("inside", [])]),
            "message": error.get("msg", "invalid"),
        }
        for error in exc.errors
    ]
    first = errors[0] if errors else {"field": None, "message": "invalid request"}
    return error_response(
        422, "invalid", f"{first['field']}: {first['message']}", field=first["field"], errors=errors
    )


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(404, "not_found", str(exc) or "not found")


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return handle(request, _too_large())


@api.exception_handler(OperationalError)
def _database_unavailable(request: HttpRequest, exc: OperationalError) -> HttpResponse:
    return outages.unavailable(request, "the database")


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if str(exc).startswith("Cannot parse request body"):  # ninja's words for it
        message = "body: not JSON, or nested deeper than a JSON parser goes"
        return error_response(exc.status_code, "bad_request", message, field="body")
    return error_response(exc.status_code, "bad_request", str(exc))


api.add_router("", "sessions.api.routes.transfer.router")  # before /sessions/{id} takes "import"
api.add_router("", session_routes.router)
api.add_router("", messages.router)
api.add_router("", context.router)
api.add_router("", records.router)
api.add_router("", "sessions.api.routes.fork.router")


def urls() -> tuple[list[Any], str, str]:
    """The API's URL patterns; keys authenticate them, not the login page."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        pattern.callback.login_required = False  # type: ignore[union-attr]
    return patterns, app_name, namespace
