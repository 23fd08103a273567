"""Provider API keys the hub holds for its users, encrypted at rest.

A client that authenticates with its ctxhub key alone (``ANTHROPIC_AUTH_TOKEN=ctxh_…``) gets its
owner's stored key sent to the provider (``gateway.access``), so an agent needs one key, not
two. A key is stored encrypted (Fernet, with ``CTXHUB_SECRETS_KEY`` or a key derived from
``SECRET_KEY``); what is ever shown of it, on a page or in the audit log, is its hint
(``sk-ant-…7f3a``). Nothing here logs a key, and a refusal never repeats it.
"""

from __future__ import annotations

import base64
import functools
import logging
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import transaction

from gateway.models import Provider, ProviderKey
from sessions.api.keys import PREFIX
from sessions.models import AuditEvent
from sessions.services import Invalid

log = logging.getLogger(__name__)

PROVIDERS: tuple[str, ...] = tuple(Provider.values)
MAX_LENGTH = 500
_PRINTABLE = re.compile(r"[!-~]+")  # printable ASCII, no space
_KIND = re.compile(r"[A-Za-z]{1,8}-(?:[A-Za-z]{1,8}-)?")  # sk-, sk-ant-, sk-proj-


class UnreadableKey(Exception):
    """A stored key that the secrets key in use cannot decrypt (it changed since)."""


@functools.lru_cache(maxsize=4)
def _fernet(secrets_key: str, secret_key: str) -> MultiFernet:
    keys = [key.strip() for key in secrets_key.split(",") if key.strip()]
    if not keys:
        derived = HKDF(
            algorithm=hashes.SHA256(),
            length=32,
            salt=b"ctxhub",
            info=b"ctxhub gateway provider keys",
        ).derive(secret_key.encode())
        keys = [base64.urlsafe_b64encode(derived).decode()]
    return MultiFernet([Fernet(key) for key in keys])


def _cipher() -> MultiFernet:
    """The first key encrypts; any of them decrypts."""
    return _fernet(settings.CTXHUB_SECRETS_KEY, settings.SECRET_KEY)


def hint_of(text: str) -> str:
    """What may be shown of a key: its kind's prefix and its last four characters (nothing
    of a key too short to spare them)."""
    if len(text) < 20:
        return "…"
    kind = _KIND.match(text)
    return f"{kind.group(0) if kind else ''}…{text[-4:]}"


def _checked_provider(provider: str) -> str:
    if provider not in PROVIDERS:
        raise Invalid(f"provider: one of {', '.join(PROVIDERS)}", field="provider")
    return provider


def _checked_key(text: str) -> str:
    text = text.strip()
    if not text:
        raise Invalid("key: paste the provider's API key", field="key")
    if len(text) > MAX_LENGTH:
        raise Invalid(f"key: at most {MAX_LENGTH} characters", field="key")
    if not _PRINTABLE.fullmatch(text):
        raise Invalid("key: printable ASCII characters only, no spaces", field="key")
    if text.startswith(f"{PREFIX}_"):
        raise Invalid(
            "key: this is a ctxhub key; store the provider's own key here (sk-…)", field="key"
        )
    return text


def store_key(
    owner: Any, provider: str, text: str, *, actor: Any = None, via: str = "dashboard"
) -> ProviderKey:
    """Store (or replace) ``owner``'s key for ``provider``, encrypted; ``Invalid`` when it
    cannot be a provider key. Audited with its hint, never the key."""
    provider = _checked_provider(provider)
    text = _checked_key(text)
    encrypted = _cipher().encrypt(text.encode()).decode()
    with transaction.atomic():
        stored, created = ProviderKey.objects.update_or_create(
            owner=owner,
            provider=provider,
            defaults={"encrypted": encrypted, "hint": hint_of(text)},
        )
        _audit(
            owner,
            actor,
            "provider_key_stored" if created else "provider_key_replaced",
            provider=provider,
            hint=stored.hint,
            via=via,
        )
    return stored


def delete_key(owner: Any, provider: str, *, actor: Any = None, via: str = "dashboard") -> bool:
    """Forget ``owner``'s key for ``provider``; False when there was none."""
    provider = _checked_provider(provider)
    with transaction.atomic():
        stored = ProviderKey.objects.filter(owner=owner, provider=provider).first()
        if stored is None:
            return False
        stored.delete()
        _audit(owner, actor, "provider_key_deleted", provider=provider, hint=stored.hint, via=via)
    return True


def provider_key(owner_id: int, provider: str) -> str | None:
    """The key ``owner_id`` stored for ``provider``, decrypted; None when none is stored.
    ``UnreadableKey`` when the secrets key changed since it was stored."""
    encrypted = (
        ProviderKey.objects.filter(owner_id=owner_id, provider=provider)
        .values_list("encrypted", flat=True)
        .first()
    )
    if encrypted is None:
        return None
    try:
        return _cipher().decrypt(encrypted.encode()).decode()
    except InvalidToken:
        log.warning(
            "gateway: the %s key of user %s cannot be decrypted: CTXHUB_SECRETS_KEY (or the "
            "SECRET_KEY it is derived from) changed since it was stored",
            provider,
            owner_id,
        )
        raise UnreadableKey(provider) from None


@dataclass(frozen=True, slots=True)
class Hint:
    """What the API keys page shows of a provider's key (``hint`` None: none stored)."""

    provider: str
    label: str
    hint: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    readable: bool = True


def hints(owner: Any) -> list[Hint]:
    """Each provider and what ``owner`` stored for it."""
    stored = {key.provider: key for key in ProviderKey.objects.filter(owner=owner)}
    shown = []
    for provider, label in Provider.choices:
        key = stored.get(provider)
        if key is None:
            shown.append(Hint(provider, label))
            continue
        shown.append(
            Hint(provider, label, key.hint, key.created_at, key.updated_at, _readable(key))
        )
    return shown


def _readable(key: ProviderKey) -> bool:
    try:
        _cipher().decrypt(key.encrypted.encode())
    except InvalidToken:
        return False
    return True


def _audit(owner: Any, actor: Any, verb: str, *, provider: str, hint: str, via: str) -> None:
    """An audit row naming the provider and the key's hint (never the key) and its owner."""
    AuditEvent.objects.create(
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        verb=verb,
        data={"provider": provider, "hint": hint, "owner": owner.get_username(), "via": via},
    )
