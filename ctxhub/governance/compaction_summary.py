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

from .compaction_plan import CompactionPlan, Form, stamp, summary_frame
from .draft import fit_draft, render_draft
from .facts import message_facts
from .ledger import Ledger, Reconciled, facts_section, ranked, reconcile
from .summaries import COMPACT_PREFIX, MARKER, SUMMARY_PREFIX
from .summarise import ChunkCallback, render_message, request_worked_on, summarize
from .tokens import Tokenizer, tokenizer_for

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
    (where the model can search what the summary left out).

    The whole summary fits the plan's room (``summary_room``): the summariser is asked for
    ``summary_tokens`` at most, less what the ledger may need (up to half the room), its
    draft is cut to what it was asked for, and the ledger's facts that do not fit beside it
    are left out, the least valuable first (``ledger.ranked``), and counted.
    """
    stripped, middle = plan.stripped, plan.middle
    tokenizer = tokenizer_for(model)
    represented = plan.represented
    ledger = plan.ledger
    # What stays beside the summary states some facts still (the score counts them).
    summarised = {id(m) for _, m in middle}
    staying = [m for m in plan.partition.messages if id(m) not in summarised]
    kept = "\n".join(
        text for m in [*staying, *(m for _, m in plan.users)] if (text := render_message(m))
    )
    items = [render_message(ModelRequest(parts=[UserPromptPart(t)])) for t in stripped.summaries]
    items += request_worked_on(messages, middle, tokenizer)
    items += [text for _, m in middle if (text := render_message(m))]
    body = _Body(plan.summary_room, tokenizer, hint, ledger)
    asked = min(summary_tokens, body.draft_room(represented))
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
            summary_tokens=asked,
            on_chunk=on_chunk,
        )
    except Exception as exc:  # any failure of the summariser: fall back to the marker
        outcome, error = "fallback", f"{type(exc).__name__}: {exc}"
        text, reconciled, omitted = body.written(MARKER.format(count=represented), kept)
    else:
        chunks, rounds, usage = result.chunks, result.rounds, result.usage
        prefix = (
            COMPACT_PREFIX if form == "two_message" else SUMMARY_PREFIX.format(count=represented)
        )
        draft = fit_draft(result.draft, asked, tokenizer.count)
        text, reconciled, omitted = body.written(f"{prefix}\n{render_draft(draft)}", kept)
    note = {"compaction": "summary" if outcome == "summarized" else "marker"}
    when = stamp([m for _, m in middle])
    part = UserPromptPart(text, timestamp=when) if when else UserPromptPart(text)
    tokens = message_facts(ModelRequest(parts=[part]), tokenizer).tokens
    ledger = ledger.model_copy(update={"omitted": omitted})
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


@dataclass(frozen=True)
class _Body:
    """The summary's text within its room: the summariser's draft (or the marker), the
    ledger's facts it lacks, and the hint."""

    room: int
    """The most tokens the summary message may take."""
    tokenizer: Tokenizer
    hint: str | None
    ledger: Ledger

    def _tokens(self, text: str) -> int:
        return message_facts(ModelRequest(parts=[UserPromptPart(text)]), self.tokenizer).tokens

    def draft_room(self, represented: int) -> int:
        """Tokens the draft may take: the room less the frame and what the ledger's facts
        take, but at least half of what the frame leaves."""
        left = max(self.room - summary_frame(represented, self.hint, self.tokenizer), 0)
        facts = self.tokenizer.count(facts_section(self.ledger.items)) if self.ledger.items else 0
        return max(left - min(facts, left // 2), 0)

    def _joined(self, summary: str, facts: str) -> str:
        text = summary.rstrip()
        if facts:
            text = f"{text}\n\n{facts}"
        return f"{text}\n\n{self.hint}" if self.hint else text

    def written(self, summary: str, kept: str) -> tuple[str, Reconciled, int]:
        """The text: ``summary`` with the ledger's facts it lacks, as many as fit the room,
        the most valuable first; the reconciliation and how many facts were left out."""
        reconciled = reconcile(summary, self.ledger, kept)
        missing = reconciled.added_by_ledger
        best = ranked(missing)

        def text_with(count: int) -> str:
            chosen = {id(item) for item in best[:count]}
            items = [item for item in missing if id(item) in chosen]
            left_out = len(missing) - count
            facts = facts_section(items, left_out) if items or left_out else ""
            return self._joined(summary, facts)

        # The longest run of the best facts that fits (the text grows with each one).
        low, high = 0, len(best)
        if self._tokens(text_with(high)) > self.room:
            while low < high:
                middle = (low + high + 1) // 2
                if self._tokens(text_with(middle)) <= self.room:
                    low = middle
                else:
                    high = middle - 1
        return text_with(high), reconciled, len(missing) - high
