"""A request the session sent, opened from the trajectory: its figures and its messages as they
were sent, or, once the records changed under it, as they govern now, saying so."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from sessions import services
from sessions.models import SentRequest
from sessions.services.sending import GOVERNOR_ACTIONS
from tests.factories import make_session
from tests.governed.oracle import dump
from tests.messages import agent_turns, words

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.smoke]

POLICY = {"context_window": 6_000, "reserved_output_tokens": 0, "compaction": {"auto": False}}


def test_a_request_sent_opens_as_it_was_sent(client: Client, alice: Any, bob: Any) -> None:
    session = make_session(alice, model="anthropic:claude-sonnet-4-5", policy=POLICY)
    history = agent_turns(20, 2, words(300, "out"), "Find the leak")
    sent = {}
    for end in range(1, len(history) + 1):
        services.append_messages(session, [history[end - 1]])
        if end % 2:  # after each request: the history ends with the request the model answers
            context = services.send_context(session)
            sent[SentRequest.objects.filter(session=session).count()] = context.messages
    acted = SentRequest.objects.filter(session=session, acted__in=GOVERNOR_ACTIONS).first()
    assert acted is not None, "the Governor acted in 20 turns at 6,000"
    for number in (1, acted.number, len(sent)):
        opened = services.open_sent_request(session, number)
        assert opened is not None
        assert opened.exact
        assert dump(opened.messages) == dump(sent[number])
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/requests/{acted.number}/").content.decode()
    assert f"Request {acted.number} of" in page
    assert acted.action in page
    assert 'data-testid="not-as-sent"' not in page
    assert "with its kept prefix read from the cache" in page  # a priced model
    assert client.get(f"/sessions/{session.pk}/requests/{len(sent) + 1}/").status_code == 404
    client.force_login(bob)
    assert client.get(f"/sessions/{session.pk}/requests/1/").status_code == 404


def test_a_request_whose_records_changed_since_says_so(client: Client, alice: Any) -> None:
    session = make_session(alice, policy=POLICY)
    services.append_messages(session, agent_turns(6, 2, words(300, "out")))
    services.send_context(session)
    services.set_policy(session, services.session_policy(session).model_copy(
        update={"context_window": 7_000}
    ))  # fmt: skip
    opened = services.open_sent_request(session, 1)
    assert opened is not None
    assert not opened.exact
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/requests/1/").content.decode()
    assert 'data-testid="not-as-sent"' in page
    assert "Messages as governed now (" in page
    assert "Messages as sent" not in page


def test_a_request_sent_before_a_compaction_opens_as_it_was_sent(
    client: Client, alice: Any
) -> None:
    """The records of its time govern it again: a summary made since is not in it."""
    session = make_session(alice, policy=POLICY)
    history = agent_turns(10, 2, words(300, "out"), "Find the leak")
    sent = {}
    for end in range(1, len(history) + 1):
        services.append_messages(session, [history[end - 1]])
        if end % 2:
            context = services.send_context(session)
            sent[SentRequest.objects.filter(session=session).count()] = context.messages
    services.request_compaction(session)  # eager here: done when it returns
    assert session.compactions.exists()
    for number, messages in sent.items():
        opened = services.open_sent_request(session, number)
        assert opened is not None
        assert opened.exact, number
        assert dump(opened.messages) == dump(messages)
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/requests/{len(sent)}/").content.decode()
    assert 'data-testid="not-as-sent"' not in page
    assert "Messages as sent (" in page


def test_a_request_a_rule_applied_always_changed_says_so(client: Client, alice: Any) -> None:
    # Masking always, keeping the last result: each new result masks the one before, already
    # sent — the user's choice over the prompt cache, shown as such.
    policy = {**POLICY, "context_window": 64_000, "masking": {"apply": "always", "keep_last": 1}}
    session = make_session(alice, policy=policy)
    history = agent_turns(6, 1, words(300, "out"), "Find the leak")
    for end in range(1, len(history) + 1):
        services.append_messages(session, [history[end - 1]])
        if end % 2:
            services.send_context(session)
    always = SentRequest.objects.filter(session=session, acted="always").first()
    assert always is not None
    assert re.search(r"\b\d[\d,]* results? masked\b", always.action)
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/requests/{always.number}/").content.decode()
    assert "the Governor acted (a rule the policy applies to every request)" in page
    records = client.get(f"/sessions/{session.pk}/").content.decode()
    assert "a rule the policy applies to every request" in records
