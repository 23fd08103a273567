"""The policy editor in Chromium: opened, it takes the window's width with the preview beside
the knobs; a search narrows the knobs; Preview and Enter preview in place (no navigation, no
edit lost), percentages are read as the engine's fractions, and Save stores the policy."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from ctxhub.governance import Policy
from sessions import services
from sessions.policy_form import knobs
from tests.browser.test_controls import log_in
from tests.factories import make_session
from tests.messages import agent_turns

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = "/tmp/policy-editor"
WIDTH, HEIGHT = 1440, 900


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
    page.get_by_test_id("policy-editor").screenshot(path=f"{SCREENSHOTS}-changed.png")
    page.get_by_test_id("policy-only-changed").uncheck()
    expect(page.get_by_test_id("knob-eviction.preview_lines")).to_be_visible()
    page.get_by_test_id("policy-editor").screenshot(path=f"{SCREENSHOTS}.png")
    _still_here(page, url)

    page.get_by_test_id("policy-save").click()
    expect(page.get_by_test_id("policy-saved")).to_be_visible()
    session.refresh_from_db()
    assert session.policy == edited
    expect(page.get_by_test_id("knob-compaction.soft_threshold")).to_have_value("70 %")
    _still_here(page, url)


def _open(page: Page, live_url: str, session: Any) -> None:
    page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
    log_in(page, live_url, session.get_absolute_url())
    page.get_by_test_id("policy-control").locator("summary").click()
    expect(page.get_by_test_id("knob-masking.keep_last")).to_be_visible()


def _shown(page: Page) -> list[str]:
    """The knobs shown, by dotted name, in the order of the form."""
    rows = page.locator("tr.knob:visible")
    return rows.evaluate_all("rows => rows.map((row) => row.dataset.knob)")


def _matching(*words: str) -> list[str]:
    """The knobs whose label, name or description hold every word, in the order of the form."""
    found = []
    for knob in knobs():
        text = f"{knob.label} {knob.name} {knob.description}".lower()
        if all(word in text for word in words):
            found.append(knob.name)
    return found


def test_the_editor_opens_across_the_window_with_the_preview_beside_the_knobs(
    page: Page, live_url: str, session: Any
) -> None:
    _open(page, live_url, session)
    editor = page.get_by_test_id("policy-editor")
    box = editor.bounding_box()
    assert box is not None
    assert box["width"] > 0.8 * WIDTH, "the editor takes the window's width, not a column's"
    # Modal: the page behind it is out of reach until it closes.
    assert editor.evaluate("(dialog) => dialog.matches(':modal')")

    # A knob far down the list: the preview of its edit is beside it, not under the form.
    knob = page.get_by_test_id("knob-compaction.cache_ttl_seconds")
    assert knob.evaluate("(el) => el.getBoundingClientRect().top") > 2 * HEIGHT
    knob.fill("120")
    expect(page.get_by_test_id("policy-differs")).to_contain_text("compaction.cache_ttl_seconds")
    expect(knob).to_be_in_viewport()
    expect(page.get_by_test_id("replay-tokens")).to_be_in_viewport()
    expect(page.get_by_test_id("policy-differs")).to_be_in_viewport()
    expect(page.get_by_test_id("policy-save")).to_be_in_viewport()
    preview = page.get_by_test_id("policy-replay").bounding_box()
    form = page.get_by_test_id("policy-form").bounding_box()
    assert preview is not None
    assert form is not None
    assert 0 <= preview["y"] < HEIGHT
    assert preview["x"] >= form["x"] + form["width"], "the preview is right of the knobs"
    page.screenshot(path=f"{SCREENSHOTS}-beside.png")

    # Escape closes it, and the focus is back on what opened it.
    page.keyboard.press("Escape")
    expect(editor).to_be_hidden()
    control = page.get_by_test_id("policy-control")
    summary = control.locator(":scope > summary")
    expect(control).to_have_js_property("open", False)
    expect(summary).to_be_focused()
    # Opened again, the edit is still there; its Close button closes it too.
    summary.click()
    expect(editor).to_be_visible()
    expect(knob).to_have_value("120")
    page.get_by_test_id("policy-close").click()
    expect(editor).to_be_hidden()
    expect(control).to_have_js_property("open", False)


def test_the_search_narrows_the_knobs_and_combines_with_only_the_changed(
    page: Page, live_url: str, session: Any
) -> None:
    _open(page, live_url, session)
    every = [knob.name for knob in knobs()]
    search = page.get_by_role("searchbox", name="Find a knob")
    # Typing goes to the search first.
    expect(search).to_be_focused()
    count = page.get_by_test_id("policy-search-count")
    none = page.get_by_test_id("policy-no-match")
    expect(count).to_have_text(f"{len(every)} knobs")

    # By label, dotted name or description; every word must be found, in any order.
    search.fill("cache")
    cache = _matching("cache")
    assert 1 < len(cache) < len(every)
    expect(page.locator("tr.knob:visible")).to_have_count(len(cache))
    assert _shown(page) == cache
    expect(count).to_have_text(f"{len(cache)} of {len(every)} knobs match")
    expect(none).to_be_hidden()
    groups = {name.split(".")[0] for name in cache if "." in name}
    for key in ("budget", "eviction", "dedupe"):
        assert key not in groups
        expect(page.get_by_test_id(f"policy-group-{key}")).to_be_hidden()
    for key in groups:
        expect(page.get_by_test_id(f"policy-group-{key}")).to_be_visible()
    page.get_by_test_id("policy-editor").screenshot(path=f"{SCREENSHOTS}-search.png")

    search.fill("LAST keep")
    assert _matching("last", "keep") == ["masking.keep_last"]
    expect(page.locator("tr.knob:visible")).to_have_count(1)
    expect(page.get_by_test_id("knob-masking.keep_last")).to_be_visible()
    expect(count).to_have_text(f"1 of {len(every)} knobs match")

    search.fill("qqzx")
    expect(page.locator("tr.knob:visible")).to_have_count(0)
    expect(page.locator(".knob-group:visible")).to_have_count(0)
    expect(none).to_have_text("No knob matches “qqzx”.")
    expect(count).to_have_text(f"0 of {len(every)} knobs match")

    search.fill("")
    expect(page.locator("tr.knob:visible")).to_have_count(len(every))
    expect(none).to_be_hidden()
    expect(count).to_have_text(f"{len(every)} knobs")

    # With "only the knobs that differ from the default": both must hold.
    page.get_by_test_id("knob-masking.keep_last").fill("1")
    expect(page.get_by_test_id("knob-mark-masking.keep_last")).to_have_text("changed")
    page.get_by_test_id("policy-only-changed").check()
    expect(page.locator("tr.knob:visible")).to_have_count(1)
    expect(count).to_have_text(f"1 of {len(every)} knobs differ from the default")
    search.fill("masking")
    assert len(_matching("masking")) > 1
    assert _shown(page) == ["masking.keep_last"]
    expect(count).to_have_text(f"1 of {len(every)} knobs match and differ from the default")
    search.fill("cache")
    expect(page.locator("tr.knob:visible")).to_have_count(0)
    expect(none).to_have_text("No knob matches “cache” among those that differ from the default.")
    page.get_by_test_id("policy-only-changed").uncheck()
    assert _shown(page) == cache

    # Saving renders the editor again: what was searched for stays found, and the focus is
    # where it was.
    page.get_by_test_id("policy-save").click()
    expect(page.get_by_test_id("policy-saved")).to_be_visible()
    expect(page.get_by_test_id("policy-save")).to_be_focused()
    session.refresh_from_db()
    assert session.policy == {"masking": {"keep_last": 1}}
    expect(search).to_have_value("cache")
    assert _shown(page) == cache
    expect(count).to_have_text(f"{len(cache)} of {len(every)} knobs match")

    # Escape empties the search first, then closes the editor.
    search.focus()
    page.keyboard.press("Escape")
    expect(search).to_have_value("")
    expect(page.locator("tr.knob:visible")).to_have_count(len(every))
    expect(page.get_by_test_id("policy-editor")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("policy-editor")).to_be_hidden()
