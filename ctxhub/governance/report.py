"""ContextReport: what governance did to a history, in a shape the dashboard and API draw as is;
and what the calls on one growing history keep of their reports for the next to reuse.

The report says what happened to every message and part, so on a 20,000-message history it
holds 20,000 message reports. It is built (``reporting``) from the messages' facts and the
working state alone, and mostly from reports built by earlier calls.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from threading import Lock
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .facts import MessageFacts
from .names import Action, StepName, Zone


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class PartReport(_Model):
    """One part of a message: what happened to it and its tokens before and after."""

    part_kind: str
    tool_name: str | None = None
    action: Action
    tokens_before: int
    tokens_after: int
    ref: str | None = None
    """The eviction reference, when the part was evicted."""


class MessageReport(_Model):
    """One message: its input index (None for a message governance added), zone and parts."""

    index: int | None
    kind: Literal["request", "response"]
    zone: Zone
    kept: bool
    tokens_before: int
    tokens_after: int
    parts: list[PartReport]


class StepReport(_Model):
    """One step that ran: how many parts it changed and the tokens that removed."""

    step: StepName
    parts: int
    tokens_removed: int
    detail: str = ""


class BudgetNoteReport(_Model):
    """The budget note a request carries (``Policy.awareness.budget_note``): the figures it
    states, those of the request it was written in, which it keeps until the governor acts."""

    window_tokens: int
    budget_tokens: int
    used_tokens: int
    """The history's tokens in the request it was written in, the note included (that
    request's ``history_tokens_after``)."""
    acts_at_tokens: int
    """History tokens past which the governor acts next."""
    cuts_to_tokens: int | None
    """What that action cuts the history down to; None with hysteresis off."""
    acts: list[str]
    """What the governor does then: mask, window (or drop_groups, shrink)."""
    text: str
    tokens: int
    """The note's own tokens in this request (counted in ``tokens_after``, as history)."""
    written: bool
    """Whether this request wrote it (an action, a new start, another window or budget);
    False: an earlier request wrote it, and it is sent again word for word."""


class ContextReport(_Model):
    """The budget, the tokens before and after, and the fate of every message and part.

    ``budget_tokens`` is what the history may take: the window minus system prompt and
    instructions, tool definitions, reserved output and the safety margin, optionally capped.
    ``tokens_before`` and ``tokens_after`` count everything sent (system prompt and
    instructions included), so ``tokens_after == count_tokens(governed.messages)``; the history
    fits when ``tokens_after - system_tokens <= budget_tokens``.
    """

    model: str | None
    encoding: str
    exact: bool
    window_tokens: int
    system_tokens: int
    tool_definition_tokens: int
    reserved_output_tokens: int
    safety_margin_tokens: int
    history_cap_tokens: int | None
    budget_tokens: int
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    fits: bool
    reason: str | None = None
    steps: list[StepReport]
    messages: list[MessageReport]
    evicted_refs: list[str]
    budget_note: BudgetNoteReport | None = None
    """The budget note the request carries, if the policy asks for one; its message is among
    ``messages`` (``index`` None, one ``system-prompt`` part)."""

    @property
    def history_tokens_after(self) -> int:
        """Tokens of the governed history, system prompt and instructions excluded."""
        return self.tokens_after - self.system_tokens


RepairedEntry = tuple[
    MessageFacts,
    MessageFacts | None,
    Any,
    tuple[Any, ...],
    MessageReport,
    dict[StepName, list[int]],
]
"""A repaired message's facts and its input's, its changes, the rest of what its report was
built from, the report, and what it adds to each step's tally."""


@dataclass
class ReportCache:
    """Message reports of earlier calls on one growing history, by input index.

    A message pair repair left as it is has a report decided by its facts, its zone, whether
    it was kept, its changes (caps and masks) and its tokens after; the same facts object at an
    index means the same message. The window's cut moves back and forth from one call to the
    next, so a message's report as dropped by the window is kept apart from its other one.
    Lists rather than dicts, so a stretch of messages is checked and taken in a few C-level
    passes. Calls on one history may build their reports in several threads at once: ``lock``
    keeps each entry's columns consistent.
    """

    lock: Lock = field(default_factory=Lock, repr=False)

    window_facts: list[MessageFacts | None] = field(default_factory=list)
    window_reports: list[MessageReport | None] = field(default_factory=list)
    """Each message's report as dropped by the window (zone middle), from these facts."""
    facts: list[MessageFacts | None] = field(default_factory=list)
    fates: list[tuple[Zone, bool] | None] = field(default_factory=list)
    changes: list[Any] = field(default_factory=list)
    after: array[int] = field(default_factory=lambda: array("q"))
    reports: list[MessageReport | None] = field(default_factory=list)
    """Each message's other latest report, from these facts, zone and kept flag, changes and
    tokens after."""
    repaired: dict[int, RepairedEntry] = field(default_factory=dict)
    """By the identity of its facts, the last report of each message pair repair rebuilt or
    added, with what it was built from and what it adds to the tally."""

    def grow(self, size: int) -> None:
        """Make room for a history of ``size`` messages."""
        missing = size - len(self.facts)
        if missing > 0:
            for column in (
                self.window_facts,
                self.window_reports,
                self.facts,
                self.fates,
                self.changes,
                self.reports,
            ):
                column.extend([None] * missing)
            self.after.extend(array("q", (-1,)) * missing)


@dataclass(frozen=True)
class PartTotals:
    """Parts and their tokens in the messages before each input index (prefix sums), so the
    window's dropped stretches are tallied in constant time each."""

    parts: array[int] = field(default_factory=lambda: array("q", (0,)))
    tokens: array[int] = field(default_factory=lambda: array("q", (0,)))

    def extended(
        self, facts: Sequence[MessageFacts], counted: int, *, in_place: bool
    ) -> PartTotals:
        """The totals of ``facts``, whose first ``counted`` messages are the ones these count.

        ``in_place`` appends to these arrays (for the one history that takes them over, see
        ``govern._take``): every holder reads them at indices up to its own length, which
        appending leaves alone. Otherwise the first ``counted`` are copied (another history
        may have appended to them meanwhile); machine-integer arrays copy as memory.
        """
        if in_place:
            totals = self
        else:
            totals = PartTotals(self.parts[: counted + 1], self.tokens[: counted + 1])
        parts, tokens = totals.parts, totals.tokens
        for fact in facts[counted:]:
            parts.append(parts[-1] + len(fact.part_tokens))
            tokens.append(tokens[-1] + sum(fact.part_tokens))
        return totals
