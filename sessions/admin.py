from __future__ import annotations

import time
from typing import Any

from django.contrib import admin
from django.db.models import Count, Q, QuerySet, Sum
from django.http import HttpRequest
from django.utils.html import format_html

from sessions.models import (
    AgentSession,
    AuditEvent,
    ChatTurn,
    Clear,
    Compaction,
    CompactionJob,
    EvictedOutput,
    Message,
    Pin,
)
from sessions.services.fleet import GOVERN_BUDGET_SECONDS, session_figures


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
        "governed",
        "token_total",
        "message_count",
        "compaction_count",
        "updated_at",
        "xray",
    ]
    list_filter = ["model", "owner"]
    search_fields = ["title", "model", "owner__username"]
    # The policy, its records and their revision change through the dashboard's services,
    # which validate, audit and push them, and the log's counts with its appends; here they
    # are shown only.
    readonly_fields = [
        "id",
        "policy",
        "revision",
        "log_tokens",
        "log_messages",
        "auto_compaction_paused",
        "created_at",
        "updated_at",
        "xray",
    ]
    date_hierarchy = "updated_at"

    def get_queryset(self, request: HttpRequest) -> QuerySet[AgentSession]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                _messages=Count("messages", distinct=True),
                _tokens=Sum("messages__tokens"),
                _compactions=Count(
                    "compactions",
                    filter=Q(compactions__undone_at__isnull=True),
                    distinct=True,
                ),
            )
        )

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        # One listing may govern sessions nobody governed since they changed, for so long.
        self._deadline = time.monotonic() + GOVERN_BUDGET_SECONDS
        return super().changelist_view(request, extra_context)

    @admin.display(description="governed / budget")
    def governed(self, obj: AgentSession) -> str:
        tokens, current, budget = session_figures(obj, getattr(self, "_deadline", 0.0))
        if tokens is None:
            return "pending (a worker is governing it)"
        return f"{tokens:,} / {budget:,}" + ("" if current else " (as of an earlier state)")

    @admin.display(ordering="_messages", description="messages")
    def message_count(self, obj: Any) -> str:
        return f"{obj._messages:,}"

    @admin.display(ordering="_tokens", description="raw log tokens")
    def token_total(self, obj: Any) -> str:
        return f"{obj._tokens or 0:,}"

    @admin.display(ordering="_compactions", description="compactions")
    def compaction_count(self, obj: Any) -> int:
        return int(obj._compactions)

    @admin.display(description="x-ray")
    def xray(self, obj: AgentSession) -> str:
        return format_html('<a href="{}">open the x-ray</a>', obj.get_absolute_url())


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


@admin.register(ChatTurn)
class ChatTurnAdmin(ReadOnlyAdmin):
    list_display = ["started_at", "session", "actor", "model", "status", "requests", "finished_at"]
    list_filter = ["status", "model"]
    search_fields = ["session__title", "prompt", "error"]
    list_select_related = ["session", "actor"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "verb", "actor", "session", "tokens_before", "tokens_after"]
    list_filter = ["verb"]
    search_fields = ["verb", "session__title", "actor__username"]
    list_select_related = ["session", "actor"]
