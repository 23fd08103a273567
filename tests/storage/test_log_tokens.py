"""A session keeps the sum of its messages' token counts through every write of them, so the
log's size is read from the session row, not summed over the log."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import Sum

from sessions import services
from sessions.models import AgentSession
from sessions.services.fork import fork_session
from tests.factories import make_session
from tests.messages import user

pytestmark = pytest.mark.django_db


def summed(session: AgentSession) -> int:
    return session.messages.aggregate(total=Sum("tokens"))["total"] or 0


def kept(session: AgentSession) -> int:
    return AgentSession.objects.values_list("log_tokens", flat=True).get(pk=session.pk)


def test_appends_forks_and_recounts_keep_the_sum(alice: Any) -> None:
    session = make_session(alice, model="openai:gpt-4o")
    assert kept(session) == 0
    for batch in range(4):
        services.append_messages(
            session, [user(f"prompt {batch}-{i} " * (i + 1)) for i in range(batch + 1)]
        )
        assert kept(session) == summed(session) > 0
    assert services.token_totals(session).tokens == summed(session)

    fork = fork_session(session, 5, actor=alice)
    assert kept(fork) == summed(fork) < summed(session)
    assert kept(session) == summed(session)

    # Counts stored by older counting rules (made stale here by hand): the recount rewrites
    # them and the sum with them.
    counted = summed(session)
    session.messages.update(tokens=1)
    totals = services.recount_tokens(session)
    assert totals.recounted == session.messages.count()
    assert kept(session) == summed(session) == counted == totals.tokens
