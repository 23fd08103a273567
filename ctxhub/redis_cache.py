"""Django's Redis cache, with one client per process.

Django makes a cache object per request context (a thread, or an ASGI request's task), and its
Redis backend a connection pool per object: under ASGI every request opened a new connection to
Redis, with its handshake, for the per-key rate count alone. The client and its pool are
thread-safe and notice a fork, so one per process serves every request.
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

_clients: dict[tuple[str, ...], RedisCacheClient] = {}
_lock = threading.Lock()


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
                _clients[key] = RedisCacheClient(self._servers_given, **self._options_given)
            return _clients[key]
