from __future__ import annotations

import pytest

from sessions import services
from sessions.models import AgentSession, AppendOnlyError, AuditEvent, Message
from tests.factories import make_session
from tests.messages import reply, user

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


@pytest.fixture
def stored(alice: object) -> Message:
    return services.append_message(make_session(alice), user("hello"))


def test_a_stored_message_cannot_be_saved_again(stored: Message) -> None:
    original = stored.payload
    stored.payload = {"kind": "request", "parts": []}
    with pytest.raises(AppendOnlyError):
        stored.save()
    assert Message.objects.get(pk=stored.pk).payload == original


def test_a_stored_message_cannot_be_deleted(stored: Message) -> None:
    with pytest.raises(AppendOnlyError):
        stored.delete()
    with pytest.raises(AppendOnlyError):
        Message.objects.filter(pk=stored.pk).delete()
    assert Message.objects.filter(pk=stored.pk).exists()


def test_bulk_updates_may_touch_only_the_token_cache(stored: Message) -> None:
    with pytest.raises(AppendOnlyError):
        Message.objects.filter(pk=stored.pk).update(payload={})
    assert Message.objects.filter(pk=stored.pk).update(tokens=1) == 1


def test_appends_get_consecutive_seq_numbers(alice: object) -> None:
    session = make_session(alice)
    services.append_messages(session, [user("a"), reply("b")])
    services.append_message(session, user("c"))
    assert list(session.messages.values_list("seq", "kind")) == [
        (0, "request"),
        (1, "response"),
        (2, "request"),
    ]


def test_a_session_saved_from_a_copy_read_before_an_append_keeps_the_append_s_counts(
    alice: object,
) -> None:
    session = make_session(alice)
    earlier = AgentSession.objects.get(pk=session.pk)
    services.append_messages(session, [user("a"), reply("b")])
    earlier.title = "Renamed"
    earlier.save()
    stored = AgentSession.objects.get(pk=session.pk)
    assert (stored.title, stored.log_messages) == ("Renamed", 2)
    assert stored.log_tokens == sum(session.messages.values_list("tokens", flat=True)) > 0
    services.append_message(earlier, user("c"))
    assert list(session.messages.values_list("seq", flat=True)) == [0, 1, 2]


def test_audit_events_are_immutable(alice: object) -> None:
    event = AuditEvent.objects.create(actor=alice, verb="session.cleared")
    event.verb = "something else"
    with pytest.raises(AppendOnlyError):
        event.save()
