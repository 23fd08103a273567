"""Long agentic histories for property tests, built from a small spec.

A ``Spec`` is a seed and a few knobs (how many user turns, tool iterations per turn, parallel
calls, and how often outputs are huge, runs are interrupted and pairing is broken); ``build``
expands it into hundreds of messages. Hypothesis draws and shrinks specs, whose ``repr`` is one
line, so a failing example is printed as a spec to rebuild rather than as a wall of messages.

What a history may hold: system prompt, several user turns, text and thinking, parallel tool
calls, outputs from a few tokens to tens of thousands, retries (``outcome='retried'`` returns and
legacy ``RetryPromptPart``s), the protected ``manage_todo_list`` tool, interrupted runs (calls
left dangling, partly answered, followed by a turn-aborted marker or an interrupted request),
and broken pairing: results arriving late (after the next prompt, response or in a second
request), duplicated, before their call, with unknown ids, and ids reused.
"""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from tests.messages import T0

TOOLS = ("read", "grep", "run", "read", "grep", "manage_todo_list")
WORDS = ("alpha", "beta", "gamma", "delta", "error", "ok", "{", "}", "path/to/file.py", "42")


@dataclass(frozen=True)
class Spec:
    """What ``build`` makes: every random choice comes from ``seed``."""

    seed: int
    turns: int
    iterations: int
    """Most tool iterations in one turn."""
    parallel: int
    """Most calls in one response."""
    huge: int
    """0-3: how often an output is huge."""
    interrupts: int
    """0-3: how often a run is interrupted."""
    broken: int
    """0-3: how often pairing is broken."""

    def __repr__(self) -> str:
        return (
            f"Spec(seed={self.seed}, turns={self.turns}, iterations={self.iterations}, "
            f"parallel={self.parallel}, huge={self.huge}, interrupts={self.interrupts}, "
            f"broken={self.broken})"
        )


def _lines(count: int) -> str:
    return "\n".join(
        " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(8)) + f" {i}"
        for i in range(count)
    )


TEXT = _lines(40_000)
"""About 400,000 tokens of code-ish lines; texts are slices of it (cheap to make, all different)."""


def _text(rng: random.Random, tokens: int) -> str:
    """About ``tokens`` tokens of code-ish lines."""
    size = min(len(TEXT) // 2, max(4, tokens * 4))
    start = rng.randrange(len(TEXT) - size)
    return TEXT[start : start + size]


def _output_size(rng: random.Random, huge: int) -> int:
    if rng.random() < 0.02 * huge:
        return rng.randint(3_000, 25_000)
    if rng.random() < 0.15:
        return rng.randint(400, 2_500)
    return rng.randint(2, 300)


def _retry_prompt(call: ToolCallPart) -> RetryPromptPart:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return RetryPromptPart(
            "invalid arguments: field `path` required",
            tool_name=call.tool_name,
            tool_call_id=call.tool_call_id,
            timestamp=T0,
        )


def _return(call: ToolCallPart, content: str, outcome: Any = "success") -> ToolReturnPart:
    return ToolReturnPart(
        call.tool_name, content, tool_call_id=call.tool_call_id, timestamp=T0, outcome=outcome
    )


def call_args(rng: random.Random, next_id: int) -> dict[str, Any]:
    args: dict[str, Any] = {"path": f"f{next_id % 7}.py"}
    if rng.random() < 0.2:
        args["content"] = "\n".join(rng.choices(WORDS, k=rng.randint(40, 600)))
    return args


def build(spec: Spec) -> list[ModelMessage]:
    """The history ``spec`` stands for (the same messages, as new objects, on every call)."""
    rng = random.Random(spec.seed)
    broken = 0.025 * spec.broken
    history: list[ModelMessage] = []
    next_id = 0
    used: list[str] = []
    late: list[ToolReturnPart | RetryPromptPart] = []

    def new_id() -> str:
        nonlocal next_id
        if used and rng.random() < broken / 3:
            return rng.choice(used)  # a reused id
        next_id += 1
        used.append(f"c{next_id}")
        return used[-1]

    def deliver_late(extra: list[Any]) -> None:
        """Put some results held back into a request (with ``extra`` parts)."""
        if late:
            rng.shuffle(late)
            count = rng.randint(1, len(late))
            history.append(ModelRequest(parts=[*late[:count], *extra]))
            del late[:count]
        elif extra:
            history.append(ModelRequest(parts=extra))

    aborted = False
    for turn in range(spec.turns):
        parts: list[Any] = []
        if turn == 0 and rng.random() < 0.7:
            parts.append(SystemPromptPart("You are careful. " * rng.randint(1, 30), timestamp=T0))
        if aborted and rng.random() < 0.5:
            parts.append(
                UserPromptPart("<turn_aborted>user pressed stop</turn_aborted>", timestamp=T0)
            )
        size = rng.randint(300, 3_000) if rng.random() < 0.05 else rng.randint(1, 60)
        parts.append(UserPromptPart(f"task {turn}: " + _text(rng, size), timestamp=T0))
        aborted = False
        if late and rng.random() < 0.3:
            parts[:0] = late  # results of an earlier turn arriving with the next prompt
            late.clear()
        history.append(ModelRequest(parts=parts))
        # Most turns run long; some stop early.
        low = 0 if rng.random() < 0.3 else spec.iterations // 2
        for _ in range(rng.randint(low, spec.iterations)):
            lead: list[Any] = []
            if rng.random() < 0.2:
                lead.append(ThinkingPart("let me see " * rng.randint(1, 20)))
            if rng.random() < 0.4:
                lead.append(TextPart("next step " * rng.randint(1, 15)))
            calls = [
                # Paths recur: a read of one supersedes an older read (``Dedupe.keys``); a call
                # in five carries a long value (a file written in full).
                ToolCallPart(rng.choice(TOOLS), call_args(rng, next_id), tool_call_id=new_id())
                for _ in range(rng.randint(1, spec.parallel))
            ]
            if rng.random() < broken / 2:
                # A result for the next call, before it.
                early = ToolCallPart("read", {}, tool_call_id=f"c{next_id + 1}")
                history.append(ModelRequest(parts=[_return(early, "too early")]))
            history.append(ModelResponse(parts=[*lead, *calls], timestamp=T0))
            if rng.random() < 0.03 * spec.interrupts:
                # Interrupted: some calls answered, the run stopped.
                answered = [_return(c, "partial") for c in calls if rng.random() < 0.4]
                if answered or rng.random() < 0.5:
                    history.append(ModelRequest(parts=answered, state="interrupted"))
                aborted = True
                break
            results: list[Any] = []
            for call in calls:
                fate = rng.random()
                if fate < broken:
                    continue  # never answered
                if fate < 3 * broken:
                    late.append(_return(call, _text(rng, _output_size(rng, spec.huge))))
                    continue
                if fate < 3 * broken + 0.05:
                    results.append(_retry_prompt(call))
                elif fate < 3 * broken + 0.1:
                    results.append(_return(call, "error: not found", "retried"))
                else:
                    results.append(_return(call, _text(rng, _output_size(rng, spec.huge))))
                if rng.random() < broken / 2:
                    results.append(_return(call, "a duplicate"))
            if rng.random() < broken / 2:
                results.append(_return(ToolCallPart("read", {}, tool_call_id="unknown"), "lost"))
            if results:
                history.append(ModelRequest(parts=results))
            if late and rng.random() < 0.3:
                deliver_late([])
        if aborted:
            continue
        if rng.random() < 0.75:
            history.append(
                ModelResponse(parts=[TextPart(_text(rng, rng.randint(3, 200)))], timestamp=T0)
            )
        if late and rng.random() < 0.3:
            deliver_late([])
    if rng.random() < 0.2:
        # The run stopped at the frontier: the newest calls have no results yet.
        calls = [ToolCallPart("read", {}, tool_call_id=new_id()) for _ in range(2)]
        history.append(ModelResponse(parts=calls, timestamp=T0))
    if late and rng.random() < 0.5:
        deliver_late([])
    return history


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    """Long histories: mostly hundreds of messages (up to about a thousand)."""
    return Spec(
        seed=draw(st.integers(0, (1 << 32) - 1)),
        # Half the examples long by construction; the others may shrink to a few turns.
        turns=draw(st.one_of(st.integers(2, 40), st.integers(20, 40))),
        iterations=draw(st.one_of(st.integers(1, 16), st.integers(8, 16))),
        parallel=draw(st.integers(1, 4)),
        huge=draw(st.integers(0, 3)),
        interrupts=draw(st.integers(0, 3)),
        broken=draw(st.integers(0, 3)),
    )
