"""Claude Code's transcripts: ``~/.claude/projects/<project>/<session>.jsonl``.

Each line is one JSON object. Those of the conversation (``type`` user or assistant) carry a
``message`` in the Messages API's shape, the ``sessionId`` of the session and a ``timestamp``.
What this reader makes of the rest:

- **A response is written a content block a line** (thinking, text, each tool use), the lines
  sharing ``message.id``; each repeats the usage, the last with the final output count. They
  are one response here, with the usage of the line that counted most.
- **A user line is a message** (a prompt, an injected note), but for the results of one
  response's calls, written a line each: they are one request, as the model got them.
- **A compaction** is a ``system`` line of subtype ``compact_boundary`` (``compactMetadata``:
  ``trigger`` manual or auto, ``preTokens``) followed by a user line marked
  ``isCompactSummary`` holding the summary the model wrote: one compaction here, that summary
  standing for everything before it.
- **Sub-agents** (the Task tool) write their own conversation, each line marked
  ``isSidechain`` with the sub-agent's ``agentId``, in the parent's file (older versions), in
  ``agent-<agentId>.jsonl`` beside it, or in ``<session>/subagents/``; the ``sessionId`` is the
  parent's in all three. Each is a session of its own here, linked to its parent's.
- **Every other line** (``summary``, which titles the conversation ending with its
  ``leafUuid``, when that is in the file; ``file-history-snapshot``,
  ``queue-operation``, ``system`` lines that are not compactions, and types newer than this
  reader) is kept as it was.

The lines are threaded by ``parentUuid``; they are read here in the order they were written,
which is the conversation's but for a rewind (a branch the agent abandoned is read as if it
went on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from gateway.wire import BodyError, storable
from gateway.wire import anthropic as wire
from transcripts.reading import (
    Compacted,
    Kept,
    Line,
    Reading,
    Said,
    Stream,
    Titled,
    checked_usage,
    opening,
    parsed_line,
    timestamp,
)

FORMAT = "claude-code"
DEFAULT_MODEL = "anthropic:claude-sonnet-4-5"
"""A session's model until a response names the one that answered."""
_CONVERSATION = ("user", "assistant")


def file_key(lines: list[Line]) -> str | None:
    """The agent's id of the session a file holds, from its first line that names one (a
    sub-agent's file: its parent's and its own); None when no line does yet."""
    for line in lines:
        value = parsed_line(line)
        if isinstance(value, dict) and isinstance(value.get("sessionId"), str):
            return _source(value)
    return None


def looks_like(value: dict[str, Any]) -> bool:
    """Whether a transcript's first readable line is one of Claude Code's."""
    return "sessionId" in value or value.get("type") in ("summary", "file-history-snapshot")


def _source(value: dict[str, Any], routes: dict[str, str] | None = None) -> str:
    """The session a line belongs to. A sub-agent's line names its agent; one written before
    agents were named belongs to the sub-agent its ``parentUuid`` does (``routes``), or starts
    one."""
    session = str(value["sessionId"])
    if value.get("isSidechain") is not True:
        return session
    agent = value.get("agentId")
    if isinstance(agent, str) and agent:
        return f"{session}/agent-{agent}"
    if routes is None:
        return session
    uuid, parent = value.get("uuid"), value.get("parentUuid")
    source = routes.get(parent) if isinstance(parent, str) else None
    if source is None:
        source = f"{session}/sidechain-{str(uuid)[:12]}"
    if isinstance(uuid, str):
        routes[uuid] = source
    return source


@dataclass(slots=True)
class _Response:
    """A response being read, line by line."""

    said: Said
    blocks: list[Any]
    head: dict[str, Any]
    total: int = -1


@dataclass(slots=True)
class _Reader:
    key: str
    final: bool
    names: dict[str, str]
    routes: dict[str, str]
    reading: Reading
    responses: list[_Response] = field(default_factory=list)
    open: dict[str, _Response] = field(default_factory=dict)
    """By stream: its response whose lines may not all have been read."""
    boundary: dict[str, Compacted] = field(default_factory=dict)
    """By stream: a compaction whose summary line has not come yet."""
    summaries: list[tuple[int, str, str]] = field(default_factory=list)
    """The ``summary`` lines: line, the message they sum up to (``leafUuid``), the summary."""
    said: dict[str, str] = field(default_factory=dict)
    """The stream of each conversation line read, by its uuid."""
    last: dict[str, tuple[str, int]] = field(default_factory=dict)
    """By stream: the type of its last line of the conversation, and where that line ended."""

    def read(self, line: Line) -> None:
        value = parsed_line(line)
        if isinstance(value, str):
            self.reading.broken.append((line.number, value))
            return
        kind = value.get("type")
        named = isinstance(value.get("sessionId"), str)
        source = _source(value, self.routes) if named else self.key
        stream = self.reading.stream(source)
        if named and source != value["sessionId"] and not stream.parent:
            stream.parent = str(value["sessionId"])  # a sub-agent's line names its parent
        if kind in _CONVERSATION and isinstance(value.get("message"), dict):
            if isinstance(value.get("uuid"), str):
                self.said[value["uuid"]] = stream.source
            try:
                self._conversation(stream, value, line)
            except BodyError as error:
                self.reading.broken.append((line.number, f"{error.field}: {error.message}"))
            return
        if kind == "system" and value.get("subtype") == "compact_boundary":
            meta = value.get("compactMetadata")
            meta = meta if isinstance(meta, dict) else {}
            trigger = meta.get("trigger")
            self._close(stream)
            self.boundary[stream.source] = Compacted(
                summary="",
                trigger=trigger if trigger in ("manual", "auto") else "",
                lines=[line.number],
                at=timestamp(value.get("timestamp")),
            )
            self.last[stream.source] = ("boundary", line.number)
            return
        if kind == "summary" and isinstance(value.get("summary"), str):
            self.summaries.append((line.number, str(value.get("leafUuid")), value["summary"]))
        stream.units.append(Kept(line.number, str(kind)[:100], line.text))

    def _conversation(self, stream: Stream, value: dict[str, Any], line: Line) -> None:
        message = storable(line.text, value["message"])
        at = timestamp(value.get("timestamp"))
        field_name = f"line {line.number}: message"
        if value["type"] == "assistant":
            self._response(stream, message, line, at)
            return
        view = wire.message_view("", message, field_name, self.names)
        self._close(stream)
        if value.get("isCompactSummary") is True:
            self._compacted(stream, view, line)
            return
        if not isinstance(view, ModelRequest):  # a user line is the user's
            raise BodyError(f"{field_name}.role", "must be user on a user line")
        if stream.joined_results(view, line.number):
            self.last[stream.source] = ("user", line.number)
            return
        view.timestamp = at or view.timestamp
        stream.units.append(Said(view, [line.number], at))
        prompt = _prompt(view)
        # Not a title: a note Claude Code injected (isMeta), a slash command's markup.
        if not stream.title and value.get("isMeta") is not True and not prompt.startswith("<"):
            stream.title = opening(prompt)
        self.last[stream.source] = ("user", line.number)

    def _response(self, stream: Stream, message: dict[str, Any], line: Line, at: Any) -> None:
        # Checked as a message of its own, so that a bad block names its line.
        wire.message_view("", message, f"line {line.number}: message", self.names)
        usage = message.get("usage")
        checked_usage(usage, f"line {line.number}: message.usage")
        cache = usage.get("cache_creation") if isinstance(usage, dict) else None
        checked_usage(cache, f"line {line.number}: message.usage.cache_creation")
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        ident = message.get("id")
        current = self.open.get(stream.source)
        if current is None or not isinstance(ident, str) or current.head.get("id") != ident:
            self._close(stream)
            head = {key: item for key, item in message.items() if key != "content"}
            view = ModelResponse(parts=[])
            current = _Response(Said(view, [], at), [], head)
            stream.units.append(current.said)  # its view is made once its lines are read
            self.open[stream.source] = current
            self.responses.append(current)
            model = head.get("model")
            if not stream.model and isinstance(model, str) and not model.startswith("<"):
                stream.model = f"anthropic:{model}"
        current.blocks.extend(blocks)
        current.said.lines.append(line.number)
        total = _total(usage)
        if total >= current.total:
            current.total = total
            current.head = {key: item for key, item in message.items() if key != "content"}
        self.last[stream.source] = ("assistant", current.said.lines[0])

    def _close(self, stream: Stream) -> None:
        self.open.pop(stream.source, None)

    def _compacted(self, stream: Stream, view: ModelMessage, line: Line) -> None:
        compaction = self.boundary.pop(stream.source, None) or Compacted(
            "", "", [], timestamp(None)
        )
        compaction.summary = _prompt(view)
        compaction.lines.append(line.number)
        stream.units.append(compaction)
        self.last[stream.source] = ("summary", line.number)

    def finish(self) -> None:
        """Where the next read must start: before the first group that may still grow (a
        response whose last line may not be written yet, a compaction without its summary),
        unless the file is done."""
        for line, leaf, summary in self.summaries:
            # Claude Code names a conversation by its last message; a summary of another
            # session's (one it resumed from) titles nothing here.
            if leaf in self.said:
                self.reading.stream(self.said[leaf]).units.append(Titled(line, summary[:200]))
        for response in self.responses:
            view = wire.response_view(response.blocks, response.head)
            view.timestamp = response.said.at or view.timestamp
            response.said.view = view
        if self.final:
            for stream in self.reading.streams.values():
                if (compaction := self.boundary.pop(stream.source, None)) is not None:
                    stream.units.append(compaction)  # its summary never came
            return
        starts = [line for kind, line in self.last.values() if kind in ("assistant", "boundary")]
        self.reading.hold = min(starts) if starts else None


def _total(usage: Any) -> int:
    if not isinstance(usage, dict):
        return 0
    return sum(
        value
        for name in (
            "input_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "output_tokens",
        )
        if isinstance(value := usage.get(name), int)
    )


def _prompt(view: ModelMessage) -> str:
    return "\n".join(
        part.content
        for part in view.parts
        if part.part_kind == "user-prompt" and isinstance(part.content, str)
    )


def read(lines: list[Line], key: str, state: dict[str, Any], *, final: bool) -> Reading:
    """What ``lines`` hold (read on from the last read, whose ``state`` it continues). Unless
    the file is done (``final``), the reading holds back from a group its agent may still be
    writing."""
    names, routes = dict(state.get("names", {})), dict(state.get("routes", {}))
    reading = Reading()
    reading.stream(key)
    reader = _Reader(key, final, names, routes, reading)
    for line in lines:
        if line.text.strip():
            reader.read(line)
    reader.finish()
    reading.state = {"names": names, "routes": routes}
    return reading
