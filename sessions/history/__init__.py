"""The effective history: the log plus the records over it, as the engine governs it.

``effective_history(session)`` starts after the latest active clear (with what the clear keeps:
the system prompt and instructions of the history before it, and the pinned messages), shows
each active compaction's replacement instead of the range it covers, and hands the active pins
to the policy as positions. It reads what planning needs from the stored facts of each message
(tokens, tool-call ids, part kinds), never the payloads: a message is parsed only when the
engine asks for it (``LazyMessages``), which for a long session is the few it keeps.

A process remembers the effective history of the sessions it served last. When only messages
were appended since (the records revision is unchanged), it reads the new rows alone and extends
what it had, keeping the same message and facts objects, so the engine's carried state applies
and a governed context after an append costs about what the new messages cost.
"""

from sessions.history.effective import (
    REMEMBERED,
    AppliedCompaction,
    EffectiveHistory,
    Kept,
    RecordState,
    effective_history,
    effective_tokens,
    is_remembered,
    kept_message,
    kept_parts,
    log_heads,
    pinned_seqs,
    record_state,
)
from sessions.history.lazy import LazyMessages, Source, UnreadableMessage

__all__ = [
    "REMEMBERED",
    "AppliedCompaction",
    "EffectiveHistory",
    "Kept",
    "LazyMessages",
    "RecordState",
    "Source",
    "UnreadableMessage",
    "effective_history",
    "effective_tokens",
    "is_remembered",
    "kept_message",
    "kept_parts",
    "log_heads",
    "pinned_seqs",
    "record_state",
]
