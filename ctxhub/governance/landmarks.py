"""What the pipeline looks for in a repaired history, from what ``prepare`` collected: the
window's landmarks, repeated outputs and where the current turn starts."""

from __future__ import annotations

from ._work import Landmarks
from .counting import MessageFacts
from .prepare import Prepared
from .steps.normalize import Normalized


def landmarks(prepared: Prepared, normalized: Normalized) -> Landmarks:
    """The landmarks of the repaired history, from the input indices ``prepare`` collected.

    Pair repair keeps the system prompt, abort markers and notices of the messages it rebuilds,
    never rebuilds a response, and adds only plain requests of results.
    """
    position_of = normalized.position_of

    def mapped(indices: list[int]) -> list[int]:
        return [p for p in map(position_of, indices) if p is not None]

    latest: dict[str, int] = {}
    for name, index in prepared.latest_call.items():
        position = position_of(index)
        if position is not None:
            latest[name] = position
    # Responses are never rebuilt nor dropped, so a response's position is known; a request
    # holding outputs may be emptied and dropped, when the bound falls back to the end.
    size = len(normalized.facts)
    low, high = size, -1
    if prepared.outputs_at is not None:
        first, last = map(position_of, prepared.outputs_at)
        low = 0 if first is None else first
        high = size - 1 if last is None else last
    if prepared.calls_at is not None:
        first, last = map(position_of, prepared.calls_at)
        low = min(low, 0 if first is None else first + 1)
        high = max(high, size - 1 if last is None else last + 1)
    return Landmarks(
        mapped(prepared.system_at),
        mapped(prepared.aborted_at),
        mapped(prepared.notices_at),
        latest,
        None if prepared.first_text is None else position_of(prepared.first_text),
        (low, min(high, size - 1)) if low <= high else None,
    )


def duplicates(
    prepared: Prepared, normalized: Normalized
) -> dict[tuple[int, int], tuple[int, int]]:
    """(position, part) of each older copy of a repeated output → (position, part) of its
    newest copy, in the repaired history."""
    found: dict[tuple[int, int], tuple[int, int]] = {}
    facts = normalized.facts
    # A late result pair repair moved sits in the request after its call, not at its index.
    moved_to = {
        index: position
        for position, parts in normalized.moved.items()
        for index, _ in parts.values()
    }

    def located(index: int, digest: str) -> tuple[int, int] | None:
        for position in (normalized.position_of(index), moved_to.get(index)):
            if position is not None:
                number = _output_part(facts[position], digest)
                if number is not None:
                    return position, number
        return None

    for index, digest in prepared.older_copies:
        older = located(index, digest)
        newest = located(prepared.newest_output[digest], digest)
        if older is not None and newest is not None and older[0] != newest[0]:
            found[older] = newest
    return found


def _output_part(fact: MessageFacts, digest: str) -> int | None:
    """The part number of the output with ``digest`` in a message (None: it holds none)."""
    for number, candidate in zip(fact.outputs, fact.output_digests, strict=True):
        if candidate == digest:
            return number
    return None


def current_turn(normalized: Normalized) -> tuple[int, int | None]:
    """Start of the current turn and position of the latest user request, if any.

    The turn starts at the latest user request, or earlier when that request also carries
    results (pair repair may have put them there) whose calls come before it.
    """
    facts = normalized.facts
    for position in range(len(facts) - 1, -1, -1):
        fact = facts[position]
        if fact.request and fact.user_prompt and not fact.notice:
            start = position
            needed = set(fact.result_ids)
            earlier = position - 1
            while needed and earlier >= 0:
                if needed.intersection(facts[earlier].call_ids):
                    needed.difference_update(facts[earlier].call_ids)
                    start = earlier
                earlier -= 1
            return start, position
    return 0, None
