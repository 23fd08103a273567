"""The dashboard's transcripts: the files imported (and dropping more on the page), and what
ctxhub would have done with each session, and with all of them."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods

from ctxhub.governance import Policy
from gateway.wire import storable_text
from sessions import services
from sessions.access import visible_session
from sessions.http import AuthenticatedHttpRequest
from transcripts.importing import FileImport
from transcripts.models import Transcript, TranscriptFile
from transcripts.uploads import import_upload
from transcripts.whatif import WhatIf, what_if

FLEET_SECONDS = 5.0
"""How long the fleet page replays sessions not replayed before; the rest wait for a reload."""


@require_http_methods(["GET", "POST"])
def imports(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The user's imported transcripts; a POST of files (any the hub reads) imports them."""
    reports = upload(request) if request.method == "POST" else []
    files = (
        TranscriptFile.objects.filter(owner=request.user)
        .prefetch_related("transcripts__session")
        .order_by("-updated_at")
    )
    status = 422 if reports and all(report.problem for report in reports) else 200
    return render(
        request, "transcripts/imports.html", {"files": files, "reports": reports}, status=status
    )


def upload(request: AuthenticatedHttpRequest) -> list[FileImport]:
    """Each file of the request read into the user's sessions; one that cannot be is reported
    (what is wrong, nothing of it stored) and the others read all the same."""
    uploads = request.FILES.getlist("file")
    if not uploads:
        return [FileImport("", problem="choose one or more files to import")]
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    reports = []
    for item in uploads:
        name = storable_text(item.name or "upload")[:200]
        if item.size is not None and item.size > limit:
            reports.append(
                FileImport(name, problem=f"over the {limit:,}-byte limit; nothing stored")
            )
            continue
        try:
            reports.append(import_upload(name, item.read(), request.user))
        except services.ServiceError as error:
            reports.append(FileImport(name, problem=error.message))
    return reports


@require_GET
def session_what_if(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    """One imported session's requests as the agent sent them and as ctxhub would have."""
    session = visible_session(request.user, pk)
    default = request.GET.get("policy") == "default"
    kept = request.GET.get("compactions") == "kept"
    result = what_if(session, Policy() if default else None, keep_agent_compactions=kept)
    share = result.saved_share
    later = len(result.rows) - (result.calibration.requests if result.calibration else 0)
    return render(
        request,
        "transcripts/what_if.html",
        {
            "session": session,
            "result": result,
            "default_policy": default,
            "kept": kept,
            "agent": result.side("agent"),
            "ours": result.side("ctxhub"),
            "output": result.output,
            "saved_percent": abs(share) * 100 if share is not None else None,
            # Under a twentieth of a percent either way is the calibration's noise, not money.
            "same_money": share is not None and abs(share) < 0.0005,
            "later": later,
            "error_median": _percent(result.error_median),
            "error_max": _percent(result.error_max),
        },
    )


def _fleet_row(session: Any, result: WhatIf) -> dict[str, Any]:
    return {
        "session": session,
        "requests": len(result.rows),
        "problem": result.problem,
        "agent": result.total("agent", "cost"),
        "ours": result.total("ctxhub", "cost"),
        "saved": result.saved,
    }


def _percent(value: float | None) -> float | None:
    return None if value is None else value * 100


@require_GET
def fleet_what_if(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Every imported session of the user: the money recorded, and with ctxhub."""
    transcripts = Transcript.objects.filter(session__owner=request.user).select_related(
        "session", "file"
    )
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    waiting = 0
    for transcript in transcripts.order_by("-session__updated_at"):
        if time.monotonic() - started > FLEET_SECONDS:
            waiting += 1
            continue
        rows.append(_fleet_row(transcript.session, what_if(transcript.session)))
    agent = sum((row["agent"] or Decimal(0) for row in rows), Decimal(0))
    ours = sum((row["ours"] or Decimal(0) for row in rows), Decimal(0))
    return render(
        request,
        "transcripts/fleet_what_if.html",
        {
            "rows": rows,
            "agent": agent,
            "ours": ours,
            "saved": agent - ours,
            "saved_percent": abs(agent - ours) / agent * 100 if agent else None,
            "waiting": waiting,
        },
    )
