"""The governance engine: pure functions from a session's history to what a model should see.

No Django, no Celery, no I/O: agents can use it without the hub.

>>> governed = govern(messages, Policy(), model="openai:gpt-4o")
>>> governed.messages   # what to send
>>> governed.report     # budget, tokens, zone of every message, action on every part
"""

from .capability import ContextGovernor
from .counting import count_tokens
from .govern import Governed, govern, tool_definition_tokens
from .policy import Eviction, Masking, Policy, Threshold, Truncation, Window
from .report import Action, ContextReport, MessageReport, PartReport, StepReport, Zone
from .store import EvictionStore, InMemoryEvictionStore, read_evicted

__all__ = [
    "Action",
    "ContextGovernor",
    "ContextReport",
    "Eviction",
    "EvictionStore",
    "Governed",
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
