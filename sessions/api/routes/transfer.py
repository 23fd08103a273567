"""Export a session (JSONL, or a Markdown transcript) and import one as a new session (see
``sessions.services.transfer`` for the format)."""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from django.http import HttpRequest, StreamingHttpResponse
from ninja import Router, Status

from sessions.api.access import need, owned_session
from sessions.api.errors import ApiError
from sessions.api.routes.sessions import _described
from sessions.api.schemas import ERRORS, SessionOut
from sessions.services import transfer

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
    response={201: SessionOut, **ERRORS},
    tags=["sessions"],
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "An export's JSONL text, as the body.",
            "content": {JSONL: _TEXT, "text/plain": _TEXT},
        }
    },
)
def import_session(request: HttpRequest) -> Status[dict[str, Any]]:
    """A new session of the key's owner from an export (the body: its JSONL text). Every line
    is validated before anything is stored; a bad one is a 422 naming its line and field."""
    key = need(request, "write")
    try:
        text = request.body.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = f"body: not UTF-8 text (byte {exc.start}); nothing stored"
        raise ApiError(422, "invalid", message, field="body") from None
    return Status(201, _described(transfer.import_session(text, key.owner)))
