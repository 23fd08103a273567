"""A session's messages read from the database and parsed only as the engine asks for them."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from django.db.models import TextField
from django.db.models.functions import Cast
from pydantic import TypeAdapter, ValidationError
from pydantic_ai.messages import ModelMessage

from sessions.models import Message
from sessions.payloads import message_from_payload

_MESSAGE = TypeAdapter[ModelMessage](ModelMessage)


class UnreadableMessage(Exception):
    """A stored message that no longer reads back as a message (one stored before the edge
    refused what cannot be read, say): its session cannot be governed until it is dealt with."""

    def __init__(self, session_id: Any, seq: int, error: Exception) -> None:
        reason = str(error).splitlines()[-1].strip() if str(error) else type(error).__name__
        super().__init__(f"message #{seq} of session {session_id} cannot be read: {reason}")
        self.seq = seq
        self.reason = reason


# Messages are read from the database as the engine asks for them, reading ahead in the
# direction it walks: it walks runs of positions (the kept tail, newest first, skipping the
# small ones it need not open; a compaction, everything forward) and touches a few isolated
# ones (a pair repair: a response and the request after it). A miss near the previous one
# doubles the read-ahead, up to this many; an isolated miss reads two messages. Raw payloads
# read ahead are parsed only if asked for.
_MAX_READ_AHEAD = 256
_NEAR = 16


@dataclass(frozen=True, slots=True)
class Source:
    """Where a position of the effective history comes from."""

    seq: int | None
    """The log seq of a log message; None for a message a record wrote (a compaction's, or
    what a clear keeps)."""
    compaction: int | None = None
    """The compaction whose replacement holds this position, if any."""
    clear: int | None = None
    """The clear whose kept message this position is: the system prompt and instructions of
    the history before it (see ``sessions.history.effective``)."""


class LazyMessages(Sequence[ModelMessage]):
    """The effective history's messages, parsed only when asked for, by index.

    The same position gives the same object every time, so the engine's identity caches hold.
    Slicing or iterating parses everything (correct, but what the engine avoids).
    """

    def __init__(
        self,
        session_id: Any,
        sources: list[Source],
        inline: dict[int, dict[str, Any]],
        loaded: dict[int, ModelMessage] | None = None,
        raw: dict[int, str] | None = None,
    ) -> None:
        self._session_id = session_id
        self._sources = sources
        self._inline = inline
        self._loaded: dict[int, ModelMessage] = {} if loaded is None else loaded
        self._raw: dict[int, str] = {} if raw is None else raw
        self._lock = threading.Lock()
        self._last_miss: int | None = None
        self._read_ahead = 1

    def __len__(self) -> int:
        return len(self._sources)

    @overload
    def __getitem__(self, index: int) -> ModelMessage: ...

    @overload
    def __getitem__(self, index: slice) -> list[ModelMessage]: ...

    def __getitem__(self, index: int | slice) -> ModelMessage | list[ModelMessage]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self._sources)
        found = self._loaded.get(index)
        if found is not None:
            return found
        with self._lock:
            found = self._loaded.get(index)
            if found is None:
                found = self._load(index)
                self._loaded[index] = found
        return found

    def __iter__(self) -> Iterator[ModelMessage]:
        return (self[i] for i in range(len(self)))

    @property
    def parsed(self) -> int:
        """How many messages were parsed so far (for tests and benchmarks)."""
        return len(self._loaded)

    def extended(
        self, sources: list[Source], inline: dict[int, dict[str, Any]], raw: dict[int, str]
    ) -> LazyMessages:
        """The same history grown at its end: what was parsed is shared; ``raw``: payloads of
        the new messages, already read."""
        self._raw.update(raw)
        return LazyMessages(self._session_id, sources, inline, self._loaded, self._raw)

    def _load(self, index: int) -> ModelMessage:
        payload = self._inline.get(index)
        if payload is not None:
            return message_from_payload(payload)
        seq = self._sources[index].seq
        assert seq is not None
        raw = self._raw.pop(seq, None)
        if raw is None:
            self._fetch(index)
            raw = self._raw.pop(seq)
        try:
            return _MESSAGE.validate_json(raw)
        except ValidationError as error:
            raise UnreadableMessage(self._session_id, seq, error) from error

    def _fetch(self, index: int) -> None:
        """Read the raw payload at ``index``, and ahead of it when the engine walks a run."""
        step = 0 if self._last_miss is None else index - self._last_miss
        if step and abs(step) <= self._read_ahead + _NEAR:
            self._read_ahead = min(2 * self._read_ahead, _MAX_READ_AHEAD)
        else:
            self._read_ahead = 2
        self._last_miss = index
        direction = -1 if step < 0 else 1
        end = index + direction * self._read_ahead
        positions = range(index, max(end, -1) if direction < 0 else min(end, len(self)), direction)
        seqs = [
            s.seq
            for p in positions
            if (s := self._sources[p]).seq is not None and p not in self._loaded
        ]
        rows = (
            Message.objects.filter(session_id=self._session_id, seq__in=seqs)
            .annotate(raw=Cast("payload", output_field=TextField()))
            .values_list("seq", "raw")
        )
        self._raw.update(rows)
