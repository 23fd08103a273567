"""Iteration-group dropping and the proportional shrink of the newest outputs."""

from __future__ import annotations

from engine_builders import MODEL, _off, _tight, continued_and_rebuilt
from pydantic_ai.messages import ModelMessage

from ctxhub.governance import Governor, govern, pairing_problems
from tests.messages import tool_call, tool_result, user, words


def _loop(n: int, size: int = 300) -> list[ModelMessage]:
    history: list[ModelMessage] = [user("fix the bug")]
    for i in range(n):
        history += [
            tool_call("run", id=f"r{i}"),
            tool_result("run", words(size, f"o{i}"), id=f"r{i}"),
        ]
    return history


def test_oldest_groups_of_the_turn_are_dropped_first() -> None:
    history = _loop(8)
    governed = govern(history, _tight(1200, **_off(drop_groups=True)), model=MODEL)
    assert governed.fits
    assert governed.messages[0] is history[0]
    assert governed.messages[-2:] == history[-2:]
    assert history[1] not in governed.messages
    assert pairing_problems(governed.messages) == []
    dropped = [m.index for m in governed.report.messages if not m.kept]
    assert dropped == list(range(1, 1 + len(dropped)))
    step = next(s for s in governed.report.steps if s.step == "drop_groups")
    assert step.parts > 0
    assert step.tokens_removed > 0


def test_the_newest_group_is_always_kept() -> None:
    history = _loop(3, size=3000)
    governed = govern(history, _tight(1000, **_off(drop_groups=True)), model=MODEL)
    assert governed.messages[-2:] == history[-2:]
    assert not governed.fits
    assert governed.report.reason


def test_shrink_cuts_the_newest_outputs_proportionally_to_fit() -> None:
    history = [user("go"), tool_call("a", id="a"), tool_result("a", words(3000), id="a")]
    history += [tool_call("b", id="b"), tool_result("b", words(1000), id="b")]
    policy = _tight(1500, **_off(drop_groups=False, shrink_newest=True))
    governed = govern(history, policy, model=MODEL)
    assert governed.fits
    parts = [m.parts[0] for m in governed.report.messages]
    assert parts[2].action == "truncated"
    assert parts[4].action == "truncated"
    cut_a = parts[2].tokens_before - parts[2].tokens_after
    cut_b = parts[4].tokens_before - parts[4].tokens_after
    assert cut_a > 2 * cut_b
    assert [s.step for s in governed.report.steps] == ["shrink"]


def test_when_nothing_can_make_it_fit_the_report_says_why() -> None:
    history = [user(words(5000))]
    governed = govern(history, _tight(1000), model=MODEL)
    assert not governed.fits
    assert governed.messages == history
    assert "latest user request" in (governed.report.reason or "")


def test_no_budget_at_all_is_explained() -> None:
    governed = govern([user("hi", system=words(2000))], _tight(1000), model=MODEL)
    assert governed.budget_tokens == 0
    assert "no budget left" in (governed.report.reason or "")


def test_the_shrink_counts_masked_results_as_masked_warm_or_cold() -> None:
    # A large older result is masked; the current turn's output must still shrink. The cut
    # is decided on the exact excess, so it is the same whether the masked result was governed
    # by this call (cold) or carried over from the previous one (warm).
    masking = {"keep_first": 0, "keep_last": 1, "apply": "always"}
    policy = _tight(300, **_off(masking=masking, shrink_newest=True))
    history: list[ModelMessage] = [user("task 0")]
    for n, size in enumerate([5, 2000, 5, 5]):
        history += [tool_call("read", id=f"c{n}"), tool_result("read", words(size), id=f"c{n}")]
    history += [
        user("task 1"),
        tool_call("read", id="c9"),
        tool_result("read", words(2000), id="c9"),
    ]
    governor = Governor(policy, model=MODEL)
    for size in range(1, len(history) + 1):
        warm, cold = continued_and_rebuilt(governor, history[:size])
        assert warm.messages == cold.messages, size
    assert cold.fits
    shrunk = cold.report.messages[-1].parts[0]
    assert shrunk.action == "truncated"
    # Cut only by what the budget needs (a last resort does not aim at the low-water mark),
    # not by the masked result's original size.
    assert cold.budget_tokens - 20 < cold.tokens_after <= cold.budget_tokens
