"""A session made by an agent through the gateway, watched in Chromium: the answer streams
into the page as the provider sends it, then stands in the timeline as stored, and the x-ray
shows what was sent upstream."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from playwright.sync_api import Page, expect

from sessions.api.keys import create_key
from sessions.models import AgentSession
from tests.browser.test_controls import log_in
from tests.conftest import ARTIFACTS, required_env
from tests.gateway.fake_upstream import FakeUpstream, Slow, Text, running_fake_upstream
from tests.gateway.waiting import wait_until_quiet
from tests.processes import asgi_server

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WORDS = "the gateway streams this answer into every page that watches its session"

# Records every text the page showed in flight: what a person would have seen.
RECORDER = """
window.__seen = [];
document.addEventListener('DOMContentLoaded', () => {
  new MutationObserver(() => {
    const el = document.querySelector('#answering [data-testid=answering-text]');
    const last = window.__seen[window.__seen.length - 1];
    if (el && el.textContent !== last) window.__seen.push(el.textContent);
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
});
"""


@pytest.fixture(scope="module")
def served(django_db_setup: None) -> Iterator[tuple[str, FakeUpstream]]:
    required_env("REDIS_URL")
    with running_fake_upstream() as upstream:
        env = {"CTXHUB_GATEWAY_ANTHROPIC_URL": upstream.url}
        with asgi_server(ARTIFACTS / "logs" / "web-browser-gateway.log", env=env) as url:
            yield url, upstream


def test_an_answer_streams_into_the_session_page_then_stands_in_the_timeline(
    page: Page, served: tuple[str, FakeUpstream], alice: Any
) -> None:
    url, upstream = served
    upstream.reset()
    key = create_key(alice, name="agent", scopes=["read", "write"])[1]
    client = anthropic.Anthropic(
        base_url=f"{url}/gateway/anthropic",
        api_key="sk-ant-provider-key",
        default_headers={"X-Ctxhub-Key": key},
        max_retries=0,
    )
    ask: dict[str, Any] = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 200,
        "system": "You are a careful coder.",
        "messages": [{"role": "user", "content": "Tell me about the gateway."}],
    }
    upstream.script(Text("It forwards."))
    first = client.messages.create(**ask)
    session = AgentSession.objects.get(gateway__isnull=False)
    page.add_init_script(RECORDER)
    log_in(page, url, session.get_absolute_url())
    expect(page.get_by_test_id("timeline")).to_contain_text("It forwards.")

    # The next turn streams slowly, from a thread, while the page watches.
    ask["messages"] += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": "And then?"},
    ]
    upstream.script(Slow(Text(WORDS), 0.15))

    def stream() -> None:
        with client.messages.stream(**ask) as answer:
            answer.until_done()

    streaming = threading.Thread(target=stream)
    streaming.start()
    answering = page.get_by_test_id("answering")
    expect(answering).to_contain_text("claude-sonnet-4-6 is answering through the gateway")
    streaming.join(timeout=30)
    expect(page.get_by_test_id("timeline")).to_contain_text(WORDS)
    expect(page.get_by_test_id("timeline")).to_contain_text("And then?")
    expect(answering).to_be_empty()
    # It grew word by word: several texts, each a beginning of the answer, before the last.
    seen: list[str] = page.evaluate("window.__seen")
    assert len(seen) >= 3
    assert all(WORDS.startswith(text) for text in seen)
    assert session.messages.count() == 5  # system, prompt, answer, prompt, answer
    wait_until_quiet()  # the exchange is recorded after the answer is stored
