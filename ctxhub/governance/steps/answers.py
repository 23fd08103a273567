"""The answers pair repair gives a call: its real results, moved next to it, or a synthetic
result where it has none."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import (
    SYNTHESIZED_TOOL_RETURN_METADATA_KEY,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolReturnPart,
)

from ..counting import Part, is_tool_result, message_cache, part_cache
from ..positions import Messages
from .pairing import Late

Answer = ToolReturnPart | RetryPromptPart
"""A tool result answering a call (a legacy retry prompt naming a tool answers one too)."""


def answers_for(
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
        part_number = result_numbers(messages[request].parts, {number})[0]
        part = messages[request].parts[part_number]
        assert isinstance(part, ToolReturnPart | RetryPromptPart)
        found.append((rank.get(call_id, 0), order, part, (request, part_number)))
    if dangling:
        message = messages[response]
        assert isinstance(message, ModelResponse)
        for order, part in enumerate(synthetic(message, dangling, text), len(late)):
            found.append((rank.get(part.tool_call_id, 0), order, part, None))
    found.sort(key=lambda entry: entry[:2])
    return [(part, source) for _, _, part, source in found]


def result_numbers(parts: Sequence[Part], result_numbers: set[int]) -> list[int]:
    """Part indices of the n-th tool results (``result_numbers`` counts results only)."""
    found: list[int] = []
    seen = 0
    for number, part in enumerate(parts):
        if is_tool_result(part):
            if seen in result_numbers:
                found.append(number)
            seen += 1
    return found


def request_for(results: list[Answer]) -> ModelRequest:
    """A request holding answers repair put after a response; the same object for the same
    answers."""
    values = part_cache(results[0])
    key = ("request", tuple(map(id, results)))
    found = values.get(key)
    if found is None or not all(a is b for a, b in zip(found.parts, results, strict=True)):
        found = values[key] = ModelRequest(parts=list(results))
    request: ModelRequest = found
    return request


def synthetic(response: ModelResponse, call_ids: list[str], text: str) -> list[ToolReturnPart]:
    """Synthetic results for dangling calls, cached on the response so repeats reuse them."""
    values = message_cache(response)
    key = ("synthetic", text, tuple(call_ids))
    found = values.get(key)
    if found is None:
        found = values[key] = make_synthetic(response, call_ids, text)
    results: list[ToolReturnPart] = found
    return results


def make_synthetic(response: ModelResponse, call_ids: list[str], text: str) -> list[ToolReturnPart]:
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
