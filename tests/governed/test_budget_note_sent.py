"""A session whose policy turns the budget note on: what it sends carries the note its Governor
wrote, whatever process sends; the note is the same between the Governor's actions (the
prefix is kept), counted in what the hub shows, and a request sent opens with it as it was."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, SystemPromptPart

from ctxhub.governance import Governor, Policy, count_tokens
from ctxhub.governance.facts import is_budget_note
from sessions import services
from sessions.consumers_report import top_consumers
from sessions.history import REMEMBERED
from sessions.models import SentRequest
from sessions.services.sending import GOVERNOR_ACTIONS
from sessions.services.tools import session_tools, set_tools
from sessions.xray import USED, xray
from tests.factories import make_session
from tests.governed.oracle import dump
from tests.messages import agent_turns, words

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.smoke]

POLICY = {
    "context_window": 6_000,
    "reserved_output_tokens": 0,
    "compaction": {"auto": False},
    "awareness": {"budget_note": True},
}
TOOLS = [{"name": "read", "description": "Read a file.", "parameters": {"type": "object"}}]


def _note(messages: list[ModelMessage]) -> str:
    """The budget note's text, the one the request carries."""
    (note,) = [m for m in messages if is_budget_note(m)]
    (part,) = note.parts
    assert isinstance(part, SystemPromptPart)
    return part.content


def test_the_note_is_sent_as_one_governor_writes_it_and_kept_between_actions(alice: Any) -> None:
    session = make_session(alice, policy=POLICY)
    set_tools(session, TOOLS)
    tools = session_tools(session)
    alone = Governor(Policy.model_validate(POLICY), model=session.model)
    history = agent_turns(24, 2, words(400, "out"), "Find the leak")
    sent: dict[int, list[ModelMessage]] = {}
    texts: list[str] = []
    for end in range(1, len(history) + 1):
        services.append_messages(session, [history[end - 1]])
        if end % 2 == 0:
            continue  # after each request: the history ends with the request the model answers
        if end % 5 == 0:
            REMEMBERED.clear()  # as in a process that never served the session
        if end % 3 == 0:
            services.governed_context(session)  # a page shows the next request first
        context = services.send_context(session)
        expected = alone.govern(
            history[:end], tool_definitions=tools.definitions, tool_tokens=tools.total
        )
        assert dump(context.messages) == dump(expected.messages)
        report = context.report
        note = report.budget_note
        assert note is not None
        assert _note(context.messages) == note.text
        # Counted in what the hub shows: the request's tokens, the x-ray, the consumers.
        assert report.tokens_after == count_tokens(context.messages, model=session.model)
        view = xray(context)
        tokens = {c.key: c.tokens for c in view.categories}
        assert tokens["note"] == note.tokens
        assert sum(tokens[key] for key in USED) == view.governed == context.tokens
        assert sum(row.sent for row in top_consumers(context).rows) == view.history
        # The history's and governance's own, the note aside.
        assert view.messages_after + view.messages_added == report.messages_after - 1
        number = SentRequest.objects.filter(session=session).count()
        sent[number] = context.messages
        texts.append(note.text)
        row = SentRequest.objects.get(session=session, number=number)
        assert row.tokens == report.tokens_after
        if note.written:
            # Written with this request: its figures are this request's.
            assert note.used_tokens == report.history_tokens_after
            assert note.budget_tokens == report.budget_tokens == row.budget_tokens
        else:
            # Replayed: the text of the request before, the prefix up to the new messages kept.
            assert note.text == texts[-2]
            assert row.acted == ""
            previous = sent[number - 1]
            assert dump(context.messages[: len(previous) - 1]) == dump(previous[:-1])
            assert row.prefix_tokens >= count_tokens(previous[:-1], model=session.model)
    rows = list(SentRequest.objects.filter(session=session))
    acted = [r.number for r in rows if r.acted in GOVERNOR_ACTIONS]
    assert acted, "the Governor acted in 24 turns at 6,000"
    # The note changed only where the Governor acted (and at the first request).
    changed = [n for n in range(2, len(rows) + 1) if texts[n - 1] != texts[n - 2]]
    assert changed == acted
    # A request sent opens as it was sent, note and all.
    for number in (1, acted[0], len(rows)):
        opened = services.open_sent_request(session, number)
        assert opened is not None
        assert opened.exact
        assert dump(opened.messages) == dump(sent[number])


def test_off_nothing_is_added(alice: Any) -> None:
    session = make_session(alice, policy={**POLICY, "awareness": {}})
    services.append_messages(session, agent_turns(3, 2, words(100), "go")[:-1])
    context = services.send_context(session)
    assert not any(is_budget_note(m) for m in context.messages)
    assert context.report.budget_note is None
    assert {c.key: c.tokens for c in xray(context).categories}["note"] == 0
