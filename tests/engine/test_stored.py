"""Governing a stored history: facts kept as JSON, messages loaded only when governance asks.

``govern(lazy, facts=...)`` must give exactly what ``govern(messages)`` gives — the messages, the
report, the evicted texts — while reading ``lazy`` only by position and only at the messages it
sends, changes or repairs and the request whose instructions it uses. Warm calls on a stored
history grown one message at a time must equal cold calls too.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, overload

import pytest
from engine_builders import MODEL, rebuilt, reports_carried
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    BinaryContent,
    FilePart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import ToolDefinition
from report_oracle import reference_report
from test_properties import histories, policies

from ctxhub.governance import Governed, Governor, Policy, govern
from ctxhub.governance.facts import FACTS_VERSION, MessageFacts, message_facts
from ctxhub.governance.steps.pairing import Pairing
from ctxhub.governance.tokens import tokenizer_for
from tests.messages import T0, reply, tool_call, tool_calls, tool_result, tool_results, user, words

TOKENIZER = tokenizer_for(MODEL)
PARIS = timezone(timedelta(hours=2))
MARCH = datetime(2026, 3, 1, 9)


class LazyRecorder(Sequence[ModelMessage]):
    """A history read by position only, remembering every position read."""

    def __init__(self, messages: list[ModelMessage], size: int | None = None) -> None:
        self._messages = messages
        self._size = len(messages) if size is None else size
        self.read: set[int] = set()

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> ModelMessage: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ModelMessage]: ...

    def __getitem__(self, index: int | slice) -> ModelMessage | Sequence[ModelMessage]:
        if not isinstance(index, int) or not 0 <= index < self._size:
            raise AssertionError(f"read as messages[{index!r}]")
        self.read.add(index)
        return self._messages[index]

    def __iter__(self) -> Iterator[ModelMessage]:
        raise AssertionError("iterated")

    def __reversed__(self) -> Iterator[ModelMessage]:
        raise AssertionError("iterated")

    def __contains__(self, value: object) -> bool:
        raise AssertionError("searched")


def stored(message: ModelMessage) -> MessageFacts:
    """A message's facts as a hub reads them back from storage."""
    return MessageFacts.from_json(message_facts(message, TOKENIZER).to_json())


def _same(governed: Governed, cold: Governed) -> None:
    dump = ModelMessagesTypeAdapter.dump_python
    assert dump(governed.messages) == dump(cold.messages)
    assert governed.report.model_dump() == cold.report.model_dump()
    assert list(governed.evicted.items()) == list(cold.evicted.items())
    assert (governed.fits, governed.tokens_before, governed.tokens_after) == (
        cold.fits,
        cold.tokens_before,
        cold.tokens_after,
    )


def _allowed(
    governed: Governed,
    facts: list[MessageFacts],
    instructions: str | None,
    policy: Policy | None = None,
) -> set[int]:
    """Input indices governance may read: sent (changed or not), pair-repair sites, the latest
    request carrying instructions, and the messages it may look into before leaving them out:
    those masking or a cap could change (a message is read to govern it: a result, or with
    ``Masking.inputs`` a call), those holding an output returned more than once
    (de-duplication looks at the copies), and the calls and outputs of tools whose reads
    supersede each other (``Dedupe.keys``: the call names what it reads). Without ``policy``,
    any message with a part is taken as one a cap could change when the report says caps ran,
    and any tool's calls and outputs as keyed."""
    report = governed.report
    allowed = {m.index for m in report.messages if m.kept and m.index is not None}
    ran = {step.step for step in report.steps}
    masking = "mask" in ran
    # With ``Masking.inputs`` a response's calls are masked with their results.
    inputs = masking and (policy is None or policy.masking.inputs)
    deduplicating = policy is None or policy.dedupe.enabled
    if policy is not None:
        smallest = _smallest_cap(policy)
        keys = set(policy.dedupe.keys) if deduplicating else set()
    else:
        smallest = 0 if ran & {"evict", "truncate"} else float("inf")
        keys = {name for fact in facts for name in fact.part_tool_names if name is not None}
    copies = Counter(digest for fact in facts for digest in fact.output_digests)
    for index, fact in enumerate(facts):
        names = fact.part_tool_names
        if (
            fact.largest > smallest
            or (masking and fact.maskable)
            or (inputs and bool(fact.call_ids))
            or (deduplicating and any(copies[digest] > 1 for digest in fact.output_digests))
            or (not fact.request and not fact.tool_names.isdisjoint(keys))
            or any(names[number] in keys for number in fact.outputs)
        ):
            allowed.add(index)
    dangling, orphans = Pairing().extended(facts).outcome()
    allowed |= {*dangling, *(r + 1 for r in dangling if r + 1 < len(facts)), *orphans}
    carrying = [i for i, fact in enumerate(facts) if fact.instructions]
    if instructions is None and carrying:
        allowed.add(carrying[-1])
    return allowed


def _smallest_cap(policy: Policy) -> float:
    """No part at or below this many tokens is evicted or truncated (a limit in characters or
    lines may cut a part of any size)."""
    limits: list[float] = [
        truncation.limit if truncation.unit == "tokens" else 0
        for truncation in (policy.tool_output, policy.text)
        if truncation.limit
    ]
    if policy.eviction.threshold_tokens:
        limits.append(policy.eviction.threshold_tokens)
    return min(limits, default=float("inf"))


# --- facts as JSON -------------------------------------------------------------------------------


def _every_kind() -> list[ModelMessage]:
    """One message of every kind the builders and the engine make, and some odd ones."""
    notice = govern(
        [user("start"), *(reply(words(300)) for _ in range(6)), user("now")],
        Policy(context_window=1_500, reserved_output_tokens=0, safety_margin=0),
        model=MODEL,
    ).messages
    rounds = [
        (tool_call("read", id=f"r{n}"), tool_result("read", "x " * 900, id=f"r{n}"))
        for n in range(4)
    ]
    masked = govern(
        [user("go"), *(m for pair in rounds for m in pair)],
        Policy.model_validate({"masking": {"keep_first": 1, "keep_last": 1, "apply": "always"}}),
        model=MODEL,
    ).messages
    return [
        user("hello", system="You are careful."),
        reply("an answer"),
        tool_call("read", id="c1", path="a.py"),
        tool_calls(("read", "c2"), ("grep", "c3")),
        tool_result("read", {"lines": [1, 2]}, id="c1"),
        tool_results(("read", "one", "c2"), ("grep", "two", "c3")),
        ModelRequest(parts=[UserPromptPart("<turn_aborted> stop")]),
        ModelRequest(parts=[UserPromptPart("cut")], state="interrupted"),
        ModelRequest(parts=[UserPromptPart("with rules", timestamp=T0)], instructions="Be brief."),
        ModelRequest(parts=[RetryPromptPart("bad args", tool_name="read", tool_call_id="c9")]),
        ModelRequest(parts=[RetryPromptPart("try again")]),
        ModelRequest(parts=[RetryFeedbackPart("no output", retry=RetryInfo("no_output"))]),
        ModelRequest(
            parts=[UserPromptPart(["see", BinaryContent(b"\x89PNG", media_type="image/png")])]
        ),
        ModelRequest(parts=[]),
        ModelRequest(parts=[UserPromptPart("no time", timestamp=None)]),  # type: ignore[arg-type]
        ModelRequest(parts=[UserPromptPart("elsewhere", timestamp=MARCH.replace(tzinfo=PARIS))]),
        ModelRequest(parts=[UserPromptPart("naive", timestamp=MARCH)]),
        ModelResponse(
            parts=[
                ThinkingPart("hmm"),
                NativeToolCallPart("web_search", {"q": "x"}, tool_call_id="n1"),
                NativeToolReturnPart("web_search", "found", tool_call_id="n1"),
                FilePart(BinaryContent(b"GIF89a", media_type="image/gif")),
                TextPart("done"),
            ],
            timestamp=datetime(2026, 2, 1, tzinfo=UTC),
        ),
        *notice,
        *masked,
    ]


# Retry prompts are deprecated in pydantic-ai but still found in stored histories.
@pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")
def test_facts_of_every_kind_of_message_survive_json() -> None:
    messages = _every_kind()
    every = [message_facts(m, TOKENIZER) for m in messages]
    assert any(f.notice for f in every)  # a window notice
    assert any(len(f.outputs) > len(f.maskable) for f in every)  # a masked placeholder
    for message in messages:
        facts = message_facts(message, TOKENIZER)
        value = json.loads(json.dumps(facts.to_json()))
        assert value["v"] == FACTS_VERSION
        assert MessageFacts.from_json(value) == facts
        assert facts.part_kinds == tuple(p.part_kind for p in message.parts)
        assert len(facts.part_tool_names) == len(message.parts)


def test_facts_record_what_the_report_and_the_window_read() -> None:
    request = ModelRequest(
        parts=[ToolReturnPart("read", "x", tool_call_id="c1", timestamp=T0), UserPromptPart("y")],
        instructions="Rules.",
    )
    facts = message_facts(request, TOKENIZER)
    assert facts.part_kinds == ("tool-return", "user-prompt")
    assert facts.part_tool_names == ("read", None)
    assert facts.instructions
    assert facts.timestamp == T0
    assert not message_facts(user("plain"), TOKENIZER).instructions


def test_facts_of_another_version_or_malformed_are_refused() -> None:
    value = message_facts(user("hi"), TOKENIZER).to_json()
    with pytest.raises(ValueError, match="version 0"):
        MessageFacts.from_json({**value, "v": 0})
    with pytest.raises(ValueError, match="version None"):
        MessageFacts.from_json({k: v for k, v in value.items() if k != "v"})
    with pytest.raises(ValueError, match="unknown"):
        MessageFacts.from_json({**value, "colour": "red"})
    with pytest.raises(ValueError, match="malformed"):
        MessageFacts.from_json({k: v for k, v in value.items() if k != "tokens"})
    with pytest.raises(ValueError, match="malformed"):
        MessageFacts.from_json({**value, "tokens": "12"})
    with pytest.raises(ValueError, match="lengths"):
        MessageFacts.from_json({**value, "part_kinds": []})
    with pytest.raises(ValueError, match="JSON object"):
        MessageFacts.from_json([1, 2])


def test_facts_must_match_the_messages() -> None:
    history: list[ModelMessage] = [user("a"), reply("b")]
    with pytest.raises(ValueError, match="1 facts given for 2 messages"):
        govern(history, model=MODEL, facts=[stored(history[0])])


# --- stored and cold histories govern alike ------------------------------------------------------


@st.composite
def stored_histories(draw: st.DrawFn) -> list[ModelMessage]:
    """Random histories with instructions on some requests, turn-aborted markers and, at
    times, the output of an earlier governance pass (notices, placeholders, previews)."""
    history = draw(histories())
    changed: list[ModelMessage] = []
    for message in history:
        if isinstance(message, ModelRequest) and draw(st.integers(0, 5)) == 0:
            text = draw(st.sampled_from(["Be brief.", "Answer in French. " * 40]))
            message = dataclasses.replace(message, instructions=text)
        if isinstance(message, ModelRequest) and draw(st.integers(0, 12)) == 0:
            message = dataclasses.replace(message, state="interrupted")
        changed.append(message)
    if draw(st.integers(0, 3)) == 0:
        changed = govern(changed, draw(policies()), model=MODEL).messages
    return changed


def _options(draw: Any, history: list[ModelMessage]) -> dict[str, Any]:
    pinnable = [
        i for i, m in enumerate(history) if not any(isinstance(p, ToolReturnPart) for p in m.parts)
    ]
    pins = draw(st.lists(st.sampled_from(pinnable), max_size=2)) if pinnable else []
    tools = draw(st.sampled_from([(), (ToolDefinition(name="read", description="Read a file."),)]))
    return {
        "pinned": frozenset(pins),
        "tool_definitions": tools,
        "instructions": draw(st.sampled_from([None, None, "Override."])),
    }


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=stored_histories(), policy=policies(), data=st.data())
def test_a_stored_history_governs_as_its_messages_and_reads_only_what_it_must(
    history: list[ModelMessage], policy: Policy, data: st.DataObject
) -> None:
    options = _options(data.draw, history)
    facts = [stored(m) for m in history]
    lazy = LazyRecorder(copy.deepcopy(history))

    governed = govern(lazy, policy, model=MODEL, facts=facts, **options)
    governor = Governor(policy, model=MODEL)
    cold = governor.govern(history, **options)

    note(f"read {sorted(lazy.read)}")
    _same(governed, cold)
    expected = reference_report(
        cold, history, pinned=options["pinned"], state=governor.state(), policy=policy
    )
    assert cold.report.model_dump() == expected
    allowed = _allowed(governed, facts, options["instructions"], policy)
    assert lazy.read <= allowed, sorted(lazy.read - allowed)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=stored_histories(), policy=policies(), data=st.data())
def test_a_stored_history_grown_one_message_at_a_time_governs_as_a_rebuilt_governor_would(
    stream: list[ModelMessage], policy: Policy, data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(stream)))
    loaded = copy.deepcopy(stream)  # the hub's loaded messages: one object per position
    facts = [stored(m) for m in stream]  # the hub's facts: one object per message
    previous: Governed | None = None
    governor = Governor(policy, model=MODEL)
    for size in range(start, len(stream) + 1):
        options = _options(data.draw, stream[:size])
        lazy = LazyRecorder(loaded, size)
        twin = rebuilt(governor)
        governed = governor.govern(lazy, facts=facts[:size], **options)
        if previous is not None:
            # Extended the previous call's history: what it reports as before is taken over.
            alike, reused = reports_carried(previous, governed)
            assert reused == alike
        cold = twin.govern(copy.deepcopy(stream[:size]), **options)
        _same(governed, cold)
        allowed = _allowed(governed, facts[:size], options["instructions"], policy)
        assert lazy.read <= allowed, sorted(lazy.read - allowed)
        previous = governed


def _long_session(turns: int) -> list[ModelMessage]:
    history: list[ModelMessage] = [user("start", system="You are careful.")]
    for turn in range(turns):
        history.append(user(f"task {turn}"))
        for n in range(3):
            call_id = f"t{turn}c{n}"
            history += [
                tool_call("read", id=call_id),
                tool_result("read", words(400, f"w{n}"), id=call_id),
            ]
        history.append(reply(f"done {turn}"))
    return history


def test_a_grown_stored_history_reuses_earlier_reports_and_leaves_dropped_messages_unread() -> None:
    session = _long_session(60)
    policy = Policy(context_window=5_000, reserved_output_tokens=0)
    facts = [stored(m) for m in session]
    loaded = copy.deepcopy(session)
    governor = Governor(policy, model=MODEL)
    first = governor.govern(LazyRecorder(loaded, len(session) - 1), facts=facts[:-1])
    twin = rebuilt(governor)
    lazy = LazyRecorder(loaded)
    second = governor.govern(lazy, facts=facts)

    before, after = first.report.messages, second.report.messages
    dropped = {m.index for m in after if not m.kept and m.index is not None}
    sent = {m.index for m in after if m.kept and m.index is not None}
    assert len(dropped) > len(session) // 2
    # The call replays the window's last cut: it weighs no message it leaves out, and reads
    # only the messages it sends.
    assert second.acted is None
    assert lazy.read <= sent
    assert len(lazy.read) < 30
    reused = sum(a is b for a, b in zip(before, after, strict=False))
    assert reused > 0.9 * len(before)
    _same(second, twin.govern(copy.deepcopy(session)))


def test_results_read_before_or_after_their_stored_history_grew_report_as_cold_calls() -> None:
    # A history's lists (its facts, its pair repair's) grow in place with the history once its
    # result is read no more; a result still unread keeps what it reports, whenever its report
    # is built. The call left unanswered at the start makes pair repair change the history.
    session = _long_session(20)
    session[2:2] = [tool_call("read", id="lost"), user("never mind")]
    policy = Policy(context_window=5_000, reserved_output_tokens=0)
    facts = [stored(m) for m in session]
    sizes = (len(session) - 9, len(session) - 5, len(session))
    governor = Governor(policy, model=MODEL)
    twins = [rebuilt(governor)]
    held = governor.govern(session[: sizes[0]], facts=facts[: sizes[0]])
    twins.append(rebuilt(governor))
    read = governor.govern(session[: sizes[1]], facts=facts[: sizes[1]])
    assert read.report.messages_before == sizes[1]
    twins.append(rebuilt(governor))
    last = governor.govern(session, facts=facts)
    for governed, size, twin in zip((held, read, last), sizes, twins, strict=True):
        _same(governed, twin.govern(copy.deepcopy(session[:size])))


def test_a_stored_history_that_does_not_extend_the_remembered_one_leaves_it_to_extend() -> None:
    # Facts that end like the remembered history's but differ before: governed cold, and the
    # remembered history is still there, as it was, for the one that does extend it.
    session = _long_session(6)
    policy = Policy(context_window=3_000, reserved_output_tokens=0)
    facts = [stored(m) for m in session]
    size = len(session) - 2
    governor = Governor(policy, model=MODEL)
    first = governor.govern(session[:size], facts=facts[:size])
    first.report  # noqa: B018
    edited = [*session[:3], user("another task"), *session[4:]]
    other = [*facts[:3], stored(edited[3]), *facts[4:]]
    apart = governor.govern(edited, facts=other)
    grown = governor.govern(session, facts=facts)
    # The edited history starts over (not one report taken over, though most read the same);
    # the grown one extends the first, which is still remembered as it was.
    alike, reused = reports_carried(first, apart)
    assert (alike > 20, reused) == (True, 0)
    alike, reused = reports_carried(first, grown)
    assert reused == alike > 20
    # Each is an edit of the history before it: governed as a new start.
    assert apart.acted == grown.acted == "edited"
    _same(apart, govern(copy.deepcopy(edited), policy, model=MODEL))
    _same(grown, govern(copy.deepcopy(session), policy, model=MODEL))


def test_stored_facts_given_as_a_tuple_extend_the_remembered_history() -> None:
    session = _long_session(4)
    policy = Policy(context_window=3_000, reserved_output_tokens=0)
    facts = tuple(stored(m) for m in session)
    governor = Governor(policy, model=MODEL)
    first = governor.govern(session[:-2], facts=facts[:-2])
    first.report  # noqa: B018
    twin = rebuilt(governor)
    grown = governor.govern(session, facts=facts)
    alike, reused = reports_carried(first, grown)
    assert reused == alike > 20
    _same(grown, twin.govern(copy.deepcopy(session)))


def test_reports_of_one_stored_history_built_in_threads_equal_cold_ones() -> None:
    # The hub serves one session from several threads: calls on a history grown share the
    # reports earlier calls built, and their reports may be built at the same time.
    session = _long_session(12)
    policy = Policy(context_window=3_000, reserved_output_tokens=0)
    facts = [stored(m) for m in session]
    loaded = copy.deepcopy(session)
    sizes = range(len(session) - 40, len(session) + 1)
    # A message pinned on every other call, so consecutive reports differ at its index.
    pins = {size: frozenset({1}) if size % 2 else frozenset() for size in sizes}
    expected = {
        size: govern(
            copy.deepcopy(session[:size]), policy, model=MODEL, pinned=pins[size]
        ).report.model_dump()
        for size in sizes
    }

    # Calls on the history as it grows, each extending the one before: their reports share
    # what earlier reports built, and are built here in four threads at once.
    # Pins that change on every call make each a new start, as a fresh Governor's first.
    governed = []
    governor = Governor(policy, model=MODEL)
    for size in sizes:
        lazy, pinned = LazyRecorder(loaded, size), pins[size]
        call = governor.govern(lazy, pinned=pinned, facts=facts[:size])
        governed.append((size, call))

    def wrong(call: tuple[int, Governed]) -> bool:
        size, governed = call
        return governed.report.model_dump() != expected[size]

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(4) as pool:
            assert not any(pool.map(wrong, governed))
    finally:
        sys.setswitchinterval(previous)
