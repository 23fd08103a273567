"""What the session's Governor sends, in Chromium on the full stack: a compaction states the next
request now and after (and flags one that would be refused), the trajectory plots what each
request sent carried with the Governor's marks, and a point opens its request as it was sent."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from sessions import services
from sessions.models import Compaction, SentRequest
from tests.browser.test_controls import figure, log_in, shot
from tests.browser.test_dashboard import server_side
from tests.conftest import ARTIFACTS
from tests.factories import make_session
from tests.governed.builders import SMALL_POLICY, turn
from tests.processes import celery_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def worker(live_url: str) -> Iterator[None]:
    with celery_worker(ARTIFACTS / "logs" / "browser-governor-worker.log"):
        yield


@pytest.fixture
def session(alice: Any) -> Any:
    """An agent's session at 16,000 tokens: 40 turns, each request sent, as the API's
    ``/context`` sends them (the Governor fills the budget, then acts)."""
    session = make_session(alice, title="Governed agent", policy=SMALL_POLICY)
    for n in range(40):
        services.append_messages(session, turn(n), auto_compact=False)
        services.send_context(session)
    return session


def sent_figures(text: str) -> tuple[int, int]:
    """The next request's tokens now (or before) and after, as a compaction's sentence says
    them (``next request 20,263 → at most 22,100 tokens``)."""
    found = re.search(r"next request ([\d,]+) → (?:at most )?([\d,]+) tokens", text)
    assert found is not None, text
    before, after = (int(g.replace(",", "")) for g in found.groups())
    return before, after


def low_water(text: str) -> int:
    """The low-water mark a compaction's sentence names (the "after" figure when it is the
    mark itself)."""
    found = re.search(r"(?:below|above) the low-water mark of ([\d,]+)", text)
    if found is None:
        assert "which is the low-water mark" in text, text
        return sent_figures(text)[1]
    return int(found.group(1).replace(",", ""))


def test_a_compaction_states_the_next_request_now_and_after(
    page: Page, live_url: str, worker: None, session: Any
) -> None:
    log_in(page, live_url, session.get_absolute_url())
    now = figure(page, "governed-total")
    page.get_by_text("/compact", exact=True).click()
    page.get_by_test_id("compact-preview").click()
    said = page.get_by_test_id("preview-sentence")
    expect(said).to_contain_text("The model gets a summary of")
    promised = said.inner_text()
    before, at_most = sent_figures(promised)
    assert before == now
    assert at_most < now
    mark = low_water(promised)
    limits = services.session_limits(session, services.governed_context(session))
    fixed = now - services.governed_context(session).report.history_tokens_after
    # The low-water mark it names is the x-ray's, with what every request carries besides
    # the history.
    assert mark == limits.low_water + fixed
    expect(page.get_by_test_id("preview-refused")).to_have_count(0)
    shot(page, "compact-preview-sent")

    page.get_by_test_id("compact-apply").click()
    progress = page.locator("#job-progress")
    expect(progress).to_have_attribute("data-stage", "done", timeout=60_000)
    result = progress.inner_text()
    assert result.strip().startswith("Compacted: the model gets a summary of")
    before, after = sent_figures(result)
    assert (before, after <= at_most, low_water(result)) == (now, True, mark)
    record = page.get_by_test_id("compaction")
    expect(record).to_have_count(1)
    expect(record.get_by_test_id("compaction-sent")).to_contain_text(
        result.strip().removeprefix("Compacted: the ").rstrip(".")
    )
    stored = Compaction.objects.get(session=session)
    expect(page.get_by_test_id(f"fact-score-{stored.pk}")).to_contain_text("held")
    # The x-ray shows the request the compaction leaves: the one the result announced.
    expect(page.get_by_test_id("governed-total")).to_have_text(f"{after:,}", timeout=10_000)
    shot(page, "compact-result-sent")


def test_a_compaction_that_would_be_refused_is_flagged_in_the_preview(
    page: Page, live_url: str, session: Any
) -> None:
    # Keeping the five newest turns verbatim leaves a summary no room in the next request.
    recent = session.messages.order_by("-seq").values_list("seq", flat=True)[19]
    log_in(page, live_url, f"{session.get_absolute_url()}?at={recent}")
    page.get_by_test_id(f"compact-above-{recent}").click()
    refused = page.get_by_test_id("preview-refused")
    expect(refused).to_contain_text("It will be refused: what the compaction keeps")
    # The request has grown past the low-water mark since the Governor's last action: what
    # it carries now is the limit.
    now = figure(page, "governed-total")
    expect(refused).to_contain_text(f"for a summary below the {now:,} it carries now")
    expect(page.get_by_test_id("compact-apply")).to_have_count(0)
    shot(page, "compact-preview-refused")


def test_the_trajectory_plots_each_request_sent_and_opens_one(
    page: Page, live_url: str, session: Any
) -> None:
    requests = list(SentRequest.objects.filter(session=session))
    page.add_init_script(WATCH_OPEN)
    log_in(page, live_url, session.get_absolute_url())
    chart = page.get_by_test_id("trajectory-chart")
    expect(chart.locator("canvas")).to_have_count(1)
    data = page.evaluate("JSON.parse(document.getElementById('trajectory-data').textContent)")
    sent = {n: s for n, s in zip(data["requests"], data["sent"], strict=True) if n is not None}
    assert sent == {r.number: r.tokens + r.tool_tokens for r in requests}
    limits = services.session_limits(session, services.governed_context(session))
    assert (data["budget"], data["high_water"], data["low_water"]) == (
        limits.budget,
        limits.high_water,
        limits.low_water,
    )
    # What the Governor did shows: requests near the budget, and cut back at its actions.
    assert max(sent.values()) > limits.low_water
    expect(page.get_by_test_id("governor-action").first).to_be_visible()
    expect(page.get_by_test_id("cache-weighting")).to_contain_text("requests sent")
    chart.scroll_into_view_if_needed()
    shot(page, "trajectory-sent")
    # A click on the chart opens the request under the cursor, as it was sent.
    box = _drawn_box(page)
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
    page.mouse.click(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
    page.wait_for_url(re.compile(r"/requests/\d+/$"))
    opened = page.get_by_test_id("sent-request")
    number = int(opened.get_attribute("data-request") or 0)
    row = next(r for r in requests if r.number == number)
    expect(page.get_by_test_id("request-sent")).to_contain_text(
        f"{row.tokens + row.tool_tokens:,} tokens"
    )
    expect(page.get_by_test_id("not-as-sent")).to_have_count(0)
    expect(page.get_by_test_id("sent-messages").locator("li").first).to_be_visible()
    shot(page, "sent-request")


def test_a_request_sent_before_a_compaction_opens_as_it_was_sent(
    page: Page, live_url: str, session: Any
) -> None:
    last = SentRequest.objects.filter(session=session).order_by("-number").first()
    assert last is not None
    server_side(lambda: services.request_compaction(session))  # eager: done when it returns
    assert Compaction.objects.filter(session=session).exists()

    log_in(page, live_url, f"/sessions/{session.pk}/requests/{last.number}/")

    # The summary made since is not in it: it opens with the records of its time, as sent.
    expect(page.get_by_test_id("not-as-sent")).to_have_count(0)
    expect(page.get_by_test_id("sent-messages-heading")).to_have_text(
        re.compile(r"^Messages as sent \(")
    )
    expect(page.get_by_test_id("sent-messages").locator("li").first).to_be_visible()
    expect(page.get_by_test_id("sent-messages")).not_to_contain_text("[Summary of")


WATCH_OPEN = "document.addEventListener('htmx:wsOpen', () => { window.open_ = true })"


def _drawn_box(page: Page) -> dict[str, float]:
    """The trajectory chart's plotting area, once the page has drawn it again on its socket's
    opening (600 ms after it; needs ``WATCH_OPEN``): a click on the chart it replaces would be
    lost."""
    page.wait_for_function("() => window.open_ === true", timeout=10_000)
    page.wait_for_timeout(1_500)
    chart = page.get_by_test_id("trajectory-chart")
    expect(chart.locator("canvas")).to_have_count(1)
    chart.scroll_into_view_if_needed()
    box = chart.locator(".u-over").bounding_box()
    assert box is not None
    return dict(box)


def test_a_click_anywhere_opens_the_nearest_request(page: Page, live_url: str, alice: Any) -> None:
    """An agent that pulls its context now and then leaves requests far apart on the chart: a
    click anywhere opens the request nearest it."""
    session = make_session(alice, title="Pulls now and then", policy=SMALL_POLICY)
    for n in range(40):
        services.append_messages(session, turn(n), auto_compact=False)
        if n in (19, 39):
            services.send_context(session)
    page.add_init_script(WATCH_OPEN)
    log_in(page, live_url, session.get_absolute_url())
    box = _drawn_box(page)
    middle = box["y"] + box["height"] / 2
    # Far left of both: the first request (mid-chart) is the nearer.
    page.mouse.move(box["x"] + 10, middle)
    page.mouse.click(box["x"] + 10, middle)
    page.wait_for_url(re.compile(r"/requests/1/$"))
    expect(page.get_by_test_id("sent-request")).to_have_attribute("data-request", "1")
    page.go_back()
    page.wait_for_function("() => window.htmx !== undefined")
    box = _drawn_box(page)
    page.mouse.move(box["x"] + box["width"] * 0.8, middle)
    page.mouse.click(box["x"] + box["width"] * 0.8, middle)
    page.wait_for_url(re.compile(r"/requests/2/$"))
    expect(page.get_by_test_id("sent-request")).to_have_attribute("data-request", "2")
