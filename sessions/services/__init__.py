"""The only bridge between the ORM and the governance engine.

Views, consumers, tasks, commands and the API call these functions; they never count tokens,
build messages or write records themselves.
"""

from sessions.services.auto_compaction import (
    auto_compact,
    may_be_due,
    resume_auto_compaction,
    soft_threshold,
)
from sessions.services.compaction import (
    CompactionPreview,
    JobRequest,
    active_job,
    preview_compaction,
    request_compaction,
)
from sessions.services.errors import Conflict, Invalid, NotFound, ServiceError
from sessions.services.fork import fork_session as fork_session
from sessions.services.governed import (
    GovernedContext,
    governed_context,
    history_figures,
    read_evicted_output,
    send_context,
    session_policy,
    session_summarizer,
    session_window,
)
from sessions.services.limits import Limits, limits_for, session_limits, stored_limits
from sessions.services.log import (
    PAGE_SIZE,
    SessionSummary,
    TokenTotals,
    append_message,
    append_messages,
    message_page,
    recount_tokens,
    sessions_for,
    token_totals,
)
from sessions.services.recall import recall
from sessions.services.records import (
    clear,
    pin,
    set_policy,
    undo_clear,
    undo_compaction,
    unpin,
)
from sessions.services.sent_requests import (
    OpenedRequest,
    open_sent_request,
    session_cache_weighting,
)

__all__ = [
    "PAGE_SIZE",
    "CompactionPreview",
    "Conflict",
    "GovernedContext",
    "Invalid",
    "JobRequest",
    "Limits",
    "NotFound",
    "OpenedRequest",
    "ServiceError",
    "SessionSummary",
    "TokenTotals",
    "active_job",
    "append_message",
    "append_messages",
    "auto_compact",
    "clear",
    "governed_context",
    "history_figures",
    "limits_for",
    "may_be_due",
    "message_page",
    "open_sent_request",
    "pin",
    "preview_compaction",
    "read_evicted_output",
    "recall",
    "recount_tokens",
    "request_compaction",
    "resume_auto_compaction",
    "send_context",
    "session_cache_weighting",
    "session_limits",
    "session_policy",
    "session_summarizer",
    "session_window",
    "sessions_for",
    "set_policy",
    "soft_threshold",
    "stored_limits",
    "token_totals",
    "undo_clear",
    "undo_compaction",
    "unpin",
]
