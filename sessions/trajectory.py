"""A session's trajectory: the size of each model request over the session's life.

For every model response in the log: the effective history the request before it was built
from, *as it was then* (the log up to that point, less what the clears and compactions active
at that moment hid or replaced, counted from stored counts), and the input tokens the provider
reported, where the stored response carries its usage. Compactions are marked where they were
made, with the soft threshold and the budget as lines. One query over the log's counts (no
payload is read); long sessions are thinned to ``MAX_POINTS`` for the chart.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime
from itertools import accumulate
from typing import Any

from sessions.models import AgentSession, Clear, Compaction, MessageKind

MAX_POINTS = 1_500


@dataclass(frozen=True, slots=True)
class _Record:
    created: datetime
    undone: datetime | None

    def active_at(self, moment: datetime) -> bool:
        return self.created <= moment and (self.undone is None or self.undone > moment)


@dataclass(frozen=True, slots=True)
class _CompactionAt(_Record):
    last_seq: int
    saved: int
    """Tokens the compaction took out of the effective history (summarised less written)."""


@dataclass(frozen=True, slots=True)
class _ClearAt(_Record):
    from_seq: int


def trajectory(session: AgentSession, *, threshold: int, budget: int) -> dict[str, Any]:
    """The chart's data: seqs, effective tokens then, provider-reported input tokens (None
    where not reported), compaction marks (seq where made), and the two lines."""
    rows = list(
        session.messages.order_by("seq").values_list(
            "seq", "tokens", "kind", "created_at", "reported_input_tokens"
        )
    )
    if not rows:
        return {"seqs": [], "effective": [], "reported": [], "marks": [], "threshold": threshold,
                "budget": budget}  # fmt: skip
    tokens = [row[1] for row in rows]
    prefix = [0, *accumulate(tokens)]  # prefix[s]: tokens of seqs before s
    times = [row[3] for row in rows]
    compactions = [
        _CompactionAt(
            c.created_at,
            c.undone_at,
            c.last_seq,
            sum(tokens[s] for s in c.summarized_seqs if s < len(tokens))
            - sum(int(i["facts"]["tokens"]) for i in c.replacement if "message" in i),
        )
        for c in Compaction.objects.filter(session=session)
    ]
    clears = [
        _ClearAt(c.created_at, c.undone_at, c.from_seq)
        for c in Clear.objects.filter(session=session)
    ]
    seqs: list[int] = []
    effective: list[int] = []
    reported: list[int | None] = []
    for seq, _, kind, created, usage in rows:
        if kind != MessageKind.RESPONSE:
            continue
        start = max(
            (c.from_seq for c in clears if c.active_at(created) and c.from_seq <= seq),
            default=0,
        )
        saved = sum(
            c.saved
            for c in compactions
            if c.active_at(created) and c.last_seq < seq and c.last_seq >= start
        )
        seqs.append(seq)
        effective.append(prefix[seq] - prefix[start] - saved)
        reported.append(usage)
    # A compaction is marked at the newest message stored when it was made.
    marks = sorted(
        {max(bisect_right(times, c.created) - 1, 0) for c in compactions if c.undone is None}
    )
    # Thinned by keeping the largest request of each stretch: peaks are what matter here.
    step = max(1, -(-len(seqs) // MAX_POINTS))
    kept = [
        max(range(i, min(i + step, len(seqs))), key=effective.__getitem__)
        for i in range(0, len(seqs), step)
    ]
    return {
        "seqs": [seqs[i] for i in kept],
        "effective": [effective[i] for i in kept],
        "reported": [reported[i] for i in kept],
        "marks": marks,
        "threshold": threshold,
        "budget": budget,
    }
