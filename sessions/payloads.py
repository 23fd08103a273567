"""Validating and serialising stored message payloads.

A payload is exactly one pydantic-ai ``ModelMessage`` in the JSON form of
``ModelMessagesTypeAdapter``. Input is validated on the way in; an error names the path of
the bad field (``parts.0.content``) so the caller can fix it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse


@dataclass(frozen=True, slots=True)
class FieldError:
    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.path, "message": self.message}


class InvalidPayload(ValueError):
    """A message payload that is not a valid pydantic-ai message."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{e.path or '(message)'}: {e.message}" for e in errors))


# Location segments pydantic adds for union members rather than for fields: message kinds,
# part kinds ("user-prompt", never an identifier) and branch types ("str", "list[...]").
_NOT_FIELDS = frozenset({"request", "response", "str", "int", "float", "bool", "list", "dict"})
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _path(loc: tuple[int | str, ...]) -> str:
    # The adapter validates a one-item list: every location starts with index 0, dropped here.
    return ".".join(
        str(item)
        for item in loc[1:]
        if isinstance(item, int) or (_FIELD.fullmatch(item) and item not in _NOT_FIELDS)
    )


def _field_errors(exc: ValidationError) -> list[FieldError]:
    """One error per field path; a union's several branch errors are joined."""
    by_path: dict[str, list[str]] = {}
    for error in exc.errors(include_url=False):
        path = _path(tuple(error["loc"]))
        if error["type"] in {"union_tag_invalid", "union_tag_not_found"}:
            # The bad field is the discriminator itself: "kind", or a part's "part_kind".
            discriminator = str(error.get("ctx", {}).get("discriminator", "")).strip("'")
            field = discriminator if _FIELD.fullmatch(discriminator) else "part_kind"
            path = f"{path}.{field}" if path else field
        messages = by_path.setdefault(path, [])
        if error["msg"] not in messages:
            messages.append(error["msg"])
    return [FieldError(path, "; ".join(messages)) for path, messages in by_path.items()]


def parse_payload(data: Any) -> ModelMessage:
    """Validate one message given as JSON text, bytes or already-decoded JSON data. A string
    that is not Unicode text, which no answer could carry back (``bad_text``), is refused with
    the rest."""
    bad = None if isinstance(data, str | bytes) else bad_text(data, storing=False)
    if bad is not None:
        raise InvalidPayload([FieldError(*bad)])
    try:
        if isinstance(data, str | bytes):
            messages = ModelMessagesTypeAdapter.validate_json(b"[" + _as_bytes(data) + b"]")
        else:
            messages = ModelMessagesTypeAdapter.validate_python([data])
    except ValidationError as exc:
        raise InvalidPayload(_field_errors(exc)) from None
    return messages[0]


def _as_bytes(data: str | bytes) -> bytes:
    return data.encode() if isinstance(data, str) else data


def message_to_payload(message: ModelMessage) -> dict[str, Any]:
    """The JSON-ready form of one message, as stored."""
    payload: dict[str, Any] = ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]
    return payload


def storable_payload(message: ModelMessage) -> dict[str, Any]:
    """``message_to_payload``, refusing what a database cannot keep as it is (``bad_text``):
    storing a message altered would lose what was sent."""
    payload = message_to_payload(message)
    bad = bad_text(payload)
    if bad is not None:
        raise InvalidPayload([FieldError(*bad)])
    # A response's reported input tokens are also kept in an integer column beside it.
    if isinstance(message, ModelResponse) and message.usage.input_tokens > MAX_STORED_INT:
        raise InvalidPayload(
            [FieldError("usage.input_tokens", f"is over {MAX_STORED_INT:,}, more than is stored")]
        )
    return payload


MAX_STORED_INT = 2**31 - 1
"""The largest value of the database's integer columns."""


# What no string of a message, a title or a policy may hold: PostgreSQL's text and JSON have no
# NUL character, and a lone surrogate (a JSON "\ud800" escape without its pair) is not Unicode
# text: it can be neither stored nor written back as JSON.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_NOT_TEXT = re.compile("[\ud800-\udfff]")


MAX_DEPTH = 100
"""How deep the JSON of a message (or of a title, a policy) may nest. What is stored is read
back by a JSON parser that stops at 200 levels: a message nested deeper than it can read would
break every page and answer of its session, so it is refused at the edge instead."""


def bad_text(
    data: Any, path: str = "", *, storing: bool = True, depth: int = 0
) -> tuple[str, str] | None:
    """The path of the first string (or key) holding such a character, of the first number that
    is not finite, or of the first value nested deeper than ``MAX_DEPTH`` (``data`` itself at
    ``depth``), and what is wrong; NUL characters only when ``storing``.
    Walked with a stack, not recursion: any depth is answered, not a crash. (A node's path is
    spelled out only when something is wrong there: most payloads have nothing to name.)"""
    pattern = _UNSTORABLE if storing else _NOT_TEXT
    root = _Node(data, None, None, depth)
    pending = [root]
    while pending:
        node = pending.pop()
        value, key = node.value, node.key
        if isinstance(key, str) and (found := pattern.search(key)):
            return node.path(path), _problem(found.group())
        if isinstance(value, str):
            found = pattern.search(value)
            if found is not None:
                return node.path(path), _problem(found.group())
            continue
        if isinstance(value, float) and not math.isfinite(value):
            # A JSON parser may read NaN or Infinity; no JSON can write it back (it becomes null).
            return node.path(path), f"is {value!r}, not a finite number: JSON has no such value"
        if isinstance(value, dict):
            items: Any = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        else:
            continue
        if node.depth >= MAX_DEPTH:
            outer = ".".join(node.path(path).split(".")[:6])  # where it starts: a long chain
            return outer, f"nests deeper than {MAX_DEPTH} levels, more than can be stored"
        # Reversed onto the stack: the first problem in document order is the one named.
        depth = node.depth + 1
        pending.extend(
            reversed([_Node(inner, node, inner_key, depth) for inner_key, inner in items])
        )
    return None


class _Node:
    """A value met in ``bad_text``'s walk, with the way to it."""

    __slots__ = ("depth", "key", "parent", "value")

    def __init__(self, value: Any, parent: _Node | None, key: Any, depth: int) -> None:
        self.value, self.parent, self.key, self.depth = value, parent, key, depth

    def path(self, root: str) -> str:
        keys = []
        node: _Node | None = self
        while node is not None and node.parent is not None:
            keys.append(node.key)
            node = node.parent
        here = root
        for key in reversed(keys):
            here = f"{here}.{key}".lstrip(".")
        return here


def _problem(character: str) -> str:
    if character == "\x00":
        return "contains a NUL character (\\u0000), which cannot be stored"
    return f"contains a lone surrogate (\\u{ord(character):04x}), which is not Unicode text"


def no_constant(name: str) -> Any:
    """Python's JSON parser reads ``NaN``, ``Infinity`` and ``-Infinity``; JSON has no such
    values, and none can be written back (they become null). Given as ``parse_constant``, it
    refuses them as the parser refuses any other text that is not JSON."""
    raise ValueError(f"{name} is not a JSON value")


def message_from_payload(payload: dict[str, Any]) -> ModelMessage:
    """A stored payload back as a message (already validated when it was stored)."""
    return ModelMessagesTypeAdapter.validate_python([payload])[0]


def content_hash(payload: dict[str, Any]) -> str:
    """A stable hash of a payload, independent of key order."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()
