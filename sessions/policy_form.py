"""The policy editor: every knob of ``Policy`` as a form field, read back into overrides.

The fields are derived from the pydantic model itself (nested models become groups, literals
become choices, booleans yes/no, tuples and thresholds JSON), so a knob added to the engine
appears here with its default and description, and is validated by the engine's own rules.
A session stores only the knobs that differ from the defaults.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Union

from pydantic import BaseModel, ValidationError

from ctxhub.governance import Policy
from sessions.services.governed import no_room

Kind = Literal["bool", "int", "float", "text", "choice", "json"]


@dataclass(frozen=True, slots=True)
class Knob:
    name: str
    """Dotted path: ``masking.keep_last``."""
    kind: Kind
    optional: bool
    """Whether empty means None (the knob off, or the default behaviour)."""
    default: Any
    value: Any
    choices: tuple[str, ...]
    description: str
    error: str = ""

    @property
    def shown(self) -> str:
        """The value as the form shows it."""
        return _show(self.kind, self.value)

    @property
    def default_shown(self) -> str:
        return _show(self.kind, self.default) or "none"

    @property
    def changed(self) -> bool:
        return bool(self.value != self.default)


def _show(kind: Kind, value: Any) -> str:
    if value is None:
        return ""
    if kind == "json":
        return json.dumps(value)
    if kind == "bool":
        return "true" if value else "false"
    return str(value)


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """The annotation without ``None``, and whether ``None`` was allowed."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _kind(annotation: Any) -> tuple[Kind, tuple[str, ...]]:
    if annotation is bool:
        return "bool", ()
    if annotation is int:
        return "int", ()
    if annotation is float:
        return "float", ()
    if annotation is str:
        return "text", ()
    if typing.get_origin(annotation) is Literal:
        return "choice", tuple(str(a) for a in typing.get_args(annotation))
    return "json", ()


def knobs(
    current: dict[str, Any] | None = None, errors: dict[str, str] | None = None
) -> list[Knob]:
    """Every knob, with its default and its value under ``current`` (stored overrides or a
    submitted form's, as a nested dict)."""
    defaults = Policy().model_dump(mode="json")
    try:
        values = Policy.model_validate(current or {}).model_dump(mode="json")
    except ValidationError:
        values = _merge(defaults, current or {})
    found: list[Knob] = []
    _walk(Policy, "", defaults, values, errors or {}, found)
    return found


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
        kind, choices = _kind(annotation)
        found.append(
            Knob(
                name=path,
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


class PolicyErrors(Exception):
    """A submitted policy the engine refuses: messages by knob (``""`` for the whole)."""

    def __init__(self, errors: dict[str, str], submitted: dict[str, Any]) -> None:
        super().__init__("; ".join(f"{k or 'policy'}: {v}" for k, v in errors.items()))
        self.errors = errors
        self.submitted = submitted


def policy_from_form(data: dict[str, str], *, window: int | None = None) -> Policy:
    """The policy a submitted form sets; raises ``PolicyErrors`` naming each knob the engine
    refuses, and the reserve when it leaves the history no room in ``window`` (the
    session's)."""
    errors: dict[str, str] = {}
    submitted: dict[str, Any] = {}
    for knob in knobs():
        raw = data.get(knob.name)
        if raw is None:
            continue
        try:
            value = _parse(knob, raw.strip())
        except ValueError as error:
            errors[knob.name] = str(error)
            continue
        _set(submitted, knob.name, value)
    if errors:
        raise PolicyErrors(errors, submitted)
    try:
        policy = Policy.model_validate(submitted)
    except ValidationError as error:
        raise PolicyErrors(_errors(error), submitted) from None
    reason = no_room(policy, window) if window is not None else None
    if reason is not None:
        raise PolicyErrors({"reserved_output_tokens": reason}, submitted)
    return policy


def _parse(knob: Knob, raw: str) -> Any:
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
    if knob.kind == "choice" and raw not in knob.choices:
        raise ValueError(f"one of {', '.join(knob.choices)}")
    if knob.kind == "json":
        try:
            return json.loads(raw)
        except json.JSONDecodeError as error:
            raise ValueError(f"JSON: {error.msg}") from None
    return raw


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for name in parents:
        tree = tree.setdefault(name, {})
    tree[leaf] = value


def _errors(error: ValidationError) -> dict[str, str]:
    """pydantic's errors by knob path; a model-level rule is shown on its group (or the form),
    an error inside a knob edited as JSON (``dedupe.keys.read_file``) on that knob."""
    names = {knob.name for knob in knobs()}
    found: dict[str, str] = {}
    for item in error.errors():
        path = ".".join(str(p) for p in item["loc"] if not isinstance(p, int))
        owner = next((p for p in _ancestors(path) if p in names), None)
        if owner is not None and owner != path:
            path, item["msg"] = owner, f"{path.removeprefix(owner).strip('.')}: {item['msg']}"
        message = item["msg"].removeprefix("Value error, ")
        found[path] = f"{found[path]}; {message}" if path in found else message
    return found
