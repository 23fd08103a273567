"""``/api/v1``: sessions, their messages, the governed context, compactions, clears, pins,
evicted outputs, and stateless governance. Thin: access and scopes here, the rest in
``sessions.services``."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

import regex
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import IntegrityError, OperationalError, transaction
from django.db.models import Count, Q, QuerySet, Sum
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.params import HeaderEx, P, PathEx, QueryEx
from ninja.security import HttpBearer
from pydantic import ValidationError as PydanticError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from ctxhub.governance import ContextReport, Policy, govern
from ctxhub.governance.tokens import context_window
from sessions import outages, services, tasks
from sessions.api import limits
from sessions.api.errors import ApiError, dotted_to_path, error_response, field_path, handle
from sessions.api.keys import authenticate
from sessions.api.schemas import (
    ERRORS,
    AppendIn,
    AppendOut,
    CompactionIn,
    ContextOut,
    EvictedOut,
    GovernIn,
    JobOut,
    MessagePage,
    RecordOut,
    SessionIn,
    SessionOut,
    SessionPage,
    SessionPatch,
)
from sessions.history import UnreadableMessage
from sessions.models import (
    AgentSession,
    ApiKey,
    Clear,
    Compaction,
    CompactionJob,
    IdempotentRequest,
    Message,
    MessageSource,
)
from sessions.payloads import InvalidPayload, parse_payload
from sessions.services import ServiceError
from sessions.services.governed import ensure_room

# Seqs and record ids fit the database's integer columns: a larger one is a 422, not an error.
MAX_ID = 2**31 - 1
RecordId = PathEx[int, P(ge=0, le=MAX_ID)]


class KeyAuth(HttpBearer):
    """A live API key; also where a body over the limit and a key over its rate stop."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            raise _too_large()
        key = authenticate(token)
        if key is not None:
            limits.check(key)
        return key


def _too_large() -> ApiError:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return ApiError(413, "too_large", f"the body is over the {limit:,}-byte limit; nothing stored")


api = NinjaAPI(
    title="ctxhub",
    version="1",
    description="Push an agent's history, pull the governed context, steer it.",
    urls_namespace="api",
    auth=KeyAuth(),
)


@api.exception_handler(ApiError)
def _api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return handle(request, exc)


@api.exception_handler(ServiceError)
def _service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    return handle(request, exc)


@api.exception_handler(UnreadableMessage)
def _unreadable(request: HttpRequest, exc: UnreadableMessage) -> HttpResponse:
    # The session's stored state is at fault, not the request: 409, saying which message.
    return error_response(409, "unreadable_message", str(exc), field="seq", seq=exc.seq)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(
        401,
        "unauthenticated",
        "a valid API key is required: Authorization: Bearer <key> (missing, wrong, revoked "
        "or expired)",
        headers={"WWW-Authenticate": "Bearer"},
    )


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = [
        {"field": field_path(error.get("loc", ())), "message": error.get("msg", "invalid")}
        for error in exc.errors
    ]
    first = errors[0] if errors else {"field": None, "message": "invalid request"}
    return error_response(
        422, "invalid", f"{first['field']}: {first['message']}", field=first["field"], errors=errors
    )


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(404, "not_found", str(exc) or "not found")


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return handle(request, _too_large())


@api.exception_handler(OperationalError)
def _database_unavailable(request: HttpRequest, exc: OperationalError) -> HttpResponse:
    return outages.unavailable(request, "the database")


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if str(exc).startswith("Cannot parse request body"):  # ninja's words for it
        message = "body: not JSON, or nested deeper than a JSON parser goes"
        return error_response(exc.status_code, "bad_request", message, field="body")
    return error_response(exc.status_code, "bad_request", str(exc))


# --- access ------------------------------------------------------------------------------------


def _key(request: HttpRequest) -> ApiKey:
    key: ApiKey = request.auth  # type: ignore[attr-defined]
    return key


def _need(request: HttpRequest, scope: str) -> ApiKey:
    key = _key(request)
    if scope not in key.scopes:
        raise ApiError(403, "forbidden", f"this key lacks the {scope!r} scope", field="scope")
    return key


def _session(request: HttpRequest, session_id: UUID, scope: str) -> AgentSession:
    """The key owner's session; another's is a 404, whatever the key's scopes."""
    key = _need(request, scope)
    try:
        return AgentSession.objects.get(pk=session_id, owner_id=key.owner_id)
    except AgentSession.DoesNotExist:
        raise ApiError(404, "not_found", f"no session {session_id}") from None


def _policy(overrides: dict[str, Any], field: str = "policy") -> Policy:
    try:
        return Policy.model_validate(overrides)
    except PydanticError as exc:
        error = exc.errors()[0]
        path = f"{field}.{field_path(error['loc'])}" if error["loc"] else field
        raise ApiError(422, "invalid", f"{path}: {error['msg']}", field=path) from None


# --- sessions ----------------------------------------------------------------------------------


def _with_figures(rows: QuerySet[AgentSession]) -> QuerySet[AgentSession]:
    return rows.annotate(message_count=Count("messages"), token_total=Sum("messages__tokens"))


def _session_out(session: AgentSession) -> dict[str, Any]:
    """A session of a queryset made by ``_with_figures``."""
    return {
        "id": session.pk,
        "title": session.title,
        "model": session.model,
        "context_window": session.context_window,
        "policy": session.policy,
        "messages": session.message_count,  # type: ignore[attr-defined]
        "tokens": session.token_total or 0,  # type: ignore[attr-defined]
        "created_at": session.created_at,
        "updated_at": session.updated_at,
    }


def _described(session: AgentSession) -> dict[str, Any]:
    return _session_out(_with_figures(AgentSession.objects.filter(pk=session.pk)).get())


@api.post("/sessions", response={201: SessionOut, **ERRORS}, tags=["sessions"])
def create_session(request: HttpRequest, body: SessionIn) -> Status[dict[str, Any]]:
    """A new session."""
    key = _need(request, "write")
    policy = _policy(body.policy)
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


@api.get("/sessions", response={200: SessionPage, **ERRORS}, tags=["sessions"])
def list_sessions(
    request: HttpRequest, cursor: str | None = None, limit: QueryEx[int, P(ge=1, le=100)] = 20
) -> dict[str, Any]:
    """The key owner's sessions, newest first, a page at a time."""
    key = _need(request, "read")
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


@api.get("/sessions/{session_id}", response={200: SessionOut, **ERRORS}, tags=["sessions"])
def get_session(request: HttpRequest, session_id: UUID) -> dict[str, Any]:
    return _described(_session(request, session_id, "read"))


@api.patch("/sessions/{session_id}", response={200: SessionOut, **ERRORS}, tags=["sessions"])
def patch_session(request: HttpRequest, session_id: UUID, body: SessionPatch) -> dict[str, Any]:
    """Change the title, model, window or policy; a new model recounts the stored tokens."""
    session = _session(request, session_id, "write")
    changes = body.model_dump(exclude_unset=True)
    fields = [name for name in ("title", "model", "context_window") if name in changes]
    for name in fields:
        if name != "context_window" and changes[name] is None:
            raise ApiError(422, "invalid", f"{name}: may not be null", field=name)
    # The policy and window as they will be must leave the history room; checked before
    # anything is stored, naming what changed.
    new_policy = changes.get("policy")
    policy = _policy(new_policy if new_policy is not None else session.policy or {})
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
            services.set_policy(session, policy, actor=_key(request).owner)
    if "model" in fields:
        tasks.recount_session_tokens.delay(str(session.pk))
    return _described(session)


# --- messages ----------------------------------------------------------------------------------


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
    api_key = _key(request)
    fingerprint = _fingerprint(request)

    def stored() -> tuple[int, dict[str, Any]] | None:
        try:
            found = IdempotentRequest.objects.get(api_key=api_key, key=key)
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
                api_key=api_key, key=key, fingerprint=fingerprint, status=status, body=body
            )
    except (IntegrityError, ServiceError):
        earlier = stored()
        if earlier is None:
            raise
        return earlier
    return status, body


@api.post("/sessions/{session_id}/messages", response={201: AppendOut, **ERRORS}, tags=["messages"])
def append(
    request: HttpRequest,
    session_id: UUID,
    body: AppendIn,
    idempotency_key: HeaderEx[str | None, P(alias="Idempotency-Key")] = None,
) -> Status[dict[str, Any]]:
    """Append messages, all or none. A retry with the same Idempotency-Key stores nothing
    more and answers the same; ``expected_seq`` guards against a concurrent append."""
    session = _session(request, session_id, "write")
    messages = _parsed(body.messages)

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


def _parsed(items: list[dict[str, Any]]) -> list[ModelMessage]:
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


def _stored(row: Message) -> dict[str, Any]:
    return {
        "seq": row.seq,
        "kind": row.kind,
        "tokens": row.tokens,
        "source": row.source,
        "created_at": row.created_at,
        "message": row.payload,
    }


@api.get(
    "/sessions/{session_id}/messages", response={200: MessagePage, **ERRORS}, tags=["messages"]
)
def messages(
    request: HttpRequest,
    session_id: UUID,
    after_seq: QueryEx[int | None, P(ge=-1, le=MAX_ID)] = None,
    limit: QueryEx[int, P(ge=1, le=1_000)] = 100,
) -> dict[str, Any]:
    """Messages after a seq, oldest first; with only ``limit``, the newest, in order."""
    session = _session(request, session_id, "read")
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


# --- the governed context ------------------------------------------------------------------


def _context_answer(messages: list[ModelMessage], report: ContextReport) -> HttpResponse:
    """The governed context as ``ContextOut`` JSON, serialised by pydantic's core in one pass:
    the largest answer the API gives, and an agent asks for it before every model request."""
    body = b"".join(
        (
            b'{"messages":',
            ModelMessagesTypeAdapter.dump_json(messages),
            b',"report":',
            report.__pydantic_serializer__.to_json(report),
            b"}",
        )
    )
    return HttpResponse(body, content_type="application/json")


@api.get("/sessions/{session_id}/context", response={200: ContextOut, **ERRORS}, tags=["context"])
def context(
    request: HttpRequest,
    session_id: UUID,
    model: QueryEx[str | None, P(max_length=200)] = None,
    max_tokens: QueryEx[int | None, P(ge=1_000, le=10_000_000)] = None,
) -> HttpResponse:
    """Exactly what to send next, and why (the ContextReport). ``model`` counts with another
    model's tokenizer; ``max_tokens`` governs against a smaller window."""
    session = _session(request, session_id, "read")
    policy = None
    if max_tokens is not None:
        overrides = {**(session.policy or {}), "context_window": max_tokens}
        policy = _policy(overrides, field="max_tokens")
    found = services.governed_context(session, policy=policy, model=model)
    return _context_answer(found.messages, found.report)


@api.post("/govern", response={200: ContextOut, **ERRORS}, tags=["context"])
def govern_stateless(request: HttpRequest, body: GovernIn) -> HttpResponse:
    """Govern a history sent whole (nothing is stored): for agents that keep their own."""
    _need(request, "read")
    messages = _parsed(body.messages)
    governed = govern(messages, _policy(body.policy), model=body.model)
    return _context_answer(governed.messages, governed.report)


# --- compactions, clears, pins ---------------------------------------------------------------


def _job_out(job: CompactionJob) -> dict[str, Any]:
    return {
        "id": job.pk,
        "session": job.session_id,
        "status": job.status,
        "trigger": job.trigger,
        "focus": job.focus,
        "outcome": job.outcome,
        "error": job.error,
        "progress": job.progress,
        "result": job.result,
        "created_at": job.created_at,
        "finished_at": job.finished_at,
    }


@api.post(
    "/sessions/{session_id}/compactions",
    response={200: dict[str, Any], 202: JobOut, **ERRORS},
    tags=["compactions"],
)
def compact(request: HttpRequest, session_id: UUID, body: CompactionIn) -> Status[dict[str, Any]]:
    """A dry run (the preview: what would be summarised and kept) or a compaction job (202);
    a second while one runs is a 409 naming it."""
    session = _session(request, session_id, "govern")
    if body.dry_run:
        preview = services.preview_compaction(session, focus=body.focus, keep_from=body.keep_from)
        return Status(
            200,
            {
                "fingerprint": preview.fingerprint,
                "nothing_to_compact": preview.nothing_to_compact,
                "summarized_seqs": preview.summarized_seqs,
                "kept_seqs": preview.kept_seqs,
                "kept_user_seqs": preview.kept_user_seqs,
                "tokens_before": preview.tokens_before,
                "tokens_after_estimate": preview.tokens_after_estimate,
                "summarizer": preview.summarizer,
            },
        )
    requested = services.request_compaction(
        session,
        actor=_key(request).owner,
        focus=body.focus,
        keep_from=body.keep_from,
        expected=body.expected,
    )
    requested.job.refresh_from_db()
    return Status(202, _job_out(requested.job))


@api.get("/jobs/{job_id}", response={200: JobOut, **ERRORS}, tags=["compactions"])
def job(request: HttpRequest, job_id: UUID) -> dict[str, Any]:
    key = _need(request, "read")
    found = CompactionJob.objects.filter(pk=job_id, session__owner=key.owner).first()
    if found is None:
        raise ApiError(404, "not_found", f"no job {job_id}")
    return _job_out(found)


@api.post(
    "/compactions/{compaction_id}/undo", response={200: RecordOut, **ERRORS}, tags=["compactions"]
)
def undo_compaction(request: HttpRequest, compaction_id: RecordId) -> dict[str, Any]:
    key = _need(request, "govern")
    record = Compaction.objects.filter(pk=compaction_id, session__owner=key.owner).first()
    if record is None:
        raise ApiError(404, "not_found", f"no compaction {compaction_id}")
    services.undo_compaction(record.session, compaction_id, actor=key.owner)
    return {"id": compaction_id, "kind": "compaction", "undone": True}


@api.post("/sessions/{session_id}/clear", response={201: RecordOut, **ERRORS}, tags=["compactions"])
def clear(request: HttpRequest, session_id: UUID) -> Status[dict[str, Any]]:
    """The model sees nothing stored so far (the log keeps it; undo with /clears/{id}/undo)."""
    session = _session(request, session_id, "govern")
    record = services.clear(session, actor=_key(request).owner)
    return Status(201, {"id": record.pk, "kind": "clear", "undone": False})


@api.post("/clears/{clear_id}/undo", response={200: RecordOut, **ERRORS}, tags=["compactions"])
def undo_clear(request: HttpRequest, clear_id: RecordId) -> dict[str, Any]:
    key = _need(request, "govern")
    record = Clear.objects.filter(pk=clear_id, session__owner=key.owner).first()
    if record is None:
        raise ApiError(404, "not_found", f"no clear {clear_id}")
    services.undo_clear(record.session, clear_id, actor=key.owner)
    return {"id": clear_id, "kind": "clear", "undone": True}


@api.put(
    "/sessions/{session_id}/pins/{seq}", response={200: RecordOut, **ERRORS}, tags=["compactions"]
)
def pin(request: HttpRequest, session_id: UUID, seq: RecordId) -> dict[str, Any]:
    session = _session(request, session_id, "govern")
    record = services.pin(session, seq, actor=_key(request).owner)
    return {"id": record.pk, "kind": "pin", "undone": False}


@api.delete(
    "/sessions/{session_id}/pins/{seq}", response={200: RecordOut, **ERRORS}, tags=["compactions"]
)
def unpin(request: HttpRequest, session_id: UUID, seq: RecordId) -> dict[str, Any]:
    session = _session(request, session_id, "govern")
    record = services.unpin(session, seq, actor=_key(request).owner)
    return {"id": record.pk, "kind": "pin", "undone": True}


@api.get(
    "/sessions/{session_id}/evicted/{ref}", response={200: EvictedOut, **ERRORS}, tags=["context"]
)
def evicted(
    request: HttpRequest,
    session_id: UUID,
    ref: str,
    offset: QueryEx[int, P(ge=0)] = 0,
    limit: QueryEx[int, P(ge=1, le=5_000)] = 200,
    grep: QueryEx[str | None, P(max_length=500)] = None,
) -> dict[str, Any]:
    """An output governance evicted, read back by its reference: numbered lines, or grep."""
    session = _session(request, session_id, "read")
    if grep:
        try:
            regex.compile(grep)
        except regex.error as exc:
            raise ApiError(
                422, "invalid", f"grep: not a regular expression ({exc})", field="grep"
            ) from None
    text = services.read_evicted_output(session, ref, offset=offset, limit=limit, grep=grep)
    if text is None:
        raise ApiError(404, "not_found", f"no evicted output {ref!r} in this session")
    return {"ref": ref, "text": text}


def urls() -> tuple[list[Any], str, str]:
    """The API's URL patterns; keys authenticate them, not the login page."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        pattern.callback.login_required = False  # type: ignore[union-attr]
    return patterns, app_name, namespace
