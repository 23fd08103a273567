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
    # The columns alone: the model as it is now has columns later migrations add.
    tokens = AgentSession.objects.values_list("log_tokens", flat=True)
    assert tokens.get(pk=full.pk) == total > 0
    assert tokens.get(pk=empty.pk) == 0


def test_each_session_gets_the_count_of_its_messages(alice: Any) -> None:
    from sessions import services
    from tests.messages import reply, user

    full = make_session(alice, title="full")
    services.append_messages(full, [user("one"), reply("two")])
    services.append_messages(full, [user("three")])
    empty = make_session(alice, title="empty")
    _migrate(("agent_sessions", "0017_records_keep_who_acted"))
    _migrate(("agent_sessions", "0018_session_log_messages"))
    counts = AgentSession.objects.values_list("log_messages", flat=True)
    assert (counts.get(pk=full.pk), counts.get(pk=empty.pk)) == (3, 0)
    services.append_messages(full, [reply("four")])
    assert list(full.messages.values_list("seq", flat=True)) == [0, 1, 2, 3]
