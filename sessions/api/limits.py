"""Requests per key and minute, counted in the cache (Redis when configured, so every server
process shares the count). A key over its limit gets 429 with Retry-After; other keys are not
affected. While the cache is unreachable the limit is not counted (it fails open): the API
keeps answering from PostgreSQL rather than refusing every request."""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.core.cache import cache

from sessions.api.errors import ApiError
from sessions.models import ApiKey

log = logging.getLogger(__name__)

WINDOW_SECONDS = 60


def check(key: ApiKey) -> None:
    now = time.time()
    name = _name(key, now)
    try:
        count = _count(name, timeout=WINDOW_SECONDS * 2)
    except Exception as error:  # Redis is away: redis-py's errors, or the socket's own
        log.warning("rate of key %s not counted, the cache is unreachable: %s", key.prefix, error)
        return
    _judge(count, now)


async def acheck(key: ApiKey) -> None:
    """``check`` from the event loop: on Redis without leaving it, and on the in-process cache
    (the embedded default, no I/O) as it is."""
    count_up = getattr(cache, "acount", None)
    if count_up is None:
        check(key)
        return
    now = time.time()
    try:
        count = int(await count_up(_name(key, now), WINDOW_SECONDS * 2))
    except Exception as error:  # as in ``check``
        log.warning("rate of key %s not counted, the cache is unreachable: %s", key.prefix, error)
        return
    _judge(count, now)


def _name(key: ApiKey, now: float) -> str:
    return f"api-rate:{key.prefix}:{int(now // WINDOW_SECONDS)}"  # the cache adds its prefix


def _judge(count: int, now: float) -> None:
    """Refuses the request that made ``count`` this minute if it is over the limit."""
    limit = settings.CTXHUB_API_RATE_PER_MINUTE
    window = int(now // WINDOW_SECONDS)
    if count > limit:
        retry = max(1, int((window + 1) * WINDOW_SECONDS - now) + 1)
        raise ApiError(
            429,
            "rate_limited",
            f"this key made more than {limit} requests this minute; retry in {retry} s",
            headers={"Retry-After": str(retry)},
        )


def _count(name: str, timeout: int) -> int:
    """One more request under ``name``: in one round trip on Redis (``SharedRedisCache``);
    elsewhere add() then incr(), atomic in the local cache too."""
    count_up = getattr(cache, "count", None)
    if count_up is not None:
        return int(count_up(name, timeout))
    cache.add(name, 0, timeout=timeout)
    return int(cache.incr(name))
