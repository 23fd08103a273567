"""Server-sent events, read as they arrive: the gateway relays a stream's bytes untouched and
reads the same bytes beside it to assemble the response it stores."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    """The ``event:`` field ("message" when the stream names none, as OpenAI's chunks)."""
    data: str


class EventReader:
    """Splits a byte stream into events, however the bytes are cut into chunks."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[Event]:
        self._pending = (self._pending + chunk).replace(b"\r\n", b"\n")
        events = []
        while b"\n\n" in self._pending:
            block, self._pending = self._pending.split(b"\n\n", 1)
            event = _event(block.decode("utf-8", "replace"))
            if event is not None:
                events.append(event)
        return events


def _event(block: str) -> Event | None:
    name = "message"
    data: list[str] = []
    for line in block.split("\n"):
        if line.startswith(":"):  # a comment, a keep-alive
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return Event(name, "\n".join(data)) if data else None
