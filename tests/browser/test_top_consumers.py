"""The x-ray's top consumers in Chromium: loaded when opened, and still open (and loaded again)
after the x-ray is re-rendered."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from sessions import services
from sessions.consumers_report import top_consumers
from tests.browser.test_controls import log_in
from tests.browser.test_governor import WATCH_OPEN
from tests.factories import make_session
from tests.messages import agent_turns

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def session(alice: Any) -> Any:
    session = make_session(alice, title="Refactor the scheduler", context_window=16_000)
    history = agent_turns(6, 4, "def handler():\n    return 42\n" * 200, "Refactor OPS-77")
    services.append_messages(session, history, auto_compact=False)
    return session


def test_the_panel_opens_on_the_top_tool(page: Page, live_url: str, session: Any) -> None:
    page.add_init_script(WATCH_OPEN)
    log_in(page, live_url, f"/sessions/{session.pk}/")
    found = top_consumers(services.governed_context(session))
    control = page.get_by_test_id("consumers-control")
    # Nothing is loaded before the reader opens it.
    expect(control.get_by_test_id("consumers")).to_have_count(0)
    control.locator("summary").click()
    by_kind = control.get_by_test_id("consumers-by-kind")
    top = by_kind.locator('tr[data-tool="read"]')
    expect(top).to_be_visible()
    expect(top).to_have_attribute("data-sent", str(found.tools[0].sent))
    expect(control.get_by_test_id("consumers-sent")).to_have_text(f"{found.history:,}")
    # What "Stored" sums: the history governance starts from, not the raw log.
    expect(control.locator(".consumers-note")).to_contain_text(
        "the log with its compactions' summaries in place of what they cover"
    )
    expect(control.get_by_test_id("consumers-by-argument")).to_contain_text("src/m")
    # A change re-renders the x-ray: the panel stays open and is loaded again. (Once the
    # page's own redraw on its socket's opening is done: the panel it replaces has no mark.)
    page.wait_for_function("() => window.open_ === true", timeout=10_000)
    page.wait_for_timeout(1_500)
    expect(control.get_by_test_id("consumers")).to_have_count(1)
    page.evaluate("document.querySelector('[data-testid=consumers]').dataset.old = '1'")
    page.evaluate("htmx.trigger(document.body, 'ctxhub-changed')")
    page.wait_for_selector("#consumers-control [data-testid=consumers]:not([data-old])")
    expect(control).to_have_attribute("open", "")
    expect(control.locator('tr[data-tool="read"]').first).to_be_visible()


def test_the_panel_stays_open_while_a_chat_turn_pushes_its_x_ray(
    page: Page, live_url: str, alice: Any
) -> None:
    chat = make_session(alice, title="Chat", model="offline:demo", chat_model="offline:demo")
    log_in(page, live_url, chat.get_absolute_url())
    control = page.get_by_test_id("consumers-control")
    control.locator("summary").click()
    expect(control).to_have_attribute("open", "")
    prompt = page.get_by_test_id("chat-prompt")
    expect(prompt).to_be_enabled()
    prompt.fill("read README.md")
    prompt.press("Enter")
    # Each request of the turn pushes its x-ray in place of the page's.
    expect(page.get_by_test_id("xray-during")).to_be_visible(timeout=30_000)
    expect(control).to_have_attribute("open", "")
    expect(page.locator("#chat-turn")).to_have_attribute("data-status", "done", timeout=30_000)
    expect(control).to_have_attribute("open", "")
    expect(control.locator('tr[data-tool="read_file"]').first).to_be_visible()
