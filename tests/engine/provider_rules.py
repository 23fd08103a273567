"""The tool-call pairing rule model providers enforce, checked without the engine.

OpenAI's chat and responses APIs and Anthropic's messages API accept a history only when:

* every tool call in a response is answered in the very next message, which is a request;
* every tool result in a request answers a call of the response immediately before it;
* each call is answered exactly once (a call id repeated in one response needs as many results).

A tool result is a ``ToolReturnPart`` or a ``RetryPromptPart`` naming a tool; a retry prompt
without a tool name is feedback on the whole response and is sent as user text. Provider-native
calls and results pair inside one response and are not concerned.

Only pydantic-ai's message classes are used here, so this is an oracle for governance's output
rather than a second copy of its repair.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolReturnPart,
)


def call_ids(message: ModelMessage) -> list[str]:
    """Ids of the tool calls a message makes, in order (none for a request)."""
    if not isinstance(message, ModelResponse):
        return []
    return [p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)]


def result_ids(message: ModelMessage) -> list[str]:
    """Ids of the calls the tool results of a message answer, in order (none for a response)."""
    if not isinstance(message, ModelRequest):
        return []
    found: list[str] = []
    for part in message.parts:
        if isinstance(part, ToolReturnPart) or (
            isinstance(part, RetryPromptPart) and part.tool_name is not None
        ):
            found.append(part.tool_call_id)
    return found


def provider_violations(messages: Sequence[ModelMessage]) -> list[str]:
    """Every breach of the pairing rule in a history, in order; empty when a provider accepts it."""
    problems: list[str] = []
    size = len(messages)
    for at, message in enumerate(messages):
        calls = Counter(call_ids(message))
        if calls:
            following = messages[at + 1] if at + 1 < size else None
            if following is None:
                problems.append(f"calls {sorted(calls)} at {at} end the history unanswered")
            elif not isinstance(following, ModelRequest):
                problems.append(f"calls {sorted(calls)} at {at} are followed by a response")
            else:
                answers = Counter(result_ids(following))
                for call_id, count in sorted(calls.items()):
                    if answers[call_id] < count:
                        problems.append(
                            f"call {call_id} at {at} answered {answers[call_id]} times "
                            f"in the next request (needs {count})"
                        )
        results = Counter(result_ids(message))
        if results:
            before = messages[at - 1] if at > 0 else None
            asked = Counter(call_ids(before)) if before is not None else Counter()
            for call_id, count in sorted(results.items()):
                if asked[call_id] == 0:
                    problems.append(
                        f"result {call_id} at {at} answers no call of the response before it"
                    )
                elif count > asked[call_id]:
                    problems.append(
                        f"call {call_id} at {at - 1} answered {count} times (made "
                        f"{asked[call_id]} times)"
                    )
    return problems


def assert_provider_valid(messages: Sequence[ModelMessage]) -> None:
    """Fail with the breaches and the history's shape when a provider would reject it."""
    problems = provider_violations(messages)
    assert not problems, "\n".join([*problems, "history:", shape(messages)])


def shape(messages: Sequence[ModelMessage]) -> str:
    """One line per message: its kind and its parts, with tool call ids, for failure output."""
    lines: list[str] = []
    for at, message in enumerate(messages):
        kind = "request " if isinstance(message, ModelRequest) else "response"
        parts: list[str] = []
        for part in message.parts:
            described: str = part.part_kind
            call_id = getattr(part, "tool_call_id", None)
            if call_id is not None and not (
                isinstance(part, RetryPromptPart) and part.tool_name is None
            ):
                described += f"({call_id})"
            parts.append(described)
        state = " interrupted" if getattr(message, "state", None) == "interrupted" else ""
        lines.append(f"{at:4} {kind}{state}: {', '.join(parts) or '-'}")
    return "\n".join(lines)
