from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, QuerySet, Sum
from django.http import HttpRequest

from sessions.models import (
    AgentSession,
    AuditEvent,
    Clear,
    Compaction,
    CompactionJob,
    EvictedOutput,
    Message,
    Pin,
)


class ReadOnlyAdmin(admin.ModelAdmin[Any]):
    """For append-only records: browse and search, never change or delete."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AgentSession)
class AgentSessionAdmin(admin.ModelAdmin[AgentSession]):
    list_display = [
        "title",
        "owner",
        "model",
        "context_window",
        "message_count",
        "token_total",
        "updated_at",
    ]
    list_filter = ["model", "owner"]
    search_fields = ["title", "model", "owner__username"]
    readonly_fields = ["id", "created_at", "updated_at"]
    date_hierarchy = "updated_at"

    def get_queryset(self, request: HttpRequest) -> QuerySet[AgentSession]:
        return (
            super()
            .get_queryset(request)
            .annotate(_messages=Count("messages"), _tokens=Sum("messages__tokens"))
        )

    @admin.display(ordering="_messages", description="messages")
    def message_count(self, obj: Any) -> int:
        return int(obj._messages)

    @admin.display(ordering="_tokens", description="tokens")
    def token_total(self, obj: Any) -> int:
        return int(obj._tokens or 0)


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = [
        "session",
        "seq",
        "kind",
        "tokens",
        "encoding",
        "tokens_exact",
        "source",
        "created_at",
    ]
    list_filter = ["kind", "source", "encoding"]
    search_fields = ["session__title", "content_hash"]
    list_select_related = ["session"]


@admin.register(Compaction)
class CompactionAdmin(ReadOnlyAdmin):
    list_display = [
        "session",
        "first_seq",
        "last_seq",
        "outcome",
        "tokens_before",
        "tokens_after",
        "summarizer",
        "created_at",
        "undone_at",
    ]
    list_filter = ["outcome", "summarizer"]
    search_fields = ["session__title", "summary"]
    list_select_related = ["session"]


@admin.register(Clear)
class ClearAdmin(ReadOnlyAdmin):
    list_display = ["session", "from_seq", "actor", "created_at", "undone_at"]
    list_select_related = ["session", "actor"]


@admin.register(Pin)
class PinAdmin(ReadOnlyAdmin):
    list_display = ["session", "seq", "actor", "created_at", "undone_at"]
    list_select_related = ["session", "actor"]


@admin.register(EvictedOutput)
class EvictedOutputAdmin(ReadOnlyAdmin):
    list_display = ["session", "ref", "tokens", "created_at"]
    search_fields = ["ref", "session__title"]
    list_select_related = ["session"]


@admin.register(CompactionJob)
class CompactionJobAdmin(ReadOnlyAdmin):
    list_display = [
        "session",
        "trigger",
        "status",
        "outcome",
        "deliveries",
        "retries",
        "created_at",
        "finished_at",
    ]
    list_filter = ["status", "trigger", "outcome"]
    search_fields = ["session__title", "error"]
    list_select_related = ["session"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "verb", "actor", "session", "tokens_before", "tokens_after"]
    list_filter = ["verb"]
    search_fields = ["verb", "session__title", "actor__username"]
    list_select_related = ["session", "actor"]
