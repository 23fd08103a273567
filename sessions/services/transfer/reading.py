"""Reading an export: every line parsed and validated before anything is written, a bad one
named by its line and field."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn

from django.conf import settings
from pydantic import ValidationError
from pydantic_ai.messages import (
    ModelMessage,
)

from ctxhub.governance import Policy
from ctxhub.governance.tokens import context_window
from sessions.models import Compaction, MessageSource
from sessions.payloads import (
    InvalidPayload,
    bad_text,
    parse_payload,
    storable_payload,
)
from sessions.services.errors import Invalid
from sessions.services.governed import EVICTED_REF, no_room
from sessions.services.tools import tool_fields
from sessions.services.transfer.format import (
    FORMAT_VERSION,
    HEADER_KEY,
    MAX_INT,
    MAX_TOOLS,
    REFERENCES,
    BadExport,
)

MESSAGE_DEPTH_IN_LINE = 3
"""How deep a line holds the deepest message it carries (a compaction's
``replacement[i].message``)."""


@dataclass
class _Record:
    """A validated record line: its fields, and the line it was read from."""

    line: int
    fields: dict[str, Any]


@dataclass
class ParsedExport:
    """Everything a file holds, validated: nothing is written until all of it is."""

    session: dict[str, Any]
    messages: list[tuple[str, ModelMessage]] = field(default_factory=list)
    compactions: list[_Record] = field(default_factory=list)
    clears: list[_Record] = field(default_factory=list)
    pins: list[_Record] = field(default_factory=list)
    evicted: list[_Record] = field(default_factory=list)
    audit: list[_Record] = field(default_factory=list)


def _not_finite(text: str) -> NoReturn:
    raise ValueError(f"the number {text} is not a finite number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _not_finite(text)
    return value


def _decode(number: int, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text, parse_constant=_not_finite, parse_float=_finite)
    except RecursionError:
        raise BadExport(number, "", "nests deeper than a JSON parser goes") from None
    except ValueError as exc:  # not JSON; a number too long or not finite
        raise BadExport(number, "", f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadExport(number, "", f"a JSON object is expected, not {_json_type(value)}")
    # A message is measured from its own root when it is read (``parse_payload``): the line
    # around it does not count against its depth.
    bad = bad_text(value, depth=-MESSAGE_DEPTH_IN_LINE)
    if bad is not None:
        raise BadExport(number, _bracketed(bad[0]), bad[1])
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _bracketed(dotted: str) -> str:
    """``message.parts.0.content`` → ``message.parts[0].content``."""
    return re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", dotted)


class _Reader:
    """The fields of one line, read with their types checked; a bad one names itself."""

    def __init__(
        self, number: int, data: dict[str, Any], allowed: frozenset[str], prefix: str = ""
    ) -> None:
        self.number = number
        self.data = data
        self.prefix = prefix  # where the fields are in the line: "session." for the header's
        unknown = sorted(set(data) - allowed - {"type"})
        if unknown:
            self.fail(unknown[0], "not a field of this line")

    def fail(self, name: str, problem: str) -> NoReturn:
        raise BadExport(self.number, self.prefix + name, problem)

    def value(self, name: str, kinds: tuple[type, ...], what: str, *, optional: bool) -> Any:
        if name not in self.data:
            if optional:
                return None
            self.fail(name, "missing")
        value = self.data[name]
        if value is None and optional:
            return None
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            self.fail(name, f"{what} is expected, not {_json_type(value)}")
        return value

    def integer(
        self, name: str, *, low: int = 0, high: int = MAX_INT, optional: bool = False
    ) -> int | None:
        value = self.value(name, (int,), "a whole number", optional=optional)
        if value is not None and not low <= value <= high:
            self.fail(name, f"{value} is not between {low} and {high}")
        return value  # type: ignore[no-any-return]

    def count(self, name: str) -> int:
        value = self.integer(name)
        assert value is not None
        return value

    def text(self, name: str, *, limit: int | None = None, required: bool = False) -> str:
        value = self.value(name, (str,), "a string", optional=not required)
        value = value or ""
        if required and not value:
            self.fail(name, "may not be empty")
        if limit is not None and len(value) > limit:
            self.fail(name, f"is over {limit:,} characters")
        return str(value)

    def time(self, name: str) -> datetime | None:
        value = self.value(name, (str,), "a date and time (ISO 8601)", optional=True)
        if value is None:
            return None
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            self.fail(name, f"{value!r} is not a date and time (ISO 8601)")
        if when.tzinfo is None:
            self.fail(name, "a date and time with its time zone is expected")
        try:
            return when.astimezone(UTC)  # as stored; a time at the calendar's edge overflows
        except OverflowError:
            self.fail(name, f"{value!r} is out of range")

    def mapping(self, name: str) -> dict[str, Any]:
        return self.value(name, (dict,), "an object", optional=False)  # type: ignore[no-any-return]

    def array(self, name: str) -> list[Any]:
        return self.value(name, (list,), "an array", optional=False)  # type: ignore[no-any-return]

    def message(self, name: str, given: Any) -> ModelMessage:
        """A pydantic-ai message, validated as the API validates one."""
        if not isinstance(given, dict):
            self.fail(name, f"a message object is expected, not {_json_type(given)}")
        try:
            message = _valid_message(given)
        except InvalidPayload as exc:
            first = exc.errors[0]
            self.fail(_bracketed(f"{name}.{first.path}" if first.path else name), first.message)
        return message

    def seq(self, name: str, last: int, *, upto: int | None = None) -> int:
        """A seq of a message in the file (``upto``: or up to that, for a clear's start)."""
        value = self.integer(name)
        assert value is not None
        if value > (last if upto is None else upto):
            self.fail(name, f"no message #{value} in this file (its last is #{last})")
        return value


def _valid_message(data: dict[str, Any]) -> ModelMessage:
    message = parse_payload(data)
    storable_payload(message)  # refused here, not halfway through the write
    return message


_UNDOABLE = frozenset({"actor", "created_at", "undone_at"})
_FIELDS = {
    "message": frozenset({"seq", "source", "created_at", "message"}),
    "compaction": _UNDOABLE | set(Compaction.CONTENT_FIELDS) | {"supersedes"},
    "clear": _UNDOABLE | {"from_seq"},
    "pin": _UNDOABLE | {"seq"},
    "evicted_output": frozenset({"ref", "text", "created_at"}),
    "audit_event": frozenset(
        {"verb", "actor", "tokens_before", "tokens_after", "data", "created_at"}
    ),
}
_SESSION_FIELDS = frozenset(
    {"title", "model", "context_window", "policy", "summarizer", "chat_model", "tool_definitions"}
)


def parse_export(text: str) -> ParsedExport:
    """Read and validate a whole export; BadExport names the first bad line and field."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if len(text.encode("utf-8", "surrogatepass")) > limit:
        raise Invalid(f"the file is over the {limit:,}-byte limit; nothing stored", field="file")
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise BadExport(1, "", "the file is empty; a ctxhub export starts with its header line")
    number, first = lines[0]
    parsed = ParsedExport(session=_header(number, _decode(number, first)))
    readers: dict[str, Callable[[ParsedExport, _Reader], None]] = {
        "message": _message,
        "compaction": _compaction,
        "clear": _clear,
        "pin": _pin,
        "evicted_output": _evicted,
        "audit_event": _audit,
    }
    records_began = False
    for number, raw in lines[1:]:
        data = _decode(number, raw)
        kind = data.get("type")
        if kind not in readers:
            known = ", ".join(readers)
            raise BadExport(number, "type", f"{kind!r} is not a line type ({known})")
        if kind == "message" and records_began:
            raise BadExport(number, "type", "a message after the records: messages come first")
        records_began = records_began or kind != "message"
        readers[kind](parsed, _Reader(number, data, _FIELDS[kind]))
    _check_references(parsed)
    return parsed


def _header(number: int, data: dict[str, Any]) -> dict[str, Any]:
    version = data.get(HEADER_KEY)
    if version is None:
        raise BadExport(number, HEADER_KEY, "missing: this is not a ctxhub export header")
    if version != FORMAT_VERSION:
        raise BadExport(
            number,
            HEADER_KEY,
            f"version {version!r} is not one this hub reads (it reads {FORMAT_VERSION})",
        )
    top = _Reader(number, data, frozenset({HEADER_KEY, "session"}))
    session = _Reader(number, top.mapping("session"), _SESSION_FIELDS, "session.")
    model = session.text("model", limit=200, required=True)
    window = session.integer("context_window", low=1_000, high=10_000_000, optional=True)
    overrides = session.mapping("policy")
    try:
        policy = Policy.model_validate(overrides)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        session.fail(_bracketed(f"policy.{where}" if where else "policy"), error["msg"])
    # The window it is governed against, as ``session_window`` reads it.
    own = overrides.get("context_window")
    governed = own if isinstance(own, int) and own > 0 else window or context_window(model)
    reason = no_room(policy, governed)
    if reason is not None:
        session.fail("policy", reason)
    return {
        "title": session.text("title", limit=200, required=True),
        "model": model,
        "context_window": window,
        "policy": overrides,  # as it was, validated: its hub may keep a default spelled out
        "summarizer": session.text("summarizer", limit=200),
        "chat_model": session.text("chat_model", limit=200),
        **tool_fields(_tools(session, session.array("tool_definitions")), model),
    }


def _tools(session: _Reader, items: list[Any]) -> list[dict[str, Any]]:
    if len(items) > MAX_TOOLS:
        session.fail("tool_definitions", f"more than {MAX_TOOLS} tools")
    names: set[str] = set()
    tools = []
    for index, item in enumerate(items):
        where = f"tool_definitions[{index}]"
        if not isinstance(item, dict):
            session.fail(where, f"an object is expected, not {_json_type(item)}")
        where = f"{session.prefix}{where}"
        tool = _Reader(
            session.number, item, frozenset({"name", "description", "parameters"}), f"{where}."
        )
        name = tool.text("name", limit=200, required=True)
        if name in names:
            tool.fail("name", f"a second tool named {name!r}")
        names.add(name)
        description = tool.value("description", (str,), "a string", optional=True)
        tools.append(
            {"name": name, "description": description, "parameters": tool.mapping("parameters")}
        )
    return tools


def _message(parsed: ParsedExport, line: _Reader) -> None:
    seq = line.count("seq")
    if seq != len(parsed.messages):
        line.fail("seq", f"#{seq} out of order: the next message is #{len(parsed.messages)}")
    source = line.text("source", required=True)
    if source not in MessageSource.values:
        line.fail("source", f"{source!r} is not one of {', '.join(MessageSource.values)}")
    line.time("created_at")
    parsed.messages.append((source, line.message("message", line.data.get("message"))))


def _last_seq(parsed: ParsedExport, line: _Reader) -> int:
    if not parsed.messages:
        line.fail("type", "a record in a file without messages")
    return len(parsed.messages) - 1


def _undo_fields(line: _Reader) -> dict[str, Any]:
    # The people of another hub are not this one's: who acted is kept by name.
    actor = line.text("actor", limit=Compaction._meta.get_field("actor_name").max_length)
    created, undone = line.time("created_at"), line.time("undone_at")
    if created is not None and undone is not None and undone < created:
        line.fail("undone_at", "before created_at")
    return {"actor_name": actor, "created_at": created, "undone_at": undone}


def _compaction(parsed: ParsedExport, line: _Reader) -> None:
    last = _last_seq(parsed, line)
    first_seq, last_seq = line.seq("first_seq", last), line.seq("last_seq", last)
    if first_seq > last_seq:
        line.fail("last_seq", f"#{last_seq} is before first_seq #{first_seq}")
    replacement: list[Any] = []  # a seq kept, or a message the compaction wrote
    for index, item in enumerate(line.array("replacement")):
        where = f"replacement[{index}]"
        if not isinstance(item, dict) or len(item) != 1 or not {"seq", "message"} & set(item):
            line.fail(where, 'an object {"seq": n} or {"message": {...}} is expected')
        if "seq" in item:
            seq = item["seq"]
            if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq <= MAX_INT:
                line.fail(f"{where}.seq", "a whole number is expected")
            if not first_seq <= seq <= last_seq:
                line.fail(f"{where}.seq", f"#{seq} is outside #{first_seq}..#{last_seq}")
            replacement.append(seq)
        else:
            replacement.append({"message": line.message(f"{where}.message", item["message"])})
    summarized = line.array("summarized_seqs")
    for index, seq in enumerate(summarized):
        if not isinstance(seq, int) or isinstance(seq, bool) or not first_seq <= seq <= last_seq:
            line.fail(f"summarized_seqs[{index}]", f"not a seq in #{first_seq}..#{last_seq}")
    supersedes = line.integer("supersedes", optional=True)
    if supersedes is not None and supersedes >= len(parsed.compactions):
        line.fail("supersedes", f"no earlier compaction {supersedes} in this file")
    summary_message = line.message("summary_message", line.data.get("summary_message"))
    parsed.compactions.append(
        _Record(
            line.number,
            {
                "first_seq": first_seq,
                "last_seq": last_seq,
                "replacement": replacement,
                "summary": line.text("summary"),
                "summary_message": summary_message,
                "ledger": line.array("ledger"),
                "outcome": line.text("outcome", limit=16, required=True),
                "error": line.text("error"),
                "summarizer": line.text("summarizer", limit=200),
                "policy": line.mapping("policy"),
                "focus": line.text("focus"),
                "summarized_seqs": summarized,
                "tokens_before": line.count("tokens_before"),
                "tokens_after": line.count("tokens_after"),
                "messages_before": line.count("messages_before"),
                "messages_after": line.count("messages_after"),
                "supersedes": supersedes,
                "started_at": line.time("started_at"),
                "finished_at": line.time("finished_at"),
                "trigger": _trigger(line),
                "usage": line.value("usage", (dict,), "an object", optional=True) or {},
                **_undo_fields(line),
            },
        )
    )


def _trigger(line: _Reader) -> str:
    """How an agent started its own compaction (an export written before there was one: none)."""
    trigger = line.text("trigger", limit=8)
    if trigger not in ("", "manual", "auto"):
        line.fail("trigger", f"{trigger!r} is not manual or auto")
    return trigger


def _clear(parsed: ParsedExport, line: _Reader) -> None:
    last = _last_seq(parsed, line)
    from_seq = line.seq("from_seq", last, upto=last + 1)
    if from_seq == 0:
        line.fail("from_seq", "a clear starts after at least one message")
    parsed.clears.append(_Record(line.number, {"from_seq": from_seq, **_undo_fields(line)}))


def _pin(parsed: ParsedExport, line: _Reader) -> None:
    seq = line.seq("seq", _last_seq(parsed, line))
    fields = {"seq": seq, **_undo_fields(line)}
    if fields["undone_at"] is None and any(
        p.fields["seq"] == seq and p.fields["undone_at"] is None for p in parsed.pins
    ):
        line.fail("seq", f"message #{seq} is pinned twice (an active pin per message)")
    parsed.pins.append(_Record(line.number, fields))


def _evicted(parsed: ParsedExport, line: _Reader) -> None:
    ref = line.text("ref", limit=64, required=True)
    if not EVICTED_REF.fullmatch(ref):
        line.fail("ref", f"{ref[:80]!r} is not an evicted output reference (ev_ and hex)")
    if any(e.fields["ref"] == ref for e in parsed.evicted):
        line.fail("ref", f"a second output under {ref}")
    fields = {"ref": ref, "text": line.text("text"), "created_at": line.time("created_at")}
    parsed.evicted.append(_Record(line.number, fields))


def _audit(parsed: ParsedExport, line: _Reader) -> None:
    line.text("actor")
    fields = {
        "verb": line.text("verb", limit=64, required=True),
        "tokens_before": line.integer("tokens_before", optional=True),
        "tokens_after": line.integer("tokens_after", optional=True),
        "data": line.mapping("data"),
        "created_at": line.time("created_at"),
    }
    parsed.audit.append(_Record(line.number, fields))


def _check_references(parsed: ParsedExport) -> None:
    """An audit event's records (named by ordinal) are in the file: checked once all are read,
    since the records of each type follow those of the types before."""
    counts = {
        "compaction": len(parsed.compactions),
        "clear": len(parsed.clears),
        "pin": len(parsed.pins),
    }
    for event in parsed.audit:
        for kind in REFERENCES:
            value = event.fields["data"].get(kind)
            if value is None or isinstance(value, bool) or not isinstance(value, int):
                continue
            if not 0 <= value < counts[kind]:
                raise BadExport(event.line, f"data.{kind}", f"no {kind} {value} in this file")
