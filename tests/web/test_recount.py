from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from sessions import live
from sessions.models import Message
from tests.factories import make_session
from tests.messages import user
from tests.pushes import listening_layer

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def test_recount_refreshes_the_cache_and_pushes_the_meter(client: Client, alice: object) -> None:
    session = make_session(alice)
    from sessions import services

    services.append_messages(session, [user("count me " * 50), user("and me")])
    Message.objects.filter(session=session).update(tokens=1)  # a stale cache
    layer = listening_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(live.mark_watched)(session.pk)  # as an open page's socket does
    async_to_sync(layer.group_add)(session.group_name, channel)

    client.force_login(alice)
    response = client.post(f"/sessions/{session.pk}/recount/", headers={"HX-Request": "true"})

    expected = sum(r.tokens for r in Message.objects.filter(session=session))
    assert expected > 2
    # Jobs are eager here: the answer is the outcome, not a promise.
    assert response.status_code == 200
    said = response.content.decode()
    assert f"Recounted 2 messages with <code>o200k_base</code>: {expected:,} tokens" in said
    assert "2 counts changed" in said
    again = client.post(f"/sessions/{session.pk}/recount/", headers={"HX-Request": "true"})
    assert "every stored count was already right" in again.content.decode()
    event = async_to_sync(layer.receive)(channel)
    assert event["type"] == "html.push"
    assert 'id="meter"' in event["html"]
    assert 'hx-swap-oob="true"' in event["html"]
    assert f'<strong data-testid="token-total">{expected}</strong>' in event["html"]


def test_recount_without_htmx_redirects_to_the_session(client: Client, alice: object) -> None:
    session = make_session(alice)
    client.force_login(alice)
    response = client.post(f"/sessions/{session.pk}/recount/")
    assert (response.status_code, response["Location"]) == (302, f"/sessions/{session.pk}/")
