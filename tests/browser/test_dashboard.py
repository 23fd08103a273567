"""A person's first visit: log in, open a demo session, watch a new message arrive."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from playwright.sync_api import Page, expect

from sessions import services
from sessions.models import AgentSession
from tests.conftest import ARTIFACTS
from tests.factories import make_session, reply, user
from tests.processes import asgi_server, free_port

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def server_side(fn: Callable[[], object]) -> None:
    """Run server-side work off this thread: Playwright's event loop runs here."""

    def run() -> None:
        try:
            fn()
        finally:
            connection.close()  # the thread's own connection would outlive it

    with ThreadPoolExecutor(1) as pool:
        pool.submit(run).result(timeout=120)


def test_a_new_user_logs_in_and_watches_a_session_live(page: Page, live_url: str) -> None:
    server_side(lambda: call_command("seed_demo", stdout=StringIO()))
    session = AgentSession.objects.filter(owner__username="demo").order_by("title").first()
    assert session is not None
    count = session.messages.count()
    # Record when the session socket opens, so the test appends only once it listens.
    page.add_init_script(
        "document.addEventListener('htmx:wsOpen', () => { window.socketOpen = true })"
    )

    page.goto(f"{live_url}/")
    expect(page).to_have_url(f"{live_url}/login/?next=/")
    page.get_by_label("Username").fill("demo")
    page.get_by_label("Password").fill("demo")
    page.get_by_role("button", name="Log in").click()

    expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
    page.get_by_role("link", name=session.title).click()
    expect(page.get_by_role("heading", name=session.title)).to_be_visible()
    expect(page.locator("article.msg")).to_have_count(count)
    expect(page.get_by_test_id("message-total")).to_have_text(str(count))
    page.wait_for_function("() => window.socketOpen === true", timeout=10_000)
    page.evaluate("window.notReloaded = true")

    server_side(
        lambda: services.append_message(
            session, user("Browser check: please summarise the failing tests.")
        )
    )

    new = page.locator(f"#msg-{count}")
    expect(new).to_contain_text("Browser check: please summarise the failing tests.")
    expect(page.locator("article.msg")).to_have_count(count + 1)
    expect(page.get_by_test_id("message-total")).to_have_text(str(count + 1))
    assert page.evaluate("window.notReloaded") is True
    new.scroll_into_view_if_needed()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "dashboard-session-live.png")
    page.goto(f"{live_url}/")
    page.screenshot(path=ARTIFACTS / "dashboard-session-list.png", full_page=True)

    # The longest demo session shows its newest 200 messages; earlier pages load on demand.
    longest = max(
        AgentSession.objects.filter(owner__username="demo"), key=lambda s: s.messages.count()
    )
    total = longest.messages.count()
    assert total > 400
    page.get_by_role("link", name=longest.title).click()
    expect(page.locator("article.msg")).to_have_count(200)
    earlier = page.get_by_role("button", name="Load earlier messages")
    earlier.click()
    expect(page.locator("article.msg")).to_have_count(400)
    earlier.click()
    expect(page.locator("article.msg")).to_have_count(total)
    expect(earlier).to_have_count(0)
    seqs = page.locator("article.msg").evaluate_all("els => els.map(el => Number(el.dataset.seq))")
    assert seqs == list(range(total))


def test_a_page_catches_up_on_what_it_missed_while_the_server_restarted(
    page: Page, django_user_model: object
) -> None:
    owner = django_user_model.objects.create_user("carol", password="carol-password")
    session = make_session(owner, title="Deploy in the middle of a run")
    server_side(lambda: services.append_messages(session, [user("start"), reply("started")]))
    page.add_init_script(
        "document.addEventListener('htmx:wsOpen', "
        "() => { window.socketOpens = (window.socketOpens || 0) + 1 })"
    )
    port = free_port()
    log = ARTIFACTS / "logs" / "daphne-restart.log"

    with asgi_server(log, port) as url:
        page.goto(f"{url}/login/?next=/sessions/{session.pk}/")
        page.get_by_label("Username").fill("carol")
        page.get_by_label("Password").fill("carol-password")
        page.get_by_role("button", name="Log in").click()
        expect(page.locator("article.msg")).to_have_count(2)
        page.wait_for_function("() => window.socketOpens === 1", timeout=10_000)
        page.evaluate("window.notReloaded = true")

    # The server is down: this message is stored, but no socket is there to receive it.
    server_side(
        lambda: services.append_message(session, user("appended while the server was down"))
    )

    with asgi_server(log, port):
        page.wait_for_function("() => window.socketOpens === 2", timeout=60_000)
        expect(page.locator("#msg-2")).to_contain_text("appended while the server was down")
        server_side(
            lambda: services.append_message(session, reply("and one pushed after the reconnect"))
        )
        expect(page.locator("#msg-3")).to_contain_text("and one pushed after the reconnect")

    seqs = page.locator("article.msg").evaluate_all("els => els.map(el => Number(el.dataset.seq))")
    assert seqs == [0, 1, 2, 3]
    assert page.evaluate("window.notReloaded") is True
