"""Random histories whose tool calls carry large arguments: the engine's invariants still hold,
governing the output again changes nothing, and stored, warm and cold histories govern alike."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from engine_builders import MODEL, continued_and_rebuilt
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from report_oracle import reference_report
from test_properties import _summary, assert_history_invariants, histories, policies
from test_stored import LazyRecorder, _allowed, _same, stored

from ctxhub.governance import Governor, Policy, count_tokens, govern

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", '"quoted"']


@st.composite
def _args(draw: st.DrawFn) -> dict[str, Any] | str:
    lines = draw(st.integers(1, 600))
    seed = draw(st.integers(0, len(WORDS) - 1))
    content = "\n".join(
        " ".join(WORDS[(seed + i + j) % len(WORDS)] for j in range(6)) for i in range(lines)
    )
    args = {"path": f"src/file_{seed}.py", "content": content, "append": draw(st.booleans())}
    form = draw(st.sampled_from(["dict", "dict", "json", "invalid"]))
    if form == "dict":
        return args
    if form == "json":
        return json.dumps(args)
    return json.dumps(args)[:-3]  # cut short: not JSON


@st.composite
def call_histories(draw: st.DrawFn) -> list[ModelMessage]:
    """Random histories in which some tool calls write a file of any size."""
    history: list[ModelMessage] = []
    for message in draw(histories()):
        if isinstance(message, ModelResponse):
            parts = [
                dataclasses.replace(part, args=draw(_args()))
                if type(part) is ToolCallPart and draw(st.booleans())
                else part
                for part in message.parts
            ]
            message = dataclasses.replace(message, parts=parts)
        history.append(message)
    return history


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=call_histories(), policy=policies(), data=st.data())
def test_invariants_and_idempotence_hold_with_large_arguments(
    history: list[ModelMessage], policy: Policy, data: st.DataObject
) -> None:
    pinnable = [i for i, m in enumerate(history) if isinstance(m, ModelResponse)]
    pins = (
        frozenset(data.draw(st.lists(st.sampled_from(pinnable), max_size=2)))
        if pinnable
        else frozenset()
    )
    snapshot = copy.deepcopy(history)
    governed = govern(history, policy, model=MODEL, pinned=pins)
    out = governed.messages
    assert history == snapshot
    assert_history_invariants(history, out, pins)
    assert governed.report.tokens_after == count_tokens(out, model=MODEL)
    assert governed.report.model_dump() == reference_report(governed, history)
    # Every call keeps its name, id, arguments' type and keys, and its short values.
    calls = {p.tool_call_id: p for m in history for p in m.parts if isinstance(p, ToolCallPart)}
    for message in out:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                original = calls[part.tool_call_id]
                assert part.tool_name == original.tool_name
                assert type(part.args) is type(original.args)
                before, after = original.args_as_dict(), part.args_as_dict()
                assert list(after) == list(before)
                assert after.get("path") == before.get("path")
                assert after.get("append") == before.get("append")
    pinned_parts = {id(p) for i in pins for p in history[i].parts}
    again_pins = frozenset(j for j, m in enumerate(out) if pinned_parts & {id(p) for p in m.parts})
    again = govern(out, policy, model=MODEL, pinned=again_pins)
    if governed.report.fits:
        note(_summary(governed))
        note(_summary(again))
        assert again.messages == out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=call_histories(), policy=policies())
def test_a_stored_history_with_large_arguments_governs_as_its_messages(
    history: list[ModelMessage], policy: Policy
) -> None:
    facts = [stored(m) for m in history]
    lazy = LazyRecorder(copy.deepcopy(history))
    governed = govern(lazy, policy, model=MODEL, facts=facts)
    cold = govern(history, policy, model=MODEL)
    _same(governed, cold)
    allowed = _allowed(governed, facts, None)
    assert lazy.read <= allowed, sorted(lazy.read - allowed)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=call_histories(), policy=policies(), data=st.data())
def test_a_growing_history_with_large_arguments_governs_as_a_rebuilt_governor_would(
    stream: list[ModelMessage], policy: Policy, data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(stream)))
    governor = Governor(policy, model=MODEL)
    for size in range(start, len(stream) + 1):
        warm, cold = continued_and_rebuilt(governor, stream[:size])
        _same(warm, cold)
