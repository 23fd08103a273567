"""The ``offline`` upstream: the offline demo model, answering in each wire format.

It lets the gateway run with no provider and no key: the README's examples, a first try. It
answers as the demo model does (``ctxhub.governance.offline``): with the demo's own tools
offered, it lists and reads this repository's files; with other tools (a coding agent's), it
calls the first of them once per prompt, with the arguments its schema requires, then reports
what came back; with none, it answers in text. Whole or streamed, its answers have the shape the
real API's have, so the real SDKs read them.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.tools import ToolDefinition

from ctxhub.governance.offline.demo import LABEL, respond
from gateway.upstream import Answer, made
from gateway.wire import WireRequest

STREAM_HEADERS = [
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
]
JSON_HEADERS = [("content-type", "application/json")]


def reply(request: WireRequest) -> ModelResponse:
    """The demo model's answer to the request's messages and tools."""
    messages = [message.view for message in request.messages]
    tools = [
        ToolDefinition(
            name=tool["name"],
            description=tool.get("description"),
            parameters_json_schema=tool.get("parameters") or {},
        )
        for tool in request.tools
    ]
    names = {tool.name for tool in tools}
    if tools and not {"list_files", "read_file"} <= names:
        return _other_tools(messages, tools)
    info = AgentInfo(
        function_tools=tools,
        allow_text_output=True,
        output_tools=[],
        model_settings=None,
        model_request_parameters=ModelRequestParameters(function_tools=tools),
        instructions=None,
    )
    return respond(messages, info)


def _other_tools(messages: list[ModelMessage], tools: list[ToolDefinition]) -> ModelResponse:
    """A coding agent's tools: one call of the first, then a report of its result."""
    prompt, results = "", []
    for message in reversed(messages):
        if not isinstance(message, ModelRequest):
            continue
        results += [part for part in message.parts if isinstance(part, ToolReturnPart)]
        prompts = [
            p.content
            for p in message.parts
            if isinstance(p, UserPromptPart) and isinstance(p.content, str)
        ]
        if prompts:
            prompt = prompts[-1]
            break
    if results:
        first = results[-1].model_response_str().strip().splitlines()
        text = (
            f"{LABEL} {results[-1].tool_name} answered: {first[0][:200] if first else '(nothing)'}"
        )
        return ModelResponse(parts=[TextPart(text)], model_name="offline:demo")
    tool = tools[0]
    call = ToolCallPart(
        tool.name,
        _arguments(tool.parameters_json_schema),
        tool_call_id=f"call_{uuid.uuid4().hex[:12]}",
    )
    if not prompt:
        return ModelResponse(parts=[call], model_name="offline:demo")
    return ModelResponse(
        parts=[TextPart(f"{LABEL} Let me use {tool.name}."), call], model_name="offline:demo"
    )


def _arguments(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties")
    required = schema.get("required")
    values: dict[str, Any] = {
        "integer": 1,
        "number": 1,
        "boolean": False,
        "array": [],
        "object": {},
    }
    arguments: dict[str, Any] = {}
    for name in required if isinstance(required, list) else []:
        field = properties.get(name) if isinstance(properties, dict) else None
        kind = field.get("type") if isinstance(field, dict) else None
        arguments[name] = values.get(kind, ".") if isinstance(kind, str) else "."
    return arguments


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _answer(headers: list[tuple[str, str]], chunks: list[bytes]) -> Answer:
    return made(200, headers, chunks)


def _sse(name: str | None, data: Any) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return (f"event: {name}\n" if name else "").encode() + f"data: {text}\n\n".encode()


# --- Anthropic Messages --------------------------------------------------------------------------


def anthropic(request: WireRequest) -> Answer:
    response = reply(request)
    blocks: list[dict[str, Any]] = []
    for part in response.parts:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.content})
        elif isinstance(part, ToolCallPart):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": part.tool_call_id,
                    "name": part.tool_name,
                    "input": part.args_as_dict(),
                }
            )
    stop = "tool_use" if any(block["type"] == "tool_use" for block in blocks) else "end_turn"
    usage = {
        "input_tokens": _tokens(request.text),
        "output_tokens": _tokens(json.dumps(blocks)),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    message = {
        "id": f"msg_offline_{uuid.uuid4().hex[:20]}",
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }
    if not request.stream:
        return _answer(JSON_HEADERS, [json.dumps(message, ensure_ascii=False).encode()])
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events = [_sse("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(blocks):
        empty = {"type": "text", "text": ""} if block["type"] == "text" else {**block, "input": {}}
        events.append(
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": empty},
            )
        )
        if block["type"] == "text":
            deltas = [{"type": "text_delta", "text": word} for word in _words(block["text"])]
        else:
            arguments = json.dumps(block["input"])
            deltas = [
                {"type": "input_json_delta", "partial_json": piece} for piece in _pieces(arguments)
            ]
        events += [
            _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ]
        events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(_sse("message_stop", {"type": "message_stop"}))
    return _answer(STREAM_HEADERS, events)


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [word + (" " if i < len(words) - 1 else "") for i, word in enumerate(words)] or [""]


def _pieces(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


# --- OpenAI Chat Completions ---------------------------------------------------------------------


def openai_chat(request: WireRequest, include_usage: bool) -> Answer:
    response = reply(request)
    text = "".join(part.content for part in response.parts if isinstance(part, TextPart)) or None
    calls: list[dict[str, Any]] = [
        {
            "id": part.tool_call_id,
            "type": "function",
            "function": {"name": part.tool_name, "arguments": json.dumps(part.args_as_dict())},
        }
        for part in response.parts
        if isinstance(part, ToolCallPart)
    ]
    finish = "tool_calls" if calls else "stop"
    prompt_tokens = _tokens(request.text)
    completion_tokens = _tokens(json.dumps([text, calls]))
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    ident, created = f"chatcmpl-offline{uuid.uuid4().hex[:16]}", 0
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    if not request.stream:
        completion = {
            "id": ident,
            "object": "chat.completion",
            "created": created,
            "model": request.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": usage,
        }
        return _answer(JSON_HEADERS, [json.dumps(completion, ensure_ascii=False).encode()])

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        body = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": request.model,
            "choices": [choice],
        }
        return _sse(None, body)

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": word}) for word in (_words(text) if text else [])]
    for index, call in enumerate(calls):
        head = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        events.append(chunk({"tool_calls": [head]}))
        events += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
            for p in _pieces(call["function"]["arguments"])
        ]
    events.append(chunk({}, finish))
    if include_usage:
        body = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": request.model,
            "choices": [],
            "usage": usage,
        }
        events.append(_sse(None, body))
    events.append(_sse(None, "[DONE]"))
    return _answer(STREAM_HEADERS, events)


# --- OpenAI Responses ----------------------------------------------------------------------------


def openai_responses(request: WireRequest) -> Answer:
    """The demo model's answer as a ``response`` object: its text one assistant message, each
    call a ``function_call`` item. Streamed, the events the API sends for them, numbered by
    ``sequence_number``: ``response.created`` and ``response.in_progress``, each item added,
    its text or arguments in deltas, done, and ``response.completed`` with the whole response
    and its usage."""
    answer = reply(request)

    def ident(prefix: str) -> str:
        return f"{prefix}_offline{uuid.uuid4().hex[:24]}"

    output: list[dict[str, Any]] = []
    text = "".join(part.content for part in answer.parts if isinstance(part, TextPart))
    if text:
        content = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        message = {"id": ident("msg"), "type": "message", "status": "completed"}
        output.append({**message, "role": "assistant", "content": [content]})
    output += [
        {
            "id": ident("fc"),
            "type": "function_call",
            "status": "completed",
            "arguments": json.dumps(part.args_as_dict()),
            "call_id": part.tool_call_id,
            "name": part.tool_name,
        }
        for part in answer.parts
        if isinstance(part, ToolCallPart)
    ]
    input_tokens, output_tokens = _tokens(request.text), _tokens(json.dumps(output))
    usage = {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
    echoed = {
        name: request.members[name].value if name in request.members else default
        for name, default in (("instructions", None), ("tools", []), ("metadata", {}))
    }
    response: dict[str, Any] = {
        "id": ident("resp"),
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": request.model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "usage": usage,
        **echoed,
    }
    if not request.stream:
        return _answer(JSON_HEADERS, [json.dumps(response, ensure_ascii=False).encode()])

    events: list[bytes] = []

    def event(kind: str, **fields: Any) -> None:
        events.append(_sse(kind, {"type": kind, "sequence_number": len(events), **fields}))

    start = {**response, "status": "in_progress", "output": [], "usage": None}
    event("response.created", response=start)
    event("response.in_progress", response=start)
    for index, item in enumerate(output):
        at = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            done = item["content"][0]
            added = {**item, "status": "in_progress", "content": []}
            event("response.output_item.added", output_index=index, item=added)
            event("response.content_part.added", **at, content_index=0, part={**done, "text": ""})
            for word in _words(done["text"]):
                event("response.output_text.delta", **at, content_index=0, delta=word, logprobs=[])
            event("response.output_text.done", **at, content_index=0, text=text, logprobs=[])
            event("response.content_part.done", **at, content_index=0, part=done)
        else:
            added = {**item, "status": "in_progress", "arguments": ""}
            event("response.output_item.added", output_index=index, item=added)
            for piece in _pieces(item["arguments"]):
                event("response.function_call_arguments.delta", **at, delta=piece)
            event("response.function_call_arguments.done", **at, arguments=item["arguments"])
        event("response.output_item.done", output_index=index, item=item)
    event("response.completed", response=response)
    return _answer(STREAM_HEADERS, events)


# --- the models list -----------------------------------------------------------------------------

MODEL_ID = "offline-demo"
"""The model the offline upstream lists (it answers whatever model a request names)."""


def models(provider: str, model: str | None) -> dict[str, Any]:
    """The provider's models list (or one model, ``model``) as the offline upstream gives it."""
    named = model or MODEL_ID
    if provider == "anthropic":
        entry = {
            "type": "model",
            "id": named,
            "display_name": "ctxhub offline demo model (answers to any model name)",
            "created_at": "2025-01-01T00:00:00Z",
        }
        if model is not None:
            return entry
        return {"data": [entry], "has_more": False, "first_id": named, "last_id": named}
    listed: dict[str, Any] = {
        "id": named,
        "object": "model",
        "created": 1735689600,
        "owned_by": "ctxhub",
    }
    return listed if model is not None else {"object": "list", "data": [listed]}
