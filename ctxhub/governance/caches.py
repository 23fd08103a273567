"""Counts and governed versions memoised per message and part, by object identity.

Governance runs before every model request, on a history that grows by a few messages each
time, so each part's and message's counts and governed versions are worked out once per object
(weakly: an entry goes with its object), with small keys standing for policy settings. These
are memos of pure functions of the objects: messages are values, and a caller changes one by
replacing it (as pydantic-ai does), so dropping them (``memory.clear()``, between benchmark runs)
changes no result. What a Governor decided lives in the Governor, not here.
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
        self.cap_keys.clear()
        self.cap_keys_by_policy.clear()


memory = Memory()
