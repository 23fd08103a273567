"""Template filters of the dashboard."""

from __future__ import annotations

from collections.abc import Iterable

from django import template

register = template.Library()


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
