"""Who may see and change a session.

Owners see and change their sessions. Staff see everyone's, read-only unless they own them.
Anyone else gets the same 404 as for a session that does not exist, so nothing leaks.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.core.exceptions import PermissionDenied
from django.http import Http404

from sessions.models import AgentSession


def may_see(user: Any, session: AgentSession) -> bool:
    return bool(user.is_authenticated and (session.owner_id == user.pk or user.is_staff))


def may_change(user: Any, session: AgentSession) -> bool:
    return bool(user.is_authenticated and session.owner_id == user.pk)


def visible_session(user: Any, pk: UUID | str) -> AgentSession:
    session = AgentSession.objects.filter(pk=pk).select_related("owner").first()
    if session is None or not may_see(user, session):
        raise Http404("No such session.")
    return session


def changeable_session(user: Any, pk: UUID | str) -> AgentSession:
    """The session if ``user`` may change it; staff looking at another's get a 403 (they can
    see it exists), everyone else a 404."""
    session = visible_session(user, pk)
    if not may_change(user, session):
        raise PermissionDenied("Staff see every session but change only their own.")
    return session
