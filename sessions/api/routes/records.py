"""What changes what the model sees: compactions and their jobs, clears, pins, undo; and what
governance hid, read back: evicted outputs by reference, anything by ``recall``."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import regex
from django.http import HttpRequest
from ninja import Field, Router, Status
from ninja.params import P, QueryEx

from ctxhub.governance.recall import MOST_RESULTS, answer, query_terms
from sessions import services
from sessions.api.access import RecordId, api_key, need, owned_session
from sessions.api.errors import ApiError
from sessions.api.schemas import (
    ERRORS,
    CompactionIn,
    EvictedOut,
    JobOut,
    PreviewOut,
    RecallOut,
    RecordOut,
)
from sessions.figures import job_words
from sessions.models import ApiKey, Clear, Compaction, CompactionJob

router = Router()


def _job_out(job: CompactionJob) -> dict[str, Any]:
    return {
        "id": job.pk,
        "session": job.session_id,
        "status": job.status,
        "trigger": job.trigger,
        "focus": job.focus,
        "outcome": job.outcome,
        "error": job.error,
        "message": job_words(job),
        "progress": job.progress,
        "result": job.result,
        "created_at": job.created_at,
        "finished_at": job.finished_at,
    }


@router.post(
    "/sessions/{session_id}/compactions",
    response={200: PreviewOut, 202: JobOut, **ERRORS},
    tags=["compactions"],
)
def compact(
    request: HttpRequest, session_id: UUID, body: CompactionIn
) -> Status[dict[str, Any]] | Status[PreviewOut]:
    """A dry run (the preview: what would be summarised and kept, and what the next request
    would carry) or a compaction job (202); a second while one runs is a 409 naming it."""
    session = owned_session(request, session_id, "govern")
    if body.dry_run:
        preview = services.preview_compaction(session, focus=body.focus, keep_from=body.keep_from)
        return Status(
            200,
            PreviewOut(
                fingerprint=preview.fingerprint,
                nothing_to_compact=preview.nothing_to_compact,
                message=preview.message,
                summarized_seqs=preview.summarized_seqs,
                kept_seqs=preview.kept_seqs,
                kept_user_seqs=preview.kept_user_seqs,
                messages=preview.messages,
                unseen=preview.unseen,
                sent_now=preview.sent_now,
                sent_after_max=preview.sent_after_max,
                low_water=preview.low_water,
                window_tokens=preview.window_tokens,
                shrinks=preview.shrinks,
                refused=preview.refused,
                tokens_before=preview.tokens_before,
                tokens_after_estimate=preview.tokens_after_estimate,
                summarizer=preview.summarizer,
            ),
        )
    requested = services.request_compaction(
        session,
        actor=api_key(request).owner,
        focus=body.focus,
        keep_from=body.keep_from,
        expected=body.expected,
    )
    requested.job.refresh_from_db()
    return Status(202, _job_out(requested.job))


def _owned[R: (CompactionJob, Compaction, Clear)](
    model: type[R], pk: Any, key: ApiKey, what: str
) -> R:
    """The key owner's job or record; another's is a 404, like one that does not exist."""
    found = model.objects.filter(pk=pk, session__owner=key.owner).first()
    if found is None:
        raise ApiError(404, "not_found", f"no {what} {pk}")
    return found


@router.get("/jobs/{job_id}", response={200: JobOut, **ERRORS}, tags=["compactions"])
def job(request: HttpRequest, job_id: UUID) -> dict[str, Any]:
    return _job_out(_owned(CompactionJob, job_id, need(request, "read"), "job"))


@router.post(
    "/compactions/{compaction_id}/undo", response={200: RecordOut, **ERRORS}, tags=["compactions"]
)
def undo_compaction(request: HttpRequest, compaction_id: RecordId) -> dict[str, Any]:
    key = need(request, "govern")
    record = _owned(Compaction, compaction_id, key, "compaction")
    services.undo_compaction(record.session, compaction_id, actor=key.owner)
    return {"id": compaction_id, "kind": "compaction", "undone": True}


class ClearOut(RecordOut):
    from_seq: int = Field(description="Messages from this seq on are not cleared.")
    kept_tokens: int = Field(description="Tokens of the system prompt and instructions kept.")
    pinned: int = Field(description="Pinned messages from before the clear, which stay.")
    dropped: int = Field(description="Messages the model saw before and no longer sees.")
    message: str = Field(description="What stays and what goes, in words.")


@router.post(
    "/sessions/{session_id}/clear", response={201: ClearOut, **ERRORS}, tags=["compactions"]
)
def clear(request: HttpRequest, session_id: UUID) -> Status[dict[str, Any]]:
    """Drop the conversation stored so far: the system prompt, the latest instructions and the
    pinned messages stay (the log keeps everything; undo with /clears/{id}/undo)."""
    session = owned_session(request, session_id, "govern")
    cleared = services.clear(session, actor=api_key(request).owner)
    return Status(
        201,
        {
            "id": cleared.record.pk,
            "kind": "clear",
            "undone": False,
            "from_seq": cleared.record.from_seq,
            "kept_tokens": cleared.kept_tokens,
            "pinned": cleared.pinned,
            "dropped": cleared.dropped,
            "message": cleared.summary(),
        },
    )


@router.post("/clears/{clear_id}/undo", response={200: RecordOut, **ERRORS}, tags=["compactions"])
def undo_clear(request: HttpRequest, clear_id: RecordId) -> dict[str, Any]:
    key = need(request, "govern")
    record = _owned(Clear, clear_id, key, "clear")
    services.undo_clear(record.session, clear_id, actor=key.owner)
    return {"id": clear_id, "kind": "clear", "undone": True}


@router.put(
    "/sessions/{session_id}/pins/{seq}", response={200: RecordOut, **ERRORS}, tags=["compactions"]
)
def pin(request: HttpRequest, session_id: UUID, seq: RecordId) -> dict[str, Any]:
    session = owned_session(request, session_id, "govern")
    record = services.pin(session, seq, actor=api_key(request).owner)
    return {"id": record.pk, "kind": "pin", "undone": False}


@router.delete(
    "/sessions/{session_id}/pins/{seq}", response={200: RecordOut, **ERRORS}, tags=["compactions"]
)
def unpin(request: HttpRequest, session_id: UUID, seq: RecordId) -> dict[str, Any]:
    session = owned_session(request, session_id, "govern")
    record = services.unpin(session, seq, actor=api_key(request).owner)
    return {"id": record.pk, "kind": "pin", "undone": True}


@router.get(
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
    session = owned_session(request, session_id, "read")
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


@router.get("/sessions/{session_id}/recall", response={200: RecallOut, **ERRORS}, tags=["context"])
def recall(
    request: HttpRequest,
    session_id: UUID,
    query: QueryEx[str, P(min_length=1, max_length=1_000)],
    limit: QueryEx[int, P(ge=1, le=MOST_RESULTS)] = 5,
) -> dict[str, Any]:
    """Search what the session's next request no longer carries in full (masked, cut and
    evicted outputs, messages dropped or summarised; not what a clear hid): the passages that
    match ``query`` best, one per part, with their seq. What the ``recall`` tool answers a
    model with."""
    session = owned_session(request, session_id, "read")
    if not query_terms(query):
        raise ApiError(422, "invalid", "query: has no word to search for", field="query")
    hits = services.recall(session, query, limit)
    return {"query": query, "hits": hits, "text": answer(query, hits)}
