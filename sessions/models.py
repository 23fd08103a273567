"""Storage: an append-only log of each session's messages, and records over it.

A stored message is never rewritten or deleted by normal operations: governance works on the
log and writes its own records (compactions, audit events) beside it. The only columns of a
message that may change are its token-count cache, which is derived from the payload.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from django.conf import settings
from django.db import models
from django.urls import reverse
from pydantic_ai.messages import ModelMessage

from sessions.payloads import message_from_payload


class AppendOnlyError(Exception):
    """Raised when code tries to rewrite or delete a record that is append-only."""


class AgentSession(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_sessions"
    )
    title = models.CharField(max_length=200)
    model = models.CharField(
        max_length=200, help_text="A pydantic-ai model string, e.g. openai:gpt-4o."
    )
    context_window = models.PositiveIntegerField(
        null=True, blank=True, help_text="Overrides the model's default context window."
    )
    policy = models.JSONField(default=dict, blank=True, help_text="Governance policy overrides.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"])]

    def __str__(self) -> str:
        return self.title

    def get_absolute_url(self) -> str:
        return reverse("sessions:detail", args=[self.pk])

    @property
    def group_name(self) -> str:
        """The channel-layer group that receives this session's live events."""
        return f"session.{self.pk.hex}"


class MessageKind(models.TextChoices):
    REQUEST = "request", "request"
    RESPONSE = "response", "response"


class MessageSource(models.TextChoices):
    AGENT = "agent", "agent run"
    API = "api", "REST API"
    CHAT = "chat", "dashboard chat"
    DEMO = "demo", "demo data"


class MessageQuerySet(models.QuerySet["Message"]):
    # Only the token-count cache may change: it is derived from the payload.
    CACHE_FIELDS: ClassVar[frozenset[str]] = frozenset({"tokens", "encoding", "tokens_exact"})

    def update(self, **kwargs: Any) -> int:
        if not set(kwargs) <= self.CACHE_FIELDS:
            raise AppendOnlyError(f"messages are append-only; cannot update {sorted(kwargs)}")
        return super().update(**kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("messages are append-only; they are never deleted")


class Message(models.Model):
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveIntegerField(help_text="Position in the session's log, from 0.")
    kind = models.CharField(max_length=8, choices=MessageKind.choices)
    payload = models.JSONField(help_text="One pydantic-ai ModelMessage, as its JSON form.")
    tokens = models.PositiveIntegerField()
    encoding = models.CharField(max_length=32)
    tokens_exact = models.BooleanField(default=True)
    content_hash = models.CharField(max_length=64, db_index=True)
    source = models.CharField(max_length=8, choices=MessageSource.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MessageQuerySet.as_manager()

    class Meta:
        ordering = ["session", "seq"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "seq"], name="message_seq_unique_per_session"
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.kind}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnlyError("messages are append-only; a stored message is never rewritten")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("messages are append-only; they are never deleted")

    @property
    def message(self) -> ModelMessage:
        """The payload as a pydantic-ai message."""
        return message_from_payload(self.payload)


class CompactionStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Compaction(models.Model):
    """A summary standing in for a range of the log; the messages themselves stay."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="compactions")
    first_seq = models.PositiveIntegerField()
    last_seq = models.PositiveIntegerField()
    summary = models.TextField(blank=True)
    tokens_before = models.PositiveIntegerField(default=0)
    tokens_after = models.PositiveIntegerField(default=0)
    model = models.CharField(max_length=200, blank=True)
    status = models.CharField(
        max_length=8, choices=CompactionStatus.choices, default=CompactionStatus.PENDING
    )
    error = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["session", "-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(first_seq__lte=models.F("last_seq")),
                name="compaction_range_ordered",
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id} #{self.first_seq}..#{self.last_seq} ({self.status})"


class AuditEvent(models.Model):
    """Who did what to a session, when. Immutable."""

    session = models.ForeignKey(
        AgentSession, null=True, blank=True, on_delete=models.CASCADE, related_name="audit_events"
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    verb = models.CharField(max_length=64)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.verb} by {self.actor_id} at {self.created_at:%Y-%m-%d %H:%M:%S}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnlyError("audit events are immutable")
        super().save(*args, **kwargs)
