"""Iteration-group dropping (Duragent 3c), the last resort inside one agent turn.

An iteration group is a response that calls tools and the request that answers exactly those
calls, or a retry exchange: a response the run refused (an invalid final answer) and the
request made only of the retry prompt that says why. A run stuck in validation retries has
nothing else to give back. The oldest groups of the current turn are dropped, one by one,
until the history fits; the newest group is always kept, as are the user request that opened
the turn, pinned messages and protected tools. A call is never separated from its result: a
group goes whole.
"""

from __future__ import annotations

from .._work import Work
from ..facts import MessageFacts


def iteration_groups(work: Work) -> list[tuple[int, int]]:
    """(response, request) positions of the current turn's complete iteration groups."""
    groups: list[tuple[int, int]] = []
    last = len(work.facts) - 1
    for position in range(work.turn_start, last):
        fact = work.facts[position]
        answer = work.facts[position + 1]
        if (
            not fact.request
            and answer.request
            and _answers(fact, answer)
            and work.kept[position]
            and work.kept[position + 1]
        ):
            groups.append((position, position + 1))
    return groups


def _answers(response: MessageFacts, request: MessageFacts) -> bool:
    """Whether ``request`` holds only the answers to ``response``: the results of exactly its
    calls, or retry prompts refusing a response without calls."""
    if response.call_ids:
        return request.only_results and sorted(request.result_ids) == sorted(response.call_ids)
    kinds = request.part_kinds
    return bool(kinds) and all(kind in _RETRY_KINDS for kind in kinds)


# Retry feedback answering no tool call, and its older form.
_RETRY_KINDS = frozenset({"retry-feedback", "retry-prompt"})


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
