"""The governed session through its services: preview, compaction, clear, pins, undo, eviction.

Jobs run eagerly here (the real worker is in tests/jobs); every result is checked against a cold
``govern`` of an independently built effective history (tests/governed/oracle.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from ctxhub.governance import history_figures as engine_history_figures
from sessions import services, snapshots
from sessions.history import REMEMBERED, effective_history
from sessions.models import (
    AppendOnlyError,
    AuditEvent,
    Clear,
    Compaction,
    CompactionJob,
    EvictedOutput,
    GovernedSnapshot,
    Message,
)
from sessions.services import governed as governed_module
from tests.factories import make_session
from tests.governed.builders import SMALL_POLICY, agentic_session, turn
from tests.governed.oracle import dump, naive_governed, naive_history
from tests.messages import agent_turns, tool_result, user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.smoke]


def assert_matches_cold_govern(session: Any) -> None:
    session.refresh_from_db()
    context = services.governed_context(session)
    cold = naive_governed(session, services.session_policy(session))
    assert dump(context.messages) == dump(cold.messages)
    assert context.report.model_dump() == cold.report.model_dump()


def effective_dump(session: Any) -> list[Any]:
    return dump(naive_history(session)[0])


def compact(session: Any, **kw: Any) -> Compaction:
    job = services.request_compaction(session, **kw).job
    job.refresh_from_db()
    assert job.status == "done", job.error
    return Compaction.objects.get(job=job)


def test_governed_context_of_a_stored_session_equals_a_cold_govern(alice: Any) -> None:
    session = agentic_session(alice)
    services.append_messages(session, turn(99, dangling=True))
    assert_matches_cold_govern(session)


def test_preview_then_compact_touches_exactly_the_previewed_set(alice: Any) -> None:
    session = agentic_session(alice)
    log_before = list(Message.objects.filter(session=session).values_list("seq", "content_hash"))
    preview = services.preview_compaction(session)
    assert preview.summarized_seqs
    assert not preview.nothing_to_compact
    assert set(preview.summarized_seqs).isdisjoint(preview.kept_seqs)

    record = compact(session, expected=preview.fingerprint)

    assert record.summarized_seqs == preview.summarized_seqs
    assert (record.first_seq, record.last_seq) == (preview.first_seq, preview.last_seq)
    shown = {s for s in naive_history(session)[1] if s is not None}
    assert shown == set(preview.kept_seqs)
    assert record.tokens_after < record.tokens_before
    # The log itself is untouched.
    after = list(Message.objects.filter(session=session).values_list("seq", "content_hash"))
    assert after == log_before
    assert_matches_cold_govern(session)
    event = AuditEvent.objects.get(session=session, verb="compact")
    assert event.tokens_before is not None
    assert event.tokens_after is not None


def test_an_append_between_preview_and_compact_is_a_conflict(alice: Any) -> None:
    session = agentic_session(alice)
    preview = services.preview_compaction(session)
    services.append_message(session, user("one more thing"))
    with pytest.raises(services.Conflict):
        services.request_compaction(session, expected=preview.fingerprint)
    assert not CompactionJob.objects.filter(session=session).exists()


def test_undo_restores_the_effective_history_exactly(alice: Any) -> None:
    session = agentic_session(alice, turns=10)
    original = effective_dump(session)

    first = compact(session)
    once = effective_dump(session)
    assert once != original

    # Compacting the compacted history merges the summaries (the newer supersedes).
    services.append_messages(session, [m for n in range(10, 16) for m in turn(n)])
    grown = effective_dump(session)
    second = compact(session)
    assert second.supersedes_id == first.pk
    assert second.first_seq <= first.first_seq
    assert_matches_cold_govern(session)

    services.undo_compaction(session, second.pk)
    assert effective_dump(session) == grown
    services.undo_compaction(session, first.pk)
    assert effective_dump(session)[: len(original)] == original

    cleared = services.clear(session).record
    # Only what the clear keeps: the system prompt of the first turn.
    kept = naive_history(session)[0]
    assert [type(p).__name__ for m in kept for p in m.parts] == ["SystemPromptPart"]
    assert_matches_cold_govern(session)
    services.undo_clear(session, cleared.pk)
    assert effective_dump(session)[: len(original)] == original
    assert_matches_cold_govern(session)
    verbs = list(AuditEvent.objects.filter(session=session).values_list("verb", flat=True))
    assert sorted(verbs) == sorted(["compact", "compact", "undo_compaction", "undo_compaction",
                                    "clear", "undo_clear"])  # fmt: skip


def test_pins_survive_compaction_and_the_newest_request_stays_verbatim(alice: Any) -> None:
    # A window with room for the head, the pinned results and a summary in what is sent now.
    session = agentic_session(alice, context_window=24_000)
    pinned = 9  # a tool result in the middle of the history
    services.pin(session, pinned)
    newest = services.append_message(session, user("Now deploy it to staging-eu-2, please."))

    record = compact(session)

    assert pinned not in record.summarized_seqs
    history, seqs = naive_history(session)
    assert pinned in seqs
    assert newest.seq in seqs
    stored = Message.objects.get(session=session, seq=pinned)
    assert dump([history[seqs.index(pinned)]]) == [stored.payload]
    governed = services.governed_context(session)
    sent = dump(governed.messages)
    assert stored.payload in sent
    assert newest.payload == sent[-1]
    assert_matches_cold_govern(session)


def test_clear_hides_everything_before_it_and_pins_need_a_visible_message(alice: Any) -> None:
    session = agentic_session(alice, turns=3)
    services.clear(session)
    with pytest.raises(services.Conflict):
        services.clear(session)  # nothing left to clear
    with pytest.raises(services.Invalid):
        services.pin(session, 2)
    with pytest.raises(services.NotFound):
        services.pin(session, 999)
    with pytest.raises(services.NotFound):
        services.unpin(session, 2)
    services.append_messages(session, turn(7))
    assert [s for s in naive_history(session)[1]] == [None, 12, 13, 14, 15]
    assert_matches_cold_govern(session)


def test_records_are_append_only(alice: Any) -> None:
    session = agentic_session(alice, turns=10)
    record = compact(session)
    record.summary = "rewritten"
    with pytest.raises(AppendOnlyError):
        record.save()
    with pytest.raises(AppendOnlyError):
        record.delete()
    cleared = services.clear(session).record
    with pytest.raises(AppendOnlyError):
        Clear.objects.get(pk=cleared.pk).delete()
    services.undo_clear(session, cleared.pk)
    with pytest.raises(services.Conflict):
        services.undo_clear(session, cleared.pk)
    assert Compaction.objects.get(pk=record.pk).summary != "rewritten"


def test_a_preview_applied_twice_compacts_once(alice: Any) -> None:
    # Jobs run eagerly here, so the first request has compacted before the second arrives:
    # the second is refused as stale. (While a job is pending, the same request returns that
    # job: tests/jobs/test_compaction_jobs.py, with a real worker.)
    session = agentic_session(alice)
    preview = services.preview_compaction(session, focus="the database hosts")
    first = services.request_compaction(
        session, focus="the database hosts", expected=preview.fingerprint
    )
    assert first.created
    with pytest.raises(services.Conflict):
        services.request_compaction(
            session, focus="the database hosts", expected=preview.fingerprint
        )
    assert Compaction.objects.filter(session=session).count() == 1


def test_nothing_to_compact_finishes_the_job_without_a_record(alice: Any) -> None:
    session = make_session(alice, policy=SMALL_POLICY)
    services.append_messages(session, turn(0, size=20))
    preview = services.preview_compaction(session)
    assert preview.nothing_to_compact
    job = services.request_compaction(session).job
    job.refresh_from_db()
    assert (job.status, job.outcome) == ("done", "nothing_to_compact")
    assert not Compaction.objects.filter(session=session).exists()


def test_evicted_outputs_are_stored_and_read_back_by_reference(alice: Any) -> None:
    policy = {**SMALL_POLICY, "eviction": {"threshold_tokens": 400, "preview_chars": 200}}
    session = make_session(alice, policy=policy)
    big = "\n".join(f"row {i}: status={'FAILED' if i % 50 == 7 else 'ok'}" for i in range(600))
    services.append_messages(
        session,
        [user("Check the rows"), *turn(1)[1:2], tool_result("read_file", big, id="c1_0")],
    )
    context = services.governed_context(session)
    assert context.report.evicted_refs
    ref = context.report.evicted_refs[0]
    stored = EvictedOutput.objects.get(session=session, ref=ref)
    assert stored.text == big
    assert stored.tokens > 400
    page = services.read_evicted_output(session, ref, grep="FAILED", limit=5)
    assert page is not None
    assert "row 7: status=FAILED" in page
    assert "row 8:" not in page
    assert services.read_evicted_output(session, "ev-unknown") is None
    assert services.read_evicted_output(make_session(alice), ref) is None


def test_history_figures_are_the_engines_figures_of_the_effective_history(alice: Any) -> None:
    session = agentic_session(alice)
    compact(session)
    session.refresh_from_db()
    figures = services.history_figures(session)
    expected = engine_history_figures(
        naive_history(session)[0],
        model=session.model,
        policy=services.session_policy(session),
    )
    assert figures.model_dump() == expected.model_dump()


def test_an_auto_compaction_runs_once_the_soft_threshold_is_crossed(alice: Any) -> None:
    session = make_session(
        alice,
        policy={**SMALL_POLICY, "compaction": {"auto": True, "soft_threshold": 0.8}},
    )
    threshold = services.soft_threshold(session)
    jobs = CompactionJob.objects.filter(session=session)
    n = 0
    while not jobs.exists():
        # Below the threshold, appends queue nothing; the one that crosses it does.
        assert effective_history(session).tokens < threshold
        services.append_messages(session, turn(n, size=40))
        n += 1
    assert n > 3  # a middle to summarise between the first turn and the current one
    job = jobs.get()
    assert (job.trigger, job.status) == ("auto", "done")
    assert effective_history(session).tokens < threshold


def test_a_session_window_set_apart_from_the_policy_is_the_one_compaction_plans_by(
    alice: Any,
) -> None:
    # The window given with the session (not in its policy) is what governance and the
    # automatic trigger measure; a compaction planned by the model's far larger window would
    # keep everything recent and find nothing to summarise.
    policy = {k: v for k, v in SMALL_POLICY.items() if k != "context_window"}
    session = make_session(
        alice,
        context_window=6_000,
        policy={**policy, "compaction": {"auto": True, "soft_threshold": 0.8}},
    )
    jobs = CompactionJob.objects.filter(session=session)
    n = 0
    while not jobs.exists():
        services.append_messages(session, turn(n, size=40))
        n += 1
    job = jobs.get()
    assert (job.trigger, job.status, job.outcome) == ("auto", "done", "summarized")
    assert effective_history(session).tokens < services.soft_threshold(session)


def test_auto_compaction_stops_after_three_runs_that_do_not_shrink_enough(alice: Any) -> None:
    # A threshold so low that no compaction gets under it: every run is ineffective.
    session = make_session(
        alice,
        policy={**SMALL_POLICY, "compaction": {"auto": True, "soft_threshold": 0.01}},
    )
    for n in range(8):
        services.append_messages(session, turn(n))
    jobs = CompactionJob.objects.filter(session=session, trigger="auto")
    assert jobs.count() == 3
    session.refresh_from_db()
    assert "stopped after 3 automatic compactions" in session.auto_compaction_paused
    services.resume_auto_compaction(session)
    services.append_messages(session, turn(9))
    assert jobs.count() == 4


def test_a_process_that_never_governed_a_session_reads_its_snapshot(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = agentic_session(alice)
    first = services.governed_context(session)  # governed cold: the snapshot is written
    assert GovernedSnapshot.objects.filter(session=session).exists()

    REMEMBERED.clear()  # as in another process
    monkeypatch.setattr(governed_module, "effective_history", _must_not_govern)
    again = services.governed_context(session)
    assert dump(again.messages) == dump(first.messages)
    assert again.report == first.report
    assert again.seqs == first.seqs
    monkeypatch.undo()

    # Anything that decides the result makes the snapshot stale: it is not read.
    services.append_messages(session, turn(40))
    REMEMBERED.clear()
    monkeypatch.setattr(governed_module, "effective_history", _must_not_govern)
    with pytest.raises(AssertionError, match="governed cold"):
        services.governed_context(session)
    monkeypatch.undo()
    assert_matches_cold_govern(session)
    monkeypatch.setattr(snapshots, "engine_fingerprint", lambda: "other engine code")
    REMEMBERED.clear()
    monkeypatch.setattr(governed_module, "effective_history", _must_not_govern)
    with pytest.raises(AssertionError, match="governed cold"):
        services.governed_context(session)


def _must_not_govern(session: Any) -> Any:
    raise AssertionError("governed cold instead of reading the snapshot")


def test_a_process_keeps_the_histories_that_fit_its_token_budget(alice: Any, settings: Any) -> None:
    small = [make_session(alice, title=f"small {i}") for i in range(4)]
    for session in small:
        services.append_messages(session, [user("hello")], auto_compact=False)
    large = make_session(alice, title="large")
    services.append_messages(large, agent_turns(3, 2, "lorem ipsum " * 500), auto_compact=False)
    weight = REMEMBERED.ENTRY_TOKENS  # what each small history counts for
    settings.CTXHUB_REMEMBERED_TOKENS = 3 * weight
    REMEMBERED.clear()

    for session in small:
        effective_history(session)
    # The oldest built went to make room; the three that fit stay warm.
    assert REMEMBERED.get(small[0].pk) is None
    assert all(REMEMBERED.get(s.pk) is not None for s in small[1:])

    REMEMBERED.get(small[1].pk)  # read: now the most recently used of the three
    built = effective_history(large)
    assert built.tokens > 3 * weight
    # Larger than the whole budget: it alone stays, for the request that built it.
    assert REMEMBERED.get(large.pk) is built
    assert len(REMEMBERED) == 1

    settings.CTXHUB_REMEMBERED_TOKENS = built.tokens + weight
    effective_history(small[1])
    effective_history(small[2])
    # Room for one small history beside the large one: the least recently used, the large, went.
    assert REMEMBERED.get(large.pk) is None
    assert REMEMBERED.get(small[2].pk) is not None
    assert REMEMBERED.get(small[1].pk) is not None
