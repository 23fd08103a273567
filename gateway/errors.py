"""The gateway's own refusals, in the shape of the API the client speaks, so its SDK raises the
error it knows (``anthropic.AuthenticationError``, ``openai.BadRequestError``) and its retry
logic reads the status and ``retry-after`` it expects."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    502: "api_error",
    503: "api_error",
    504: "timeout_error",
}
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
    502: "server_error",
    503: "server_error",
    504: "server_error",
}


class Refused(Exception):
    """A request the gateway answers itself, with a status, a message and the field at fault."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.headers = headers or {}


def refusal(provider: str, refused: Refused) -> HttpResponse:
    """``refused`` as the provider would have said it."""
    message = f"{refused.field}: {refused.message}" if refused.field else refused.message
    if provider == "anthropic":
        kind = _ANTHROPIC_TYPES.get(refused.status, "api_error")
        body: dict[str, object] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        kind = _OPENAI_TYPES.get(refused.status, "server_error")
        body = {"error": {"message": message, "type": kind, "param": refused.field, "code": None}}
    response = JsonResponse(body, status=refused.status)
    for name, value in refused.headers.items():
        response[name] = value
    return response
