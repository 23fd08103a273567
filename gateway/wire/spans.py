"""Reading a request body's JSON with the exact text of each value.

A gateway stores a client's messages as the client sent them and, where governance leaves a
message alone, forwards those very bytes: key order, spacing, escapes and fields nobody here
knows all survive. ``json.loads`` keeps none of that, so the body is walked with the standard
decoder's ``raw_decode``, which reports where each value ends.
"""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

_DECODER = json.JSONDecoder()
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
    ``arrays``)."""


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def _value(text: str, at: int, field: str, item: int | None = None) -> tuple[Any, int]:
    """The JSON value at ``at`` and where it ends; a BodyError naming ``field`` (its ``item``
    when it is one of an array's, named only if it is wrong)."""
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
    text: str, at: int = 0, field: str = "", arrays: frozenset[str] = frozenset()
) -> tuple[dict[str, Span], int]:
    """The members of the JSON object starting at ``at`` (after whitespace), each as a span,
    and where the object ends; an array member named in ``arrays`` with its items' spans too,
    read once. A key given twice keeps its last value, as ``json.loads`` does."""
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
            items, end = _items(text, start, name)
            members[key] = Span(text[start:end], start, end, [i.value for i in items], items)
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


def _items(text: str, at: int, field: str) -> tuple[list[Span], int]:
    """The items of the array starting at ``at``, each as a span, and where it ends."""
    items: list[Span] = []
    at = _skip(text, at + 1)
    if text.startswith("]", at):
        return items, at + 1
    while True:
        value, end = _value(text, at, field)
        items.append(Span(text[at:end], at, end, value))
        at = _skip(text, end)
        if text.startswith(",", at):
            at = _skip(text, at + 1)
        elif text.startswith("]", at):
            return items, at + 1
        else:
            raise BodyError(field, f"not valid JSON (',' or ']' expected at character {at})")


def array_spans(span: Span, field: str) -> list[Span]:
    """The items of a JSON array span, each as a span of the same body."""
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
        items.append(Span(text[at:end], span.start + at, span.start + end, value))
        at = _skip(text, end)
        if text[at] == ",":
            at = _skip(text, at + 1)
            continue
        return items  # "]": the whole array was decoded once already


def read_body(body: bytes, arrays: frozenset[str] = frozenset()) -> tuple[str, dict[str, Span]]:
    """The body's text and its top-level members (those named in ``arrays`` read item by item,
    once: a conversation's messages); a BodyError for anything but a JSON object in UTF-8."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyError("", "the body must be JSON in UTF-8") from None
    members, end = object_spans(text, arrays=arrays)
    if _skip(text, end) != len(text):
        raise BodyError("", "not valid JSON (text after the object)")
    return text, members


def splice(text: str, span: Span, replacement: str) -> str:
    """The body with one member's value replaced, every other byte as it was."""
    return text[: span.start] + replacement + text[span.end :]


def replace_items(text: str, span: Span, items: list[str], originals: list[str]) -> str:
    """The body with an array's items replaced by ``items`` (JSON texts); the body as it was,
    spacing between items included, when they are its own ``originals`` in order."""
    if items == originals:
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
