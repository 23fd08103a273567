"""Eviction of large outputs: preview, reference, evicted texts returned, read back."""

from __future__ import annotations

from engine_builders import MODEL, _off, _tight

from ctxhub.governance import InMemoryEvictionStore, govern, read_evicted
from ctxhub.governance.steps.evict import eviction_ref
from tests.messages import reply, tool_call, tool_result, user

BIG = 1_000_000
LOG = "\n".join(f"{n:05d} INFO request served in {n % 97} ms" for n in range(6000))


def _history(content: str = LOG) -> list:  # type: ignore[type-arg]
    return [
        user("go"),
        tool_call("logs", id="c1"),
        tool_result("logs", content, id="c1"),
        reply("ok"),
    ]


def _evicting(threshold: int = 1000, **extra: object) -> dict[str, object]:
    return _off(eviction={"threshold_tokens": threshold, "preview_chars": 500, **extra})


def test_large_output_becomes_a_preview_with_a_reference() -> None:
    governed = govern(_history(), _tight(BIG, **_evicting()), model=MODEL)
    content = governed.messages[2].parts[0].content  # type: ignore[union-attr]
    ref = eviction_ref(LOG)
    assert content.startswith("[output evicted: ~")
    assert f"reference {ref}" in content
    assert "read_evicted_output(ref=" in content
    assert "00000 INFO" in content
    assert "[… 5990 more lines]" in content
    assert governed.evicted == {ref: LOG}
    part = governed.report.messages[2].parts[0]
    assert (part.action, part.ref) == ("evicted", ref)
    assert governed.report.evicted_refs == [ref]


def test_small_outputs_stay() -> None:
    governed = govern(_history("short"), _tight(BIG, **_evicting()), model=MODEL)
    assert governed.evicted == {}


def test_eviction_is_idempotent() -> None:
    policy = _tight(BIG, **_evicting())
    once = govern(_history(), policy, model=MODEL)
    twice = govern(once.messages, policy, model=MODEL)
    assert twice.messages == once.messages
    assert twice.evicted == {}


def test_same_content_gives_the_same_reference() -> None:
    policy = _tight(BIG, **_evicting())
    first = govern(_history(), policy, model=MODEL)
    second = govern(_history(), policy, model=MODEL)
    assert first.evicted == second.evicted


def test_read_back_with_offset_limit_and_grep() -> None:
    store = InMemoryEvictionStore()
    governed = govern(_history(), _tight(BIG, **_evicting()), model=MODEL)
    store.put_all(governed.evicted)
    (ref,) = governed.evicted
    page = read_evicted(store.get(ref), ref, offset=10, limit=3)
    assert page.splitlines()[1:] == [
        "10: 00010 INFO request served in 10 ms",
        "11: 00011 INFO request served in 11 ms",
        "12: 00012 INFO request served in 12 ms",
    ]
    assert "the output has 6000 lines" in page
    found = read_evicted(store.get(ref), ref, grep=r"served in 96 ms", limit=2)
    assert found.splitlines()[1:] == [
        "96: 00096 INFO request served in 96 ms",
        "193: 00193 INFO request served in 96 ms",
    ]


def test_unknown_reference_and_bad_pattern_are_explained() -> None:
    assert "No evicted output" in read_evicted(None, "ev_nope")
    assert "Invalid grep pattern" in read_evicted("a", "ev_x", grep="(")


def test_evicted_texts_are_those_the_governed_history_refers_to() -> None:
    # Both outputs are evicted, then masking replaces the older one by its placeholder: the
    # model never sees that reference, so its text is not handed back to be stored.
    older = LOG.replace("INFO", "WARN")
    history = [
        user("go"),
        tool_call("logs", id="c1"),
        tool_result("logs", older, id="c1"),
        tool_call("logs", id="c2"),
        tool_result("logs", LOG, id="c2"),
        reply("ok"),
        user("and now?"),
    ]
    policy = _tight(300, **{**_evicting(), "masking": {"keep_first": 0, "keep_last": 1}})
    governed = govern(history, policy, model=MODEL)
    sent = [p.content for m in governed.messages for p in m.parts if p.part_kind == "tool-return"]
    assert sent[0].startswith("[result masked")
    assert f"reference {eviction_ref(LOG)}" in sent[1]
    assert governed.evicted == {eviction_ref(LOG): LOG}
    assert governed.report.evicted_refs == [eviction_ref(LOG)]
