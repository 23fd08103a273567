"""Provider keys the hub holds for the gateway: stored, replaced and deleted on the API keys page
by their owner alone, encrypted at rest, and sent upstream for a client whose only key is its
ctxhub key."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.test import Client

from gateway.access import caller
from gateway.errors import Refused
from gateway.models import ProviderKey
from gateway.provider_keys import (
    UnreadableKey,
    delete_key,
    hint_of,
    hints,
    provider_key,
    store_key,
)
from sessions.api.keys import create_key
from sessions.checks import SECRETS_KEY_ID, secrets_key_warnings
from sessions.models import AuditEvent
from sessions.services import Invalid
from tests.processes import ROOT

pytestmark = pytest.mark.django_db

ANTHROPIC_KEY = "sk-ant-api03-Alice-anthropic-secret-00112233445566-7f3a"
OTHER_ANTHROPIC_KEY = "sk-ant-api03-Alice-second-secret-99887766554433-b2c4"
OPENAI_KEY = "sk-proj-Alice-openai-secret-aabbccddeeff0011-9d0e"


@pytest.fixture(autouse=True)
def own_secrets_key(settings: Any) -> str:
    """A Fernet key of this test's own (the derived default is tested on its own)."""
    settings.CTXHUB_SECRETS_KEY = Fernet.generate_key().decode()
    return str(settings.CTXHUB_SECRETS_KEY)


def store_url(provider: str) -> str:
    return f"/keys/provider/{provider}/"


def delete_url(provider: str) -> str:
    return f"/keys/provider/{provider}/delete/"


def provider_row(page: str, provider: str) -> str:
    """The provider's row of the page's provider keys table."""
    found = re.search(rf'<tr data-provider="{provider}">(.*?)</tr>', page, re.S)
    assert found, f"no row for {provider}"
    return found.group(1)


# --- the page ---------------------------------------------------------------------------------


def test_a_key_is_stored_replaced_and_deleted_on_the_page_and_never_shown(
    client: Client, alice: Any
) -> None:
    client.force_login(alice)
    page = client.get("/keys/").content.decode()
    assert "Provider keys for the gateway" in page
    assert "none" in provider_row(page, "anthropic")

    stored = client.post(store_url("anthropic"), {"key": f"  {ANTHROPIC_KEY}\n"})
    assert stored.status_code == 302
    assert stored["Location"] == "/keys/#provider-keys"
    key = ProviderKey.objects.get(owner=alice)
    assert (key.provider, key.hint) == ("anthropic", "sk-ant-…7f3a")
    assert provider_key(alice.pk, "anthropic") == ANTHROPIC_KEY  # stripped
    page = client.get("/keys/").content.decode()
    row = provider_row(page, "anthropic")
    assert "sk-ant-…7f3a" in row
    assert 'type="password"' in row
    assert "Replace" in row
    assert "Delete" in row
    assert ANTHROPIC_KEY not in page
    assert "none" in provider_row(page, "openai")

    first_set = key.updated_at
    assert client.post(store_url("anthropic"), {"key": OTHER_ANTHROPIC_KEY}).status_code == 302
    replaced = ProviderKey.objects.get(owner=alice)
    assert replaced.pk == key.pk
    assert replaced.hint == "sk-ant-…b2c4"
    assert replaced.created_at == key.created_at
    assert replaced.updated_at > first_set
    assert provider_key(alice.pk, "anthropic") == OTHER_ANTHROPIC_KEY

    assert client.post(store_url("openai"), {"key": OPENAI_KEY}).status_code == 302
    assert provider_key(alice.pk, "openai") == OPENAI_KEY
    page = client.get("/keys/").content.decode()
    assert "sk-proj-…9d0e" in provider_row(page, "openai")
    assert OPENAI_KEY not in page
    assert OTHER_ANTHROPIC_KEY not in page

    deleted = client.post(delete_url("anthropic"))
    assert deleted.status_code == 302
    assert provider_key(alice.pk, "anthropic") is None
    assert provider_key(alice.pk, "openai") == OPENAI_KEY
    page = client.get("/keys/").content.decode()
    assert "none" in provider_row(page, "anthropic")
    assert "Delete" not in provider_row(page, "anthropic")
    assert client.post(delete_url("anthropic")).status_code == 302  # already gone: nothing

    events = list(AuditEvent.objects.order_by("created_at", "pk"))
    assert [(e.verb, e.actor, e.data["provider"], e.data["hint"]) for e in events] == [
        ("provider_key_stored", alice, "anthropic", "sk-ant-…7f3a"),
        ("provider_key_replaced", alice, "anthropic", "sk-ant-…b2c4"),
        ("provider_key_stored", alice, "openai", "sk-proj-…9d0e"),
        ("provider_key_deleted", alice, "anthropic", "sk-ant-…b2c4"),
    ]
    assert events[0].data == {
        "provider": "anthropic",
        "hint": "sk-ant-…7f3a",
        "owner": "alice",
        "via": "dashboard",
    }


def test_a_user_sees_and_changes_only_their_own_keys(client: Client, alice: Any, bob: Any) -> None:
    store_key(alice, "anthropic", ANTHROPIC_KEY)
    client.force_login(bob)
    page = client.get("/keys/").content.decode()
    assert "7f3a" not in page
    assert "none" in provider_row(page, "anthropic")
    # Bob's delete and store touch bob's keys, never alice's.
    assert client.post(delete_url("anthropic")).status_code == 302
    assert provider_key(alice.pk, "anthropic") == ANTHROPIC_KEY
    assert client.post(store_url("anthropic"), {"key": OTHER_ANTHROPIC_KEY}).status_code == 302
    assert provider_key(alice.pk, "anthropic") == ANTHROPIC_KEY
    assert provider_key(bob.pk, "anthropic") == OTHER_ANTHROPIC_KEY
    assert ProviderKey.objects.count() == 2
    client.force_login(alice)
    page = client.get("/keys/").content.decode()
    assert "sk-ant-…7f3a" in page
    assert "b2c4" not in page


def test_the_forms_need_a_login_and_a_csrf_token(alice: Any) -> None:
    anonymous = Client()
    assert anonymous.post(store_url("anthropic"), {"key": ANTHROPIC_KEY}).status_code == 302
    assert anonymous.post(delete_url("anthropic")).status_code == 302
    assert not ProviderKey.objects.exists()

    store_key(alice, "openai", OPENAI_KEY)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    assert browser.post(store_url("anthropic"), {"key": ANTHROPIC_KEY}).status_code == 403
    assert browser.post(delete_url("openai")).status_code == 403
    assert list(ProviderKey.objects.values_list("provider", flat=True)) == ["openai"]

    page = browser.get("/keys/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token
    form = {"key": ANTHROPIC_KEY, "csrfmiddlewaretoken": token.group(1)}
    assert browser.post(store_url("anthropic"), form).status_code == 302
    assert browser.post(delete_url("openai"), {"csrfmiddlewaretoken": token.group(1)}).status_code
    assert list(ProviderKey.objects.values_list("provider", flat=True)) == ["anthropic"]


def test_the_forms_take_posts_for_known_providers_only(client: Client, alice: Any) -> None:
    client.force_login(alice)
    assert client.get(store_url("anthropic")).status_code == 405
    assert client.get(delete_url("anthropic")).status_code == 405
    assert client.post(store_url("gemini"), {"key": ANTHROPIC_KEY}).status_code == 404
    assert client.post(delete_url("gemini")).status_code == 404
    assert not ProviderKey.objects.exists()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("   ", "paste the provider"),
        ("sk-ant-with a-space-0123456789", "printable ASCII"),
        ("sk-ant-ünïcode-0123456789abcdef", "printable ASCII"),
        ("sk-\x01control-0123456789abcdef", "printable ASCII"),
        ("sk-" + "x" * 498, "at most 500"),
        ("ctxh_0123456789ab_notaproviderkeyatall", "this is a ctxhub key"),
    ],
)
def test_a_bad_key_is_refused_beside_its_form_and_not_echoed(
    client: Client, alice: Any, text: str, reason: str
) -> None:
    client.force_login(alice)
    page = client.post(store_url("anthropic"), {"key": text})
    assert page.status_code == 422
    html = page.content.decode()
    refused = re.search(r'data-testid="provider-refused">([^<]*)<', html)
    assert refused
    assert reason in refused.group(1)
    assert refused.group(0) in provider_row(html, "anthropic")
    if text.strip():
        assert text.strip() not in html
    assert not ProviderKey.objects.exists()
    assert not AuditEvent.objects.exists()


def test_store_key_refuses_what_cannot_be_a_provider_key(alice: Any) -> None:
    with pytest.raises(Invalid) as refused:
        store_key(alice, "gemini", ANTHROPIC_KEY)
    assert refused.value.field == "provider"
    with pytest.raises(Invalid) as refused:
        store_key(alice, "openai", "")
    assert refused.value.field == "key"
    assert store_key(alice, "openai", "k" * 500).hint == "…kkkk"


def test_a_hint_shows_the_kind_and_the_last_four_characters_only() -> None:
    assert hint_of(ANTHROPIC_KEY) == "sk-ant-…7f3a"
    assert hint_of("sk-proj-abcdefghijklmnopqrstuvwxyz") == "sk-proj-…wxyz"
    assert hint_of("sk-abcdefghijklmnopqrstuvwxyz") == "sk-…wxyz"
    assert hint_of("0123456789abcdefghijklmnop") == "…mnop"
    assert hint_of("short-key") == "…"


# --- encryption -------------------------------------------------------------------------------


def test_the_stored_column_holds_the_key_encrypted_only(alice: Any, own_secrets_key: str) -> None:
    store_key(alice, "anthropic", ANTHROPIC_KEY)
    encrypted = ProviderKey.objects.get().encrypted
    assert ANTHROPIC_KEY not in encrypted
    assert "secret" not in encrypted
    assert Fernet(own_secrets_key).decrypt(encrypted.encode()).decode() == ANTHROPIC_KEY
    # The same key stored again is encrypted anew (a fresh IV): equal keys do not show.
    store_key(alice, "anthropic", ANTHROPIC_KEY)
    assert ProviderKey.objects.get().encrypted != encrypted


def test_another_secrets_key_cannot_read_a_stored_key(
    client: Client, alice: Any, settings: Any, own_secrets_key: str
) -> None:
    store_key(alice, "anthropic", ANTHROPIC_KEY)
    settings.CTXHUB_SECRETS_KEY = Fernet.generate_key().decode()
    with pytest.raises(UnreadableKey):
        provider_key(alice.pk, "anthropic")
    assert [h.readable for h in hints(alice) if h.hint] == [False]
    client.force_login(alice)
    assert "store it again" in provider_row(client.get("/keys/").content.decode(), "anthropic")
    # Stored again, it is readable under the new key.
    store_key(alice, "anthropic", ANTHROPIC_KEY)
    assert provider_key(alice.pk, "anthropic") == ANTHROPIC_KEY
    # Rotation: the new key first, the old one after it, reads keys stored under either.
    settings.CTXHUB_SECRETS_KEY = f"{Fernet.generate_key().decode()},{settings.CTXHUB_SECRETS_KEY}"
    assert provider_key(alice.pk, "anthropic") == ANTHROPIC_KEY


def test_unset_the_key_derives_from_secret_key_and_a_new_secret_key_loses_it(
    alice: Any, settings: Any
) -> None:
    settings.CTXHUB_SECRETS_KEY = ""
    store_key(alice, "openai", OPENAI_KEY)
    assert OPENAI_KEY not in ProviderKey.objects.get().encrypted
    assert provider_key(alice.pk, "openai") == OPENAI_KEY
    settings.SECRET_KEY = "another-secret-key-" + "y" * 40
    with pytest.raises(UnreadableKey):
        provider_key(alice.pk, "openai")


def test_a_malformed_secrets_key_stops_start_up() -> None:
    env = {**os.environ, "CTXHUB_SECRETS_KEY": "not-a-fernet-key"}
    started = subprocess.run(
        [sys.executable, "-c", "import config.settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode != 0
    assert "CTXHUB_SECRETS_KEY must be Fernet keys" in started.stderr
    assert "not-a-fernet-key" not in started.stderr


def test_production_without_its_own_secrets_key_is_warned_about() -> None:
    (warning,) = secrets_key_warnings(production=True, secrets_key="")
    assert warning.id == SECRETS_KEY_ID
    assert "SECRET_KEY" in warning.msg
    assert secrets_key_warnings(production=True, secrets_key=Fernet.generate_key().decode()) == []
    assert secrets_key_warnings(production=False, secrets_key="") == []


# --- the gateway's use of them ----------------------------------------------------------------


@pytest.fixture
def hub_key(alice: Any) -> str:
    return create_key(alice, name="gateway", scopes=["read", "write"])[1]


@pytest.mark.parametrize(
    ("provider", "stored", "sent"),
    [
        ("anthropic", ANTHROPIC_KEY, {"x-api-key": ANTHROPIC_KEY}),
        ("openai", OPENAI_KEY, {"authorization": f"Bearer {OPENAI_KEY}"}),
    ],
)
@pytest.mark.parametrize(
    "headers",
    [
        lambda key: {"authorization": f"Bearer {key}"},  # ANTHROPIC_AUTH_TOKEN, OpenAI's SDK
        lambda key: {"x-api-key": key},  # ANTHROPIC_API_KEY
        lambda key: {"x-ctxhub-key": key},  # the ctxhub header alone
    ],
)
def test_a_client_with_its_ctxhub_key_alone_gets_its_owners_stored_key(
    alice: Any, hub_key: str, provider: str, stored: str, sent: dict[str, str], headers: Any
) -> None:
    store_key(alice, provider, stored)
    who = caller(headers(hub_key), needs_provider_key=True, provider=provider)
    assert who.key.owner_id == alice.pk
    assert who.provider_headers == sent
    assert stored not in repr(who)
    # The offline model needs none, and gets none.
    offline = caller(headers(hub_key), needs_provider_key=False, provider=provider)
    assert offline.provider_headers == {}


def test_a_clients_own_provider_key_goes_before_the_stored_one(alice: Any, hub_key: str) -> None:
    store_key(alice, "anthropic", ANTHROPIC_KEY)
    own = "sk-ant-api03-the-clients-own-key-0000"
    who = caller(
        {"x-api-key": own, "x-ctxhub-key": hub_key}, needs_provider_key=True, provider="anthropic"
    )
    assert who.provider_headers == {"x-api-key": own}


def test_with_no_key_stored_the_refusal_names_both_ways(alice: Any, bob: Any, hub_key: str) -> None:
    store_key(bob, "anthropic", ANTHROPIC_KEY)  # bob's key is never alice's
    store_key(alice, "openai", OPENAI_KEY)  # nor another provider's
    with pytest.raises(Refused) as refused:
        caller(
            {"authorization": f"Bearer {hub_key}"}, needs_provider_key=True, provider="anthropic"
        )
    assert refused.value.status == 401
    assert "/keys/" in refused.value.message
    assert "X-Ctxhub-Key" in refused.value.message


def test_an_unreadable_stored_key_is_refused_saying_to_store_it_again(
    alice: Any, hub_key: str, settings: Any
) -> None:
    store_key(alice, "anthropic", ANTHROPIC_KEY)
    settings.CTXHUB_SECRETS_KEY = Fernet.generate_key().decode()
    with pytest.raises(Refused) as refused:
        caller({"x-api-key": hub_key}, needs_provider_key=True, provider="anthropic")
    assert refused.value.status == 401
    assert "store it again" in refused.value.message


def test_delete_key_says_whether_there_was_one(alice: Any) -> None:
    assert delete_key(alice, "openai") is False
    store_key(alice, "openai", OPENAI_KEY)
    assert delete_key(alice, "openai") is True
    assert not ProviderKey.objects.exists()
