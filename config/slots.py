"""How much database work one web process does at once.

A page request runs in a thread and holds a database connection from its first query to its
end; a gateway request holds one only while it stores or governs, not while the model streams.
Both take a slot here first (``config.asgi.RequestLimit``, ``gateway.storage``), so the pool
(``CTXHUB_DB_POOL_SIZE``) always has a connection for whoever holds a slot.
"""

from __future__ import annotations

import asyncio

from django.conf import settings

RUNNING = asyncio.Semaphore(settings.CTXHUB_CONCURRENT_REQUESTS)
