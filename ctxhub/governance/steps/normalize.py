"""Pair integrity, first on every call (AgenticLoop RFC 005, Codex ``normalize``).

Providers (OpenAI, Anthropic) accept a tool call only when the very next message is a request
answering it, and a tool result only when the response right before it made its call; each call
is answered once. Repair makes every history so:

* A result that arrives later than the request after its call (a parallel call answered in a
  second request, a result stored after the next prompt or response) moves to the request right
  after its call: the real result is worth more than a synthetic one.
* A tool call that never got its result (a run interrupted mid-tool, a crash, a hand-built
  history) gets a synthetic result with the policy's text, right after the call — as co-cli
  patches dangling calls on interrupt. It is marked the way pydantic-ai marks its own
  (``outcome='interrupted'`` and the synthesized-return metadata key), so the framework does
  not add a second one.
* Answers go after the results already in that request, ahead of its other parts; when the
  call is followed by another response, they get a request of their own in between.
* A result with no open call before it (its call is gone, comes after it, or was answered
  already) is removed.
* Turn-aborted markers — an interrupted request, or a user prompt starting ``<turn_aborted>`` —
  are left in place (a request emptied by repair is dropped only if it was not one, and not the
  last message).

Matching follows pydantic-ai's ``repair_messages``: a result answers the oldest open call with
its id, earlier in the history; a call whose id a later response reuses while it is open can no
longer be answered. Provider-native calls and results pair inside one response and are left
alone.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import chain
from operator import attrgetter

from pydantic_ai.messages import (
    ModelMessage,
)

from ..counting import Part, is_tool_result
from ..facts import MessageFacts, message_facts
from ..parts import rebuilt
from ..positions import Messages
from ..tokens import Tokenizer
from .answers import Answer, answers_for, request_for, result_numbers
from .pairing import Pairing
from .repaired import Checkpoint, Normalized, Repaired


def normalize(
    messages: Messages,
    facts: Sequence[MessageFacts],
    tokenizer: Tokenizer,
    dangling_text: str,
    pairing: Pairing | None = None,
    previous: Normalized | None = None,
    *,
    in_place: bool = False,
) -> Normalized:
    """Repair tool-call pairing; cheap when nothing needs repair (the common case).

    ``pairing`` is the pairing of ``facts`` if the caller carried it over from a shorter
    history (see ``Pairing.extended``); without it, it is computed here. Only the messages
    repair changes (a response whose calls it answers, the message after it, a request losing
    results) are read from ``messages``; the repaired history holds ``messages`` itself when
    nothing needs repair.

    ``previous`` is the repair of the history this one extends, made with the pairing
    ``pairing`` extends: the pass is taken up where the repairs start to differ (near the end,
    for a history grown by a turn), so a long history is not repaired again from its start.
    ``in_place`` takes ``previous``'s lists over (it must not be read afterwards) rather than
    copying what the pass keeps of them.
    """
    if pairing is None or pairing.length != len(facts):
        pairing = Pairing().extended(facts)
        previous = None
    held = facts if isinstance(facts, list) else list(facts)
    if not pairing.unanswered and not pairing.orphans:
        # Nothing repaired, now or before: the facts are the input's, which begin with those
        # of the history this one extends.
        shared = previous.inputs if previous is not None and not previous.changed else None
        return Normalized(
            messages, held, range(len(held)), {}, {}, [], False, inputs=len(held), shared=shared
        )
    repair = _Repair(messages, held, tokenizer, dangling_text, pairing)
    start = 0
    if previous is not None and previous.text == dangling_text and previous.changed:
        if previous.inputs == len(held):
            start = repair.resume(previous, len(held), in_place)
        elif previous.inputs == pairing.extends:
            start = repair.resume(previous, pairing.same_until, in_place)
    return repair.run(start)


class _Repair:
    """One left-to-right repair pass, from the start of a history or from a checkpoint of an
    earlier pass over the history it extends."""

    def __init__(
        self,
        messages: Messages,
        facts: list[MessageFacts],
        tokenizer: Tokenizer,
        text: str,
        pairing: Pairing,
    ) -> None:
        self.messages = messages
        self.facts = facts
        self.tokenizer = tokenizer
        self.text = text
        self.dangling = pairing.unanswered
        self.late = pairing.late
        self.orphans = pairing.orphans
        self.own: dict[int, ModelMessage] = {}
        self.out_facts: list[MessageFacts] = []
        self.index: list[int | None] = []
        self.origins: dict[int, list[int | None]] = {}
        self.removed: dict[int, list[int]] = {}
        self.dropped: list[int] = []
        self.moved: dict[int, dict[int, tuple[int, int]]] = {}
        self.runs: list[tuple[int, int, int]] = []
        self.checkpoints: list[Checkpoint] = []
        self.copied = 0
        self.shared: int | None = None
        self.cut_facts: list[MessageFacts] = []
        """The facts of ``previous`` past the checkpoint the pass was taken up at."""
        self.pending: list[Answer] = []
        self.sources: list[tuple[int, int] | None] = []

    def resume(self, previous: Normalized, before: int, in_place: bool) -> int:
        """Take up ``previous``'s pass at its last checkpoint at or before input ``before``;
        the input index to go on from (0: from the start). ``in_place`` cuts ``previous``'s
        lists back to the checkpoint and goes on with them rather than copying them: on a
        long history, each copy is a pass over it."""
        at = bisect_right(previous.checkpoints, before, key=attrgetter("site")) - 1
        if at < 0:
            return 0
        site, length, runs, copied = previous.checkpoints[at]
        assert previous.runs is not None
        assert isinstance(previous.index, list)
        cut, before_end = (_cut, _before_in_place) if in_place else (_copied, _before)
        self.checkpoints = cut(previous.checkpoints, at)
        self.cut_facts = previous.facts[length:]
        self.out_facts = cut(previous.facts, length)
        self.shared = length
        self.index = cut(previous.index, length)
        self.runs = cut(previous.runs, runs)
        self.copied = copied
        self.dropped = cut(previous.dropped, bisect_left(previous.dropped, site))
        # Keyed in the order the pass added them: the entries past the checkpoint are last.
        self.own = before_end(previous.own, length)
        self.origins = before_end(previous.origins, length)
        self.moved = before_end(previous.moved, length)
        self.removed = before_end(previous.removed, site)
        return site

    def run(self, start: int) -> Normalized:
        """Repair from input ``start`` on (a checkpoint's site, or 0) to the end."""
        facts, dangling, late, orphans = self.facts, self.dangling, self.late, self.orphans
        size = len(facts)
        answered = [r for r in chain(dangling, late) if r >= start]
        # Only a response whose calls repair answers, the message after it and a request losing
        # results can change; the runs of messages between them are kept whole (no pending
        # answers cross a run).
        sites = sorted(
            {
                *answered,
                *(r + 1 for r in answered if r + 1 < size),
                *(p for p in orphans if p >= start),
            }
        )
        for position in sites:
            if not self.pending:
                self.checkpoints.append(
                    Checkpoint(position, len(self.index), len(self.runs), self.copied)
                )
            self._copy_to(position)
            self.copied = position + 1
            if facts[position].request:
                self._request(position, size - 1)
            else:
                self._response(position)
        if size and not self.pending and (not sites or sites[-1] < size - 1):
            # A checkpoint before the last message too (which a grown history may answer), so
            # the next call takes the pass up there, not at the last repair however far back.
            self._copy_to(size - 1)
            self.checkpoints.append(
                Checkpoint(size - 1, len(self.index), len(self.runs), self.copied)
            )
        self._copy_to(size)
        self._flush()
        if self.shared is not None:
            # The pass taken up often makes the same messages again past the checkpoint.
            for old, new in zip(self.cut_facts, self.out_facts[self.shared :], strict=False):
                if old is not new:
                    break
                self.shared += 1
        return self._normalized(size)

    def _response(self, position: int) -> None:
        """Keep a response, and queue the answers repair gives its calls (the results it
        lacks, or that arrived late) for the request after it."""
        self._flush()
        self._keep(position)
        dangling, late = self.dangling, self.late
        if position in dangling or position in late:
            answers = answers_for(
                self.messages,
                position,
                self.facts[position].call_ids,
                dangling.get(position, []),
                late.get(position, []),
                self.text,
            )
            self.pending.extend(part for part, _ in answers)
            self.sources.extend(source for _, source in answers)

    def _normalized(self, size: int) -> Normalized:
        return Normalized(
            Repaired(self.messages, self.index, self.own),
            self.out_facts,
            self.index,
            self.origins,
            self.removed,
            self.dropped,
            True,
            self.runs,
            self.moved,
            self.own,
            self.checkpoints,
            size,
            self.text,
            self.shared,
        )

    def _copy_to(self, position: int) -> None:
        """Keep the input messages from the last one read up to ``position`` as they are."""
        copied = self.copied
        if position > copied:
            runs, at = self.runs, len(self.index)
            first, start, length = runs[-1] if runs else (-1, -1, 0)
            if first + length == copied and start + length == at and len(runs) > self._frozen():
                # Continues the last run, which no checkpoint holds: one run, not one a call.
                runs[-1] = (first, start, length + position - copied)
            else:
                runs.append((copied, at, position - copied))
            self.out_facts.extend(self.facts[copied:position])
            self.index.extend(range(copied, position))
            self.copied = position

    def _frozen(self) -> int:
        """How many runs the last checkpoint holds (a resumed pass takes them as they were)."""
        return self.checkpoints[-1].runs if self.checkpoints else 0

    def _keep(self, position: int) -> None:
        self.runs.append((position, len(self.index), 1))
        self.out_facts.append(self.facts[position])
        self.index.append(position)

    def _add(self, message: ModelMessage, origins: list[int | None], index: int | None) -> None:
        """Put a message repair made at the end of the repaired history."""
        at = len(self.index)
        self.origins[at] = origins
        self.own[at] = message
        self.out_facts.append(message_facts(message, self.tokenizer))
        self.index.append(index)

    def _place(self, position: int, at: int) -> None:
        """Record where the pending answers went: ``at`` onwards in ``position``."""
        found = {at + n: source for n, source in enumerate(self.sources) if source is not None}
        if found:
            self.moved[position] = found
        self.pending.clear()
        self.sources.clear()

    def _flush(self) -> None:
        """Give the pending answers a request of their own (the call's response is followed
        by another response, or by nothing)."""
        if self.pending:
            request = request_for(self.pending)
            self._place(len(self.index), 0)
            self._add(request, [None] * len(request.parts), None)

    def _request(self, position: int, last: int) -> None:
        """A request losing results, receiving the pending answers, or both."""
        gone = self.orphans.get(position)
        if not gone and not self.pending:
            self._keep(position)
            return
        message = self.messages[position]
        parts: list[Part] = list(message.parts)
        part_origins: list[int | None] = list(range(len(parts)))
        if gone:
            self.removed[position] = result_numbers(parts, gone)
            taken = set(self.removed[position])
            kept = [n for n in range(len(parts)) if n not in taken]
            parts = [parts[n] for n in kept]
            part_origins = list(kept)
        if self.pending:
            at = max((n + 1 for n, p in enumerate(parts) if is_tool_result(p)), default=0)
            parts[at:at] = self.pending
            part_origins[at:at] = [None] * len(self.pending)
            self._place(len(self.index), at)
        if not parts and position != last and not self.facts[position].aborted:
            self.dropped.append(position)
            return
        self.runs.append((position, len(self.index), 1))
        self._add(rebuilt(message, parts), part_origins, position)


def _before[V](entries: dict[int, V], end: int) -> dict[int, V]:
    """The entries of a dict keyed in increasing order whose keys are below ``end``."""
    return _before_in_place(dict(entries), end)


def _before_in_place[V](entries: dict[int, V], end: int) -> dict[int, V]:
    """``_before`` by taking the other entries out of ``entries``."""
    while entries and next(reversed(entries)) >= end:
        entries.popitem()
    return entries


def _copied[T](items: list[T], end: int) -> list[T]:
    """The first ``end`` items, copied."""
    return items[:end]


def _cut[T](items: list[T], end: int) -> list[T]:
    """``items`` cut back to their first ``end``."""
    del items[end:]
    return items
