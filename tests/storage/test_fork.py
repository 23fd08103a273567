"""Forking a session at a message: the fork's governed context is what the original's was when
its log ended there, it carries only the active records over that prefix, and the two sessions
go their own ways after."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import Exists, OuterRef
from pydantic_ai.messages import ModelMessagesTypeAdapter

from ctxhub.governance import Policy
from ctxhub.governance.tokens import tokenizer_for
from sessions import services
from sessions.history import REMEMBERED
from sessions.models import (
    AgentSession,
    AuditEvent,
    Clear,
    Compaction,
    EvictedOutput,
    Message,
    Pin,
    SentRequest,
    SessionGovernor,
)
from tests.factories import make_session
from tests.governed.builders import SMALL_POLICY, turn
from tests.messages import user

pytestmark = pytest.mark.django_db(transaction=True)

# Tool outputs of a turn are ~300 tokens: over this, governance evicts them.
POLICY = {**SMALL_POLICY, "eviction": {"threshold_tokens": 200, "preview_chars": 120}}


def governed_bytes(session: AgentSession) -> bytes:
    """The session's next request as a new Governor sends it, as pydantic-ai serialises it
    (passing the policy makes it a new start, whatever the session sent before)."""
    REMEMBERED.clear()
    session.refresh_from_db()
    context = services.governed_context(session, policy=services.session_policy(session))
    return ModelMessagesTypeAdapter.dump_json(context.messages)


def as_original(fork: AgentSession, original: AgentSession, data: bytes) -> bytes:
    """The fork's serialised context with its clear's id read as the original's: the message a
    clear keeps names its clear, and the fork's clear is a copy with an id of its own."""
    mapping = dict(
        zip(
            Clear.objects.filter(session=fork).order_by("id").values_list("id", flat=True),
            Clear.objects.filter(session=original, undone_at__isnull=True)
            .order_by("id")
            .values_list("id", flat=True),
            strict=False,
        )
    )
    text = data.decode()
    for mine, theirs in mapping.items():
        text = text.replace(f'{{"clear":{mine}}}', f'{{"clear":{theirs}}}')
    return text.encode()


def compact(session: AgentSession) -> Compaction:
    job = services.request_compaction(session).job
    job.refresh_from_db()
    assert job.status == "done", job.error
    assert job.outcome != "nothing_to_compact"
    return Compaction.objects.get(job=job)


@dataclass
class Built:
    session: AgentSession
    # The serialised governed context when the log ended at each of these seqs, every record
    # made at that point (but a clear, which starts the next part) included.
    seen: dict[int, bytes] = field(default_factory=dict)
    records: dict[str, Any] = field(default_factory=dict)


def append_turns(session: AgentSession, turns: range) -> int:
    for n in turns:
        services.append_messages(session, turn(n))
    return Message.objects.filter(session=session).count() - 1


@pytest.fixture
def built(alice: Any) -> Built:
    """Compactions, a clear, pins (one undone), evictions and an undone compaction, with the
    governed context noted at each point the log ended."""
    session = make_session(alice, title="Agentic work", policy=POLICY)
    b = Built(session)
    end = append_turns(session, range(6))  # #0..#23
    b.records["pin_early"] = services.pin(session, 4)
    b.records["c1"] = compact(session)
    b.seen[end] = governed_bytes(session)
    end = append_turns(session, range(6, 10))  # #24..#39
    b.records["pin_mid"] = services.pin(session, 28)
    b.seen[end] = governed_bytes(session)
    b.records["clear"] = services.clear(session).record  # from #40
    end = append_turns(session, range(10, 14))  # #40..#55
    services.pin(session, 44)
    b.records["unpinned"] = services.unpin(session, 44)
    b.records["c2"] = compact(session)
    b.seen[end] = governed_bytes(session)
    end = append_turns(session, range(14, 16))  # #56..#63
    b.records["pin_late"] = services.pin(session, 60)
    b.records["c3"] = compact(session)
    services.undo_compaction(session, b.records["c3"].pk)
    b.seen[end] = governed_bytes(session)
    assert sorted(b.seen) == [23, 39, 55, 63]
    assert EvictedOutput.objects.filter(session=session).exists()
    return b


def records_of(session: AgentSession) -> dict[str, list[Any]]:
    return {
        "compactions": list(
            Compaction.objects.filter(session=session)
            .order_by("id")
            .values_list("first_seq", "last_seq", "summary", "replacement", "undone_at")
        ),
        "clears": list(
            Clear.objects.filter(session=session)
            .order_by("id")
            .values_list("from_seq", "undone_at")
        ),
        "pins": list(
            Pin.objects.filter(session=session).order_by("id").values_list("seq", "undone_at")
        ),
    }


def log_of(session: AgentSession) -> list[tuple[Any, ...]]:
    return list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "kind", "payload", "tokens", "encoding", "facts", "content_hash")
    )


def test_a_fork_at_each_point_governs_as_the_original_did_there(built: Built, alice: Any) -> None:
    original = built.session
    for seq, seen in built.seen.items():
        fork = services.fork_session(original, seq, actor=alice)
        assert as_original(fork, original, governed_bytes(fork)) == seen, seq


def test_a_fork_at_the_last_message_sends_exactly_what_the_original_sends(
    built: Built, alice: Any
) -> None:
    original = built.session
    fork = services.fork_session(original, 63, actor=alice)
    assert as_original(fork, original, governed_bytes(fork)) == governed_bytes(original)
    assert log_of(fork) == log_of(original)  # payloads and counting cache, as stored


def test_a_fork_carries_only_the_active_records_over_its_prefix(built: Built, alice: Any) -> None:
    original, r = built.session, built.records
    fork = services.fork_session(original, 55, actor=alice)
    copied = records_of(fork)
    # c1 and c2 (c3 was undone); the clear from #40; pins #4 and #28 (#44 was unpinned, #60 is
    # after the fork).
    assert [c[:2] for c in copied["compactions"]] == [
        (r["c1"].first_seq, r["c1"].last_seq),
        (r["c2"].first_seq, r["c2"].last_seq),
    ]
    assert [c[2] for c in copied["compactions"]] == [r["c1"].summary, r["c2"].summary]
    assert copied["clears"] == [(40, None)]
    assert copied["pins"] == [(4, None), (28, None)]
    assert all(row[-1] is None for rows in copied.values() for row in rows)  # none undone
    assert Message.objects.filter(session=fork).count() == 56
    assert log_of(fork) == log_of(original)[:56]
    # Nothing the original sent, nor its Governor's state, comes along.
    assert not SentRequest.objects.filter(session=fork).exists()
    assert not SessionGovernor.objects.filter(session=fork).exists()

    early = services.fork_session(original, 39, actor=alice)
    assert [c[:2] for c in records_of(early)["compactions"]] == [
        (r["c1"].first_seq, r["c1"].last_seq)
    ]
    # The clear was made after #39, from #40: the fork at #39 still sees the conversation.
    assert records_of(early)["clears"] == []
    assert records_of(early)["pins"] == [(4, None), (28, None)]


def test_a_compaction_reaching_past_the_fork_is_not_copied(built: Built, alice: Any) -> None:
    c1 = built.records["c1"]
    fork = services.fork_session(built.session, c1.last_seq - 1, actor=alice)
    assert not Compaction.objects.filter(session=fork).exists()
    assert records_of(fork)["pins"] == [(4, None)]


def test_supersedes_points_at_the_copy(alice: Any) -> None:
    session = make_session(alice, policy=POLICY)
    append_turns(session, range(8))
    first = compact(session)
    append_turns(session, range(8, 14))
    second = compact(session)
    assert second.supersedes_id == first.pk
    fork = services.fork_session(session, 55, actor=alice)
    copies = list(Compaction.objects.filter(session=fork).order_by("id"))
    assert len(copies) == 2
    assert copies[1].supersedes_id == copies[0].pk
    assert [c.job_id for c in copies] == [None, None]  # the jobs stay the original's


def test_evicted_outputs_of_the_prefix_read_back_on_the_fork(built: Built, alice: Any) -> None:
    original = built.session
    fork = services.fork_session(original, 55, actor=alice)
    # Copied with the fork, before it is ever governed: every output of turns 0-13 (#0-#55)
    # the original evicted, and none of the turns after.
    stored = dict(EvictedOutput.objects.filter(session=fork).values_list("ref", "text"))
    originals = dict(EvictedOutput.objects.filter(session=original).values_list("ref", "text"))
    later = {ref for ref, text in originals.items() if "t14x" in text or "t15x" in text}
    assert later
    assert stored == {ref: text for ref, text in originals.items() if ref not in later}
    # Every reference the fork's request quotes reads back.
    quoted = set(re.findall(r"ev_[0-9a-f]{20}", governed_bytes(fork).decode()))
    assert quoted
    for ref in quoted:
        assert services.read_evicted_output(fork, ref) is not None, ref


def test_the_original_is_unchanged_and_each_goes_its_own_way(built: Built, alice: Any) -> None:
    original = built.session
    log_before, records_before = log_of(original), records_of(original)
    context_before = governed_bytes(original)

    fork = services.fork_session(original, 39, actor=alice)
    assert log_of(original) == log_before
    assert records_of(original) == records_before
    assert governed_bytes(original) == context_before

    services.append_messages(fork, [user("Try it another way")])
    services.pin(fork, 40)
    services.clear(fork)
    assert log_of(original) == log_before
    assert records_of(original) == records_before
    assert governed_bytes(original) == context_before
    assert Message.objects.filter(session=fork).count() == 41

    services.append_messages(original, [user("Carry on")])
    assert Message.objects.filter(session=fork).count() == 41


def test_the_new_session_and_the_audit_trail(built: Built, alice: Any, bob: Any) -> None:
    original = built.session
    original.tool_definitions = [{"name": "grep", "description": "Search", "parameters": {}}]
    original.save()
    bob.is_staff = True
    bob.save()

    fork = services.fork_session(original, 23, actor=bob)
    assert fork.owner == bob  # staff forking another's session get their own
    assert fork.title == "Agentic work (fork at #23)"
    assert (fork.model, fork.policy, fork.tool_definitions) == (
        original.model,
        original.policy,
        original.tool_definitions,
    )
    said = AuditEvent.objects.get(session=original, verb="fork")
    assert said.data == {
        "seq": 23,
        "fork": str(fork.pk),
        "title": fork.title,
        "text": f"forked at #23 into 'Agentic work (fork at #23)' ({fork.pk})",
    }
    assert said.actor == bob
    told = AuditEvent.objects.get(session=fork, verb="forked")
    assert told.data == {
        "seq": 23,
        "source": str(original.pk),
        "title": original.title,
        "text": f"forked from 'Agentic work' ({original.pk}) at #23",
    }

    other = services.fork_session(
        original,
        23,
        actor=alice,
        title="Cheaper",
        model="anthropic:claude-sonnet-4-5",
        policy=Policy.model_validate({"reserved_output_tokens": 1_000}),
    )
    assert (other.title, other.model, other.policy) == (
        "Cheaper",
        "anthropic:claude-sonnet-4-5",
        {"reserved_output_tokens": 1_000},
    )


def test_a_model_counting_with_another_encoding_is_recounted(built: Built, alice: Any) -> None:
    original = built.session
    assert (
        tokenizer_for("openai:gpt-4").encoding_name != tokenizer_for(original.model).encoding_name
    )
    fork = services.fork_session(original, 23, actor=alice, model="openai:gpt-4")
    encoding = tokenizer_for("openai:gpt-4").encoding_name
    assert set(Message.objects.filter(session=fork).values_list("encoding", flat=True)) == {
        encoding
    }
    assert services.recount_tokens(fork).recounted == 0  # already counted as the model counts
    assert services.token_totals(fork).encoding == encoding


@pytest.mark.parametrize("seq", [-1, 64, 10**12, "3", 2.0, True, None])
def test_a_seq_the_log_does_not_hold_is_refused(built: Built, alice: Any, seq: Any) -> None:
    sessions = AgentSession.objects.count()
    with pytest.raises(services.Invalid) as refused:
        services.fork_session(built.session, seq, actor=alice)
    assert refused.value.field == "seq"
    assert AgentSession.objects.count() == sessions


def test_an_empty_session_cannot_be_forked(alice: Any) -> None:
    with pytest.raises(services.Invalid):
        services.fork_session(make_session(alice), 0, actor=alice)


def test_a_policy_without_room_is_refused(built: Built, alice: Any) -> None:
    crowded = Policy.model_validate({"reserved_output_tokens": 127_000})
    with pytest.raises(services.Invalid) as refused:
        services.fork_session(built.session, 3, actor=alice, policy=crowded)
    assert refused.value.field == "policy"


def test_the_demo_tour_and_a_compacted_demo_session_fork_at_their_ends(alice: Any) -> None:
    call_command("seed_demo", "--username", "demo-fork", stdout=StringIO())
    demo = AgentSession.objects.filter(owner__username="demo-fork")
    tour = demo.get(title__startswith="Tour: every governance action")
    compacted = demo.filter(Exists(Compaction.objects.filter(session=OuterRef("pk")))).first()
    assert compacted is not None
    for session in (tour, compacted):
        last = Message.objects.filter(session=session).count() - 1
        fork = services.fork_session(session, last, actor=alice)
        assert (
            Pin.objects.filter(session=fork).count()
            == Pin.objects.filter(session=session, undone_at__isnull=True).count()
        )
        assert (
            Compaction.objects.filter(session=fork).count()
            == Compaction.objects.filter(session=session, undone_at__isnull=True).count()
        )
        assert as_original(fork, session, governed_bytes(fork)) == governed_bytes(session), (
            session.title
        )
