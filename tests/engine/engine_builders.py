"""Policies and probes for engine tests (the messages are built with ``tests.messages``)."""

from __future__ import annotations

import copy
import json
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
)

from ctxhub.governance import Governed, Governor, MessageReport, Policy

MODEL = "openai:gpt-4o"


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
        "masking": {"apply": "never"},
        "window": {"enabled": False},
        "drop_groups": False,
        "shrink_newest": False,
    }
    base.update(overrides)
    return base


def _contents(messages: list[ModelMessage]) -> list[Any]:
    return [getattr(p, "content", None) for m in messages for p in m.parts]


def reports_carried(before: Governed, after: Governed) -> tuple[int, int]:
    """Of the input messages ``after`` reports as ``before`` did, sent whole or left out by the
    window: how many there are, and how many of ``after``'s reports of them are ``before``'s own
    objects.

    A Governor governing a history that extends the one it governed last (the same messages,
    new ones appended) takes over what it worked out for it, the message reports too: a message
    reported as before keeps its report. A call that starts over builds every report afresh.
    ``before``'s report must be read before ``after``'s (it is read here first if it was not).

    Requests holding only tool results are left out when dropped: pair repair may have emptied
    one, and such a request is reported afresh on every call.
    """
    earlier = {m.index: m for m in before.report.messages if m.index is not None}
    alike = reused = 0
    for message in after.report.messages:
        old = earlier.get(message.index) if message.index is not None else None
        if old is None or old != message or not _whole_or_windowed(message):
            continue
        alike += 1
        reused += message is old
    return alike, reused


def _whole_or_windowed(message: MessageReport) -> bool:
    """Whether a message is sent with every part as it is, or left out by the window (and not
    a request pair repair may have emptied)."""
    actions = {part.action for part in message.parts}
    if message.kept:
        return actions <= {"kept"}
    results = {"tool-return", "retry-prompt"}
    return (
        message.zone == "middle"
        and actions == {"dropped"}
        and (message.kind == "response" or any(p.part_kind not in results for p in message.parts))
    )


def rebuilt(governor: Governor) -> Governor:
    """A Governor continuing from ``governor``'s state through JSON, with nothing cached: as
    another process would."""
    state = json.loads(json.dumps(governor.state()))
    return Governor.from_state(state, governor.policy, model=governor.model)


def continued_and_rebuilt(
    governor: Governor, history: list[ModelMessage], **options: Any
) -> tuple[Governed, Governed]:
    """``history`` governed by ``governor`` (which carries what it worked out before) and by
    a Governor rebuilt from its state, on a copy of the history (so no message is known to
    it): the two must send the same request."""
    twin = rebuilt(governor)
    continued = governor.govern(history, **options)
    cold = twin.govern(copy.deepcopy(history), **options)
    return continued, cold
