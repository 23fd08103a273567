"""What the hub's API answers, as the clients return it, and the error it raises."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from pydantic_ai.messages import ModelMessage

from ctxhub.governance.report import ContextReport


class HubError(Exception):
    """The hub refused a request: its status, and the error body's code, message and field."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field


class Tool(BaseModel):
    """A tool definition the session's agent sends, with its tokens."""

    name: str
    description: str | None
    parameters: dict[str, Any]
    tokens: int


class Session(BaseModel):
    id: uuid.UUID
    title: str
    model: str
    context_window: int | None
    policy: dict[str, Any]
    tools: list[Tool] = []
    tool_tokens: int = 0
    messages: int
    tokens: int
    created_at: datetime
    updated_at: datetime


class Appended(BaseModel):
    first_seq: int
    last_seq: int
    tokens: int


class StoredMessage(BaseModel):
    seq: int
    kind: str
    tokens: int
    source: str
    created_at: datetime
    message: ModelMessage


class Context(BaseModel):
    """What to send next, and why."""

    messages: list[ModelMessage]
    report: ContextReport


class RecallHit(BaseModel):
    """A passage the session's next request no longer carries in full."""

    seq: int
    part: int
    kind: str
    tool_name: str | None
    fate: str
    excerpt: str


class Recalled(BaseModel):
    query: str
    hits: list[RecallHit]
    text: str
    """The answer as the recall tool gives it to a model."""


class Preview(BaseModel):
    """A compaction's dry run: what it would summarise and keep, and what the next request
    would carry (``message`` says it in one sentence)."""

    fingerprint: str
    """Pass it as ``expected`` to compact exactly this plan."""
    nothing_to_compact: bool
    message: str
    summarized_seqs: list[int]
    kept_seqs: list[int]
    kept_user_seqs: list[int]
    messages: int
    unseen: int
    sent_now: int
    sent_after_max: int
    low_water: int
    window_tokens: int
    shrinks: bool
    refused: bool
    tokens_before: int
    tokens_after_estimate: int
    summarizer: str


class Job(BaseModel):
    id: uuid.UUID
    session: uuid.UUID
    status: str
    trigger: str
    focus: str
    outcome: str
    error: str
    message: str = ""
    """What became of it in one sentence."""
    progress: dict[str, Any]
    result: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None

    @property
    def active(self) -> bool:
        """Whether it is still queued or running."""
        return self.status in ("queued", "running")
