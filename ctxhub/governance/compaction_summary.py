"""The summary a compaction writes: the summariser's draft of the plan's middle (earlier
summaries merged in), the fact ledger appended, or the marker and the ledger when the
summariser fails."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.usage import RunUsage

from .compaction_plan import CompactionPlan, Form, stamp
from .draft import render_draft
from .facts import message_facts
from .ledger import Ledger, Reconciled, extract_ledger, reconcile
from .steps.window import notice_omitted
from .summaries import COMPACT_PREFIX, MARKER, SUMMARY_PREFIX, messages_represented
from .summarise import ChunkCallback, render_message, request_worked_on, summarize
from .tokens import tokenizer_for

Outcome = Literal["summarized", "fallback", "refused", "nothing_to_compact"]


@dataclass
class Summary:
    """The message standing for the middle, and how it was written."""

    text: str
    part: UserPromptPart
    tokens: int
    note: dict[str, Any]
    represented: int
    ledger: Ledger
    reconciled: Reconciled
    outcome: Outcome
    error: str | None
    chunks: int
    rounds: int
    usage: RunUsage

    def details(self, plan: CompactionPlan, replaced: int) -> dict[str, Any]:
        """What the report says of the summary and what it stands for."""
        return {
            "error": self.error,
            "summarized_indices": sorted(
                {*(i for i, _ in plan.middle), *plan.stripped.summary_indices}
            ),
            "summarized_messages": self.represented,
            "kept_user_indices": [i for i, _ in plan.users],
            "chunks": self.chunks,
            "rounds": self.rounds,
            "summary_tokens": self.tokens,
            "replaced_tokens": replaced,
            "ledger": self.ledger.items,
            "ledger_omitted": self.ledger.omitted,
            "kept_by_summarizer": [i.text for i in self.reconciled.kept_by_summarizer],
            "added_by_ledger": [i.text for i in self.reconciled.added_by_ledger],
            "missing_facts": [i.text for i in self.reconciled.missing],
            "fact_score": self.reconciled.score,
            "summarizer_input_tokens": self.usage.input_tokens,
            "summarizer_cache_read_tokens": self.usage.cache_read_tokens,
            "summarizer_cache_write_tokens": self.usage.cache_write_tokens,
            "summarizer_output_tokens": self.usage.output_tokens,
        }


async def write_summary(
    plan: CompactionPlan,
    messages: Sequence[ModelMessage],
    summarizer: Model | str,
    focus: str | None,
    window: int | None,
    summary_tokens: int,
    form: Form,
    on_chunk: ChunkCallback | None,
    model: str | None,
    hint: str | None = None,
) -> Summary:
    """Summarise the plan's middle (with the earlier summaries it replaces), the ledger's
    facts appended; the marker and the facts if the summariser fails. ``hint`` ends the text
    (where the model can search what the summary left out)."""
    stripped, middle = plan.stripped, plan.middle
    tokenizer = tokenizer_for(model)
    represented = sum(messages_represented(s) for s in stripped.summaries) + sum(
        notice_omitted(m) or 1 for _, m in middle
    )
    summaries_as_messages = [
        ModelRequest(parts=[UserPromptPart(text)]) for text in stripped.summaries
    ]
    ledger = extract_ledger(
        [*summaries_as_messages, *(m for _, m in middle)],
        indices=[*stripped.summary_indices[: len(summaries_as_messages)], *(i for i, _ in middle)],
    )
    # What stays beside the summary states some facts still (the score counts them).
    summarised = {id(m) for _, m in middle}
    staying = [m for m in plan.partition.messages if id(m) not in summarised]
    kept = "\n".join(
        text for m in [*staying, *(m for _, m in plan.users)] if (text := render_message(m))
    )
    items = [render_message(m) for m in summaries_as_messages]
    items += request_worked_on(messages, middle, tokenizer)
    items += [text for _, m in middle if (text := render_message(m))]
    outcome: Outcome = "summarized"
    error: str | None = None
    chunks = rounds = 0
    usage = RunUsage()
    try:
        result = await summarize(
            items,
            summarizer,
            focus=focus,
            window=window,
            summary_tokens=summary_tokens,
            on_chunk=on_chunk,
        )
    except Exception as exc:  # any failure of the summariser: fall back to the marker
        outcome, error = "fallback", f"{type(exc).__name__}: {exc}"
        body = MARKER.format(count=represented)
        reconciled = reconcile("", ledger, kept)
        text = f"{body}\n\n{reconciled.text}" if ledger.items else body
    else:
        chunks, rounds, usage = result.chunks, result.rounds, result.usage
        reconciled = reconcile(render_draft(result.draft), ledger, kept)
        prefix = (
            COMPACT_PREFIX if form == "two_message" else SUMMARY_PREFIX.format(count=represented)
        )
        text = f"{prefix}\n{reconciled.text}"
    if hint:
        text = f"{text}\n\n{hint}"
    note = {"compaction": "summary" if outcome == "summarized" else "marker"}
    when = stamp([m for _, m in middle])
    part = UserPromptPart(text, timestamp=when) if when else UserPromptPart(text)
    tokens = message_facts(ModelRequest(parts=[part]), tokenizer).tokens
    return Summary(
        text,
        part,
        tokens,
        note,
        represented,
        ledger,
        reconciled,
        outcome,
        error,
        chunks,
        rounds,
        usage,
    )
