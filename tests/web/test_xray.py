"""The session x-ray: categories that add up, zones, and the fate of every message shown."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from pydantic_ai.messages import ModelResponse, ToolReturnPart
from pydantic_ai.usage import RequestUsage

from ctxhub.governance import Policy
from sessions import services
from sessions.demo import DEMO_SESSIONS
from sessions.history import record_state
from sessions.models import AgentSession, Compaction, SentRequest
from sessions.presenters import present_message
from sessions.services import limits_for
from sessions.trajectory import trajectory
from sessions.xray import USED, Fates, xray
from tests.factories import make_session
from tests.messages import agent_turns, reply, tool_call, tool_result, user

LIMITS = limits_for(Policy(), window=128_000, budget=20)

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def _numbers(page: str) -> dict[str, int]:
    """The category table as the page shows it: key → tokens."""
    return {
        key: int(tokens)
        for key, tokens in re.findall(
            r'<tr data-category="(\w+)"[^>]*>.*?data-tokens="(\d+)"', page, re.S
        )
    }


def test_the_meter_adds_up_to_the_governed_count_for_every_demo_session(
    client: Client, django_user_model: Any
) -> None:
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    client.login(username="demo", password="demo")
    sessions = list(AgentSession.objects.all())
    assert len(sessions) == len(DEMO_SESSIONS) + 1  # and the tour
    for session in sessions:
        context = services.governed_context(session)
        page = client.get(f"/sessions/{session.pk}/").content.decode()
        shown = _numbers(page)
        assert sum(shown[key] for key in USED) == context.tokens, session.title
        assert f'data-testid="governed-total">{context.tokens:,}<' in page
        # The room besides what is sent closes the window.
        window = context.report.window_tokens
        if context.report.fits:
            assert sum(shown.values()) == window, session.title


def test_categories_follow_the_zones_and_records(alice: object) -> None:
    session = make_session(alice)
    history = [user("start"), reply("ok")]
    for i in range(40):
        history += [
            tool_call("read", id=f"c{i}", path=f"f{i}"),
            tool_result("read", "x " * 200, id=f"c{i}"),
        ]
    history.append(reply("done"))
    services.append_messages(session, history)
    services.pin(session, 5)
    view = xray(services.governed_context(session))
    tokens = {c.key: c.tokens for c in view.categories}
    assert tokens["pinned"] > 0
    assert sum(tokens[key] for key in USED) == view.governed
    # The strip's runs cover the request, system prompt aside.
    assert sum(s.tokens for s in view.segments) == view.governed - tokens["system"]
    assert {s.category for s in view.segments} >= {"pinned", "tail"}


@pytest.mark.django_db(transaction=True)
def test_a_compacted_session_shows_its_summary_and_summarised_messages(
    client: Client, alice: object
) -> None:
    session = make_session(alice, title="Compacted")
    history = agent_turns(10, 5, "y " * 900, "Fix OPS-1234 on db-west-3")
    services.append_messages(session, history, auto_compact=False)
    services.request_compaction(session)  # eager: done when it returns
    context = services.governed_context(session)
    view = xray(context)
    assert {c.key: c.tokens for c in view.categories}["summary"] > 0
    fates = Fates(context, record_state(session))
    summarised = [seq for seq in range(len(history)) if fates.report_of(seq) is None]
    assert summarised
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/?at={summarised[0]}").content.decode()
    fate = re.search(rf'id="fate-{summarised[0]}"[^>]*data-state="(\w+)"', page)
    assert fate is not None
    assert fate.group(1) == "summarised"
    assert 'data-testid="compaction"' in page


def test_fates_name_what_each_part_goes_through(client: Client, alice: object) -> None:
    session = make_session(alice, model="openai:gpt-4o")
    # Outputs over the truncation limit, and more of them than the budget holds.
    output = "\n".join(f"line {n} of the file" for n in range(2_500))
    history = agent_turns(6, 2, output)
    # Each read returns a file of its own: copies of one output would be references to the
    # newest copy sent whole instead.
    for part in (p for m in history for p in m.parts if isinstance(p, ToolReturnPart)):
        part.content = f"{part.tool_call_id}\n{output}"
    services.append_messages(session, history)
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    actions = set(re.findall(r'class="badge action-(\w+)"', page))
    assert actions & {"masked", "truncated", "evicted"}, actions
    # The refresh endpoint answers the same badges out of band, for the range asked.
    fates = client.get(f"/sessions/{session.pk}/fates/?from=1&to=3").content.decode()
    assert fates.count('hx-swap-oob="true"') == 3
    assert 'id="fate-0"' not in fates


def test_a_late_result_shows_moved_where_it_was_stored_and_where_it_is_sent(
    client: Client, alice: object
) -> None:
    session = make_session(alice, model="openai:gpt-4o")
    output = "line of the file\n" * 100
    services.append_messages(
        session,
        [
            user("go"),
            tool_call("read", id="c1", path="a.py"),
            user("and the tests"),
            tool_result("read", output, id="c1"),  # stored after the next prompt: moved up
            reply("done"),
            user("more"),
        ],
    )
    context = services.governed_context(session)
    fates = Fates(context, record_state(session))
    views = {view.seq: view for view in map(present_message, session.messages.all())}
    stored, sent = fates.fate(views[3]), fates.fate(views[2])
    # Where it was stored: left out, but nothing lost.
    assert stored.state == "moved"
    assert [p.action for p in stored.parts] == ["moved"]
    # Where it is sent: the prompt, with the result put in right after the call.
    assert sent.state == "sent"
    assert [(p.action, p.tool_name) for p in sent.added] == [("moved", "read")]
    assert sent.tokens_after == views[2].tokens + sent.added[0].tokens_after
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    assert re.search(r'id="fate-3"[^>]*data-state="moved"', page)
    assert 'data-testid="moved"' in page
    assert 'data-testid="added-moved"' in page
    assert "dropped" not in re.findall(r'class="badge (?:state|action)-(\w+)"', page)


def test_sent_and_original_differ_where_governance_changed_a_part(
    client: Client, alice: object
) -> None:
    session = make_session(alice, context_window=16_000)
    big = "\n".join(f"row {n}: " + "z" * 40 for n in range(2_000))
    services.append_messages(
        session,
        [
            user("go"),
            tool_call("read", id="c1", path="big.csv"),
            tool_result("read", big, id="c1"),
            reply("ok"),
            user("more"),
            reply("fine"),
        ],
    )
    client.force_login(alice)
    original = client.get(f"/sessions/{session.pk}/messages/2/").content.decode()
    sent = client.get(f"/sessions/{session.pk}/messages/2/sent/").content.decode()
    assert "row 1999:" in original
    assert "row 1999:" not in sent
    assert "<html" not in sent


@pytest.mark.parametrize("query", ["from=x&to=2", "from=3&to=1", "to=4", "from=-1&to=2"])
def test_fates_refuse_a_bad_range_naming_it(client: Client, alice: object, query: str) -> None:
    session = make_session(alice)
    client.force_login(alice)
    response = client.get(f"/sessions/{session.pk}/fates/?{query}")
    assert response.status_code == 400
    assert response.content.startswith(b"from, to:")


def test_a_page_opened_at_a_seq_holds_it_and_does_not_follow(client: Client, alice: object) -> None:
    session = make_session(alice)
    services.append_messages(session, [user(f"step {i}") for i in range(500)])
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/?at=100").content.decode()
    assert 'id="msg-100"' in page
    assert 'id="msg-90"' in page
    assert 'id="msg-89"' not in page
    assert 'data-following="false"' in page
    assert "data-catch-up-url" not in page
    assert "?at=290" in page
    assert client.get(f"/sessions/{session.pk}/?at=x").status_code == 400


@pytest.mark.django_db(transaction=True)
def test_the_trajectory_shows_each_request_as_it_was_then(client: Client, alice: object) -> None:
    session = make_session(alice, title="Reported")
    history = agent_turns(10, 5, "y " * 900)
    with_usage = [
        ModelResponse(parts=m.parts, usage=RequestUsage(input_tokens=1_000 + i, output_tokens=7))
        if isinstance(m, ModelResponse)
        else m
        for i, m in enumerate(history)
    ]
    services.append_messages(session, with_usage, auto_compact=False)
    first = trajectory(session, LIMITS)
    responses = [m.seq for m in session.messages.all() if m.kind == "response"]
    assert first["seqs"] == responses
    assert first["reported"] == [1_000 + s for s in responses]
    # Before any record, each request carries the whole log before it.
    tokens = list(session.messages.order_by("seq").values_list("tokens", flat=True))
    assert first["effective"] == [sum(tokens[:s]) for s in responses]
    assert first["marks"] == []

    services.request_compaction(session)
    record = Compaction.objects.get(session=session)
    services.append_messages(session, agent_turns(1, 2, "z"), auto_compact=False)
    after = trajectory(session, LIMITS)
    # Requests made before the compaction keep the size they had; the ones after shrink.
    assert after["effective"][: len(responses)] == first["effective"]
    assert after["effective"][-1] < first["effective"][-1]
    assert after["marks"] == [119]
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    assert 'id="trajectory-data"' in page
    assert f'data-testid="reported-{responses[0]}">provider: {1_000 + responses[0]:,} in' in page
    assert record.undone_at is None


@pytest.mark.django_db(transaction=True)
def test_the_trajectory_plots_what_each_request_sent_with_the_marks(alice: object) -> None:
    policy = {"context_window": 6_000, "reserved_output_tokens": 0, "compaction": {"auto": False}}
    session = make_session(alice, policy=policy)
    history = agent_turns(12, 2, "y " * 400)
    sent = []
    for end in range(1, len(history) + 1):
        message = history[end - 1]
        if isinstance(message, ModelResponse):
            usage = RequestUsage(input_tokens=3_000 + end, cache_read_tokens=1_000, output_tokens=9)
            message = ModelResponse(parts=message.parts, usage=usage)
        services.append_messages(session, [message], auto_compact=False)
        if not isinstance(message, ModelResponse):
            sent.append(services.send_context(session).tokens)
    context = services.governed_context(session)
    limits = services.session_limits(session, context)
    chart = trajectory(session, limits)
    requests = list(SentRequest.objects.filter(session=session))
    points = {seq: i for i, seq in enumerate(chart["seqs"])}
    for request, tokens in zip(requests, sent, strict=True):
        at = points[request.last_seq + 1]  # where its answer lands
        assert chart["sent"][at] == tokens + request.tool_tokens
        assert chart["requests"][at] == request.number
    answered = [r for r in requests if r.last_seq + 1 < len(history)]
    for request in answered:
        at = points[request.last_seq + 1]
        assert chart["reported"][at] == 3_000 + request.last_seq + 2
        assert chart["cached"][at] == 1_000
    assert max(s for s in chart["sent"] if s is not None) > limits.low_water
    assert (chart["window"], chart["budget"]) == (6_000, context.report.budget_tokens)
    assert chart["low_water"] < chart["high_water"] <= chart["budget"] < chart["window"]


def test_a_response_without_usage_reports_nothing(alice: object) -> None:
    session = make_session(alice)
    services.append_messages(session, agent_turns(2, 1, "x"))
    chart = trajectory(session, LIMITS)
    assert set(chart["reported"]) == set(chart["cached"]) == {None}
