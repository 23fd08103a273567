"""Recall over a stored session, by the database's own full-text search (PostgreSQL here, SQLite's
FTS5 in the smoke run): what the next request hides is found in one call, by the words a model
asks with as well as by what a file wrote (``STG_DB_HOST`` for "staging database host"); what
it sends or a clear hid is not, and a fork searches its own copy."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from ctxhub.governance.recall import pieces
from ctxhub.governance.recall_terms import added_terms
from sessions import services
from sessions.models import AgentSession, MessagePiece
from sessions.services.recall import hidden_now
from tests.factories import make_session
from tests.governed.builders import agentic_session, turn
from tests.messages import reply, tool_call, tool_result, user
from tests.recall_session import Fact, Setting, planted_session, settings_session

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.smoke]


def _planted(owner: Any, facts: int = 230) -> tuple[AgentSession, list[Fact]]:
    session = make_session(owner, model="openai:gpt-4o", policy={"context_window": 32_000})
    history, planted = planted_session(facts)
    services.append_messages(session, history, auto_compact=False)
    return session, planted


def _is_hidden(found: Any, fact: Fact) -> bool:
    return fact.seq in found.messages or (fact.seq, 0) in found.parts


def test_two_hundred_facts_governance_hid_are_found_in_one_call_each(alice: Any) -> None:
    session, facts = _planted(alice)
    found = hidden_now(session)
    hid = [fact for fact in facts if _is_hidden(found, fact)]
    assert len(hid) >= 200, "the generated session must hide at least 200 planted facts"
    sent = str(services.governed_context(session).messages)
    assert not [fact for fact in hid if fact.value in sent]

    recalled = [
        fact
        for fact in hid
        if any(fact.value in hit.excerpt for hit in services.recall(session, fact.query))
    ]
    assert len(recalled) / len(hid) >= 0.95, f"found {len(recalled)} of {len(hid)}"
    # Each answer says what governance did and where: the seq the fact was planted in.
    hit = services.recall(session, hid[0].query, 1)[0]
    assert (hit.seq, hit.kind, hit.tool_name) == (hid[0].seq, "tool output", "read_file")
    assert hit.fate in ("masked", "dropped")


def _settings(owner: Any, settings: int = 60) -> tuple[AgentSession, list[Setting]]:
    session = make_session(owner, model="openai:gpt-4o", policy={"context_window": 16_000})
    history, planted = settings_session(settings)
    services.append_messages(session, history, auto_compact=False)
    found = hidden_now(session)
    return session, [s for s in planted if s.seq in found.messages or (s.seq, 0) in found.parts]


def test_settings_a_file_names_only_by_their_keys_are_found_by_the_words_a_model_asks_with(
    alice: Any,
) -> None:
    session, hid = _settings(alice)
    assert len(hid) >= 50, "the generated session must hide at least 50 settings"
    # "staging database host" for STG_DB_HOST=…, "stgDbHost", stg: db: host: and stg.db.host.
    recalled = [
        s for s in hid if any(s.value in hit.excerpt for hit in services.recall(session, s.query))
    ]
    assert len(recalled) / len(hid) >= 0.95, f"found {len(recalled)} of {len(hid)}"


def test_what_the_next_request_sends_in_full_is_not_searched(alice: Any) -> None:
    session, facts = _planted(alice, facts=230)
    found = hidden_now(session)
    shown = [fact for fact in facts if not _is_hidden(found, fact)]
    assert shown, "the newest facts are sent in full"
    for fact in shown:
        assert not [h for h in services.recall(session, fact.query, 20) if fact.value in h.excerpt]


def test_every_logged_part_is_stored_in_the_engines_pieces(alice: Any) -> None:
    session, _ = _planted(alice, facts=20)
    stored = list(
        MessagePiece.objects.filter(session=session)
        .order_by("seq", "part", "offset")
        .values_list("seq", "part", "offset", "text", "terms")
    )
    expected = [
        (p.seq, p.part, p.offset, p.text, added_terms(p.text))
        for row in session.messages.order_by("seq")
        for p in pieces(row.seq, row.message)
    ]
    assert stored == expected


def test_what_a_clear_hid_is_not_recalled(alice: Any) -> None:
    session, facts = _planted(alice, facts=150)
    fact = next(f for f in facts if _is_hidden(hidden_now(session), f))
    assert services.recall(session, fact.query)
    services.clear(session)
    assert services.recall(session, fact.query) == []


def test_summarised_messages_are_recalled_as_summarised(alice: Any) -> None:
    session = agentic_session(alice, turns=0)
    for n in range(40):
        services.append_messages(session, turn(n))
        services.send_context(session)
    secret = "The vault combination of Orion is 4417-ZED."
    services.append_messages(
        session,
        [
            user("Read the vault notes"),
            tool_call("read_file", id="v1", path="vault.md"),
            tool_result("read_file", f"{'notes ' * 200}\n{secret}\n{'notes ' * 200}", id="v1"),
            reply("Read them."),
        ],
    )
    for n in range(40, 46):
        services.append_messages(session, turn(n))
    job = services.request_compaction(session).job
    job.refresh_from_db()
    assert job.status == "done", job.error
    hits = services.recall(session, "vault combination Orion")
    assert hits
    assert hits[0].fate == "summarised"
    assert "4417-ZED" in hits[0].excerpt
    summary = session.compactions.get().summary
    assert summary.endswith("Search what is no longer shown with recall(query).")


def test_a_fork_recalls_from_its_own_copy(alice: Any) -> None:
    session, facts = _planted(alice, facts=150)
    at = session.messages.count() - 20
    fork = services.fork_session(session, at, actor=alice)
    copied = MessagePiece.objects.filter(session=fork)
    assert copied.count() == MessagePiece.objects.filter(session=session, seq__lte=at).count()
    fields = ("seq", "part", "offset", "text", "terms")
    assert list(copied.order_by("seq", "part", "offset").values_list(*fields)) == list(
        MessagePiece.objects.filter(session=session, seq__lte=at)
        .order_by("seq", "part", "offset")
        .values_list(*fields)
    )
    assert not copied.filter(seq__gt=at).exists()
    fact = next(f for f in facts if _is_hidden(hidden_now(fork), f))
    assert any(fact.value in hit.excerpt for hit in services.recall(fork, fact.query))
    after = [f for f in facts if f.seq > at]
    assert after
    recalled = [
        f for f in after if any(f.value in h.excerpt for h in services.recall(fork, f.query, 20))
    ]
    assert recalled == [], "the fork has no message after its fork point to search"


def test_hostile_queries_find_nothing_and_break_nothing(alice: Any) -> None:
    session, _ = _planted(alice, facts=20)
    for query in (
        "",
        "!!! ::: &&& |||",
        "' OR 1=1 --",
        '"unbalanced',
        "NEAR(a b) AND NOT *",
        "a:* & !b <-> c",
        "\x00\ud800 nul and surrogate",
        "the of and",
        "x" * 5_000,
        "aB" * 2_000,
        "_" * 1_000,
        "DB_" * 300,
        "db cfg env pwd",
    ):
        services.recall(session, query)  # no error is the point; the answers may be empty
    assert services.recall(session, "!!! ::: &&&") == []


def test_pieces_stored_before_they_had_terms_are_given_them_and_found_by_topic(alice: Any) -> None:
    session, hid = _settings(alice, settings=30)
    setting = hid[0]
    executor = MigrationExecutor(connection)
    executor.migrate([("agent_sessions", "0010_message_pieces")])  # no terms, text indexed
    try:
        executor = MigrationExecutor(connection)
        executor.migrate([("agent_sessions", "0011_piece_search_terms")])
        stored = MessagePiece.objects.filter(session=session).values_list("text", "terms")
        assert all(terms == added_terms(text) for text, terms in stored)
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert any(setting.value in hit.excerpt for hit in services.recall(session, setting.query))
