"""What a Governor carries from one call to the next on a long history never changes the answer.

A call on a history grown by a message takes over what the previous call worked out: counts
before caps, the governed versions of the masked middle and of the older results after it, a
window walk over that carried run a run at a time, the window's drops as one range. These
tests grow histories long enough for the window to cut on every call (hysteresis off) or to
replay its cut between actions (on), through turns, interrupted calls, evicted and truncated
outputs, a protected tool, pins, group dropping and triggers, and compare every call with that
of a Governor rebuilt from the same state, on new objects.

What is carried shows in what a call looks at: given the history as stored facts and messages
loaded on demand, a call that takes over the previous call's governed versions reads only the
messages it sends, where one that governs them again reads some of those it leaves out.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from engine_builders import MODEL, rebuilt, reports_carried
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
from test_stored import LazyRecorder, stored

from ctxhub.governance import Governed, Governor, Policy, govern
from ctxhub.governance.caches import memory
from ctxhub.governance.facts import MessageFacts, message_facts
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
    "budget note": _policy(awareness={"budget_note": True}),
    "budget note, every call": _policy(awareness={"budget_note": True}, **EVERY_CALL),
}


def _sent(governed: Governed) -> set[int]:
    """Input indices of the messages a request sends."""
    return {m.index for m in governed.report.messages if m.kept and m.index is not None}


def _windowed(governed: Governed) -> bool:
    """Whether the window left messages out of this request (its notice is sent)."""
    return any(window_step.notice_omitted(m) is not None for m in governed.messages)


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
    windowed = carried = replayed = taken_over = 0
    history = session[:180]
    governor = Governor(policy, model=MODEL)
    previous = governor.govern(history, pinned=pins)
    previous.report  # noqa: B018
    # The same history stored: facts, and messages loaded on demand.
    facts, loaded = [stored(m) for m in session], copy.deepcopy(session)
    shadow = Governor(policy, model=MODEL)
    shadow.govern(LazyRecorder(loaded, 180), facts=facts[:180], pinned=pins)
    for size in range(181, len(session) + 1):
        history = [*history, session[size - 1]]
        twin = rebuilt(governor)
        warm = governor.govern(history, pinned=pins)
        # Extended the previous call's history: what it reports as before is taken over.
        alike, reused = reports_carried(previous, warm)
        assert reused == alike
        taken_over += reused > 0
        # The same messages as new objects: no cache or carried work applies to them.
        fresh = _session(seed=len(name), size=size)
        cold = twin.govern(fresh, pinned=pins)
        _same(warm, cold)
        lazy = LazyRecorder(loaded, size)
        stored_warm = shadow.govern(lazy, facts=facts[:size], pinned=pins)
        _same(stored_warm, cold)
        windowed += _windowed(warm)
        carried += lazy.read <= _sent(stored_warm)
        replayed += warm.acted is None
        previous = warm
    assert taken_over > 45
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
    carried = replayed = taken_over = 0
    governor = Governor(policy, model=MODEL)
    previous: Governed | None = None
    for size in range(180, len(session) + 1):
        twin = rebuilt(governor)
        lazy = LazyRecorder(loaded, size)
        warm = governor.govern(lazy, facts=facts[:size])
        if previous is not None:
            alike, reused = reports_carried(previous, warm)
            assert reused == alike
            taken_over += reused > 0
        _same(warm, twin.govern(_session(seed=3, size=size)))
        carried += lazy.read <= _sent(warm)
        replayed += warm.acted is None
        previous = warm
    assert taken_over > 30
    assert (replayed if policy.hysteresis.enabled else carried) > 30


def test_a_long_history_with_an_old_message_replaced_is_a_new_start() -> None:
    policy = POLICIES["budget"]
    history = _session(seed=5, size=260)
    governor = Governor(policy, model=MODEL)
    for size in range(240, len(history) + 1):
        last = governor.govern(history[:size])
    last.report  # noqa: B018
    # A message the window dropped long ago, replaced in the list (the same list object).
    history[11] = ModelResponse(parts=[TextPart("another answer")], timestamp=T0)
    replaced = governor.govern(history)
    # Started over: not one report is taken from the call before, though most read the same.
    alike, reused = reports_carried(last, replaced)
    assert (alike > 100, reused) == (True, 0)
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
    # Governing a message again means looking into it again: a message the call leaves out
    # and an earlier call already read, read again.
    policy = POLICIES["budget, every call"]
    session = _session(seed=11, size=400)
    facts, loaded = [stored(m) for m in session], copy.deepcopy(session)
    again: dict[int, int] = {}
    for held in (1, 128):
        monkeypatch.setattr(window_step, "CARRY_BELOW_CUT", 1)
        monkeypatch.setattr(window_step, "CARRY_HELD", held)
        memory.clear()
        read: set[int] = set()
        again[held] = 0
        governor = Governor(policy, model=MODEL)
        governor.govern(LazyRecorder(loaded, 200), facts=facts[:200])
        for size in range(201, len(session) + 1):
            lazy = LazyRecorder(loaded, size)
            warm = governor.govern(lazy, facts=facts[:size])
            again[held] += len((lazy.read - _sent(warm)) & read)
            read |= lazy.read
            if size % 20 == 0:
                _same(warm, govern(_session(seed=11, size=size), policy, model=MODEL))
    assert again[128] < again[1], again
