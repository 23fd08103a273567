"""The compaction rule on long sessions: every message before the kept tail that no summary
covers is summarised; the next request may grow to the low-water mark for a summary in place
of what it hid, and is refused only past it; a failing summariser falls back; chained
compactions neither stack nor collapse, and keep the facts earlier ones kept."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from compact_builders import failing_summarizer, generated_session, scripted_summarizer
from engine_builders import MODEL
from pydantic_ai.messages import ModelMessage, SystemPromptPart, ToolCallPart

from ctxhub.governance import Policy, govern
from ctxhub.governance.compact import Compacted, compact
from ctxhub.governance.draft import SummaryDraft
from ctxhub.governance.fact_patterns import FACTS_HEADING
from ctxhub.governance.ledger import contains
from ctxhub.governance.summaries import MARKER, is_summary, summary_count
from tests.messages import reply, tool_call, tool_result, user, words

EXTRACTIVE = "offline:extractive"
AT_64K = Policy(context_window=64_000)


@pytest.fixture(scope="module")
def long_session() -> list[ModelMessage]:
    return generated_session(3_000)


def low_water(history: Sequence[ModelMessage], policy: Policy) -> int:
    """What the next request carries at the low-water mark, worked out from a governed
    request's budget."""
    now = govern(history, policy, model=MODEL)
    return int(now.budget_tokens * policy.hysteresis.low_water) + now.system_tokens


def assert_nothing_unsummarised_before_the_tail(
    history: Sequence[ModelMessage], compacted: Compacted, head: int
) -> None:
    """Every message before the kept tail (the run of original messages ending the compacted
    history) is summarised, or kept verbatim as the head (its first ``head`` messages), a
    system prompt or a protected tool's."""
    out = compacted.messages
    position = {id(message): index for index, message in enumerate(history)}
    tail_start = len(history)
    for message in reversed(out):
        index = position.get(id(message))
        if index is None or index != tail_start - 1:
            break
        tail_start = index
    summarised = set(compacted.report.summarized_indices)
    kept = {position[id(m)] for m in out if id(m) in position}
    for index in range(tail_start):
        if index in summarised:
            continue
        assert index in kept, f"message {index} is neither summarised nor kept"
        message = history[index]
        sticky = any(isinstance(p, SystemPromptPart) for p in message.parts) or any(
            isinstance(p, ToolCallPart) and p.tool_name == "manage_todo_list" for p in message.parts
        )
        protected = sticky or (
            index > 0
            and any(isinstance(p, ToolCallPart) for p in history[index - 1].parts)
            and history[index - 1] in out
        )
        assert index < head or protected, f"message {index} is kept before the tail"


async def test_a_3000_message_session_compacts_at_64k(long_session: list[ModelMessage]) -> None:
    now = govern(long_session, AT_64K, model=MODEL)
    compacted = await compact(long_session, AT_64K, summarizer=EXTRACTIVE, model=MODEL)
    report = compacted.report
    assert report.outcome == "summarized", report.error
    # The window hid most of what the summary replaces: a summary in place of a gap. It
    # stands for all of it but the user messages kept whole beside it.
    replaced = set(report.summarized_indices)
    beside = [i for i in report.kept_user_indices if long_session[i] in compacted.messages]
    assert len(replaced) >= 2_900
    assert report.summarized_messages == len(replaced) - len(beside)
    assert report.hidden_messages >= 2_000
    after = govern(compacted.messages, AT_64K, model=MODEL).tokens_after
    assert report.sent_before == now.tokens_after
    assert after == report.sent_after <= report.sent_after_max
    assert after <= max(low_water(long_session, AT_64K), now.tokens_after)
    assert summary_count(compacted.messages) == 1
    assert_nothing_unsummarised_before_the_tail(long_session, compacted, head=2)


async def test_a_failing_summariser_falls_back_on_a_long_session(
    long_session: list[ModelMessage],
) -> None:
    compacted = await compact(long_session, AT_64K, summarizer=failing_summarizer(), model=MODEL)
    report = compacted.report
    assert report.outcome == "fallback"
    assert report.error is not None
    assert "summariser unavailable" in report.error
    assert compacted.summary is not None
    assert compacted.summary.startswith(MARKER.format(count=report.summarized_messages))
    assert FACTS_HEADING in compacted.summary
    # The newest user's facts are among those the marker keeps.
    assert "Dana Whitfield" in compacted.summary
    assert report.sent_after <= report.sent_after_max
    assert_nothing_unsummarised_before_the_tail(long_session, compacted, head=2)


async def test_three_compactions_of_a_growing_session_leave_one_summary() -> None:
    full = generated_session(1_600, seed=3)
    history, position = full[:600], 600
    first_facts: list[str] = []
    for number, summarizer in enumerate([EXTRACTIVE, failing_summarizer(), EXTRACTIVE]):
        compacted = await compact(history, AT_64K, summarizer=summarizer, model=MODEL)
        report = compacted.report
        assert report.outcome in ("summarized", "fallback"), report.error
        assert report.previous_summaries == min(number, 1)
        assert summary_count(compacted.messages) == 1
        assert compacted.summary is not None
        if number == 0:
            first_facts = [i.text for i in report.ledger if i.kind == "name"]
        # Compacting again at once finds nothing new before the tail.
        again = await compact(compacted.messages, AT_64K, summarizer=EXTRACTIVE, model=MODEL)
        assert again.report.outcome == "nothing_to_compact"
        assert again.messages == compacted.messages
        history = [*compacted.messages, *full[position : position + 500]]
        position += 500
    # The first compaction's facts survive a marker and a second summary.
    assert first_facts
    assert all(name in compacted.summary for name in first_facts)


async def test_a_head_too_large_for_the_room_is_cut_to_its_first_request() -> None:
    task = user("Migrate the billing service to Postgres 16", system="You are careful.")
    history: list[ModelMessage] = [task]
    for n in range(3):  # the first run reads three large files
        history += [
            tool_call("read_file", id=f"h{n}", path=f"billing/schema_{n}.sql"),
            tool_result("read_file", words(6_000, f"col{n}"), id=f"h{n}"),
        ]
    history.append(reply("I read the schemas."))
    for n in range(40):
        history += [user(f"Step {n}: port table t{n}"), reply(f"Ported t{n} to billing_v2.")]
    policy = Policy(context_window=32_000)
    compacted = await compact(history, policy, summarizer=EXTRACTIVE, model=MODEL)
    report = compacted.report
    assert report.outcome == "summarized", report.error
    assert report.head_cut
    assert compacted.messages[0] is task
    assert {1, 2, 3, 4, 5, 6} <= set(report.summarized_indices)
    assert "billing/schema_2.sql" in (compacted.summary or "")
    assert report.sent_after <= low_water(history, policy)


async def test_a_request_that_sends_everything_in_full_never_grows() -> None:
    history = generated_session(120)
    policy = Policy(context_window=64_000, dedupe={"enabled": False})
    now = govern(history, policy, model=MODEL)
    assert now.messages == history
    compacted = await compact(history, policy, summarizer=EXTRACTIVE, model=MODEL)
    report = compacted.report
    assert report.outcome == "summarized", report.error
    assert report.hidden_messages == 0
    assert report.sent_limit == now.tokens_after
    assert report.sent_after < now.tokens_after


async def test_a_merged_summary_that_collapses_is_refused_and_the_earlier_one_stays() -> None:
    # A first compaction at a large window writes a summary full of facts; merging it into a
    # terse summary in a room too small for them would lose them: refused.
    history = generated_session(800, seed=5)
    first = await compact(
        history, Policy(context_window=128_000), summarizer=EXTRACTIVE, model=MODEL
    )
    assert first.report.outcome == "summarized", first.report.error
    grown = [*first.messages, *generated_session(400, seed=6)[2:]]
    terse = scripted_summarizer(SummaryDraft(goal="Keep going.", current_state="Working."))
    merged = await compact(grown, Policy(context_window=16_000), summarizer=terse, model=MODEL)
    report = merged.report
    assert report.outcome == "refused"
    assert report.error is not None
    assert "less than half the" in report.error
    assert "the earlier summary stays" in report.error
    assert merged.messages == grown
    # With room for them, the facts are carried over instead.
    roomy = await compact(grown, Policy(context_window=128_000), summarizer=terse, model=MODEL)
    assert roomy.report.outcome == "summarized", roomy.report.error
    assert roomy.summary is not None
    assert all(contains(roomy.summary, item) for item in first.report.ledger)


async def test_ten_chained_compactions_keep_every_fact_an_earlier_one_kept() -> None:
    # Each user request names five facts: 60 messages between compactions bring some 70, and
    # the ten summaries' facts (about 800) fit the room a 64k window leaves.
    full = generated_session(1_000, seed=3)
    history, position = full[:200], 200
    facts: dict[str, object] = {}
    for _ in range(10):
        compacted = await compact(history, AT_64K, summarizer=EXTRACTIVE, model=MODEL)
        report = compacted.report
        assert report.outcome == "summarized", report.error
        assert report.ledger_omitted == 0
        facts.update({item.text: item for item in report.ledger})
        history = [*compacted.messages, *full[position : position + 60]]
        position += 60
    summary = compacted.summary
    assert summary is not None
    assert all(contains(summary, item) for item in facts.values())  # type: ignore[arg-type]
    assert summary_count(compacted.messages) == 1
    assert [m for m in compacted.messages if is_summary(m)]
