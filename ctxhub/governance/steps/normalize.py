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

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic_ai.messages import (
    SYNTHESIZED_TOOL_RETURN_METADATA_KEY,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolReturnPart,
)

from .._work import Messages, rebuilt
from ..counting import (
    MessageFacts,
    Part,
    is_tool_result,
    message_cache,
    message_facts,
    part_cache,
    result_call_id,
)
from ..tokens import Tokenizer

_AFTER_ANY = 1 << 62
"""Larger than any position, so a bisect on (index, _AFTER_ANY) lands after that index's run."""

Answer = ToolReturnPart | RetryPromptPart
"""A tool result answering a call (a legacy retry prompt naming a tool answers one too)."""


class Repaired:
    """The repaired history's messages, each read from the input only when asked for.

    Messages pair repair rebuilt or added are held here; every other position is the input
    message at its index, so a history given lazily is loaded only where governance looks.
    """

    __slots__ = ("_index", "_inputs", "_own")

    def __init__(
        self, inputs: Messages, index: list[int | None], own: dict[int, ModelMessage]
    ) -> None:
        self._inputs = inputs
        self._index = index
        self._own = own

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, position: int) -> ModelMessage:
        own = self._own.get(position)
        if own is not None:
            return own
        index = self._index[position]
        assert index is not None
        return self._inputs[index]


@dataclass
class Normalized:
    """The repaired history and how each of its messages relates to the input."""

    messages: Messages
    facts: list[MessageFacts]
    index: list[int | None]
    """Input index of each message; None for a message added to hold answers."""
    origins: dict[int, list[int | None]]
    """For changed messages: the input part index of each part (None when repair put it there:
    synthesized, or moved from a later message — see ``moved``)."""
    removed: dict[int, list[int]]
    """Input message index → indices of its parts removed: orphans, duplicates, and results
    moved to the request after their call."""
    dropped: list[int]
    """Input indices of messages emptied by repair and left out."""
    changed: bool
    runs: list[tuple[int, int, int]] | None = None
    """(first input index, its position, length) of each run of input messages kept in order;
    None when nothing was repaired (every message at its own index)."""
    moved: dict[int, dict[int, tuple[int, int]]] = field(default_factory=dict)
    """Position → {part number: (input index, part index)} of the late results repair moved
    there; each is also in ``removed`` at its input index."""

    def position_of(self, index: int) -> int | None:
        """The position of an input message in the repaired history; None if it was dropped."""
        if self.runs is None:
            return index
        at = bisect_right(self.runs, (index, _AFTER_ANY, 0)) - 1
        if at < 0:
            return None
        first, position, length = self.runs[at]
        return position + index - first if index < first + length else None


Late = tuple[str, int, int]
"""(call id, request index, result number) of a result answering an earlier response's call
from a request other than the one right after it."""


@dataclass(frozen=True)
class Pairing:
    """Tool-call pairing of a history prefix: what a left-to-right pass knows at its end.

    A history that grows by appending extends the pass from where it stopped (``extended``)
    instead of walking every message again; the outcome is the same as one pass over the whole.
    Instances are never changed: ``extended`` copies the mappings it updates and replaces (never
    edits) the lists and sets in them, so an earlier pairing stays as it was.
    """

    length: int = 0
    """How many messages the pass has seen."""
    open_calls: dict[str, list[int]] = field(default_factory=dict)
    """Call id → the responses whose call with that id no result has answered yet (a response
    repeating an id is listed once per call)."""
    reused: dict[int, list[str]] = field(default_factory=dict)
    """Response index → call ids made dangling because a later call reused the id."""
    orphans: dict[int, set[int]] = field(default_factory=dict)
    """Request index → numbers (among its results) of results repair takes out of it: those
    with no open call, and late ones (moved to the request after their call)."""
    late: dict[int, list[Late]] = field(default_factory=dict)
    """Response index → its calls answered late, in the order the answers came."""

    def extended(self, facts: Sequence[MessageFacts]) -> Pairing:
        """The pairing after also seeing ``facts[self.length:]``."""
        if len(facts) == self.length:
            return self
        open_calls = dict(self.open_calls)
        reused = dict(self.reused)
        orphans = dict(self.orphans)
        late = dict(self.late)
        for position in range(self.length, len(facts)):
            fact = facts[position]
            if not fact.request:
                for call_id in fact.call_ids:
                    earlier = open_calls.get(call_id)
                    if earlier and earlier[-1] == position:
                        # The same id twice in one response: answered in turn.
                        open_calls[call_id] = [*earlier, position]
                        continue
                    if earlier:
                        # A reused id: the older open calls can no longer be answered.
                        for response in earlier:
                            reused[response] = [*reused.get(response, ()), call_id]
                    open_calls[call_id] = [position]
            elif fact.result_ids:
                for number, call_id in enumerate(fact.result_ids):
                    waiting = open_calls.get(call_id)
                    if not waiting:
                        orphans.setdefault(position, set()).add(number)
                        continue
                    response = waiting[0]
                    if len(waiting) > 1:
                        open_calls[call_id] = waiting[1:]
                    else:
                        del open_calls[call_id]
                    if response != position - 1:
                        late[response] = [*late.get(response, ()), (call_id, position, number)]
                        orphans.setdefault(position, set()).add(number)
        return Pairing(len(facts), open_calls, reused, orphans, late)

    def dangling(self) -> dict[int, list[str]]:
        """Call ids no result will answer, by response index."""
        dangling = {response: list(ids) for response, ids in self.reused.items()}
        for call_id, responses in self.open_calls.items():
            for response in responses:
                dangling.setdefault(response, []).append(call_id)
        return dangling

    def outcome(self) -> tuple[dict[int, list[str]], dict[int, set[int]]]:
        """Call ids repair answers in the request after each response (dangling calls and
        calls answered late), by response index; and the numbers of the results it takes out
        of each request, by request index."""
        answered = self.dangling()
        for response, moves in self.late.items():
            answered.setdefault(response, []).extend(call_id for call_id, _, _ in moves)
        return answered, self.orphans


def normalize(
    messages: Messages,
    facts: Sequence[MessageFacts],
    tokenizer: Tokenizer,
    dangling_text: str,
    pairing: Pairing | None = None,
) -> Normalized:
    """Repair tool-call pairing; cheap when nothing needs repair (the common case).

    ``pairing`` is the pairing of ``facts`` if the caller carried it over from a shorter
    history (see ``Pairing.extended``); without it, it is computed here. Only the messages
    repair changes (a response whose calls it answers, the request after it, a request losing
    results) are read from ``messages``; the repaired history holds ``messages`` itself when
    nothing needs repair.
    """
    if pairing is None or pairing.length != len(facts):
        pairing = Pairing().extended(facts)
    dangling = pairing.dangling()
    late = pairing.late
    orphans = pairing.orphans
    if not dangling and not orphans:
        return Normalized(messages, list(facts), list(range(len(facts))), {}, {}, [], False)
    own: dict[int, ModelMessage] = {}
    out_facts: list[MessageFacts] = []
    index: list[int | None] = []
    origins: dict[int, list[int | None]] = {}
    removed: dict[int, list[int]] = {}
    dropped: list[int] = []
    moved: dict[int, dict[int, tuple[int, int]]] = {}
    pending: list[Answer] = []
    sources: list[tuple[int, int] | None] = []
    runs: list[tuple[int, int, int]] = []

    def place(position: int, at: int) -> None:
        """Record where the pending answers went: ``at`` onwards in ``position``."""
        found = {at + n: source for n, source in enumerate(sources) if source is not None}
        if found:
            moved[position] = found

    def flush_pending() -> None:
        if pending:
            request = _request_for(pending)
            origins[len(index)] = [None] * len(pending)
            place(len(index), 0)
            own[len(index)] = request
            out_facts.append(message_facts(request, tokenizer))
            index.append(None)
            pending.clear()
            sources.clear()

    def keep(position: int) -> None:
        runs.append((position, len(index), 1))
        out_facts.append(facts[position])
        index.append(position)

    size = len(facts)
    last = size - 1
    answered = {*dangling, *late}
    # Only a response whose calls repair answers, the message after it and a request losing
    # results can change; the runs of messages between them are kept whole (no pending answers
    # cross a run).
    sites = sorted({*answered, *(r + 1 for r in answered if r + 1 < size), *orphans})
    copied = 0
    for position in sites:
        if position > copied:
            runs.append((copied, len(index), position - copied))
            out_facts.extend(facts[copied:position])
            index.extend(range(copied, position))
        copied = position + 1
        if not facts[position].request:
            flush_pending()
            keep(position)
            if position in answered:
                answers = _answers(
                    messages,
                    position,
                    facts[position].call_ids,
                    dangling.get(position, []),
                    late.get(position, []),
                    dangling_text,
                )
                pending.extend(part for part, _ in answers)
                sources.extend(source for _, source in answers)
            continue
        gone = orphans.get(position)
        if not gone and not pending:
            keep(position)
            continue
        message = messages[position]
        parts: list[Part] = list(message.parts)
        part_origins: list[int | None] = list(range(len(parts)))
        if gone:
            removed[position] = _result_numbers(parts, gone)
            taken = set(removed[position])
            keep_parts = [n for n in range(len(parts)) if n not in taken]
            parts = [parts[n] for n in keep_parts]
            part_origins = list(keep_parts)
        if pending:
            at = max((n + 1 for n, p in enumerate(parts) if is_tool_result(p)), default=0)
            parts[at:at] = pending
            part_origins[at:at] = [None] * len(pending)
            place(len(index), at)
            pending.clear()
            sources.clear()
        if not parts and position != last and not facts[position].aborted:
            dropped.append(position)
            continue
        new = rebuilt(message, parts)
        origins[len(index)] = part_origins
        own[len(index)] = new
        runs.append((position, len(index), 1))
        out_facts.append(message_facts(new, tokenizer))
        index.append(position)
    if copied < size:
        runs.append((copied, len(index), size - copied))
        out_facts.extend(facts[copied:])
        index.extend(range(copied, size))
    flush_pending()
    return Normalized(
        Repaired(messages, index, own),
        out_facts,
        index,
        origins,
        removed,
        dropped,
        True,
        runs,
        moved,
    )


def _answers(
    messages: Messages,
    response: int,
    call_ids: Sequence[str],
    dangling: list[str],
    late: list[Late],
    text: str,
) -> list[tuple[Answer, tuple[int, int] | None]]:
    """The answers repair puts after a response, in the order of its calls, each with where it
    came from: (input index, part index) of a late result moved here, None when synthesized.

    With an id repeated in the response, the late results answer the earlier of its calls
    still open (they came first), the synthetic ones the rest.
    """
    rank: dict[str, int] = {}
    for number, call_id in enumerate(call_ids):
        rank.setdefault(call_id, number)
    found: list[tuple[int, int, Answer, tuple[int, int] | None]] = []
    for order, (call_id, request, number) in enumerate(late):
        part_number = _result_numbers(messages[request].parts, {number})[0]
        part = messages[request].parts[part_number]
        assert isinstance(part, ToolReturnPart | RetryPromptPart)
        found.append((rank.get(call_id, 0), order, part, (request, part_number)))
    if dangling:
        message = messages[response]
        assert isinstance(message, ModelResponse)
        for order, part in enumerate(_synthetic(message, dangling, text), len(late)):
            found.append((rank.get(part.tool_call_id, 0), order, part, None))
    found.sort(key=lambda entry: entry[:2])
    return [(part, source) for _, _, part, source in found]


def _result_numbers(parts: Sequence[Part], result_numbers: set[int]) -> list[int]:
    """Part indices of the n-th tool results (``result_numbers`` counts results only)."""
    found: list[int] = []
    seen = 0
    for number, part in enumerate(parts):
        if is_tool_result(part):
            if seen in result_numbers:
                found.append(number)
            seen += 1
    return found


def _request_for(results: list[Answer]) -> ModelRequest:
    """A request holding answers repair put after a response; the same object for the same
    answers."""
    values = part_cache(results[0])
    key = ("request", tuple(map(id, results)))
    found = values.get(key)
    if found is None or not all(a is b for a, b in zip(found.parts, results, strict=True)):
        found = values[key] = ModelRequest(parts=list(results))
    request: ModelRequest = found
    return request


def _synthetic(response: ModelResponse, call_ids: list[str], text: str) -> list[ToolReturnPart]:
    """Synthetic results for dangling calls, cached on the response so repeats reuse them."""
    values = message_cache(response)
    key = ("synthetic", text, tuple(call_ids))
    found = values.get(key)
    if found is None:
        found = values[key] = _make_synthetic(response, call_ids, text)
    results: list[ToolReturnPart] = found
    return results


def _make_synthetic(
    response: ModelResponse, call_ids: list[str], text: str
) -> list[ToolReturnPart]:
    calls = {p.tool_call_id: p for p in response.parts if isinstance(p, ToolCallPart)}
    return [
        ToolReturnPart(
            tool_name=calls[call_id].tool_name,
            content=text,
            tool_call_id=call_id,
            tool_kind=calls[call_id].tool_kind,
            metadata={SYNTHESIZED_TOOL_RETURN_METADATA_KEY: True},
            timestamp=response.timestamp,
            outcome="interrupted",
        )
        for call_id in call_ids
    ]


def pairing_problems(messages: Sequence[ModelMessage]) -> list[str]:
    """Every breach of the providers' pairing rule in a history (empty when it is valid): each
    call answered once, in the very next message, a request; each result right after its call."""
    problems: list[str] = []
    size = len(messages)
    for position, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            calls = [p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)]
            if not calls:
                continue
            following = messages[position + 1] if position + 1 < size else None
            answers = (
                [result_call_id(p) for p in following.parts if is_tool_result(p)]
                if isinstance(following, ModelRequest)
                else []
            )
            for call_id in dict.fromkeys(calls):
                if answers.count(call_id) < calls.count(call_id):
                    problems.append(
                        f"call {call_id} at {position} is not answered by the next message"
                    )
            continue
        results = [result_call_id(p) for p in message.parts if is_tool_result(p)]
        if not results:
            continue
        before = messages[position - 1] if position > 0 else None
        asked = (
            [p.tool_call_id for p in before.parts if isinstance(p, ToolCallPart)]
            if isinstance(before, ModelResponse)
            else []
        )
        for call_id in dict.fromkeys(results):
            if results.count(call_id) > asked.count(call_id):
                problems.append(
                    f"result {call_id} at {position} answers no call of the response before it"
                )
    return problems
