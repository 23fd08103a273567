"""Forking a session at a message: a new session of the key's owner with the log up to it and
the records over that prefix (``sessions.services.fork``)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.http import HttpRequest
from ninja import Field, Router, Status
from ninja.params import HeaderEx, P

from sessions import services
from sessions.api.access import MAX_ID, api_key, need, owned_session, parse_policy
from sessions.api.routes.messages import _idempotent
from sessions.api.routes.sessions import _described
from sessions.api.schemas import ERRORS, SessionOut, _Storable

router = Router()


class ForkIn(_Storable):
    seq: int = Field(
        ge=0,
        le=MAX_ID,
        strict=True,  # a number, not "3", 3.0 or true
        description="The message to fork at: the fork's log ends with it.",
    )
    title: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description='Default: the original\'s, with " (fork at #N)".',
    )
    model: str | None = Field(
        default=None, min_length=1, max_length=200, description="Default: the original's."
    )
    policy: dict[str, Any] | None = Field(
        default=None, description="Policy overrides; default: the original's."
    )


@router.post("/sessions/{session_id}/fork", response={201: SessionOut, **ERRORS}, tags=["sessions"])
def fork(
    request: HttpRequest,
    session_id: UUID,
    body: ForkIn,
    idempotency_key: HeaderEx[str | None, P(alias="Idempotency-Key")] = None,
) -> Status[dict[str, Any]]:
    """A new session whose log is this one's up to and including message ``seq``, with the
    compactions, clears, pins and evicted outputs over that prefix (undone ones left out), and
    no requests sent yet: its governed context is what this session's was with the log ending
    there. Reading the source takes the read scope, making the fork the write scope. A retry
    with the same Idempotency-Key makes no second fork."""
    source = owned_session(request, session_id, "read")
    need(request, "write")
    policy = parse_policy(body.policy) if body.policy is not None else None

    def run() -> tuple[int, dict[str, Any]]:
        made = services.fork_session(
            source,
            body.seq,
            actor=api_key(request).owner,
            title=body.title,
            model=body.model,
            policy=policy,
        )
        return 201, _json(_described(made))

    return Status(*_idempotent(request, idempotency_key, run))


def _json(described: dict[str, Any]) -> dict[str, Any]:
    """The answer as JSON values: a retry's is read back from the database as stored."""
    return SessionOut.model_validate(described).model_dump(mode="json")
