"""Repeated reads: an older copy of an output the same tool returned again becomes a reference
to the newest copy, which is sent whole."""

from __future__ import annotations

from engine_builders import MODEL, _off, _tight
from pydantic_ai.messages import ModelMessage, ToolReturnPart

from ctxhub.governance import Policy, govern, pairing_problems
from ctxhub.governance.facts import MessageFacts, message_facts
from ctxhub.governance.tokens import tokenizer_for
from tests.messages import reply, tool_call, tool_result, user, words

FILE = words(800, "config")


def _rereads() -> list[ModelMessage]:
    history: list[ModelMessage] = [user("fix the config", system="be careful"), reply("ok")]
    for n in range(3):
        history += [
            user(f"check again {n}"),
            tool_call("read_file", id=f"r{n}", path="settings.yaml"),
            tool_result("read_file", FILE, id=f"r{n}"),
            tool_call("run", id=f"t{n}"),
            tool_result("run", words(300, f"run{n}"), id=f"t{n}"),
            reply(f"checked {n}"),
        ]
    return history


def _outputs(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]


def test_older_copies_become_references_to_the_newest() -> None:
    history = _rereads()
    governed = govern(history, _tight(1_000_000, **_off(dedupe={"enabled": True})), model=MODEL)
    reads = [p for p in _outputs(governed.messages) if p.tool_name == "read_file"]
    assert [p.content for p in reads[:2]] == [
        "[same output as the later read_file call r2 — ~{} tokens]".format(
            next(
                part.tokens_before
                for m in governed.report.messages
                for part in m.parts
                if part.action == "deduplicated"
            )
        )
    ] * 2
    assert reads[2].content == FILE
    # Different outputs of the same tool stay.
    runs = [p for p in _outputs(governed.messages) if p.tool_name == "run"]
    assert [p.content for p in runs] == [words(300, f"run{n}") for n in range(3)]
    actions = [p.action for m in governed.report.messages for p in m.parts]
    assert actions.count("deduplicated") == 2
    assert "dedupe" in [s.step for s in governed.report.steps]
    assert governed.tokens_after < governed.tokens_before
    assert pairing_problems(governed.messages) == []
    assert govern(governed.messages, governed_policy(), model=MODEL).messages == governed.messages


def governed_policy() -> Policy:
    return _tight(1_000_000, **_off(dedupe={"enabled": True}))


def test_a_copy_is_not_referenced_when_the_newest_is_not_sent_whole() -> None:
    history = _rereads()
    # The newest copy is masked (keep only the last result whole): the older copies stay.
    policy = _tight(1_000_000, **_off(masking={"keep_first": 0, "keep_last": 1, "apply": "always"}))
    governed = govern(history, policy, model=MODEL)
    assert "deduplicated" not in [p.action for m in governed.report.messages for p in m.parts]


def test_small_outputs_and_a_disabled_dedupe_are_left_alone() -> None:
    history = _rereads()
    off = govern(history, _tight(1_000_000, **_off(dedupe={"enabled": False})), model=MODEL)
    assert off.messages == history
    high = _tight(1_000_000, **_off(dedupe={"enabled": True, "min_tokens": 5_000}))
    assert govern(history, high, model=MODEL).messages == history


def test_stored_facts_carry_the_digests() -> None:
    tokenizer = tokenizer_for(MODEL)
    facts = [message_facts(m, tokenizer) for m in _rereads()]
    stored = [MessageFacts.from_json(f.to_json()) for f in facts]
    assert stored == facts
    governed = govern(_rereads(), governed_policy(), model=MODEL, facts=stored)
    assert [p.action for m in governed.report.messages for p in m.parts].count("deduplicated") == 2


def test_structured_outputs_are_the_same_whatever_their_key_order() -> None:
    report = {"passed": 41, "failed": 1, "log": words(400, "trace")}
    reordered = {"log": report["log"], "failed": 1, "passed": 41}
    history: list[ModelMessage] = [user("run the tests", system="be careful"), reply("ok")]
    history += [
        tool_call("run_tests", id="t1"),
        tool_result("run_tests", report, id="t1"),
        reply("1 fails"),
    ]
    history += [
        user("again"),
        tool_call("run_tests", id="t2"),
        tool_result("run_tests", reordered, id="t2"),
    ]
    governed = govern(history, governed_policy(), model=MODEL)
    actions = [p.action for m in governed.report.messages for p in m.parts]
    assert actions.count("deduplicated") == 1


def test_copies_truncated_to_the_same_text_become_a_reference_once() -> None:
    # Every output truncated alike: the copies sent are the same text, so the older becomes a
    # reference at once; left whole, it would be found repeated when the result is governed.
    history = _rereads()
    policy = _tight(
        1_000_000, **_off(tool_output={"limit": 300, "scope": "all"}, dedupe={"enabled": True})
    )
    governed = govern(history, policy, model=MODEL)
    reads = [p for p in _outputs(governed.messages) if p.tool_name == "read_file"]
    assert [p.content.startswith("[same output as the later read_file call r2") for p in reads] == [
        True,
        True,
        False,
    ]
    actions = [p.action for m in governed.report.messages for p in m.parts if p.tool_name]
    assert actions.count("deduplicated") == 2
    assert reads[2].content != FILE  # the newest copy is truncated, as the older were
    assert govern(governed.messages, policy, model=MODEL).messages == governed.messages
