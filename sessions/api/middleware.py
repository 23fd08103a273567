"""Every answer under ``/api/`` that is an error is JSON in the API's error shape, even those
made before the API's own handlers run (an unknown path, a method the path does not take)."""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus

from django.http import HttpRequest, HttpResponse

from sessions.api.errors import error_response

CODES = {404: "not_found", 405: "method_not_allowed", 400: "bad_request", 413: "too_large"}


class JsonApiErrors:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            request.path.startswith("/api/")
            and response.status_code >= 400
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            status = response.status_code
            headers = {"Allow": response["Allow"]} if response.has_header("Allow") else None
            message = (
                HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "error"
            )
            return error_response(status, CODES.get(status, "error"), message, headers=headers)
        return response
