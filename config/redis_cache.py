"""Django's Redis cache, with one client per process.

Django makes a cache object per request context (a thread, or an ASGI request's task), and its
Redis backend a connection pool per object: under ASGI every request opened a new connection to
Redis, with its handshake, for the per-key rate count alone. It also builds a new redis-py
client object for every command. The clients and their pools are thread-safe and notice a
fork, so one per process and server serves every request.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from functools import cached_property
from typing import Any

import redis.asyncio
from django.core.cache.backends.redis import RedisCache, RedisCacheClient

_clients: dict[tuple[str, ...], RedisCacheClient] = {}
_lock = threading.Lock()


class _ReusingClient(RedisCacheClient):
    """Django's client, keeping one redis-py client per connection pool."""

    def __init__(self, servers: list[str], **options: Any) -> None:
        super().__init__(servers, **options)
        self._redis_clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        # Django's own members, which its type stubs leave out.
        pool = self._get_connection_pool(write)  # type: ignore[attr-defined]
        client = self._redis_clients.get(id(pool))
        if client is None:
            made = self._client(connection_pool=pool)  # type: ignore[attr-defined]
            client = self._redis_clients.setdefault(id(pool), made)
        return client


class SharedRedisCache(RedisCache):
    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._servers_given = server.split(";") if isinstance(server, str) else list(server)
        self._options_given: dict[str, Any] = params.get("OPTIONS", {})

    @cached_property
    def _cache(self) -> RedisCacheClient:
        key = (*self._servers_given, repr(sorted(self._options_given.items())))
        with _lock:
            if key not in _clients:
                _clients[key] = _ReusingClient(self._servers_given, **self._options_given)
            return _clients[key]

    def count(self, key: str, timeout: int) -> int:
        """Add one to the counter under ``key`` (started at zero, expiring after ``timeout``
        seconds, when missing) and return it: one round trip, where ``add`` then ``incr``
        take three."""
        key = self.make_and_validate_key(key)
        pipe = self._cache.get_client(key, write=True).pipeline(transaction=False)
        pipe.set(key, 0, ex=timeout, nx=True)
        pipe.incr(key)
        return int(pipe.execute()[1])

    async def acount(self, key: str, expires: int) -> int:
        """``count`` (``expires`` its timeout) in the event loop, on redis-py's asyncio
        client: a request served there (the gateway's) counts its rate without a hop to a
        thread."""
        key = self.make_and_validate_key(key)
        async with _async_client(self._servers_given[0]).pipeline(transaction=False) as pipe:
            pipe.set(key, 0, ex=expires, nx=True)
            pipe.incr(key)
            return int((await pipe.execute())[1])


_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = (
    weakref.WeakKeyDictionary()
)


def _async_client(url: str) -> Any:
    """One asyncio client per event loop and server (its connections belong to the loop)."""
    clients = _async_clients.setdefault(asyncio.get_running_loop(), {})
    if url not in clients:
        # A Redis that hangs costs a request a second at most: the count fails open.
        clients[url] = redis.asyncio.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    return clients[url]
