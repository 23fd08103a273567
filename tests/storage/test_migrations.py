"""Data migrations keep what stored rows meant."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from ctxhub.governance import Policy
from sessions.models import AgentSession
from tests.factories import make_session

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE, AFTER = ("agent_sessions", "0006_api_keys"), ("agent_sessions", "0007_masking_off_is_never")


def _migrate(target: tuple[str, str]) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([target])


@pytest.fixture(autouse=True)
def _latest_after() -> Iterator[None]:
    """The schema every later test expects: the latest migrations, whatever a test left."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_masking_turned_off_by_keeping_nothing_stays_off(alice: Any) -> None:
    off = make_session(alice, title="off")
    some = make_session(alice, title="some")
    _migrate(BEFORE)
    AgentSession.objects.filter(pk=off.pk).update(
        policy={"masking": {"keep_first": 0, "keep_last": 0}, "safety_margin": 0.2}
    )
    AgentSession.objects.filter(pk=some.pk).update(policy={"masking": {"keep_first": 0}})
    _migrate(AFTER)
    off.refresh_from_db(fields=["policy"])
    some.refresh_from_db(fields=["policy"])
    assert off.policy == {
        "masking": {"keep_first": 0, "keep_last": 0, "apply": "never"},
        "safety_margin": 0.2,
    }
    assert not Policy.model_validate(off.policy).masking.enabled
    assert some.policy == {"masking": {"keep_first": 0}}


def test_each_session_gets_the_sum_of_its_messages_tokens(alice: Any) -> None:
    from django.db.models import Sum

    from sessions import services
    from tests.messages import user

    full = make_session(alice, title="full")
    services.append_messages(full, [user("one two three"), user("four five six seven")])
    empty = make_session(alice, title="empty")
    total = full.messages.aggregate(total=Sum("tokens"))["total"]
    _migrate(("agent_sessions", "0012_alter_message_source"))
    _migrate(("agent_sessions", "0013_session_log_tokens"))
    assert AgentSession.objects.get(pk=full.pk).log_tokens == total > 0
    assert AgentSession.objects.get(pk=empty.pk).log_tokens == 0
