"""Every page works in Chromium under the content security policy (scripts and styles from the
app only, nothing inline, nothing evaluated), and nothing it carries is refused."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from sessions import services
from tests.browser.test_controls import log_in, shot
from tests.factories import make_session
from tests.messages import agent_turns

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WATCH_VIOLATIONS = """
window.__refused = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__refused.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""


def refused(page: Page) -> list[str]:
    found: list[str] = page.evaluate("window.__refused")
    return found


def test_the_dashboard_works_under_its_content_security_policy(
    page: Page, live_url: str, alice: Any
) -> None:
    alice.is_staff = True
    alice.save()
    session = make_session(alice, title="Refactor the scheduler")
    history = agent_turns(6, 3, "def handler():\n    return 42\n" * 200, "Refactor OPS-77")
    services.append_messages(session, history, auto_compact=False)
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    missing: list[str] = []  # the icon included: every page names one the server has
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    page.add_init_script(WATCH_VIOLATIONS)

    log_in(page, live_url, "/")
    csp = page.request.get(f"{live_url}/").headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "style-src 'self'" in csp
    # The fleet's meters are drawn at their widths.
    meter = page.locator(".mini-meter .meter-fill").first
    expect(meter).to_be_visible()
    assert meter.evaluate("el => el.style.width").endswith("%")

    page.goto(f"{live_url}{session.get_absolute_url()}")
    page.wait_for_function("() => window.htmx !== undefined")
    zone = page.locator(".zone").first
    expect(zone).to_be_visible()
    assert zone.bounding_box()["width"] > 0  # type: ignore[index]

    # The clear control's form is emptied by a script, not an inline handler; the answer
    # says what stayed.
    page.get_by_text("/clear", exact=True).click()
    page.get_by_test_id("clear-confirm").fill("clear")
    page.get_by_test_id("clear-submit").click()
    expect(page.locator("#clear-answer")).to_contain_text("Cleared before message #")
    expect(page.get_by_test_id("clear-confirm")).to_have_value("")

    # A refused command says why under the composer; the reason goes with the next prompt.
    page.get_by_test_id("chat-prompt").fill("/no-such-command")
    page.get_by_test_id("chat-prompt").press("Enter")
    expect(page.locator("#chat-answer")).not_to_be_empty()
    page.get_by_test_id("chat-prompt").fill("/help")
    page.get_by_test_id("chat-prompt").press("Enter")
    expect(page.locator("#chat-notes")).not_to_be_empty()
    expect(page.locator("#chat-answer")).to_be_empty()

    for path in ("/keys/", "/admin/", "/api/v1/docs"):
        page.goto(f"{live_url}{path}")
        page.wait_for_load_state("networkidle")
    expect(page.locator(".swagger-ui")).to_be_visible()
    shot(page, "csp-api-docs")

    assert refused(page) == []
    assert [line for line in console if "Content Security Policy" in line] == []
    assert missing == []
