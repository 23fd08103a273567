"""What one governed request is: the messages to send, the evicted texts they refer to, the
figures, and (built when first read) the report of why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, Literal

from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import ToolDefinition
from pydantic_core import to_json

from ._work import Work
from .facts import MessageFacts
from .names import Detail, StepName
from .report import ContextReport, PartTotals, ReportCache
from .reporting import build_report
from .steps.repaired import Normalized
from .tokens import Tokenizer

Acted = Literal["start", "edited", "high_water", "over_budget", "trigger", "always"]
"""Why a Governor changed what it had sent: its first request or a history edited under it
(a new start), the history past the high-water mark, past the budget, a window trigger, or a
rule the policy applies to every request (``masking.apply`` always, ``dedupe.keys``) reaching
an output sent before."""
ToolDefinitions = Sequence[ToolDefinition | Mapping[str, Any]]


def tool_definition_tokens(definitions: ToolDefinitions, tokenizer: Tokenizer) -> int:
    """Tokens the tool definitions take in a request (name, description, JSON schema)."""
    total = 0
    for definition in definitions:
        if isinstance(definition, ToolDefinition):
            data: Mapping[str, Any] = {
                "name": definition.name,
                "description": definition.description,
                "parameters": definition.parameters_json_schema,
            }
        else:
            data = definition
        total += tokenizer.count(to_json(data).decode())
    return total


class Governed:
    """The governed history (``messages``), evicted full texts and, on demand, the report."""

    def __init__(
        self,
        messages: list[ModelMessage],
        evicted: dict[str, str],
        work: Work,
        summary: dict[str, Any],
        normalized: Normalized,
        input_facts: list[MessageFacts],
        steps: list[tuple[StepName, Detail]],
        reports: ReportCache,
        totals: PartTotals,
    ) -> None:
        self.messages = messages
        """What to send to the model."""
        self.evicted = evicted
        """Full texts of the evicted outputs ``messages`` refer to, by reference; store them
        where the read tool finds them."""
        self.fits: bool = summary["fits"]
        self.budget_tokens: int = summary["budget_tokens"]
        self.tokens_before: int = summary["tokens_before"]
        self.tokens_after: int = summary["tokens_after"]
        self.system_tokens: int = summary["system_tokens"]
        """Tokens of the system prompt parts and instructions sent (never governed away)."""
        self.window_tokens: int = summary["window_tokens"]
        self.tool_definition_tokens: int = summary["tool_definition_tokens"]
        """Tokens of the tool definitions sent beside the messages (not in ``tokens_after``)."""
        self.acted: Acted | None = summary.get("acted")
        """Why this request changes messages the previous one sent (a cache break); None when
        it sends the previous request's messages unchanged, the new ones appended, and always
        None with hysteresis off (every request is then governed on its own)."""
        self.prefix_tokens: int | None = None
        """Tokens of the leading messages sent as the previous request sent them, which a
        provider's prompt cache can serve: all the previous request's messages when nothing
        acted, what the action left unchanged of them when one did, 0 at a new start. None
        with hysteresis off, and from ``govern()`` alone (no previous request)."""
        self._work = work
        self._summary = summary
        self._normalized = normalized
        self._input_facts = input_facts
        self._steps = steps
        self._reports = reports
        self._totals = totals

    @cached_property
    def report(self) -> ContextReport:
        """The full report, built on first access (the hot path before a request skips it)."""
        return build_report(
            self._work,
            self._normalized,
            self._input_facts,
            self._steps,
            self._summary,
            len(self.messages),
            self.evicted,
            self._reports,
            self._totals,
        )

    def __repr__(self) -> str:
        return (
            f"Governed({len(self.messages)} messages, {self.tokens_after} tokens, "
            f"budget {self.budget_tokens}, fits={self.fits})"
        )
