"""The x-ray's controls in Chromium, on the full stack: the web server with the Redis channel
layer and a Celery worker running the compaction jobs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from ctxhub.governance import Policy
from sessions import services
from sessions.models import Clear, Compaction
from tests.browser.test_dashboard import server_side, wait_for
from tests.conftest import ARTIFACTS
from tests.factories import make_session
from tests.messages import agent_turns, user
from tests.processes import celery_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "alice-password"


@pytest.fixture(scope="module")
def worker(live_url: str) -> Iterator[None]:
    with celery_worker(ARTIFACTS / "logs" / "browser-worker.log"):
        yield


@pytest.fixture
def session(alice: Any) -> Any:
    session = make_session(alice, title="Refactor the scheduler")
    history = agent_turns(10, 5, "def handler():\n    return 42\n" * 300, "Refactor OPS-77")
    services.append_messages(session, history, auto_compact=False)
    return session


def log_in(page: Page, live_url: str, path: str) -> None:
    page.goto(f"{live_url}/login/?next={path}")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_function("() => window.htmx !== undefined")


def figure(page: Page, name: str) -> int:
    return int(page.get_by_test_id(name).inner_text().replace(",", ""))


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png")


def test_preview_then_apply_shows_progress_and_the_result(
    page: Page, live_url: str, worker: None, session: Any
) -> None:
    log_in(page, live_url, session.get_absolute_url())
    before = figure(page, "effective-total")
    page.get_by_text("/compact", exact=True).click()
    page.get_by_test_id("compact-focus").fill("the scheduler refactor")
    page.get_by_test_id("compact-preview").click()
    preview = page.get_by_test_id("preview")
    expect(preview).to_contain_text("Summarises")
    assert figure(page, "preview-summarised") > 0
    summarised = int(
        (page.get_by_test_id("preview-replaced").text_content() or "").replace(",", "")
    )
    assert summarised > 0
    # The count the summary will give the model is the count of what it replaces.
    assert figure(page, "preview-summarised") == summarised
    shot(page, "compact-preview")

    page.get_by_test_id("compact-apply").click()
    # The job's events arrive over the socket: the last one says what it did.
    progress = page.locator("#job-progress")
    expect(progress).to_have_attribute("data-stage", "done", timeout=60_000)
    expect(progress).to_contain_text("Compacted: the model gets a summary")
    expect(progress).to_contain_text("; next request ")
    record = page.get_by_test_id("compaction")
    expect(record).to_have_count(1)
    expect(record).to_contain_text(f"{summarised} originals")
    # What governance starts from shrank (the request itself may grow: it fits now, so less
    # is masked).
    expect(page.get_by_test_id("effective-total")).not_to_have_text(f"{before:,}")
    assert figure(page, "effective-total") < before
    page.get_by_test_id(re.compile(r"summary-\d+")).locator("summary").click()
    expect(record.locator("pre.summary")).to_be_visible()
    expect(record.locator("pre.summary")).to_contain_text(
        f"[Summary of {summarised} earlier messages]"
    )
    shot(page, "compact-result")
    # The trajectory is drawn again from the database, with the compaction marked. It is
    # re-rendered 600 ms after the last change, later than the records: wait for its data to
    # change, then check what it holds and that it is drawn.
    marks = "JSON.parse(document.getElementById('trajectory-data').textContent).marks"
    page.wait_for_function(f"() => {marks}.length > 0", timeout=10_000)
    assert page.evaluate(marks) == [119]
    chart = page.get_by_test_id("trajectory-chart")
    expect(chart.locator("canvas")).to_have_count(1)
    chart.scroll_into_view_if_needed()
    shot(page, "trajectory")
    stored = Compaction.objects.get(session=session)
    assert stored.focus == "the scheduler refactor"
    assert len(stored.summarized_seqs) == summarised


def test_undo_restores_the_view(page: Page, live_url: str, session: Any) -> None:
    before = services.governed_context(session)
    server_side(lambda: services.request_compaction(session))  # eager in this process
    record = Compaction.objects.get(session=session)
    log_in(page, live_url, session.get_absolute_url())
    assert figure(page, "effective-total") < before.report.tokens_before
    page.get_by_test_id(f"undo-compaction-{record.pk}").click()
    expect(page.get_by_test_id("compaction")).to_have_attribute("data-state", "undone")
    expect(page.get_by_test_id("governed-total")).to_have_text(f"{before.tokens:,}")
    expect(page.get_by_test_id("effective-total")).to_have_text(f"{before.report.tokens_before:,}")
    shot(page, "compact-undone")


def test_clear_needs_the_typed_confirmation_and_can_be_undone(
    page: Page, live_url: str, session: Any
) -> None:
    log_in(page, live_url, session.get_absolute_url())
    page.get_by_text("/clear", exact=True).click()
    page.get_by_test_id("clear-confirm").fill("yes")
    page.get_by_test_id("clear-submit").click()
    expect(page.get_by_test_id("refused")).to_contain_text('type "clear"')
    assert not Clear.objects.exists()

    page.get_by_test_id("clear-confirm").fill("clear")
    page.get_by_test_id("clear-submit").click()
    clear = page.get_by_test_id("clear")
    expect(clear).to_have_attribute("data-state", "active")
    # Only the system prompt and instructions are left: nothing stored is sent.
    expect(page.locator('[data-category="tail"] [data-tokens]')).to_have_attribute(
        "data-tokens", "0"
    )
    expect(page.locator("#fate-0")).to_have_attribute("data-state", "cleared")
    shot(page, "clear-done")

    record = Clear.objects.get(session=session)
    page.get_by_test_id(f"undo-clear-{record.pk}").click()
    expect(clear).to_have_attribute("data-state", "undone")
    expect(page.locator("#fate-119")).to_have_attribute("data-state", "sent")


def test_clear_keeps_the_system_prompt_and_instructions_in_the_meter(
    page: Page, live_url: str, alice: Any
) -> None:
    session = make_session(alice, title="Agent with a system prompt")
    first = user("Refactor OPS-77", system="You are a careful engineer. " * 20)
    history = [replace(first, instructions="Answer in English."), *agent_turns(3, 2, "x\n" * 50)]
    services.append_messages(session, history, auto_compact=False)
    system = services.governed_context(session).report.system_tokens
    log_in(page, live_url, session.get_absolute_url())
    row = page.locator('[data-category="system"] [data-tokens]')
    expect(row).to_have_attribute("data-tokens", str(system))

    page.get_by_text("/clear", exact=True).click()
    expect(page.get_by_test_id("clear-control")).to_contain_text("keeps the system prompt")
    page.get_by_test_id("clear-confirm").fill("clear")
    page.get_by_test_id("clear-submit").click()
    expect(page.get_by_test_id("clear")).to_have_attribute("data-state", "active")
    expect(page.locator("#clear-answer")).to_contain_text(
        "kept the system prompt and instructions ("
    )

    # The conversation is gone; the system prompt and instructions are still sent.
    expect(page.locator('[data-category="tail"] [data-tokens]')).to_have_attribute(
        "data-tokens", "0"
    )
    # All that is sent is the system prompt's message: its framing counts as the system
    # prompt's, not as a pin nobody made.
    expect(page.locator('[data-category="pinned"] [data-tokens]')).to_have_attribute(
        "data-tokens", "0"
    )
    expect(row).to_have_attribute("data-tokens", str(figure(page, "governed-total")))
    assert int(row.get_attribute("data-tokens") or 0) > system > 0
    shot(page, "clear-kept-system")


def test_a_re_render_answered_after_a_change_is_followed_by_the_change(
    page: Page, live_url: str, session: Any
) -> None:
    """The x-ray and the records are re-rendered from the database after every change. One
    asked for before a clear but delivered after it shows the old state: the re-render the
    clear asked for meanwhile must still come and show the clear."""
    held: dict[str, tuple[Route, Any]] = {}

    def deliver_late(route: Route) -> None:
        name = "xray" if route.request.url.endswith("/xray/") else "records"
        if name in held:
            route.continue_()
        else:
            held[name] = (route, route.fetch())  # read from the database now, delivered later

    page.route(re.compile(r"/(xray|records)/$"), deliver_late)
    log_in(page, live_url, session.get_absolute_url())
    # The socket's opening asks for both: whatever changed before it listened.
    wait_for(page, lambda: len(held) == 2)
    page.get_by_text("/clear", exact=True).click()
    page.get_by_test_id("clear-confirm").fill("clear")
    page.get_by_test_id("clear-submit").click()
    expect(page.locator("#clear-answer")).to_contain_text("Cleared")
    for route, before_the_clear in held.values():
        route.fulfill(response=before_the_clear)

    expect(page.get_by_test_id("clear")).to_have_attribute("data-state", "active")
    expect(page.locator('[data-category="tail"] [data-tokens]')).to_have_attribute(
        "data-tokens", "0"
    )


def test_a_pin_shows_in_every_open_tab(
    page: Page, browser: Browser, live_url: str, session: Any
) -> None:
    log_in(page, live_url, f"{session.get_absolute_url()}?at=12")
    other = browser.new_context().new_page()
    log_in(other, live_url, f"{session.get_absolute_url()}?at=12")
    other.wait_for_function("() => document.querySelector('[ws-connect]') !== null")
    other.wait_for_timeout(500)  # its socket joins the session's group

    page.get_by_test_id("pin-12").click()
    for tab in (page, other):
        expect(tab.locator("#fate-12")).to_contain_text("pinned")
        expect(tab.locator('[data-category="pinned"] [data-tokens]')).not_to_have_attribute(
            "data-tokens", "0"
        )
    shot(other, "pin-other-tab")
    assert services.governed_context(session).pinned == [12]

    page.get_by_test_id("pin-12").click()  # now "Unpin"
    expect(other.locator("#fate-12")).not_to_contain_text("pinned")


def test_compact_everything_above_a_message_previews_exactly_that(
    page: Page, live_url: str, session: Any
) -> None:
    log_in(page, live_url, f"{session.get_absolute_url()}?at=36")
    page.get_by_test_id("compact-above-36").click()
    expect(page.get_by_test_id("preview")).to_contain_text("Summarises")
    expect(page.get_by_test_id("compact-keep-from")).to_have_value("36")
    preview = services.preview_compaction(session, keep_from=36)
    expect(page.get_by_test_id("preview-summarised")).to_have_text(f"{preview.messages:,}")
    expect(page.get_by_test_id("preview-replaced")).to_have_text(
        f"{len(preview.summarized_seqs):,}"
    )


def test_the_policy_editor_previews_live_then_saves(
    page: Page, live_url: str, session: Any
) -> None:
    log_in(page, live_url, session.get_absolute_url())
    now = services.governed_context(session).tokens
    page.get_by_test_id("policy-control").locator("summary").click()
    knob = page.get_by_test_id("knob-masking.keep_last")
    expect(knob).to_have_value("5")
    # Typing is enough: the x-ray under the edited policy follows.
    knob.fill("1")
    page.locator('select[name="masking.apply"]').select_option("always")
    replay = page.get_by_test_id("policy-replay")
    edited = services.governed_context(
        session, policy=Policy.model_validate({"masking": {"keep_last": 1, "apply": "always"}})
    )
    expect(page.get_by_test_id("replay-tokens")).to_have_text(f"{edited.tokens:,}")
    expect(replay).to_contain_text(f"now {now:,}")
    replay.scroll_into_view_if_needed()
    shot(page, "policy-preview")
    # A refused value is named, and the form keeps what was typed.
    page.get_by_test_id("knob-safety_margin").fill("0.9")
    expect(page.get_by_test_id("policy-errors")).to_contain_text("safety_margin")
    expect(page.get_by_test_id("knob-masking.keep_last")).to_have_value("1")
    page.get_by_test_id("knob-safety_margin").fill("0.1")
    expect(page.get_by_test_id("policy-replay")).to_be_visible()

    page.get_by_test_id("policy-save").click()
    expect(page.get_by_test_id("policy-saved")).to_be_visible()
    expect(page.get_by_test_id("governed-total")).to_have_text(f"{edited.tokens:,}")
    session.refresh_from_db()
    assert session.policy == {"masking": {"keep_last": 1, "apply": "always"}}
