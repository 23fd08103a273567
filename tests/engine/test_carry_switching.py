"""What a Governor carries between calls is never served across a change of pins, nor the
memos shared by Governors of other policies and models.

The hub may change a session's policy or model between two requests, and two agents may share
one history list: a continued Governor must still send what a rebuilt one sends.
"""

from __future__ import annotations

from engine_builders import MODEL, continued_and_rebuilt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage
from test_properties import histories, policies

from ctxhub.governance import Governed, Governor, Policy

OTHER_MODEL = "openai:gpt-4"  # another encoding (cl100k) and window


def _same(warm: Governed, cold: Governed) -> None:
    assert warm.messages == cold.messages
    assert warm.report.model_dump() == cold.report.model_dump()
    assert warm.evicted == cold.evicted


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=histories(), first=policies(), second=policies(), data=st.data())
def test_switching_policy_model_and_pins_on_a_growing_history_matches_rebuilt_governors(
    stream: list[ModelMessage], first: Policy, second: Policy, data: st.DataObject
) -> None:
    # One Governor per policy and model, as a caller keeps them; the memos of counts and
    # governed versions are shared by all of them.
    governors: dict[tuple[int, str], Governor] = {}
    history: list[ModelMessage] = []
    for message in stream:
        history.append(message)
        choice = data.draw(st.sampled_from([0, 1]))
        model = data.draw(st.sampled_from([MODEL, OTHER_MODEL]))
        pinned = frozenset(data.draw(st.sets(st.integers(0, len(history) - 1), max_size=1)))
        governor = governors.setdefault(
            (choice, model), Governor((first, second)[choice], model=model)
        )
        warm, cold = continued_and_rebuilt(governor, history, pinned=pinned)
        _same(warm, cold)
