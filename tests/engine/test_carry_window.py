"""What a Governor carries from one call to the next on a long history never changes the answer.

A call on a history grown by a message takes over what the previous call worked out: counts
before caps, the governed versions of the masked middle and of the older results after it, a
window walk over that carried run a run at a time, the window's drops as one range. These
tests grow histories long enough for the window to cut on every call (hysteresis off) or to
replay its cut between actions (on), through turns, interrupted calls, evicted and truncated
outputs, a protected tool, pins, group dropping and triggers, and compare every call with that
of a Governor rebuilt from the same state, on new objects.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from engine_builders import MODEL, carried_lengths, rebuilt
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

from ctxhub.governance import Governed, Governor, Policy, govern
from ctxhub.governance._work import Work
from ctxhub.governance.caches import memory
from ctxhub.governance.counting import MessageFacts, message_facts
from ctxhub.governance.steps import window as window_step
from ctxhub.governance.tokens import tokenizer_for
from tests.messages import T0, words

TOOLS = ("read", "grep", "run_tests", "manage_todo_list")


def _session(seed: int, size: int) -> list[ModelMessage]:
    """Turns of a request, one to four iterations of one or two calls (outputs of 20 to 450
    tokens), and an answer; about one turn in eight is interrupted before its results."""
    rng = random.Random(seed)
    out: list[ModelMessage] = [
        ModelRequest(
            parts=[
                SystemPromptPart("You are careful.", timestamp=T0),
                UserPromptPart("start", timestamp=T0),
            ]
        ),
        ModelResponse(parts=[TextPart("ready")], timestamp=T0),
    ]
    call = 0
    turn = 0
    while len(out) < size:
        turn += 1
        out.append(ModelRequest(parts=[UserPromptPart(f"task {turn}", timestamp=T0)]))
        interrupted = rng.random() < 1 / 8
        iterations = rng.randint(1, 4)
        for iteration in range(iterations):
            calls = []
            for _ in range(rng.randint(1, 2)):
                call += 1
                calls.append(ToolCallPart(rng.choice(TOOLS), {"n": call}, tool_call_id=f"c{call}"))
            out.append(ModelResponse(parts=calls, timestamp=T0))
            if interrupted and iteration == iterations - 1:
                break
            out.append(
                ModelRequest(
                    parts=[
                        ToolReturnPart(
                            c.tool_name,
                            words(rng.choice([20, 60, 150, 450]), f"w{c.tool_call_id}"),
                            tool_call_id=c.tool_call_id,
                            timestamp=T0,
                        )
                        for c in calls
                    ]
                )
            )
        else:
            out.append(ModelResponse(parts=[TextPart(f"done {turn}")], timestamp=T0))
    return out[:size]


def _policy(**overrides: Any) -> Policy:
    return Policy.model_validate(
        {
            "context_window": 4_000,
            "reserved_output_tokens": 0,
            "safety_margin": 0,
            "tool_output": {"limit": 200},
            "eviction": {"threshold_tokens": 300, "preview_chars": 60},
            "masking": {"keep_first": 1, "keep_last": 3},
            **overrides,
        }
    )


EVERY_CALL = {"hysteresis": {"enabled": False}}

POLICIES = {
    "budget": _policy(),
    "budget, every call": _policy(**EVERY_CALL),
    "triggers": _policy(
        window={
            "triggers": [{"kind": "messages", "value": 80}],
            "keep": {"kind": "messages", "value": 60},
        }
    ),
    "triggers, every call": _policy(
        window={
            "triggers": [{"kind": "messages", "value": 80}],
            "keep": {"kind": "messages", "value": 60},
        },
        **EVERY_CALL,
    ),
    "groups": _policy(context_window=2_500, drop_groups=True, shrink_newest=True),
    "no-eviction": _policy(eviction={"threshold_tokens": None}, text={"limit": 64}),
}


def _same(warm: Governed, cold: Governed) -> None:
    assert warm.messages == cold.messages
    assert warm.report.model_dump() == cold.report.model_dump()
    assert list(warm.evicted.items()) == list(cold.evicted.items())
    assert (warm.fits, warm.tokens_before, warm.tokens_after, warm.budget_tokens) == (
        cold.fits,
        cold.tokens_before,
        cold.tokens_after,
        cold.budget_tokens,
    )


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_long_history_grown_message_by_message_governs_as_a_rebuilt_governor_would(
    name: str,
) -> None:
    policy = POLICIES[name]
    session = _session(seed=len(name), size=240)
    pins = frozenset({1}) if name == "groups" else frozenset()
    windowed = carried = replayed = 0
    history = session[:180]
    governor = Governor(policy, model=MODEL)
    governor.govern(history, pinned=pins)
    for size in range(181, len(session) + 1):
        history = [*history, session[size - 1]]
        twin = rebuilt(governor)
        with carried_lengths() as seen:
            warm = governor.govern(history, pinned=pins)
        assert seen == [size - 1]
        # The same messages as new objects: no cache or carried work applies to them.
        fresh = _session(seed=len(name), size=size)
        _same(warm, twin.govern(fresh, pinned=pins))
        windowed += warm._work.notice is not None
        carried += warm._work.seeded is not None
        replayed += warm.acted is None
    # The window cut on most calls: with hysteresis, by replaying the last action's cut;
    # without, walking the carried run a run at a time.
    assert windowed > 45
    if policy.hysteresis.enabled:
        assert replayed > 45
    else:
        assert carried > 45


@pytest.mark.parametrize("name", ["budget", "budget, every call"])
def test_a_stored_long_history_grown_message_by_message_governs_as_a_rebuilt_governor_would(
    name: str,
) -> None:
    policy = POLICIES[name]
    session = _session(seed=3, size=240)
    tokenizer = tokenizer_for(MODEL)
    facts = [MessageFacts.from_json(message_facts(m, tokenizer).to_json()) for m in session]
    loaded = copy.deepcopy(session)
    carried = replayed = 0
    governor = Governor(policy, model=MODEL)
    for size in range(180, len(session) + 1):
        twin = rebuilt(governor)
        with carried_lengths() as seen:
            warm = governor.govern(loaded[:size], facts=facts[:size])
        if size > 180:
            assert seen == [size - 1]
        _same(warm, twin.govern(_session(seed=3, size=size)))
        carried += warm._work.seeded is not None
        replayed += warm.acted is None
    assert (replayed if policy.hysteresis.enabled else carried) > 30


def test_a_long_history_with_an_old_message_replaced_is_a_new_start() -> None:
    policy = POLICIES["budget"]
    history = _session(seed=5, size=260)
    governor = Governor(policy, model=MODEL)
    for size in range(240, len(history) + 1):
        governor.govern(history[:size])
    # A message the window dropped long ago, replaced in the list (the same list object).
    history[11] = ModelResponse(parts=[TextPart("another answer")], timestamp=T0)
    with carried_lengths() as seen:
        replaced = governor.govern(history)
    assert seen == [0]
    assert replaced.acted == "edited"
    _same(replaced, govern(copy.deepcopy(history), policy, model=MODEL))


def test_a_protected_call_with_a_reused_id_keeps_the_pairs_a_cold_call_keeps() -> None:
    # The latest protected call is kept whatever the window; its id was used by an earlier
    # call, so its partners are looked up over the whole history, as a cold call does.
    policy = POLICIES["budget"]
    history = _session(seed=9, size=240)
    reused = next(
        p.tool_call_id
        for m in history[20:]
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    )
    history += [
        ModelRequest(parts=[UserPromptPart("track it", timestamp=T0)]),
        ModelResponse(
            parts=[ToolCallPart("manage_todo_list", {"n": 0}, tool_call_id=reused)], timestamp=T0
        ),
        ModelRequest(
            parts=[ToolReturnPart("manage_todo_list", "ok", tool_call_id=reused, timestamp=T0)]
        ),
    ]
    governor = Governor(policy, model=MODEL)
    for size in range(len(history) - 30, len(history) + 1):
        twin = rebuilt(governor)
        warm = governor.govern(history[:size])
        _same(warm, twin.govern(copy.deepcopy(history[:size])))


def test_an_offer_held_below_a_swinging_stop_spares_governing_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Offers one position below where the window's walk stopped: the stop swings as turns end
    # and their outputs are truncated, and what the next call needs falls outside an offer
    # raised with it, unless earlier offers are held. Held or not, every call is a cold one.
    policy = POLICIES["budget, every call"]
    session = _session(seed=11, size=400)
    original = Work.materialise
    again: dict[int, int] = {}
    for held in (1, 128):
        monkeypatch.setattr(window_step, "CARRY_BELOW_CUT", 1)
        monkeypatch.setattr(window_step, "CARRY_HELD", held)
        memory.clear()
        governed: set[int] = set()
        again[held] = 0

        def counted(
            work: Work, position: int, held: int = held, governed: set[int] = governed
        ) -> int:
            # A position before the current turn governed again, by this call or an earlier.
            if work.governed_tokens[position] < 0:
                again[held] += position in governed and position < work.turn_start
                governed.add(position)
            return int(original(work, position))

        monkeypatch.setattr(Work, "materialise", counted)
        history = session[:200]
        governor = Governor(policy, model=MODEL)
        governor.govern(history)
        again[held] = 0
        for size in range(201, len(session) + 1):
            history = [*history, session[size - 1]]
            warm = governor.govern(history)
            if size % 20 == 0:
                monkeypatch.setattr(Work, "materialise", original)
                _same(warm, govern(_session(seed=11, size=size), policy, model=MODEL))
                monkeypatch.setattr(Work, "materialise", counted)
    assert again[128] < again[1], again
