"""The x-ray of a session: what its next request carries, by category and zone, and the fate of
each stored message and part.

Plain functions over a ``GovernedContext`` and the records (no queries beyond the records' and
the session's cost), shared by the page, its fragments and the live pushes. The categories
partition the request exactly: system prompt and instructions, then each kept message's other
tokens by where it sits, so they add up to the governed count by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import zip_longest
from typing import TYPE_CHECKING

from ctxhub.governance.report import BudgetNoteReport, MessageReport, PartReport
from sessions.history import RecordState
from sessions.presenters import MessageView, PartView
from sessions.services.costs import SessionCost, session_cost
from sessions.services.governed import GovernedContext, governed_context
from sessions.services.tools import session_tools

if TYPE_CHECKING:
    from ctxhub.governance import Policy
    from sessions.models import AgentSession

# Categories of the request, in the order the meter draws them; the last three are the room
# the window keeps besides what is sent.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("system", "System and instructions"),
    ("tools", "Tool definitions"),
    ("note", "Budget note"),
    ("pinned", "Pinned"),
    ("summary", "Summary"),
    ("head", "Head"),
    ("middle", "Middle kept"),
    ("tail", "Tail"),
    ("reserved", "Reserved output"),
    ("margin", "Safety margin"),
    ("free", "Free"),
)
USED = ("system", "tools", "note", "pinned", "summary", "head", "middle", "tail")


@dataclass(frozen=True, slots=True)
class Category:
    key: str
    label: str
    tokens: int
    percent: float
    """Share of the window."""


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of kept messages in one category, for the zone strip."""

    category: str
    label: str
    tokens: int
    percent: float
    """Share of the governed tokens."""
    first_seq: int | None
    """Where the run starts in the log (None: it holds only added messages)."""
    messages: int


@dataclass(frozen=True)
class XRay:
    model: str
    encoding: str
    exact: bool
    window: int
    budget: int
    governed: int
    """Tokens the next request carries, tool definitions included."""
    history: int
    """The governed history's tokens (what the budget limits)."""
    tokens_before: int
    messages_before: int
    messages_after: int
    """Of the history's ``messages_before``, those sent."""
    messages_added: int
    """Messages governance added to the request: a window's notice, a result pair repair
    supplied for a call left without one (the budget note aside: ``note``)."""
    fits: bool
    reason: str | None
    over: int
    """Tokens the request is over the window's room (0 when it fits)."""
    categories: list[Category]
    segments: list[Segment]
    steps: list[tuple[str, int, int, str]]
    """Each step that ran: name, parts changed, tokens removed, detail."""
    cost: SessionCost | None = None
    """What the session's responses cost so far, from the usage their providers reported."""
    tools: list[tuple[str, int]] = field(default_factory=list)
    """The tool definitions sent: each one's name and tokens."""
    note: BudgetNoteReport | None = None
    """The budget note the request carries (``Policy.awareness.budget_note``), if it does."""

    @property
    def tools_title(self) -> str:
        """The tools by name with their tokens, for the meter's tooltip."""
        return "; ".join(f"{name}: {tokens:,} tokens" for name, tokens in self.tools)

    @property
    def used(self) -> list[Category]:
        return [c for c in self.categories if c.key in USED]

    @property
    def percent(self) -> float:
        return 100.0 * self.governed / self.window if self.window else 0.0

    @property
    def budget_percent(self) -> float:
        return 100.0 * self.history / self.budget if self.budget else 0.0


@dataclass(slots=True)
class _Run:
    category: str
    tokens: int
    first_seq: int | None
    messages: int


def category_of(report: MessageReport, written: bool) -> str:
    """Where a kept message's tokens count: a compaction's own message is the summary; one
    holding only the system prompt (kept by a clear) is the system prompt's; the one governance
    adds with a system prompt is the budget note (history, not the system prompt: the report
    counts it so)."""
    if report.parts and all(p.part_kind == "system-prompt" for p in report.parts):
        return "note" if report.index is None else "system"
    if report.zone == "pinned":
        return "pinned"
    if written:
        return "summary"
    return report.zone


def xray(context: GovernedContext) -> XRay:
    report = context.report
    tokens: dict[str, int] = dict.fromkeys(USED, 0)
    tokens["system"] = report.system_tokens
    tokens["tools"] = report.tool_definition_tokens
    runs: list[_Run] = []
    for message in report.messages:
        if not message.kept:
            continue
        seq = context.seq_of(message.index)
        written = message.index is not None and seq is None
        category = category_of(message, written)
        # The system prompt's own tokens are counted above (the budget note is not one).
        system = sum(p.tokens_after for p in message.parts if p.part_kind == "system-prompt")
        own = message.tokens_after - (0 if category == "note" else system)
        tokens[category] += own
        if runs and runs[-1].category == category:
            runs[-1].tokens += own
            runs[-1].messages += 1
            runs[-1].first_seq = seq if runs[-1].first_seq is None else runs[-1].first_seq
        else:
            runs.append(_Run(category, own, seq, 1))
    governed = report.tokens_after + report.tool_definition_tokens
    window = report.window_tokens
    room = window - governed - report.reserved_output_tokens - report.safety_margin_tokens
    tokens["reserved"] = report.reserved_output_tokens
    tokens["margin"] = report.safety_margin_tokens
    tokens["free"] = max(room, 0)
    labels = dict(CATEGORIES)
    return XRay(
        model=report.model or context.session.model,
        encoding=report.encoding,
        exact=report.exact,
        window=window,
        budget=report.budget_tokens,
        governed=governed,
        history=report.history_tokens_after,
        tokens_before=report.tokens_before,
        messages_before=report.messages_before,
        messages_after=sum(1 for m in report.messages if m.index is not None and m.kept),
        messages_added=sum(1 for m in report.messages if m.index is None)
        - (report.budget_note is not None),
        fits=report.fits,
        reason=report.reason,
        over=max(-room, 0),
        categories=[
            Category(key, label, tokens[key], 100.0 * tokens[key] / window if window else 0.0)
            for key, label in CATEGORIES
        ],
        segments=[
            Segment(
                category=run.category,
                label=labels[run.category],
                tokens=run.tokens,
                percent=100.0 * run.tokens / governed if governed else 0.0,
                first_seq=run.first_seq,
                messages=run.messages,
            )
            for run in runs
        ],
        steps=[(s.step, s.parts, s.tokens_removed, s.detail) for s in report.steps if s.parts],
        cost=session_cost(context.session),
        tools=session_tools(context.session, report.model).named,
        note=report.budget_note,
    )


# --- the timeline ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartFate:
    view: PartView
    action: str
    """kept, truncated, masked, deduplicated, evicted, synthesized, moved or dropped;
    summarised or cleared when a record hides the message."""
    tokens_before: int
    tokens_after: int
    ref: str | None


@dataclass(frozen=True)
class MessageFate:
    """A stored message with what governance does to it in the next request."""

    view: MessageView
    state: str
    """sent, dropped (the window or a group drop left it out), moved (pair repair moved all it
    held to the request after their calls), summarised, cleared, or pending (stored after the
    context was governed)."""
    zone: str
    tokens_after: int
    compaction: int | None
    parts: list[PartFate] = field(default_factory=list)
    pinned: bool = False
    added: list[PartReport] = field(default_factory=list)
    """Parts pair repair put in this message and no stored message holds here: tool results
    moved from a later message, or synthesized for a call that never got one."""

    @property
    def seq(self) -> int:
        return self.view.seq

    @property
    def changed(self) -> bool:
        return any(p.action not in ("kept",) for p in self.parts)


class Fates:
    """Looks up the fate of log messages in one governed context and the records over it."""

    def __init__(self, context: GovernedContext, records: RecordState) -> None:
        self.context = context
        self.records = records
        self.pinned = set(context.pinned)
        self._report_of: dict[int, MessageReport] = {}
        for message in context.report.messages:
            seq = context.seq_of(message.index)
            if seq is not None:
                self._report_of[seq] = message
        self._summarised: dict[int, int] = {}
        for compaction in records.compactions:
            kept = {item["seq"] for item in compaction.replacement if "seq" in item}
            for seq in range(compaction.first_seq, compaction.last_seq + 1):
                if seq not in kept:
                    self._summarised[seq] = compaction.id

    def report_of(self, seq: int) -> MessageReport | None:
        return self._report_of.get(seq)

    def fate(self, view: MessageView) -> MessageFate:
        seq = view.seq
        report = self._report_of.get(seq)
        if report is None:
            compaction = self._summarised.get(seq)
            if compaction is not None:
                state = "summarised"
            elif seq < self.records.from_seq:
                state = "cleared"
            else:  # stored after this context was governed: the next refresh tells
                state = "pending"
            return MessageFate(
                view=view,
                state=state,
                zone="",
                tokens_after=0,
                compaction=compaction,
                parts=[PartFate(p, state, 0, 0, None) for p in view.parts],
            )
        parts: list[PartFate] = []
        added: list[PartReport] = []
        # The report lists the stored parts first, then those pair repair put in.
        for part, fate in zip_longest(view.parts, report.parts):
            if part is not None:
                parts.append(_part_fate(part, fate, report.kept))
            elif fate is not None:
                added.append(fate)
        return MessageFate(
            view=view,
            state="sent" if report.kept else _left_out(report),
            zone=report.zone,
            tokens_after=report.tokens_after,
            compaction=None,
            parts=parts,
            pinned=seq in self.pinned,
            added=added,
        )


def _left_out(report: MessageReport) -> str:
    """Why a message is not sent: moved when pair repair moved everything it held next to the
    calls (nothing is lost), else dropped."""
    if report.parts and all(p.action == "moved" for p in report.parts):
        return "moved"
    return "dropped"


def _part_fate(view: PartView, fate: PartReport | None, kept: bool) -> PartFate:
    if fate is None:  # a part pair repair added: never one of the stored ones
        return PartFate(view, "kept" if kept else "dropped", 0, 0, None)
    action = fate.action if kept or fate.action != "kept" else "dropped"
    return PartFate(view, action, fate.tokens_before, fate.tokens_after, fate.ref)


# --- replaying a session under another policy -----------------------------------------------

REPLAY_CHANGES_SHOWN = 100


@dataclass(frozen=True, slots=True)
class FateChange:
    seq: int
    before: str
    after: str


@dataclass(frozen=True)
class Replay:
    """The session's x-ray now and under an edited policy, and the messages whose fate moves."""

    current: XRay
    edited: XRay
    changes: list[FateChange]
    """The first ``REPLAY_CHANGES_SHOWN`` changed messages, in log order."""
    changed: int

    @property
    def delta(self) -> int:
        return self.edited.governed - self.current.governed


def _fates_by_seq(context: GovernedContext) -> dict[int, str]:
    found: dict[int, str] = {}
    for message in context.report.messages:
        seq = context.seq_of(message.index)
        if seq is None:
            continue
        state = f"sent ({message.zone})" if message.kept else _left_out(message)
        actions = sorted({p.action for p in message.parts} - {"kept", "dropped", state})
        found[seq] = ", ".join([state, *actions])
    return found


def compare(session: AgentSession, policy: Policy) -> Replay:
    """Govern the session under ``policy`` as well as its own (nothing is stored)."""
    now, then = governed_context(session), governed_context(session, policy=policy)
    before, after = _fates_by_seq(now), _fates_by_seq(then)
    moved = [
        FateChange(seq, before[seq], after.get(seq, "not in the history"))
        for seq in sorted(before)
        if before[seq] != after.get(seq)
    ]
    return Replay(xray(now), xray(then), moved[:REPLAY_CHANGES_SHOWN], len(moved))
