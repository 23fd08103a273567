"""A plan made into the request: every kept message governed, read in runs, and the window's
notice put where it belongs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic_ai.messages import ModelMessage

from ._work import Work
from .counting import message_tokens
from .positions import Messages
from .steps.repaired import Repaired


def assemble(work: Work) -> list[ModelMessage]:
    """The governed history: each kept position's governed message, and the window's notice.

    The kept positions are a few runs (the head, sticky messages, the tail), found with
    C-level searches of the kept flags, and each run is read in one pass that calls no Python
    function per message, so this costs little more than the list it returns.
    """
    runs = _governed(work)
    output: list[ModelMessage] = []
    for start, end in runs:
        governed = work.messages[start:end]
        read, indices = _reader(work.base, start, end, governed)
        # A position's base message is read only where it is sent as it is: a caller's
        # history may load each message on demand.
        output += [
            read(index) if message is None else message  # type: ignore[arg-type]
            for index, message in zip(indices, governed, strict=True)
        ]
    added = []
    if work.notice is not None:
        added.append((_at(work, work.notice_before, len(output)), 0, work.notice))
    if work.note_message is not None:
        added.append((_at(work, work.note_before, len(output)), 1, work.note_message))
    # The later first, so each goes where it was found; the notice before the note at one place.
    for at, _, message in sorted(added, key=lambda item: (item[0], item[1]), reverse=True):
        output.insert(at, message)
    return output


def _at(work: Work, before: int | None, size: int) -> int:
    """Where a message governance adds in front of position ``before`` (None: after the last)
    goes among the kept ones."""
    return size if before is None else work.kept.count(1, 0, before)


def sent_tokens(work: Work) -> int:
    """Tokens of the messages a plan sends, every kept message governed (as ``assemble``
    needs them): exact, whatever earlier calls carried over. The budget note aside: its room
    is held back from what the plan aims at (``request_tokens`` counts it)."""
    _governed(work)
    return work.total()


def request_tokens(work: Work) -> int:
    """Tokens of the messages a plan sends, the budget note included."""
    return sent_tokens(work) + work.note_tokens()


def shared_prefix_tokens(before: Work, after: Work) -> int:
    """Tokens of the leading messages two plans over one history both send, identically: what
    a provider's prompt cache serves of ``after``'s request when ``before``'s was sent last.
    Both plans' kept messages are governed already (``sent_tokens``)."""
    tokens = 0
    for position in range(len(after.kept) + 1):
        for added in (_notice_at, _note_at):
            found = [added(w, position) for w in (before, after)]
            if found[0] != found[1]:
                return tokens
            if found[1] is not None:
                tokens += message_tokens(found[1], after.tokenizer)
        if position == len(after.kept):
            return tokens
        kept = before.kept[position], after.kept[position]
        if kept[0] != kept[1]:
            return tokens
        if kept[1]:
            message = after.messages[position]
            if message is not before.messages[position] and message != before.messages[position]:
                return tokens
            tokens += after.tokens[position]
    return tokens


def _notice_at(work: Work, position: int) -> ModelMessage | None:
    """The window's notice, if it goes in front of ``position`` (the history's size: after
    the last message)."""
    before = len(work.kept) if work.notice_before is None else work.notice_before
    return work.notice if before == position else None


def _note_at(work: Work, position: int) -> ModelMessage | None:
    """The budget note, if it goes in front of ``position`` (the history's size: after the
    last message)."""
    before = len(work.kept) if work.note_before is None else work.note_before
    return work.note_message if before == position else None


def _governed(work: Work) -> list[tuple[int, int]]:
    """Govern every kept position not governed yet; the runs of kept positions."""
    known = work.known
    runs = _runs(work.kept)
    for start, end in runs:
        position = known.find(0, start, end)
        while position >= 0:
            work.materialise(position)
            position = known.find(0, position + 1, end)
    return runs


def _reader(
    base: Messages, start: int, end: int, governed: list[ModelMessage | None]
) -> tuple[Callable[[int], ModelMessage], Sequence[int | None]]:
    """How to read the base messages of positions ``[start, end)``: a function and the index
    to call it with at each position (see ``Repaired.reader``)."""
    if isinstance(base, Repaired):
        return base.reader(start, end, governed)
    return base.__getitem__, range(start, end)


def _runs(kept: bytearray) -> list[tuple[int, int]]:
    """The runs of kept positions, as (first, last + 1)."""
    runs = []
    start = kept.find(1)
    while start >= 0:
        end = kept.find(0, start)
        if end < 0:
            end = len(kept)
        runs.append((start, end))
        start = kept.find(1, end)
    return runs
