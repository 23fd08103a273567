"""The session page, in Chromium: the conversation and its composer stay in view beside what
governance makes of it, the timeline scrolls in its own pane and follows new messages only
while the reader is at its end, ``?at=SEQ`` opens at that message, and the demo tour shows
every action governance takes."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from playwright.sync_api import Page, expect

from sessions import services
from sessions.demo import TOUR
from sessions.models import AgentSession
from tests.browser.test_controls import log_in, shot
from tests.browser.test_dashboard import server_side
from tests.factories import make_session
from tests.messages import agent_turns

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def long_session(alice: Any) -> Any:
    """200 messages: a timeline tens of thousands of pixels tall if laid out in the page."""
    session = make_session(alice, title="A long agent run", model="offline:demo")
    history = agent_turns(33, 2, "line of build output\n" * 30, "Port the scheduler")
    services.append_messages(session, history, auto_compact=False)
    return session


def in_viewport(page: Page, test_id: str) -> bool:
    box = page.get_by_test_id(test_id).bounding_box()
    height = page.viewport_size["height"] if page.viewport_size else 0
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height


def pane_position(page: Page) -> dict[str, float]:
    return page.evaluate(
        "(() => { const t = document.getElementById('timeline');"
        " return {top: t.scrollTop, bottom: t.scrollHeight - t.clientHeight}; })()"
    )


def test_the_conversation_and_composer_stay_in_view(
    page: Page, live_url: str, long_session: Any
) -> None:
    page.set_viewport_size({"width": 1440, "height": 900})
    log_in(page, live_url, long_session.get_absolute_url())
    expect(page.get_by_test_id("chat-prompt")).to_be_enabled()
    # The page is a screen or two, not the timeline's height; the composer is on the first.
    assert page.evaluate("document.documentElement.scrollHeight") < 3 * 900
    assert in_viewport(page, "chat-prompt")
    # The timeline opens at its end: the newest message is the one in view.
    newest = page.locator("#messages > article").last
    expect(newest).to_be_in_viewport()
    position = pane_position(page)
    assert position["top"] >= position["bottom"] - 2
    shot(page, "session-layout")


def test_clear_from_the_top_of_the_page_leaves_its_answer_in_view(
    page: Page, live_url: str, long_session: Any
) -> None:
    page.set_viewport_size({"width": 1440, "height": 900})
    log_in(page, live_url, long_session.get_absolute_url())
    expect(page.get_by_test_id("chat-prompt")).to_be_enabled()
    page.get_by_text("/clear", exact=True).click()
    page.get_by_test_id("clear-confirm").fill("clear")
    page.get_by_test_id("clear-submit").click()
    expect(page.locator("#clear-answer")).to_contain_text("Cleared before message #")
    # The badges of 200 messages change; the page does not run away from the answer.
    expect(page.locator("#fate-0")).to_have_attribute("data-state", "cleared")
    page.wait_for_timeout(500)  # what a jump to the bottom would have needed
    expect(page.locator("#clear-answer")).to_be_in_viewport()
    assert page.evaluate("window.scrollY") < 400


def test_a_reader_up_the_timeline_is_not_pulled_down_by_a_new_message(
    page: Page, live_url: str, long_session: Any
) -> None:
    page.add_init_script("document.addEventListener('htmx:wsOpen', () => { window.open_ = true })")
    log_in(page, live_url, long_session.get_absolute_url())
    expect(page.get_by_test_id("chat-prompt")).to_be_enabled()
    page.wait_for_function("() => window.open_ === true", timeout=10_000)
    page.locator("#msg-20").scroll_into_view_if_needed()
    reading = pane_position(page)["top"]
    server_side(lambda: services.append_messages(long_session, agent_turns(1, 1, "late output")))
    expect(page.locator("#messages > article").last).to_have_attribute(
        "data-seq", str(long_session.messages.count() - 1)
    )
    assert abs(pane_position(page)["top"] - reading) < 5
    expect(page.locator("#msg-20")).to_be_in_viewport()


def test_a_page_opened_at_a_message_shows_it(page: Page, live_url: str, long_session: Any) -> None:
    log_in(page, live_url, f"{long_session.get_absolute_url()}?at=150")
    article = page.locator("#msg-150")
    expect(article).to_be_in_viewport()
    # The pane is where the message is, not at its end.
    position = pane_position(page)
    assert position["top"] < position["bottom"] - 100


def test_the_demo_tour_shows_each_action_and_reads_back_what_was_evicted(
    page: Page, live_url: str, alice: Any
) -> None:
    # Off this thread: the seed compacts (eagerly here), and Playwright's loop runs here.
    server_side(lambda: call_command("seed_demo", "--username", "alice", stdout=StringIO()))
    tour = AgentSession.objects.get(owner=alice, title=TOUR.title)
    log_in(page, live_url, tour.get_absolute_url())
    timeline = page.get_by_test_id("timeline")
    for action in ("evicted", "truncated", "masked", "deduplicated"):
        expect(
            timeline.locator(f".badge.state-{action}, .badge.action-{action}").first
        ).to_be_visible()
    expect(timeline.get_by_test_id("pinned")).to_have_count(1)
    expect(timeline.get_by_test_id("added-synthesized")).to_have_count(1)

    # The truncated file: what the model is sent is cut, the original is whole.
    badge = ".badge.state-truncated, .badge.action-truncated"
    truncated = timeline.locator("article", has=page.locator(badge)).first
    seq = truncated.get_attribute("data-seq")
    truncated.get_by_test_id(f"sent-{seq}").locator("summary").click()
    expect(truncated.get_by_test_id(f"sent-{seq}")).to_contain_text("truncated")
    truncated.get_by_test_id(f"original-{seq}").locator("summary").click()
    expect(truncated.get_by_test_id(f"original-{seq}")).to_contain_text("def ")

    # The evicted build log reads back, as the model's read_evicted_output tool would.
    timeline.get_by_text("read the evicted output").click()
    evicted = page.get_by_test_id("evicted")
    expect(evicted).to_contain_text("RUN pip install")
    # Every change (an append, a record) re-renders each message's fate: what was opened
    # under one stays open.
    with page.expect_response(lambda response: "/fates/" in response.url):
        page.evaluate("htmx.trigger(document.body, 'ctxhub-changed')")
    expect(evicted).to_contain_text("RUN pip install")
    shot(page, "demo-tour")
