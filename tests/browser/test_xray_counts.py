"""The x-ray's count of messages in Chromium: of the history's messages, those the request
sends, apart from what governance added to it (a result pair repair supplied)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

from sessions import services
from tests.browser.test_controls import log_in
from tests.factories import make_session
from tests.messages import user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_result_pair_repair_supplies_is_not_one_of_the_history(
    page: Page, live_url: str, alice: Any
) -> None:
    session = make_session(alice, title="Interrupted call")
    history = [
        user("read the config"),
        ModelResponse(parts=[ToolCallPart("read_file", {"path": "app.toml"}, "c1")]),
        # The agent was interrupted: its next answer came with no result for the call.
        ModelResponse(parts=[TextPart("Let me try another way.")]),
        user("go on"),
    ]
    services.append_messages(session, history, auto_compact=False)
    assert len(services.governed_context(session).messages) == 5  # the result supplied

    log_in(page, live_url, session.get_absolute_url())

    expect(page.get_by_test_id("messages-sent")).to_have_text(
        "4 of 4 messages sent, 1 added by governance"
    )
    expect(page.get_by_text("5 of 4 messages sent")).to_have_count(0)
