"""A person's first visit: log in, open a demo session, watch a new message arrive."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from playwright.sync_api import Page, Route, expect

from sessions import services
from sessions.models import AgentSession
from tests.conftest import ARTIFACTS
from tests.factories import make_session
from tests.messages import reply, user
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
    log = ARTIFACTS / "logs" / "web-restart.log"

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
    # And a record: what the model sees changed too.
    server_side(lambda: services.pin(session, 0))

    with asgi_server(log, port):
        page.wait_for_function("() => window.socketOpens === 2", timeout=60_000)
        expect(page.locator("#msg-2")).to_contain_text("appended while the server was down")
        # Re-rendered from the database: the x-ray, and the fate of every message shown.
        expect(page.locator("#fate-0")).to_contain_text("pinned")
        expect(page.locator("#fate-2")).to_have_attribute("data-state", "sent")
        expect(page.locator('[data-category="pinned"] [data-tokens]')).not_to_have_attribute(
            "data-tokens", "0"
        )
        server_side(
            lambda: services.append_message(session, reply("and one pushed after the reconnect"))
        )
        expect(page.locator("#msg-3")).to_contain_text("and one pushed after the reconnect")

    seqs = page.locator("article.msg").evaluate_all("els => els.map(el => Number(el.dataset.seq))")
    assert seqs == [0, 1, 2, 3]
    assert page.evaluate("window.notReloaded") is True


# Records every moment the page holds two articles with one seq, or a list out of seq order.
# Replaying the mutation records in order sees a duplicate even when it is removed again in
# the same task, which looking at the page between tasks would miss. Articles are counted as
# they are inserted themselves; one inside an inserted element shows in the check of the whole
# page after each batch (a record's subtree is only known as it is by then).
WATCH_SEQS = """
(() => {
  window.seqViolations = [];
  const held = new Map();
  const isArticle = (node) =>
    node.nodeType === Node.ELEMENT_NODE && node.matches("article[data-seq]");
  new MutationObserver((records) => {
    for (const record of records) {
      for (const node of [...record.removedNodes].filter(isArticle)) {
        held.set(node.dataset.seq, held.get(node.dataset.seq) - 1);
      }
      for (const node of [...record.addedNodes].filter(isArticle)) {
        const count = (held.get(node.dataset.seq) || 0) + 1;
        held.set(node.dataset.seq, count);
        if (count > 1) window.seqViolations.push(`two articles #${node.dataset.seq}`);
      }
    }
    const seqs = [...document.querySelectorAll("article[data-seq]")].map(
      (a) => Number(a.dataset.seq));
    if (seqs.some((seq, i) => i > 0 && seq <= seqs[i - 1])) {
      window.seqViolations.push(`not one each in seq order: ${seqs.join(",")}`);
    }
  }).observe(document, { childList: true, subtree: true });
})();
"""

# The page's side of the session socket, under the test's control: a push whose HTML holds
# the article `dropPushOf` is lost (as one sent before the socket joined the session's group
# is), and the last push can be delivered again (as a duplicate delivery would be).
CONTROL_SOCKET = """
(() => {
  window.dropPushOf = null;
  window.droppedPushes = 0;
  window.pushes = [];
  window.catchUpsSettled = 0;
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      window.liveSocket = this;
      // Registered first, so it runs before the page's own listener.
      this.addEventListener("message", (event) => {
        if (window.dropPushOf !== null && event.data.includes(`id="msg-${window.dropPushOf}"`)) {
          window.droppedPushes += 1;
          event.stopImmediatePropagation();
        } else {
          window.pushes.push(event.data);
        }
      });
    }
  };
  window.pushAgain = () => window.liveSocket.dispatchEvent(
    new MessageEvent("message", { data: window.pushes.at(-1) }));
  document.addEventListener("htmx:afterSettle", (event) => {
    if (event.target.id === "messages" && event.detail.pathInfo?.requestPath.includes("?after=")) {
      window.catchUpsSettled += 1;
    }
  });
})();
"""


def wait_for(page: Page, condition: Callable[[], object], timeout: float = 10) -> None:
    """Wait for a condition on this side; Playwright's calls deliver its events meanwhile."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        page.wait_for_timeout(20)


def test_a_push_and_a_catch_up_that_cross_never_show_a_message_twice_or_out_of_order(
    page: Page, live_url: str, django_user_model: object
) -> None:
    owner = django_user_model.objects.create_user("dave", password="dave-password")
    session = make_session(owner, title="Crossing deliveries")
    server_side(lambda: services.append_messages(session, [user("start"), reply("started")]))
    page.add_init_script(WATCH_SEQS)
    page.add_init_script(CONTROL_SOCKET)
    # The catch-up request that the socket's opening sends is held here, to be answered late.
    held: list[Route] = []
    page.route(lambda url: "/messages/?after=" in url, lambda route: held.append(route))

    page.goto(f"{live_url}/login/?next=/sessions/{session.pk}/")
    page.get_by_label("Username").fill("dave")
    page.get_by_label("Password").fill("dave-password")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("article.msg")).to_have_count(2)
    wait_for(page, lambda: held)
    (catch_up,) = held
    assert "?after=1" in catch_up.request.url

    # Appended before the socket listened: only the catch-up brings it.
    page.evaluate("window.dropPushOf = 2")
    server_side(lambda: services.append_message(session, user("missed by the socket")))
    page.wait_for_function("() => window.droppedPushes === 1", timeout=10_000)
    # The catch-up is answered now (message 2, a meter of 3) but arrives last.
    late = catch_up.fetch()
    server_side(lambda: services.append_message(session, reply("pushed before the catch-up")))
    expect(page.locator("#msg-3")).to_contain_text("pushed before the catch-up")
    expect(page.get_by_test_id("message-total")).to_have_text("4")
    page.evaluate("window.pushAgain()")
    catch_up.fulfill(response=late)
    page.wait_for_function("() => window.catchUpsSettled === 1", timeout=10_000)

    assert page.evaluate("window.seqViolations") == []
    seqs = page.locator("article.msg").evaluate_all("els => els.map(el => Number(el.dataset.seq))")
    assert seqs == [0, 1, 2, 3]
    expect(page.locator("#msg-2")).to_contain_text("missed by the socket")
    # The late answer's meter counted 3 messages: the pushed one, counting 4, stays.
    expect(page.get_by_test_id("message-total")).to_have_text("4")
    assert page.evaluate("window.pushes.length") == 2
