"""Every answer under ``/api/`` that is an error is JSON in the API's error shape, even those
made before the API's own handlers run (an unknown path, a method the path does not take)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse

from sessions.api.errors import error_response

CODES = {404: "not_found", 405: "method_not_allowed", 400: "bad_request", 413: "too_large"}


class JsonApiErrors:
    # Async as well as sync, so that under ASGI the stack around it stays async and a request
    # does not hop between the event loop and a thread at this layer.
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if self.is_async:
            return self._acall(request)
        return _as_api_error(request, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        return _as_api_error(request, await self.get_response(request))


def _as_api_error(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """An error under ``/api/`` in the API's JSON shape; anything else as it is."""
    if (
        request.path.startswith("/api/")
        and response.status_code >= 400
        and not response.get("Content-Type", "").startswith("application/json")
    ):
        status = response.status_code
        headers = {"Allow": response["Allow"]} if response.has_header("Allow") else None
        message = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "error"
        return error_response(status, CODES.get(status, "error"), message, headers=headers)
    return response
