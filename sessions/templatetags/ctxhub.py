"""Template filters of the dashboard."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from django import template

from sessions import figures

register = template.Library()


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
def job_words(job: figures.Job) -> str:
    """What became of a compaction job, in one sentence (``sessions.figures``)."""
    return figures.job_words(job)


@register.filter
def pct(value: float) -> str:
    """A percentage (``sessions.figures.percent``): ``8.3 %``, ``<0.1 %`` for a sliver."""
    return figures.percent(float(value or 0))


@register.filter
def acted_words(acted: str) -> str:
    """Why the Governor changed what it had sent (``sessions.figures``)."""
    return figures.acted_words(acted or "")


@register.filter
def outcome_words(outcome: str) -> str:
    """A compaction's outcome in words (``sessions.figures``)."""
    return figures.outcome_words(outcome or "")


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
    """An amount of money (``sessions.figures.money``)."""
    return figures.money(amount, currency)
