"""The chat in Chromium on the full stack: the web server with the Redis channel layer (and a
Celery worker for /compact), the offline demo model paced so a turn can be watched and stopped."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Route, WebSocketRoute, expect
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)

from sessions import services
from sessions.chat.turns import INTERRUPTED
from sessions.models import AgentSession, ChatTurn, Compaction, Message, TurnStatus
from tests.browser.test_controls import log_in, shot
from tests.conftest import ARTIFACTS, required_env
from tests.factories import make_session
from tests.messages import agent_turns
from tests.processes import asgi_server, celery_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A streamed word every 80 ms and 0.8 s per tool call: slow enough to watch, fast enough to test.
PACE_MS = "80"

# Records, in the page, every state of the chat it shows: what a person would have seen.
RECORDER = """
window.__seen = {texts: [], tools: new Set(), badges: new Set(), reloads: 0};
document.addEventListener('DOMContentLoaded', () => {
  new MutationObserver(() => {
    const seen = window.__seen;
    for (const el of document.querySelectorAll('#chat-turn .stream-text')) {
      const last = seen.texts[seen.texts.length - 1];
      if (el.textContent !== last) seen.texts.push(el.textContent);
    }
    for (const el of document.querySelectorAll('#chat-turn [data-testid^=tool-]')) {
      seen.tools.add(el.dataset.testid);
    }
    const badge = document.querySelector('[data-testid=xray-during]');
    if (badge) seen.badges.add(badge.textContent.trim());
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
});
"""


STOP_DURING_A_TOOL = """() => {
  const stop = () => {
    const button = document.querySelector('[data-testid=tool-running]')
      && document.querySelector('[data-testid=chat-stop]');
    if (button) button.click();
    return Boolean(button);
  };
  if (stop()) return;
  const observer = new MutationObserver(() => { if (stop()) observer.disconnect(); });
  observer.observe(document.body, {subtree: true, childList: true});
}"""


@pytest.fixture(scope="module")
def chat_url(django_db_setup: None) -> Iterator[str]:
    required_env("REDIS_URL")
    log = ARTIFACTS / "logs" / "web-chat.log"
    with asgi_server(log, env={"CTXHUB_DEMO_PACE_MS": PACE_MS}) as url:
        yield url


def seen(page: Page) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate(
        "() => ({texts: __seen.texts, tools: [...__seen.tools], badges: [...__seen.badges]})"
    )
    return result


def open_chat(page: Page, url: str, session: AgentSession) -> None:
    page.add_init_script(RECORDER)
    log_in(page, url, session.get_absolute_url())
    expect(page.get_by_test_id("chat-prompt")).to_be_visible()


def send(page: Page, text: str) -> None:
    page.get_by_test_id("chat-prompt").fill(text)
    page.get_by_test_id("chat-prompt").press("Enter")


def wait_done(page: Page, status: str = "done") -> None:
    expect(page.locator("#chat-turn")).to_have_attribute("data-status", status, timeout=30_000)


def log_of(session: AgentSession) -> list[Any]:
    return [row.message for row in Message.objects.filter(session=session).order_by("seq")]


def answer_of(session: AgentSession) -> str:
    last = log_of(session)[-1]
    assert isinstance(last, ModelResponse)
    part = last.parts[0]
    assert isinstance(part, TextPart)
    return part.content


def assert_every_call_answered(messages: list[Any]) -> None:
    for position, message in enumerate(messages):
        calls = {
            p.tool_call_id
            for p in getattr(message, "parts", [])
            if isinstance(message, ModelResponse) and isinstance(p, ToolCallPart)
        }
        if calls:
            following = messages[position + 1]
            assert isinstance(following, ModelRequest)
            assert calls <= {
                p.tool_call_id
                for p in following.parts
                if isinstance(p, ToolReturnPart | RetryPromptPart)
            }


def test_a_new_chat_streams_the_turn_into_the_page(page: Page, chat_url: str, alice: Any) -> None:
    page.add_init_script(RECORDER)
    log_in(page, chat_url, "/")
    page.get_by_test_id("new-chat").locator("summary").click()
    page.get_by_test_id("new-chat-start").click()
    expect(page.get_by_test_id("chat-prompt")).to_be_visible()
    session = AgentSession.objects.get(owner=alice)
    assert session.chat_model == "offline:demo"
    page.evaluate("window.__samePage = true")
    tokens_before = page.get_by_test_id("token-total").inner_text()

    send(page, "read README.md")
    wait_done(page)

    answer = answer_of(session)
    states = seen(page)
    # The answer grew in front of the reader, always as a prefix of what was stored.
    texts = [t for t in states["texts"] if t]
    assert len(set(texts)) >= 5
    assert all(answer.startswith(t) for t in texts)
    assert {"tool-running", "tool-done"} <= set(states["tools"])
    assert {"request 1 of the running turn", "request 2 of the running turn"} <= set(
        states["badges"]
    )
    # Every message landed in the timeline without a reload; the meter moved.
    assert page.evaluate("window.__samePage") is True
    articles = page.locator("#messages article")
    expect(articles).to_have_count(4)
    expect(articles.last).to_contain_text(answer.splitlines()[0])
    assert page.get_by_test_id("token-total").inner_text() != tokens_before
    expect(page.get_by_test_id("chat-turn")).to_contain_text("in 2 requests")
    # The turn is over: the x-ray no longer says a request of it is running.
    expect(page.get_by_test_id("xray-during")).to_have_count(0)
    shot(page, "chat")


def test_the_composer_is_disabled_until_the_page_can_send(
    page: Page, chat_url: str, alice: Any
) -> None:
    """Before the page's scripts take the form over, Enter would add a new line (or send the
    form as a plain page request): the composer says it is not ready, then sends."""
    session = make_session(alice, title="Slow scripts", model="offline:demo")
    held: list[Route] = []
    page.route(re.compile(r"/static/js/chat\.js"), lambda route: held.append(route))
    log_in(page, chat_url, session.get_absolute_url())
    prompt = page.get_by_test_id("chat-prompt")
    expect(prompt).to_be_visible()
    expect(prompt).to_be_disabled()
    expect(page.get_by_test_id("chat-send")).to_be_disabled()

    (script,) = held
    script.continue_()
    send(page, "list the files")
    wait_done(page)
    assert isinstance(log_of(session)[0], ModelRequest)
    expect(prompt).to_have_value("")


def test_stop_mid_turn_then_a_new_prompt(page: Page, chat_url: str, alice: Any) -> None:
    session = make_session(alice, title="Stop me", model="offline:demo")
    open_chat(page, chat_url, session)
    send(page, "read README.md and sessions/chat/runner.py")
    expect(page.locator("#chat-turn")).to_have_attribute("data-status", "running")
    # A second prompt while it runs is refused, and says why.
    send(page, "and this too")
    expect(page.get_by_test_id("refused")).to_contain_text("still running")
    # Stop, clicked the moment a tool runs (as a person watching would, only faster).
    page.evaluate(STOP_DURING_A_TOOL)
    expect(page.get_by_test_id("chat-stopped")).to_be_visible(timeout=20_000)
    # Its reason lapsed with the turn: nothing says it still runs.
    expect(page.get_by_test_id("refused")).to_have_count(0)

    messages = log_of(session)
    assert_every_call_answered(messages)
    assert any(
        isinstance(p, ToolReturnPart) and p.content == INTERRUPTED
        for m in messages
        for p in m.parts
    )
    expect(page.locator("#messages article").last).to_contain_text("Interrupted")
    assert ChatTurn.objects.get(session=session).status == TurnStatus.STOPPED

    send(page, "list the files")
    wait_done(page)
    assert_every_call_answered(log_of(session))
    assert_every_call_answered(services.governed_context(session).messages)


def test_a_prompt_typed_before_the_send_is_answered_survives_the_answer(
    page: Page, chat_url: str, alice: Any
) -> None:
    """The socket and the send's answer travel on different connections: the turn can show as
    running before the send that started it is answered. What is typed and sent meanwhile
    stays in the composer, and its refusal shows."""
    session = make_session(alice, title="Crossing answers", model="offline:demo")
    open_chat(page, chat_url, session)
    held: list[tuple[Route, Any]] = []

    def hold_the_first_send(route: Route) -> None:
        if route.request.method == "POST" and not held:
            held.append((route, route.fetch()))  # the turn starts; its 202 waits here
        else:
            route.continue_()

    page.route(re.compile(r"/chat/$"), hold_the_first_send)
    send(page, "read README.md and sessions/chat/runner.py")
    expect(page.locator("#chat-turn")).to_have_attribute("data-status", "running")
    send(page, "and this too")
    ((route, accepted),) = held
    assert accepted.status == 202
    route.fulfill(response=accepted)

    expect(page.get_by_test_id("refused")).to_contain_text("still running")
    expect(page.get_by_test_id("chat-prompt")).to_have_value("and this too")
    page.get_by_test_id("chat-stop").click()
    expect(page.get_by_test_id("chat-stopped")).to_be_visible(timeout=20_000)
    expect(page.get_by_test_id("chat-prompt")).to_have_value("and this too")


def test_two_tabs_see_the_same_stream(browser: Browser, chat_url: str, alice: Any) -> None:
    session = make_session(alice, title="Two tabs", model="offline:demo")
    context = browser.new_context()
    first, second = context.new_page(), context.new_page()
    open_chat(first, chat_url, session)
    second.add_init_script(RECORDER)
    second.goto(chat_url + session.get_absolute_url())
    expect(second.get_by_test_id("chat-prompt")).to_be_visible()
    second.wait_for_function("() => document.querySelector('[data-testid=xray-model]')")

    send(first, "read README.md")
    wait_done(first)
    wait_done(second)

    answer = answer_of(session)
    for page in (first, second):
        texts = [t for t in seen(page)["texts"] if t]
        assert len(set(texts)) >= 5
        assert all(answer.startswith(t) for t in texts)
        expect(page.locator("#messages article")).to_have_count(4)
    context.close()


def test_a_tab_catches_up_mid_turn(browser: Browser, chat_url: str, alice: Any) -> None:
    """A tab opened mid-turn starts from the database; a tab whose socket drops mid-answer
    misses pushes, reconnects and re-reads the turn; both end with the whole conversation."""
    session = make_session(alice, title="Catch up", model="offline:demo")
    context = browser.new_context()
    typing, dropping = context.new_page(), context.new_page()
    open_chat(typing, chat_url, session)

    deaf = {"on": False}
    sockets: list[WebSocketRoute] = []

    def route(ws: WebSocketRoute) -> None:
        server = ws.connect_to_server()
        server.on_message(lambda message: None if deaf["on"] else ws.send(message))
        sockets.append(ws)

    dropping.route_web_socket(re.compile(r"/ws/sessions/"), route)
    dropping.add_init_script(RECORDER)
    dropping.goto(chat_url + session.get_absolute_url())
    expect(dropping.get_by_test_id("chat-prompt")).to_be_visible()

    # Three reads: an answer of some 60 words, streaming for about five seconds.
    send(typing, "read README.md, sessions/chat/runner.py and sessions/chat/stream.py")
    # Mid-answer: the dropping tab stops hearing, then its socket drops.
    typing.wait_for_function(
        "() => (document.querySelector('#chat-turn .stream-text') || {}).textContent?.length > 40",
    )
    deaf["on"] = True
    late = context.new_page()
    late.add_init_script(RECORDER)
    late.goto(chat_url + session.get_absolute_url())
    # Opened mid-turn: what streamed so far is there at once, from the database.
    shown = late.locator("#chat-turn .stream-text").first.text_content() or ""
    assert len(shown) > 40
    dropping.wait_for_timeout(400)
    deaf["on"] = False
    sockets[-1].close(code=1012, reason="restarting")  # htmx reconnects after such a close

    wait_done(typing)
    for page in (late, dropping):
        wait_done(page)
        expect(page.locator("#messages article")).to_have_count(8)  # prompt, 3 pairs, answer
    answer = answer_of(session)
    assert shown
    assert answer.startswith(shown)
    for page in (late, dropping, typing):
        assert all(answer.startswith(t) for t in seen(page)["texts"] if t)
        expect(page.locator("#messages article").last).to_contain_text(answer.splitlines()[0])
    assert len(sockets) >= 2  # the dropping tab did reconnect
    context.close()


def test_compact_typed_in_the_chat(page: Page, chat_url: str, alice: Any) -> None:
    session = make_session(alice, title="Long session", model="openai:gpt-4o")
    history = agent_turns(10, 5, "def handler():\n    return 42\n" * 300, "Refactor OPS-77")
    services.append_messages(session, history, auto_compact=False)
    with celery_worker(ARTIFACTS / "logs" / "chat-worker.log"):
        open_chat(page, chat_url, session)
        send(page, "/compact keep OPS-77")
        expect(page.get_by_test_id("chat-note").last).to_contain_text("Compaction queued")
        expect(page.locator("#job-progress")).to_have_attribute(
            "data-stage", "done", timeout=60_000
        )
    expect(page.get_by_test_id("compaction")).to_have_count(1)
    compaction = Compaction.objects.get(session=session)
    assert compaction.focus == "keep OPS-77"

    send(page, "/history")
    expect(page.get_by_test_id("chat-note").last).to_contain_text("1 summary")


USED_ROWS = ("system", "tools", "pinned", "summary", "head", "middle", "tail")


def meter(page: Page) -> dict[str, int]:
    """The meter's rows and the total it shows, read at once (a live swap may land between two
    reads)."""
    found: dict[str, int] = page.evaluate(
        """() => {
          const xray = document.querySelector('#xray');
          const rows = [...xray.querySelectorAll('tr[data-category]')].map(row =>
            [row.dataset.category, Number(row.querySelector('[data-tokens]').dataset.tokens)]);
          const shown = xray.querySelector('[data-testid=governed-total]').textContent;
          return {...Object.fromEntries(rows), total: Number(shown.replaceAll(',', ''))};
        }"""
    )
    return found


def test_the_meter_counts_the_tool_definitions_the_chat_sends(
    page: Page, chat_url: str, alice: Any
) -> None:
    session = make_session(alice, title="Tools on the meter", model="offline:demo")
    open_chat(page, chat_url, session)
    expect(page.locator('#xray tr[data-category="tools"] [data-tokens]')).to_have_attribute(
        "data-tokens", "0"
    )
    send(page, "read README.md")
    wait_done(page)

    session.refresh_from_db()
    stored = sum(session.tool_tokens)
    assert stored > 0
    for reloaded in (False, True):  # as the turn left the page, then as a fresh page shows it
        if reloaded:
            page.reload()
        tools = page.locator('#xray tr[data-category="tools"] [data-tokens]')
        expect(tools).to_have_attribute("data-tokens", str(stored))
        rows = meter(page)
        assert sum(rows[key] for key in USED_ROWS) == rows["total"]
        assert rows["tools"] == stored > 0
        listed = page.get_by_test_id("tool-list")
        for name in ("list_files", "read_file", "read_evicted_output"):
            expect(listed).to_have_attribute("title", re.compile(rf"{name}: \d+ tokens"))
    page.locator("#xray").scroll_into_view_if_needed()
    shot(page, "chat-tools-meter")
