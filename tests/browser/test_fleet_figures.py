"""The fleet's figures in Chromium: what the next request carries, against the room a request
has (both count the system prompt and tool definitions), never against the history's budget."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect
from pydantic_ai.messages import ModelRequest, SystemPromptPart, UserPromptPart

from sessions import services
from sessions.services.tools import set_tools
from tests.browser.test_controls import log_in
from tests.factories import make_session
from tests.messages import agent_turns

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TOOLS = [
    {"name": f"tool_{n}", "description": "Reads a file. " * 40, "parameters": {}} for n in range(6)
]


def test_sent_is_measured_against_the_room_a_request_has(
    page: Page, live_url: str, alice: Any
) -> None:
    session = make_session(alice, title="Tools and a long prompt", tool_definitions=TOOLS)
    prompt = ModelRequest(
        parts=[SystemPromptPart("You are careful. " * 300), UserPromptPart("start")]
    )
    services.append_messages(
        session, [prompt, *agent_turns(3, 2, "x\n" * 200)[1:]], auto_compact=False
    )
    set_tools(session, TOOLS)
    context = services.governed_context(session)
    report = context.report
    room = report.window_tokens - report.reserved_output_tokens - report.safety_margin_tokens
    assert report.budget_tokens < room  # the system prompt and tools take their share

    log_in(page, live_url, "/")

    cell = page.get_by_test_id("governed")
    expect(cell).to_contain_text(f"{context.tokens:,} / {room:,}")
    expect(cell).not_to_contain_text(f"/ {report.budget_tokens:,}")
