"""Governors in several threads, sharing the memos of counts: each continued Governor still
sends what a rebuilt one sends.

The hub governs from several threads at once (web requests, jobs); the engine's caches are
process-wide, so interleaved calls on different growing histories must never mix them up.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from engine_builders import MODEL, continued_and_rebuilt
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ctxhub.governance import Governor, Policy
from tests.messages import T0

POLICY = Policy(context_window=6_000, reserved_output_tokens=0)


def _session(seed: int, size: int) -> list[ModelMessage]:
    rng = random.Random(seed)
    out: list[ModelMessage] = []
    call = 0
    while len(out) < size:
        out.append(ModelRequest(parts=[UserPromptPart(f"task {seed}.{len(out)}", timestamp=T0)]))
        for _ in range(rng.randint(1, 4)):
            call += 1
            call_id = f"s{seed}c{call}"
            out.append(
                ModelResponse(parts=[ToolCallPart("read", {"n": call}, tool_call_id=call_id)])
            )
            text = f"line {seed} {call}\n" * rng.choice([5, 80, 900])
            out.append(
                ModelRequest(
                    parts=[ToolReturnPart("read", text, tool_call_id=call_id, timestamp=T0)]
                )
            )
        out.append(ModelResponse(parts=[TextPart(f"done {seed}.{call}")]))
    return out[:size]


@pytest.fixture
def busy_switching() -> Iterator[None]:
    # Switch threads as often as possible, so calls interleave inside the engine.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def _grow(seed: int) -> list[str]:
    mismatches = []
    history: list[ModelMessage] = []
    governor = Governor(POLICY, model=MODEL)
    for message in _session(seed, 50):
        history.append(message)
        warm, cold = continued_and_rebuilt(governor, history)
        if warm.messages != cold.messages or warm.report.model_dump() != cold.report.model_dump():
            mismatches.append(f"seed {seed}, {len(history)} messages")
    return mismatches


def test_threads_growing_their_own_histories_get_the_answers_of_rebuilt_governors(
    busy_switching: None,
) -> None:
    with ThreadPoolExecutor(4) as pool:
        mismatches = [m for result in pool.map(_grow, range(4)) for m in result]
    assert mismatches == []
