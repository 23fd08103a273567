"""The fleet: what each session's next request carries, beside its raw log; search and sort."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from sessions import services
from sessions.models import CompactionJob, JobStatus
from sessions.services.fleet import fleet
from tests.factories import make_session
from tests.messages import agent_turns

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


@pytest.fixture
def sessions(alice: Any) -> dict[str, Any]:
    small = make_session(alice, title="Small chat", model="openai:gpt-4o")
    services.append_messages(small, agent_turns(1, 1, "x"))
    big = make_session(alice, title="Big agent run", model="anthropic:claude-sonnet-4-5")
    services.append_messages(big, agent_turns(6, 4, "y " * 8_000), auto_compact=False)
    empty = make_session(alice, title="Nothing yet", model="openai:gpt-4.1")
    return {"small": small, "big": big, "empty": empty}


def _titles(page: str) -> list[str]:
    return re.findall(r'<tr data-testid="fleet-row"[^>]*>\s*<td><a href="[^"]+">([^<]+)</a>', page)


def test_rows_carry_governed_tokens_beside_the_raw_log(alice: Any, sessions: Any) -> None:
    rows = {row.session.title: row for row in fleet(alice)}
    big = rows["Big agent run"]
    context = services.governed_context(sessions["big"])
    assert big.governed == context.tokens
    assert big.budget == context.report.budget_tokens
    # The request is measured against the room a request has, as both count its system
    # prompt and tool definitions (the budget is the history's share of that room).
    report = context.report
    room = report.window_tokens - report.reserved_output_tokens - report.safety_margin_tokens
    assert big.room == room
    assert big.percent == 100.0 * context.tokens / room
    assert big.log_tokens == services.token_totals(sessions["big"]).tokens
    assert big.log_tokens > big.governed  # the raw log is not what a request carries
    assert big.headroom == big.threshold - context.report.tokens_before
    assert rows["Nothing yet"].governed == 0


def test_the_fullest_comes_first_and_other_sorts_apply(
    client: Client, alice: Any, sessions: Any
) -> None:
    client.force_login(alice)
    assert _titles(client.get("/").content.decode())[0] == "Big agent run"
    by_title = _titles(client.get("/?sort=title").content.decode())
    assert by_title == ["Big agent run", "Nothing yet", "Small chat"]
    assert client.get("/?sort=sideways").status_code == 400


def test_search_matches_title_and_model_and_answers_htmx_with_the_table(
    client: Client, alice: Any, sessions: Any
) -> None:
    client.force_login(alice)
    assert _titles(client.get("/?q=claude").content.decode()) == ["Big agent run"]
    partial = client.get("/?q=small", headers={"HX-Request": "true"}).content.decode()
    assert _titles(partial) == ["Small chat"]
    assert "<html" not in partial
    assert "No session matches" in client.get("/?q=zzz").content.decode()


def test_a_running_or_failed_job_shows_as_the_status(alice: Any, sessions: Any) -> None:
    big, small = sessions["big"], sessions["small"]
    CompactionJob.objects.create(
        session=big, key="k1", status=JobStatus.RUNNING, plan={}, policy={}
    )
    CompactionJob.objects.create(
        session=small,
        key="k2",
        status=JobStatus.FAILED,
        error="the summariser is down",
        plan={},
        policy={},
    )
    rows = {row.session.title: row for row in fleet(alice)}
    assert rows["Big agent run"].status == "compacting"
    assert (rows["Small chat"].status, rows["Small chat"].status_detail) == (
        "failed",
        "the summariser is down",
    )


def test_others_see_only_their_own_and_staff_see_all(
    alice: Any, bob: Any, sessions: Any, django_user_model: Any
) -> None:
    make_session(bob, title="Bob's run")
    assert {r.session.title for r in fleet(bob)} == {"Bob's run"}
    staff = django_user_model.objects.create_user("carol", password="pw", is_staff=True)
    rows = fleet(staff)
    assert len(rows) == 4
    assert not any(row.owned for row in rows)
