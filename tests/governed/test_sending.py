"""A session's requests sent (``send_context``): its Governor continues from the state stored
with the session, whatever process sends, and each request is recorded; reading the next
request (``governed_context``) moves nothing."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage

from ctxhub.governance import Governor, Policy
from sessions import services
from sessions.history import REMEMBERED
from sessions.models import SentRequest, SessionGovernor
from sessions.services.sending import Sent, record_sent, stored_state
from tests.factories import make_session
from tests.governed.oracle import dump
from tests.messages import agent_turns, words

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.smoke]

POLICY = {"context_window": 6_000, "reserved_output_tokens": 0, "compaction": {"auto": False}}


def turns(count: int) -> list[list[ModelMessage]]:
    """An agent's session in appends: the first request, then a response and the request
    after it per append (each turn reads two outputs of about 400 tokens, one at a time)."""
    history = agent_turns(count, 2, words(400, "out"), "Find the leak")
    return [history[:1]] + [history[i : i + 2] for i in range(1, len(history), 2)]


def test_requests_sent_continue_one_governor_and_previews_move_nothing(alice: Any) -> None:
    session = make_session(alice, policy=POLICY)
    alone = Governor(Policy.model_validate(POLICY), model=session.model)
    history: list[ModelMessage] = []
    batches = turns(30)
    for number, batch in enumerate(batches, start=1):
        services.append_messages(session, batch)
        history += batch
        if number % 3 == 0:
            REMEMBERED.clear()  # as in a process that never served the session
        if number % 2:  # a page shows the next request first
            services.governed_context(session)
        sent = services.send_context(session)
        assert dump(sent.messages) == dump(alone.govern(list(history)).messages)
    requests = list(SentRequest.objects.filter(session=session))
    assert [r.number for r in requests] == list(range(1, len(batches) + 1))
    assert requests[0].acted == "start"
    assert [r for r in requests[1:] if r.acted], "the Governor acted in 30 turns at 6,000"
    assert all(r.action for r in requests[1:] if r.acted)
    assert SessionGovernor.objects.get(session=session).version == len(batches)


def test_reading_the_next_request_records_nothing(alice: Any) -> None:
    session = make_session(alice, policy=POLICY)
    for batch in turns(5):
        services.append_messages(session, batch)
    services.governed_context(session)
    assert not SentRequest.objects.filter(session=session).exists()
    assert stored_state(session).version == 0
    sent = services.send_context(session)
    assert dump(services.governed_context(session).messages) == dump(sent.messages)


def test_a_policy_change_is_a_new_start(alice: Any) -> None:
    session = make_session(alice, policy=POLICY)
    for batch in turns(8):
        services.append_messages(session, batch)
        services.send_context(session)
    services.set_policy(session, Policy.model_validate({**POLICY, "context_window": 7_000}))
    services.send_context(session)
    latest = SentRequest.objects.filter(session=session).last()
    assert latest is not None
    assert latest.acted == "start"
    assert latest.prefix_tokens == 0


def test_a_write_over_a_state_another_process_replaced_is_refused(alice: Any) -> None:
    session = make_session(alice, policy=POLICY)
    for batch in turns(3):
        services.append_messages(session, batch)
    read = stored_state(session)
    services.send_context(session)  # another process sends first
    context = services.governed_context(session)
    sent = Sent(context.report, None, None, 0)
    assert not record_sent(session, read, {}, sent)
    assert SessionGovernor.objects.get(session=session).version == 1
    assert SentRequest.objects.filter(session=session).count() == 1


def test_each_request_records_the_state_it_continued_and_a_write_over_a_moved_one_is_refused(
    alice: Any,
) -> None:
    session = make_session(alice, policy=POLICY)
    for batch in turns(4):
        services.append_messages(session, batch)
        read = stored_state(session)
        services.send_context(session)
        latest = SentRequest.objects.filter(session=session).last()
        assert latest is not None
        assert (latest.number, latest.state) == (read.version + 1, read.state)
        assert SessionGovernor.objects.get(session=session).version == latest.number
    services.set_policy(session, Policy.model_validate({**POLICY, "context_window": 7_000}))
    services.send_context(session)
    latest = SentRequest.objects.filter(session=session).last()
    assert latest is not None
    assert latest.state is None  # a new start continues no state

    read = stored_state(session)
    assert read.version == latest.number
    services.send_context(session)  # another process sends first
    context = services.governed_context(session)
    assert not record_sent(session, read, {"moved": "on"}, Sent(context.report, None, None, 0))
    assert SessionGovernor.objects.get(session=session).version == read.version + 1
    assert SessionGovernor.objects.get(session=session).state != {"moved": "on"}
    assert SentRequest.objects.filter(session=session).count() == read.version + 1
