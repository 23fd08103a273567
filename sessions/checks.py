"""Checks of the services the hub relies on, run by ``manage.py check`` and at worker start."""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery.signals import worker_ready
from django.conf import settings
from django.core import checks

log = logging.getLogger(__name__)

EVICTION_POLICY_ID = "ctxhub.W001"
SECRETS_KEY_ID = "ctxhub.W002"


def redis_eviction_policy(url: str) -> str | None:
    """Redis's ``maxmemory-policy`` (read from INFO, which managed services that disable CONFIG
    still answer), or None when Redis cannot be asked."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        with client:
            policy = client.info("memory").get("maxmemory_policy")
    except redis.RedisError:
        return None
    return str(policy) if policy is not None else None


def eviction_policy_warnings(url: str | None) -> list[checks.CheckMessage]:
    """A warning unless Redis keeps every key until it is deleted: the job queue and the
    channel layer live in Redis, and a policy that evicts keys under memory pressure drops
    queued jobs and group memberships without a word."""
    if not url:
        return []
    policy = redis_eviction_policy(url)
    if policy is None or policy == "noeviction":
        return []
    return [
        checks.Warning(
            f"Redis evicts keys under memory pressure (maxmemory-policy {policy}): queued "
            "jobs and live-update groups can be lost silently.",
            hint="Set maxmemory-policy noeviction on the Redis server in REDIS_URL "
            "(redis-server --maxmemory-policy noeviction, or CONFIG SET).",
            id=EVICTION_POLICY_ID,
        )
    ]


@checks.register(checks.Tags.caches, deploy=False)
def check_redis_eviction_policy(
    app_configs: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    return eviction_policy_warnings(getattr(settings, "REDIS_URL", None))


def secrets_key_warnings(*, production: bool, secrets_key: str) -> list[checks.CheckMessage]:
    """A warning when production runs without its own key for the secrets the hub stores (the
    gateway's provider keys): the one derived from SECRET_KEY changes with it."""
    if not production or secrets_key:
        return []
    return [
        checks.Warning(
            "CTXHUB_SECRETS_KEY is not set: the provider keys the gateway holds are encrypted "
            "with a key derived from SECRET_KEY, so a new SECRET_KEY makes them unreadable.",
            hint='Set CTXHUB_SECRETS_KEY to a Fernet key: python -c "from cryptography.fernet '
            'import Fernet; print(Fernet.generate_key().decode())"',
            id=SECRETS_KEY_ID,
        )
    ]


@checks.register(checks.Tags.security)
def check_secrets_key(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return secrets_key_warnings(
        production=getattr(settings, "PRODUCTION", False),
        secrets_key=getattr(settings, "CTXHUB_SECRETS_KEY", ""),
    )


@worker_ready.connect
def warn_about_services(**kwargs: Any) -> None:
    """What ``check`` would warn about, in the log of a process that does not run it (a
    worker, once it is ready)."""
    for warning in eviction_policy_warnings(getattr(settings, "REDIS_URL", None)):
        log.warning("%s %s %s", warning.id, warning.msg, warning.hint)
