"""Pages and htmx fragments. Thin: access checks here, logic in services and presenters."""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from sessions import services, tasks
from sessions.access import changeable_session, may_change, visible_session
from sessions.api.routes import transfer as transfer_routes
from sessions.chat.turns import running_turn
from sessions.chat.views import chat_context
from sessions.consumers_report import top_consumers
from sessions.history import UnreadableMessage, record_state
from sessions.http import AuthenticatedHttpRequest
from sessions.models import AgentSession, Clear, Compaction, Message, SentRequest
from sessions.presenters import present_message, present_part, present_sent
from sessions.services.fleet import (
    SORTS,
    STATES,
    FleetFilter,
    Sort,
    fleet,
    fleet_choices,
)
from sessions.services.sending import GOVERNOR_ACTIONS
from sessions.trajectory import trajectory
from sessions.xray import Fates, xray
from transcripts.uploads import import_upload

# The most messages one fate refresh covers (a page and the pages loaded before it).
FATES_LIMIT = 2_000


@require_GET
def session_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    try:
        sort, number, where = _fleet_asked(request.GET)
    except services.Invalid as error:
        return HttpResponseBadRequest(f"{error.field}: {error.message}", content_type="text/plain")
    context = {
        "page": fleet(request.user, sort=sort, page=number, where=where),
        "where": where,
        "query": where.query,
        "sort": sort,
        "sorts": SORTS,
        "states": STATES,
        **fleet_choices(request.user),
        "chat_model": settings.CTXHUB_CHAT_MODEL,
    }
    # A search, a filter, a sort or a page as you choose it replaces the table only.
    template = "sessions/list.html#fleet" if request.htmx else "sessions/list.html"
    return render(request, template, context)


def _fleet_asked(params: Any) -> tuple[Sort, int, FleetFilter]:
    """The sort, page and filter the fleet's address asks for; Invalid naming the parameter
    that is not one the fleet offers."""
    sort = params.get("sort", "fullest")
    if sort not in SORTS:
        raise services.Invalid(f"one of {', '.join(SORTS)}", field="sort")
    state = params.get("state", "")
    if state and state not in STATES:
        raise services.Invalid(f"one of {', '.join(STATES)}", field="state")
    page = params.get("page", "1")
    # ASCII digits, few of them: "²" is a digit to isdigit() and not to int(), and int() refuses
    # a string of thousands of digits.
    if not (page.isascii() and page.isdigit() and len(page) <= 7 and int(page) > 0):
        raise services.Invalid("a page number from 1", field="page")
    where = FleetFilter(
        query=params.get("q", "")[:200],
        model=params.get("model", "")[:200],
        owner=params.get("owner", "")[:150],
        state=state,
    )
    return cast(Sort, sort), int(page), where


def _timeline(session: AgentSession, rows: list[Message]) -> dict[str, Any]:
    context = services.governed_context(session)
    fates = Fates(context, record_state(session))
    return {
        "context": context,
        "timeline": [fates.fate(present_message(row)) for row in rows],
        # Where the next "earlier messages" page starts, while there is one.
        "earlier": rows[0].seq if rows and rows[0].seq > 0 else None,
    }


def _records(session: AgentSession) -> dict[str, Any]:
    return {
        # Numbered within the session, oldest first (the ids count every user's compactions).
        "compactions": list(
            Compaction.objects.filter(session=session)
            .select_related("actor", "undone_by", "supersedes", "job")
            .annotate(number=Window(RowNumber(), order_by=[F("created_at"), F("id")]))
            .order_by("-created_at", "-id")[:50]
        ),
        # The Governor's actions: where it changed what it had sent (a cache break).
        "actions": list(
            SentRequest.objects.filter(session=session, acted__in=GOVERNOR_ACTIONS).order_by(
                "-number"
            )[:20]
        ),
        "clears": list(
            Clear.objects.filter(session=session)
            .select_related("actor", "undone_by")
            .order_by("-created_at", "-id")[:20]
        ),
        "job": services.active_job(session),
    }


@require_GET
def session_detail(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    session = visible_session(request.user, pk)
    at = _seq_param(request, "at")
    if "at" in request.GET and at is None:
        return HttpResponseBadRequest("at: must be an integer seq", content_type="text/plain")
    rows = services.message_page(session, at=at)
    try:
        timeline = _timeline(session, rows)
    except UnreadableMessage as error:
        # The rest of the hub still works; this session's page says what is wrong.
        return render(request, "sessions/unreadable.html", {"session": session, "error": error})
    last = session.messages.order_by("-seq").values_list("seq", flat=True).first()
    following = not rows or rows[-1].seq == last
    return render(
        request,
        "sessions/detail.html",
        {
            "session": session,
            "can_change": may_change(request.user, session),
            "xray": xray(timeline["context"]),
            "totals": services.token_totals(session),
            **_trajectory(session, timeline["context"]),
            # A page that ends before the log does shows a "later" link and is not followed
            # live (new messages would leave a gap).
            "following": following,
            "next_at": None if following else rows[-1].seq + 1,
            "at": at,
            **timeline,
            **_records(session),
            **chat_context(session, empty=not rows),
        },
    )


@require_GET
def xray_fragment(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    """The header, meter and zone strip, re-rendered after any change (see static/js)."""
    session = visible_session(request.user, pk)
    running = running_turn(session)
    return render(
        request,
        "sessions/_xray.html",
        {
            "session": session,
            "xray": xray(services.governed_context(session)),
            # During a chat turn, the context is the one its latest request carried.
            "during": running.requests if running is not None else None,
        },
    )


@require_GET
def consumers_fragment(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    """What eats the context, by tool and argument: loaded when the x-ray's panel is opened."""
    session = visible_session(request.user, pk)
    context = services.governed_context(session)
    return render(
        request,
        "sessions/_consumers.html",
        {"session": session, "consumers": top_consumers(context)},
    )


def _trajectory(session: AgentSession, context: services.GovernedContext) -> dict[str, Any]:
    return {
        "trajectory": trajectory(session, services.session_limits(session, context)),
        "cache_weighting": services.session_cache_weighting(session),
    }


@require_GET
def trajectory_fragment(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    session = visible_session(request.user, pk)
    return render(
        request,
        "sessions/_trajectory.html",
        {"session": session, **_trajectory(session, services.governed_context(session))},
    )


@require_GET
def records_fragment(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    session = visible_session(request.user, pk)
    return render(
        request,
        "sessions/_records.html",
        {"session": session, "can_change": may_change(request.user, session), **_records(session)},
    )


@require_GET
def fates(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    """``?from=SEQ&to=SEQ``: the fate badges of the messages a page shows, as out-of-band
    swaps (what governance does to them changes with every append and record)."""
    session = visible_session(request.user, pk)
    first, last = _seq_param(request, "from"), _seq_param(request, "to")
    if first is None or last is None or last < first:
        return HttpResponseBadRequest(
            "from, to: integer seqs with from <= to", content_type="text/plain"
        )
    rows = list(session.messages.filter(seq__gte=max(first, last - FATES_LIMIT), seq__lte=last))
    return render(
        request,
        "sessions/_fates.html",
        {
            "session": session,
            "can_change": may_change(request.user, session),
            **_timeline(session, rows),
        },
    )


@require_GET
def messages(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    """``?after=SEQ``: everything later, with the meter (what a reconnecting socket missed).
    ``?before=SEQ``: the page of messages before it (the "earlier messages" button)."""
    session = visible_session(request.user, pk)
    can_change = may_change(request.user, session)
    if "before" in request.GET:
        before = _seq_param(request, "before")
        if before is None:
            return HttpResponseBadRequest(
                "before: must be an integer seq", content_type="text/plain"
            )
        rows = services.message_page(session, before=before)
        return render(
            request,
            "sessions/_messages_before.html",
            {"session": session, "can_change": can_change, **_timeline(session, rows)},
        )
    after = _seq_param(request, "after", default=-1)
    if after is None:
        return HttpResponseBadRequest("after: must be an integer seq", content_type="text/plain")
    rows = list(session.messages.filter(seq__gt=after))
    return render(
        request,
        "sessions/_messages_after.html",
        {
            "session": session,
            "can_change": can_change,
            "messages": [present_message(row) for row in rows],
            "totals": services.token_totals(session),
        },
    )


def _seq_param(request: HttpRequest, name: str, default: int | None = None) -> int | None:
    raw = request.GET.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        return None
    # Beyond the database's integer columns nothing exists: refused like any bad seq.
    return value if (0 <= value < 2**31) or value == default else None


@require_GET
def message_detail(request: AuthenticatedHttpRequest, pk: UUID, seq: int) -> HttpResponse:
    """The stored message in full: what was logged, before any governance."""
    session = visible_session(request.user, pk)
    row = get_object_or_404(Message, session=session, seq=seq)
    return render(
        request,
        "sessions/_parts.html",
        {"parts": present_message(row, full=True).parts, "session": session},
    )


@require_GET
def message_sent(request: AuthenticatedHttpRequest, pk: UUID, seq: int) -> HttpResponse:
    """What the next request carries for the message at ``seq``, after governance."""
    session = visible_session(request.user, pk)
    get_object_or_404(Message, session=session, seq=seq)
    sent = present_sent(services.governed_context(session), seq)
    return render(request, "sessions/_parts.html", {"parts": sent, "session": session})


@require_GET
def sent_request(request: AuthenticatedHttpRequest, pk: UUID, number: int) -> HttpResponse:
    """A request the session sent, opened as it was sent: its figures and its messages."""
    session = visible_session(request.user, pk)
    opened = services.open_sent_request(session, number)
    if opened is None:
        raise Http404("this session sent no such request")
    messages = [
        (message.kind, [present_part(part, full=False) for part in message.parts])
        for message in opened.messages
    ]
    return render(
        request,
        "sessions/sent_request.html",
        {"session": session, "opened": opened, "request": opened.row, "messages": messages},
    )


@require_GET
def evicted(request: AuthenticatedHttpRequest, pk: UUID, ref: str) -> HttpResponse:
    """An evicted output read back from storage: ``?offset=&limit=&grep=``."""
    session = visible_session(request.user, pk)
    offset = _seq_param(request, "offset", default=0)
    limit = _seq_param(request, "limit", default=200)
    if offset is None or limit is None or not 1 <= limit <= 2_000:
        return HttpResponseBadRequest(
            "offset: an integer >= 0; limit: an integer from 1 to 2000", content_type="text/plain"
        )
    grep = request.GET.get("grep", "")[:200] or None
    text = services.read_evicted_output(session, ref, offset=offset, limit=limit, grep=grep)
    if text is None:
        raise Http404("No such evicted output.")
    return render(
        request,
        "sessions/_evicted.html",
        {"session": session, "ref": ref, "text": text, "offset": offset, "grep": grep or ""},
    )


@require_POST
def recount(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    session = changeable_session(request.user, pk)
    job = tasks.recount_session_tokens.delay(str(session.pk))
    if not request.htmx:
        return redirect(session)
    # Eager jobs (the embedded default) are done already; a worker's result arrives over the
    # session's socket with the new meter.
    outcome = job.result if job.ready() else None
    return render(request, "sessions/_job_status.html", {"outcome": outcome})


@require_POST
def fork(request: AuthenticatedHttpRequest, pk: UUID, seq: int) -> HttpResponse:
    """Fork the session at a message into a new session of the user's (staff forking another's
    session they can see get their own), and open it."""
    session = visible_session(request.user, pk)
    try:
        made = services.fork_session(session, seq, actor=request.user)
    except services.ServiceError as error:
        return render(
            request,
            "sessions/_refused.html",
            {"message": error.message, "field": error.field},
            status=422,
        )
    url = made.get_absolute_url()
    if request.htmx:
        return HttpResponse(status=204, headers={"HX-Redirect": url})
    return redirect(url)


@require_GET
def export(request: AuthenticatedHttpRequest, pk: UUID) -> StreamingHttpResponse:
    """The session as a download: its JSONL export, or (``?format=markdown``) a transcript."""
    session = visible_session(request.user, pk)
    return transfer_routes.export_response(session, request.GET.get("format", "jsonl"))


@require_POST
def import_session(request: AuthenticatedHttpRequest) -> HttpResponse:
    """A session of the user from an uploaded file (an export, a pydantic-ai message list, an
    agent's transcript); a bad file is shown on the fleet page, naming its line, and nothing
    is stored. (Several files at once: the imports page.)"""
    upload = request.FILES.get("file")
    try:
        if upload is None:
            raise services.Invalid("choose a file (.jsonl, .json) to import", field="file")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if upload.size is not None and upload.size > limit:
            raise services.Invalid(f"the file is over the {limit:,}-byte limit", field="file")
        report = import_upload(upload.name or "upload", upload.read(), request.user)
    except services.ServiceError as error:
        context = {
            "page": fleet(request.user),
            "where": FleetFilter(),
            "sort": "fullest",
            "sorts": SORTS,
            "states": STATES,
            **fleet_choices(request.user),
            "chat_model": settings.CTXHUB_CHAT_MODEL,
            "import_error": error.message,
        }
        return render(request, "sessions/list.html", context, status=422)
    return redirect(report.sessions[0])


@login_not_required
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness for load balancers and compose: the process answers and the database too."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return HttpResponse("ok", content_type="text/plain")
