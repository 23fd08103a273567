"""Audit events are immutable in PostgreSQL itself: no query changes or deletes one, the ORM's
bulk update() and delete() and raw SQL included; an event goes only with its session."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from sessions.models import AgentSession, AuditEvent
from tests.factories import make_session

pytestmark = pytest.mark.django_db


def _refused(change: Any) -> str:
    with pytest.raises(IntegrityError) as refused, transaction.atomic():
        change()
    return str(refused.value)


def test_no_query_changes_or_deletes_an_event(alice: Any) -> None:
    session = make_session(alice)
    event = AuditEvent.objects.create(
        session=session, actor=alice, verb="session.cleared", tokens_before=90, data={"seq": 3}
    )
    events = AuditEvent.objects.filter(pk=event.pk)

    assert "immutable" in _refused(lambda: events.update(verb="session.pinned"))
    _refused(lambda: events.update(data={"seq": 4}))
    _refused(lambda: events.update(tokens_before=1))
    _refused(lambda: events.update(created_at=event.created_at.replace(year=2020)))
    _refused(lambda: events.update(session=make_session(alice, title="Other")))
    assert "only with its session" in _refused(lambda: events.delete())

    def raw(sql: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(sql, [event.pk])

    _refused(lambda: raw("UPDATE agent_sessions_auditevent SET verb = 'x' WHERE id = %s"))
    _refused(lambda: raw("DELETE FROM agent_sessions_auditevent WHERE id = %s"))

    stored = AuditEvent.objects.get(pk=event.pk)
    assert (stored.verb, stored.data, stored.tokens_before) == ("session.cleared", {"seq": 3}, 90)


def test_tokens_after_is_filled_in_once(alice: Any) -> None:
    event = AuditEvent.objects.create(session=make_session(alice), verb="session.compacted")
    event.measured_after(40)
    assert AuditEvent.objects.get(pk=event.pk).tokens_after == 40
    _refused(lambda: AuditEvent.objects.filter(pk=event.pk).update(tokens_after=41))
    _refused(lambda: AuditEvent.objects.filter(pk=event.pk).update(tokens_after=None))
    assert AuditEvent.objects.get(pk=event.pk).tokens_after == 40


def test_a_deleted_user_is_forgotten_and_a_deleted_session_takes_its_events(
    alice: Any, bob: Any
) -> None:
    kept = make_session(alice, title="Kept")
    gone = make_session(bob, title="Gone")
    by_bob = AuditEvent.objects.create(session=kept, actor=bob, verb="session.pinned")
    AuditEvent.objects.create(session=gone, actor=bob, verb="session.cleared")
    unattached = AuditEvent.objects.create(actor=bob, verb="key.created")

    bob.delete()  # his session goes with him, its events with it

    assert not AgentSession.objects.filter(pk=gone.pk).exists()
    assert set(AuditEvent.objects.values_list("pk", "actor")) == {
        (by_bob.pk, None),
        (unattached.pk, None),
    }
    # An event of no session is never deleted; nor is one of a session another deletion names.
    _refused(lambda: AuditEvent.objects.filter(pk=unattached.pk).delete())
    with transaction.atomic():
        other = make_session(alice, title="Other")
        other.delete()
        _refused(lambda: AuditEvent.objects.filter(pk=by_bob.pk).delete())
    assert AuditEvent.objects.filter(pk=by_bob.pk).exists()
