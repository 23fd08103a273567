"""The x-ray's controls: compaction (preview, apply, undo), clear (and undo), pins, policy.

Every change goes through ``sessions.services`` (locked, audited, pushed live to every open
tab); these views check who may act, read the form and render the answer. A refusal is a
4xx with the reason where the control is, never a 500.
"""

from __future__ import annotations

from uuid import UUID

from django.http import HttpResponse
from django.shortcuts import render
from django.utils.html import escape
from django.views.decorators.http import require_GET, require_POST

from ctxhub.governance import Policy
from sessions import services
from sessions.access import changeable_session
from sessions.http import AuthenticatedHttpRequest
from sessions.models import AgentSession
from sessions.policy_form import PolicyErrors, editor, policy_from_form
from sessions.services import Conflict, NotFound, ServiceError
from sessions.services.governed import base_window
from sessions.xray import compare

# What a person types to confirm a clear.
CLEAR_CONFIRMATION = "clear"


def _refused(
    request: AuthenticatedHttpRequest, error: ServiceError | str, *, field: str | None = None
) -> HttpResponse:
    message = error if isinstance(error, str) else error.message
    status = 409 if isinstance(error, Conflict) else 404 if isinstance(error, NotFound) else 422
    return render(
        request,
        "sessions/_refused.html",
        {"message": message, "field": field or getattr(error, "field", None)},
        status=status,
    )


def _keep_from(data: dict[str, str]) -> int | str | None:
    """The "compact everything above" seq of a form: None when absent, an error text if bad."""
    raw = data.get("keep_from", "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        return "keep_from: must be the seq of a message"
    return value if 0 <= value < 2**31 else "keep_from: must be the seq of a message"


def _changed() -> HttpResponse:
    """Done: the acting tab refreshes what changed at once (others hear it on the socket)."""
    return HttpResponse(status=204, headers={"HX-Trigger": "ctxhub-changed"})


def _changeable(request: AuthenticatedHttpRequest, pk: UUID) -> AgentSession:
    return changeable_session(request.user, pk)


@require_GET
def compaction_preview(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    """A dry run: what compacting now would summarise and keep, and the button to apply it."""
    session = _changeable(request, pk)
    focus = request.GET.get("focus", "")
    keep_from = _keep_from(request.GET.dict())
    if isinstance(keep_from, str):
        return _refused(request, keep_from, field="keep_from")
    if len(focus) > 2_000:
        return _refused(request, "focus: at most 2,000 characters", field="focus")
    try:
        preview = services.preview_compaction(session, focus=focus.strip(), keep_from=keep_from)
    except ServiceError as error:
        return _refused(request, error)
    return render(
        request, "sessions/_compaction_preview.html", {"session": session, "preview": preview}
    )


@require_POST
def compact(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    """Apply a previewed plan: refused as a conflict if the session changed since."""
    session = _changeable(request, pk)
    keep_from = _keep_from(request.POST.dict())
    if isinstance(keep_from, str):
        return _refused(request, keep_from, field="keep_from")
    expected = request.POST.get("expected") or None
    try:
        job = services.request_compaction(
            session,
            actor=request.user,
            focus=request.POST.get("focus", ""),
            expected=expected,
            keep_from=keep_from,
        ).job
    except ServiceError as error:
        return _refused(request, error)
    job.refresh_from_db()
    return render(
        request,
        "sessions/_job_progress.html",
        {"job": job, "stage": "queued" if job.status == "queued" else job.status, "data": {}},
    )


@require_POST
def undo_compaction(request: AuthenticatedHttpRequest, pk: UUID, compaction: int) -> HttpResponse:
    session = _changeable(request, pk)
    try:
        services.undo_compaction(session, compaction, actor=request.user)
    except ServiceError as error:
        return _refused(request, error)
    return _changed()


@require_POST
def clear(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    """``/clear``: the conversation so far is dropped, the system prompt, instructions and pins
    stay; the log keeps everything. The answer says what stayed."""
    session = _changeable(request, pk)
    if request.POST.get("confirm", "").strip().lower() != CLEAR_CONFIRMATION:
        return _refused(request, f'confirm: type "{CLEAR_CONFIRMATION}" to clear', field="confirm")
    try:
        cleared = services.clear(session, actor=request.user)
    except ServiceError as error:
        return _refused(request, error)
    said = (
        f"Cleared before message #{cleared.record.from_seq}: {cleared.summary()}. "
        "The log keeps everything; undo it under Records."
    )
    return HttpResponse(escape(said), headers={"HX-Trigger": "ctxhub-changed"})


@require_POST
def undo_clear(request: AuthenticatedHttpRequest, pk: UUID, clear: int) -> HttpResponse:
    session = _changeable(request, pk)
    try:
        services.undo_clear(session, clear, actor=request.user)
    except ServiceError as error:
        return _refused(request, error)
    return _changed()


@require_POST
def pin(request: AuthenticatedHttpRequest, pk: UUID, seq: int) -> HttpResponse:
    session = _changeable(request, pk)
    try:
        if request.POST.get("pinned", "true") == "false":
            services.unpin(session, seq, actor=request.user)
        else:
            services.pin(session, seq, actor=request.user)
    except ServiceError as error:
        return _refused(request, error)
    return _changed()


@require_POST
def resume_auto(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    session = _changeable(request, pk)
    services.resume_auto_compaction(session, actor=request.user)
    return _changed()


# --- the policy editor --------------------------------------------------------------------


@require_GET
def policy_editor(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    session = _changeable(request, pk)
    return render(
        request,
        "sessions/_policy.html",
        {"session": session, **editor(session.policy or {})},
    )


def _edited(
    request: AuthenticatedHttpRequest, session: AgentSession, *, whole_form: bool
) -> Policy | HttpResponse:
    """The submitted policy, validated once, here; or a 422 with each refused knob's reason:
    the form again (saving), or just the reasons, so a live preview never replaces what is
    being typed."""
    try:
        return policy_from_form(request.POST.dict(), window=base_window(session))
    except PolicyErrors as error:
        shown = editor(error.submitted, error.errors, error.typed)
        if not whole_form:
            return render(request, "sessions/_policy_errors.html", shown, status=422)
        return render(request, "sessions/_policy.html", {"session": session, **shown}, status=422)


@require_POST
def policy_preview(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    """The x-ray under the edited policy, beside the current one: nothing is saved. A form
    posted without htmx gets the editor back, with its edits and the preview."""
    session = _changeable(request, pk)
    edited = _edited(request, session, whole_form=not request.htmx)
    if isinstance(edited, HttpResponse):
        return edited
    context = {"session": session, "replay": compare(session, edited), **editor(edited.overrides())}
    template = "sessions/_policy_preview.html" if request.htmx else "sessions/_policy.html"
    return render(request, template, context)


@require_POST
def policy_save(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    session = _changeable(request, pk)
    edited = _edited(request, session, whole_form=True)
    if isinstance(edited, HttpResponse):
        return edited
    try:
        services.set_policy(session, edited, actor=request.user)
    except ServiceError as error:
        return _refused(request, error)
    response = render(
        request,
        "sessions/_policy.html",
        {"session": session, **editor(edited.overrides()), "saved": True},
    )
    response.headers["HX-Trigger"] = "ctxhub-changed"
    return response
