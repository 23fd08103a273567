"""One-line message builders and small helpers for engine tests."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from unittest import mock

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ctxhub.governance import Policy
from ctxhub.governance.steps.normalize import Pairing

MODEL = "openai:gpt-4o"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _user(text: str, *, system: str | None = None) -> ModelRequest:
    parts: list[Any] = [SystemPromptPart(system, timestamp=T0)] if system else []
    return ModelRequest(parts=[*parts, UserPromptPart(text, timestamp=T0)])


def _text(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)], timestamp=T0)


def _call(name: str, *, id: str, **args: Any) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args or {}, tool_call_id=id)], timestamp=T0)


def _calls(*pairs: tuple[str, str]) -> ModelResponse:
    return ModelResponse(
        parts=[ToolCallPart(name, {}, tool_call_id=cid) for name, cid in pairs], timestamp=T0
    )


def _ret(name: str, content: Any, *, id: str) -> ModelRequest:
    return ModelRequest(parts=[ToolReturnPart(name, content, tool_call_id=id, timestamp=T0)])


def _rets(*triples: tuple[str, Any, str]) -> ModelRequest:
    return ModelRequest(
        parts=[ToolReturnPart(n, c, tool_call_id=i, timestamp=T0) for n, c, i in triples]
    )


def _words(n: int, word: str = "alpha") -> str:
    """About ``n`` tokens of text (one token per word), spread over lines of ten words."""
    return "\n".join(" ".join([word] * 10) for _ in range(max(1, n // 10)))


def _tight(size: int, **overrides: Any) -> Policy:
    """A policy whose budget is exactly ``size`` minus the system prompt and instructions."""
    return Policy.model_validate(
        {"context_window": size, "reserved_output_tokens": 0, "safety_margin": 0, **overrides}
    )


def _off(**overrides: Any) -> dict[str, Any]:
    """Policy fields turning every optional mechanism off, then ``overrides``."""
    base: dict[str, Any] = {
        "tool_output": {"limit": None},
        "text": {"limit": None},
        "eviction": {"threshold_tokens": None},
        "masking": {"keep_first": 0, "keep_last": 0},
        "window": {"enabled": False},
        "drop_groups": False,
        "shrink_newest": False,
    }
    base.update(overrides)
    return base


def _contents(messages: list[ModelMessage]) -> list[Any]:
    return [getattr(p, "content", None) for m in messages for p in m.parts]


@contextmanager
def carried_lengths() -> Iterator[list[int]]:
    """How many messages the pairing each ``govern`` call started from had already seen: 0
    when it started over, the previous history's length when it extended that one."""
    seen: list[int] = []
    extended = Pairing.extended

    def spy(self: Pairing, facts: Sequence[Any], *, in_place: bool = False) -> Pairing:
        seen.append(self.length)
        return extended(self, facts, in_place=in_place)

    with mock.patch.object(Pairing, "extended", spy):
        yield seen
