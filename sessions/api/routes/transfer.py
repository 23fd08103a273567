"""Export a session (JSONL, or a Markdown transcript) and import one as a new session (see
``sessions.services.transfer`` for the format)."""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from django.http import HttpRequest, StreamingHttpResponse
from ninja import Router, Status

from gateway.wire import storable_text
from sessions.api.access import need, owned_session
from sessions.api.routes.sessions import _described
from sessions.api.schemas import ERRORS, SessionOut, TranscriptImportOut
from sessions.services import transfer
from transcripts.models import Format
from transcripts.uploads import import_upload

router = Router()

JSONL = "application/x-ndjson"
MARKDOWN = "text/markdown; charset=utf-8"
_TEXT = {"schema": {"type": "string"}}


def export_response(session: Any, format: str) -> StreamingHttpResponse:
    """The export as a download, streamed a line at a time (the dashboard serves it too)."""
    if format == "markdown":
        lines, content_type, extension = transfer.export_markdown(session), MARKDOWN, "md"
    else:
        lines, content_type, extension = transfer.export_lines(session), JSONL, "jsonl"
    response = StreamingHttpResponse(lines, content_type=content_type)
    name = transfer.export_filename(session, extension)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@router.get(
    "/sessions/{session_id}/export",
    response={**ERRORS},
    tags=["sessions"],
    openapi_extra={
        "responses": {
            200: {
                "description": "The session as JSONL (its log and records), or a transcript.",
                "content": {JSONL: _TEXT, "text/markdown": _TEXT},
            }
        }
    },
)
def export_session(
    request: HttpRequest, session_id: UUID, format: Literal["jsonl", "markdown"] = "jsonl"
) -> StreamingHttpResponse:
    """The session as a file: ``jsonl`` (one JSON object a line: a header, every message,
    then the records), which ``POST /sessions/import`` reads back, or ``markdown``, to read."""
    return export_response(owned_session(request, session_id, "read"), format)


@router.post(
    "/sessions/import",
    response={201: SessionOut | TranscriptImportOut, **ERRORS},
    tags=["sessions"],
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "The file, as the body: an export's JSONL, a pydantic-ai message "
            "list's JSON, or a Claude Code or Codex transcript's JSONL.",
            "content": {JSONL: _TEXT, "application/json": _TEXT, "text/plain": _TEXT},
        }
    },
)
def import_session(
    request: HttpRequest,
    format: Literal["ctxhub", "pydantic-ai", "claude-code", "codex"] | None = None,
    name: str = "upload",
) -> Status[dict[str, Any]]:
    """Sessions of the key's owner from a file (the body), of the ``format`` named or, left
    out, the one it is read as. An export (``ctxhub``) or a pydantic-ai message list is a new
    session (a SessionOut), validated whole first: a bad line or message is a 422 naming it,
    nothing stored. A transcript (``claude-code``, ``codex``) adds to the sessions read from
    it before (the same file sent again adds only what was written since; its sub-agents are
    sessions of their own) and answers with what it added; its unreadable lines are listed,
    the rest is read. ``name``: what to call the file in the sessions' source."""
    key = need(request, "write")
    # A label only, but stored: no NUL (nor half a surrogate pair) reaches the database.
    report = import_upload(storable_text(name)[:200], request.body, key.owner, format)
    if report.format not in Format.values:
        return Status(201, _described(report.sessions[0]))
    return Status(
        201,
        {
            "format": report.format,
            "sessions": [_described(session) for session in dict.fromkeys(report.sessions)],
            "created": report.created,
            "messages": report.messages,
            "compactions": report.compactions,
            "kept_lines": report.kept,
            "skipped_lines": [{"line": line, "why": why} for line, why in report.broken],
        },
    )
