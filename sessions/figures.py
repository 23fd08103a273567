"""How the hub says token figures: what the next request carries, as a share of the window,
and how a change (a compaction) moves it. One wording for the pages, the chat and the API."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any


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


def outcome_words(outcome: str) -> str:
    """A compaction's outcome as a reader says it (``nothing_to_compact``: nothing to compact)."""
    return OUTCOME_WORDS.get(outcome, outcome.replace("_", " "))


def sent_change(before: int, after: int, window: int) -> str:
    """``next request 16,559 → 9,800 tokens (38.5 % → 22.8 % of the 43,000-token window)``."""
    return (
        f"next request {before:,} → {after:,} tokens ({share(before, window)} → "
        f"{share(after, window)} of the {window:,}-token window)"
    )


def compaction_outcome(result: Mapping[str, Any]) -> str:
    """A finished compaction job's result in words: the next request first, the effective
    history as detail; empty when the job wrote nothing."""
    if "tokens_before" not in result:
        return ""
    history = f"effective history {result['tokens_before']:,} → {result['tokens_after']:,}"
    if "sent_before" not in result:  # a job finished before the next request was measured
        return history
    sent = sent_change(result["sent_before"], result["sent_after"], result["window"])
    said = f"{sent}; {history}"
    if result.get("summarizer_cost") is not None:
        said += f"; the summariser cost {money(result['summarizer_cost'])}"
    if result.get("saved_per_request") is not None:
        said += f", and each following request saves {money(result['saved_per_request'])}"
    return said


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
