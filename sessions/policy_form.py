"""The policy editor: every knob of ``Policy`` as a form field, read back into overrides.

The fields are derived from the pydantic model itself (nested models become groups, literals
become choices, booleans yes/no, tuples and thresholds JSON, floats bounded by 1 percentages),
so a knob added to the engine appears here with its default and description, and is validated
by the engine's own rules. What the engine does not say (a knob's label, a group's heading, an
example for a JSON knob) is written here; a knob without a label is named after its field.
A session stores only the knobs that differ from the defaults.

Percentages exist only at the form's edge: the form shows ``90 %`` and reads ``90 %`` (or the
engine's fraction, ``0.9``) back as ``0.9``, which is what is stored.
"""

from __future__ import annotations

import json
import re
import types
import typing
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, Union

from annotated_types import Le, Lt
from pydantic import BaseModel, ValidationError

from ctxhub.governance import Policy
from sessions.services.governed import no_room

Kind = Literal["bool", "int", "float", "percent", "text", "choice", "json"]

# What a submitted value may be: longer is refused before it is parsed (a JSON knob nested a
# thousand deep would exhaust the parser's recursion).
MAX_LENGTH = 10_000


@dataclass(frozen=True, slots=True)
class Label:
    """What a person reads for a knob: a label, the unit after its value, and for a JSON knob
    an example (shown as the placeholder) and a line on its shape."""

    text: str
    unit: str = ""
    example: str = ""
    shape: str = ""


_FRACTION = "a number of messages or tokens, or a fraction of the context window"
_THRESHOLD_SHAPE = (
    '{"kind": "messages" | "tokens" | "fraction", "value": N}: ' + _FRACTION + " (0.7 is 70 %)"
)

LABELS: dict[str, Label] = {
    "context_window": Label("Context window (override)", "tokens"),
    "reserved_output_tokens": Label("Room kept for the answer", "tokens"),
    "safety_margin": Label("Safety margin", "of the context window"),
    "history_cap_tokens": Label("Cap on the history", "tokens"),
    "dangling_call_text": Label("Result given to an unanswered tool call"),
    "tool_output.limit": Label("Cut tool outputs longer than", "tokens or characters"),
    "tool_output.unit": Label("Measure the limit in"),
    "tool_output.strategy": Label("Part of a cut output kept"),
    "tool_output.scope": Label("Cut outputs in"),
    "tool_output.line_count": Label("Say how many lines a cut output had"),
    "text.limit": Label("Cut messages longer than", "tokens or characters"),
    "text.unit": Label("Measure the limit in"),
    "text.strategy": Label("Part of a cut message kept"),
    "text.scope": Label("Cut messages in"),
    "text.line_count": Label("Say how many lines a cut message had"),
    "eviction.threshold_tokens": Label("Evict outputs larger than", "tokens"),
    "eviction.preview_lines": Label("Lines in the preview", "lines"),
    "eviction.preview_chars": Label("Characters in the preview", "characters"),
    "eviction.scope": Label("Evict outputs in"),
    "eviction.tool_name": Label("Tool that reads an evicted output back"),
    "masking.keep_first": Label("Keep the first N tool results", "results"),
    "masking.keep_last": Label("Keep the last N tool results", "results"),
    "masking.apply": Label("When to mask"),
    "masking.inputs": Label("Also mask the masked calls' long arguments"),
    "dedupe.enabled": Label("Replace older copies of repeated reads"),
    "dedupe.min_tokens": Label("Leave outputs this small alone", "tokens"),
    "dedupe.keys": Label(
        "Reads that supersede each other",
        example='{"read_file": ["path"]}',
        shape='{"tool": ["argument", …]}: a tool and the arguments naming what it reads',
    ),
    "window.enabled": Label("Use the sliding window"),
    "window.triggers": Label(
        "Also window when",
        example='[{"kind": "fraction", "value": 0.7}, {"kind": "messages", "value": 200}]',
        shape="A list of " + _THRESHOLD_SHAPE + "; [] windows only over budget",
    ),
    "window.keep": Label(
        "Recent history kept",
        example='{"kind": "tokens", "value": 20000}',
        shape=_THRESHOLD_SHAPE,
    ),
    "window.keep_head": Label("Keep the start of the session"),
    "window.head": Label(
        "Size of the start kept",
        example='{"kind": "messages", "value": 4}',
        shape='{"kind": "messages" | "tokens", "value": N}',
    ),
    "window.protected_tools": Label(
        "Tools never dropped",
        example='["manage_todo_list"]',
        shape='A list of tool names: ["name", …]',
    ),
    "window.keep_turn_aborted": Label("Keep messages that mark an aborted turn"),
    "window.notice": Label("Notice where messages were dropped"),
    "drop_groups": Label("Drop the current turn's oldest tool exchanges"),
    "shrink_newest": Label("Shrink the newest tool outputs to fit"),
    "hysteresis.enabled": Label("Act at a high-water mark, not on every request"),
    "hysteresis.high_water": Label("Act at", "of the history budget"),
    "hysteresis.low_water": Label("Cut down to", "of the history budget"),
    "hysteresis.min_reclaim_tokens": Label("Skip actions that free fewer than", "tokens"),
    "compaction.auto": Label("Compact in the background"),
    "compaction.soft_threshold": Label("Start compacting at", "of the history budget"),
    "compaction.hidden_messages": Label("Or once the window leaves out, unsummarised,", "messages"),
    "compaction.masked_share": Label("Or once masking hides", "of the unsummarised results"),
    "compaction.cache_ttl_seconds": Label("The provider keeps its prompt cache for", "seconds"),
    "compaction.min_interval_seconds": Label("At most one such compaction every", "seconds"),
    "awareness.recall": Label("Give the model a tool to search what it no longer sees"),
    "awareness.recall_tool_name": Label("Name of that tool"),
    "awareness.budget_note": Label("Tell the model its budget and the next action"),
}


@dataclass(frozen=True, slots=True)
class Heading:
    title: str
    intro: str


# Top-level knobs belong to a group by name; a nested model is its own group.
TOP_LEVEL_GROUPS = {
    "context_window": "budget",
    "reserved_output_tokens": "budget",
    "safety_margin": "budget",
    "history_cap_tokens": "budget",
    "dangling_call_text": "last_resort",
    "drop_groups": "last_resort",
    "shrink_newest": "last_resort",
}

# In the order shown.
HEADINGS: dict[str, Heading] = {
    "budget": Heading(
        "Budget",
        "How much of the context window the history may take: the window less the system "
        "prompt and tools, the room kept for the answer and a safety margin.",
    ),
    "tool_output": Heading(
        "Long tool outputs",
        "Tool outputs, and long arguments of tool calls, cut down to a limit.",
    ),
    "text": Heading("Long messages", "User and assistant text cut down to a limit."),
    "eviction": Heading(
        "Very large tool outputs",
        "Stored aside and replaced by a preview; the model can read the full output back.",
    ),
    "masking": Heading(
        "Masking old tool results",
        "Older tool results replaced by a short placeholder; the calls stay visible.",
    ),
    "dedupe": Heading(
        "Repeated reads", "An output read again replaces its older copy, losing nothing."
    ),
    "window": Heading(
        "Sliding window",
        "The oldest middle messages dropped, keeping the start, pinned messages and the "
        "recent tail.",
    ),
    "hysteresis": Heading(
        "Acting less often",
        "Act at a high-water mark and cut down to a low-water mark, so the requests between "
        "keep the provider's cached prefix (cached input costs a tenth).",
    ),
    "compaction": Heading(
        "Background compaction",
        "The stored session summarised before governance has to drop anything, and once the "
        "model stops seeing a stretch of messages no summary covers: then when the Governor "
        "acts anyway, or the provider's cache has gone cold, so the rewrite costs nothing more.",
    ),
    "awareness": Heading(
        "What the model is told",
        "A tool to search what governance hid, and a note with the model's own budget.",
    ),
    "last_resort": Heading(
        "Repairs and last resorts",
        "What is done when nothing above is enough, and how an unanswered call is answered.",
    ),
}


@dataclass(frozen=True, slots=True)
class Knob:
    name: str
    """Dotted path: ``masking.keep_last``."""
    group: str
    """``masking``, or for a top-level knob the group it is shown in (``budget``)."""
    kind: Kind
    optional: bool
    """Whether empty means None (the knob off, or the default behaviour)."""
    default: Any
    value: Any
    choices: tuple[str, ...]
    description: str
    error: str = ""
    typed: str | None = None
    """What was typed, when it could not be read: shown again as it was."""

    @property
    def label(self) -> str:
        known = LABELS.get(self.name)
        return known.text if known else self.name.rsplit(".", 1)[-1].replace("_", " ").capitalize()

    @property
    def unit(self) -> str:
        known = LABELS.get(self.name)
        return known.unit if known else ""

    @property
    def example(self) -> str:
        known = LABELS.get(self.name)
        return known.example if known else ""

    @property
    def shape(self) -> str:
        known = LABELS.get(self.name)
        return known.shape if known else ""

    @property
    def shown(self) -> str:
        """The value as the form shows it."""
        return self.typed if self.typed is not None else _show(self.kind, self.value)

    @property
    def default_shown(self) -> str:
        return _show(self.kind, self.default) or "none"

    @property
    def changed(self) -> bool:
        return self.typed is not None or bool(self.value != self.default)


def _show(kind: Kind, value: Any) -> str:
    if value is None:
        return ""
    if kind == "percent" and isinstance(value, int | float):
        return f"{percent(value)} %"
    if kind == "json":
        return json.dumps(value)
    if kind == "bool":
        return "true" if value else "false"
    if kind == "int" and isinstance(value, int):
        return f"{value:,}"  # read back with or without the separators
    return str(value)


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """The annotation without ``None``, and whether ``None`` was allowed."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def percent(fraction: float) -> str:
    """``0.9`` as ``90``, ``0.125`` as ``12.5``: exact, from the fraction's shortest form."""
    return format((Decimal(repr(fraction)) * 100).normalize(), "f")


def _is_fraction(metadata: list[Any]) -> bool:
    """Whether a float's bounds keep it within 1: a share of something, shown as %."""
    for bound in metadata:
        if isinstance(bound, Le) and float(bound.le) <= 1:  # type: ignore[arg-type]
            return True
        if isinstance(bound, Lt) and float(bound.lt) <= 1:  # type: ignore[arg-type]
            return True
    return False


def _kind(annotation: Any, metadata: list[Any]) -> tuple[Kind, tuple[str, ...]]:
    if annotation is bool:
        return "bool", ()
    if annotation is int:
        return "int", ()
    if annotation is float:
        return ("percent" if _is_fraction(metadata) else "float"), ()
    if annotation is str:
        return "text", ()
    if typing.get_origin(annotation) is Literal:
        return "choice", tuple(str(a) for a in typing.get_args(annotation))
    return "json", ()


def knobs(
    current: dict[str, Any] | None = None,
    errors: dict[str, str] | None = None,
    typed: dict[str, str] | None = None,
) -> list[Knob]:
    """Every knob, with its default and its value under ``current`` (stored overrides or a
    submitted form's, as a nested dict); ``typed`` is the text of knobs that could not be
    read, shown as typed."""
    defaults = Policy().model_dump(mode="json")
    try:
        values = Policy.model_validate(current or {}).model_dump(mode="json")
    except ValidationError:
        values = _merge(defaults, current or {})
    found: list[Knob] = []
    _walk(Policy, "", defaults, values, errors or {}, found)
    if typed:
        found = [replace(k, typed=typed[k.name]) if k.name in typed else k for k in found]
    return found


def editor(
    current: dict[str, Any] | None = None,
    errors: dict[str, str] | None = None,
    typed: dict[str, str] | None = None,
) -> dict[str, Any]:
    """What the editor's templates show: the knobs, in their groups, those that differ from
    the default, and every error with the label of what it is about."""
    found = knobs(current, errors, typed)
    errors = errors or {}
    return {
        "knobs": found,
        "groups": groups(found, errors),
        "errors": labelled(errors),
        "changed_knobs": [knob for knob in found if knob.changed],
    }


@dataclass(frozen=True, slots=True)
class Group:
    key: str
    title: str
    intro: str
    knobs: list[Knob]
    error: str = ""

    @property
    def changed(self) -> int:
        return sum(knob.changed for knob in self.knobs)


def groups(knobs: list[Knob], errors: dict[str, str] | None = None) -> list[Group]:
    """The knobs under their headings, in the order of ``HEADINGS``; a group added to the
    engine comes last, headed by its model's docstring. ``errors`` on a group itself
    (``window``: a rule between its knobs) are shown on it."""
    by_key: dict[str, list[Knob]] = {}
    for knob in knobs:
        by_key.setdefault(knob.group, []).append(knob)
    order = [key for key in HEADINGS if key in by_key]
    order += [key for key in by_key if key not in HEADINGS]
    found = []
    for key in order:
        heading = HEADINGS.get(key) or _heading(key)
        found.append(
            Group(key, heading.title, heading.intro, by_key[key], (errors or {}).get(key, ""))
        )
    return found


def _heading(key: str) -> Heading:
    info = Policy.model_fields.get(key)
    annotation = _unwrap(info.annotation)[0] if info else None
    doc = (annotation.__doc__ or "") if isinstance(annotation, type) else ""
    return Heading(key.replace("_", " ").capitalize(), " ".join(doc.split()))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _walk(
    model: type[BaseModel],
    prefix: str,
    defaults: dict[str, Any],
    values: dict[str, Any],
    errors: dict[str, str],
    found: list[Knob],
) -> None:
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        annotation, optional = _unwrap(info.annotation)
        # A group of knobs; an optional one (``window.keep``) is edited whole, as JSON.
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and not optional:
            _walk(annotation, f"{path}.", defaults[name], values.get(name, {}), errors, found)
            continue
        kind, choices = _kind(annotation, info.metadata)
        found.append(
            Knob(
                name=path,
                group=prefix.split(".", 1)[0] if prefix else TOP_LEVEL_GROUPS.get(name, "policy"),
                kind=kind,
                optional=optional,
                default=defaults.get(name),
                value=values.get(name),
                choices=choices,
                description=info.description or "",
                error=errors.get(path, ""),
            )
        )


def _ancestors(path: str) -> list[str]:
    """``a.b.c``, ``a.b``, ``a``."""
    parts = path.split(".")
    return [".".join(parts[:n]) for n in range(len(parts), 0, -1)]


def group_errors(errors: dict[str, str]) -> dict[str, str]:
    """The errors no single knob owns: a group's rule (``window``) or the whole policy's."""
    names = {knob.name for knob in knobs()}
    return {path or "policy": message for path, message in errors.items() if path not in names}


def labelled(errors: dict[str, str]) -> list[tuple[str, str, str]]:
    """(dotted name, label, message) of each error, for a list a person reads: a knob's by
    its label, a group's by its heading, the whole policy's as "policy"."""
    labels = {knob.name: knob.label for knob in knobs()}
    found = []
    for path, message in errors.items():
        name = path or "policy"
        heading = HEADINGS.get(path)
        label = labels.get(path) or (heading.title if heading else "The policy")
        found.append((name, label, message))
    return found


class PolicyErrors(Exception):
    """A submitted policy the engine refuses: messages by knob (``""`` for the whole)."""

    def __init__(
        self,
        errors: dict[str, str],
        submitted: dict[str, Any],
        typed: dict[str, str] | None = None,
    ) -> None:
        super().__init__("; ".join(f"{k or 'policy'}: {v}" for k, v in errors.items()))
        self.errors = errors
        self.submitted = submitted
        self.typed = typed or {}
        """The text of each knob that could not be read, to show it again as typed."""


def policy_from_form(data: dict[str, str], *, window: int | None = None) -> Policy:
    """The policy a submitted form sets; raises ``PolicyErrors`` naming each knob the engine
    refuses, and the reserve when it leaves the history no room in ``window`` (the
    session's)."""
    errors: dict[str, str] = {}
    typed: dict[str, str] = {}
    submitted: dict[str, Any] = {}
    for knob in knobs():
        raw = data.get(knob.name)
        if raw is None:
            continue
        try:
            value = _parse(knob, raw.strip())
            _printable(value)
        except ValueError as error:
            errors[knob.name] = str(error)
            typed[knob.name] = raw
            continue
        _set(submitted, knob.name, value)
    if errors:
        raise PolicyErrors(errors, submitted, typed)
    try:
        policy = Policy.model_validate(submitted)
    except ValidationError as error:
        raise PolicyErrors(_errors(error), submitted) from None
    reason = no_room(policy, window) if window is not None else None
    if reason is not None:
        raise PolicyErrors({"reserved_output_tokens": reason}, submitted)
    return policy


def _parse(knob: Knob, raw: str) -> Any:
    if len(raw) > MAX_LENGTH:
        raise ValueError(f"at most {MAX_LENGTH:,} characters")
    if raw == "":
        if knob.optional:
            return None
        if knob.kind == "text":
            return ""
        raise ValueError("a value is required")
    if knob.kind == "bool":
        if raw not in ("true", "false"):
            raise ValueError("true or false")
        return raw == "true"
    if knob.kind == "int":
        try:
            return int(raw.replace(",", "").replace("_", ""))
        except ValueError:
            raise ValueError("a whole number") from None
    if knob.kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise ValueError("a number") from None
    if knob.kind == "percent":
        return _fraction(raw)
    if knob.kind == "choice" and raw not in knob.choices:
        raise ValueError(f"one of {', '.join(knob.choices)}")
    if knob.kind == "json":
        try:
            return json.loads(raw)
        except json.JSONDecodeError as error:
            raise ValueError(f"JSON: {error.msg}") from None
        except RecursionError:
            raise ValueError("JSON: nested too deep") from None
    return raw


_PERCENT = re.compile(r"(?P<number>[^%\s]+)\s*(?P<sign>%?)")


def _fraction(raw: str) -> float:
    """``90 %`` (or ``90%``) as ``0.9``; a number without a sign is the fraction itself, as the
    engine and the API take it. A bare number above 1 is refused, not guessed at."""
    hint = "a percentage such as 90 %, or a fraction such as 0.9"
    match = _PERCENT.fullmatch(raw)
    if match is None:
        raise ValueError(hint)
    try:
        number = Decimal(match["number"])
    except InvalidOperation:
        raise ValueError(hint) from None
    if not number.is_finite():
        raise ValueError(hint)
    if match["sign"]:
        return float(number / 100)
    if abs(number) > 1:
        raise ValueError(f"{hint}: write {number} % for {number} per cent")
    return float(number)


def _printable(value: Any) -> None:
    """Refuses text that cannot be stored: a lone surrogate (not UTF-8) or a NUL character."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("a NUL character cannot be stored")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("not valid Unicode text (a lone surrogate)") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _printable(key)
            _printable(item)
    elif isinstance(value, list):
        for item in value:
            _printable(item)


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for name in parents:
        tree = tree.setdefault(name, {})
    tree[leaf] = value


_BOUND = re.compile(r"than (?:or equal to )?(\d+(?:\.\d+)?)")


def _errors(error: ValidationError) -> dict[str, str]:
    """pydantic's errors by knob path; a model-level rule is shown on its group (or the form),
    an error inside a knob edited as JSON (``dedupe.keys.read_file``) on that knob."""
    every = {knob.name: knob for knob in knobs()}
    names = set(every)
    found: dict[str, str] = {}
    for item in error.errors():
        path = ".".join(str(p) for p in item["loc"] if not isinstance(p, int))
        owner = next((p for p in _ancestors(path) if p in names), None)
        if owner is not None and owner != path:
            path, item["msg"] = owner, f"{path.removeprefix(owner).strip('.')}: {item['msg']}"
        message = item["msg"].removeprefix("Value error, ")
        if path in every and every[path].kind == "percent":
            message = _BOUND.sub(lambda m: f"{m[0]} ({percent(float(m[1]))} %)", message)
        found[path] = f"{found[path]}; {message}" if path in found else message
    return found
