"""Transcripts in the browser: files dropped on the imports page become sessions with their
what-if, and a transcript followed as its agent writes it shows each new line on the open
session page (``import_transcripts --follow`` a process of its own, its pushes through Redis, as in
production)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_controls import log_in, shot
from tests.browser.test_governor import WATCH_OPEN
from tests.conftest import ARTIFACTS
from tests.processes import BIN, running
from tests.transcripts import lines
from tests.transcripts.fixtures.codex import write_session
from transcripts.models import Transcript

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_dropped_transcripts_become_sessions_with_what_ctxhub_would_have_done(
    page: Page, live_url: str, alice: Any, tmp_path: Path
) -> None:
    rollout = write_session(tmp_path / "rollout.jsonl", seed=2, turns=14)
    claude = tmp_path / f"{lines.SESSION}.jsonl"
    claude.write_text(
        lines.prompt("u1", None, 0, "Tidy the release notes")
        + lines.answer("a1", "u1", 2, "m1", lines.text("Tidied."), lines.usage(0, 800, 5))
    )
    log_in(page, live_url, "/imports/")

    page.get_by_test_id("transcript-files").set_input_files([rollout.path, claude])

    reports = page.get_by_test_id("import-reports")
    expect(reports).to_contain_text("rollout.jsonl")
    expect(reports).to_contain_text(f"{lines.SESSION}.jsonl: 2 messages in 1 new session")
    shot(page, "transcripts-imported")
    reports.get_by_role("link", name=rollout.title[:20], exact=False).first.click()
    expect(page.get_by_test_id("transcript-panel")).to_contain_text("Codex CLI's transcript")
    page.get_by_test_id("what-if-link").click()
    expect(page.get_by_test_id("what-if-agent")).to_contain_text(f"{rollout.response_count}")
    expect(page.locator("[data-testid=what-if-rows] tbody tr")).to_have_count(
        rollout.response_count
    )
    shot(page, "transcripts-what-if")


def test_a_followed_transcript_shows_each_new_line_on_the_open_page(
    page: Page, live_url: str, alice: Any, tmp_path: Path
) -> None:
    path = tmp_path / f"{lines.SESSION}.jsonl"
    path.write_text(lines.prompt("u1", None, 0, "Why is the nightly build red?"))
    follow = [
        str(BIN / "python"),
        "manage.py",
        "import_transcripts",
        str(tmp_path),
        "--owner",
        "alice",
        "--follow",
    ]

    def imported() -> bool:
        return Transcript.objects.filter(source=lines.SESSION).exists()

    with running(follow, ARTIFACTS / "logs" / "follow.log", imported):
        session = Transcript.objects.get(source=lines.SESSION).session
        page.add_init_script(WATCH_OPEN)
        log_in(page, live_url, session.get_absolute_url())
        page.wait_for_function("() => window.open_ === true", timeout=10_000)

        with path.open("a") as handle:
            handle.write(
                lines.answer(
                    "a1",
                    "u1",
                    3,
                    "m1",
                    lines.text("The cache key changed."),
                    lines.usage(0, 640, 7),
                )
            )
            handle.write(lines.prompt("u2", "a1", 9, "Pin the key then"))
        written = time.monotonic()

        # Read within half a second and pushed as the append commits (the latency is timed
        # by hand, in docs/transcripts.md: a test on a loaded machine only waits for it).
        timeline = page.get_by_test_id("timeline")
        expect(timeline).to_contain_text("The cache key changed.", timeout=15_000)
        expect(timeline).to_contain_text("Pin the key then")
        expect(page.locator("article.msg")).to_have_count(3)
        print(f"appended lines on the page {time.monotonic() - written:.2f} s after written")
        shot(page, "transcripts-followed")
