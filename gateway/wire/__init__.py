"""The providers' wire formats: one module each, all with the same face.

A request body is read into ``WireRequest``: each message as the client wrote it (its exact
JSON text, the stored truth) beside pydantic-ai's view of it (what governance plans on), with
the tool definitions and the stream flag. A governed request is written back into the client's
body by replacing only the messages' array, each message either as the client sent it or, where
governance changed it, rewritten from its view. A response is read, whole or as its stream
of server-sent events, into the message stored after the request.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse

from gateway.wire.spans import BodyError, Span, array_spans, remember

__all__ = [
    "BodyError",
    "StoredResponse",
    "WireMessage",
    "WireRequest",
    "one_message",
    "read_messages",
    "storable",
    "storable_text",
]

# A NUL or half a surrogate pair is valid JSON (as an escape) that no database stores as text
# and no UTF-8 encodes. The client's raw text keeps the escape; what is read from it is cleaned.
_UNSTORABLE_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(raw: str, value: Any) -> Any:
    """A message's parsed ``value`` with each NUL and lone surrogate made U+FFFD, so its view
    can be stored and a governed rewrite of it encoded; the raw text (the escape) is left as
    the client wrote it. Cheap for the usual message: its raw text is searched, not walked."""
    if not _UNSTORABLE_ESCAPE.search(raw):
        return value
    return _cleaned(value)


def storable_text(text: str) -> str:
    """``text`` with each NUL and lone surrogate made U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text)


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, list):
        return [_cleaned(item) for item in value]
    if isinstance(value, dict):
        return {_cleaned(key): _cleaned(item) for key, item in value.items()}
    return value


class WireMessage:
    """One message of a request: the client's JSON text, its parsed value, pydantic-ai's view.

    The view may be given as how to build it (``build``): a client resends its whole
    conversation each time, and only the messages new to the session, or rewritten by
    governance, are ever looked at as views."""

    __slots__ = ("_build", "_view", "chained", "raw", "value")

    def __init__(
        self,
        raw: str,
        value: Any,
        view: ModelMessage | None = None,
        *,
        build: Callable[[], ModelMessage] | None = None,
    ) -> None:
        assert (view is None) != (build is None), "a view, or how to build it"
        self.raw = raw
        self.value = value
        self._view = view
        self._build = build
        self.chained: tuple[str, str] | None = None
        """The chain hash before this message and its own, once worked out
        (``gateway.chain.hashes``): the same message in the client's next request, read from
        the process's memory, is not hashed again."""

    @property
    def view(self) -> ModelMessage:
        if self._view is None:
            assert self._build is not None
            self._view, self._build = self._build(), None
        return self._view

    def __repr__(self) -> str:
        return f"WireMessage({self.raw[:60]!r})"


type ReadItem = Callable[[Span, str, dict[str, str]], WireMessage]
"""How a wire format reads one item of its messages array: its span, its field name (for a
BodyError) and the tool names by call id seen so far, which it extends."""


def read_messages(wire: str, span: Span, field: str, read: ReadItem) -> list[WireMessage]:
    """The messages of a request's array ``span`` (read item by item, with ``wire`` as its
    reader), each read by ``read``. The items this process read in the conversation's previous
    request are taken as they were read then; the array is remembered for the next."""
    known = span.known
    messages = list(known.made) if known is not None else []
    names: dict[str, str] = dict(known.state) if known is not None else {}
    items = array_spans(span, field)
    for index in range(len(messages), len(items)):
        messages.append(read(items[index], f"{field}[{index}]", names))
    remember(wire, span, messages, names)
    return messages


@dataclass(frozen=True, slots=True)
class WireRequest:
    """A client's request body, read."""

    wire: str
    text: str
    members: dict[str, Span]
    messages: list[WireMessage]
    tools: list[dict[str, Any]]
    """The tool definitions as ``{"name", "description", "parameters"}``."""
    model: str
    stream: bool
    client_session: str | None = None
    """The client's own marker of its session (Claude Code's ``metadata.user_id``)."""
    title: str = ""
    """The first prompt's opening words, for a new session's title."""


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A response as it is stored: the message's JSON text as the client will send it back
    (the provider's own fields), and pydantic-ai's view with the usage the provider reported."""

    raw: str
    value: Any
    view: ModelResponse
    extra: dict[str, Any] = field(default_factory=dict)


def one_message(stored: StoredResponse) -> list[WireMessage]:
    """A response stored as one message (``response_items`` of a format whose answer is one
    message, as Anthropic's and Chat Completions' are; a Responses answer is several items)."""
    return [WireMessage(stored.raw, stored.value, stored.view)]
