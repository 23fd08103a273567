"""Who is calling, and with which provider key.

A client sends two keys or one. With two, its provider key travels as its SDK sends it
(``x-api-key`` or ``Authorization: Bearer``) and passes through untouched, never stored or
logged, and its ctxhub key comes in ``X-Ctxhub-Key`` (Claude Code:
``ANTHROPIC_CUSTOM_HEADERS="X-Ctxhub-Key: ctxh_…"``). With one, the ctxhub key is its API key
(``ANTHROPIC_AUTH_TOKEN=ctxh_…``) and the call goes to an upstream that needs none (the
offline model).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import Refused
from sessions.api import limits
from sessions.api.errors import ApiError
from sessions.api.keys import PREFIX, authenticate
from sessions.models import ApiKey

KEY_HEADER = "x-ctxhub-key"
AUTH_HEADERS = frozenset({"x-api-key", "authorization", KEY_HEADER})


@dataclass(frozen=True, slots=True)
class Caller:
    key: ApiKey
    provider_headers: dict[str, str]
    """The provider's authentication headers, as the client sent them (empty: none)."""


def _presented(headers: dict[str, str]) -> tuple[str, str] | None:
    """The client's API key and the header it came in."""
    if headers.get("x-api-key"):
        return headers["x-api-key"], "x-api-key"
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip(), "authorization"
    return None


def caller(headers: dict[str, str], *, needs_provider_key: bool) -> Caller:
    """The caller a request's headers (lower-cased names) authenticate; Refused (401, 403, 429)
    otherwise."""
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
    key = authenticate(own)
    if key is None:
        raise Refused(401, "unknown, revoked or expired ctxhub API key", field=KEY_HEADER)
    if "write" not in key.scopes:
        raise Refused(403, "this ctxhub key lacks the 'write' scope", field=KEY_HEADER)
    if needs_provider_key and not provider_headers:
        raise Refused(
            401,
            "this upstream needs your provider API key: send it as your SDK does (x-api-key or "
            "Authorization) and the ctxhub key in the X-Ctxhub-Key header",
            field="x-api-key",
        )
    try:
        limits.check(key)
    except ApiError as exc:
        raise Refused(exc.status, exc.message, headers=exc.headers) from None
    return Caller(key, provider_headers)
