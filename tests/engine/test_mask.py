"""Observation masking: keep first N and last M results, mask the middle, calls visible."""

from __future__ import annotations

from engine_builders import MODEL, _off, _tight
from pydantic_ai.messages import ModelMessage, ToolCallPart

from ctxhub.governance import Policy, count_tokens, govern
from tests.messages import tool_call, tool_result, user, words


def _loop(n: int) -> list[ModelMessage]:
    history: list[ModelMessage] = [user("investigate")]
    for i in range(n):
        history += [
            tool_call("grep", id=f"g{i}"),
            tool_result("grep", words(200, f"r{i}"), id=f"g{i}"),
        ]
    return history


def _masking(**masking: object) -> dict[str, object]:
    return _off(masking={"keep_first": 2, "keep_last": 3, **masking})


def _results(messages: list[ModelMessage]) -> list[str]:
    return [m.parts[0].content for m in messages[2::2]]  # type: ignore[union-attr]


def test_middle_results_are_masked_when_over_budget() -> None:
    history = _loop(10)
    governed = govern(history, _tight(2500, **_masking()), model=MODEL)
    results = _results(governed.messages)
    assert results[:2] == _results(history)[:2]
    assert results[-3:] == _results(history)[-3:]
    masked = results[2:7]
    assert all(r.startswith("[result masked — ~") for r in masked)
    assert all(r.endswith(" tokens removed]") for r in masked)
    calls = [p for m in governed.messages for p in m.parts if isinstance(p, ToolCallPart)]
    assert len(calls) == 10
    assert [m.parts[0].action for m in governed.report.messages[2::2]].count("masked") == 5
    assert governed.fits


def test_nothing_is_masked_when_the_history_fits() -> None:
    history = _loop(10)
    governed = govern(history, _tight(100_000, **_masking()), model=MODEL)
    assert governed.messages == history


def test_always_masks_even_when_it_fits() -> None:
    governed = govern(_loop(10), _tight(100_000, **_masking(apply="always")), model=MODEL)
    assert sum(r.startswith("[result masked") for r in _results(governed.messages)) == 5


def test_few_results_are_never_masked() -> None:
    history = _loop(5)
    governed = govern(history, _tight(800, **_masking()), model=MODEL)
    assert _results(governed.messages) == _results(history)


def test_masking_is_idempotent() -> None:
    policy = _tight(2500, **_masking(apply="always"))
    once = govern(_loop(10), policy, model=MODEL)
    assert govern(once.messages, policy, model=MODEL).messages == once.messages


def test_the_placeholder_states_the_tokens_removed() -> None:
    history = _loop(10)
    governed = govern(history, _tight(2500, **_masking()), model=MODEL)
    masked = governed.report.messages[6].parts[0]
    original = count_tokens(history[6:7], model=MODEL) - 3  # message framing
    assert masked.tokens_before == original
    assert f"~{original} tokens removed" in governed.messages[6].parts[0].content  # type: ignore[union-attr]


def _writes(n: int) -> list[ModelMessage]:
    """An agent writing files in full: each call's arguments hold the whole file."""
    history: list[ModelMessage] = [user("write the module")]
    for i in range(n):
        content = "\n".join(f"line {j} of file {i}: x = {j}" for j in range(120))
        history += [
            tool_call("write_file", id=f"w{i}", path=f"src/f{i}.py", content=content, mode="w"),
            tool_result("write_file", words(200, f"ok{i}"), id=f"w{i}"),
        ]
    return history


def _call_args(messages: list[ModelMessage]) -> list[dict[str, object]]:
    return [p.args_as_dict() for m in messages for p in m.parts if isinstance(p, ToolCallPart)]


def test_the_inputs_of_masked_results_are_masked_with_them_when_asked() -> None:
    history = _writes(8)
    masking = {"keep_first": 0, "keep_last": 2, "apply": "always"}
    plain = govern(history, Policy.model_validate(_off(masking=masking)), model=MODEL)
    policy = Policy.model_validate(_off(masking={**masking, "inputs": True}))
    governed = govern(history, policy, model=MODEL)
    args, original = _call_args(governed.messages), _call_args(history)
    # The six older calls lose their file, but keep its path and the short values.
    for masked, was in zip(args[:6], original[:6], strict=True):
        assert masked["path"] == was["path"]
        assert masked["mode"] == "w"
        assert str(masked["content"]).startswith("[input masked — ~")
    assert args[6:] == original[6:]  # their results are not masked: nor are they
    assert _results(governed.messages)[:6] == _results(plain.messages)[:6]
    assert governed.tokens_after < plain.tokens_after
    mask = next(step for step in governed.report.steps if step.step == "mask")
    assert mask.parts == 12  # six results and six calls
    assert govern(governed.messages, policy, model=MODEL).messages == governed.messages
    # Off by default: the calls go as they are.
    assert _call_args(plain.messages) == original
