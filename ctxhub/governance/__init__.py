"""The governance engine: from a session's history to what a model should see.

No Django, no Celery, no I/O: agents can use it without the hub.

>>> governor = Governor(Policy(), model="openai:gpt-4o")   # one per agent run or session
>>> governed = governor.govern(messages)                  # before every request
>>> governed.messages   # what to send
>>> governed.report     # budget, tokens, zone of every message, action on every part
>>> govern(messages, Policy(), model="openai:gpt-4o")      # one request on its own
"""

from .capability import ContextGovernor
from .facts import count_tokens
from .governed import Acted, Governed, tool_definition_tokens
from .governor import Governor, GovernorState, govern
from .names import Action, Zone
from .policy import (
    Awareness,
    CompactionPolicy,
    Eviction,
    Hysteresis,
    Masking,
    Policy,
    Threshold,
    Truncation,
    Window,
)
from .report import ContextReport, MessageReport, PartReport, StepReport
from .store import EvictionStore, InMemoryEvictionStore, read_evicted

__all__ = [
    "Acted",
    "Action",
    "Awareness",
    "CompactionPolicy",
    "ContextGovernor",
    "ContextReport",
    "Eviction",
    "EvictionStore",
    "Governed",
    "Governor",
    "GovernorState",
    "Hysteresis",
    "InMemoryEvictionStore",
    "Masking",
    "MessageReport",
    "PartReport",
    "Policy",
    "StepReport",
    "Threshold",
    "Truncation",
    "Window",
    "Zone",
    "count_tokens",
    "govern",
    "read_evicted",
    "tool_definition_tokens",
]

# Compaction, the fact ledger, manual commands, overflow recovery, models by name, and the
# providers' tool-call pairing rule.
from .commands import (
    Command,
    CommandResult,
    HistoryFigures,
    clear,
    compact_command,
    history_figures,
    parse_command,
    run_command,
)
from .compact import Compacted, CompactionReport, compact
from .compaction_plan import CompactionPlan, plan_compaction
from .draft import SummaryDraft
from .ledger import Ledger, LedgerItem, extract_ledger, reconcile
from .llm import ModelChoice, is_offline, resolve_model
from .recovery import OverflowRecovery, RecoveryEvent, is_context_overflow
from .steps.pairing import pairing_problems
from .summaries import is_summary

__all__ += [
    "Command",
    "CommandResult",
    "Compacted",
    "CompactionPlan",
    "CompactionReport",
    "HistoryFigures",
    "Ledger",
    "LedgerItem",
    "ModelChoice",
    "OverflowRecovery",
    "RecoveryEvent",
    "SummaryDraft",
    "clear",
    "compact",
    "compact_command",
    "extract_ledger",
    "history_figures",
    "is_context_overflow",
    "is_offline",
    "is_summary",
    "pairing_problems",
    "parse_command",
    "plan_compaction",
    "reconcile",
    "resolve_model",
    "run_command",
]
