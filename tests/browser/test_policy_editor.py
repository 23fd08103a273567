"""The policy editor in Chromium: Preview and Enter preview in place (no navigation, no edit
lost), percentages are read as the engine's fractions, and Save stores the policy."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from ctxhub.governance import Policy
from sessions import services
from tests.browser.test_controls import log_in
from tests.factories import make_session
from tests.messages import agent_turns

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = "/tmp/policy-editor"


@pytest.fixture
def session(alice: Any) -> Any:
    session = make_session(alice, title="Refactor the scheduler")
    history = agent_turns(6, 4, "def handler():\n    return 42\n" * 300, "Refactor OPS-77")
    services.append_messages(session, history, auto_compact=False)
    return session


def _tokens(session: Any, overrides: dict[str, Any]) -> str:
    return f"{services.governed_context(session, policy=Policy.model_validate(overrides)).tokens:,}"


def _still_here(page: Page, url: str) -> None:
    """Nothing navigated: the flag set on this document is still there, the address as it was."""
    assert page.evaluate("() => window.__samePage === true")
    assert page.url == url


def test_preview_and_enter_preview_in_place_then_save_stores(
    page: Page, live_url: str, session: Any
) -> None:
    log_in(page, live_url, session.get_absolute_url())
    page.get_by_test_id("policy-control").locator("summary").click()
    keep_last = page.get_by_test_id("knob-masking.keep_last")
    expect(keep_last).to_have_value("5")
    # Grouped under a heading, labelled for a person, the dotted name beside it.
    masking = page.get_by_test_id("policy-group-masking")
    expect(masking.locator("legend")).to_have_text("Masking old tool results")
    expect(masking).to_contain_text("Keep the last N tool results")
    expect(masking).to_contain_text("masking.keep_last")
    expect(page.get_by_test_id("knob-compaction.soft_threshold")).to_have_value("80 %")
    page.evaluate("() => { window.__samePage = true; }")
    url = page.url

    # The Preview button previews here.
    page.locator('select[name="masking.apply"]').select_option("always")
    keep_last.fill("1")
    page.get_by_test_id("policy-preview-button").click()
    edited = {"masking": {"keep_last": 1, "apply": "always"}}
    expect(page.get_by_test_id("replay-tokens")).to_have_text(_tokens(session, edited))
    expect(page.get_by_test_id("knob-mark-masking.keep_last")).to_have_text("changed")
    _still_here(page, url)

    # Enter in a field previews too, and keeps every edit.
    keep_last.fill("2")
    keep_last.press("Enter")
    edited = {"masking": {"keep_last": 2, "apply": "always"}}
    expect(page.get_by_test_id("replay-tokens")).to_have_text(_tokens(session, edited))
    _still_here(page, url)
    expect(keep_last).to_have_value("2")
    expect(page.locator('select[name="masking.apply"]')).to_have_value("always")

    # A percentage out of range is refused beside its field, naming it; Enter loses nothing.
    soft = page.get_by_test_id("knob-compaction.soft_threshold")
    soft.fill("150 %")
    soft.press("Enter")
    error = page.locator('[id="knob-error-compaction.soft_threshold"]')
    expect(error).to_contain_text("Start compacting at")
    expect(error).to_contain_text("100 %")
    expect(page.get_by_test_id("policy-errors")).to_contain_text("compaction.soft_threshold")
    _still_here(page, url)
    expect(soft).to_have_value("150 %")
    soft.fill("70 %")
    soft.press("Enter")
    edited = {"masking": {"keep_last": 2, "apply": "always"}, "compaction": {"soft_threshold": 0.7}}
    expect(page.get_by_test_id("replay-tokens")).to_have_text(_tokens(session, edited))
    expect(error).to_be_empty()
    differs = page.get_by_test_id("policy-differs")
    expect(differs).to_contain_text("3 knobs differ from the default")
    expect(differs).to_contain_text("Start compacting at")

    # Only the changed knobs, on asking.
    page.get_by_test_id("policy-only-changed").check()
    expect(page.get_by_test_id("knob-eviction.preview_lines")).to_be_hidden()
    expect(page.get_by_test_id("policy-group-eviction")).to_be_hidden()
    expect(keep_last).to_be_visible()
    expect(soft).to_be_visible()
    page.get_by_test_id("policy-control").screenshot(path=f"{SCREENSHOTS}-changed.png")
    page.get_by_test_id("policy-only-changed").uncheck()
    expect(page.get_by_test_id("knob-eviction.preview_lines")).to_be_visible()
    page.get_by_test_id("policy-control").screenshot(path=f"{SCREENSHOTS}.png")
    _still_here(page, url)

    page.get_by_test_id("policy-save").click()
    expect(page.get_by_test_id("policy-saved")).to_be_visible()
    session.refresh_from_db()
    assert session.policy == edited
    expect(page.get_by_test_id("knob-compaction.soft_threshold")).to_have_value("70 %")
    _still_here(page, url)
