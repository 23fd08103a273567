"""Keyboard shortcuts and the colour scheme in Chromium: "?" lists the page's shortcuts, each
uses its control and none fires while typing; the pages follow the system's dark scheme."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from sessions import services
from tests.browser.test_controls import log_in
from tests.factories import make_session
from tests.messages import agent_turns

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_shortcuts_are_listed_and_used_but_not_while_typing(
    page: Page, live_url: str, alice: Any
) -> None:
    session = make_session(alice, title="Keys at hand")
    services.append_messages(session, agent_turns(2, 1, "output\n" * 5))
    log_in(page, live_url, "/")
    page.keyboard.press("?")
    listed = page.get_by_test_id("shortcuts")
    expect(listed).to_be_visible()
    expect(listed).to_contain_text("Search the sessions")
    expect(listed).to_contain_text("Start a new chat")
    page.keyboard.press("Escape")
    expect(listed).to_be_hidden()

    page.keyboard.press("/")
    search = page.get_by_test_id("fleet-search")
    expect(search).to_be_focused()
    page.keyboard.type("n")  # typed into the search, not a shortcut
    expect(search).to_have_value("n")
    expect(page.get_by_test_id("new-chat")).not_to_have_attribute("open", "")
    page.keyboard.press("Escape")  # leaves the field
    expect(search).not_to_be_focused()
    page.keyboard.press("n")
    expect(page.get_by_test_id("new-chat")).to_have_attribute("open", "")

    page.goto(f"{live_url}{session.get_absolute_url()}")
    page.wait_for_function("() => window.htmx !== undefined")
    page.keyboard.press("d")
    expect(page.get_by_test_id("timeline-detail")).to_be_checked()
    page.keyboard.press("p")
    expect(page.get_by_test_id("policy-editor")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("policy-editor")).to_be_hidden()
    page.keyboard.press("/")
    expect(page.get_by_test_id("chat-prompt")).to_be_focused()
    page.keyboard.press("Escape")
    page.keyboard.press("g")
    page.keyboard.press("k")
    page.wait_for_url(f"{live_url}/keys/")


def test_the_pages_follow_the_systems_dark_scheme(
    browser: Browser, live_url: str, alice: Any
) -> None:
    colours = {}
    for scheme in ("light", "dark"):
        context = browser.new_context(color_scheme=scheme)
        page = context.new_page()
        log_in(page, live_url, "/")
        colours[scheme] = page.evaluate(
            "() => [getComputedStyle(document.documentElement).backgroundColor,"
            " getComputedStyle(document.body).color]"
        )
        context.close()
    assert colours["light"] == ["rgb(246, 247, 249)", "rgb(29, 35, 48)"]
    assert colours["dark"] == ["rgb(15, 19, 27)", "rgb(228, 231, 238)"]
