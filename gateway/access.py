"""Who is calling, and with which provider key.

A client sends two keys or one. With two, its provider key travels as its SDK sends it
(``x-api-key`` or ``Authorization: Bearer``) and passes through untouched, never stored or
logged, and its ctxhub key comes in ``X-Ctxhub-Key`` (Claude Code:
``ANTHROPIC_CUSTOM_HEADERS="X-Ctxhub-Key: ctxh_…"``). With one, the ctxhub key is its API key
(``ANTHROPIC_AUTH_TOKEN=ctxh_…``): the offline model needs no provider key, and a real
upstream gets the one the key's owner stored for that provider on the API keys page
(``gateway.provider_keys``), as that provider's SDK would send it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from django.db import DatabaseError

from gateway.errors import Refused
from gateway.provider_keys import UnreadableKey, hint_of, provider_key
from gateway.storage import stored
from gateway.upstream import forwarded
from sessions.api import limits
from sessions.api.errors import ApiError
from sessions.api.keys import FRESH_SECONDS, PREFIX, authenticate, checked_within
from sessions.models import ApiKey

KEY_HEADER = "x-ctxhub-key"
AUTH_HEADERS = frozenset({"x-api-key", "authorization", KEY_HEADER})
ANTHROPIC_OAUTH_PREFIX = "sk-ant-oat"
ANTHROPIC_OAUTH_BETA = "oauth-2025-04-20"

KNOWN_SECONDS = 300
"""How long a key checked against the database is still taken while the database is away:
an agent in the middle of its work keeps reaching its model through a short outage."""
_stored: dict[tuple[int, str], tuple[float, dict[str, str]]] = {}
"""The headers made from the provider key a user stored, by user and provider: when read."""


@dataclass(frozen=True, slots=True)
class Caller:
    key: ApiKey
    provider_headers: dict[str, str] = field(repr=False)
    """The provider's authentication headers, as the client sent them or made from the key its
    owner stored (empty: none). Never in a repr, so never in a log line that shows one."""

    def scrubbed(self, text: str) -> str:
        """``text`` (an upstream's error, to be stored) with the provider key it may quote
        replaced by what may be shown of it."""
        for name in ("x-api-key", "authorization"):
            secret = self.provider_headers.get(name, "").removeprefix("Bearer ").strip()
            if len(secret) >= 8 and secret in text:
                text = text.replace(secret, hint_of(secret))
        return text


def _presented(headers: dict[str, str]) -> tuple[str, str] | None:
    """The client's API key and the header it came in."""
    if headers.get("x-api-key"):
        return headers["x-api-key"], "x-api-key"
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip(), "authorization"
    return None


def _stored_headers(owner_id: int, provider: str) -> dict[str, str]:
    """The authentication headers of the key ``owner_id`` stored for ``provider`` (empty: none
    stored), as that provider's SDK sends its key."""
    headers = _read_stored_headers(owner_id, provider)
    _stored[owner_id, provider] = (time.monotonic(), headers)
    return headers


def _read_stored_headers(owner_id: int, provider: str) -> dict[str, str]:
    try:
        text = provider_key(owner_id, provider)
    except UnreadableKey:
        raise Refused(
            401,
            f"the {provider} key stored for you on the hub's API keys page can no longer be "
            "read (the hub's secrets key changed): store it again there",
            field="x-api-key",
        ) from None
    if text is None:
        return {}
    if provider == "anthropic" and text.startswith(ANTHROPIC_OAUTH_PREFIX):
        # A Claude subscription's OAuth token: a bearer token, with the beta that admits it.
        return {"authorization": f"Bearer {text}", "anthropic-beta": ANTHROPIC_OAUTH_BETA}
    if provider == "anthropic":
        return {"x-api-key": text}
    return {"authorization": f"Bearer {text}"}


def upstream_headers(headers: dict[str, str], who: Caller) -> dict[str, str]:
    """The headers the upstream gets: the client's (``forwarded``, its ctxhub key and the API
    key it sent to the hub left out) with the caller's provider authentication; betas the
    client asked for are kept beside one the authentication needs."""
    sent = forwarded(headers, drop=AUTH_HEADERS)
    for name, value in who.provider_headers.items():
        asked = sent.get(name)
        if name == "anthropic-beta" and asked:
            betas = [beta.strip() for beta in asked.split(",") if beta.strip()]
            value = ",".join([*betas, *([value] if value not in betas else [])])
        sent[name] = value
    return sent


def _authenticated(text: str) -> ApiKey | None:
    """The live key ``text`` is (``authenticate``); while the database is away, the key as it
    was checked within ``KNOWN_SECONDS``, else a 503 and nothing forwarded."""
    try:
        return authenticate(text)
    except DatabaseError:
        found = checked_within(text, KNOWN_SECONDS)
        if found is not None:
            return found
        raise Refused(
            503,
            "the hub cannot check this ctxhub key now (its database is unreachable): the "
            "request was not forwarded; retry shortly",
            headers={"retry-after": "5"},
        ) from None


class _NotAtHand(Exception):
    """What ``calling`` needs was not checked lately: the database is asked."""


def _fresh[T](found: tuple[float, T] | None) -> T:
    if found is None or time.monotonic() - found[0] >= FRESH_SECONDS:
        raise _NotAtHand
    return found[1]


def _key_at_hand(text: str) -> ApiKey:
    key = checked_within(text, FRESH_SECONDS)
    if key is None:
        raise _NotAtHand
    return key


def _stored_headers_at_hand(owner_id: int, provider: str) -> dict[str, str]:
    try:
        return _fresh(_stored.get((owner_id, provider)))
    except _NotAtHand:
        _stored.pop((owner_id, provider), None)  # read again, not kept stale
        raise


async def calling(
    headers: dict[str, str], *, needs_provider_key: bool, provider: str | None = None
) -> Caller:
    """``caller``, without a trip to the database for a key checked in the last
    ``FRESH_SECONDS`` (nor for the provider key its owner stored): the rate is counted all the
    same, in the cache."""
    who, _ = await calling_then(
        headers, _nothing, needs_provider_key=needs_provider_key, provider=provider
    )
    return who


async def calling_then[T](
    headers: dict[str, str],
    work: Callable[[], Awaitable[T]],
    *,
    needs_provider_key: bool,
    provider: str | None = None,
) -> tuple[Caller, T]:
    """``calling``, and what ``work()`` gives once the caller is known: done while the rate is
    counted when the key was at hand (the count's round trip to the cache then costs the
    request nothing), after the database's check otherwise. A refusal of the rate (429) wins
    over the work's error."""
    try:
        remembered = _caller(
            headers,
            needs_provider_key=needs_provider_key,
            provider=provider,
            key_of=_key_at_hand,
            stored_headers=_stored_headers_at_hand,
        )
    except _NotAtHand:
        who = await stored(
            caller, headers, needs_provider_key=needs_provider_key, provider=provider
        )
        return who, await work()
    counting = asyncio.ensure_future(_counted(remembered.key))
    try:
        done = await work()
    finally:
        await counting
    return remembered, done


async def _counted(key: ApiKey) -> None:
    try:
        await limits.acheck(key)
    except ApiError as exc:
        raise Refused(exc.status, exc.message, headers=exc.headers) from None


async def _nothing() -> None:
    return None


def caller(
    headers: dict[str, str], *, needs_provider_key: bool, provider: str | None = None
) -> Caller:
    """The caller a request's headers (lower-cased names) authenticate; Refused (401, 403, 429)
    otherwise. A client that sends no provider key of its own to an upstream that needs one
    gets the key its owner stored for ``provider``."""
    found = _caller(
        headers,
        needs_provider_key=needs_provider_key,
        provider=provider,
        key_of=_authenticated,
        stored_headers=_stored_headers,
    )
    _rate(found.key)
    return found


def _caller(
    headers: dict[str, str],
    *,
    needs_provider_key: bool,
    provider: str | None,
    key_of: Callable[[str], ApiKey | None],
    stored_headers: Callable[[int, str], dict[str, str]],
) -> Caller:
    """``caller``, its key and the stored provider key read with ``key_of`` (None: not a live
    key) and ``stored_headers``."""
    presented = _presented(headers)
    own = headers.get(KEY_HEADER, "").strip()
    provider_headers: dict[str, str] = {}
    if presented is not None and presented[0].startswith(f"{PREFIX}_"):
        own = own or presented[0]
    elif presented is not None:
        name = presented[1]
        provider_headers = {name: headers[name]}
    if not own:
        raise Refused(
            401,
            "a ctxhub API key is required: send it as the API key, or in the X-Ctxhub-Key "
            "header beside your provider key",
            field=KEY_HEADER,
        )
    key = key_of(own)
    if key is None:
        raise Refused(401, "unknown, revoked or expired ctxhub API key", field=KEY_HEADER)
    if "write" not in key.scopes:
        raise Refused(403, "this ctxhub key lacks the 'write' scope", field=KEY_HEADER)
    if needs_provider_key and not provider_headers and provider is not None:
        try:
            provider_headers = stored_headers(key.owner_id, provider)
        except DatabaseError:
            raise Refused(
                503,
                f"the hub cannot read the {provider} key stored for you now (its database is "
                "unreachable); retry shortly, or send your own beside the X-Ctxhub-Key header",
                headers={"retry-after": "5"},
            ) from None
    if needs_provider_key and not provider_headers:
        raise Refused(
            401,
            "this upstream needs your provider API key: store it on the hub's API keys page "
            "(/keys/, then your ctxhub key alone will do), or send it as your SDK does "
            "(x-api-key or Authorization) with the ctxhub key in the X-Ctxhub-Key header",
            field="x-api-key",
        )
    return Caller(key, provider_headers)


def _rate(key: ApiKey) -> None:
    """One more request of ``key`` counted; Refused (429) over its rate."""
    try:
        limits.check(key)
    except ApiError as exc:
        raise Refused(exc.status, exc.message, headers=exc.headers) from None
