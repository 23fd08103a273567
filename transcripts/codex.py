"""The Codex CLI's rollouts: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``.

Each line is ``{"timestamp", "type", "payload"}``:

- ``session_meta``: the session's ``id``, ``cwd``, the CLI's version and where it started
  (``source``: a sub-agent's names the session that spawned it);
- ``response_item``: an item of the Responses API as the model got or gave it (a message, a
  reasoning item, a function call or its output, …). The items of one model response (its
  reasoning, text and calls) are one response here; a user message, and each call's output,
  one request;
- ``event_msg``: what the CLI showed. Most repeat the items (``user_message``,
  ``agent_message``, ``agent_reasoning``) and are left out; ``token_count`` carries the usage
  of the response before it (``last_token_usage``; it is sent again unchanged at times, so it
  counts only when ``total_token_usage`` moved);
- ``turn_context``: the model and settings of the turn that follows;
- ``compacted``: the summary the model wrote when the conversation was compacted.

Rollouts written before lines had a type hold the session's meta as a bare first line and
the items as bare lines; they are read the same way. Any other line is kept as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelRequest, ModelResponse
from pydantic_ai.usage import RequestUsage

from gateway.wire import BodyError, storable
from gateway.wire import openai_responses as wire
from transcripts.reading import (
    Compacted,
    Kept,
    Line,
    Reading,
    Said,
    Stream,
    checked_usage,
    opening,
    parsed_line,
    timestamp,
)

FORMAT = "codex"
DEFAULT_MODEL = "openai:gpt-5-codex"
"""A session's model until a turn names the one that answers."""
_TYPES = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")
_RETURNS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
PROMPTS_KEPT = 20_000
"""What a compaction keeps of the user's prompts beside the summary, in tokens, the newest
first (``COMPACT_USER_MESSAGE_MAX_TOKENS`` in codex-rs/core/src/compact.rs), with the context
the session started with."""
_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
"""The items of an answer that wait for an output."""
_ANSWERS = ("reasoning", *_CALLS, "web_search_call")
"""The items a model response is made of (besides the assistant's messages)."""
_MIRRORS = frozenset(
    {
        "user_message",
        "agent_message",
        "agent_reasoning",
        "agent_reasoning_raw_content",
        "agent_reasoning_section_break",
        "task_started",
        "task_complete",
        "turn_aborted",
        "context_compacted",
        "exec_command_begin",
        "exec_command_end",
        "patch_apply_begin",
        "patch_apply_end",
        "mcp_tool_call_begin",
        "mcp_tool_call_end",
        "web_search_begin",
        "web_search_end",
        "turn_diff",
        "entered_review_mode",
        "exited_review_mode",
    }
)
"""The events that repeat what the items say, or only what the CLI showed."""


def looks_like(value: dict[str, Any]) -> bool:
    """Whether a transcript's first readable line is one of Codex's."""
    if value.get("type") in _TYPES and isinstance(value.get("payload"), dict):
        return True
    # A rollout from before lines had a type starts with the bare session meta.
    return isinstance(value.get("id"), str) and "instructions" in value and "sessionId" not in value


def _meta(value: dict[str, Any]) -> dict[str, Any] | None:
    if value.get("type") == "session_meta" and isinstance(value.get("payload"), dict):
        payload: dict[str, Any] = value["payload"]
        return payload.get("meta", payload) if isinstance(payload.get("meta"), dict) else payload
    if "type" not in value and isinstance(value.get("id"), str) and "instructions" in value:
        return value
    return None


def file_key(lines: list[Line]) -> str | None:
    """The rollout's session id, from its session meta line; None before that line is there."""
    for line in lines:
        value = parsed_line(line)
        if isinstance(value, dict) and (meta := _meta(value)) is not None:
            return str(meta["id"])
    return None


def _parent(meta: dict[str, Any]) -> str:
    """The session a sub-agent's rollout was spawned by, wherever its meta says it."""
    found: list[str] = []

    def look(value: Any) -> None:
        if isinstance(value, dict):
            for name, item in value.items():
                if name in ("parent_thread_id", "parent_id", "parent_session_id") and isinstance(
                    item, str
                ):
                    found.append(item)
                look(item)

    look(meta.get("source"))
    return found[0] if found else ""


@dataclass(slots=True)
class _Reader:
    key: str
    final: bool
    names: dict[str, str]
    total: int
    reading: Reading
    stream: Stream
    response: Said | None = None
    """The response being read (its items come a line each)."""
    unpriced: Said | None = None
    """The newest response whose usage has not come, and the line it started at."""
    after_unpriced: bool = False
    """Whether a user message came after it (the agent went on: its usage will not come)."""
    loose: tuple[int, RequestUsage] | None = None
    """A usage counted with no response to carry it, and its line: the model call that
    writes a compaction's summary records no item, and its compaction comes after."""
    responses: list[tuple[Said, list[Any]]] = field(default_factory=list)

    def read(self, line: Line) -> None:
        value = parsed_line(line)
        if isinstance(value, str):
            self.reading.broken.append((line.number, value))
            return
        if "record_type" in value:  # an old rollout's note of its own state
            return
        at = timestamp(value.get("timestamp"))
        meta = _meta(value)
        if meta is not None:
            self.stream.parent = self.stream.parent or _parent(meta)
            return
        kind = value.get("type")
        payload = value.get("payload")
        if "payload" not in value and isinstance(kind, str):  # an item from before lines had one
            kind, payload = "response_item", value
        if not isinstance(payload, dict):
            self.stream.units.append(Kept(line.number, str(kind)[:100], line.text))
            return
        try:
            if kind == "response_item":
                self._item(payload, line, at)
            elif kind == "event_msg":
                self._event(payload, line)
            elif kind == "turn_context":
                model = payload.get("model")
                if isinstance(model, str) and model and not self.stream.model:
                    self.stream.model = f"openai:{model}"
            elif kind == "compacted":
                self._compacted(payload, line, at)
            else:
                self.stream.units.append(Kept(line.number, str(kind)[:100], line.text))
        except BodyError as error:
            self.reading.broken.append((line.number, f"{error.field}: {error.message}"))

    def _item(self, payload: dict[str, Any], line: Line, at: Any) -> None:
        item = storable(line.text, payload)
        view = wire.item_view("", item, f"line {line.number}: payload", self.names)
        kind = item.get("type", "message")
        answer = kind in _ANSWERS or item.get("role") == "assistant"
        if isinstance(view, ModelResponse) and answer:
            if self.response is None:
                started = ModelResponse(parts=[], timestamp=at or view.timestamp)
                self.response = Said(started, [], at)
                self.responses.append((self.response, []))
                self.stream.units.append(self.response)
                self.unpriced, self.after_unpriced = self.response, False
            self.response.view.parts = [*self.response.view.parts, *view.parts]
            self.response.lines.append(line.number)
            self.responses[-1][1].append(item)
            return
        self.response = None
        if isinstance(view, ModelResponse):  # an item of the model's this reader cannot place
            view = ModelRequest(parts=[])
        if kind in _RETURNS and self.stream.joined_results(view, line.number):
            return
        view.timestamp = at or view.timestamp
        self.stream.units.append(Said(view, [line.number], at))
        if item.get("role") == "user":
            self.after_unpriced = True
            if not self.stream.title:
                self.stream.title = _title(view)

    def _event(self, payload: dict[str, Any], line: Line) -> None:
        kind = payload.get("type")
        if kind == "token_count":
            self._usage(payload.get("info"), line)
        elif kind not in _MIRRORS:
            self.stream.units.append(Kept(line.number, f"event_msg:{kind}"[:100], line.text))

    def _usage(self, info: Any, line: Line) -> None:
        if not isinstance(info, dict):
            return
        total, last = info.get("total_token_usage"), info.get("last_token_usage")
        if not isinstance(total, dict) or not isinstance(last, dict):
            return
        checked_usage(total, f"line {line.number}: payload.info.total_token_usage")
        checked_usage(last, f"line {line.number}: payload.info.last_token_usage")
        grand = _count(total.get("total_tokens")) or sum(
            _count(total.get(name)) for name in ("input_tokens", "output_tokens")
        )
        if grand <= self.total:  # the same count sent again
            return
        self.total = grand
        if self.unpriced is not None:
            assert isinstance(self.unpriced.view, ModelResponse)
            self.unpriced.view.usage = usage(last)
            self.unpriced = None
        else:
            self.loose = (line.number, usage(last))
        self.response = None

    def _compacted(self, payload: dict[str, Any], line: Line, at: Any) -> None:
        self.response = None
        summary = payload.get("message")
        if not isinstance(summary, str) or not summary:
            summary = _replacement_summary(payload.get("replacement_history"))
        spent = self.loose[1] if self.loose is not None else None
        self.loose = None
        self.stream.units.append(Compacted(summary, "", [line.number], at, spent, PROMPTS_KEPT))

    def finish(self) -> None:
        for said, items in self.responses:
            assert isinstance(said.view, ModelResponse)
            said.view.provider_name = wire.PROVIDER
            said.view.model_name = self.stream.model.removeprefix("openai:") or None
            calls = any(item.get("type") in _CALLS for item in items)
            said.view.finish_reason = "tool_call" if calls else "stop"
        if self.final:
            return
        waiting = [self.loose[0]] if self.loose is not None else []
        if self.unpriced is not None and not self.after_unpriced:
            waiting.append(self.unpriced.lines[0])
        self.reading.hold = min(waiting) if waiting else None


def usage(counts: dict[str, Any]) -> RequestUsage:
    """A response's usage as Codex counted it: like the Responses API's, its input tokens
    count what the cache read too."""
    return RequestUsage(
        input_tokens=_count(counts.get("input_tokens")),
        cache_read_tokens=_count(counts.get("cached_input_tokens")),
        output_tokens=_count(counts.get("output_tokens")),
        details={"reasoning_tokens": _count(counts.get("reasoning_output_tokens"))},
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


_CONTEXT = ("<", "# AGENTS.md instructions")
"""How the context Codex sends as user messages starts (``<environment_context>``,
``<user_instructions>``, the project's AGENTS.md): not a prompt, so not a title."""


def _title(view: ModelRequest) -> str:
    """A prompt's opening words (not the context Codex sends as user messages)."""
    for part in view.parts:
        content = getattr(part, "content", None)
        prompt = part.part_kind == "user-prompt" and isinstance(content, str)
        if prompt and not str(content).lstrip().startswith(_CONTEXT):
            return opening(str(content))
    return ""


def _replacement_summary(history: Any) -> str:
    """The summary in a compaction's new history: its last user message's text."""
    if not isinstance(history, list):
        return ""
    for item in reversed(history):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, list):
                return "\n".join(
                    str(part.get("text", "")) for part in content if isinstance(part, dict)
                )
    return ""


def read(lines: list[Line], key: str, state: dict[str, Any], *, final: bool) -> Reading:
    """What ``lines`` hold (read on from the last read, whose ``state`` it continues). Unless
    the file is done (``final``), the reading holds back from a response whose usage has not
    come yet."""
    reading = Reading()
    stream = reading.stream(key)
    stream.model = str(state.get("model", ""))
    stream.parent = str(state.get("parent", ""))
    reader = _Reader(
        key, final, dict(state.get("names", {})), int(state.get("total", 0)), reading, stream
    )
    for line in lines:
        if line.text.strip():
            reader.read(line)
    reader.finish()
    reading.state = {
        "names": reader.names,
        "total": reader.total,
        "model": stream.model,
        "parent": stream.parent,
    }
    return reading
