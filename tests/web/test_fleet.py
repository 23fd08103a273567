"""The fleet: what each session's next request carries, beside its raw log; search and sort."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.test import Client

from sessions import services
from sessions.models import AgentSession, CompactionJob, GovernedSnapshot, JobStatus
from sessions.services.fleet import PAGE_SIZE, fleet
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
    row = r'<tr data-testid="fleet-row"[^>]*>\s*<td class="col-title"><a href="[^"]+"[^>]*>'
    return [html.unescape(title) for title in re.findall(row + r"([^<]+)</a>", page)]


def test_rows_carry_governed_tokens_beside_the_raw_log(alice: Any, sessions: Any) -> None:
    rows = {row.session.title: row for row in fleet(alice).rows}
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
    rows = {row.session.title: row for row in fleet(alice).rows}
    assert rows["Big agent run"].status == "compacting"
    assert (rows["Small chat"].status, rows["Small chat"].status_detail) == (
        "failed",
        "the summariser is down",
    )


def test_others_see_only_their_own_and_staff_see_all(
    alice: Any, bob: Any, sessions: Any, django_user_model: Any
) -> None:
    make_session(bob, title="Bob's run")
    assert {r.session.title for r in fleet(bob).rows} == {"Bob's run"}
    staff = django_user_model.objects.create_user("carol", password="pw", is_staff=True)
    rows = fleet(staff).rows
    assert len(rows) == 4
    assert not any(row.owned for row in rows)


def _many(owner: Any, count: int) -> list[AgentSession]:
    """``count`` sessions with no messages, their raw logs sized apart (the listing reads the
    stored counts), titled in an order their creation does not follow."""
    return AgentSession.objects.bulk_create(
        AgentSession(
            owner=owner,
            title=f"Run {(n * 37) % count:04}",
            model="openai:gpt-4o" if n % 3 else "anthropic:claude-sonnet-4-5",
            log_tokens=n * 10,
        )
        for n in range(count)
    )


def test_a_large_fleet_comes_in_pages_ordered_across_them(client: Client, alice: Any) -> None:
    _many(alice, PAGE_SIZE + 50)
    client.force_login(alice)
    first = client.get("/?sort=title").content.decode()
    assert len(_titles(first)) == PAGE_SIZE
    assert f"1\N{EN DASH}{PAGE_SIZE} of {PAGE_SIZE + 50} sessions" in first
    assert 'data-testid="fleet-next"' in first
    assert 'data-testid="fleet-prev"' not in first
    second = client.get("/?sort=title&page=2").content.decode()
    assert len(_titles(second)) == 50
    assert 'data-testid="fleet-next"' not in second
    every = _titles(first) + _titles(second)
    assert every == sorted(every)
    assert len(set(every)) == PAGE_SIZE + 50
    # Past the last page: the last page.
    assert _titles(client.get("/?sort=title&page=9").content.decode()) == _titles(second)
    # The log's size orders across pages too, largest first.
    page = fleet(alice, sort="log")
    assert [row.log_tokens for row in page.rows] == sorted(
        (n * 10 for n in range(50, PAGE_SIZE + 50)), reverse=True
    )
    assert (page.first, page.last, page.pages) == (1, PAGE_SIZE, 2)


def test_the_fullest_of_a_large_fleet_are_ordered_by_their_stored_figures(alice: Any) -> None:
    sessions = _many(alice, PAGE_SIZE + 10)
    for share, session in zip((50, 90, 10), sessions[-3:], strict=True):
        GovernedSnapshot.objects.create(
            session=session,
            key="an earlier state",
            messages="[]",
            report="{}",
            seqs="[]",
            tokens=share * 1_000,
            budget=90_000,
            room=100_000,
        )
    rows = fleet(alice, sort="fullest").rows
    assert [row.session.pk for row in rows[:3]] == [
        sessions[-2].pk,
        sessions[-3].pk,
        sessions[-1].pk,
    ]


def test_filters_by_model_state_and_owner(
    client: Client, alice: Any, bob: Any, sessions: Any, django_user_model: Any
) -> None:
    big, small = sessions["big"], sessions["small"]
    make_session(bob, title="Bob's run", model="anthropic:claude-sonnet-4-5")
    CompactionJob.objects.create(
        session=small, key="k", status=JobStatus.FAILED, error="down", plan={}, policy={}
    )
    AgentSession.objects.filter(pk=big.pk).update(auto_compaction_paused="the summary grew")
    client.force_login(alice)
    page = client.get("/?model=anthropic:claude-sonnet-4-5").content.decode()
    assert _titles(page) == ["Big agent run"]
    assert _titles(client.get("/?state=failed").content.decode()) == ["Small chat"]
    assert _titles(client.get("/?state=flagged").content.decode()) == ["Big agent run"]
    assert _titles(client.get("/?state=compacting").content.decode()) == []
    assert "in the state compacting" in client.get("/?state=compacting").content.decode()
    # Only staff filter by owner (and see the choice); another's name is no way in for others.
    assert 'data-testid="fleet-owner"' not in page
    assert _titles(client.get("/?owner=bob&sort=title").content.decode()) == [
        "Big agent run",
        "Nothing yet",
        "Small chat",
    ]
    assert 'data-testid="owner"' not in page  # one's own sessions need no owner column
    staff = django_user_model.objects.create_user("carol", password="pw", is_staff=True)
    client.force_login(staff)
    page = client.get("/?owner=bob").content.decode()
    assert 'data-testid="fleet-owner"' in page
    assert _titles(page) == ["Bob's run"]
    # Staff see whose each session is, in a column of its own (read-only: not theirs).
    owners = re.findall(r'data-testid="owner">([^ <]+) <span class="muted"[^>]*>read-only', page)
    assert owners == ["bob"]
    every = client.get("/?sort=title").content.decode()
    assert re.findall(r'data-testid="owner">([^ <]+)', every) == ["alice", "bob", "alice", "alice"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("page=0", "page"),
        ("page=two", "page"),
        ("page=99999999", "page"),
        ("page=%C2%B2", "page"),  # "²": a digit to str.isdigit, not to int
        ("page=" + "9" * 5_000, "page"),  # past int()'s digit limit
        ("state=hot", "state"),
    ],
)
def test_a_bad_page_or_state_is_a_400_naming_it(
    client: Client, alice: Any, query: str, field: str
) -> None:
    client.force_login(alice)
    response = client.get(f"/?{query}")
    assert response.status_code == 400
    assert response.content.decode().startswith(f"{field}:")
