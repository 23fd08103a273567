"""The fleet in Chromium: the whole width, one line per session however long its title,
columns a reader hides staying hidden across pages and reloads, and pages of sessions."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from sessions.models import AgentSession
from sessions.services.fleet import PAGE_SIZE
from tests.browser.test_controls import log_in, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LONG = ("Migrate the billing service to PostgreSQL 16 and keep every invoice number " * 3)[:190]


def test_the_fleet_fills_the_screen_one_line_a_session(
    page: Page, live_url: str, alice: Any
) -> None:
    AgentSession.objects.bulk_create(
        AgentSession(owner=alice, title=f"{n:03} {LONG}", model="openai:gpt-4o", log_tokens=n)
        for n in range(PAGE_SIZE + 5)
    )
    page.set_viewport_size({"width": 1440, "height": 900})
    log_in(page, live_url, "/?sort=log")
    table = page.get_by_test_id("fleet-table")
    expect(page.get_by_test_id("fleet-row")).to_have_count(PAGE_SIZE)
    box = table.bounding_box()
    assert box is not None
    assert box["width"] > 1440 * 0.9
    # A long title ends in an ellipsis: every row is one line high, the title whole on hover.
    heights = page.get_by_test_id("fleet-row").evaluate_all(
        "rows => rows.map(row => row.getBoundingClientRect().height)"
    )
    assert max(heights) < 60, max(heights)
    title = page.get_by_test_id("fleet-row").first.locator("td.col-title a")
    expect(title).to_have_attribute("title", f"{PAGE_SIZE + 4:03} {LONG}")
    # Every column fits: the last one is within the window.
    status = page.locator("th.col-status").bounding_box()
    assert status is not None
    assert status["x"] + status["width"] <= 1440
    expect(page.get_by_test_id("fleet-count")).to_contain_text(
        f"1\N{EN DASH}{PAGE_SIZE} of {PAGE_SIZE + 5}"
    )
    shot(page, "fleet-wide")

    # Hidden columns stay hidden on the next page and after a reload.
    page.get_by_test_id("fleet-columns").locator("summary").click()
    page.locator("input[data-column=cost]").uncheck()
    page.locator("input[data-column=model]").uncheck()
    expect(page.locator("th.col-cost")).to_be_hidden()
    expect(page.locator("td.col-model").first).to_be_hidden()
    page.get_by_test_id("fleet-next").first.click()
    expect(page.get_by_test_id("fleet-row")).to_have_count(5)
    assert "page=2" in page.url
    expect(page.locator("th.col-cost")).to_be_hidden()
    expect(page.locator("td.col-cost").first).to_be_hidden()
    expect(page.locator("td.col-log").first).to_be_visible()
    page.reload()
    expect(page.get_by_test_id("fleet-row")).to_have_count(5)
    expect(page.locator("td.col-model").first).to_be_hidden()
    page.get_by_test_id("fleet-columns").locator("summary").click()
    expect(page.locator("input[data-column=model]")).not_to_be_checked()
    page.locator("input[data-column=model]").check()
    expect(page.locator("td.col-model").first).to_be_visible()


def test_a_filter_replaces_the_table(page: Page, live_url: str, alice: Any) -> None:
    AgentSession.objects.create(owner=alice, title="On Claude", model="anthropic:claude-opus-4")
    AgentSession.objects.create(owner=alice, title="On GPT", model="openai:gpt-4o")
    log_in(page, live_url, "/")
    expect(page.get_by_test_id("fleet-row")).to_have_count(2)
    page.get_by_test_id("fleet-model").select_option("anthropic:claude-opus-4")
    expect(page.get_by_test_id("fleet-row")).to_have_count(1)
    expect(page.get_by_test_id("fleet-row")).to_contain_text("On Claude")
    assert "model=anthropic" in page.url
