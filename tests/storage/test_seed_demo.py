from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth import authenticate
from django.core.management import CommandError, call_command
from django.test import override_settings
from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart

from ctxhub.governance.summaries import messages_represented
from sessions import services
from sessions.demo import TOUR
from sessions.management.commands.seed_demo import SENT_REQUESTS
from sessions.models import AgentSession, Compaction, Message, SentRequest

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def test_seed_demo_creates_realistic_sessions_once() -> None:
    out = StringIO()
    call_command("seed_demo", stdout=out)
    assert "log in as demo / demo" in out.getvalue()
    user = authenticate(username="demo", password="demo")
    assert user is not None
    sessions = AgentSession.objects.filter(owner=user)
    assert sessions.count() >= 3
    total = Message.objects.filter(session__owner=user).count()
    assert total >= 500

    biggest = max(sessions, key=lambda s: s.messages.count())
    messages = [row.message for row in biggest.messages.all()]
    assert len(messages) >= 200
    calls = {p.tool_call_id for m in messages for p in m.parts if isinstance(p, ToolCallPart)}
    returns = {p.tool_call_id for m in messages for p in m.parts if isinstance(p, ToolReturnPart)}
    parallel = [
        m
        for m in messages
        if isinstance(m, ModelResponse) and sum(isinstance(p, ToolCallPart) for p in m.parts) > 1
    ]
    outputs = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    assert parallel, "some turns call tools in parallel"
    assert calls - returns, "some turns were interrupted, leaving calls unanswered"
    assert any(len(p.model_response_str()) > 20_000 for p in outputs), "some outputs are large"
    assert any(p.outcome == "retried" for p in outputs), "some calls were retried"

    call_command("seed_demo", stdout=StringIO())
    assert Message.objects.filter(session__owner=user).count() == total


@override_settings(PRODUCTION=True)
def test_seed_demo_refuses_in_production_unless_forced() -> None:
    with pytest.raises(CommandError, match="--force"):
        call_command("seed_demo", stdout=StringIO())
    assert not AgentSession.objects.exists()
    assert authenticate(username="demo", password="demo") is None
    call_command("seed_demo", "--force", stdout=StringIO())
    assert authenticate(username="demo", password="demo") is not None


def test_the_tour_shows_every_action_governance_takes() -> None:
    call_command("seed_demo", stdout=StringIO())
    tour = AgentSession.objects.get(title=TOUR.title)
    report = services.governed_context(tour).report
    actions = {part.action for message in report.messages for part in message.parts}
    assert {"evicted", "truncated", "masked", "deduplicated", "synthesized", "kept"} <= actions
    assert {message.zone for message in report.messages} >= {"pinned", "tail"}
    # The evicted output reads back, as the model's tool would read it, to its last line.
    (ref,) = report.evicted_refs
    last = services.read_evicted_output(tour, ref, grep="DONE", limit=10_000) or ""
    assert "#259 DONE" in last
    # Nothing in it waits for automatic compaction: the actions stay in view.
    assert services.auto_compact(tour) is None


@pytest.mark.django_db(transaction=True)  # compaction jobs are dispatched once they commit
def test_every_demo_summary_counts_what_its_record_replaces() -> None:
    """The count a summary gives the model ("[Summary of N earlier messages]") is the count
    of originals its record replaces: user messages kept whole beside it are not among them,
    and a message the compaction keeps, changed by pair repair, is not either."""
    call_command("seed_demo", stdout=StringIO())
    for session in AgentSession.objects.filter(owner__username="demo"):
        if not session.compactions.filter(undone_at__isnull=True).exists():
            services.request_compaction(session)  # eager here: done when it returns
    compactions = Compaction.objects.filter(session__owner__username="demo")
    assert compactions.count() >= 3
    for compaction in compactions:
        said = messages_represented(compaction.summary)
        assert said == len(compaction.summarized_seqs), compaction.session.title


def test_every_demo_session_has_requests_sent_along_its_log() -> None:
    """The trajectory of a demo session plots what its requests carried: requests are recorded
    as sent while the log grows, the Governor acting where they reach its high-water mark."""
    call_command("seed_demo", stdout=StringIO())
    for session in AgentSession.objects.filter(owner__username="demo"):
        sent = list(SentRequest.objects.filter(session=session).order_by("number"))
        answers = session.messages.filter(kind="response").count()
        assert len(sent) == min(answers, SENT_REQUESTS), session.title
        # Each covers more of the log than the one before it.
        seqs = [request.last_seq for request in sent]
        assert seqs == sorted(set(seqs)), session.title
    big = AgentSession.objects.get(title__startswith="Migrate the billing service")
    requests = SentRequest.objects.filter(session=big)
    assert requests.filter(acted__isnull=False).exclude(acted="").exists()
    assert max(r.tokens for r in requests) < big.log_tokens / 3
    # What an action did reads as a sentence: one result is a result.
    actions = list(SentRequest.objects.exclude(action="").values_list("action", flat=True))
    assert any(re.search(r"\b1 result (masked|evicted|truncated)", said) for said in actions)
    assert not any(re.search(r"\b1 results\b|\b1 messages\b", said) for said in actions)
