"""Slash commands typed in the chat go through the same services as the buttons."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sessions import services
from sessions.chat import commands, turns
from sessions.figures import job_words
from sessions.models import AuditEvent, Clear, Compaction, CompactionJob, Pin
from sessions.services import Conflict, Invalid, NotFound
from sessions.xray import xray
from tests.factories import make_session
from tests.messages import agent_turns, reply, user

pytestmark = pytest.mark.django_db


@pytest.fixture
def session(alice: Any) -> Any:
    session = make_session(alice, title="Long", model="openai:gpt-4o", context_window=16_000)
    history = agent_turns(12, 3, "row\n" * 400, "Migrate db-west-3 for OPS-1234")
    services.append_messages(session, history, auto_compact=False)
    return session


@pytest.mark.smoke
@pytest.mark.django_db(transaction=True)  # the job is dispatched when the request commits
def test_compact_summarises_now_with_the_focus_and_records_it(session: Any, alice: Any) -> None:
    before = services.governed_context(session).report.tokens_before
    note = commands.run(session, alice, "/compact keep the ticket numbers")
    assert note.command == "compact"
    assert note.text.startswith("Compacted: ")
    compaction = Compaction.objects.get(session=session)
    assert compaction.focus == "keep the ticket numbers"
    after = services.governed_context(session).report
    assert after.tokens_before < before
    assert AuditEvent.objects.filter(session=session, actor=alice).exists()


@pytest.mark.django_db(transaction=True)
def test_compact_says_what_the_model_gets_as_the_job_and_its_record_do(
    session: Any, alice: Any
) -> None:
    note = commands.run(session, alice, "/compact")
    job = CompactionJob.objects.get(session=session)
    said = job_words(job)
    assert said.startswith("compacted: the model gets a summary ")
    assert note.text == f"C{said[1:]}."
    assert f"; next request {job.result['sent_before']:,} → {job.result['sent_after']:,} " in said
    # At once again: nothing new before the kept tail, and the note says what stays.
    again = commands.run(session, alice, "/compact")
    assert again.text.startswith("Nothing to compact: a compaction keeps the ")
    assert again.text.endswith(f"; a summary stands for the {job.result['messages']:,} others.")


def test_compact_and_clear_wait_for_a_running_turn(session: Any, alice: Any) -> None:
    turns.begin(session, alice, "busy", "")
    for command in ("/compact", "/clear"):
        with pytest.raises(Conflict, match="a turn is running"):
            commands.run(session, alice, command)
    assert not Compaction.objects.exists()
    assert not Clear.objects.exists()


def test_clear_then_clear_again(session: Any, alice: Any) -> None:
    note = commands.run(session, alice, "/clear")
    last = session.messages.order_by("-seq").first().seq
    assert f"#{last + 1}" in note.text
    # This history has no system prompt or instructions: nothing is kept.
    assert "kept no system prompt or instructions" in note.text
    assert f"dropped {last + 1} messages" in note.text
    assert Clear.objects.get(session=session).from_seq == last + 1
    assert services.governed_context(session).messages == []
    with pytest.raises(Conflict, match="nothing to clear"):
        commands.run(session, alice, "/clear")


def test_clear_says_it_kept_the_system_prompt_and_instructions(alice: Any) -> None:
    session = make_session(alice, title="Agent")
    first = user("Deploy OPS-9", system="You deploy services carefully.")
    services.append_messages(
        session,
        [replace(first, instructions="Answer in English."), reply("Deployed.")],
        auto_compact=False,
    )

    note = commands.run(session, alice, "/clear")

    report = services.governed_context(session).report
    assert report.system_tokens > 0
    assert note.text == (
        "Cleared before message #2: kept the system prompt and instructions "
        f"({report.system_tokens:,} tokens); dropped 2 messages. The log keeps everything; "
        "undo it under Records."
    )


def test_history_and_context_give_the_dashboards_numbers(session: Any, alice: Any) -> None:
    figures = services.history_figures(session)
    assert commands.run(session, alice, "/history").text == figures.line()
    note = commands.run(session, alice, "/context")
    view = xray(services.governed_context(session))
    assert f"{view.governed:,} of {view.window:,} tokens" in note.text
    for category in view.categories:
        if category.tokens:
            assert f"{category.label}: {category.tokens:,} (" in "\n".join(note.lines)


def test_pin_defaults_to_the_latest_user_message_and_unpin_undoes_it(
    session: Any, alice: Any
) -> None:
    newest_prompt = max(
        row.seq
        for row in session.messages.filter(kind="request")
        if any(part.part_kind == "user-prompt" for part in row.message.parts)
    )
    assert commands.run(session, alice, "/pin").text.startswith(f"Pinned message #{newest_prompt}")
    assert Pin.objects.filter(session=session, seq=newest_prompt, undone_at=None).exists()
    commands.run(session, alice, f"/unpin #{newest_prompt}")
    assert not Pin.objects.filter(session=session, undone_at=None).exists()
    commands.run(session, alice, "/pin 3")
    assert Pin.objects.filter(session=session, seq=3, undone_at=None).exists()


@pytest.mark.parametrize(
    ("text", "error", "reason"),
    [
        ("/pin #99999", NotFound, "does not exist"),
        ("/pin twelve", Invalid, "not a message number"),
        ("/unpin", Invalid, "say which message"),
        ("/unpin 4", NotFound, "not pinned"),
        ("/frobnicate", Invalid, "not a command"),
    ],
)
def test_refusals_say_why(session: Any, alice: Any, text: str, error: type, reason: str) -> None:
    with pytest.raises(error, match=reason):
        commands.run(session, alice, text)


def test_pin_with_no_message_of_yours(alice: Any) -> None:
    with pytest.raises(NotFound, match="no message of yours"):
        commands.run(make_session(alice), alice, "/pin")


def test_help_lists_every_command(session: Any, alice: Any) -> None:
    note = commands.run(session, alice, "/help")
    for name in ("/compact", "/clear", "/history", "/context", "/pin", "/unpin"):
        assert any(line.startswith(name) for line in note.lines)


def test_fork_at_the_latest_message_or_the_one_named(session: Any, alice: Any) -> None:
    from django.template.loader import render_to_string

    from sessions.models import AgentSession, Message

    last = Message.objects.filter(session=session).count() - 1
    services.pin(session, 2)
    note = commands.run(session, alice, "/fork")
    latest = AgentSession.objects.get(title=f"Long (fork at #{last})")
    assert note.command == "fork"
    assert f"#{last}" in note.text
    assert note.link == (latest.get_absolute_url(), latest.title)
    assert Message.objects.filter(session=latest).count() == last + 1
    assert list(Pin.objects.filter(session=latest).values_list("seq", flat=True)) == [2]
    html = render_to_string("sessions/_chat_note.html", {"note": note})
    assert f'href="{latest.get_absolute_url()}"' in html

    note = commands.run(session, alice, "/fork #12")
    named = AgentSession.objects.get(title="Long (fork at #12)")
    assert note.link == (named.get_absolute_url(), named.title)
    assert Message.objects.filter(session=named).count() == 13
    assert Message.objects.filter(session=session).count() == last + 1  # the original stays
    assert AuditEvent.objects.filter(session=session, verb="fork").count() == 2
    assert any(line.startswith("/fork") for line in commands.run(session, alice, "/help").lines)
    with pytest.raises(Invalid, match="must be from 0 to"):
        commands.run(session, alice, f"/fork #{last + 1}")
    with pytest.raises(NotFound, match="no message to fork"):
        commands.run(make_session(alice), alice, "/fork")


def test_recall_lists_what_the_next_request_hides_and_leads_to_the_first(alice: Any) -> None:
    from django.template.loader import render_to_string

    from sessions.services.recall import hidden_now
    from tests.recall_session import planted_session

    session = make_session(alice, model="openai:gpt-4o", policy={"context_window": 32_000})
    history, facts = planted_session(120)
    services.append_messages(session, history, auto_compact=False)
    found = hidden_now(session)
    fact = next(f for f in facts if f.seq in found.messages or (f.seq, 0) in found.parts)

    note = commands.run(session, alice, f"/recall {fact.query}")
    assert note.command == "recall"
    assert note.text.endswith(f"hidden from the next request match {fact.query!r}:")
    assert note.lines[0].startswith(f"#{fact.seq} tool output of read_file (")
    assert fact.value in note.lines[0]
    assert note.link == (f"{session.get_absolute_url()}?at={fact.seq}", f"Show message #{fact.seq}")
    html = render_to_string("sessions/_chat_note.html", {"note": note})
    assert fact.value in html

    nothing = commands.run(session, alice, "/recall zebra quokka")
    assert nothing.text == "Nothing hidden from the next request matches 'zebra quokka'."
    with pytest.raises(Invalid, match="say what to look for"):
        commands.run(session, alice, "/recall ?!")
    assert any(line.startswith("/recall") for line in commands.run(session, alice, "/help").lines)
