"""A session's log: appending messages (idempotent with a key) and reading them a page at a time."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.http import HttpRequest
from ninja import Router, Status
from ninja.params import HeaderEx, P, QueryEx

from sessions import services
from sessions.api.access import MAX_ID, api_key, owned_session, parse_messages
from sessions.api.errors import ApiError
from sessions.api.schemas import ERRORS, AppendIn, AppendOut, MessagePage
from sessions.models import IdempotentRequest, Message, MessageSource
from sessions.payloads import InvalidPayload
from sessions.services import ServiceError

router = Router()


def _fingerprint(request: HttpRequest) -> str:
    method = (request.method or "").encode()
    return hashlib.sha256(method + request.path.encode() + request.body).hexdigest()


def _idempotent(
    request: HttpRequest, key: str | None, run: Callable[[], tuple[int, dict[str, Any]]]
) -> tuple[int, dict[str, Any]]:
    """The stored answer of an earlier request with the same key, or ``run()``'s, stored."""
    if key is None:
        return run()
    if not 1 <= len(key) <= 200:
        raise ApiError(
            422, "invalid", "Idempotency-Key: 1 to 200 characters", field="Idempotency-Key"
        )
    owner_key = api_key(request)
    fingerprint = _fingerprint(request)

    def stored() -> tuple[int, dict[str, Any]] | None:
        try:
            found = IdempotentRequest.objects.get(api_key=owner_key, key=key)
        except IdempotentRequest.DoesNotExist:
            return None
        if found.fingerprint != fingerprint:
            raise ApiError(
                422,
                "idempotency_key_reused",
                "Idempotency-Key was used for another request; use a new key per request",
                field="Idempotency-Key",
            )
        return found.status, found.body

    # Run first, look for an earlier answer only when that fails: a retry is rare, so the
    # common request pays no read. A retry's writes are rolled back with its answer's row
    # (the key is unique); a retry refused by the session's state now (``expected_seq`` has
    # moved on) is answered from the first attempt all the same.
    try:
        with transaction.atomic():
            status, body = run()
            IdempotentRequest.objects.create(
                api_key=owner_key, key=key, fingerprint=fingerprint, status=status, body=body
            )
    except (IntegrityError, ServiceError):
        earlier = stored()
        if earlier is None:
            raise
        return earlier
    return status, body


@router.post(
    "/sessions/{session_id}/messages", response={201: AppendOut, **ERRORS}, tags=["messages"]
)
def append(
    request: HttpRequest,
    session_id: UUID,
    body: AppendIn,
    idempotency_key: HeaderEx[str | None, P(alias="Idempotency-Key")] = None,
) -> Status[dict[str, Any]]:
    """Append messages, all or none. A retry with the same Idempotency-Key stores nothing
    more and answers the same; ``expected_seq`` guards against a concurrent append."""
    session = owned_session(request, session_id, "write")
    messages = parse_messages(body.messages)

    def run() -> tuple[int, dict[str, Any]]:
        rows = services.append_messages(
            session, messages, source=MessageSource.API, expected_seq=body.expected_seq
        )
        return 201, {
            "first_seq": rows[0].seq,
            "last_seq": rows[-1].seq,
            "tokens": sum(row.tokens for row in rows),
        }

    try:
        return Status(*_idempotent(request, idempotency_key, run))
    except InvalidPayload as exc:  # a NUL character, refused before anything is written
        first = exc.errors[0]
        raise ApiError(422, "invalid", f"{first.path}: {first.message}", field=first.path) from None


def _stored(row: Message) -> dict[str, Any]:
    return {
        "seq": row.seq,
        "kind": row.kind,
        "tokens": row.tokens,
        "source": row.source,
        "created_at": row.created_at,
        "message": row.payload,
    }


@router.get(
    "/sessions/{session_id}/messages", response={200: MessagePage, **ERRORS}, tags=["messages"]
)
def messages(
    request: HttpRequest,
    session_id: UUID,
    after_seq: QueryEx[int | None, P(ge=-1, le=MAX_ID)] = None,
    limit: QueryEx[int, P(ge=1, le=1_000)] = 100,
) -> dict[str, Any]:
    """Messages after a seq, oldest first; with only ``limit``, the newest, in order."""
    session = owned_session(request, session_id, "read")
    if after_seq is not None:
        rows = list(session.messages.filter(seq__gt=after_seq).order_by("seq")[:limit])
    else:
        rows = list(reversed(session.messages.order_by("-seq")[:limit]))
    last = session.messages.order_by("-seq").values_list("seq", flat=True).first()
    more = bool(rows) and last is not None and rows[-1].seq < last
    return {
        "messages": [_stored(row) for row in rows],
        "next_after_seq": rows[-1].seq if more else None,
    }
