"""State carried between calls is never served across a change of policy, model or pins.

The hub may change a session's policy or model between two requests, and two agents may share
one history list: a warm call must still equal a cold call on a copy.
"""

from __future__ import annotations

import copy

from engine_builders import MODEL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage
from test_properties import histories, policies

from ctxhub.governance import Governed, Policy, govern

OTHER_MODEL = "openai:gpt-4"  # another encoding (cl100k) and window


def _same(warm: Governed, cold: Governed) -> None:
    assert warm.messages == cold.messages
    assert warm.report.model_dump() == cold.report.model_dump()
    assert warm.evicted == cold.evicted


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=histories(), first=policies(), second=policies(), data=st.data())
def test_switching_policy_model_and_pins_on_a_growing_history_matches_cold_calls(
    stream: list[ModelMessage], first: Policy, second: Policy, data: st.DataObject
) -> None:
    history: list[ModelMessage] = []
    for message in stream:
        history.append(message)
        policy = data.draw(st.sampled_from([first, second]))
        model = data.draw(st.sampled_from([MODEL, OTHER_MODEL]))
        pinned = frozenset(data.draw(st.sets(st.integers(0, len(history) - 1), max_size=1)))
        warm = govern(history, policy, model=model, pinned=pinned)
        cold = govern(copy.deepcopy(history), policy, model=model, pinned=pinned)
        _same(warm, cold)
