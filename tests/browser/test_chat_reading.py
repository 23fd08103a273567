"""The conversation reads as a chat in Chromium: prompts and answers in bubbles, tool calls
folded to a line that opens with their result, the governance detail on demand, and a new chat
that says what its agent can do and offers prompts to start with."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from sessions import services
from sessions.models import AgentSession, Message
from tests.browser.test_chat import wait_done
from tests.browser.test_controls import log_in, shot
from tests.conftest import ARTIFACTS, required_env
from tests.factories import make_session
from tests.processes import asgi_server

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def reading_url(django_db_setup: None) -> Iterator[str]:
    required_env("REDIS_URL")
    with asgi_server(ARTIFACTS / "logs" / "web-chat-reading.log") as url:
        yield url


RESULT = "src/\ntests/\nREADME.md\n" + "more lines\n" * 40


def _a_turn(owner: Any) -> AgentSession:
    session = make_session(owner, title="Read as a chat", model="offline:demo")
    services.append_messages(
        session,
        [
            ModelRequest(parts=[UserPromptPart(content="What is in the repository?")]),
            ModelResponse(
                parts=[ToolCallPart(tool_name="list_files", args={"path": "."}, tool_call_id="c1")]
            ),
            ModelRequest(
                parts=[ToolReturnPart(tool_name="list_files", content=RESULT, tool_call_id="c1")]
            ),
            ModelResponse(parts=[TextPart(content="It holds src/, tests/ and a README.")]),
        ],
    )
    return session


def _box(page: Page, selector: str) -> dict[str, float]:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    return box


def test_prompts_and_answers_are_bubbles_and_tools_fold_to_a_line(
    page: Page,
    reading_url: str,
    alice: Any,
) -> None:
    session = _a_turn(alice)
    log_in(page, reading_url, session.get_absolute_url())
    pane = _box(page, "#timeline")
    prompt = _box(page, "[data-testid=said-user]")
    answer = _box(page, "[data-testid=said-assistant]")
    # The person's prompt on the right, the model's answer on the left, as a chat shows them.
    assert prompt["x"] + prompt["width"] > pane["x"] + pane["width"] - 40
    assert prompt["x"] > pane["x"] + pane["width"] / 3
    assert answer["x"] < pane["x"] + 40
    expect(page.get_by_test_id("said-user")).to_have_text("What is in the repository?")
    # The call and its 43-line result are a line each, closed.
    call = page.locator("details.fold-tool-call")
    result = page.locator("details.fold-tool-return")
    line = _box(page, "details.fold-tool-call")["height"]
    assert line < 30
    assert _box(page, "details.fold-tool-return")["height"] < 30
    expect(call).to_contain_text("list_files")
    expect(result.locator("pre")).not_to_be_visible()
    # One click opens the call with its result.
    call.locator("summary").click()
    expect(call).to_have_attribute("open", "")
    expect(result).to_have_attribute("open", "")
    expect(result.locator("pre")).to_contain_text("README.md")
    shot(page, "chat-reading")
    call.locator("summary").click()
    expect(result.locator("pre")).not_to_be_visible()


def test_the_governance_detail_is_on_demand(
    page: Page,
    reading_url: str,
    alice: Any,
) -> None:
    session = _a_turn(alice)
    log_in(page, reading_url, session.get_absolute_url())
    actions = "#msg-3 .fate-actions"
    expect(page.get_by_test_id("pin-3")).to_be_attached()
    page.locator(".timeline-head h2").hover()
    expect(page.locator(actions)).to_have_css("opacity", "0")
    page.locator("#msg-3").hover()
    expect(page.locator(actions)).to_have_css("opacity", "1")
    # Shown for every message at once, and kept by the browser.
    page.get_by_test_id("timeline-detail").check()
    page.locator(".timeline-head h2").hover()
    expect(page.locator("#msg-0 .fate-actions")).to_have_css("opacity", "1")
    page.reload()
    page.wait_for_function("() => window.htmx !== undefined")
    expect(page.get_by_test_id("timeline-detail")).to_be_checked()
    page.locator(".timeline-head h2").hover()
    expect(page.locator("#msg-0 .fate-actions")).to_have_css("opacity", "1")
    page.get_by_test_id("timeline-detail").uncheck()
    page.locator(".timeline-head h2").hover()
    expect(page.locator("#msg-0 .fate-actions")).to_have_css("opacity", "0")


def test_a_new_chat_offers_its_tools_and_prompts_to_start_with(
    page: Page,
    reading_url: str,
    alice: Any,
) -> None:
    log_in(page, reading_url, "/")
    page.get_by_test_id("new-chat").locator("summary").click()
    page.get_by_test_id("new-chat-start").click()
    start = page.get_by_test_id("chat-start")
    expect(start).to_be_visible()
    tools = page.get_by_test_id("chat-start-tools")
    expect(tools).to_contain_text("list_files")
    expect(tools).to_contain_text("read_file")
    expect(tools).to_contain_text("recall")
    examples = page.get_by_test_id("chat-example")
    assert examples.count() >= 3
    first = examples.first.inner_text()
    shot(page, "chat-new")
    examples.first.click()
    # Sent as typed: the prompt lands as the person's bubble, the offer goes.
    expect(page.get_by_test_id("said-user")).to_have_text(first, timeout=15_000)
    expect(start).not_to_be_visible()
    wait_done(page)
    session = AgentSession.objects.get(owner=alice)
    prompt = Message.objects.get(session=session, seq=0).message.parts[0]
    assert isinstance(prompt, UserPromptPart)
    assert prompt.content == first
