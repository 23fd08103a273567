"""The figures the pages show, read off them in Chromium as a reader would and held against the
API's and the services': the fleet's raw log through compactions, undos and an import, its
order by that log, the count a summary gives the model against its preview and record, a
preview's promise against what compacting gives, what Top consumers' Stored sums, an import
told apart from its original, and every demo session's row against the API."""

from __future__ import annotations

import re
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from playwright.sync_api import Locator, Page, expect

from sessions import services
from sessions.api.keys import create_key
from sessions.consumers_report import top_consumers
from sessions.models import AgentSession, Compaction, SentRequest
from tests.browser.test_controls import figure, log_in, shot
from tests.browser.test_dashboard import server_side
from tests.browser.test_governor import sent_figures
from tests.conftest import ARTIFACTS
from tests.factories import make_session
from tests.governed.builders import SMALL_POLICY, turn
from tests.messages import agent_turns
from tests.processes import celery_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SUMMARY_COUNT = re.compile(r"\[Summary of ([\d,]+) earlier messages\]")


@pytest.fixture(scope="module")
def worker(live_url: str) -> Iterator[None]:
    with celery_worker(ARTIFACTS / "logs" / "browser-true-numbers-worker.log"):
        yield


def governed_session(owner: Any, title: str, turns: int) -> AgentSession:
    """An agent's session under a 16,000-token window, each request sent as the API's
    ``/context`` sends it: compactions have something to summarise within seconds."""
    session = make_session(owner, title=title, policy=SMALL_POLICY)
    for n in range(turns):
        services.append_messages(session, turn(n), auto_compact=False)
        services.send_context(session)
    return session


def compact(session: AgentSession, actor: Any = None) -> Compaction:
    """A compaction run to its end in this process (jobs are eager here), as a person asks."""
    server_side(lambda: services.request_compaction(session, actor=actor))
    return Compaction.objects.filter(session=session).latest("created_at")


def fleet_row(page: Page, session: AgentSession) -> Locator:
    return page.locator(f'[data-testid="fleet-row"][data-session="{session.pk}"]')


def raw_log(page: Page, session: AgentSession) -> int:
    """The raw log a fleet row shows (``411,118 in 3,402 messages``)."""
    text = fleet_row(page, session).get_by_test_id("log-tokens").inner_text()
    return int(text.split()[0].replace(",", ""))


def expect_raw_log(page: Page, session: AgentSession, tokens: int) -> None:
    cell = fleet_row(page, session).get_by_test_id("log-tokens")
    expect(cell).to_have_text(re.compile(rf"^\s*{re.escape(f'{tokens:,}')} in "))


def export_from_page(page: Page, live_url: str, session: AgentSession, folder: Path) -> Path:
    """The session's JSONL export, downloaded from its page as its owner would."""
    page.goto(f"{live_url}{session.get_absolute_url()}")
    with page.expect_download() as download:
        page.get_by_test_id("export").get_by_role("link", name="JSONL").click()
    saved = folder / download.value.suggested_filename
    download.value.save_as(saved)
    return saved


def import_on_fleet_page(page: Page, live_url: str, file: Path) -> AgentSession:
    """The file imported from the fleet page; the page lands on the new session."""
    page.goto(f"{live_url}/")
    page.get_by_text("Import a session").click()
    page.get_by_test_id("import-file").set_input_files(file)
    page.get_by_test_id("import-start").click()
    page.wait_for_url(re.compile(r"/sessions/[0-9a-f-]{36}/$"))
    return AgentSession.objects.get(pk=page.url.rstrip("/").rsplit("/", 1)[1])


def log_in_as_demo(page: Page, live_url: str) -> None:
    page.goto(f"{live_url}/login/?next=/")
    page.get_by_label("Username").fill("demo")
    page.get_by_label("Password").fill("demo")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_function("() => window.htmx !== undefined")


def test_the_fleets_raw_log_is_the_log_through_compactions_undos_and_an_import(
    page: Page, live_url: str, alice: Any, tmp_path: Path
) -> None:
    """The raw log is everything stored: no compaction record, active or undone, multiplies
    it, the order by it is the logs' true order, and an import's is its original's."""
    compacted = governed_session(alice, "Alpha: compacted three times", 40)
    larger = governed_session(alice, "Beta: larger, never compacted", 60)
    smaller = governed_session(alice, "Gamma: smaller", 20)
    sizes = {s: services.token_totals(s).tokens for s in (compacted, larger, smaller)}
    # Twice the compacted log would outrank the larger one: a log counted once per record
    # would show in the order.
    assert sizes[smaller] < sizes[compacted] < sizes[larger] < 2 * sizes[compacted]
    log_in(page, live_url, "/")

    def each_row_is_its_log() -> None:
        page.goto(f"{live_url}/")
        for session, tokens in sizes.items():
            assert services.token_totals(session).tokens == tokens
            expect_raw_log(page, session, tokens)

    each_row_is_its_log()
    first = compact(compacted, alice)
    each_row_is_its_log()  # one record
    services.undo_compaction(compacted, first.pk, actor=alice)
    each_row_is_its_log()  # one record, undone
    second = compact(compacted, alice)
    assert second.pk != first.pk
    each_row_is_its_log()  # two records, one undone
    services.undo_compaction(compacted, second.pk, actor=alice)
    compact(compacted, alice)
    assert compacted.compactions.count() == 3
    assert compacted.compactions.filter(undone_at__isnull=True).count() == 1
    each_row_is_its_log()  # three records, two undone
    expect(fleet_row(page, compacted).get_by_test_id("compactions")).to_have_text("1")
    shot(page, "true-numbers-fleet-log")

    # Sorted by the log, the rows are in the order of the logs' true sizes.
    page.goto(f"{live_url}/?sort=log")
    rows = page.get_by_test_id("fleet-row")
    expect(rows).to_have_count(3)
    for position, session in enumerate(sorted(sizes, key=lambda s: -sizes[s])):
        expect(rows.nth(position)).to_have_attribute("data-session", str(session.pk))

    # Its copy, exported and imported through the pages, has the same log and the same records.
    copy = import_on_fleet_page(
        page, live_url, export_from_page(page, live_url, compacted, tmp_path)
    )
    assert copy.compactions.count() == 3
    assert services.token_totals(copy).tokens == sizes[compacted]
    page.goto(f"{live_url}/?sort=log")
    expect_raw_log(page, copy, sizes[compacted])
    assert raw_log(page, copy) == raw_log(page, compacted)
    expect(rows).to_have_count(4)
    expected = sorted([*sizes, copy], key=lambda s: (-services.token_totals(s).tokens, s.title))
    for position, session in enumerate(expected):
        expect(rows.nth(position)).to_have_attribute("data-session", str(session.pk))


def test_the_sort_control_orders_the_fleet_by_the_log(
    page: Page, live_url: str, alice: Any
) -> None:
    """Sort: log, picked in the fleet's form, orders the rows by their raw logs (the fullest
    first is another order here: the smaller log fills a smaller window)."""
    full = make_session(alice, title="Small log, small window", context_window=16_000)
    services.append_messages(full, agent_turns(2, 2, "x\n" * 400), auto_compact=False)
    large = make_session(alice, title="Large log, large window")
    services.append_messages(large, agent_turns(6, 3, "x\n" * 400), auto_compact=False)
    assert services.token_totals(large).tokens > services.token_totals(full).tokens
    log_in(page, live_url, "/")
    rows = page.get_by_test_id("fleet-row")
    expect(rows.first).to_have_attribute("data-session", str(full.pk))  # the fullest first

    page.get_by_test_id("fleet-sort").select_option("log")
    expect(rows.first).to_have_attribute("data-session", str(large.pk))
    expect(rows.nth(1)).to_have_attribute("data-session", str(full.pk))
    assert "sort=log" in page.url


def read_record_originals(record: Locator) -> int:
    """The originals a compaction's record says it replaces (``(450 originals, …)``)."""
    found = re.search(r"\(([\d,]+) originals", record.inner_text())
    assert found is not None, record.inner_text()
    return int(found.group(1).replace(",", ""))


def summary_count(text: str) -> int:
    found = SUMMARY_COUNT.search(text)
    assert found is not None, text[:2_000]
    return int(found.group(1).replace(",", ""))


def test_the_summary_sent_counts_what_its_preview_and_its_record_count(
    page: Page, live_url: str, worker: None, alice: Any
) -> None:
    """The model is told "[Summary of N earlier messages]" with the N the preview gave and
    the record lists, also when user messages stay verbatim beside the summary."""
    session = governed_session(alice, "Summarised for the model", 40)
    log_in(page, live_url, session.get_absolute_url())
    page.get_by_text("/compact", exact=True).click()
    page.get_by_test_id("compact-preview").click()
    preview = page.get_by_test_id("preview")
    # The case where the counts parted: user messages kept beside the summary.
    expect(preview).to_contain_text("staying verbatim beside it")
    promised = figure(page, "preview-summarised")
    assert promised > 0
    page.get_by_test_id("compact-apply").click()
    expect(page.locator("#job-progress")).to_have_attribute("data-stage", "done", timeout=60_000)
    record = page.get_by_test_id("compaction")
    expect(record).to_have_count(1)
    assert read_record_originals(record) == promised
    assert len(Compaction.objects.get(session=session).summarized_seqs) == promised

    # The agent's next request, through the API, then opened on its page as it was sent.
    _, key = create_key(alice, name="agent", scopes=["read"])
    answer = page.request.get(
        f"{live_url}/api/v1/sessions/{session.pk}/context",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert answer.ok, answer.text()
    assert summary_count(answer.text()) == promised
    sent = SentRequest.objects.filter(session=session).order_by("-number").first()
    assert sent is not None
    page.goto(f"{live_url}/sessions/{session.pk}/requests/{sent.number}/")
    messages = page.get_by_test_id("sent-messages")
    expect(messages).to_contain_text("[Summary of ")
    assert summary_count(messages.inner_text()) == promised
    shot(page, "true-numbers-summary-sent")


def compact_on_the_page(page: Page, live_url: str, session: AgentSession) -> tuple[int, int, int]:
    """Preview then Compact now on the session's page: the next request as the x-ray showed
    it, the preview's "at most", and what it carries once compacted (as the job says and the
    x-ray then shows)."""
    page.goto(f"{live_url}{session.get_absolute_url()}")
    page.wait_for_function("() => window.htmx !== undefined")
    now = figure(page, "governed-total")
    page.get_by_text("/compact", exact=True).click()
    page.get_by_test_id("compact-preview").click()
    said = page.get_by_test_id("preview-sentence")
    expect(said).to_contain_text("The model gets a summary of")
    before, at_most = sent_figures(said.inner_text())
    assert before == now
    page.get_by_test_id("compact-apply").click()
    progress = page.locator("#job-progress")
    expect(progress).to_have_attribute("data-stage", "done", timeout=60_000)
    before, after = sent_figures(progress.inner_text())
    assert before == now
    expect(page.get_by_test_id("governed-total")).to_have_text(f"{after:,}", timeout=10_000)
    return now, at_most, after


def test_compact_now_keeps_the_previews_promise_after_an_undo_and_again(
    page: Page, live_url: str, worker: None
) -> None:
    """What the next request carries after Compact now is never more than the preview's "at
    most", and a preview that promises no smaller request is not followed by a smaller one:
    on the demo session where that happened (its seeded compaction undone), then undone and
    compacted again, then compacted once more after its log grew."""
    server_side(lambda: call_command("seed_demo", stdout=StringIO()))
    session = AgentSession.objects.get(title__startswith="Migrate the billing service")
    seeded = session.compactions.get()
    log_in_as_demo(page, live_url)
    rounds = []
    for _ in range(2):
        page.goto(f"{live_url}{session.get_absolute_url()}")
        page.get_by_test_id(f"undo-compaction-{seeded.pk}").click()
        expect(page.locator(f"#compaction-{seeded.pk}")).to_have_attribute("data-state", "undone")
        rounds.append(compact_on_the_page(page, live_url, session))
        seeded = session.compactions.get(undone_at__isnull=True)
    # The log grows by a dozen turns, each request sent as an agent sends it (their cache
    # weighting priced on the page), and it is compacted again, its earlier summary merged.
    for n in range(100, 112):
        services.append_messages(session, turn(n, size=600), auto_compact=False)
        services.send_context(session)
    rounds.append(compact_on_the_page(page, live_url, session))
    assert session.compactions.filter(undone_at__isnull=True).count() == 2
    shot(page, "true-numbers-promise")
    for now, at_most, after in rounds:
        assert after <= at_most, rounds
        # A preview whose "at most" is no less than now says the request will not shrink.
        assert at_most < now or after >= now, rounds


def test_top_consumers_stored_is_the_history_its_caption_names(
    page: Page, live_url: str, alice: Any
) -> None:
    """On a compacted session, Stored sums the history governance starts from, as its caption
    says (the summary in place of what it covers), not the raw log beside it."""
    session = make_session(alice, title="Compacted, then inspected", context_window=16_000)
    history = agent_turns(6, 4, "def handler():\n    return 42\n" * 200, "Refactor OPS-77")
    services.append_messages(session, history, auto_compact=False)
    compact(session, alice)
    log_in(page, live_url, session.get_absolute_url())
    control = page.get_by_test_id("consumers-control")
    control.locator("summary").click()
    panel = control.get_by_test_id("consumers")
    expect(panel.locator('tr[data-kind="notes"]')).to_be_visible()
    caption = panel.locator(".consumers-note")
    expect(caption).to_contain_text("Stored: the tokens of the history governance starts from")
    expect(caption).to_contain_text(
        "the log with its compactions' summaries in place of what they cover"
    )
    expect(caption).not_to_contain_text("as the log holds them")

    table = panel.get_by_test_id("consumers-by-kind")
    stored = int(table.locator("tr.total td").nth(3).inner_text().replace(",", ""))
    rows = [
        int(v)
        for v in table.locator("tr[data-stored]").evaluate_all(
            "rows => rows.map(r => r.dataset.stored)"
        )
    ]
    assert sum(rows) == stored
    assert stored == top_consumers(services.governed_context(session)).stored
    # The effective history (the session has no system prompt): the x-ray's figure before
    # governance, far below the stored log on the same page.
    assert stored == figure(page, "effective-total")
    raw = figure(page, "token-total")
    assert raw == services.token_totals(session).tokens
    assert stored < raw
    # The summary is in it, in place of the originals.
    notes = panel.locator('tr[data-kind="notes"]')
    assert int(notes.get_attribute("data-stored") or 0) > 0
    shot(page, "true-numbers-consumers")


def titles_in_the_fleet(page: Page) -> list[str]:
    return page.get_by_test_id("fleet-row").locator("td:first-child > a").all_inner_texts()


def test_an_import_is_titled_apart_and_keeps_who_compacted(
    page: Page, live_url: str, alice: Any, tmp_path: Path
) -> None:
    """Imported beside its original (twice), a session's rows never read the same, and the
    compaction alice ran shows hers on every copy, not an automatic one."""
    original = governed_session(alice, "Ship OPS-9", 30)
    compact(original, alice)
    log_in(page, live_url, original.get_absolute_url())
    expect(page.get_by_test_id("compaction")).to_contain_text("by alice")
    export = export_from_page(page, live_url, original, tmp_path)
    copies = [import_on_fleet_page(page, live_url, export) for _ in range(2)]

    page.goto(f"{live_url}/")
    expect(page.get_by_test_id("fleet-row")).to_have_count(3)
    titles = titles_in_the_fleet(page)
    assert len(set(titles)) == len(titles), titles
    assert set(titles) == {"Ship OPS-9", "Ship OPS-9 (imported)", "Ship OPS-9 (imported 2)"}
    for copy in copies:
        page.goto(f"{live_url}{copy.get_absolute_url()}")
        expect(page.get_by_role("heading", name=copy.title, exact=True)).to_be_visible()
        record = page.get_by_test_id("compaction")
        expect(record).to_have_count(1)
        expect(record).to_contain_text("by alice (on the hub it was imported from)")
        expect(record).not_to_contain_text("automatic")
    shot(page, "true-numbers-import")


def test_every_demo_rows_figures_are_the_apis_after_compactions_an_undo_and_an_import(
    page: Page, live_url: str, tmp_path: Path
) -> None:
    """The fleet of the demo, compacted, one compaction undone and one session imported: each
    row's sent tokens and raw log are the API's for that session."""
    server_side(lambda: call_command("seed_demo", stdout=StringIO()))
    demo = AgentSession.objects.filter(owner__username="demo").first()
    assert demo is not None
    owner = demo.owner
    for session in AgentSession.objects.filter(owner=owner):
        if not session.compactions.filter(undone_at__isnull=True).exists():
            # Eager: done when it returns (a session with nothing to compact keeps none).
            server_side(lambda s=session: services.request_compaction(s, actor=owner))
    compacted = AgentSession.objects.filter(
        owner=owner, pk__in=Compaction.objects.values("session")
    )
    assert compacted.count() >= 3
    # One compaction undone, then compacted again: an undone record beside an active one.
    again = compacted.get(title__startswith="Fix the flaky tokenizer test")
    services.undo_compaction(again, again.compactions.get().pk, actor=owner)
    server_side(lambda: services.request_compaction(again, actor=owner))
    assert again.compactions.count() == 2
    log_in_as_demo(page, live_url)
    exported = compacted.get(title__startswith="Memory leak in the websocket gateway")
    import_on_fleet_page(page, live_url, export_from_page(page, live_url, exported, tmp_path))

    sessions = list(AgentSession.objects.filter(owner=owner))
    _, key = create_key(owner, name="figures", scopes=["read"])
    headers = {"Authorization": f"Bearer {key}"}
    page.goto(f"{live_url}/")
    expect(page.get_by_test_id("fleet-row")).to_have_count(len(sessions))
    shot(page, "true-numbers-demo-fleet")
    for session in sessions:
        cell = fleet_row(page, session).get_by_test_id("governed")
        expect(cell).to_have_attribute("data-current", "true")
        shown = int(cell.get_attribute("data-governed") or -1)
        log = raw_log(page, session)
        described = page.request.get(f"{live_url}/api/v1/sessions/{session.pk}", headers=headers)
        assert described.ok, described.text()
        assert log == described.json()["tokens"], session.title
        assert log == services.token_totals(session).tokens, session.title
        assert shown == services.governed_context(session).tokens, session.title
        context = page.request.get(
            f"{live_url}/api/v1/sessions/{session.pk}/context", headers=headers
        )
        assert context.ok, context.text()
        report = context.json()["report"]
        sent = report["tokens_after"] + report["tool_definition_tokens"]
        assert shown == sent, session.title
