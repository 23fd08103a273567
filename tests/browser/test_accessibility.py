"""axe-core over the dashboard's pages in Chromium: no serious or critical violation on the
fleet, a session's x-ray and chat, the policy editor, the keys and the imports pages, in the
light colour scheme and the dark one.

axe-core (tests/browser/vendor/axe.min.js, pinned in assets/package.json) is evaluated in the
page; the browser context bypasses the content security policy for it alone, as the pages
themselves allow no script they do not serve."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from sessions import services
from tests.browser.test_controls import log_in
from tests.factories import make_session
from tests.messages import agent_turns

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = (Path(__file__).parent / "vendor" / "axe.min.js").read_text()
SERIOUS = ("serious", "critical")


@pytest.fixture(params=["light", "dark"])
def context(browser: Browser, request: pytest.FixtureRequest) -> Iterator[BrowserContext]:
    """A browser whose system asks for a light, then a dark colour scheme."""
    context = browser.new_context(
        bypass_csp=True, viewport={"width": 1440, "height": 900}, color_scheme=request.param
    )
    yield context
    context.close()


def violations(page: Page) -> list[str]:
    """The serious and critical violations axe finds on the page as it is, one line each."""
    page.evaluate(AXE)
    found: list[dict[str, Any]] = page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — {[n['target'] for n in v['nodes']][:5]}"
        for v in found
        if v["impact"] in SERIOUS
    ]


def test_no_serious_violation_on_any_page(
    context: BrowserContext, live_url: str, alice: Any
) -> None:
    session = make_session(alice, title="Accessible run")
    services.append_messages(session, agent_turns(4, 2, "line of output\n" * 30))
    chat = make_session(alice, title="A new chat", model="offline:demo")
    page = context.new_page()
    log_in(page, live_url, "/")
    pages: dict[str, list[str]] = {}
    pages["fleet"] = violations(page)

    page.goto(f"{live_url}{session.get_absolute_url()}")
    page.wait_for_function("() => window.htmx !== undefined")
    expect(page.get_by_test_id("governed-total")).to_be_visible()
    pages["x-ray"] = violations(page)

    page.get_by_test_id("policy-control").locator("summary").click()
    expect(page.get_by_test_id("policy-form")).to_be_visible()
    pages["policy editor"] = violations(page)

    page.goto(f"{live_url}{chat.get_absolute_url()}")
    page.wait_for_function("() => window.htmx !== undefined")
    expect(page.get_by_test_id("chat-start")).to_be_visible()
    pages["chat"] = violations(page)

    for name, path in (("keys", "/keys/"), ("imports", "/imports/")):
        page.goto(f"{live_url}{path}")
        pages[name] = violations(page)
    assert {name: found for name, found in pages.items() if found} == {}
