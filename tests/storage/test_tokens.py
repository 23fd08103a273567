from __future__ import annotations

import pytest

from ctxhub.governance.facts import message_facts
from ctxhub.governance.tokens import count_text, tokenizer_for
from sessions import services
from sessions.models import Message
from tests.factories import make_session
from tests.messages import tool_result, user

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def test_counts_are_exact_and_cached_with_their_encoding(alice: object) -> None:
    session = make_session(alice, model="openai:gpt-4o")
    message = tool_result(
        "run_tests", "FAILED tests/test_parser.py::test_bom - AssertionError\n" * 50, id="c1"
    )
    row = services.append_message(session, message)
    assert (row.encoding, row.tokens_exact) == ("o200k_base", True)
    assert row.tokens == message_facts(message, tokenizer_for("openai:gpt-4o")).tokens
    assert (
        row.tokens
        > count_text("FAILED tests/test_parser.py::test_bom - AssertionError\n", "o200k_base") * 50
    )


def test_a_model_without_a_shipped_tokenizer_is_marked_approximate(alice: object) -> None:
    row = services.append_message(
        make_session(alice, model="anthropic:claude-sonnet-4-5"), user("hi")
    )
    assert row.tokens_exact is False


def test_recount_follows_a_model_change(alice: object) -> None:
    session = make_session(alice, model="openai:gpt-4o")
    services.append_messages(
        session, [user("Ünïcödé text, numbers 1234567 and code `x = y ** 2`")] * 3
    )
    session.model = "openai:gpt-4"
    session.save()
    totals = services.recount_tokens(session)
    rows = Message.objects.filter(session=session)
    assert {row.encoding for row in rows} == {"cl100k_base"}
    assert totals.tokens == sum(row.tokens for row in rows)
    assert totals.tokens == 3 * message_facts(rows[0].message, tokenizer_for("gpt-4")).tokens
    assert totals.window == 128_000
