"""Who may do what through the API, and the parsing every operation shares: a 4xx naming
the field."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.http import HttpRequest
from ninja.params import P, PathEx
from pydantic import ValidationError as PydanticError
from pydantic_ai.messages import ModelMessage

from ctxhub.governance import Governor, Policy
from sessions.api.errors import ApiError, dotted_to_path, field_path
from sessions.models import AgentSession, ApiKey
from sessions.payloads import InvalidPayload, parse_payload

# Seqs and record ids fit the database's integer columns: a larger one is a 422, not an error.
MAX_ID = 2**31 - 1
RecordId = PathEx[int, P(ge=0, le=MAX_ID)]


def api_key(request: HttpRequest) -> ApiKey:
    key: ApiKey = request.auth  # type: ignore[attr-defined]
    return key


def need(request: HttpRequest, scope: str) -> ApiKey:
    key = api_key(request)
    if scope not in key.scopes:
        raise ApiError(403, "forbidden", f"this key lacks the {scope!r} scope", field="scope")
    return key


def owned_session(request: HttpRequest, session_id: UUID, scope: str) -> AgentSession:
    """The key owner's session; another's is a 404, whatever the key's scopes."""
    key = need(request, scope)
    try:
        return AgentSession.objects.get(pk=session_id, owner_id=key.owner_id)
    except AgentSession.DoesNotExist:
        raise ApiError(404, "not_found", f"no session {session_id}") from None


def parse_policy(overrides: dict[str, Any], field: str = "policy") -> Policy:
    try:
        return Policy.model_validate(overrides)
    except PydanticError as exc:
        error = exc.errors()[0]
        path = f"{field}.{field_path(error['loc'])}" if error["loc"] else field
        raise ApiError(422, "invalid", f"{path}: {error['msg']}", field=path) from None


def parse_governor(state: dict[str, Any] | None, policy: Policy, model: str) -> Governor:
    """The Governor a request continues (a fresh one without a state); a 422 naming the first
    bad field of a state that is not one."""
    if state is None:
        return Governor(policy, model=model)
    try:
        return Governor.from_state(state, policy, model=model)
    except PydanticError as exc:
        error = exc.errors()[0]
        path = f"state.{field_path(error['loc'])}" if error["loc"] else "state"
        raise ApiError(422, "invalid", f"{path}: {error['msg']}", field=path) from None


def parse_messages(items: list[dict[str, Any]]) -> list[ModelMessage]:
    """pydantic-ai messages from their JSON; a 422 naming the first bad field."""
    messages = []
    for index, item in enumerate(items):
        try:
            messages.append(parse_payload(item))
        except InvalidPayload as exc:
            first = exc.errors[0]
            path = dotted_to_path(f"messages[{index}]", first.path)
            raise ApiError(422, "invalid", f"{path}: {first.message}", field=path) from None
    return messages
