"""Background jobs. Each takes ids, not objects, so it can be retried after a restart."""

from __future__ import annotations

from typing import Any

from ctxhub.celery import app
from sessions import services
from sessions.models import AgentSession


@app.task(acks_late=True)
def recount_session_tokens(session_id: str) -> dict[str, Any]:
    """Recount a session's tokens and push the new meter to everyone watching it."""
    session = AgentSession.objects.get(pk=session_id)
    totals = services.recount_tokens(session)
    return {"session": session_id, "messages": totals.messages, "tokens": totals.tokens}
