"""The gateway's database work, a slot at a time.

A gateway request stores what it threads, governs, and records the exchange: short bursts of
database work around a long wait on the model. Each burst takes one of the process's slots
(``config.slots``), runs on the request's thread, and hands its connection back to the pool
when done, so a thousand open streams hold no connection between bursts.
"""

from __future__ import annotations

from collections.abc import Callable

from asgiref.sync import sync_to_async
from django.db import connections

from config.slots import RUNNING


async def stored[**P, R](work: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``work(*args, **kwargs)`` on the request's thread, holding a slot and a connection
    only for its length."""
    async with RUNNING:
        return await sync_to_async(_released(work))(*args, **kwargs)


async def stored_apart[**P, R](work: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``work(*args, **kwargs)`` as ``stored`` runs it, on a thread of the event loop's pool:
    for work that outlives its request (an exchange recorded after the client had the
    answer), whose own thread is gone by then."""
    async with RUNNING:
        return await sync_to_async(_released(work), thread_sensitive=False)(*args, **kwargs)


def _released[**P, R](work: Callable[P, R]) -> Callable[P, R]:
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return work(*args, **kwargs)
        finally:
            connections.close_all()

    return run
