"""A session's trajectory: the size of each model request over the session's life.

What each request sent really carried, as the session's Governor sent it (``SentRequest``,
stored as requests are sent); beside it, for every model response in the log, the effective
history its request was built from *as it was then* (the log up to that point, less what the
clears and compactions active at that moment hid or replaced, counted from stored counts, before
governance), and the input and cached tokens the provider reported, where the stored response
carries its usage. A request is plotted at the seq of the response that answered it. The
window, the budget, the Governor's high- and low-water marks and the soft threshold are lines,
and compactions are marked where they were made. One query over the log's counts (no payload is
parsed); long sessions are thinned to ``MAX_POINTS`` for the chart.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime
from itertools import accumulate
from typing import Any

from django.db.models.fields.json import KT

from sessions.models import AgentSession, Clear, Compaction, MessageKind, SentRequest
from sessions.services.limits import Limits

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


def trajectory(session: AgentSession, limits: Limits) -> dict[str, Any]:
    """The chart's data: aligned series over ``seqs`` (None where a series has no point):
    ``sent`` (tokens a request sent carried, tool definitions included) and its ``requests``
    number, ``effective`` (the history it was built from), ``reported`` and ``cached`` (the
    provider's input and cache-read tokens); compaction ``marks`` and the limits' lines."""
    lines = {
        "window": limits.window,
        "budget": limits.budget,
        "high_water": limits.high_water,
        "low_water": limits.low_water,
        "threshold": limits.soft_threshold,
    }
    rows = list(
        session.messages.order_by("seq").values_list(
            "seq",
            "tokens",
            "kind",
            "created_at",
            "reported_input_tokens",
            KT("payload__usage__cache_read_tokens"),
        )
    )
    points: dict[int, dict[str, int | None]] = {}
    for sent in SentRequest.objects.filter(session=session).values_list(
        "last_seq", "tokens", "tool_tokens", "number"
    ):
        last_seq, tokens, tools, number = sent
        # Plotted where its answer lands; a later request with the same history wins.
        points[last_seq + 1] = {"sent": tokens + tools, "requests": number}
    for seq, effective, reported, cached in _responses(session, rows):
        points.setdefault(seq, {}).update(
            effective=effective,
            reported=reported,
            # A cache figure without the input it belongs to is no report (a zeroed usage).
            cached=None if cached is None or reported is None else int(cached),
        )
    times = [row[3] for row in rows]
    compactions = Compaction.objects.filter(session=session, undone_at__isnull=True)
    # A compaction is marked at the newest message stored when it was made.
    marks = sorted({max(bisect_right(times, c.created_at) - 1, 0) for c in compactions})
    seqs = _thinned(sorted(points), points)
    series = ("sent", "requests", "effective", "reported", "cached")
    return {
        "seqs": seqs,
        **{name: [points[seq].get(name) for seq in seqs] for name in series},
        "marks": marks,
        **lines,
    }


def _responses(
    session: AgentSession, rows: list[tuple[Any, ...]]
) -> list[tuple[int, int, int | None, str | None]]:
    """(seq, effective history then, reported input, reported cache reads) of each response."""
    if not rows:
        return []
    tokens = [row[1] for row in rows]
    prefix = [0, *accumulate(tokens)]  # prefix[s]: tokens of seqs before s
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
    found = []
    for seq, _, kind, created, usage, cached in rows:
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
        found.append((seq, prefix[seq] - prefix[start] - saved, usage, cached))
    return found


def _thinned(seqs: list[int], points: dict[int, dict[str, int | None]]) -> list[int]:
    """At most ``MAX_POINTS`` seqs, keeping the largest request of each stretch: peaks are what
    matter here."""
    step = max(1, -(-len(seqs) // MAX_POINTS))
    if step == 1:
        return seqs

    def size(seq: int) -> int:
        point = points[seq]
        return point.get("sent") or point.get("effective") or 0

    return [max(seqs[i : i + step], key=size) for i in range(0, len(seqs), step)]
