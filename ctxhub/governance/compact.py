"""Compaction: the middle of a history summarised by a model, with nothing important lost.

``await compact(messages, policy, summarizer=model)`` returns the compacted history, the summary
and a report. What is kept and what is summarised is decided by the engine itself: the history
is governed with the sliding window forced on (every other mechanism off), so the head (the
first run, as co-cli finds it), pinned messages, system prompts, the latest result of each
protected tool, turn-aborted markers and the recent tail survive exactly as ``govern`` would
keep them, cut only at safe points; what the window would drop is what gets summarised.

* The summariser is a pydantic-ai ``Agent`` with no tools. The conversation reaches it as a
  transcript between tags in the user message, with instructions (sent as instructions, not in
  the transcript) to treat it as data; closing tags inside the data are defused. Its answer is
  poured into a fixed structure (``draft.py``: goal, decisions, files and identifiers, errors
  and fixes, pending tasks, current state) whatever shape it came in, so no instruction
  smuggled into a tool output can change what a summary looks like.
* The transcript is cut into chunks that fit the summariser's own window; several chunks are
  summarised one by one and their summaries summarised again, so a session at 99 % of its
  window compacts with a summariser whose window is no larger.
* A previous summary is fed to the summariser as the start of the transcript and removed from
  the history: summaries merge, they never stack.
* The user's own messages from the summarised part stay verbatim, newest first under a token
  cap (20,000 by default, as AgenticLoop RFC 005 keeps them).
* The fact ledger (``ledger.py``) appends every path, URL, identifier, error, command, number
  and name the summary dropped.
* The rule: every message before the kept tail that no summary covers yet is summarised (but
  pins, the head and what the window always keeps), and the next request aims at the
  Governor's low-water mark (``plan_compaction``). It may carry more than it does now, up to
  that mark, when the summary replaces messages it drops or masks: a summary in place of a
  gap is worth the tokens. It is refused only when it would pass that mark (or carry more
  than now, where the summary would replace only messages sent in full), and a summary
  larger than what it replaces is refused too (inflation guard): the history is returned
  unchanged, and the report's ``error`` says why in a sentence.
* The summary fits its room, the ledger's facts included: what does not fit is left out, the
  least valuable first, and counted (``ledger_omitted``). A merged summary that shrinks to
  less than half the earlier one and loses facts it kept is refused (the collapse guard).
  Any summariser failure puts co-cli's static marker (with the ledger) in its place.

Compaction never mutates its input; messages it changes are rebuilt with
``dataclasses.replace``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
)
from pydantic_ai.models import Model

from .compaction_plan import (
    DEFAULT_USER_MESSAGES_TOKENS,
    MIN_SUMMARY_TOKENS,
    CompactionPlan,
    Form,
    next_request_tokens,
    plan_compaction,
)
from .compaction_summary import Outcome, Summary, write_summary
from .counting import MARK
from .facts import count_tokens, message_facts
from .ledger import LedgerItem, contains
from .policy import Policy, Threshold
from .recall import mention
from .steps.window import notice_omitted
from .summaries import (
    ACKNOWLEDGEMENT,
)
from .summarise import (
    DEFAULT_SUMMARY_TOKENS,
    ChunkCallback,
    model_name,
)
from .tokens import Tokenizer, tokenizer_for


class CompactionReport(BaseModel):
    """What a compaction did, for the dashboard, the API and the audit log."""

    model_config = ConfigDict(frozen=True)

    outcome: Outcome
    """``summarized``; ``fallback`` (the marker replaced the middle); ``refused`` (history
    unchanged, ``error`` says why); ``nothing_to_compact`` (no message before the kept tail
    that no summary covers)."""
    error: str | None = None
    form: Form
    summarizer: str
    model: str | None
    focus: str | None = None
    tokens_before: int
    tokens_after: int
    sent_before: int
    """Tokens the next request carried before (governed as a fresh Governor would, unless
    the caller said): its messages and the tool definitions it was given."""
    sent_after: int
    """Tokens the next request carries after (``sent_before`` when nothing changed)."""
    sent_after_max: int = 0
    """What the plan promised the next request would carry at most (the summary filling its
    room, ledger included); ``sent_after`` never passes it."""
    low_water: int = 0
    """Tokens the next request carries at the Governor's low-water mark."""
    sent_limit: int = 0
    """The most the next request may carry after the compaction: the low-water mark, or what
    it carries now when more (or when the summary replaces only messages sent in full)."""
    hidden_messages: int = 0
    """Of the messages the summary stands for, those the next request did not carry in full
    before (dropped by the window, an output masked, cut or evicted, or stood for by an
    earlier summary): what the summary gives back."""
    head_cut: bool = False
    """Whether the head was cut to its first request to make room, its first run's work
    summarised with the rest."""
    kept: dict[str, int] = {}
    """How many messages it keeps as they are, by zone (``CompactionPlan.kept``)."""
    covered_before: int = 0
    """Messages earlier summaries stood for."""
    messages_before: int
    messages_after: int
    summarized_indices: list[int]
    """Input indices of the messages the summary (or marker) replaces."""
    summarized_messages: int
    """Messages the summary stands for, counting those earlier summaries stood for."""
    kept_user_indices: list[int]
    previous_summaries: int
    chunks: int
    rounds: int
    summary_tokens: int
    replaced_tokens: int
    ledger: list[LedgerItem]
    ledger_omitted: int
    kept_by_summarizer: list[str]
    """Facts of the ledger the summary states by itself."""
    added_by_ledger: list[str]
    """Facts the summary left out: appended to it from the ledger."""
    missing_facts: list[str] = []
    """Of those, the ones the messages kept beside the summary do not state either: what the
    compaction would have lost but for the ledger."""
    fact_score: float = 1.0
    """The share of the ledger's facts the compacted history held (in the summary or the
    messages kept) before the ledger's were appended."""
    summarizer_input_tokens: int = 0
    """What the summariser's calls used, as its provider reported (every chunk and round;
    0 where it reported nothing or failed)."""
    summarizer_cache_read_tokens: int = 0
    summarizer_cache_write_tokens: int = 0
    summarizer_output_tokens: int = 0
    duration_ms: float


@dataclass(frozen=True)
class Compacted:
    """The compacted history, the summary text (None when nothing was compacted) and a report."""

    messages: list[ModelMessage]
    summary: str | None
    report: CompactionReport


async def compact(
    messages: Sequence[ModelMessage],
    policy: Policy | None = None,
    *,
    summarizer: Model | str,
    model: str | None = None,
    pinned: frozenset[int] | set[int] = frozenset(),
    focus: str | None = None,
    keep: Threshold | None = None,
    user_messages_tokens: int = DEFAULT_USER_MESSAGES_TOKENS,
    summarizer_window: int | None = None,
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
    form: Form = "inline",
    on_chunk: ChunkCallback | None = None,
    tool_tokens: int = 0,
    sent_now: int | None = None,
) -> Compacted:
    """Summarise the middle of a history with ``summarizer`` (a pydantic-ai model or its name).

    ``model`` names the chat model, whose tokenizer and window size the result; ``pinned`` holds
    input indices that survive verbatim; ``focus`` tells the summariser what matters most.
    ``keep`` is how much recent history stays verbatim (default: the policy's window keep, else
    10 % of the window). ``form="two_message"`` summarises everything but pins and protected
    tools into the ``/compact`` form of co-cli: a request holding the system prompt, the kept
    user messages and the summary, then an acknowledgement. ``on_chunk(round, done, total)``
    is told each time the summariser finishes a chunk. ``tool_tokens`` counts the tool
    definitions every request carries beside the messages, and ``sent_now`` what the next
    request carries now where the caller's Governor knows (see ``plan_compaction``): the
    report's ``sent_*`` and ``low_water`` count the tool definitions too.
    """
    started = time.perf_counter()
    policy = policy or Policy()
    plan = plan_compaction(
        messages,
        policy,
        model=model,
        pinned=pinned,
        keep=keep,
        form=form,
        user_messages_tokens=user_messages_tokens,
        tool_tokens=tool_tokens,
        sent_now=sent_now,
        summary_tokens=summary_tokens,
    )
    reporting = _Reporting(form, model_name(summarizer), model, focus, messages, plan, started)
    if not plan.new:
        return reporting.unchanged("nothing_to_compact")
    if plan.summary_room < MIN_SUMMARY_TOKENS:
        return reporting.unchanged("refused", error=no_room(plan))
    awareness = policy.awareness
    summary = await write_summary(
        plan,
        messages,
        summarizer,
        focus,
        summarizer_window,
        summary_tokens,
        form,
        on_chunk,
        model,
        hint=mention(awareness.recall_tool_name) if awareness.recall else None,
    )
    return _compacted(reporting, summary, policy, pinned, tool_tokens)


def _compacted(
    reporting: _Reporting,
    summary: Summary,
    policy: Policy,
    pinned: frozenset[int] | set[int],
    tool_tokens: int,
) -> Compacted:
    """The history with ``summary`` in place of the plan's middle, unless a guard refuses it:
    a summary larger than what it replaces, one that collapses an earlier summary, or a next
    request past the plan's limit."""
    plan, messages, model = reporting.plan, reporting.messages, reporting.model
    tokenizer = tokenizer_for(model)
    output = _assembled(plan, summary, reporting.form)
    replaced = _replaced(plan, messages, tokenizer)
    details = summary.details(plan, replaced)
    if summary.tokens >= replaced:
        details["error"] = (
            f"refused: the summary takes {summary.tokens:,} tokens, more than the "
            f"{replaced:,} of the messages it would replace"
        )
        return reporting.unchanged("refused", summary.text, **details)
    collapse = collapsed(plan, summary, tokenizer)
    if collapse is not None:
        details["error"] = collapse
        return reporting.unchanged("refused", summary.text, **details)
    sent_after = next_request_tokens(output, messages, policy, model, pinned, tool_tokens)
    if sent_after > plan.limit:
        details["error"] = (
            f"refused: the next request would carry {sent_after:,} tokens, more than "
            f"{limit_words(plan)}"
        )
        return reporting.unchanged("refused", summary.text, **details)
    return Compacted(
        output,
        summary.text,
        reporting.report(
            outcome=summary.outcome,
            tokens_after=count_tokens(output, model=model),
            sent_after=sent_after,
            messages_after=len(output),
            **details,
        ),
    )


def limit_words(plan: CompactionPlan) -> str:
    """The plan's limit in words: the low-water mark, or what the next request carries now."""
    if plan.limit == plan.low_water:
        return f"the low-water mark of {plan.low_water:,}"
    return f"the {plan.sent_before:,} it carries now"


def no_room(plan: CompactionPlan) -> str:
    """Why a compaction is refused whose kept messages leave a summary no room."""
    return (
        f"refused: what the compaction keeps (the head, pins and recent messages) takes "
        f"{plan.kept_tokens:,} tokens of the next request, leaving less than "
        f"{MIN_SUMMARY_TOKENS} for a summary below {limit_words(plan)}"
    )


def collapsed(plan: CompactionPlan, summary: Summary, tokenizer: Tokenizer) -> str | None:
    """Why a merged summary is refused: it takes less than half the earlier summaries it
    merges and lost facts they kept (left out for room); None when it holds."""
    earlier = sum(tokenizer.count(text) for text in plan.stripped.summaries)
    if not earlier or summary.tokens * 2 >= earlier:
        return None
    indices = set(plan.stripped.summary_indices)
    lost = [
        item.text
        for item in summary.ledger.items
        if item.index in indices and not contains(summary.text, item)
    ]
    if not lost:
        return None
    shown = ", ".join(lost[:3]) + (" …" if len(lost) > 3 else "")
    return (
        f"refused: the merged summary would take {summary.tokens:,} tokens, less than half "
        f"the {earlier:,} of the summary it merges, and lose {len(lost):,} of its facts "
        f"({shown}); the earlier summary stays"
    )


@dataclass
class _Reporting:
    """What every report of one compaction says, whatever its outcome."""

    form: Form
    summarizer: str
    model: str | None
    focus: str | None
    messages: Sequence[ModelMessage]
    plan: CompactionPlan
    started: float

    def report(self, **values: Any) -> CompactionReport:
        base: dict[str, Any] = {
            "form": self.form,
            "summarizer": self.summarizer,
            "model": self.model,
            "focus": self.focus,
            "tokens_before": count_tokens(self.messages, model=self.model),
            "sent_before": self.plan.sent_before,
            "sent_after": self.plan.sent_before,
            "sent_after_max": self.plan.sent_after_max,
            "low_water": self.plan.low_water,
            "sent_limit": self.plan.limit,
            "hidden_messages": self.plan.unseen,
            "head_cut": self.plan.head_cut,
            "kept": self.plan.kept,
            "covered_before": self.plan.covered_before,
            "messages_before": len(self.messages),
            "summarized_indices": [],
            "summarized_messages": 0,
            "kept_user_indices": [],
            "previous_summaries": len(self.plan.stripped.summaries),
            "chunks": 0,
            "rounds": 0,
            "summary_tokens": 0,
            "replaced_tokens": 0,
            "ledger": [],
            "ledger_omitted": 0,
            "kept_by_summarizer": [],
            "added_by_ledger": [],
            "duration_ms": round((time.perf_counter() - self.started) * 1000, 3),
        }
        base.update(values)
        return CompactionReport(**base)

    def unchanged(self, outcome: Outcome, text: str | None = None, **values: Any) -> Compacted:
        """The history left as it is, and why."""
        kept = list(self.messages)
        return Compacted(
            kept,
            text,
            self.report(
                outcome=outcome,
                tokens_after=count_tokens(kept, model=self.model),
                messages_after=len(kept),
                **values,
            ),
        )


def _replaced(plan: CompactionPlan, messages: Sequence[ModelMessage], tokenizer: Tokenizer) -> int:
    """Tokens the summary stands for: the middle and the earlier summaries, but the user
    messages kept verbatim."""

    def tokens(message: ModelMessage) -> int:
        return message_facts(message, tokenizer).tokens

    middle = sum(tokens(m) for _, m in plan.middle)
    previous = sum(tokens(messages[i]) for i in plan.stripped.summary_indices)
    return middle + previous - sum(tokens(m) for _, m in plan.users)


def _assembled(plan: CompactionPlan, summary: Summary, form: Form) -> list[ModelMessage]:
    """The compacted history: the summary where the middle was (or, in the two-message form,
    with the system prompt and the kept user messages, acknowledged)."""
    kept_users = [m for _, m in plan.users]
    metadata = {MARK: {**summary.note, "messages": summary.represented}}
    if form != "two_message":
        # The next compaction finds the user messages kept here as covered by this summary.
        metadata[MARK]["users"] = len(kept_users)
        return plan.assemble(ModelRequest(parts=[summary.part], metadata=metadata))
    user_parts = [p for m in kept_users for p in m.parts]
    first = ModelRequest(
        parts=[*plan.stripped.system_parts, *user_parts, summary.part], metadata=metadata
    )
    sticky = [
        m
        for m in plan.partition.messages[:-1]
        if notice_omitted(m) is None or any(m is h for h in plan.history)
    ]
    return [first, ModelResponse(parts=[TextPart(ACKNOWLEDGEMENT)]), *sticky]
