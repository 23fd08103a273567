"""A file handed to the hub (the API's body, a file dropped on the dashboard) read as what it
is: a ctxhub export, a pydantic-ai message list, or an agent's transcript."""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction
from pydantic_ai.messages import ModelRequest, ModelResponse

from sessions.models import AgentSession, MessageSource
from sessions.payloads import InvalidPayload, parse_payload
from sessions.services.errors import Invalid
from sessions.services.log import append_messages
from sessions.services.transfer import import_session
from sessions.services.transfer.format import HEADER_KEY
from transcripts.importing import (
    HEAD_BYTES,
    FileImport,
    NotATranscript,
    detect_format,
    import_bytes,
)
from transcripts.models import Format
from transcripts.reading import opening

CTXHUB = "ctxhub"
PYDANTIC_AI = "pydantic-ai"
FORMATS = (CTXHUB, PYDANTIC_AI, *Format.values)
"""What ``format=`` may name."""
FALLBACK_MODEL = "openai:gpt-4o"
"""A message list's session model when no response in it names one."""


def upload_format(data: bytes) -> str:
    """What an uploaded file is, from its start; Invalid (field ``body``) when none of them."""
    start = data.lstrip()[:1]
    if start == b"[":
        return PYDANTIC_AI
    first = data.lstrip().split(b"\n", 1)[0]
    if HEADER_KEY.encode() in first[:200]:
        return CTXHUB
    try:
        return detect_format(data[:HEAD_BYTES])
    except NotATranscript:
        try:
            data[:HEAD_BYTES].decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.start < HEAD_BYTES - 4:  # not a character cut at the end of the head
                raise Invalid(
                    f"not UTF-8 text (byte {exc.start}); nothing stored", field="body"
                ) from None
        raise Invalid(
            "not a file this hub reads (name it with format=): a ctxhub export, a pydantic-ai "
            "message list (JSON), or a Claude Code or Codex transcript (JSONL); nothing stored",
            field="body",
        ) from None


def import_upload(name: str, data: bytes, owner: Any, format: str | None = None) -> FileImport:
    """The file read into ``owner``'s sessions; Invalid, naming the field, when it cannot be
    (nothing stored). A transcript's unreadable lines are reported, not refused."""
    if format is not None and format not in FORMATS:
        raise Invalid(f"{format!r} is not one of {', '.join(FORMATS)}", field="format")
    format = format or upload_format(data)
    if format in Format.values:
        report = import_bytes(name, data, owner, format=format)
        if report.problem:
            raise Invalid(f"{report.problem}; nothing stored", field="body")
        return report
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Invalid(f"not UTF-8 text (byte {exc.start}); nothing stored", field="body") from None
    session = import_session(text, owner) if format == CTXHUB else _messages(text, owner)
    count = session.messages.count()
    return FileImport(name, format, [session], created=1, messages=count, end=len(data))


def _messages(text: str, owner: Any) -> AgentSession:
    """A new session holding a pydantic-ai message list (``ModelMessagesTypeAdapter``'s
    JSON), titled by its first prompt, its model the first response's."""
    try:
        items = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise Invalid(f"not JSON ({exc}); nothing stored", field="body") from None
    if not isinstance(items, list) or not items:
        raise Invalid("a non-empty JSON array of pydantic-ai messages is expected", field="body")
    messages = []
    for index, item in enumerate(items):
        try:
            messages.append(parse_payload(item))
        except InvalidPayload as exc:
            first = exc.errors[0]
            path = f"body[{index}]" + (f".{first.path}" if first.path else "")
            raise Invalid(f"{path}: {first.message}; nothing stored", field=path) from None
    prompt = next(
        (
            part.content
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if part.part_kind == "user-prompt" and isinstance(part.content, str)
        ),
        "",
    )
    model = next(
        (
            f"{message.provider_name}:{message.model_name}"
            for message in messages
            if isinstance(message, ModelResponse) and message.provider_name and message.model_name
        ),
        FALLBACK_MODEL,
    )
    with transaction.atomic():
        session = AgentSession.objects.create(
            owner=owner, title=opening(prompt) or "Imported messages", model=model[:200]
        )
        try:
            append_messages(session, messages, source=MessageSource.IMPORT, auto_compact=False)
        except InvalidPayload as exc:
            first = exc.errors[0]
            path = first.path.replace("messages[", "body[", 1)
            raise Invalid(f"{path}: {first.message}; nothing stored", field=path) from None
    return session
