"""Template filters of the dashboard."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django import template

from sessions import figures

register = template.Library()

_CENT_FRACTION = Decimal("0.0001")
_CENT = Decimal("0.01")


@register.filter
def percent(fraction: float) -> str:
    """A fraction as a whole percentage: ``0.853`` as ``85 %`` (never 100 % short of all)."""
    value = float(fraction)
    whole = int(value * 100) if value < 1 else 100
    return f"{whole} %"


@register.filter
def share(tokens: int, window: int) -> str:
    """``tokens`` as a share of ``window`` (``sessions.figures``)."""
    return figures.share(tokens, window)


@register.filter
def compaction_outcome(result: Mapping[str, Any]) -> str:
    """A finished compaction job's result in words (``sessions.figures``)."""
    return figures.compaction_outcome(result or {})


@register.filter
def seq_ranges(seqs: Iterable[int]) -> list[tuple[int, int]]:
    """Consecutive seqs as (first, last) runs: 20,000 seqs are a few runs, not 20,000 links."""
    runs: list[tuple[int, int]] = []
    for seq in sorted(seqs):
        if runs and seq == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    return runs


@register.filter
def money(amount: Decimal | None, currency: str = "USD") -> str:
    """An amount of money: "$12.34" from a dollar up, "$0.0123" below, "<$0.0001" for less
    than that but more than nothing, "$0.00" for nothing; "" for None."""
    if amount is None:
        return ""
    symbol = "$" if currency == "USD" else f"{currency} "
    if amount == 0:
        return f"{symbol}0.00"
    if amount < _CENT_FRACTION:
        return f"<{symbol}{_CENT_FRACTION}"
    shown = amount.quantize(_CENT_FRACTION, rounding=ROUND_HALF_UP)
    if shown >= 1:
        return f"{symbol}{amount.quantize(_CENT, rounding=ROUND_HALF_UP):,}"
    return f"{symbol}{shown}"
