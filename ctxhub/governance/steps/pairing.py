"""Which tool calls are answered where: the pairing pair repair works from, extended as a
history grows, and the providers' rule itself (``pairing_problems``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart

from ..counting import is_tool_result, result_call_id
from ..facts import MessageFacts

Late = tuple[str, int, int]
"""(call id, request index, result number) of a result answering an earlier response's call
from a request other than the one right after it."""


@dataclass(frozen=True)
class Pairing:
    """Tool-call pairing of a history prefix: what a left-to-right pass knows at its end.

    A history that grows by appending extends the pass from where it stopped (``extended``)
    instead of walking every message again; the outcome is the same as one pass over the whole.
    ``extended`` copies the mappings it updates, so an earlier pairing stays as it was, unless
    told the earlier one is read no more (``in_place``): the mappings hold a history's open
    and dangling calls, and copying them on every call would be a pass over its responses.
    The lists and sets in them are replaced, never edited.
    """

    length: int = 0
    """How many messages the pass has seen."""
    open_calls: dict[str, list[int]] = field(default_factory=dict)
    """Call id → the responses whose call with that id no result has answered yet (a response
    repeating an id is listed once per call)."""
    unanswered: dict[int, list[str]] = field(default_factory=dict)
    """Response index → its call ids no result has answered: open ones, and those a later call
    made dangling by reusing the id (no result can answer them any more)."""
    orphans: dict[int, set[int]] = field(default_factory=dict)
    """Request index → numbers (among its results) of results repair takes out of it: those
    with no open call, and late ones (moved to the request after their call)."""
    late: dict[int, list[Late]] = field(default_factory=dict)
    """Response index → its calls answered late, in the order the answers came."""
    extends: int = 0
    """Length of the pairing this one extended."""
    same_until: int = 0
    """Repair of the messages before this index is the same as under the pairing this one
    extended: only responses from here on had a call answered or made dangling."""

    def extended(self, facts: Sequence[MessageFacts], *, in_place: bool = False) -> Pairing:
        """The pairing after also seeing ``facts[self.length:]``; ``in_place`` takes this
        one's mappings over (it must not be read afterwards)."""
        if len(facts) == self.length:
            return self
        take = (lambda mapping: mapping) if in_place else dict
        open_calls = take(self.open_calls)
        unanswered = take(self.unanswered)
        orphans = take(self.orphans)
        late = take(self.late)
        # The last message seen may now be followed (so its answers go in the next message).
        same_until = max(self.length - 1, 0)
        for position in range(self.length, len(facts)):
            fact = facts[position]
            if not fact.request:
                if fact.call_ids:
                    unanswered[position] = list(fact.call_ids)
                for call_id in fact.call_ids:
                    earlier = open_calls.get(call_id)
                    if earlier and earlier[-1] == position:
                        # The same id twice in one response: answered in turn.
                        open_calls[call_id] = [*earlier, position]
                        continue
                    # A reused id: the older open calls (if any) can no longer be answered,
                    # and stay unanswered, as they were.
                    open_calls[call_id] = [position]
            elif fact.result_ids:
                for number, call_id in enumerate(fact.result_ids):
                    waiting = open_calls.get(call_id)
                    if not waiting:
                        orphans.setdefault(position, set()).add(number)
                        continue
                    response = waiting[0]
                    same_until = min(same_until, response)
                    if len(waiting) > 1:
                        open_calls[call_id] = waiting[1:]
                    else:
                        del open_calls[call_id]
                    ids = list(unanswered[response])
                    ids.remove(call_id)
                    if ids:
                        unanswered[response] = ids
                    else:
                        del unanswered[response]
                    if response != position - 1:
                        late[response] = [*late.get(response, ()), (call_id, position, number)]
                        orphans.setdefault(position, set()).add(number)
        return Pairing(len(facts), open_calls, unanswered, orphans, late, self.length, same_until)

    def outcome(self) -> tuple[dict[int, list[str]], dict[int, set[int]]]:
        """Call ids repair answers in the request after each response (dangling calls and
        calls answered late), by response index; and the numbers of the results it takes out
        of each request, by request index."""
        answered = {response: list(ids) for response, ids in self.unanswered.items()}
        for response, moves in self.late.items():
            answered.setdefault(response, []).extend(call_id for call_id, _, _ in moves)
        return answered, self.orphans


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
