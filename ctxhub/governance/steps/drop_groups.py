"""Iteration-group dropping (Duragent 3c), the last resort inside one agent turn.

An iteration group is a response that calls tools and the request that answers exactly those
calls. The oldest groups of the current turn are dropped, one by one, until the history fits;
the newest group is always kept, as are the user request that opened the turn, pinned
messages and protected tools. A call is never separated from its result: a group goes whole.
"""

from __future__ import annotations

from .._work import Work


def iteration_groups(work: Work) -> list[tuple[int, int]]:
    """(response, request) positions of the current turn's complete iteration groups."""
    groups: list[tuple[int, int]] = []
    last = len(work.facts) - 1
    for position in range(work.turn_start, last):
        fact = work.facts[position]
        answer = work.facts[position + 1]
        if (
            not fact.request
            and fact.call_ids
            and answer.only_results
            and sorted(answer.result_ids) == sorted(fact.call_ids)
            and work.kept[position]
            and work.kept[position + 1]
        ):
            groups.append((position, position + 1))
    return groups


def drop_groups(work: Work) -> int:
    """Drop the oldest iteration groups until the history fits; the number dropped."""
    groups = iteration_groups(work)[:-1]
    dropped = 0
    for response, request in groups:
        if not work.exact_over():
            break
        if work.exempt(response) or work.exempt(request):
            continue
        work.drop(response, "drop_groups")
        work.drop(request, "drop_groups")
        dropped += 1
    return dropped
