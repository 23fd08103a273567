"""A fake LLM provider speaking the providers' own HTTP wire formats, for the gateway's tests.

``FakeUpstream`` is a small ASGI application written from the providers' documented formats
(Anthropic Messages, OpenAI Chat Completions, OpenAI Responses), not from any project code, so
a test that passes against it shows the gateway speaks the providers' language rather than its
own idea of it. The official ``anthropic`` and ``openai`` SDKs parse every answer it gives.

Routes (every other path answers 404):

- ``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` (Anthropic; base URL ``url``)
- ``POST /v1/chat/completions`` and ``POST /v1/responses`` (OpenAI; base URL ``url + "/v1"``)
- ``GET /v1/models`` and ``GET /v1/models/{id}`` (both: Anthropic's list when the request
  carries ``anthropic-version``, as Anthropic's SDK sends it, else OpenAI's)

What it answers comes from a script (``upstream.script(Text("hi"), ToolCalls(...), ...)``), one
answer a request (count_tokens takes none), else from a default: the first offered tool (or the
one ``tool_choice`` names) is called unless the last user turn already carries a tool result,
otherwise the text "fake answer N" (N counts the requests received since the last reset). A
body the provider would refuse outright (no model, no messages, no ``max_tokens`` for
Anthropic, an unknown role, not JSON) gets the provider's 400 instead. Every request is
recorded, raw body bytes included, in ``upstream.received``; a stream the client left before its
last event counts in ``upstream.cancelled`` (``wait_for_cancelled`` waits for the count: the
fake notices in its own thread).

Usage figures are deterministic: a prompt counts one token for every four bytes of its
canonical JSON (tools, system or instructions, then each message or input item), and the
prompt cache remembers the previous request to the same path: the leading pieces that are
equal to it are read from the cache. See ``PromptUsage`` for how each provider reports that.

Use it through the ``fake_upstream`` fixture, one server for the whole session, reset for every
test::

    from tests.gateway.fake_upstream import fake_upstream

    __all__ = ["fake_upstream"]  # the fixture, imported for pytest

or, for a server of one's own (one a test may stop), ``with running_fake_upstream() as
upstream: ...``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
import uvicorn

ANTHROPIC_MESSAGES = "/v1/messages"
ANTHROPIC_COUNT_TOKENS = "/v1/messages/count_tokens"
CHAT_COMPLETIONS = "/v1/chat/completions"
RESPONSES = "/v1/responses"

CREATED = 1_767_225_600
"""Every answer's creation time (2026-01-01): a fixed one keeps answers deterministic."""

Protocol = Literal["anthropic", "chat", "responses"]


# --- Answers a test can script --------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """A plain text answer."""

    text: str


@dataclass(frozen=True)
class ToolCalls:
    """One or more tool calls, each ``(name, arguments)``; several are parallel calls."""

    calls: Sequence[tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class Thinking:
    """A thinking block with its signature, then the rest of the answer.

    Only Anthropic has thinking blocks; the OpenAI routes answer ``then`` alone."""

    thinking: str
    signature: str
    then: Text | ToolCalls = Text("done thinking")


@dataclass(frozen=True)
class Error:
    """An HTTP error answered as is: the status, the JSON body and the headers given."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Slow:
    """``answer`` with ``delay_per_event`` seconds before each streamed event after the first
    (a non-streaming answer waits once), so a client can go away mid-answer."""

    answer: Text | ToolCalls | Thinking | Error
    delay_per_event: float


Answer = Text | ToolCalls | Thinking | Error | Slow


def anthropic_error(
    status: int, error_type: str, message: str, headers: dict[str, str] | None = None
) -> Error:
    """An error in Anthropic's shape, e.g. ``anthropic_error(529, "overloaded_error", ...)``."""
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return Error(status, body, headers or {})


def openai_error(
    status: int,
    message: str,
    error_type: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Error:
    """An error in OpenAI's shape, e.g. a 400 with ``code="context_length_exceeded"``."""
    body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return Error(status, body, headers or {})


# --- What was received ----------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    """One request as it arrived: the body is the raw bytes, before any parsing."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    """Lower-cased names; a repeated header's values are joined with ", "."""
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


# --- Prompt accounting ----------------------------------------------------------------------


def canonical(value: Any) -> bytes:
    """One JSON spelling for equal values, so equal prompt pieces have equal bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def prompt_pieces(protocol: Protocol, body: dict[str, Any]) -> list[bytes]:
    """The prompt in the order a provider caches it: tools, system, then message by message."""
    pieces = [canonical(body["tools"])] if body.get("tools") else []
    if protocol == "anthropic":
        if body.get("system"):
            pieces.append(canonical(body["system"]))
        pieces += [canonical(message) for message in body.get("messages") or []]
    elif protocol == "chat":
        pieces += [canonical(message) for message in body.get("messages") or []]
    else:
        if body.get("instructions"):
            pieces.append(canonical(body["instructions"]))
        given = body.get("input")
        items = given if isinstance(given, list) else [given] if given else []
        pieces += [canonical(item) for item in items]
    return pieces


@dataclass(frozen=True)
class PromptUsage:
    """A request's prompt tokens and how many of them the simulated cache served.

    OpenAI reports ``total`` as the prompt tokens and ``cached`` as the cached ones. Anthropic
    splits ``total`` three ways that add up to it: ``cached`` is read from the cache, the last
    message is the uncached ``input_tokens`` (a new turn is never in the cache yet) and the rest
    is written to the cache (``cache_creation_input_tokens``)."""

    total: int
    cached: int
    last_message: int

    @property
    def anthropic(self) -> dict[str, int]:
        read = min(self.cached, self.total - self.last_message)
        return {
            "input_tokens": self.last_message,
            "cache_creation_input_tokens": self.total - read - self.last_message,
            "cache_read_input_tokens": read,
        }


def measure_prompt(pieces: list[bytes], previous: list[bytes]) -> PromptUsage:
    """Tokens of ``pieces`` (a byte in four), those of the leading pieces equal to the previous
    request's counting as cached."""
    shared = 0
    for piece, earlier in zip(pieces, previous, strict=False):
        if piece != earlier:
            break
        shared += len(piece)
    total = sum(len(piece) for piece in pieces)
    last = len(pieces[-1]) if pieces else 0
    return PromptUsage(total=total // 4, cached=shared // 4, last_message=last // 4)


def output_tokens(answer: Text | ToolCalls | Thinking) -> int:
    """A deterministic count from the answer's length; never zero, as with the providers."""
    if isinstance(answer, Thinking):
        return len(answer.thinking) // 4 + output_tokens(answer.then)
    if isinstance(answer, ToolCalls):
        return max(1, sum(len(name) + len(canonical(args)) for name, args in answer.calls) // 4)
    return max(1, len(answer.text) // 4)


# --- The default answer ---------------------------------------------------------------------


def offered_tools(protocol: Protocol, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The request's tools as ``(name, JSON schema of the arguments)``."""
    tools = []
    for tool in body.get("tools") or []:
        if protocol == "chat":
            function = tool.get("function") or {}
            name, schema = function.get("name"), function.get("parameters")
        elif protocol == "anthropic":
            name, schema = tool.get("name"), tool.get("input_schema")
        else:
            if tool.get("type") != "function":
                continue
            name, schema = tool.get("name"), tool.get("parameters")
        if name:
            tools.append((name, schema or {}))
    return tools


def chosen_tool(protocol: Protocol, body: dict[str, Any]) -> str | bool:
    """What ``tool_choice`` asks: a tool's name, False for no tool, True to leave it open."""
    choice = body.get("tool_choice")
    if choice in ("none", {"type": "none"}):
        return False
    if isinstance(choice, dict):
        if protocol == "chat":
            return (choice.get("function") or {}).get("name") or True
        return choice.get("name") or True
    return True


def answers_tool_result(protocol: Protocol, body: dict[str, Any]) -> bool:
    """Whether the last user turn carries a tool result (then the default is to answer text,
    not to call the tool again)."""
    if protocol == "anthropic":
        users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
        content = users[-1].get("content") if users else None
        return isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") == "tool_result" for block in content
        )
    if protocol == "chat":
        for message in reversed(body.get("messages") or []):
            if message.get("role") in ("tool", "user"):
                return bool(message.get("role") == "tool")
        return False
    given = body.get("input")
    for item in reversed(given if isinstance(given, list) else []):
        kind = item.get("type", "message")
        if kind == "function_call_output":
            return True
        if kind == "message" and item.get("role") == "user":
            return False
    return False


def default_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """``{}``, except that required string properties get ``"x"`` (a strict tool accepts it)."""
    properties = schema.get("properties") or {}
    return {
        name: "x"
        for name in schema.get("required") or []
        if (properties.get(name) or {}).get("type") == "string"
    }


def default_answer(protocol: Protocol, body: dict[str, Any], number: int) -> Text | ToolCalls:
    """Call the first offered tool (or the one ``tool_choice`` names) unless the last user turn
    answers a tool call; else the text "fake answer <number>"."""
    tools = offered_tools(protocol, body)
    choice = chosen_tool(protocol, body)
    if tools and choice is not False and not answers_tool_result(protocol, body):
        name, schema = next(((n, s) for n, s in tools if n == choice), tools[0])
        return ToolCalls([(name, default_arguments(schema))])
    return Text(f"fake answer {number}")


# --- Rendering answers in each wire format --------------------------------------------------


def pieces_of_text(text: str) -> list[str]:
    """Word by word (spaces kept), so a streamed text arrives in several deltas."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


def pieces_of_json(text: str, parts: int = 3) -> list[str]:
    """Arguments JSON in a few slices cut anywhere, as providers stream it: a client must join
    them before parsing."""
    size = max(1, -(-len(text) // parts))
    return [text[start : start + size] for start in range(0, len(text), size)]


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; the event line only where the provider sends one."""
    text = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {text}\n\n".encode()


def anthropic_message(
    answer: Text | ToolCalls | Thinking,
    body: dict[str, Any],
    usage: PromptUsage,
    message_id: str,
    call_id: Callable[[], str],
) -> dict[str, Any]:
    """A complete Messages API ``message`` object."""
    content: list[dict[str, Any]] = []
    rest: Text | ToolCalls | Thinking = answer
    if isinstance(rest, Thinking):
        content.append({"type": "thinking", "thinking": rest.thinking, "signature": rest.signature})
        rest = rest.then
    if isinstance(rest, ToolCalls):
        for name, arguments in rest.calls:
            content.append({"type": "tool_use", "id": call_id(), "name": name, "input": arguments})
    elif isinstance(rest, Text):
        content.append({"type": "text", "text": rest.text})
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": content,
        "stop_reason": "tool_use" if isinstance(rest, ToolCalls) else "end_turn",
        "stop_sequence": None,
        "usage": {**usage.anthropic, "output_tokens": output_tokens(answer)},
    }


def anthropic_events(message: dict[str, Any]) -> list[bytes]:
    """The documented event sequence that streams ``message``."""
    events = []

    def emit(data: dict[str, Any]) -> None:
        events.append(sse(data, data["type"]))

    started = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {**message["usage"], "output_tokens": 1},
    }
    emit({"type": "message_start", "message": started})
    if not message["content"]:
        emit({"type": "ping"})
    for index, block in enumerate(message["content"]):
        deltas: list[dict[str, Any]]
        if block["type"] == "text":
            opening = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in pieces_of_text(block["text"])]
        elif block["type"] == "tool_use":
            opening = {**block, "input": {}}
            # The first piece is empty, as the API's own streams begin.
            pieces = ["", *pieces_of_json(json.dumps(block["input"]))]
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
        else:
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            thoughts = pieces_of_text(block["thinking"])
            deltas = [{"type": "thinking_delta", "thinking": p} for p in thoughts]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        emit({"type": "content_block_start", "index": index, "content_block": opening})
        if index == 0:
            emit({"type": "ping"})
        for delta in deltas:
            emit({"type": "content_block_delta", "index": index, "delta": delta})
        emit({"type": "content_block_stop", "index": index})
    emit(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        }
    )
    emit({"type": "message_stop"})
    return events


def chat_completion(
    answer: Text | ToolCalls,
    body: dict[str, Any],
    usage: PromptUsage,
    completion_id: str,
    call_id: Callable[[], str],
) -> dict[str, Any]:
    """A complete ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    if isinstance(answer, ToolCalls):
        message["tool_calls"] = [
            {
                "id": call_id(),
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for name, arguments in answer.calls
        ]
    else:
        message["content"] = answer.text
    completion = output_tokens(answer)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": CREATED,
        "model": body.get("model"),
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if isinstance(answer, ToolCalls) else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": usage.total,
            "completion_tokens": completion,
            "total_tokens": usage.total + completion,
            "prompt_tokens_details": {"cached_tokens": usage.cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
    }


def chat_chunks(completion: dict[str, Any], include_usage: bool) -> list[bytes]:
    """The ``chat.completion.chunk`` stream of ``completion``, ending in ``[DONE]``."""
    base = {key: completion[key] for key in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"
    if include_usage:
        base["usage"] = None
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
        return sse({**base, "choices": choices})

    text = message["content"]
    chunks = [chunk({"role": "assistant", "content": "" if text is not None else None})]
    chunks += [chunk({"content": piece}) for piece in pieces_of_text(text or "")]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        opening = {**call, "index": index, "function": {"name": function["name"], "arguments": ""}}
        chunks.append(chunk({"tool_calls": [opening]}))
        for piece in pieces_of_json(function["arguments"]):
            arguments = {"index": index, "function": {"arguments": piece}}
            chunks.append(chunk({"tool_calls": [arguments]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append(sse({**base, "choices": [], "usage": completion["usage"]}))
    chunks.append(sse("[DONE]"))
    return chunks


def response_object(
    answer: Text | ToolCalls,
    body: dict[str, Any],
    usage: PromptUsage,
    response_id: str,
    item_id: Callable[[str], str],
    call_id: Callable[[], str],
) -> dict[str, Any]:
    """A complete, completed Responses API ``response`` object."""
    output: list[dict[str, Any]]
    if isinstance(answer, ToolCalls):
        output = [
            {
                "type": "function_call",
                "id": item_id("fc"),
                "call_id": call_id(),
                "name": name,
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
            for name, arguments in answer.calls
        ]
    else:
        text = {"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []}
        output = [
            {
                "type": "message",
                "id": item_id("msg"),
                "status": "completed",
                "role": "assistant",
                "content": [text],
            }
        ]
    produced = output_tokens(answer)
    return {
        "id": response_id,
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "completed_at": CREATED,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": body.get("model"),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": {
            "input_tokens": usage.total,
            "input_tokens_details": {"cached_tokens": usage.cached, "cache_write_tokens": 0},
            "output_tokens": produced,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.total + produced,
        },
        "user": None,
        "metadata": body.get("metadata") or {},
    }


def response_events(response: dict[str, Any]) -> list[bytes]:
    """The documented event sequence that streams ``response``, numbered from 0."""
    events = []

    def emit(kind: str, **fields: Any) -> None:
        data = {"type": kind, "sequence_number": len(events), **fields}
        events.append(sse(data, kind))

    pending = {**response, "status": "in_progress", "completed_at": None, "output": []}
    pending["usage"] = None
    emit("response.created", response=pending)
    emit("response.in_progress", response=pending)
    for index, item in enumerate(response["output"]):
        at = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            for part_index, part in enumerate(item["content"]):
                at_part = {**at, "content_index": part_index}
                emit("response.content_part.added", **at_part, part={**part, "text": ""})
                for piece in pieces_of_text(part["text"]):
                    emit("response.output_text.delta", **at_part, delta=piece, logprobs=[])
                emit("response.output_text.done", **at_part, text=part["text"], logprobs=[])
                emit("response.content_part.done", **at_part, part=part)
        else:
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            for piece in pieces_of_json(item["arguments"]):
                emit("response.function_call_arguments.delta", **at, delta=piece)
            emit("response.function_call_arguments.done", **at, arguments=item["arguments"])
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=response)
    return events


def invalid_request(protocol: Protocol, body: Any, counting: bool = False) -> str | None:
    """Why the provider would refuse ``body`` outright (only what every request needs;
    ``counting`` for count_tokens, which takes no ``max_tokens``)."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if not body.get("model"):
        return "model: field required"
    if protocol == "responses":
        return None
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: a non-empty list is required"
    roles = {"user", "assistant"}
    if protocol == "chat":
        roles |= {"system", "developer", "tool"}
    elif not counting and not isinstance(body.get("max_tokens"), int):
        return "max_tokens: field required"
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in roles:
            return f"messages.{index}.role: one of {sorted(roles)} is required"
    return None


def refusal(protocol: Protocol, message: str) -> Error:
    """A 400 in the provider's own error shape."""
    if protocol == "anthropic":
        return anthropic_error(400, "invalid_request_error", message)
    return openai_error(400, message)


# --- The ASGI application -------------------------------------------------------------------

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]

ROUTES: dict[str, Protocol] = {
    ANTHROPIC_MESSAGES: "anthropic",
    ANTHROPIC_COUNT_TOKENS: "anthropic",
    CHAT_COMPLETIONS: "chat",
    RESPONSES: "responses",
}


@dataclass
class Reply:
    """What to send back: a JSON body, or a stream of events."""

    status: int
    headers: dict[str, str]
    json: Any = None
    events: list[bytes] | None = None


FAKE_MODELS = ("claude-sonnet-4-6", "claude-haiku-4-5")


def models_reply(request: Received) -> Reply:
    """``GET /v1/models`` (a list) or ``/v1/models/{id}`` (one), in the provider's shape."""
    named = request.path.split("/")[3:]
    ids = [named[0]] if named else list(FAKE_MODELS)
    if named and named[0] not in FAKE_MODELS:
        error = {"type": "not_found_error", "message": f"model: {named[0]}"}
        return Reply(404, {}, json={"type": "error", "error": error})
    if "anthropic-version" in request.headers:
        entries = [
            {"type": "model", "id": i, "display_name": i, "created_at": "2025-05-14T00:00:00Z"}
            for i in ids
        ]
        if named:
            return Reply(200, {}, json=entries[0])
        listed = {"data": entries, "has_more": False, "first_id": ids[0], "last_id": ids[-1]}
        return Reply(200, {"request-id": "req_fake_models"}, json=listed)
    objects = [{"id": i, "object": "model", "created": 1747180800, "owned_by": "fake"} for i in ids]
    if named:
        return Reply(200, {}, json=objects[0])
    return Reply(200, {"x-request-id": "req_fake_models"}, json={"object": "list", "data": objects})


class FakeUpstream:
    """The fake provider: its script, what it received, and the ASGI app serving both."""

    def __init__(self) -> None:
        self.url = ""
        """``http://127.0.0.1:PORT`` once served: Anthropic's base URL; OpenAI's adds ``/v1``."""
        self.received: list[Received] = []
        self.cancelled = 0
        """Answers cut short because the client went away before the last event."""
        self._script: deque[Answer] = deque()
        self._previous_prompt: dict[str, list[bytes]] = {}
        self._ids = itertools.count(1)
        self._epoch = 0

    def script(self, *answers: Answer) -> None:
        """Queue answers, one for each coming request (count_tokens takes none)."""
        self._script.extend(answers)

    def bodies(self, path: str) -> list[Any]:
        """The parsed JSON body of every request received at ``path``, in order."""
        return [request.json() for request in self.received if request.path == path]

    def reset(self) -> None:
        """Forget recordings, script, cache and counters, as a fresh fake would have them.

        Requests still being answered when this is called no longer count as cancelled."""
        self._epoch += 1
        self.received.clear()
        self._script.clear()
        self._previous_prompt.clear()
        self._ids = itertools.count(1)
        self.cancelled = 0

    def wait_for_cancelled(self, count: int = 1, timeout: float = 5.0) -> None:
        """Wait until ``count`` answers were cut short: the fake notices a client's going away
        in its own thread, a moment after the client closed."""
        deadline = time.monotonic() + timeout
        while self.cancelled < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.cancelled} cancelled answers, expected {count}")
            time.sleep(0.005)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        request = Received(
            method=scope["method"],
            path=scope["path"],
            query=scope["query_string"].decode("latin-1"),
            headers=headers,
            body=body,
        )
        self.received.append(request)
        epoch = self._epoch

        # The client's going away is only visible through ``receive``: watch it meanwhile.
        gone = asyncio.Event()
        watcher = asyncio.create_task(_watch_disconnect(receive, gone))
        try:
            reply, delay = self._answer(request)
            # A stream's pauses fall between its events; a JSON answer pauses once, before.
            if delay and reply.events is None and not await _still_there(gone, delay):
                self._note_cancelled(epoch)
                return
            if not await _send_reply(send, reply, delay, gone):
                self._note_cancelled(epoch)
        finally:
            watcher.cancel()

    def _note_cancelled(self, epoch: int) -> None:
        if epoch == self._epoch:
            self.cancelled += 1

    def _answer(self, request: Received) -> tuple[Reply, float]:
        """The reply to ``request`` and the pause before it (and between its events)."""
        if request.method == "GET" and request.path.split("/")[1:3] == ["v1", "models"]:
            return models_reply(request), 0.0
        protocol = ROUTES.get(request.path)
        if request.method != "POST" or protocol is None:
            body = {"error": {"type": "not_found_error", "message": f"no route {request.path}"}}
            return Reply(404, {}, json=body), 0.0
        try:
            body = request.json()
        except ValueError:
            body = None
        counting = request.path == ANTHROPIC_COUNT_TOKENS
        problem = invalid_request(protocol, body, counting)
        if problem is not None:
            return _error_reply(refusal(protocol, problem)), 0.0
        pieces = prompt_pieces(protocol, body)
        if counting:
            return Reply(200, {}, json={"input_tokens": measure_prompt(pieces, []).total}), 0.0

        number = len(self.received)
        answer = self._script.popleft() if self._script else default_answer(protocol, body, number)
        delay = 0.0
        if isinstance(answer, Slow):
            answer, delay = answer.answer, answer.delay_per_event
        if isinstance(answer, Error):
            return _error_reply(answer), delay

        usage = measure_prompt(pieces, self._previous_prompt.get(request.path, []))
        self._previous_prompt[request.path] = pieces
        stream = body.get("stream") is True
        if protocol == "anthropic":
            message = anthropic_message(
                answer, body, usage, f"msg_fake_{number}", functools.partial(self._item_id, "toolu")
            )
            if stream:
                return _stream_reply(anthropic_events(message)), delay
            return Reply(200, {"request-id": f"req_fake_{number}"}, json=message), delay
        if isinstance(answer, Thinking):
            answer = answer.then
        call_id = functools.partial(self._item_id, "call")
        if protocol == "chat":
            completion = chat_completion(answer, body, usage, f"chatcmpl-fake-{number}", call_id)
            if stream:
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return _stream_reply(chat_chunks(completion, include_usage)), delay
            return Reply(200, {"x-request-id": f"req_fake_{number}"}, json=completion), delay
        response = response_object(
            answer, body, usage, f"resp_fake_{number}", self._item_id, call_id
        )
        if stream:
            return _stream_reply(response_events(response)), delay
        return Reply(200, {"x-request-id": f"req_fake_{number}"}, json=response), delay

    def _item_id(self, prefix: str) -> str:
        """Unique within the fake and the same on every run: ``toolu_fake_3``, ``call_fake_4``."""
        return f"{prefix}_fake_{next(self._ids)}"


def _error_reply(error: Error) -> Reply:
    return Reply(error.status, dict(error.headers), json=error.body)


def _stream_reply(events: list[bytes]) -> Reply:
    headers = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
    return Reply(200, headers, events=events)


async def _watch_disconnect(receive: Receive, gone: asyncio.Event) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.set()


async def _still_there(gone: asyncio.Event, delay: float) -> bool:
    """Wait ``delay`` seconds; False as soon as the client goes away."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(gone.wait(), delay)
    return not gone.is_set()


async def _send_reply(send: Send, reply: Reply, delay: float, gone: asyncio.Event) -> bool:
    """Send ``reply``, its events ``delay`` apart; False if the client went away first."""
    if reply.events is None:
        headers = {"content-type": "application/json", **reply.headers}
        await send(
            {"type": "http.response.start", "status": reply.status, "headers": _raw(headers)}
        )
        await send({"type": "http.response.body", "body": json.dumps(reply.json).encode()})
        return True
    start = {"type": "http.response.start", "status": reply.status, "headers": _raw(reply.headers)}
    await send(start)
    for index, event in enumerate(reply.events):
        if index and delay and not await _still_there(gone, delay):
            return False
        if gone.is_set():
            return False
        await send({"type": "http.response.body", "body": event, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
    return True


def _raw(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode(), value.encode()) for name, value in headers.items()]


# --- Serving it -----------------------------------------------------------------------------


@contextlib.contextmanager
def running_fake_upstream() -> Iterator[FakeUpstream]:
    """A ``FakeUpstream`` served by uvicorn on a free port of 127.0.0.1 from a thread, ready
    for connections when this yields and stopped on leaving."""
    upstream = FakeUpstream()
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    config = uvicorn.Config(
        upstream, lifespan="off", log_level="warning", access_log=False, timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listening]}, name="fake-upstream", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the fake upstream did not start")
        time.sleep(0.002)
    upstream.url = f"http://127.0.0.1:{port}"
    try:
        yield upstream
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listening.close()


SERVED = pytest.StashKey[FakeUpstream]()


@pytest.fixture
def fake_upstream(request: pytest.FixtureRequest) -> FakeUpstream:
    """The session's fake provider, reset for this test: nothing received, nothing scripted,
    an empty cache, counters from 1.

    One server serves the whole session, started on first use and stopped when the session
    ends: stopping uvicorn takes a tenth of a second, too much to pay in every test."""
    config = request.config
    if SERVED not in config.stash:
        serving = contextlib.ExitStack()
        config.stash[SERVED] = serving.enter_context(running_fake_upstream())
        config.add_cleanup(serving.close)
    upstream = config.stash[SERVED]
    upstream.reset()
    return upstream
