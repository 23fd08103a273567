"""The API's request and response bodies (they make its OpenAPI schema)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID

from ninja import Field, Schema
from ninja.schema import DjangoGetter
from pydantic import ConfigDict, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..payloads import bad_text


class _Body(Schema):
    """A request body: a JSON object. ninja's schemas also read attributes off any object (for
    ORM rows), so a list or a string would pass as an object with every field left out."""

    @model_validator(mode="before")
    @classmethod
    def _an_object(cls, data: Any) -> Any:
        given = data._obj if isinstance(data, DjangoGetter) else data  # as ninja wraps it
        if not isinstance(given, dict):
            raise ValueError(f"a JSON object is expected, not {_json_type(given)}")
        return data


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string"}.get(
        type(value), "an array" if isinstance(value, list) else type(value).__name__
    )


def _storable(value: Any) -> Any:
    """``value``, unless it holds what cannot be stored as it is (``bad_text``): the error then
    carries the path inside the field (``inside``), unless the bad string is a key on it."""
    bad = bad_text(value)
    if bad is not None:
        path, problem = bad
        inside = path.split(".") if path and bad_text(path) is None else []
        raise PydanticCustomError("unstorable", problem, {"inside": inside})
    return value


class _Storable(_Body):
    """A request body whose strings are stored: one PostgreSQL cannot keep (a NUL character, a
    lone surrogate) is refused, a 422 naming the field, rather than failing the write."""

    @field_validator("*")
    @classmethod
    def _storable_text(cls, value: Any) -> Any:
        return _storable(value)


MAX_TOOLS = 500
MAX_TOOL_SCHEMA_CHARS = 100_000


class ToolIn(_Storable):
    """A tool definition the agent sends with each request (pydantic-ai's ``ToolDefinition``:
    ``name``, ``description``, ``parameters_json_schema``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=50_000)
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="The JSON schema of the tool's arguments "
        f"(at most {MAX_TOOL_SCHEMA_CHARS:,} characters as JSON).",
    )

    @field_validator("*", mode="before")
    @classmethod
    def _text_first(cls, value: Any) -> Any:
        """Strings that cannot be stored, numbers JSON cannot write and nesting too deep are
        refused before the types are checked."""
        return _storable(value)

    @field_validator("parameters")
    @classmethod
    def _plain_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        text = json.dumps(value, ensure_ascii=False)  # NaN and Infinity are refused before
        if len(text) > MAX_TOOL_SCHEMA_CHARS:
            raise ValueError(
                f"is {len(text):,} characters as JSON, more than {MAX_TOOL_SCHEMA_CHARS:,}"
            )
        return value

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def _distinct_names(tools: list[ToolIn] | None) -> list[ToolIn] | None:
    seen: dict[str, int] = {}
    for index, tool in enumerate(tools or ()):
        if tool.name in seen:
            first = seen[tool.name]
            raise ValueError(f"two tools are named {tool.name!r} (tools[{first}] and [{index}])")
        seen[tool.name] = index
    return tools


TOOLS_DESCRIPTION = (
    "The tool definitions the agent sends with each request: their tokens are counted into "
    "what a request carries, and the history's budget is smaller by them."
)


class SessionIn(_Storable):
    title: str = Field(min_length=1, max_length=200)
    model: str = Field(min_length=1, max_length=200, description="A pydantic-ai model string.")
    context_window: int | None = Field(default=None, ge=1_000, le=10_000_000)
    policy: dict[str, Any] = Field(default_factory=dict, description="Policy overrides.")
    tools: list[ToolIn] = Field(
        default_factory=list, max_length=MAX_TOOLS, description=TOOLS_DESCRIPTION
    )

    distinct_tool_names = field_validator("tools")(_distinct_names)


class SessionPatch(_Storable):
    title: str | None = Field(default=None, min_length=1, max_length=200)
    model: str | None = Field(default=None, min_length=1, max_length=200)
    context_window: int | None = Field(default=None, ge=1_000, le=10_000_000)
    policy: dict[str, Any] | None = None
    tools: list[ToolIn] | None = Field(
        default=None,
        max_length=MAX_TOOLS,
        description=f"{TOOLS_DESCRIPTION} [] sends none; null or left out: unchanged.",
    )

    distinct_tool_names = field_validator("tools")(_distinct_names)


class ToolOut(Schema):
    name: str
    description: str | None
    parameters: dict[str, Any]
    tokens: int = Field(description="Its tokens, for the session model's tokenizer.")


class SessionOut(Schema):
    id: UUID
    title: str
    model: str
    context_window: int | None
    policy: dict[str, Any]
    tools: list[ToolOut]
    tool_tokens: int = Field(description="Tokens of the tool definitions, sent with each request.")
    messages: int
    tokens: int
    created_at: datetime
    updated_at: datetime


class SkippedLineOut(Schema):
    line: int
    why: str


class TranscriptImportOut(Schema):
    format: str = Field(description="claude-code or codex.")
    sessions: list[SessionOut] = Field(
        description="The sessions it added to: the transcript's own, then its sub-agents'."
    )
    created: int = Field(description="How many of them are new.")
    messages: int = Field(description="Messages added (0: nothing new since the last import).")
    compactions: int = Field(description="The agent's compactions added.")
    kept_lines: int = Field(description="Lines kept as they were (no message in them).")
    skipped_lines: list[SkippedLineOut] = Field(description="Lines that could not be read.")


class SessionPage(Schema):
    sessions: list[SessionOut]
    next_cursor: str | None = Field(description="Pass as cursor for the next page; null: last.")


class AppendIn(_Body):
    messages: list[dict[str, Any]] = Field(
        min_length=1, max_length=1_000, description="pydantic-ai ModelMessage JSON objects."
    )
    expected_seq: int | None = Field(
        default=None,
        ge=0,
        le=2**31 - 1,
        description="The seq the first message must get, else 409.",
    )


class AppendOut(Schema):
    first_seq: int
    last_seq: int
    tokens: int


class StoredMessage(Schema):
    seq: int
    kind: str
    tokens: int
    source: str
    created_at: datetime
    message: dict[str, Any]


class MessagePage(Schema):
    messages: list[StoredMessage]
    next_after_seq: int | None


class ContextOut(Schema):
    messages: list[dict[str, Any]] = Field(description="What to send next, as ModelMessage JSON.")
    report: dict[str, Any] = Field(description="The ContextReport: budget, zones, actions.")


class CompactionIn(_Storable):
    focus: str = Field(default="", max_length=2_000)
    dry_run: bool = False
    keep_from: int | None = Field(default=None, ge=0, le=2**31 - 1)
    expected: str | None = Field(
        default=None,
        max_length=128,
        description="A dry run's fingerprint: the compaction is refused (409) when the session "
        "changed since that preview, so what runs is what was previewed.",
    )


class PreviewOut(Schema):
    fingerprint: str = Field(
        description="Pass it as `expected` to compact exactly this plan (409 if stale)."
    )
    nothing_to_compact: bool = Field(
        description="No message before the kept tail is left that no summary covers."
    )
    message: str = Field(
        description="The plan in one sentence: what the model would get and the next request "
        "now and at most after, against the low-water mark; or why it would be refused."
    )
    summarized_seqs: list[int] = Field(description="Log seqs the summary would stand for.")
    kept_seqs: list[int] = Field(description="Log seqs that stay as they are.")
    kept_user_seqs: list[int] = Field(
        description="Summarised user messages whose words stay verbatim beside the summary."
    )
    messages: int = Field(
        description="Messages the summary would stand for (those earlier summaries stood for "
        "included)."
    )
    unseen: int = Field(
        description="Of those, the messages the next request does not carry in full now "
        "(dropped, masked, cut, evicted, or summarised before)."
    )
    sent_now: int = Field(description="Tokens the next request carries now, tools included.")
    sent_after_max: int = Field(
        description="The most tokens the next request would carry after; the job keeps it."
    )
    low_water: int = Field(
        description="Tokens the next request carries at the Governor's low-water mark: a "
        "compaction may grow the request up to it when the summary replaces what the model "
        "does not see, and is refused past it."
    )
    window_tokens: int
    shrinks: bool = Field(description="Whether the next request would carry less.")
    refused: bool = Field(description="Whether the job would refuse it (see `message`).")
    tokens_before: int = Field(description="Tokens of the effective history now.")
    tokens_after_estimate: int = Field(description="At most, after.")
    summarizer: str


class JobOut(Schema):
    id: UUID
    session: UUID
    status: str
    trigger: str
    focus: str
    outcome: str
    error: str
    message: str = Field(
        description="What became of it in one sentence: what the model gets and the next "
        "request before and after against the low-water mark, or why nothing was written."
    )
    progress: dict[str, Any]
    result: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None


class RecordOut(Schema):
    id: int
    kind: str
    undone: bool


class EvictedOut(Schema):
    ref: str
    text: str


class RecallHitOut(Schema):
    seq: int = Field(description="The message's seq in the log.")
    part: int = Field(description="The part's index in its message.")
    kind: str = Field(description="user, assistant, tool call, tool output, retry or thinking.")
    tool_name: str | None
    fate: str = Field(
        description="What governance did to it: masked, truncated, evicted, dropped, summarised…"
    )
    excerpt: str = Field(description="The stretch of the passage that matches best.")


class RecallOut(Schema):
    query: str
    hits: list[RecallHitOut]
    text: str = Field(description="The answer as the recall tool gives it to a model.")


class GovernIn(_Body):
    messages: list[dict[str, Any]] = Field(max_length=100_000)
    model: str = Field(min_length=1, max_length=200)
    policy: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] | None = Field(
        default=None,
        description=(
            "The governor's state from the previous answer, for the same history grown: between "
            "its actions the request is then the previous one with the new messages appended, "
            "so the provider's prompt cache keeps its prefix. None: the first request."
        ),
    )
    tools: list[ToolIn] = Field(
        default_factory=list,
        max_length=MAX_TOOLS,
        description=f"{TOOLS_DESCRIPTION} Counted for this call only.",
    )

    distinct_tool_names = field_validator("tools")(_distinct_names)


class GovernOut(ContextOut):
    state: dict[str, Any] = Field(description="Send it with the next request of this history.")
    acted: str | None = Field(
        description=(
            "Why this request changes messages the previous one sent (start, edited, "
            "high_water, over_budget, trigger, or always: a rule the policy applies to every "
            "request, masking.apply always or dedupe.keys); null when it only appends."
        )
    )


class ErrorDetail(Schema):
    """What went wrong: a stable ``code``, a sentence, the field at fault (null: the request as
    a whole), and details some errors add (``job``, ``next_seq``, ``seq``, ``errors``)."""

    model_config = ConfigDict(extra="allow")

    code: str
    message: str
    field: str | None


class ErrorOut(Schema):
    error: ErrorDetail


# The refusals any operation may answer; 429 and 503 carry Retry-After.
ERRORS: dict[frozenset[int], type[ErrorOut]] = {
    frozenset({400, 401, 403, 404, 409, 413, 422, 429, 503}): ErrorOut
}
