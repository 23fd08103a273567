"""The tool definitions a session's agent sends beside its messages, and their tokens.

A model request carries the agent's tool definitions (a name, a description and the JSON
schema of the arguments, as pydantic-ai's ``ToolDefinition``) besides its messages: they take
room in the window, so the history's budget is smaller by their tokens. A session keeps the
definitions its agent sends (the chat's own tools; an external agent's, sent through the API)
as plain JSON, with the tokens of each for the session model's tokenizer, counted once when
they are set rather than at every request (stored as written, key order included:
``sessions.fields``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.utils import timezone
from pydantic_ai.tools import ToolDefinition

from ctxhub.governance import tool_definition_tokens
from ctxhub.governance.tokens import tokenizer_for
from sessions import events
from sessions.models import AgentSession

ToolJson = dict[str, Any]
"""One tool definition as stored and sent: ``{"name", "description", "parameters"}``."""


def tool_json(name: str, description: str | None, parameters: Mapping[str, Any]) -> ToolJson:
    """A definition in the order it is counted in (the engine counts a definition's JSON)."""
    return {"name": name, "description": description, "parameters": dict(parameters)}


def definitions_of(tools: Iterable[ToolDefinition]) -> list[ToolJson]:
    """pydantic-ai's definitions (a request's ``function_tools`` and ``output_tools``) as JSON."""
    return [tool_json(t.name, t.description, t.parameters_json_schema) for t in tools]


def canonical(definitions: Iterable[Mapping[str, Any]]) -> list[ToolJson]:
    """Definitions in the shape they are counted in: name, description, parameters."""
    return [
        tool_json(d["name"], d.get("description"), d.get("parameters") or {}) for d in definitions
    ]


@dataclass(frozen=True, slots=True)
class SessionTools:
    """The tool definitions a session's requests carry, and the tokens of each."""

    definitions: list[ToolJson]
    tokens: list[int]

    @property
    def total(self) -> int:
        return sum(self.tokens)

    @property
    def named(self) -> list[tuple[str, int]]:
        """Each tool's name and tokens, in the order they are sent."""
        return [(d["name"], n) for d, n in zip(self.definitions, self.tokens, strict=True)]


def count(definitions: list[ToolJson], model: str | None) -> tuple[list[int], str]:
    """The tokens of each definition for ``model``'s tokenizer, and its encoding."""
    tokenizer = tokenizer_for(model)
    return [tool_definition_tokens([d], tokenizer) for d in definitions], tokenizer.encoding_name


def session_tools(session: AgentSession, model: str | None = None) -> SessionTools:
    """The session's tool definitions with their tokens for ``model`` (default: the session's):
    the stored counts when they were made with its encoding, else counted now."""
    definitions = canonical(session.tool_definitions or [])
    stored = list(session.tool_tokens or [])
    encoding = tokenizer_for(model or session.model).encoding_name
    if session.tool_encoding == encoding and len(stored) == len(definitions):
        return SessionTools(definitions, stored)
    return SessionTools(definitions, count(definitions, model or session.model)[0])


def tool_fields(definitions: Iterable[Mapping[str, Any]], model: str) -> dict[str, Any]:
    """The session's fields that hold ``definitions`` (validated where they came in), counted
    for ``model``."""
    stored = canonical(definitions)
    tokens, encoding = count(stored, model)
    return {"tool_definitions": stored, "tool_tokens": tokens, "tool_encoding": encoding}


def set_tools(
    session: AgentSession, definitions: Iterable[Mapping[str, Any]], *, announce: bool = True
) -> bool:
    """Store the tool definitions the session's agent sends, counted for its model, unless the
    session as read already holds them counted so; True when they were stored. What the model
    sees changes: open pages are told (unless ``announce`` is off, for a caller that shows the
    new request itself, as a chat turn does)."""
    wanted = canonical(definitions)
    encoding = tokenizer_for(session.model).encoding_name
    if (
        canonical(session.tool_definitions or []) == wanted
        and session.tool_encoding == encoding
        and len(session.tool_tokens or []) == len(wanted)
    ):
        return False
    fields = tool_fields(wanted, session.model)
    AgentSession.objects.filter(pk=session.pk).update(**fields, updated_at=timezone.now())
    for name, value in fields.items():
        setattr(session, name, value)
    if announce:
        events.send_on_commit(events.records_changed, session=session)
    return True
