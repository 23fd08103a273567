"""What governance remembers between calls, behind one object: ``memory``.

Governance runs before every model request, on a history that grows by a few messages each
time, so it remembers what it worked out: each part's and message's counts and governed
versions (by object identity, weakly: an entry goes with its object), the last histories
governed (to recognise the next as one of them grown), the token ids of outputs not truncated
yet, and small keys standing for policy settings. All of it follows from the histories
themselves, so dropping it changes no result: the next call works it out again.

``memory.clear()`` drops it all: after editing in place a message already governed (older than
a history's last few messages; see the README), to free memory, or between benchmark runs.
"""

from __future__ import annotations

import weakref
from typing import Any


class IdentityCache:
    """Values attached to objects by identity, dropped when the object is garbage collected."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], object, dict[Any, Any]]] = {}

    def slot(self, obj: object, fingerprint: object) -> dict[Any, Any]:
        """The dict of cached values for ``obj``; emptied when its fingerprint changed."""
        key = id(obj)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is obj and entry[1] == fingerprint:
            return entry[2]
        values: dict[Any, Any] = {}
        entries = self._entries

        def forget(_: weakref.ref[Any], key: int = key) -> None:
            current = entries.get(key)
            if current is not None and current[0]() is None:
                del entries[key]

        self._entries[key] = (weakref.ref(obj, forget), fingerprint, values)
        return values

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


class Memory:
    """Everything governance keeps between calls (see the module's docstring)."""

    def __init__(self) -> None:
        self.parts = IdentityCache()
        """Per part: its token counts and governed versions."""
        self.messages = IdentityCache()
        """Per message: its facts and governed versions."""
        self.histories: dict[str, list[Any]] = {}
        """Per encoding, the histories governed last, most recent first (see ``govern``)."""
        self.token_ids: dict[str, dict[int, tuple[str, list[int]]]] = {}
        """Per encoding, token ids of long outputs not truncated yet, newest first."""
        self.cap_keys: dict[tuple[Any, ...], int] = {}
        """Part-cap settings → the small int standing for them in the governed versions' keys."""
        self.cap_keys_by_policy: dict[tuple[int, str], tuple[Any, int]] = {}
        """(policy id, encoding) → (the policy, its settings' key), to skip hashing settings."""

    def clear(self) -> None:
        """Forget everything; the next calls work it out again, with the same results."""
        # Together: a settings key numbered afresh must not find a governed version cached
        # under the number another setting had.
        self.parts.clear()
        self.messages.clear()
        self.histories.clear()
        self.token_ids.clear()
        self.cap_keys.clear()
        self.cap_keys_by_policy.clear()


memory = Memory()
