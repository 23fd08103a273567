"""An external agent on the offline demo model keeps its history in the hub through
``RemoteGovernor`` while Chromium watches its session page fill in live."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest

from ctxhub.client import AsyncHub, Hub, RemoteGovernor
from ctxhub.governance.offline import demo_model, demo_toolset
from sessions.api.keys import create_key
from sessions.models import AgentSession
from tests.browser.test_controls import log_in, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


async def external_agent(url: str, key: str, session_id: str) -> str:
    async with AsyncHub(url, key) as hub:
        agent = Agent(
            demo_model(pace=0.02),
            toolsets=[demo_toolset(pace=0.02)],
            capabilities=[RemoteGovernor(hub, session_id)],
        )
        result = await agent.run("read README.md and list sessions/api")
        return result.output


def test_an_external_agents_session_updates_live(page: Page, live_url: str, alice: Any) -> None:
    _, key = create_key(alice, name="external", scopes=["read", "write"])
    session = AgentSession.objects.create(owner=alice, title="External agent", model="offline:demo")
    log_in(page, live_url, session.get_absolute_url())
    expect(page.locator("#messages article")).to_have_count(0)
    page.evaluate("window.__samePage = true")

    # The agent runs elsewhere (its own thread and event loop), speaking HTTP to the hub.
    with ThreadPoolExecutor(1) as pool:
        output = pool.submit(asyncio.run, external_agent(live_url, key, str(session.pk))).result(60)

    assert "Here is what I found" in output
    # prompt, two calls with their results, the answer: all arrived without a reload
    expect(page.locator("#messages article")).to_have_count(6)
    expect(page.locator("#messages article").last).to_contain_text("Here is what I found")
    expect(page.locator("#messages article").first).to_contain_text("REST API")
    assert page.evaluate("window.__samePage") is True
    expect(page.get_by_test_id("message-total")).to_have_text("6")
    shot(page, "external-agent")


def test_a_key_made_on_the_keys_page_is_copied_and_pushes_history(
    page: Page, live_url: str, alice: Any
) -> None:
    """The keys page offers what an agent needs (read and write) and copies the key shown once;
    the copied key creates a session and appends to it with the client."""
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_url)
    log_in(page, live_url, "/keys/")
    expect(page.get_by_test_id("scope-read")).to_be_checked()
    expect(page.get_by_test_id("scope-write")).to_be_checked()
    expect(page.get_by_test_id("scope-govern")).not_to_be_checked()
    page.get_by_test_id("key-name").fill("nightly agent")
    page.get_by_test_id("key-create").click()
    shown = page.get_by_test_id("key-text").inner_text().strip()
    page.get_by_test_id("key-copy").click()
    expect(page.locator("[data-copied]")).to_have_text("Copied.")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == shown

    with Hub(live_url, copied) as hub:
        made = hub.create_session("pushed with the copied key", model="openai:gpt-4o")
        hub.append(made.id, [ModelRequest.user_text_prompt("hello")])
    assert AgentSession.objects.get(pk=made.id).owner == alice
