"""Property-based: the invariants of ARCHITECTURE.md hold over random agentic histories.

Histories mix parallel tool calls, retried calls, interrupted turns (dangling calls), broken
pairing (late, duplicated, early and unknown results), huge outputs, system prompts and pins;
policies vary budget and every mechanism. On every example, fitting or not:

* the output obeys the providers' pairing rule (``provider_rules``, independent of the engine);
* the system prompt, pinned messages and the newest user request survive;
* the report agrees with the output, and says it fits exactly when the output is within budget;
  when it does not fit, it says why, and nothing governance may remove is left;
* governing the output again changes nothing;
* the input is never mutated.

Examples come from this run's seed (``property_seed``): random per run, printed at the end of
it, replayed with ``CTXHUB_PROPERTY_SEED``; CI draws the same examples on every run. A failure
prints the seed, the drawn spec, policy and pins, and the shapes of the history and its
governed output; ``CTXHUB_PROPERTY_SHRINK=1`` makes the replayed failure minimal first.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from engine_builders import MODEL, _tight, continued_and_rebuilt
from hypothesis import HealthCheck, Phase, given, note, seed, settings
from hypothesis import strategies as st
from long_histories import Spec, build, specs
from property_seed import ENV, SEED, SHRINK, SHRINK_ENV
from provider_rules import call_ids, provider_violations, result_ids, shape
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ctxhub.governance import Governor, Policy, count_tokens, govern
from ctxhub.governance.policy import DEFAULT_NOTICE, MIN_TRUNCATION_TOKENS
from tests.messages import T0, reply, tool_call, tool_result, user, words

# Histories hold legacy retry prompts; copying one warns that the class is deprecated.
pytestmark = pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")

WORDS = ["alpha", "beta", "gamma", "delta", "error", "ok", "{", "}", "path/to/file.py"]

SHRUNK_OUTPUT_TOKENS = 2 * MIN_TRUNCATION_TOKENS
"""Most tokens a tool output the last-resort shrink cut may keep: its floor, plus the
indicator saying what was cut."""


@st.composite
def _output(draw: st.DrawFn) -> str:
    huge = draw(st.integers(0, 9)) == 0
    n = draw(st.integers(1500, 5000) if huge else st.integers(1, 120))
    start = draw(st.integers(0, len(WORDS) - 1))
    return "\n".join(
        " ".join(WORDS[(start + i + j) % len(WORDS)] for j in range(8)) for i in range(n // 8 + 1)
    )


LONG_ARGUMENT = "def f():\n    return 1\n" * 40


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
                    # Some calls carry a long value (a file written in full).
                    draw(st.sampled_from([{"n": 1}, {"n": 1, "content": LONG_ARGUMENT}])),
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
                returns.append(
                    ToolReturnPart(
                        call.tool_name,
                        draw(_output()),
                        tool_call_id=call.tool_call_id,
                        timestamp=T0,
                        outcome="retried" if fate == 1 else "success",
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
                "apply": draw(st.sampled_from(["always", "over_budget", "never"])),
                "inputs": draw(st.booleans()),
            },
            "window": {
                "enabled": draw(st.booleans()),
                "triggers": draw(st.sampled_from([[], [{"kind": "messages", "value": 12}]])),
                "keep": draw(st.sampled_from([None, {"kind": "messages", "value": 6}])),
                "notice": draw(st.sampled_from([DEFAULT_NOTICE, None])),
            },
            # Every read names the same argument: each supersedes the one before.
            "dedupe": {"keys": draw(st.sampled_from([{}, {"read": ["n"]}]))},
            "drop_groups": draw(st.booleans()),
            "shrink_newest": draw(st.booleans()),
            "awareness": {"budget_note": draw(st.booleans())},
        }
    )


@st.composite
def long_policies(draw: st.DrawFn) -> Policy:
    """Budgets from far below to far above a long history's size, every mechanism varied."""
    return Policy.model_validate(
        {
            "context_window": draw(
                st.sampled_from([1_500, 4_000, 12_000, 40_000, 128_000, 1_000_000])
            ),
            "reserved_output_tokens": draw(st.sampled_from([0, 500])),
            "safety_margin": draw(st.sampled_from([0, 0.1])),
            "history_cap_tokens": draw(st.sampled_from([None, None, None, 6_000])),
            "tool_output": {
                "limit": draw(st.sampled_from([None, 200, 2000, 8000])),
                "strategy": draw(st.sampled_from(["head", "tail", "both"])),
                "scope": draw(st.sampled_from(["older", "all"])),
            },
            "text": {"limit": draw(st.sampled_from([None, 100, 2000]))},
            "eviction": {
                "threshold_tokens": draw(st.sampled_from([None, 3000, 20_000])),
                "preview_chars": 300,
            },
            "masking": {
                "keep_first": draw(st.integers(0, 2)),
                "keep_last": draw(st.integers(0, 5)),
                "apply": draw(st.sampled_from(["always", "over_budget", "never"])),
                "inputs": draw(st.booleans()),
            },
            "window": {
                "enabled": draw(st.integers(0, 4)) > 0,
                "triggers": draw(
                    st.sampled_from(
                        [
                            [],
                            [],
                            [{"kind": "messages", "value": 40}],
                            [{"kind": "fraction", "value": 0.5}],
                        ]
                    )
                ),
                "keep": draw(st.sampled_from([None, None, {"kind": "messages", "value": 20}])),
                "keep_head": draw(st.integers(0, 4)) > 0,
                "head": draw(
                    st.sampled_from(
                        [
                            None,
                            None,
                            {"kind": "messages", "value": 3},
                            {"kind": "tokens", "value": 800},
                        ]
                    )
                ),
                "keep_turn_aborted": draw(st.integers(0, 4)) > 0,
                "protected_tools": draw(st.sampled_from([["manage_todo_list"], []])),
                "notice": draw(st.sampled_from([DEFAULT_NOTICE, DEFAULT_NOTICE, None])),
            },
            "dedupe": {"keys": draw(st.sampled_from([{}, {}, {"read": ["path"]}]))},
            "drop_groups": draw(st.integers(0, 3)) > 0,
            "shrink_newest": draw(st.integers(0, 3)) > 0,
            "awareness": {"budget_note": draw(st.integers(0, 2)) == 0},
        }
    )


# --- checks -------------------------------------------------------------------------------------


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
    """ARCHITECTURE.md's invariants of any governed or compacted output: pairing a provider
    accepts; the system prompt, pinned messages and the newest user request survive."""
    problems = provider_violations(out)
    assert not problems, "\n".join([*problems, shape(out)])
    out_parts = {id(p) for m in out for p in m.parts}
    system_parts = [p for m in history for p in m.parts if isinstance(p, SystemPromptPart)]
    assert all(id(p) in out_parts for p in system_parts)
    latest = _latest_prompt(history)
    assert latest is None or id(latest) in out_parts
    # Pair repair may add a result to a pinned request, so compare parts.
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
    """Requests carrying tool results are not pinned: pair repair may have to move them."""
    return not result_ids(message)


def _is_notice(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and "ctxhub" in (message.metadata or {})


def _is_aborted(message: ModelMessage) -> bool:
    if not isinstance(message, ModelRequest):
        return False
    return message.state == "interrupted" or any(
        isinstance(p, UserPromptPart)
        and isinstance(p.content, str)
        and p.content.lstrip().startswith(("<turn_aborted>", "<turn-aborted>"))
        for p in message.parts
    )


def _tool_names(message: ModelMessage) -> set[str]:
    names = set()
    for part in message.parts:
        if isinstance(part, ToolCallPart | ToolReturnPart | RetryPromptPart) and part.tool_name:
            names.add(part.tool_name)
    return names


def _opening(out: list[ModelMessage]) -> int | None:
    """The output's newest user request (not a window notice): it opened the current turn."""
    for at in range(len(out) - 1, -1, -1):
        message = out[at]
        if (
            isinstance(message, ModelRequest)
            and not _is_notice(message)
            and any(isinstance(p, UserPromptPart) for p in message.parts)
        ):
            return at
    return None


def _is_group(out: list[ModelMessage], at: int) -> bool:
    """An iteration group at ``at``: a response and the request answering exactly its calls,
    or a refused response and the retry prompts saying why."""
    response, request = out[at], out[at + 1]
    if not isinstance(response, ModelResponse) or not isinstance(request, ModelRequest):
        return False
    if call_ids(response):
        return len(result_ids(request)) == len(request.parts) and Counter(
            result_ids(request)
        ) == Counter(call_ids(response))
    return bool(request.parts) and all(p.part_kind in RETRY_KINDS for p in request.parts)


RETRY_KINDS = frozenset({"retry-prompt", "retry-feedback"})


def removable_left(
    history: list[ModelMessage], governed: Any, policy: Policy, pins: frozenset[int]
) -> list[str]:
    """What a governed output that does not fit still holds that the policy lets governance
    remove: with the window, any message but the head, the system prompt, pins, the latest call
    of each protected tool, turn-aborted markers, the request that opened the current turn and
    the newest exchange (each with the other half of its pairs); without it, older iteration
    groups of the current turn; and tool outputs of the turn above the last-resort floor."""
    out: list[ModelMessage] = governed.messages
    kept = [m for m in governed.report.messages if m.kept]
    assert [m.kind for m in kept] == [m.kind for m in out]
    index = [m.index for m in kept]
    protected = set(policy.window.protected_tools)
    opening = _opening(out)
    if opening is None:
        start = 0
    else:
        start = opening - 1 if opening > 0 and result_ids(out[opening]) else opening
    problems: list[str] = []

    def exempt(at: int) -> bool:
        return index[at] in pins or bool(protected & _tool_names(out[at]))

    if policy.window.enabled:
        first_text = next(
            (
                i
                for i, m in enumerate(history)
                if isinstance(m, ModelResponse) and any(isinstance(p, TextPart) for p in m.parts)
            ),
            None,
        )
        # The head: the first run, up to the first answer; with no answer yet, the first
        # request (so that governing the output again finds the same head).
        head_end = (
            first_text
            if first_text is not None
            else next((i for i, m in enumerate(history) if isinstance(m, ModelRequest)), None)
        )
        if policy.window.head is not None:
            # A sized head: its first messages, or the leading messages within its tokens.
            assert policy.context_window is not None
            kind, value = policy.window.head.resolve(policy.context_window)
            head_end = value - 1
            if kind == "tokens":
                # It ends before an earlier cut's notice; a result pair repair moved next to
                # its call (no input index where it sits) counts where it is sent.
                total, head_end = 0, -1
                for at, message in enumerate(out):
                    total += count_tokens([message], model=MODEL)
                    if total > value or _is_notice(message):
                        break
                    head_end = max(head_end, index[at] if index[at] is not None else -1)
        latest_protected = {
            max(i for i, m in enumerate(history) if name in _tool_names(m) and call_ids(m))
            for name in protected
            if any(name in _tool_names(m) and call_ids(m) for m in history)
        }
        # The newest exchange: the turn's latest response on (its request on without one).
        after = start if opening is None else opening + 1
        floor = next(
            (at for at in range(len(out) - 1, after - 1, -1) if isinstance(out[at], ModelResponse)),
            start,
        )

        def kept_by_window(at: int) -> bool:
            message, input_index = out[at], index[at]
            return (
                at >= floor
                or (opening is not None and start <= at <= opening)
                or _is_notice(message)
                or any(isinstance(p, SystemPromptPart) for p in message.parts)
                or input_index in pins
                or input_index in latest_protected
                or (policy.window.keep_turn_aborted and _is_aborted(message))
                or (
                    policy.window.keep_head
                    and head_end is not None
                    and input_index is not None
                    and input_index <= head_end
                )
            )

        for at in range(len(out)):
            partner_kept = (call_ids(out[at]) and at + 1 < len(out) and kept_by_window(at + 1)) or (
                result_ids(out[at]) and kept_by_window(at - 1)
            )
            if not (kept_by_window(at) or partner_kept):
                problems.append(f"message {at} (input {index[at]}) could have been dropped")
    elif policy.drop_groups:
        groups = [at for at in range(start, len(out) - 1) if _is_group(out, at)]
        for at in groups[:-1]:
            if not (exempt(at) or exempt(at + 1)):
                problems.append(f"iteration group at {at} is not the newest of the turn")
    if policy.shrink_newest:
        for at in range(start, len(out)):
            if not isinstance(out[at], ModelRequest) or exempt(at):
                continue
            for part in out[at].parts:
                if (
                    type(part) is ToolReturnPart
                    and isinstance(part.content, str)
                    and "ctxhub" not in (part.metadata or {})
                ):
                    tokens = count_tokens(part.content, model=MODEL)
                    if tokens > SHRUNK_OUTPUT_TOKENS:
                        problems.append(f"output {part.tool_call_id} at {at} keeps {tokens} tokens")
    return problems


def check_governed(
    history: list[ModelMessage], policy: Policy, pins: frozenset[int] = frozenset()
) -> Any:
    """Govern ``history`` and check every invariant; the governed result."""
    snapshot = copy.deepcopy(history)
    objects = list(map(id, history))
    note(f"policy: {policy.model_dump(mode='json', exclude_defaults=True)}")
    note(f"pins: {sorted(pins)}")
    note(f"input ({len(history)} messages):\n{shape(history)}")

    governed = govern(history, policy, model=MODEL, pinned=pins)
    out = governed.messages
    report = governed.report
    note(f"output ({len(out)} messages):\n{shape(out)}")

    # The input is never mutated.
    assert list(map(id, history)) == objects
    assert history == snapshot
    assert_history_invariants(history, out, pins)
    # The report agrees with the output.
    assert report.tokens_before == count_tokens(history, model=MODEL)
    assert report.tokens_after == count_tokens(out, model=MODEL)
    assert sum(m.tokens_after for m in report.messages) == report.tokens_after
    assert [m.index for m in report.messages if m.index is not None] == list(range(len(history)))
    assert report.messages_after == len(out)
    # The budget: what the window leaves after system prompt, reserve and margin, capped.
    window = policy.context_window
    assert window is not None
    budget = window - report.system_tokens - policy.reserved_output_tokens
    budget -= int(window * policy.safety_margin)
    if policy.history_cap_tokens:
        budget = min(budget, policy.history_cap_tokens)
    assert report.budget_tokens == max(budget, 0)
    assert report.fits == (
        count_tokens(out, model=MODEL) - report.system_tokens <= report.budget_tokens
    )
    if report.fits:
        assert report.reason is None
    else:
        assert report.reason
        left = removable_left(history, governed, policy, pins)
        assert not left, "\n".join([report.reason, *left])
    # Governing the output again, its pinned messages pinned, changes nothing. They are found
    # where the report puts them: a pinned request pair repair filled (an interrupted one that
    # had no part) has no part of the input's to be found by.
    kept = [m for m in report.messages if m.kept]
    assert [m.kind for m in kept] == [m.kind for m in out]
    again_pins = frozenset(j for j, m in enumerate(kept) if m.index in pins)
    again = govern(out, policy, model=MODEL, pinned=again_pins)
    if again.messages != out:
        note(_summary(governed))
        note(_summary(again))
        note(f"governed again ({len(again.messages)} messages):\n{shape(again.messages)}")
    assert again.messages == out, "governing the output again changed it"
    budget_note = report.budget_note
    if budget_note is not None and again.fits and not report.fits:
        # The budget note is history where it is written, and a system prompt in a governed
        # request governed again: a request over budget by no more than the note then fits.
        assert report.history_tokens_after - budget_note.tokens <= report.budget_tokens
    else:
        assert again.fits == report.fits
    return governed


def _pins(data: st.DataObject, history: list[ModelMessage], most: int) -> frozenset[int]:
    pinnable = [i for i, m in enumerate(history) if _is_pinnable(m)]
    if not pinnable:
        return frozenset()
    return frozenset(data.draw(st.lists(st.sampled_from(pinnable), max_size=most), label="pins"))


def _replay(detail: str) -> None:
    shrink = "" if SHRINK else f" ({SHRINK_ENV}=1 also makes the failure minimal)"
    run = f"{ENV}={SEED} replays this run" if SEED is not None else "CI replays these examples"
    note(f"{run}{shrink}; {detail}")


# --- properties ---------------------------------------------------------------------------------

# Every property draws from this run's seed and keeps no example database (the seed alone replays
# a run). A failure is shown as found; shrinking it to a minimal one takes minutes on long
# histories, so it is asked for when replaying (CTXHUB_PROPERTY_SHRINK=1), and then only the first
# failure found is shrunk.
PHASES = (Phase.explicit, Phase.generate, *((Phase.shrink,) if SHRINK else ()))


Test = Callable[..., None]


def seeded(max_examples: int) -> Callable[[Test], Test]:
    """This run's seed and the settings every property here shares, with its example count."""

    def decorate(test: Test) -> Test:
        configured = settings(
            max_examples=max_examples,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
            report_multiple_bugs=False,
            phases=PHASES,
        )(test)
        return configured if SEED is None else seed(SEED)(configured)

    return decorate


@seeded(max_examples=150)
@given(history=histories(), policy=policies(), data=st.data())
def test_invariants_hold(history: list[ModelMessage], policy: Policy, data: st.DataObject) -> None:
    _replay(f"{len(history)} messages")
    check_governed(history, policy, _pins(data, history, 2))


@seeded(max_examples=150)
@given(spec=specs(), policy=long_policies(), data=st.data())
def test_invariants_hold_on_long_histories(spec: Spec, policy: Policy, data: st.DataObject) -> None:
    history = build(spec)
    _replay(f"{spec!r} builds {len(history)} messages")
    check_governed(history, policy, _pins(data, history, 4))


@seeded(max_examples=40)
@given(history=histories(), window=st.integers(2_000, 30_000))
def test_budget_is_met_when_the_untouchable_part_fits(
    history: list[ModelMessage], window: int
) -> None:
    _replay(f"{len(history)} messages, window {window}")
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
    governed = check_governed(history, policy)
    note(_summary(governed))
    # The newest iteration group keeps at most 3 calls, each shrinkable to a small floor.
    if window >= floor + 1_500:
        assert governed.fits, governed.report.reason


@seeded(max_examples=15)
@given(spec=specs(), policy=long_policies(), steps=st.integers(2, 12))
def test_a_long_history_grown_governs_as_a_rebuilt_governor_would(
    spec: Spec, policy: Policy, steps: int
) -> None:
    # Pair repair carries its pairing from call to call: a result arriving late, after its
    # call was answered "interrupted", must be moved as a cold pass over the whole would.
    history = build(spec)
    _replay(f"{spec!r} builds {len(history)} messages, grown in {steps} steps")
    governor = Governor(policy, model=MODEL)
    for step in range(1, steps + 1):
        prefix = history[: len(history) * step // steps]
        warm, cold = continued_and_rebuilt(governor, prefix)
        note(f"prefix of {len(prefix)} messages")
        assert warm.messages == cold.messages
        assert warm.report.model_dump() == cold.report.model_dump()


# --- engine bugs these properties found, each as its smallest example -------------------------


def test_a_pinned_call_whose_id_is_reused_later_keeps_its_own_answer() -> None:
    history: list[ModelMessage] = [
        user("go"),
        reply("ok"),
        user("task"),
        tool_call("read", id="c1"),  # pinned; answered "interrupted" in the next request
        user("next"),
        tool_call("read", id="c1"),  # the id reused
        tool_result("read", words(3000), id="c1"),
        reply("done"),
        user("now"),
    ]
    governed = govern(history, _tight(1000), model=MODEL, pinned={3})
    assert provider_violations(governed.messages) == []


def test_governing_an_output_that_does_not_fit_again_changes_nothing() -> None:
    history: list[ModelMessage] = [
        user("task 0"),
        tool_call("read", id="c1"),
        tool_result("read", words(2000), id="c1"),
        reply("done"),
        user(words(1500)),
    ]
    policy = _tight(1000)
    governed = govern(history, policy, model=MODEL)
    assert not governed.fits
    assert govern(governed.messages, policy, model=MODEL).messages == governed.messages
