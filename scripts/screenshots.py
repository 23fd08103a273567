"""Refresh docs/screenshots/ from a running dashboard seeded with the demo data.

    scripts/run.sh 8765 &                       # a fresh data directory shows the demo as seeded
    .venv/bin/python scripts/screenshots.py http://127.0.0.1:8765

It logs in as demo / demo, opens the pages the docs show and drives them as a reader would
(a chat turn on the offline model, a compaction preview, a policy edit), in headless Chromium.
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "screenshots"
sys.path.insert(0, str(ROOT))

from tests.browser.chromium import CHROMIUM_ARGS  # noqa: E402  (the suite's Chromium flags)

VIEWPORT = {"width": 1440, "height": 900}
BIG = "Migrate the billing service to PostgreSQL 16"
TOUR = "Tour: every governance action on one short run"
UNDER_THRESHOLD = "Explain the retry policy of the job runner"  # not compacted by the seed


def log_in(page: Page, base: str) -> None:
    page.goto(f"{base}/login/?next=/")
    page.get_by_label("Username").fill("demo")
    page.get_by_label("Password").fill("demo")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_function("() => window.htmx !== undefined")


def open_session(page: Page, base: str, title: str) -> None:
    page.goto(f"{base}/")
    page.get_by_test_id("fleet-row").filter(has_text=title).locator("a").first.click()
    page.wait_for_function("() => window.htmx !== undefined")
    expect(page.get_by_test_id("governed-total")).to_be_visible()
    # The socket's opening re-renders the page's sections once; shots are taken after that.
    page.wait_for_timeout(2000)


def main(base: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS
        )
        page = browser.new_page(viewport=VIEWPORT)
        log_in(page, base)
        page.screenshot(path=OUT / "fleet.png")

        open_session(page, base, TOUR)
        page.screenshot(path=OUT / "xray.png")

        open_session(page, base, BIG)
        page.get_by_test_id("trajectory-chart").scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        page.get_by_test_id("trajectory-chart").screenshot(path=OUT / "trajectory.png")

        open_session(page, base, UNDER_THRESHOLD)
        page.get_by_text("/compact", exact=True).click()
        page.get_by_test_id("compact-preview").click()
        expect(page.get_by_test_id("preview-sentence")).to_contain_text("The model gets a summary")
        page.get_by_test_id("compact-control").screenshot(path=OUT / "compact-preview.png")

        page.get_by_test_id("policy-control").locator("summary").click()
        knob = page.locator("#policy-form input[name='masking.keep_last']")
        knob.fill("1")
        knob.press("Enter")
        expect(page.locator("#policy-preview")).to_contain_text("Under the edited policy")
        page.screenshot(path=OUT / "policy-preview.png")  # the editor: knobs, preview beside
        page.keyboard.press("Escape")

        page.goto(f"{base}/")
        page.get_by_test_id("new-chat").locator("summary").click()
        page.get_by_test_id("new-chat-start").click()
        expect(page.get_by_test_id("chat-start")).to_be_visible()
        page.evaluate("window.scrollTo(0, 0)")  # opened at #chat: the page's head in view too
        page.screenshot(path=OUT / "chat-new.png")
        prompt = page.get_by_test_id("chat-prompt")
        expect(prompt).to_be_enabled()
        prompt.fill("read README.md and list the files in docs")
        prompt.press("Enter")
        expect(page.locator("#chat-turn")).to_have_attribute("data-status", "done", timeout=60_000)
        expect(page.get_by_test_id("xray-during")).to_have_count(0)  # the x-ray drawn after it
        page.evaluate("window.scrollTo(0, 0)")  # opened at #chat: the page's head in view too
        page.screenshot(path=OUT / "chat.png")
        page.locator("#xray").screenshot(path=OUT / "chat-xray.png")
        browser.close()
    print(f"screenshots written to {OUT.relative_to(ROOT)}/")


if __name__ == "__main__":
    main(sys.argv[1].rstrip("/") if len(sys.argv) > 1 else "http://127.0.0.1:8000")
