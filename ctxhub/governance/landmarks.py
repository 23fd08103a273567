"""What the pipeline looks for in a repaired history, from what ``prepare`` collected: the
window's landmarks, repeated outputs and where the current turn starts."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

from .facts import MessageFacts
from .positions import Landmarks
from .prepared import Prepared
from .reads import OutputAt
from .steps.repaired import Normalized


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
    """(position, part) of each older copy of a repeated output, or older read of a resource
    read again, → (position, part) of the next copy or read, in the repaired history: each
    output's later copies are a chain."""
    found: dict[tuple[int, int], tuple[int, int]] = {}
    facts, input_facts = normalized.facts, prepared.facts
    # A late result pair repair moved sits in the request after its call, not at its index.
    moved_to = {
        at: (position, number)
        for position, parts in normalized.moved.items()
        for number, at in parts.items()
    }

    def located(output: OutputAt) -> tuple[int, int] | None:
        index, digest, nth = output
        fact = input_facts[index]
        part = _output_part(fact, digest, nth)
        if part is None:
            return None
        if (index, part) in moved_to:
            return moved_to[index, part]
        removed = normalized.removed.get(index, ())
        position = normalized.position_of(index)
        if part in removed or position is None:
            return None
        # Copies of the same text repair removed before it no longer count.
        gone = 0
        if removed:
            digests = dict(zip(fact.outputs, fact.output_digests, strict=True))
            gone = sum(1 for r in removed if r < part and digests.get(r) == digest)
        number = _output_part(facts[position], digest, nth - gone)
        return None if number is None else (position, number)

    # A later read of the same resource supersedes an older read, whatever either returned;
    # reads are linked by resource only, so that no chain leads from one resource to another.
    reads = dict(prepared.reads.older)
    read = set(reads).union(reads.values()) if reads else set()
    copies = {
        o: n for o, n in prepared.older_copies if not read or (o not in read and n not in read)
    }
    for output, later_output in copies.items():
        older = located(output)
        if older is not None:
            later = _next_located(copies, later_output, older, located)
            if later is not None:
                found[older] = later
    # Reads go in the order they are sent: a late result pair repair moved next to its call
    # is read when the call was made, and governing the output again finds that order.
    for chain in _chains(reads):
        sent = sorted({at for at in map(located, chain) if at is not None})
        found.update(pairwise(sent))
    return found


Located = tuple[int, int]


def _next_located(
    links: dict[OutputAt, OutputAt],
    later_output: OutputAt,
    older: Located,
    located: Callable[[OutputAt], Located | None],
) -> Located | None:
    """Where the next copy after ``older`` is sent: a copy pair repair removed (a second result
    for one call) is passed over."""
    later = located(later_output)
    while later is None or later == older:
        following = links.get(later_output)
        if following is None:
            return None
        later_output, later = following, located(following)
    return later


def _chains(links: dict[OutputAt, OutputAt]) -> list[list[OutputAt]]:
    """The linear chains ``links`` (each older → the next) makes, from their first links."""
    chains = []
    for start in sorted(set(links).difference(links.values())):
        chain = [start]
        while chain[-1] in links:
            chain.append(links[chain[-1]])
        chains.append(chain)
    return chains


def _output_part(fact: MessageFacts, digest: str, nth: int) -> int | None:
    """The part number of the ``nth`` output with ``digest`` in a message (None: it holds
    fewer)."""
    for number, candidate in zip(fact.outputs, fact.output_digests, strict=True):
        if candidate == digest:
            if not nth:
                return number
            nth -= 1
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
