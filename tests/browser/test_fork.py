"""Forking from the dashboard, in Chromium: "Fork here" on a message opens a new session whose
timeline ends at that message, with the pins over it; the original is left as it was."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from sessions import services
from sessions.models import AgentSession, Message, Pin
from tests.browser.test_controls import log_in, shot
from tests.factories import make_session
from tests.messages import agent_turns

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def session(alice: Any) -> Any:
    session = make_session(alice, title="Refactor the scheduler")
    history = agent_turns(6, 3, "def handler():\n    return 42\n" * 40, "Refactor OPS-77")
    services.append_messages(session, history, auto_compact=False)
    services.pin(session, 4)
    return session


def test_fork_here_opens_a_session_that_ends_at_that_message(
    page: Page, live_url: str, session: Any
) -> None:
    last = Message.objects.filter(session=session).count() - 1
    log_in(page, live_url, session.get_absolute_url())
    expect(page.get_by_test_id("fork-9")).to_have_text("Fork here")

    page.get_by_test_id("fork-9").click()

    expect(page).not_to_have_url(re.compile(str(session.pk)))
    fork = AgentSession.objects.exclude(pk=session.pk).get()
    expect(page).to_have_url(re.compile(f"/sessions/{fork.pk}/"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("(fork at #9)")
    seqs = page.locator("#messages article.msg").evaluate_all(
        "rows => rows.map(row => Number(row.dataset.seq))"
    )
    assert seqs == list(range(10))  # the timeline ends at the message forked at
    expect(page.locator("#fate-4")).to_contain_text("pinned")
    shot(page, "fork-opened")
    assert list(Pin.objects.filter(session=fork).values_list("seq", flat=True)) == [4]
    assert Message.objects.filter(session=session).count() == last + 1  # the original stays
