"""API keys: made (shown once), stored as a digest, checked, scoped, revoked.

A key checked against the database is remembered by the process for ``FRESH_SECONDS``: an
agent's requests (an append, then its context, many times a minute) are authenticated without
a query. A key revoked here is forgotten at once; one revoked by another process, or whose
owner was deactivated, is refused here once that time is up.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from sessions.models import ApiKey, AuditEvent
from sessions.services import Invalid

SCOPES = ("read", "write", "govern")
PREFIX = "ctxh"

FRESH_SECONDS = 5.0
"""How long a key checked against the database is taken again without asking it."""
_checked: dict[str, tuple[float, ApiKey]] = {}
"""The keys this process checked, by the digest of their text: when, and the row."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(
    owner: Any,
    *,
    name: str,
    scopes: list[str],
    expires_days: int | None = None,
    actor: Any = None,
    via: str = "dashboard",
) -> tuple[ApiKey, str]:
    """A new key and its text, which is never stored and cannot be shown again. The audit log
    keeps who made it (``actor``; None from the command line) and ``via`` what."""
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise Invalid(
            f"scopes: choose among {', '.join(SCOPES)}"
            + (f" ({', '.join(unknown)} is not one)" if unknown else ""),
            field="scopes",
        )
    if expires_days is not None and expires_days < 1:
        raise Invalid("expires: at least one day", field="expires")
    name = name.strip()[:100] or "API key"
    prefix = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    with transaction.atomic():
        key = ApiKey.objects.create(
            owner=owner,
            name=name,
            prefix=prefix,
            digest=_digest(secret),
            scopes=[scope for scope in SCOPES if scope in scopes],
            expires_at=timezone.now() + timedelta(days=expires_days) if expires_days else None,
        )
        _audit(key, actor, "api_key_created", via=via)
    return key, f"{PREFIX}_{prefix}_{secret}"


def live_key(text: str) -> ApiKey | None:
    """``authenticate``, or the key as this process checked it within ``FRESH_SECONDS``."""
    return checked_within(text, FRESH_SECONDS) or authenticate(text)


def checked_within(text: str, seconds: float) -> ApiKey | None:
    """The key ``text`` is as this process found it live within ``seconds``, unless it has
    expired since; None when it was not checked so lately (nothing is asked of the database)."""
    found = _checked.get(_digest(text))
    if found is None or time.monotonic() - found[0] >= seconds:
        return None
    key = found[1]
    if key.expires_at is not None and key.expires_at <= timezone.now():
        return None
    return key


def forget_checked() -> None:
    """Forget every key this process checked (each is asked of the database again)."""
    _checked.clear()


def authenticate(text: str) -> ApiKey | None:
    """The live key ``text`` is, or None (unknown, wrong, revoked or expired), asked of the
    database; a live one is remembered (``checked_within``)."""
    found = _authenticate(text)
    if found is None:
        _checked.pop(_digest(text), None)
    else:
        _checked[_digest(text)] = (time.monotonic(), found)
    return found


def _authenticate(text: str) -> ApiKey | None:
    parts = text.strip().split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX:
        return None
    try:
        # The owner is joined to be checked, not loaded: most requests only need its id.
        key = ApiKey.objects.get(prefix=parts[1], owner__is_active=True)
    except ApiKey.DoesNotExist:
        return None
    if not hmac.compare_digest(key.digest, _digest(parts[2])):
        return None
    now = timezone.now()
    if key.revoked_at is not None or (key.expires_at is not None and key.expires_at <= now):
        return None
    # At most once a minute: a busy agent must not write a row per request.
    if key.last_used_at is None or now - key.last_used_at > timedelta(minutes=1):
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key


def revoke(key: ApiKey, *, actor: Any = None, via: str = "dashboard") -> None:
    if key.revoked_at is None:
        with transaction.atomic():
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at"])
            _audit(key, actor, "api_key_revoked", via=via)
    for digest, (_, known) in list(_checked.items()):
        if known.pk == key.pk:
            del _checked[digest]


def _audit(key: ApiKey, actor: Any, verb: str, *, via: str) -> None:
    """An audit row naming the key (never its secret) and its owner."""
    AuditEvent.objects.create(
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        verb=verb,
        data={
            "key": key.prefix,
            "name": key.name,
            "owner": key.owner.get_username(),
            "scopes": list(key.scopes),
            "expires_at": key.expires_at.isoformat() if key.expires_at else None,
            "via": via,
        },
    )
