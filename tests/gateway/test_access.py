"""Who is calling: a key checked against the database lately is taken from the process's memory
for ``FRESH_SECONDS`` (no query on the model's path), and what changed on the hub meanwhile (a
key revoked, a provider key deleted) holds once that time is up; the rate is counted on every
request all the same (in Redis here, from the event loop)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone

from gateway import access
from gateway.access import FRESH_SECONDS, calling, calling_then, upstream_headers
from gateway.errors import Refused
from gateway.models import ProviderKey
from gateway.provider_keys import store_key
from sessions.api.keys import create_key, revoke
from sessions.models import ApiKey

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def forgotten() -> None:
    """Each test starts from a process that has read no stored provider key (nor checked any
    API key: ``tests/conftest.py``)."""
    access._stored.clear()


def later(monkeypatch: Any, seconds: float) -> None:
    """The process's clock, ``seconds`` on."""
    now = time.monotonic()
    monkeypatch.setattr(access.time, "monotonic", lambda: now + seconds)


def test_a_revoked_key_is_refused_once_what_the_process_checked_is_stale(
    alice: Any, monkeypatch: Any
) -> None:
    key, text = create_key(alice, name="agent", scopes=["read", "write"])
    headers = {"x-api-key": text}
    assert asyncio.run(calling(headers, needs_provider_key=False)).key.pk == key.pk
    # Revoked by another process (this one would forget it at once: the next test).
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    # Taken as checked a moment ago: no query stands between the agent and its model.
    assert asyncio.run(calling(headers, needs_provider_key=False)).key.pk == key.pk
    later(monkeypatch, FRESH_SECONDS + 0.1)
    with pytest.raises(Refused) as refused:
        asyncio.run(calling(headers, needs_provider_key=False))
    assert refused.value.status == 401
    assert refused.value.field == "x-ctxhub-key"


def test_a_key_revoked_by_this_process_is_refused_at_once(alice: Any) -> None:
    key, text = create_key(alice, name="agent", scopes=["read", "write"])
    headers = {"x-api-key": text}
    assert asyncio.run(calling(headers, needs_provider_key=False)).key.pk == key.pk
    revoke(ApiKey.objects.get(pk=key.pk))
    with pytest.raises(Refused) as refused:
        asyncio.run(calling(headers, needs_provider_key=False))
    assert refused.value.status == 401


def test_a_deleted_provider_key_is_no_longer_sent_once_stale(alice: Any, monkeypatch: Any) -> None:
    _, text = create_key(alice, name="agent", scopes=["read", "write"])
    store_key(alice, "anthropic", "sk-ant-api03-stored-0123456789abcdef")
    headers = {"x-api-key": text}
    found = asyncio.run(calling(headers, needs_provider_key=True, provider="anthropic"))
    assert found.provider_headers == {"x-api-key": "sk-ant-api03-stored-0123456789abcdef"}
    ProviderKey.objects.filter(owner=alice).delete()
    again = asyncio.run(calling(headers, needs_provider_key=True, provider="anthropic"))
    assert again.provider_headers == found.provider_headers
    later(monkeypatch, FRESH_SECONDS + 0.1)
    with pytest.raises(Refused) as refused:
        asyncio.run(calling(headers, needs_provider_key=True, provider="anthropic"))
    assert refused.value.status == 401
    assert refused.value.field == "x-api-key"


def test_every_request_is_counted_against_the_rate_even_when_the_key_is_at_hand(
    alice: Any, settings: Any, mid_minute: None
) -> None:
    assert getattr(cache, "acount", None) is not None  # the tests' cache is Redis
    settings.CTXHUB_API_RATE_PER_MINUTE = 3
    _, text = create_key(alice, name="busy", scopes=["read", "write"])
    _, calm = create_key(alice, name="calm", scopes=["read", "write"])
    headers = {"x-api-key": text}
    for _ in range(3):
        asyncio.run(calling(headers, needs_provider_key=False))
    with pytest.raises(Refused) as limited:
        asyncio.run(calling(headers, needs_provider_key=False))
    assert limited.value.status == 429
    assert 1 <= int(limited.value.headers["Retry-After"]) <= 61
    asyncio.run(calling({"x-api-key": calm}, needs_provider_key=False))


def test_the_body_is_read_while_the_rate_is_counted_and_an_over_rate_refusal_wins(
    alice: Any, settings: Any, mid_minute: None
) -> None:
    settings.CTXHUB_API_RATE_PER_MINUTE = 1
    _, text = create_key(alice, name="agent", scopes=["read", "write"])
    headers = {"x-api-key": text}
    asyncio.run(calling(headers, needs_provider_key=False))  # checked, and at its limit
    read: list[str] = []

    async def bad_body() -> None:
        read.append("body")
        raise Refused(400, "must be a list", field="messages")

    with pytest.raises(Refused) as refused:
        asyncio.run(calling_then(headers, bad_body, needs_provider_key=False))
    assert read == ["body"]  # read while the count was on its way
    assert refused.value.status == 429  # over the rate: the body's error is not the answer


def test_no_body_is_read_for_a_key_the_hub_does_not_know(alice: Any) -> None:
    read: list[str] = []

    async def body() -> None:
        read.append("body")

    with pytest.raises(Refused) as refused:
        asyncio.run(calling_then({"x-api-key": "ctxh_nope_000"}, body, needs_provider_key=False))
    assert refused.value.status == 401
    assert read == []


def test_a_stored_anthropic_oauth_token_goes_as_a_bearer_token_beside_the_clients_betas(
    alice: Any,
) -> None:
    _, text = create_key(alice, name="agent", scopes=["read", "write"])
    token = "sk-ant-oat01-stored-subscription-token-0123456789"
    store_key(alice, "anthropic", token)
    sent = {
        "authorization": f"Bearer {text}",
        "anthropic-beta": "claude-code-20250219, interleaved-thinking-2025-05-14",
        "anthropic-version": "2023-06-01",
    }
    who = asyncio.run(calling(sent, needs_provider_key=True, provider="anthropic"))
    upstream = upstream_headers(sent, who)
    assert upstream["authorization"] == f"Bearer {token}"
    assert "x-api-key" not in upstream
    assert upstream["anthropic-beta"] == (
        "claude-code-20250219,interleaved-thinking-2025-05-14,oauth-2025-04-20"
    )
    assert upstream["anthropic-version"] == "2023-06-01"
    # A client that asked for no beta gets the one the token needs; an API key needs none.
    alone = upstream_headers({"x-api-key": text}, who)
    assert alone["anthropic-beta"] == "oauth-2025-04-20"
    store_key(alice, "anthropic", "sk-ant-api03-stored-0123456789abcdef")
    access._stored.clear()
    keyed = asyncio.run(calling({"x-api-key": text}, needs_provider_key=True, provider="anthropic"))
    assert upstream_headers({"x-api-key": text}, keyed) == {
        "x-api-key": "sk-ant-api03-stored-0123456789abcdef"
    }
