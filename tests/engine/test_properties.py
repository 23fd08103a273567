"""Property-based: the invariants of ARCHITECTURE.md hold over random agentic histories.

Histories mix parallel tool calls, retried calls, interrupted turns (dangling calls), orphan
results, huge outputs and system prompts; policies vary budget and every mechanism.
"""

from __future__ import annotations

import copy
from typing import Any

from engine_builders import MODEL, T0
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
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

from ctxhub.governance import Policy, count_tokens, govern
from ctxhub.governance.steps.normalize import pairing_problems

WORDS = ["alpha", "beta", "gamma", "delta", "error", "ok", "{", "}", "path/to/file.py"]


@st.composite
def _output(draw: st.DrawFn) -> str:
    huge = draw(st.integers(0, 9)) == 0
    n = draw(st.integers(1500, 5000) if huge else st.integers(1, 120))
    seed = draw(st.integers(0, len(WORDS) - 1))
    return "\n".join(
        " ".join(WORDS[(seed + i + j) % len(WORDS)] for j in range(8)) for i in range(n // 8 + 1)
    )


@st.composite
def histories(draw: st.DrawFn) -> list[ModelMessage]:
    history: list[ModelMessage] = []
    ids = iter(range(10_000))
    for turn in range(draw(st.integers(1, 7))):
        parts: list[Any] = []
        if turn == 0 and draw(st.booleans()):
            parts.append(SystemPromptPart("You are careful.", timestamp=T0))
        parts.append(
            UserPromptPart(f"task {turn}: " + "please " * draw(st.integers(0, 40)), timestamp=T0)
        )
        history.append(ModelRequest(parts=parts))
        for _ in range(draw(st.integers(0, 4))):
            calls = [
                ToolCallPart(
                    draw(st.sampled_from(["read", "grep", "manage_todo_list"])),
                    {"n": 1},
                    tool_call_id=f"c{next(ids)}",
                )
                for _ in range(draw(st.integers(1, 3)))
            ]
            lead = [TextPart("thinking aloud")] if draw(st.booleans()) else []
            history.append(ModelResponse(parts=[*lead, *calls], timestamp=T0))
            if draw(st.integers(0, 6)) == 0:
                break  # interrupted: the calls dangle
            returns: list[Any] = []
            for call in calls:
                fate = draw(st.integers(0, 9))
                if fate == 0:
                    continue  # one parallel result missing
                outcome = "retried" if fate == 1 else "success"
                returns.append(
                    ToolReturnPart(
                        call.tool_name,
                        draw(_output()),
                        tool_call_id=call.tool_call_id,
                        timestamp=T0,
                        outcome=outcome,
                    )
                )
            if draw(st.integers(0, 8)) == 0:
                returns.append(ToolReturnPart("read", "stale", tool_call_id="orphan", timestamp=T0))
            if returns:
                history.append(ModelRequest(parts=returns))
        if draw(st.booleans()):
            history.append(
                ModelResponse(parts=[TextPart("done " * draw(st.integers(1, 30)))], timestamp=T0)
            )
    return history


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    return Policy.model_validate(
        {
            "context_window": draw(st.integers(300, 30_000)),
            "reserved_output_tokens": 0,
            "safety_margin": draw(st.sampled_from([0, 0.1])),
            "tool_output": {
                "limit": draw(st.sampled_from([None, 200, 2000])),
                "strategy": draw(st.sampled_from(["head", "tail", "both"])),
                "scope": draw(st.sampled_from(["older", "all"])),
            },
            "text": {"limit": draw(st.sampled_from([None, 100]))},
            "eviction": {
                "threshold_tokens": draw(st.sampled_from([None, 3000])),
                "preview_chars": 300,
            },
            "masking": {
                "keep_first": draw(st.integers(0, 2)),
                "keep_last": draw(st.integers(0, 3)),
                "apply": draw(st.sampled_from(["always", "over_budget"])),
            },
            "window": {
                "enabled": draw(st.booleans()),
                "triggers": draw(st.sampled_from([[], [{"kind": "messages", "value": 12}]])),
                "keep": draw(st.sampled_from([None, {"kind": "messages", "value": 6}])),
            },
            "drop_groups": draw(st.booleans()),
            "shrink_newest": draw(st.booleans()),
        }
    )


def _latest_prompt(history: list[ModelMessage]) -> UserPromptPart | None:
    for message in reversed(history):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    return part
    return None


def assert_history_invariants(
    history: list[ModelMessage], out: list[ModelMessage], pins: frozenset[int]
) -> None:
    """ARCHITECTURE.md's invariants of any governed or compacted output: no orphaned call or
    result; the system prompt, pinned messages and the newest user request survive."""
    assert pairing_problems(out) == []
    out_parts = {id(p) for m in out for p in m.parts}
    system_parts = [p for m in history for p in m.parts if isinstance(p, SystemPromptPart)]
    assert all(id(p) in out_parts for p in system_parts)
    latest = _latest_prompt(history)
    assert latest is None or id(latest) in out_parts
    # Pair repair may add a synthetic result to a pinned request, so compare parts.
    assert all(id(p) in out_parts for i in pins for p in history[i].parts)


def _summary(governed: Any) -> str:
    report = governed.report
    lines = [f"{s.step}: {s.detail} ({s.tokens_removed})" for s in report.steps]
    for m in report.messages:
        parts = ", ".join(
            f"{p.part_kind}/{p.tool_name}/{p.action}/{p.tokens_after}" for p in m.parts
        )
        lines.append(f"{m.index} {m.kind} {m.zone} kept={m.kept} {m.tokens_after}: {parts}")
    return "\n".join(lines)


def _is_pinnable(message: ModelMessage) -> bool:
    return not any(isinstance(p, ToolReturnPart) for p in message.parts)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), policy=policies(), data=st.data())
def test_invariants_hold(history: list[ModelMessage], policy: Policy, data: st.DataObject) -> None:
    pinnable = [i for i, m in enumerate(history) if _is_pinnable(m)]
    pins = (
        frozenset(data.draw(st.lists(st.sampled_from(pinnable), max_size=2)))
        if pinnable
        else frozenset()
    )
    snapshot = copy.deepcopy(history)

    governed = govern(history, policy, model=MODEL, pinned=pins)
    out = governed.messages
    report = governed.report

    assert history == snapshot  # input never mutated
    assert_history_invariants(history, out, pins)
    assert report.tokens_before == count_tokens(history, model=MODEL)
    assert report.tokens_after == count_tokens(out, model=MODEL)
    assert sum(m.tokens_after for m in report.messages) == report.tokens_after
    assert [m.index for m in report.messages if m.index is not None] == list(range(len(history)))
    if report.fits:
        assert report.tokens_after - report.system_tokens <= report.budget_tokens
    else:
        assert report.reason

    pinned_parts = {id(p) for i in pins for p in history[i].parts}
    again_pins = frozenset(j for j, m in enumerate(out) if pinned_parts & {id(p) for p in m.parts})
    again = govern(out, policy, model=MODEL, pinned=again_pins)
    if report.fits:
        note(_summary(governed))
        note(_summary(again))
        assert again.messages == out  # idempotent


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), window=st.integers(2_000, 30_000))
def test_budget_is_met_when_the_untouchable_part_fits(
    history: list[ModelMessage], window: int
) -> None:
    # Protected tools' outputs are never reduced, so they could make any budget impossible.
    policy = Policy.model_validate(
        {
            "context_window": window,
            "reserved_output_tokens": 0,
            "safety_margin": 0,
            "window": {"protected_tools": []},
        }
    )
    latest = next(
        (
            m
            for m in reversed(history)
            if isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts)
        ),
        None,
    )
    untouchable = [m for m in history if any(isinstance(p, SystemPromptPart) for p in m.parts)]
    if latest is not None:
        untouchable.append(latest)
    floor = count_tokens(untouchable, model=MODEL)
    governed = govern(history, policy, model=MODEL)
    note(_summary(governed))
    # The newest iteration group keeps at most 3 calls, each shrinkable to a small floor.
    if window >= floor + 1_500:
        assert governed.fits, governed.report.reason
