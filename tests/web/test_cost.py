"""What sessions cost: from the usage stored responses reported, in the fleet and the x-ray."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.usage import RequestUsage

from ctxhub.pricing import NO_COST, TokenUsage, price
from sessions import services
from sessions.services import costs
from sessions.services.costs import session_cost
from sessions.services.fleet import fleet
from sessions.templatetags.ctxhub import money
from tests.factories import make_session
from tests.messages import T0, agent_turns, user

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

SONNET = "anthropic:claude-sonnet-4-5"


def _answer(
    n: int,
    *,
    inputs: int,
    reads: int = 0,
    writes: int = 0,
    outputs: int = 0,
    model: str | None = "claude-sonnet-4-5-20250929",
    provider: str | None = "anthropic",
) -> ModelResponse:
    return ModelResponse(
        parts=[TextPart(f"answer {n}")],
        usage=RequestUsage(
            input_tokens=inputs,
            cache_read_tokens=reads,
            cache_write_tokens=writes,
            output_tokens=outputs,
        ),
        model_name=model,
        provider_name=provider,
        timestamp=T0 + timedelta(minutes=n),
    )


def _turns(*answers: ModelResponse) -> list[Any]:
    return [m for n, answer in enumerate(answers) for m in (user(f"question {n}"), answer)]


def _expected(*answers: ModelResponse, model: str = "claude-sonnet-4-5-20250929") -> Any:
    total = NO_COST
    for answer in answers:
        usage = answer.usage
        found = price(
            model,
            TokenUsage(
                input_tokens=usage.input_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                output_tokens=usage.output_tokens,
            ),
            provider="anthropic",
            at=answer.timestamp,
        )
        assert found is not None
        total += found
    return total


def _cost_cell(page: str, title: str) -> tuple[str, str]:
    """The fleet's cost cell of a session: what it shows and its title."""
    row = re.search(rf"<tr data-testid=\"fleet-row\".*?>{re.escape(title)}</a>.*?</tr>", page, re.S)
    assert row is not None, title
    cell = re.search(r'data-testid="cost">\s*<span[^>]*title="([^"]*)"[^>]*>([^<]*)</span>', row[0])
    assert cell is not None
    return cell[2], html.unescape(cell[1])


@pytest.fixture
def answers() -> list[ModelResponse]:
    return [
        _answer(0, inputs=12_000, writes=11_000, outputs=300),
        _answer(1, inputs=13_500, reads=11_000, writes=2_000, outputs=420),
        _answer(2, inputs=15_000, reads=13_000, writes=1_500, outputs=95),
    ]


def test_the_fleet_shows_what_the_responses_cost(
    client: Client, alice: Any, answers: list[ModelResponse]
) -> None:
    session = make_session(alice, title="Priced", model=SONNET)
    services.append_messages(session, _turns(*answers))
    expected = _expected(*answers)
    row = next(r for r in fleet(alice).rows if r.session.pk == session.pk)
    assert row.cost.price == expected
    assert (row.cost.responses, row.cost.priced) == (3, 3)
    assert row.cost.input_tokens == 40_500
    assert (row.cost.cache_read_tokens, row.cost.cache_write_tokens) == (24_000, 14_500)
    client.force_login(alice)
    shown, title = _cost_cell(client.get("/").content.decode(), "Priced")
    assert shown == money(expected.total)
    assert shown.startswith("$0.")
    assert f"cache reads {money(expected.cache_read)} (24,000)" in title
    assert f"cache writes {money(expected.cache_write)} (14,500)" in title
    assert f"output {money(expected.output)} (815)" in title
    assert f"input {money(expected.input)} (2,000 tokens)" in title


def test_an_offline_model_shows_no_price(client: Client, alice: Any) -> None:
    session = make_session(alice, title="Offline", model="offline:demo")
    offline = _answer(0, inputs=900, outputs=40, model="offline:demo", provider=None)
    services.append_messages(session, _turns(offline))
    cost = session_cost(session)
    assert (cost.price, cost.responses, cost.priced) == (None, 1, 0)
    client.force_login(alice)
    shown, title = _cost_cell(client.get("/").content.decode(), "Offline")
    assert shown == "no price"
    assert "900 input tokens" in title


def test_a_session_whose_responses_reported_no_usage_shows_a_dash(
    client: Client, alice: Any
) -> None:
    session = make_session(alice, title="Unreported", model=SONNET)
    services.append_messages(session, agent_turns(2, 1, "x"))
    assert not session_cost(session).reported
    client.force_login(alice)
    shown, _ = _cost_cell(client.get("/").content.decode(), "Unreported")
    assert shown == "—"


def test_a_response_naming_no_model_is_priced_as_the_session_s_model(alice: Any) -> None:
    session = make_session(alice, model="anthropic:claude-sonnet-4-5")
    bare = _answer(0, inputs=5_000, reads=4_000, outputs=10, model=None, provider=None)
    services.append_messages(session, _turns(bare))
    assert session_cost(session).price == _expected(bare, model="claude-sonnet-4-5")


def test_responses_of_a_model_with_no_price_are_left_out_and_counted(alice: Any) -> None:
    session = make_session(alice, model=SONNET)
    priced = _answer(0, inputs=5_000, outputs=10)
    offline = _answer(1, inputs=700, outputs=30, model="offline:demo", provider=None)
    services.append_messages(session, _turns(priced, offline))
    cost = session_cost(session)
    assert cost.price == _expected(priced)
    assert (cost.responses, cost.priced, cost.unpriced) == (2, 1, 1)
    assert cost.input_tokens == 5_700


def test_the_xray_head_shows_the_cost_so_far(
    client: Client, alice: Any, answers: list[ModelResponse]
) -> None:
    session = make_session(alice, model=SONNET)
    services.append_messages(session, _turns(*answers))
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    head = re.search(r'data-testid="xray-cost">cost so far <span[^>]*>[^<]*</span></span>', page)
    assert head is not None
    assert money(_expected(*answers).total) in head[0]
    assert "cache reads" in head[0]


def test_the_cost_follows_appends_reading_only_new_rows_and_no_payload(
    alice: Any,
    answers: list[ModelResponse],
    monkeypatch: pytest.MonkeyPatch,
    django_assert_num_queries: Any,
) -> None:
    session = make_session(alice, model=SONNET)
    services.append_messages(session, _turns(*answers[:2]))

    def parse(payload: Any) -> Any:
        raise AssertionError("a payload was parsed")

    monkeypatch.setattr("sessions.models.message_from_payload", parse)
    monkeypatch.setattr("sessions.payloads.message_from_payload", parse)
    with django_assert_num_queries(1):
        assert session_cost(session).price == _expected(*answers[:2])
    services.append_messages(session, _turns(answers[2]))
    seen: list[Any] = []
    read = costs._usage
    monkeypatch.setattr(costs, "_usage", lambda counts: seen.append(counts) or read(counts))
    with django_assert_num_queries(1):
        cost = session_cost(session)
    assert len(seen) == 1  # only the response stored since
    assert cost.price == _expected(*answers)
    # Read again whole, it is the same.
    cache.delete(costs._key(session.pk))
    assert session_cost(session) == cost


def test_counts_that_do_not_add_up_leave_the_response_unpriced(alice: Any) -> None:
    session = make_session(alice, model=SONNET)
    priced = _answer(0, inputs=5_000, outputs=10)
    odd = _answer(1, inputs=100, reads=500, outputs=10)  # more read than sent
    services.append_messages(session, _turns(priced, odd))
    cost = session_cost(session)
    assert cost.price == _expected(priced)
    assert (cost.responses, cost.priced) == (2, 1)
