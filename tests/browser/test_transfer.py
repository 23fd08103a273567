"""Export a session from its page, import it on the fleet page, and see a bad file refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from sessions import services
from sessions.models import AgentSession, Message
from tests.conftest import ARTIFACTS
from tests.factories import make_session
from tests.messages import agent_turns
from tests.processes import celery_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "alice-password"


@pytest.fixture(scope="module")
def worker(live_url: str) -> Iterator[None]:
    with celery_worker(ARTIFACTS / "logs" / "browser-transfer-worker.log"):
        yield


@pytest.fixture
def session(alice: Any) -> Any:
    session = make_session(alice, title="Exported from the page")
    history = agent_turns(10, 5, "line\n" * 300, "Ship OPS-9")
    services.append_messages(session, history, auto_compact=False)
    return session


def _log_in(page: Page, live_url: str, path: str) -> None:
    page.goto(f"{live_url}/login/?next={path}")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()


def test_export_then_import_lands_on_the_new_session(
    page: Page, live_url: str, worker: None, session: Any, tmp_path: Path
) -> None:
    _log_in(page, live_url, f"/sessions/{session.pk}/")
    expect(page.get_by_role("heading", name=session.title)).to_be_visible()
    # Alice compacts it before she exports it.
    page.get_by_text("/compact", exact=True).click()
    page.get_by_test_id("compact-preview").click()
    expect(page.get_by_test_id("preview")).to_contain_text("Summarises")
    page.get_by_test_id("compact-apply").click()
    expect(page.locator("#job-progress")).to_have_attribute("data-stage", "done", timeout=60_000)
    expect(page.get_by_test_id("compaction")).to_contain_text("by alice")
    export = page.get_by_test_id("export")
    with page.expect_download() as jsonl:
        export.get_by_role("link", name="JSONL").click()
    saved = tmp_path / jsonl.value.suggested_filename
    jsonl.value.save_as(saved)
    assert saved.name.endswith(".jsonl")
    lines = saved.read_text().splitlines()
    assert json.loads(lines[0])["session"]["title"] == session.title
    with page.expect_download() as markdown:
        export.get_by_role("link", name="Markdown").click()
    assert markdown.value.suggested_filename.endswith(".md")

    page.goto(f"{live_url}/")
    page.get_by_text("Import a session").click()
    page.get_by_test_id("import-file").set_input_files(saved)
    page.get_by_test_id("import-start").click()

    # The owner has the session exported: the copy is told apart from it.
    expect(page.get_by_role("heading", name=f"{session.title} (imported)")).to_be_visible()
    copy = AgentSession.objects.exclude(pk=session.pk).get()
    assert page.url.endswith(f"/sessions/{copy.pk}/")
    assert copy.messages.count() == session.messages.count()
    expect(page.locator("article.msg")).to_have_count(session.messages.count())
    # Alice compacted it on the hub it came from: the record says so, not "automatic".
    record = page.get_by_test_id("compaction")
    expect(record).to_contain_text("by alice (on the hub it was imported from)")
    expect(record).not_to_contain_text("automatic")

    page.goto(f"{live_url}/")
    for title in (session.title, f"{session.title} (imported)"):
        expect(page.get_by_role("link", name=title, exact=True)).to_have_count(1)


def test_a_bad_file_shows_its_line_and_stores_nothing(
    page: Page, live_url: str, session: Any, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ctxhub_export": 1, "session": {}}\n')
    messages = Message.objects.count()
    _log_in(page, live_url, "/")
    page.get_by_text("Import a session").click()
    page.get_by_test_id("import-file").set_input_files(bad)
    page.get_by_test_id("import-start").click()

    expect(page.get_by_test_id("import-error")).to_have_text(
        "line 1: session.model: missing", timeout=10_000
    )
    expect(page.get_by_test_id("import-session")).to_have_attribute("open", "")
    assert list(AgentSession.objects.values_list("pk", flat=True)) == [session.pk]
    assert Message.objects.count() == messages
