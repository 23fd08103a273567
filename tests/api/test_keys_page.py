"""API keys made, shown once and revoked in the dashboard."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from sessions.models import ApiKey, AuditEvent

pytestmark = pytest.mark.django_db


def test_a_key_is_shown_once_works_and_is_revoked(client: Client, alice: Any, bob: Any) -> None:
    client.force_login(alice)
    page = client.post(
        "/keys/new/", {"name": "laptop agent", "scopes": ["read", "write"], "expires": "30"}
    )
    assert page.status_code == 200
    text = page.context["text"]
    assert text in page.content.decode()
    key = ApiKey.objects.get(owner=alice)
    assert key.scopes == ["read", "write"]
    assert key.expires_at is not None
    listing = client.get("/keys/").content.decode()
    assert text not in listing
    assert f"ctxh_{key.prefix}_" in listing
    api = Client()
    auth = {"Authorization": f"Bearer {text}"}
    assert api.get("/api/v1/sessions", headers=auth).status_code == 200
    # Another user cannot revoke it; its owner can.
    client.force_login(bob)
    assert client.post(f"/keys/{key.pk}/revoke/").status_code == 404
    client.force_login(alice)
    assert client.post(f"/keys/{key.pk}/revoke/").status_code == 200
    assert api.get("/api/v1/sessions", headers=auth).status_code == 401


@pytest.mark.parametrize(
    ("form", "reason"),
    [
        ({"name": "x"}, "choose among"),
        ({"scopes": ["root"]}, "root is not one"),
        ({"scopes": ["read"], "expires": "soon"}, "number of days"),
    ],
)
def test_a_bad_key_form_says_why(
    client: Client, alice: Any, form: dict[str, Any], reason: str
) -> None:
    client.force_login(alice)
    page = client.post("/keys/new/", form)
    assert page.status_code == 422
    assert reason in page.content.decode()
    assert not ApiKey.objects.exists()


def test_the_keys_page_needs_a_login(client: Client) -> None:
    assert client.get("/keys/").status_code == 302


def test_making_and_revoking_a_key_are_audited_with_their_actor(
    client: Client, alice: Any, bob: Any
) -> None:
    client.force_login(alice)
    client.post("/keys/new/", {"name": "ci runner", "scopes": ["read"]})
    key = ApiKey.objects.get(owner=alice)
    client.force_login(bob)
    client.post(f"/keys/{key.pk}/revoke/")  # refused: not bob's key, and not audited
    client.force_login(alice)
    client.post(f"/keys/{key.pk}/revoke/")
    client.post(f"/keys/{key.pk}/revoke/")  # already revoked: nothing more happens
    call_command(
        "create_api_key", "bob", "--scopes", "read,write", stdout=StringIO(), stderr=StringIO()
    )

    events = list(AuditEvent.objects.order_by("created_at", "pk"))
    assert [(e.verb, e.actor) for e in events] == [
        ("api_key_created", alice),
        ("api_key_revoked", alice),
        ("api_key_created", None),
    ]
    assert events[0].data == {
        "key": key.prefix,
        "name": "ci runner",
        "owner": "alice",
        "scopes": ["read"],
        "expires_at": None,
        "via": "dashboard",
    }
    assert events[2].data["owner"] == "bob"
    assert events[2].data["via"] == "manage.py create_api_key"
