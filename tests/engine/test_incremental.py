"""What a ``Governor`` carries from one call to the next never changes its answer.

An agent governs the same history plus a message or two before every request, so its Governor
extends what it learnt about the previous history (facts, tool-call pairing, instructions)
instead of reading every message again. These tests grow histories by random appends, with
shrinks, edits and reorders in between, and compare every call with that of a Governor rebuilt
from the same state on a deep copy (new objects: no cache keyed by identity and no carried
work can apply to it).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any
from unittest import mock

from engine_builders import MODEL, rebuilt, reports_carried
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from test_properties import histories, policies

from ctxhub.governance import Governed, Governor, Policy, govern
from ctxhub.governance.caches import memory
from ctxhub.governance.prepare import EDITABLE
from ctxhub.governance.tokens import Tokenizer
from tests.messages import T0

OPERATIONS = (
    "append",
    "append",
    "append",
    "append_many",
    "instructions",
    "shrink",
    "edit",
    "swap",
    "parts",
)


def _same(warm: Governed, cold: Governed) -> None:
    assert warm.messages == cold.messages
    assert warm.report.model_dump() == cold.report.model_dump()
    assert list(warm.evicted.items()) == list(cold.evicted.items())
    assert (warm.fits, warm.tokens_before, warm.tokens_after, warm.acted) == (
        cold.fits,
        cold.tokens_before,
        cold.tokens_after,
        cold.acted,
    )


def _edited(message: ModelMessage) -> ModelMessage:
    """A copy of a message with its first part's text changed (a new object)."""
    if isinstance(message, ModelRequest):
        return dataclasses.replace(
            message, parts=[*message.parts, UserPromptPart("an edit", timestamp=T0)]
        )
    assert isinstance(message, ModelResponse)
    return dataclasses.replace(message, parts=list(message.parts)[:-1] or list(message.parts))


def _step(
    history: list[ModelMessage], pool: list[ModelMessage], operation: str, data: st.DataObject
) -> tuple[list[ModelMessage], bool]:
    """The history after one operation, and whether it only appended."""
    if operation == "append" and pool:
        return [*history, pool.pop(0)], True
    if operation == "append_many" and pool:
        count = data.draw(st.integers(1, 4))
        added, pool[:] = pool[:count], pool[count:]
        return [*history, *added], True
    if operation == "instructions":
        text = data.draw(st.sampled_from(["Be brief.", "Answer in French. " * 40]))
        request = ModelRequest(parts=[UserPromptPart("and now?", timestamp=T0)], instructions=text)
        return [*history, request], True
    if operation == "shrink" and len(history) > 1:
        return history[: data.draw(st.integers(1, len(history) - 1))], False
    if operation == "edit" and history:
        at = data.draw(st.integers(0, len(history) - 1))
        return [*history[:at], _edited(history[at]), *history[at + 1 :]], False
    if operation == "swap" and len(history) > 1:
        i, j = data.draw(st.lists(st.integers(0, len(history) - 1), min_size=2, max_size=2))
        changed = list(history)
        changed[i], changed[j] = changed[j], changed[i]
        return changed, False
    if operation == "parts" and history:
        # The same message object, its parts list replaced in place by one as long: one of the
        # last messages, as an agent run edits its latest request (older messages are values,
        # changed by replacing them: "edit").
        lowest = max(len(history) - EDITABLE, 0)
        at = data.draw(st.integers(lowest, len(history) - 1))
        message = history[at]
        last: Any = (
            UserPromptPart("replaced " * 30, timestamp=T0)
            if isinstance(message, ModelRequest)
            else TextPart("replaced " * 30)
        )
        message.parts = [*message.parts[:-1], last] if message.parts else []
        return list(history), False
    return list(history), False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=histories(), policy=policies(), data=st.data())
def test_a_growing_history_governs_as_a_rebuilt_governor_would(
    stream: list[ModelMessage], policy: Policy, data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(stream)))
    governor = Governor(policy, model=MODEL)
    history, pool = stream[:start], stream[start:]
    operations = data.draw(st.lists(st.sampled_from(OPERATIONS), min_size=1, max_size=12))
    previous: Governed | None = None
    for operation in operations:
        if previous is not None:
            history, appended = _step(history, pool, operation, data)
        else:
            appended = False
        pins = frozenset(data.draw(st.sets(st.integers(0, max(len(history) - 1, 0)), max_size=1)))
        pins = pins if history else frozenset()
        twin = rebuilt(governor)
        warm = governor.govern(history, pinned=pins)
        if appended and previous is not None:
            # The call extended the previous history instead of starting over: a message sent
            # whole and reported as before keeps its report.
            alike, reused = reports_carried(previous, warm)
            assert reused == alike
        cold = twin.govern(copy.deepcopy(history), pinned=pins)
        _same(warm, cold)
        previous = warm


def test_governing_again_after_a_cold_copy_still_extends() -> None:
    # Two histories are remembered, so governing another session in between (here a copy)
    # does not throw away what was learnt about this one.
    policy = Policy(context_window=4_000, reserved_output_tokens=0)
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(f"task {n} " * 50, timestamp=T0)]) for n in range(30)
    ]
    governor = Governor(policy, model=MODEL)
    first = governor.govern(history)
    governor.govern(copy.deepcopy(history))
    history = [*history, ModelRequest(parts=[UserPromptPart("one more", timestamp=T0)])]
    twin = rebuilt(governor)
    warm = governor.govern(history)
    alike, reused = reports_carried(first, warm)
    assert reused == alike > 20
    _same(warm, twin.govern(copy.deepcopy(history)))


def test_a_latest_message_edited_in_place_is_not_served_stale() -> None:
    # An agent run edits its latest request in place (instructions, capability parts).
    policy = Policy(context_window=4_000, reserved_output_tokens=0)
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(f"task {n} " * 50, timestamp=T0)]) for n in range(30)
    ]
    governor = Governor(policy, model=MODEL)
    before = governor.govern(history)
    history[-1].parts.append(UserPromptPart("grown " * 400, timestamp=T0))
    twin = rebuilt(governor)
    after = governor.govern(history)
    # Started over: not one report is taken from the call before, though most read the same.
    alike, reused = reports_carried(before, after)
    assert (alike > 20, reused) == (True, 0)
    assert after.tokens_before > before.tokens_before
    _same(after, twin.govern(copy.deepcopy(history)))
    history[-5].parts = [UserPromptPart("replaced", timestamp=T0)]
    twin = rebuilt(governor)
    again = governor.govern(history)
    alike, reused = reports_carried(after, again)
    assert (alike > 20, reused) == (True, 0)
    assert again.tokens_before < after.tokens_before
    assert again.acted == "edited"
    _same(again, twin.govern(copy.deepcopy(history)))


def test_an_older_message_replaced_is_a_new_start() -> None:
    policy = Policy(context_window=4_000, reserved_output_tokens=0)
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(f"task {n} " * 50, timestamp=T0)]) for n in range(30)
    ]
    governor = Governor(policy, model=MODEL)
    governor.govern(history)
    history[3] = ModelRequest(parts=[UserPromptPart("grown " * 400, timestamp=T0)])
    twin = rebuilt(governor)
    after = governor.govern(history)
    assert after.acted == "edited"
    _same(after, twin.govern(copy.deepcopy(history)))
    assert after.messages == govern(copy.deepcopy(history), policy, model=MODEL).messages


def _parallel_session(turns: int) -> list[ModelMessage]:
    """Turns of a user request, two rounds of two parallel calls each (after long thoughts),
    and a long answer."""
    history: list[ModelMessage] = []
    for turn in range(turns):
        history.append(ModelRequest(parts=[UserPromptPart(f"task {turn}", timestamp=T0)]))
        for round_ in range(2):
            ids = [f"t{turn}r{round_}c{n}" for n in range(2)]
            history.append(
                ModelResponse(
                    parts=[
                        TextPart(f"thinking about {turn} " * 300),
                        *(
                            ToolCallPart("read", {"n": n}, tool_call_id=i)
                            for n, i in enumerate(ids)
                        ),
                    ],
                    timestamp=T0,
                )
            )
            history.append(
                ModelRequest(
                    parts=[
                        ToolReturnPart(
                            "read", f"line {turn} {n}\n" * 200, tool_call_id=i, timestamp=T0
                        )
                        for n, i in enumerate(ids)
                    ]
                )
            )
        history.append(ModelResponse(parts=[TextPart(f"done {turn} " * 300)], timestamp=T0))
    return history


def test_masked_versions_carried_over_match_cold_ones() -> None:
    # Every result but the first and the last is masked, so as the history grows the masked
    # span's end moves through messages holding two results each: a message once at the end
    # of the span (one of its results masked) is later inside it (both masked). Long texts
    # are truncated only once their turn is over, so a message's governed version also
    # changes when a new turn starts.
    # Without hysteresis, so the span moves on every call.
    policy = Policy.model_validate(
        {
            "masking": {"keep_first": 1, "keep_last": 1, "apply": "always"},
            "text": {"limit": 100},
            "window": {"enabled": False},
            "hysteresis": {"enabled": False},
        }
    )
    session = _parallel_session(8)
    carried = 0
    governor = Governor(policy, model=MODEL)
    previous: Governed | None = None
    for size in range(1, len(session) + 1):
        twin = rebuilt(governor)
        warm = governor.govern(session[:size])
        if previous is not None:
            # Each call extends the one before: what it reports as before is taken over.
            alike, reused = reports_carried(previous, warm)
            assert reused == alike
            carried += reused > 0
        _same(warm, twin.govern(copy.deepcopy(session[:size])))
        previous = warm
    assert carried > len(session) // 2


def test_an_output_truncated_once_its_turn_is_over_reuses_its_token_ids() -> None:
    # Truncation scope "older" leaves the current turn's outputs whole; the call after the next
    # user request truncates them from the ids kept when they were counted, calls earlier.
    # Without hysteresis, which would leave the output whole until its next action.
    policy = Policy.model_validate(
        {
            "tool_output": {"limit": 200},
            "window": {"enabled": False},
            "hysteresis": {"enabled": False},
        }
    )
    governor = Governor(policy, model=MODEL)
    output = "".join(f"row {n}: value {n * 7}\n" for n in range(600))
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("read it", timestamp=T0)]),
        ModelResponse(parts=[ToolCallPart("read", {}, tool_call_id="c1")], timestamp=T0),
        ModelRequest(parts=[ToolReturnPart("read", output, tool_call_id="c1", timestamp=T0)]),
    ]
    current = governor.govern(history)
    assert current.messages[2].parts[0].content == output  # type: ignore[union-attr]
    history = [
        *history,
        ModelResponse(parts=[TextPart("read")], timestamp=T0),
        ModelRequest(parts=[UserPromptPart("next", timestamp=T0)]),
    ]
    encoded: list[str] = []
    encode = Tokenizer.encode

    def spy(self: Tokenizer, text: str) -> list[int] | None:
        encoded.append(text)
        return encode(self, text)

    twin = rebuilt(governor)
    with mock.patch.object(Tokenizer, "encode", spy):
        warm = governor.govern(history)
    assert output not in encoded
    assert warm.messages[2].parts[0].content != output  # type: ignore[union-attr]
    _same(warm, twin.govern(copy.deepcopy(history)))


def test_clearing_the_memos_forgets_them_and_changes_no_result() -> None:
    policy = Policy(context_window=4_000, reserved_output_tokens=0)
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(f"task {n} " * 50, timestamp=T0)]) for n in range(30)
    ]
    warm = govern(history, policy, model=MODEL)
    remembered = (memory.messages, memory.parts, memory.cap_keys)
    assert all(map(len, remembered))
    memory.clear()
    assert not any(map(len, (*remembered, memory.cap_keys_by_policy)))
    _same(warm, govern(history, policy, model=MODEL))


def test_a_report_read_after_its_history_grew_and_branched_is_that_of_a_cold_call() -> None:
    """Governing a history grown, and another branch of it, must not change what the earlier
    result reports: parts of the report's bookkeeping grow in place with the history."""
    policy = Policy(context_window=2_500, reserved_output_tokens=0)
    history: list[ModelMessage] = []
    for n in range(12):
        history += [
            ModelRequest(parts=[UserPromptPart(f"task {n} " * 40, timestamp=T0)]),
            ModelResponse(parts=[TextPart(f"done {n} " * 30)], timestamp=T0),
        ]
    governor = Governor(policy, model=MODEL)
    first = governor.govern(history)
    assert any(step.step == "window" for step in first.report.steps)
    grown = governor.govern([*history, ModelRequest(parts=[UserPromptPart("more " * 60)])])
    branch = [*history, ModelRequest(parts=[UserPromptPart("other " * 90)])]
    twin = rebuilt(governor)
    branched = governor.govern(branch)
    memory.clear()
    _same(first, govern(copy.deepcopy(history), policy, model=MODEL))
    _same(branched, twin.govern(copy.deepcopy(branch)))
    assert grown.report.tokens_before > first.report.tokens_before
