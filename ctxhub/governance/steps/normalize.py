"""Pair integrity, first on every call (AgenticLoop RFC 005, Codex ``normalize``).

* A tool call that never got its result (a run interrupted mid-tool, a crash, a hand-built
  history) gets a synthetic result with the policy's text, right after the call — as co-cli
  patches dangling calls on interrupt. It is marked the way pydantic-ai marks its own
  (``outcome='interrupted'`` and the synthesized-return metadata key), so the framework does
  not add a second one.
* A tool result whose call is not before it is removed: providers reject it.
* Turn-aborted markers — an interrupted request, or a user prompt starting ``<turn_aborted>`` —
  are left in place (a request emptied by orphan removal is dropped only if it was not one).

Matching follows pydantic-ai's ``repair_messages``: a result answers the oldest open call with
its id, earlier in the history. Provider-native calls and results pair inside one response and
are left alone.
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
    """Input index of each message; None for a message added to hold synthetic results."""
    origins: dict[int, list[int | None]]
    """For changed messages: the input part index of each part (None when synthesized)."""
    removed: dict[int, list[int]]
    """Input message index → indices of its parts removed as orphans."""
    dropped: list[int]
    """Input indices of messages emptied by orphan removal and left out."""
    changed: bool
    runs: list[tuple[int, int, int]] | None = None
    """(first input index, its position, length) of each run of input messages kept in order;
    None when nothing was repaired (every message at its own index)."""

    def position_of(self, index: int) -> int | None:
        """The position of an input message in the repaired history; None if it was dropped."""
        if self.runs is None:
            return index
        at = bisect_right(self.runs, (index, _AFTER_ANY, 0)) - 1
        if at < 0:
            return None
        first, position, length = self.runs[at]
        return position + index - first if index < first + length else None


@dataclass(frozen=True)
class Pairing:
    """Tool-call pairing of a history prefix: what a left-to-right pass knows at its end.

    A history that grows by appending extends the pass from where it stopped (``extended``)
    instead of walking every message again; the outcome is the same as one pass over the whole.
    Instances are never changed: ``extended`` copies what it updates.
    """

    length: int = 0
    """How many messages the pass has seen."""
    open_calls: dict[str, list[int]] = field(default_factory=dict)
    """Call id → the response still waiting for its result."""
    reused: dict[int, list[str]] = field(default_factory=dict)
    """Response index → call ids made dangling because a later call reused the id."""
    orphans: dict[int, set[int]] = field(default_factory=dict)
    """Request index → numbers (among its results) of results with no open call."""

    def extended(self, facts: Sequence[MessageFacts]) -> Pairing:
        """The pairing after also seeing ``facts[self.length:]``."""
        if len(facts) == self.length:
            return self
        open_calls = {call_id: list(waiting) for call_id, waiting in self.open_calls.items()}
        reused = {response: list(ids) for response, ids in self.reused.items()}
        # Entries of requests already seen never change, so they are shared.
        orphans = dict(self.orphans)
        for position in range(self.length, len(facts)):
            fact = facts[position]
            if not fact.request:
                for call_id in fact.call_ids:
                    earlier = open_calls.get(call_id)
                    if earlier:
                        # A reused id: the older open call can no longer be answered.
                        for response in earlier:
                            reused.setdefault(response, []).append(call_id)
                    open_calls[call_id] = [position]
            elif fact.result_ids:
                for number, call_id in enumerate(fact.result_ids):
                    waiting = open_calls.get(call_id)
                    if waiting:
                        waiting.pop(0)
                        if not waiting:
                            del open_calls[call_id]
                    else:
                        orphans.setdefault(position, set()).add(number)
        return Pairing(len(facts), open_calls, reused, orphans)

    def outcome(self) -> tuple[dict[int, list[str]], dict[int, set[int]]]:
        """Dangling call ids by response index, and orphan result numbers by request index."""
        dangling = {response: list(ids) for response, ids in self.reused.items()}
        for call_id, responses in self.open_calls.items():
            for response in responses:
                dangling.setdefault(response, []).append(call_id)
        return dangling, self.orphans


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
    repair changes (a dangling call's response, the request after it, a request with orphans)
    are read from ``messages``; the repaired history holds ``messages`` itself when nothing
    needs repair.
    """
    if pairing is None or pairing.length != len(facts):
        pairing = Pairing().extended(facts)
    dangling, orphans = pairing.outcome()
    if not dangling and not orphans:
        return Normalized(messages, list(facts), list(range(len(facts))), {}, {}, [], False)
    own: dict[int, ModelMessage] = {}
    out_facts: list[MessageFacts] = []
    index: list[int | None] = []
    origins: dict[int, list[int | None]] = {}
    removed: dict[int, list[int]] = {}
    dropped: list[int] = []
    pending: list[ToolReturnPart] = []
    runs: list[tuple[int, int, int]] = []

    def flush_pending() -> None:
        if pending:
            request = _request_for(pending)
            origins[len(index)] = [None] * len(pending)
            own[len(index)] = request
            out_facts.append(message_facts(request, tokenizer))
            index.append(None)
            pending.clear()

    def keep(position: int) -> None:
        runs.append((position, len(index), 1))
        out_facts.append(facts[position])
        index.append(position)

    size = len(facts)
    last = size - 1
    # Only a dangling response, the message after it and a request with orphans can change;
    # the runs of messages between them are kept whole (no pending results cross a run).
    sites = sorted({*dangling, *(r + 1 for r in dangling if r + 1 < size), *orphans})
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
            calls = dangling.get(position)
            if calls:
                response = messages[position]
                assert isinstance(response, ModelResponse)
                pending.extend(_synthetic(response, calls, dangling_text))
            continue
        gone = orphans.get(position)
        if not gone and not pending:
            keep(position)
            continue
        message = messages[position]
        parts: list[Part] = list(message.parts)
        part_origins: list[int | None] = list(range(len(parts)))
        if gone:
            removed[position] = sorted(_result_numbers(parts, gone))
            keep_parts = [n for n in range(len(parts)) if n not in set(removed[position])]
            parts = [parts[n] for n in keep_parts]
            part_origins = list(keep_parts)
        if pending:
            at = max((n + 1 for n, p in enumerate(parts) if is_tool_result(p)), default=0)
            parts[at:at] = pending
            part_origins[at:at] = [None] * len(pending)
            pending.clear()
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
        Repaired(messages, index, own), out_facts, index, origins, removed, dropped, True, runs
    )


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


def _request_for(results: list[ToolReturnPart]) -> ModelRequest:
    """A request holding synthetic results; the same object for the same results."""
    values = part_cache(results[0])
    key = ("request", tuple(map(id, results)))
    found = values.get(key)
    if found is None:
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
    """Every unanswered call and unmatched result in a history (empty when it is valid)."""
    problems: list[str] = []
    open_calls: dict[str, int] = {}
    for position, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            for call in message.parts:
                if isinstance(call, ToolCallPart):
                    if call.tool_call_id in open_calls:
                        problems.append(f"call {call.tool_call_id} reused at {position}")
                    open_calls[call.tool_call_id] = position
        else:
            for result in message.parts:
                if is_tool_result(result):
                    call_id = result_call_id(result)
                    if open_calls.pop(call_id, None) is None:
                        problems.append(f"result {call_id} at {position} has no call before it")
    problems.extend(f"call {c} at {p} has no result" for c, p in open_calls.items())
    return problems
