"""What a message is, for governance: its facts, counted once and cached against the message
(``MessageFacts``), and the token count of a history built from them.

A hub stores each message's facts beside it (``MessageFacts.to_json``), so a stored history is
governed without parsing the messages governance then drops.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from hashlib import blake2b
from operator import attrgetter
from typing import Any

from pydantic_ai.messages import (
    BaseToolReturnPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_core import to_jsonable_python

from .counting import (
    MARK,
    Part,
    TokenSink,
    cached_part_tokens,
    is_tool_result,
    message_cache,
    result_call_id,
)
from .tokens import MESSAGE_OVERHEAD, Tokenizer, instructions_of, tokenizer_for

FACTS_VERSION = 2
"""Version of ``MessageFacts.to_json``'s form; a stored form of another version is refused (so
a hub counts the message again). Raise it whenever a field is added or changes meaning."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""The timestamp of a message that carries none."""


@dataclass(frozen=True, slots=True)
class MessageFacts:
    """What governance needs to know about one message, computed once per message object.

    Everything ``govern`` and its report read about a message it neither sends nor changes is
    here, so a caller holding stored facts (``to_json`` / ``from_json``) can pass them with a
    history whose messages are loaded only when governance asks for one.
    """

    request: bool
    tokens: int
    """Its parts and the message framing. A request's ``instructions`` are not included: a
    provider sends only the latest request's, once, so they are counted once per history."""
    part_tokens: tuple[int, ...]
    """Each part's tokens, framing included."""
    part_kinds: tuple[str, ...] = ()
    """Each part's ``part_kind``."""
    part_tool_names: tuple[str | None, ...] = ()
    """Each part's tool name (None for a part without one)."""
    call_ids: tuple[str, ...] = ()
    result_ids: tuple[str, ...] = ()
    user_prompt: bool = False
    """A request holding a user prompt part that a user wrote (not a notice or summary)."""
    system_tokens: int = 0
    text_response: bool = False
    tool_names: frozenset[str] = field(default_factory=frozenset)
    only_results: bool = False
    largest: int = 0
    """Tokens of the largest part."""
    outputs: tuple[int, ...] = ()
    """Part numbers of the ordinary tool outputs (not framework returns)."""
    output_digests: tuple[str, ...] = ()
    """For each of ``outputs``, what makes two outputs the same (see ``output_digest``)."""
    aborted: bool = False
    """A turn-aborted marker: an interrupted request or a ``<turn_aborted>`` user prompt."""
    maskable: frozenset[int] = frozenset()
    """Part numbers of the ordinary tool outputs governance did not write itself."""
    notice: bool = False
    """A notice governance wrote: the window's (see ``steps.window.notice_omitted``), or the
    budget note of a request governed before (``budget_note``), which no keep counts."""
    omitted: int = 0
    """The number of messages that notice says were omitted."""
    instructions: bool = False
    """A request carrying ``instructions``."""
    timestamp: datetime = EPOCH
    """When the message was made (a request without one: its first part's); a window notice
    written next to it takes this time."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-compatible form (fields at their default are left out), for storage."""
        value: dict[str, Any] = {
            "v": FACTS_VERSION,
            "request": self.request,
            "tokens": self.tokens,
            "part_tokens": list(self.part_tokens),
            "part_kinds": list(self.part_kinds),
            "part_tool_names": list(self.part_tool_names),
            "timestamp": self.timestamp.isoformat(),
        }
        for name in _LISTS:
            items = getattr(self, name)
            if items:
                value[name] = list(items)
        for name in _SETS:
            items = getattr(self, name)
            if items:
                value[name] = sorted(items)
        for name in _SCALARS:
            item = getattr(self, name)
            if item:
                value[name] = item
        return value

    @classmethod
    def from_json(cls, value: object) -> MessageFacts:
        """The facts ``to_json`` stored; ValueError for another version or a malformed form."""
        if not isinstance(value, dict):
            raise ValueError(f"message facts must be a JSON object, not {type(value).__name__}")
        version = value.get("v")
        if version != FACTS_VERSION:
            raise ValueError(
                f"message facts of version {version!r} cannot be read (this engine reads "
                f"version {FACTS_VERSION}); count the message again"
            )
        unknown = value.keys() - _KEYS
        if unknown:
            raise ValueError(f"unknown message facts fields: {sorted(unknown)}")
        try:
            get = value.get
            facts = cls(
                request=_typed(value["request"], bool),
                tokens=_typed(value["tokens"], int),
                part_tokens=tuple(value["part_tokens"]),
                part_kinds=tuple(value["part_kinds"]),
                part_tool_names=tuple(value["part_tool_names"]),
                call_ids=tuple(get("call_ids", ())),
                result_ids=tuple(get("result_ids", ())),
                user_prompt=_typed(get("user_prompt", False), bool),
                system_tokens=_typed(get("system_tokens", 0), int),
                text_response=_typed(get("text_response", False), bool),
                tool_names=frozenset(get("tool_names", ())),
                only_results=_typed(get("only_results", False), bool),
                largest=_typed(get("largest", 0), int),
                outputs=tuple(get("outputs", ())),
                output_digests=tuple(get("output_digests", ())),
                aborted=_typed(get("aborted", False), bool),
                maskable=frozenset(get("maskable", ())),
                notice=_typed(get("notice", False), bool),
                omitted=_typed(get("omitted", 0), int),
                instructions=_typed(get("instructions", False), bool),
                timestamp=datetime.fromisoformat(value["timestamp"]),
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"malformed message facts: {error!r}") from error
        parts = len(facts.part_tokens)
        if len(facts.part_kinds) != parts or len(facts.part_tool_names) != parts:
            raise ValueError("malformed message facts: per-part fields of different lengths")
        return facts


_LISTS = ("call_ids", "result_ids", "outputs", "output_digests")
_SETS = ("tool_names", "maskable")
_SCALARS = (
    "user_prompt",
    "system_tokens",
    "text_response",
    "only_results",
    "largest",
    "aborted",
    "notice",
    "omitted",
    "instructions",
)
_KEYS = frozenset(
    {"v", "request", "tokens", "part_tokens", "part_kinds", "part_tool_names", "timestamp"}
).union(_LISTS, _SETS, _SCALARS)


def _typed[T](item: object, kind: type[T]) -> T:
    if not isinstance(item, kind):
        raise TypeError(f"{item!r} is not {kind.__name__}")
    return item


def message_facts(
    message: ModelMessage, tokenizer: Tokenizer, sink: TokenSink | None = None
) -> MessageFacts:
    """Facts about a message, cached by identity per encoding."""
    values = message_cache(message)
    key = tokenizer.encoding_name
    cached = values.get(key)
    if cached is not None:
        facts: MessageFacts = cached
        return facts
    facts = _compute_facts(message, tokenizer, sink)
    values[key] = facts
    return facts


_PART_KIND = attrgetter("part_kind")


def _tool_name(part: Part) -> str | None:
    name = getattr(part, "tool_name", None)
    return name if isinstance(name, str) else None


def _compute_facts(
    message: ModelMessage, tokenizer: Tokenizer, sink: TokenSink | None
) -> MessageFacts:
    parts = message.parts
    counts = tuple(cached_part_tokens(part, tokenizer, sink) for part in parts)
    tokens = MESSAGE_OVERHEAD + sum(counts)
    kinds = tuple(map(_PART_KIND, parts))
    tool_names = tuple(map(_tool_name, parts))
    if isinstance(message, ModelResponse):
        calls = tuple(p.tool_call_id for p in parts if isinstance(p, ToolCallPart))
        names = frozenset(p.tool_name for p in parts if isinstance(p, ToolCallPart))
        return MessageFacts(
            request=False,
            tokens=tokens,
            part_tokens=counts,
            part_kinds=kinds,
            part_tool_names=tool_names,
            call_ids=calls,
            text_response=any(isinstance(p, TextPart) for p in parts),
            tool_names=names,
            largest=max(counts, default=0),
            timestamp=message.timestamp,
        )
    results = tuple(result_call_id(p) for p in parts if is_tool_result(p))
    names = frozenset(
        p.tool_name
        for p in parts
        if isinstance(p, BaseToolReturnPart | RetryPromptPart)
        if p.tool_name is not None
    )
    system = sum(
        count for p, count in zip(parts, counts, strict=True) if isinstance(p, SystemPromptPart)
    )
    omitted = window_notice(message)
    outputs = tuple(n for n, p in enumerate(parts) if type(p) is ToolReturnPart)
    digests = tuple(output_digest(parts[n]) for n in outputs)
    return MessageFacts(
        request=True,
        tokens=tokens,
        part_tokens=counts,
        part_kinds=kinds,
        part_tool_names=tool_names,
        result_ids=results,
        # A request governance wrote (a window notice, a summary) is nobody's prompt: the turn
        # it sits in still starts at the user's own request.
        user_prompt=not _governance_made(message)
        and any(isinstance(p, UserPromptPart) for p in parts),
        system_tokens=system,
        tool_names=names,
        only_results=bool(parts) and len(results) == len(parts),
        aborted=is_turn_aborted(message),
        largest=max(counts, default=0),
        outputs=outputs,
        output_digests=digests,
        maskable=frozenset(n for n in outputs if not _written(parts[n])),
        notice=omitted is not None or is_budget_note(message),
        omitted=omitted or 0,
        instructions=message.instructions is not None,
        timestamp=request_timestamp(message),
    )


def output_digest(part: Part) -> str:
    """What makes two tool outputs the same: the tool and the exact text the model reads."""
    assert isinstance(part, ToolReturnPart)
    content = part.content
    # Structured content with its keys sorted: a stored copy (a JSON column may reorder keys)
    # is the same output as the original.
    text = (
        content
        if isinstance(content, str)
        else json.dumps(to_jsonable_python(content), sort_keys=True, ensure_ascii=False)
    )
    return blake2b(f"{part.tool_name}\0{text}".encode(), digest_size=12).hexdigest()


def request_timestamp(message: ModelRequest) -> datetime:
    """A request's timestamp, else its first part's that has one, else ``EPOCH``."""
    if message.timestamp is not None:
        return message.timestamp
    for part in message.parts:
        stamp = getattr(part, "timestamp", None)
        if isinstance(stamp, datetime):
            return stamp
    return EPOCH


def _governance_made(message: ModelRequest) -> bool:
    return isinstance(message.metadata, dict) and MARK in message.metadata


def _written(part: Part) -> bool:
    metadata = getattr(part, "metadata", None)
    return isinstance(metadata, dict) and MARK in metadata


def window_notice(message: ModelMessage) -> int | None:
    """The omitted count of a window notice governance wrote; None for any other message."""
    if not isinstance(message, ModelRequest) or not message.metadata:
        return None
    note = message.metadata.get(MARK)
    if isinstance(note, dict) and note.get("notice") == "window":
        omitted = note.get("omitted", 0)
        return omitted if isinstance(omitted, int) else 0
    return None


BUDGET_NOTE = {"notice": "budget"}
"""The mark of a budget note governance wrote (``budget_note``), on its request and its part."""


def is_budget_note(message: ModelMessage) -> bool:
    """Whether ``message`` is a budget note governance wrote (marked on the request, or on its
    part when a framework merged the request into another)."""
    if not isinstance(message, ModelRequest):
        return False
    if _noted(message.metadata):
        return True
    return any(isinstance(p, SystemPromptPart) and _noted(p.metadata) for p in message.parts)


def _noted(metadata: object) -> bool:
    if not isinstance(metadata, dict):
        return False
    mark = metadata.get(MARK)
    return isinstance(mark, dict) and mark.get("notice") == BUDGET_NOTE["notice"]


ABORTED_PREFIXES = ("<turn_aborted>", "<turn-aborted>")


def is_turn_aborted(message: ModelMessage) -> bool:
    """Whether a message marks an aborted turn."""
    if not isinstance(message, ModelRequest):
        return False
    if message.state == "interrupted":
        return True
    return any(
        isinstance(p, UserPromptPart)
        and isinstance(p.content, str)
        and p.content.lstrip().startswith(ABORTED_PREFIXES)
        for p in message.parts
    )


def history_tokens(messages: Iterable[ModelMessage], tokenizer: Tokenizer) -> int:
    """Tokens of messages, without instructions."""
    return sum(message_facts(message, tokenizer).tokens for message in messages)


def count_tokens(
    messages_or_text: str | Sequence[ModelMessage], *, model: str | None = None
) -> int:
    """Tokens a model would be sent for a text or a history (latest instructions counted once).

    Exact for the OpenAI families whose encoding ships with ctxhub, approximate otherwise (see
    ``tokenizer_for``). Repeated calls on a growing history only tokenise new messages.
    """
    tokenizer = tokenizer_for(model)
    if isinstance(messages_or_text, str):
        return tokenizer.count(messages_or_text)
    instructions = instructions_of(messages_or_text)
    return history_tokens(messages_or_text, tokenizer) + (
        tokenizer.count(instructions) if instructions else 0
    )
