"""How the hub says token figures: what the next request carries, as a share of the window,
and how a change (a compaction) moves it. One wording for the pages, the chat and the API."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Protocol


def share(tokens: int, window: int) -> str:
    """``tokens`` as a share of ``window``: ``38.5 %`` (``<0.1 %`` for a sliver, never 0.0)."""
    if window <= 0:
        return "—"
    return percent(100 * tokens / window)


def percent(value: float) -> str:
    """A percentage to one decimal: ``38.5 %``; ``<0.1 %`` for a sliver (never 0.0 % for
    something there)."""
    if 0 < value < 0.1:
        return "<0.1 %"
    return f"{value:.1f} %"


OUTCOME_WORDS = {
    "summarized": "summarised",
    "fallback": "marker only (the summariser failed)",
    "nothing_to_compact": "nothing to compact",
    "refused": "refused",
}


ACTED_WORDS = {
    "high_water": "at the high-water mark",
    "over_budget": "over the budget",
    "trigger": "a window trigger",
    "always": "a rule the policy applies to every request",
}


def acted_words(acted: str) -> str:
    """Why the Governor changed what it had sent, as a reader says it."""
    return ACTED_WORDS.get(acted, acted.replace("_", " "))


def outcome_words(outcome: str) -> str:
    """A compaction's outcome as a reader says it (``nothing_to_compact``: nothing to compact)."""
    return OUTCOME_WORDS.get(outcome, outcome.replace("_", " "))


def sent_change(before: int, after: int, window: int) -> str:
    """``next request 16,559 → 9,800 tokens (38.5 % → 22.8 % of the 43,000-token window)``."""
    return (
        f"next request {before:,} → {after:,} tokens ({share(before, window)} → "
        f"{share(after, window)} of the {window:,}-token window)"
    )


def change(before: int, after: int) -> str:
    """How far ``after`` moved from ``before``, as a signed whole percentage: ``+9 %``,
    ``-45 %``; ``±0 %`` for less than half a percent either way."""
    moved = round(100 * (after - before) / max(before, 1))
    if moved == 0:
        return "±0 %"
    return f"{moved:+d} %"


def summary_gives(messages: int, unseen: int) -> str:
    """What the model gets from a compaction's summary: ``the model gets a summary of 2,900
    messages it no longer saw``."""
    noun = "message" if messages == 1 else "messages"
    if unseen >= messages:
        return f"the model gets a summary of {messages:,} {noun} it no longer saw"
    if unseen:
        return (
            f"the model gets a summary of {messages:,} {noun}, {unseen:,} of which it no "
            "longer saw in full"
        )
    return f"the model gets a summary in place of {messages:,} {noun} it saw in full"


def compaction_change(
    messages: int, unseen: int, before: int, after: int, low_water: int, *, at_most: bool = False
) -> str:
    """A compaction in one sentence, the same in the preview, the job's result, Records, the
    chat, the API and the fleet: ``the model gets a summary of 2,900 messages it no longer
    saw; next request 20,263 → 22,100 tokens (+9 %), below the low-water mark of 26,700``.
    ``at_most``: a preview's promise (``→ at most 22,100``)."""
    bound = "at most " if at_most else ""
    if after < low_water:
        mark = f"below the low-water mark of {low_water:,}"
    elif after == low_water:
        mark = "which is the low-water mark"
    else:
        mark = f"above the low-water mark of {low_water:,}"
    return (
        f"{summary_gives(messages, unseen)}; next request {before:,} → {bound}{after:,} "
        f"tokens ({change(before, after)}), {mark}"
    )


def compaction_outcome(result: Mapping[str, Any]) -> str:
    """A finished compaction job's result in words: what the model gets and the next request
    first, the effective history as detail; empty when the job wrote nothing."""
    if "tokens_after" not in result:
        return ""
    history = f"effective history {result['tokens_before']:,} → {result['tokens_after']:,}"
    if "sent_before" not in result:  # a job finished before the next request was measured
        return history
    if "low_water" in result:
        sent = compaction_change(
            result["messages"],
            result["unseen"],
            result["sent_before"],
            result["sent_after"],
            result["low_water"],
        )
    else:  # a job written before compactions said what the model gets
        sent = sent_change(result["sent_before"], result["sent_after"], result["window"])
    said = f"{sent}; {history}"
    if result.get("summarizer_cost") is not None:
        said += f"; the summariser cost {money(result['summarizer_cost'])}"
    if result.get("saved_per_request") is not None:
        said += f", and each following request saves {money(result['saved_per_request'])}"
    if result.get("facts_left_out"):
        said += (
            f"; {result['facts_left_out']:,} of its {result['facts']:,} facts did not fit the "
            "summary's room (the log keeps them, for recall)"
        )
    return said


NOTHING_TO_COMPACT = "nothing to compact: no message is left that no summary covers"


def nothing_to_compact(kept: Mapping[str, int], summarised: int) -> str:
    """Why there is nothing to compact, with what stays: ``nothing to compact: a compaction
    keeps the 9 recent messages, the head (10 messages) and 1 pinned message; a summary stands
    for the 120 others``."""
    if not kept:
        return NOTHING_TO_COMPACT
    said = [
        f"the {_messages(kept['tail'], 'recent ')}" if kept.get("tail") else "",
        f"the head ({_messages(kept['head'])})" if kept.get("head") else "",
        _messages(kept.get("pinned", 0), "pinned ") if kept.get("pinned") else "",
        f"{_messages(kept['sticky'])} the window always keeps" if kept.get("sticky") else "",
    ]
    kept_words = _listed([part for part in said if part])
    others = (
        f"a summary stands for the {summarised:,} others" if summarised else "there is no other"
    )
    return f"nothing to compact: a compaction keeps {kept_words}; {others}"


def _messages(number: int, kind: str = "") -> str:
    """``3 messages``, ``1 pinned message``."""
    return f"{number:,} {kind}message{'' if number == 1 else 's'}"


def _listed(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


class Job(Protocol):
    status: str
    outcome: str
    error: str
    result: Any
    progress: Any


def job_words(job: Job) -> str:
    """What became of a compaction job, in one sentence (no final stop): what the model got,
    or why nothing was written, or where it stands."""
    if job.status == "done":
        said = compaction_outcome(job.result or {})
        if said:
            return f"compacted: {said}"
        if job.outcome == "nothing_to_compact":
            result = job.result or {}
            return nothing_to_compact(result.get("kept") or {}, result.get("summarised", 0))
        return job.error or f"not compacted: {outcome_words(job.outcome)}"
    if job.status == "failed":
        return f"failed: {job.error}"
    stage = (job.progress or {}).get("stage") or job.status
    return f"{job.status}: {stage}" if stage != job.status else job.status


def money(amount: str | Decimal | None, currency: str = "USD") -> str:
    """An amount of money: ``$12.34`` from a dollar up, ``$0.0123`` below, ``<$0.0001`` for
    less than that but more than nothing, ``$0.00`` for nothing; "" for None."""
    if amount is None:
        return ""
    value = Decimal(amount)
    symbol = "$" if currency == "USD" else f"{currency} "
    if value == 0:
        return f"{symbol}0.00"
    if value < _CENT_FRACTION:
        return f"<{symbol}{_CENT_FRACTION}"
    shown = value.quantize(_CENT_FRACTION, rounding=ROUND_HALF_UP)
    if shown >= 1:
        return f"{symbol}{value.quantize(_CENT, rounding=ROUND_HALF_UP):,}"
    return f"{symbol}{shown}"


_CENT_FRACTION = Decimal("0.0001")
_CENT = Decimal("0.01")
