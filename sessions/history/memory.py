"""What a process built for a session, kept for the requests that follow: the effective
histories (``sessions.history.effective.REMEMBERED``)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Protocol

from django.conf import settings


class Weighed(Protocol):
    @property
    def tokens(self) -> int: ...


class Remembered[H: Weighed]:
    """What this process built last, per session: an LRU bounded by the tokens the entries
    hold (``CTXHUB_REMEMBERED_TOKENS``), not by their number.

    A web process serves hundreds of agents at once: bounded at a few dozen histories, each
    session's was rebuilt from the database between two of its own requests. Bounded by count,
    a few dozen long sessions would hold gigabytes. A history holds about 20 bytes per token;
    each counts at least ``ENTRY_TOKENS``, so many empty ones are bounded too."""

    ENTRY_TOKENS = 1_000

    def __init__(self) -> None:
        self._items: OrderedDict[Any, H] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    @classmethod
    def _weight(cls, history: H) -> int:
        return max(history.tokens, cls.ENTRY_TOKENS)

    def get(self, key: Any) -> H | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: Any, history: H) -> None:
        with self._lock:
            earlier = self._items.pop(key, None)
            if earlier is not None:
                self._held -= self._weight(earlier)
            self._items[key] = history
            self._held += self._weight(history)
            # The newest stays, however large: the request that built it reads it next.
            while self._held > settings.CTXHUB_REMEMBERED_TOKENS and len(self._items) > 1:
                _, oldest = self._items.popitem(last=False)
                self._held -= self._weight(oldest)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._held = 0
