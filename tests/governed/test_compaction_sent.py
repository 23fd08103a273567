"""A compaction states what users act on: the tokens the next request carries now and after (and
as a share of the window), with the effective history as detail; one that would not shrink the
next request says so before it runs."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from ctxhub.pricing import TokenUsage, price
from sessions import services
from sessions.figures import compaction_outcome
from sessions.models import Compaction
from tests.governed.builders import agentic_session, turn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.smoke]


def test_preview_and_result_state_the_next_request_now_and_after(alice: Any) -> None:
    session = agentic_session(alice, turns=0)
    for n in range(40):  # an agent's turns, each request sent: the Governor fills the budget
        services.append_messages(session, turn(n))
        services.send_context(session)
    preview = services.preview_compaction(session)
    now = services.governed_context(session).tokens
    assert preview.sent_now == now
    assert preview.window_tokens == services.session_window(session)
    assert preview.shrinks
    assert not preview.refused
    job = services.request_compaction(session, expected=preview.fingerprint).job
    job.refresh_from_db()
    assert job.status == "done", job.error
    result = job.result
    assert result["sent_before"] == now
    assert result["window"] == preview.window_tokens
    after = services.governed_context(session).tokens
    assert result["sent_after"] == after
    assert after <= preview.sent_after_max
    assert Compaction.objects.get(job=job).tokens_after == result["tokens_after"]
    # In money: each following request saves the input it no longer sends (the session's
    # model is priced); the offline summariser has no price.
    saved = price(session.model, TokenUsage(input_tokens=now - after))
    assert saved is not None
    assert Decimal(result["saved_per_request"]) == saved.total > 0
    assert result["summarizer_cost"] is None
    assert "each following request saves $" in compaction_outcome(result)


def test_a_compaction_whose_kept_messages_leave_no_room_is_refused_as_previewed(
    alice: Any,
) -> None:
    # Keeping the five newest turns verbatim: they alone take more than the request carries
    # now, and more than the low-water mark.
    session = agentic_session(alice, turns=40)
    recent = session.messages.order_by("-seq").values_list("seq", flat=True)[19]
    preview = services.preview_compaction(session, keep_from=recent)
    assert not preview.nothing_to_compact
    assert not preview.shrinks
    assert preview.refused
    assert preview.refusal is not None
    assert preview.message == preview.refusal
    assert preview.refusal.startswith("refused: what the compaction keeps")
    assert preview.refusal.endswith(f"below the low-water mark of {preview.low_water:,}")
    job = services.request_compaction(session, keep_from=recent).job
    job.refresh_from_db()
    assert (job.status, job.outcome) == ("done", "refused")
    # The job says what the preview said, figure for figure.
    assert job.error == preview.refusal
    assert not Compaction.objects.filter(session=session).exists()


def test_a_compaction_of_a_session_the_window_keeps_small_says_it_is_no_smaller(
    alice: Any,
) -> None:
    session = agentic_session(alice, turns=40)  # never sent: the next request is a new start
    preview = services.preview_compaction(session)
    assert preview.summarized_seqs
    assert not preview.refused
    assert not preview.shrinks
    assert preview.sent_after_max >= preview.sent_now == services.governed_context(session).tokens


def test_a_compaction_record_shows_how_well_it_held_the_facts(client: Any, alice: Any) -> None:
    session = agentic_session(alice, turns=0)
    for n in range(40):
        services.append_messages(session, turn(n))
        services.send_context(session)
    job = services.request_compaction(session).job
    job.refresh_from_db()
    result = job.result
    assert result["facts"] > 0
    assert 0 <= result["fact_score"] <= 1
    # The offline summariser's draft leaves facts out: the ones nothing kept are listed.
    assert result["missing_facts"]
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    record = Compaction.objects.get(job=job)
    assert f'data-testid="fact-score-{record.pk}"' in page
    assert result["missing_facts"][0] in page
