"""Policies and probes for engine tests (the messages are built with ``tests.messages``)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from unittest import mock

from pydantic_ai.messages import (
    ModelMessage,
)

from ctxhub.governance import Governed, Governor, Policy
from ctxhub.governance.steps.normalize import Pairing

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
