"""ContextReport: what governance did to a history, in a shape the dashboard and API draw as is."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Zone = Literal["head", "middle", "tail", "pinned"]
Action = Literal["kept", "truncated", "masked", "deduplicated", "evicted", "dropped", "synthesized"]
StepName = Literal[
    "normalize", "evict", "truncate", "mask", "window", "drop_groups", "dedupe", "shrink"
]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class PartReport(_Model):
    """One part of a message: what happened to it and its tokens before and after."""

    part_kind: str
    tool_name: str | None = None
    action: Action
    tokens_before: int
    tokens_after: int
    ref: str | None = None
    """The eviction reference, when the part was evicted."""


class MessageReport(_Model):
    """One message: its input index (None for a message governance added), zone and parts."""

    index: int | None
    kind: Literal["request", "response"]
    zone: Zone
    kept: bool
    tokens_before: int
    tokens_after: int
    parts: list[PartReport]


class StepReport(_Model):
    """One step that ran: how many parts it changed and the tokens that removed."""

    step: StepName
    parts: int
    tokens_removed: int
    detail: str = ""


class ContextReport(_Model):
    """The budget, the tokens before and after, and the fate of every message and part.

    ``budget_tokens`` is what the history may take: the window minus system prompt and
    instructions, tool definitions, reserved output and the safety margin, optionally capped.
    ``tokens_before`` and ``tokens_after`` count everything sent (system prompt and
    instructions included), so ``tokens_after == count_tokens(governed.messages)``; the history
    fits when ``tokens_after - system_tokens <= budget_tokens``.
    """

    model: str | None
    encoding: str
    exact: bool
    window_tokens: int
    system_tokens: int
    tool_definition_tokens: int
    reserved_output_tokens: int
    safety_margin_tokens: int
    history_cap_tokens: int | None
    budget_tokens: int
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    fits: bool
    reason: str | None = None
    steps: list[StepReport]
    messages: list[MessageReport]
    evicted_refs: list[str]

    @property
    def history_tokens_after(self) -> int:
        """Tokens of the governed history, system prompt and instructions excluded."""
        return self.tokens_after - self.system_tokens
