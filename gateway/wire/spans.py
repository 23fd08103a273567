"""Reading a request body's JSON with the exact text of each value.

A gateway stores a client's messages as the client sent them and, where governance leaves a
message alone, forwards those very bytes: key order, spacing, escapes and fields nobody here
knows all survive. ``json.loads`` keeps none of that, so the body is walked with the standard
decoder's ``raw_decode``, which reports where each value ends.

A client resends its whole conversation with every request, so the messages array of one
request opens with the array of the one before. A process remembers the arrays it read lately
(``remember``): reading an array that opens with one of them, character for character, takes
its items as they were read then and decodes only what follows, so a request costs what it
adds, not what the conversation holds.
"""

from __future__ import annotations

import gc
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from itertools import zip_longest
from typing import Any, NamedTuple

from sessions.payloads import no_constant

_DECODER = json.JSONDecoder(parse_constant=no_constant)
_WHITESPACE = " \t\n\r"


class BodyError(ValueError):
    """A body that is not the JSON a wire format expects, naming the field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class Span(NamedTuple):
    """One JSON value: its text as written, where it sits in the body, and its parsed value.
    (A named tuple: a conversation makes tens of thousands, and a frozen dataclass takes
    several times as long to make.)"""

    text: str
    start: int
    end: int
    value: Any
    items: list[Span] | None = None
    """An array's items, each as a span, when it was read item by item (``read_body``'s
    ``arrays``). An item's ``start`` and ``end`` are within the array's text."""
    known: Known | None = None
    """The array this process read before that this one opens with (``remember``): its items
    are this one's first."""


class Known(NamedTuple):
    """An array a process read, remembered with what its reader made of each item."""

    reader: str
    """Who read it (a wire format): the same item reads differently in another format."""
    text: str
    """The array's text from its ``[`` through its last item."""
    items: list[Span]
    made: list[Any]
    """What the reader made of each item, in order."""
    state: dict[str, Any]
    """What the reader knew after the last item (a copy: its own to keep)."""


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


class TooMuchToRead(Exception):
    """More of a body is to be decoded than ``reading_at_most`` allows."""


_BUDGET: ContextVar[list[int] | None] = ContextVar("gateway_read_budget", default=None)


@contextmanager
def reading_at_most(characters: int) -> Iterator[None]:
    """Within it, reading a body that decodes more than ``characters`` of its JSON raises
    TooMuchToRead, early: an event loop reads a body itself when little of it is new to the
    process (the rest is remembered, compared, not decoded), and hands it to a thread
    otherwise."""
    token = _BUDGET.set([characters])
    try:
        yield
    finally:
        _BUDGET.reset(token)


def _value(text: str, at: int, field: str, item: int | None = None) -> tuple[Any, int]:
    """The JSON value at ``at`` and where it ends; a BodyError naming ``field`` (its ``item``
    when it is one of an array's, named only if it is wrong)."""
    budget = _BUDGET.get()
    if budget is not None:
        decoded = _decoded(text, at, field, item)
        budget[0] -= decoded[1] - at
        if budget[0] < 0:
            raise TooMuchToRead
        return decoded
    return _decoded(text, at, field, item)


def _decoded(text: str, at: int, field: str, item: int | None) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, at)
    except json.JSONDecodeError as exc:
        raise BodyError(
            _named(field, item), f"not valid JSON ({exc.msg} at character {exc.pos})"
        ) from None
    except RecursionError:
        raise BodyError(_named(field, item), "nested too deeply") from None
    except ValueError as exc:  # a number past the interpreter's digit limit, say
        raise BodyError(_named(field, item), f"not valid JSON ({exc})") from None


def _named(field: str, item: int | None) -> str:
    return field if item is None else f"{field}[{item}]"


def object_spans(
    text: str,
    at: int = 0,
    field: str = "",
    arrays: frozenset[str] = frozenset(),
    reader: str = "",
) -> tuple[dict[str, Span], int]:
    """The members of the JSON object starting at ``at`` (after whitespace), each as a span,
    and where the object ends; an array member named in ``arrays`` with its items' spans too,
    read once (those of an array ``reader`` remembered, taken from its memory). A key given
    twice keeps its last value, as ``json.loads`` does."""
    at = _skip(text, at)
    if at >= len(text) or text[at] != "{":
        raise BodyError(field, "must be a JSON object")
    members: dict[str, Span] = {}
    at = _skip(text, at + 1)
    if at < len(text) and text[at] == "}":
        return members, at + 1
    while True:
        if at >= len(text) or text[at] != '"':
            raise BodyError(field, f"not valid JSON (a key expected at character {at})")
        key, at = _value(text, at, field)
        at = _skip(text, at)
        if at >= len(text) or text[at] != ":":
            raise BodyError(field, f"not valid JSON (':' expected at character {at})")
        start = _skip(text, at + 1)
        name = f"{field}.{key}" if field else key
        if key in arrays and text.startswith("[", start):
            items, known, end = _items(text, start, name, reader)
            values = [item.value for item in items]
            members[key] = Span(text[start:end], start, end, values, items, known)
        else:
            value, end = _value(text, start, name)
            members[key] = Span(text[start:end], start, end, value)
        at = _skip(text, end)
        if at < len(text) and text[at] == ",":
            at = _skip(text, at + 1)
            continue
        if at < len(text) and text[at] == "}":
            return members, at + 1
        raise BodyError(field, f"not valid JSON (',' or '}}' expected at character {at})")


def _items(text: str, start: int, field: str, reader: str) -> tuple[list[Span], Known | None, int]:
    """The items of the array starting at ``start``, each as a span, the array ``reader``
    remembered that it opens with (whose items are its first, not decoded again), and where
    it ends."""
    items: list[Span] = []
    at = _skip(text, start + 1)
    if text.startswith("]", at):
        return items, None, at + 1
    value, end = _value(text, at, field, 0)
    known = _MEMORY.opening(text, start, (reader, text[at:end])) if reader else None
    if known is None:
        items.append(Span(text[at:end], at - start, end - start, value))
    else:
        items.extend(known.items)
        end = start + len(known.text)
    while True:
        at = _skip(text, end)
        if text.startswith(",", at):
            at = _skip(text, at + 1)
        elif text.startswith("]", at):
            return items, known, at + 1
        else:
            raise BodyError(field, f"not valid JSON (',' or ']' expected at character {at})")
        value, end = _value(text, at, field, len(items))
        items.append(Span(text[at:end], at - start, end - start, value))


def array_spans(span: Span, field: str) -> list[Span]:
    """The items of a JSON array span, each as a span within the array's text."""
    if not isinstance(span.value, list):
        raise BodyError(field, "must be an array")
    if span.items is not None:
        return span.items
    text = span.text
    items: list[Span] = []
    at = _skip(text, 1)
    if text[at] == "]":
        return items
    while True:
        value, end = _value(text, at, field, len(items))
        items.append(Span(text[at:end], at, end, value))
        at = _skip(text, end)
        if text[at] == ",":
            at = _skip(text, at + 1)
            continue
        return items  # "]": the whole array was decoded once already


def read_body(
    body: bytes, arrays: frozenset[str] = frozenset(), reader: str = ""
) -> tuple[str, dict[str, Span]]:
    """The body's text and its top-level members (those named in ``arrays`` read item by item,
    once: a conversation's messages, opening with what ``reader`` remembered); a BodyError for
    anything but a JSON object in UTF-8."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyError("", "the body must be JSON in UTF-8") from None
    members, end = object_spans(text, arrays=arrays, reader=reader)
    if _skip(text, end) != len(text):
        raise BodyError("", "not valid JSON (text after the object)")
    return text, members


class _Memory:
    """The arrays a process read lately, by their first item's text; the newest ``ARRAYS`` of
    them, ``characters`` of text at most (``CHARACTERS`` unless set: ``remember_at_most``)."""

    ARRAYS = 512
    CHARACTERS = 64 * 2**20

    def __init__(self) -> None:
        self.characters = self.CHARACTERS
        self._arrays: OrderedDict[tuple[str, str], list[Known]] = OrderedDict()
        self._count = 0
        self._characters = 0
        self._lock = threading.Lock()

    def opening(self, text: str, start: int, first: tuple[str, str]) -> Known | None:
        """The longest remembered array ``text`` holds at ``start``, whole items of it."""
        best: Known | None = None
        with self._lock:
            for known in self._arrays.get(first, ()):
                if (best is None or len(known.text) > len(best.text)) and _opens(
                    text, start, known.text
                ):
                    best = known
        return best

    def keep(self, known: Known, replacing: Known | None) -> None:
        first = (known.reader, known.items[0].text)
        with self._lock:
            same = self._arrays.pop(first, [])
            if replacing is not None and replacing in same:  # the conversation moved on
                same.remove(replacing)
                self._forget(replacing)
            same.append(known)
            self._arrays[first] = same
            self._count += 1
            self._characters += len(known.text)
            self._evict()

    def keep_within(self) -> None:
        with self._lock:
            self._evict()

    def _evict(self) -> None:
        while self._arrays and (self._count > self.ARRAYS or self._characters > self.characters):
            oldest = next(iter(self._arrays))
            for gone in self._arrays.pop(oldest):
                self._forget(gone)

    def _forget(self, known: Known) -> None:
        self._count -= 1
        self._characters -= len(known.text)

    def clear(self) -> None:
        with self._lock:
            self._arrays.clear()
            self._count = self._characters = 0


def _opens(text: str, start: int, known: str) -> bool:
    """Whether the array at ``start`` opens with the whole items of ``known`` (an item that
    goes on, ``[1`` in ``[12]``, does not count)."""
    if not text.startswith(known, start):
        return False
    after = _skip(text, start + len(known))
    return text.startswith((",", "]"), after)


_MEMORY = _Memory()


def remember(reader: str, span: Span, made: list[Any], state: dict[str, Any]) -> None:
    """Keeps an array ``reader`` read item by item (``read_body``'s ``arrays``) with what it
    made of the items and what it knew after them, for its next body that opens with it."""
    items = span.items
    if not items or len(made) != len(items):
        return
    known = Known(reader, span.text[: items[-1].end], items, list(made), dict(state))
    _MEMORY.keep(known, span.known)


def remember_at_most(characters: int) -> None:
    """Bound what the process remembers to ``characters`` of text (0: nothing)."""
    _MEMORY.characters = characters
    _MEMORY.keep_within()


def forget_all() -> None:
    """Every remembered array forgotten (a test that reads the same body afresh)."""
    _MEMORY.clear()


def splice(text: str, span: Span, replacement: str) -> str:
    """The body with one member's value replaced, every other byte as it was."""
    return text[: span.start] + replacement + text[span.end :]


def replace_items(text: str, span: Span, items: list[str], originals: Iterable[str]) -> str:
    """The body with an array's items replaced by ``items`` (JSON texts); the body as it was,
    spacing between items included, when they are its own ``originals`` in order (compared up
    to the first that differs: a governed request of a long conversation starts far into it)."""
    if all(item == original for item, original in zip_longest(items, originals)):
        return text
    return splice(text, span, "[" + ",".join(items) + "]")


_pauses = 0
_pauses_lock = threading.Lock()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while a long body is read: the tens of
    thousands of containers a conversation parses into would otherwise start collection after
    collection, each walking all of them (a 20,000-message body reads four times faster). The
    collector resumes when the last reader in the process is done; what is read holds no
    cycles, so nothing waits to be collected meanwhile."""
    global _pauses
    with _pauses_lock:
        _pauses += 1
        gc.disable()
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses -= 1
            if _pauses == 0:
                gc.enable()


def required_string(members: dict[str, Span], name: str) -> str:
    """A top-level member that must be a non-empty string (a request's ``model``)."""
    span = members.get(name)
    if span is None:
        raise BodyError(name, "required")
    if not isinstance(span.value, str) or not span.value:
        raise BodyError(name, "must be a non-empty string")
    return span.value


def optional_list(members: dict[str, Span], name: str) -> list[Any]:
    """A top-level member that may be absent or null, else an array (a request's ``tools``)."""
    span = members.get(name)
    if span is None or span.value is None:
        return []
    if not isinstance(span.value, list):
        raise BodyError(name, "must be an array")
    return span.value
