"""Pages and htmx fragments. Thin: access checks here, logic in services."""

from __future__ import annotations

from uuid import UUID

from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from sessions import services, tasks
from sessions.http import AuthenticatedHttpRequest
from sessions.models import AgentSession, Message
from sessions.presenters import present_message


def _own_session(request: AuthenticatedHttpRequest, pk: UUID) -> AgentSession:
    """The session if the user owns it; anyone else gets the same 404 as for a missing one."""
    return get_object_or_404(AgentSession, pk=pk, owner=request.user)


@require_GET
def session_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    return render(request, "sessions/list.html", {"sessions": services.sessions_for(request.user)})


def _page_context(session: AgentSession, rows: list[Message]) -> dict[str, object]:
    return {
        "session": session,
        "messages": [present_message(row) for row in rows],
        # Where the next "earlier messages" page starts, while there is one.
        "earlier": rows[0].seq if rows and rows[0].seq > 0 else None,
    }


@require_GET
def session_detail(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    session = _own_session(request, pk)
    context = _page_context(session, services.message_page(session))
    return render(
        request, "sessions/detail.html", {**context, "totals": services.token_totals(session)}
    )


@require_GET
def messages(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    """``?after=SEQ``: everything later, with the meter (what a reconnecting socket missed).
    ``?before=SEQ``: the page of messages before it (the "earlier messages" button)."""
    session = _own_session(request, pk)
    if "before" in request.GET:
        before = _seq_param(request, "before")
        if before is None:
            return HttpResponseBadRequest(
                "before: must be an integer seq", content_type="text/plain"
            )
        context = _page_context(session, services.message_page(session, before=before))
        return render(request, "sessions/_messages_before.html", context)
    after = _seq_param(request, "after", default=-1)
    if after is None:
        return HttpResponseBadRequest("after: must be an integer seq", content_type="text/plain")
    rows = list(session.messages.filter(seq__gt=after))
    return render(
        request,
        "sessions/_messages_after.html",
        {**_page_context(session, rows), "totals": services.token_totals(session)},
    )


def _seq_param(request: HttpRequest, name: str, default: int | None = None) -> int | None:
    raw = request.GET.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        return None


@require_GET
def message_detail(request: AuthenticatedHttpRequest, pk: UUID, seq: int) -> HttpResponse:
    session = _own_session(request, pk)
    row = get_object_or_404(Message, session=session, seq=seq)
    return render(
        request,
        "sessions/_message.html",
        {"m": present_message(row, full=True), "session": session},
    )


@require_POST
def recount(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    session = _own_session(request, pk)
    job = tasks.recount_session_tokens.delay(str(session.pk))
    if not request.htmx:
        return redirect(session)
    # Eager jobs (the embedded default) are done already; a worker's result arrives over the
    # session's socket with the new meter.
    outcome = job.result if job.ready() else None
    return render(request, "sessions/_job_status.html", {"outcome": outcome})


@login_not_required
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness for load balancers and compose: the process answers and the database too."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return HttpResponse("ok", content_type="text/plain")
