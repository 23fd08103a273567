"""Sessions: create, list a page at a time, read, and change (title, model, window, policy,
the tool definitions the agent sends)."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import Count, Q, QuerySet, Sum
from django.http import HttpRequest
from ninja import Router, Status
from ninja.params import P, QueryEx

from ctxhub.governance.tokens import context_window
from sessions import services, tasks
from sessions.api.access import api_key, need, owned_session, parse_policy
from sessions.api.errors import ApiError
from sessions.api.schemas import ERRORS, SessionIn, SessionOut, SessionPage, SessionPatch
from sessions.models import AgentSession
from sessions.services.governed import ensure_room
from sessions.services.tools import session_tools, set_tools, tool_fields

router = Router()


def _with_figures(rows: QuerySet[AgentSession]) -> QuerySet[AgentSession]:
    return rows.annotate(message_count=Count("messages"), token_total=Sum("messages__tokens"))


def _session_out(session: AgentSession) -> dict[str, Any]:
    """A session of a queryset made by ``_with_figures``."""
    tools = session_tools(session)
    return {
        "id": session.pk,
        "title": session.title,
        "model": session.model,
        "context_window": session.context_window,
        "policy": session.policy,
        "tools": [
            {**definition, "tokens": tokens}
            for definition, tokens in zip(tools.definitions, tools.tokens, strict=True)
        ],
        "tool_tokens": tools.total,
        "messages": session.message_count,  # type: ignore[attr-defined]
        "tokens": session.token_total or 0,  # type: ignore[attr-defined]
        "created_at": session.created_at,
        "updated_at": session.updated_at,
    }


def _described(session: AgentSession) -> dict[str, Any]:
    return _session_out(_with_figures(AgentSession.objects.filter(pk=session.pk)).get())


@router.post("/sessions", response={201: SessionOut, **ERRORS}, tags=["sessions"])
def create_session(request: HttpRequest, body: SessionIn) -> Status[dict[str, Any]]:
    """A new session."""
    key = need(request, "write")
    policy = parse_policy(body.policy)
    ensure_room(
        policy,
        body.context_window or context_window(body.model),
        field="context_window" if body.context_window else "policy",
    )
    session = AgentSession.objects.create(
        owner=key.owner,
        title=body.title,
        model=body.model,
        context_window=body.context_window,
        policy=policy.overrides(),
        **tool_fields([tool.as_json() for tool in body.tools], body.model),
    )
    return Status(201, _described(session))


def _encode_cursor(session: AgentSession) -> str:
    raw = f"{session.created_at.isoformat()}|{session.pk}"
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        created, pk = base64.urlsafe_b64decode(cursor.encode()).decode().split("|")
        return datetime.fromisoformat(created), UUID(pk)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ApiError(422, "invalid", "cursor: not one this API gave", field="cursor") from None


@router.get("/sessions", response={200: SessionPage, **ERRORS}, tags=["sessions"])
def list_sessions(
    request: HttpRequest, cursor: str | None = None, limit: QueryEx[int, P(ge=1, le=100)] = 20
) -> dict[str, Any]:
    """The key owner's sessions, newest first, a page at a time."""
    key = need(request, "read")
    rows = AgentSession.objects.filter(owner=key.owner).order_by("-created_at", "-id")
    if cursor:
        created, pk = _decode_cursor(cursor)
        rows = rows.filter(Q(created_at__lt=created) | Q(created_at=created, id__lt=pk))
    page = list(_with_figures(rows)[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    return {
        "sessions": [_session_out(s) for s in page],
        "next_cursor": _encode_cursor(page[-1]) if more else None,
    }


@router.get("/sessions/{session_id}", response={200: SessionOut, **ERRORS}, tags=["sessions"])
def get_session(request: HttpRequest, session_id: UUID) -> dict[str, Any]:
    return _described(owned_session(request, session_id, "read"))


@router.patch("/sessions/{session_id}", response={200: SessionOut, **ERRORS}, tags=["sessions"])
def patch_session(request: HttpRequest, session_id: UUID, body: SessionPatch) -> dict[str, Any]:
    """Change the title, model, window, policy or tools; a new model recounts the stored
    tokens."""
    session = owned_session(request, session_id, "write")
    changes = body.model_dump(exclude_unset=True)
    fields = [name for name in ("title", "model", "context_window") if name in changes]
    for name in fields:
        if name != "context_window" and changes[name] is None:
            raise ApiError(422, "invalid", f"{name}: may not be null", field=name)
    # The policy and window as they will be must leave the history room; checked before
    # anything is stored, naming what changed.
    new_policy = changes.get("policy")
    policy = parse_policy(new_policy if new_policy is not None else session.policy or {})
    model = changes.get("model") or session.model
    window = changes.get("context_window", session.context_window) or context_window(model)
    changed = next((n for n in ("context_window", "model") if n in changes), "policy")
    ensure_room(policy, window, field=changed)
    with transaction.atomic():
        if fields:
            for name in fields:
                setattr(session, name, changes[name])
            session.save(update_fields=[*fields, "updated_at"])
        if new_policy is not None:
            services.set_policy(session, policy, actor=api_key(request).owner)
        if body.tools is not None:
            set_tools(session, [tool.as_json() for tool in body.tools])
        elif "model" in fields:  # counted for the session's model: a new one counts them again
            set_tools(session, session.tool_definitions)
    if "model" in fields:
        tasks.recount_session_tokens.delay(str(session.pk))
    return _described(session)
