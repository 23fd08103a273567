"""Anthropic's Messages API (``POST /v1/messages``), as Claude Code and the Anthropic SDK speak it.

The system prompt is the request's ``system`` member, not a message; the session keeps it as
its first message (a request of one system prompt part) so that it is counted, shown and
pinned like any head, and the chain roots a sub-agent (another system prompt) elsewhere. It is
always sent as the client wrote it.

Every content block maps to one part, in order, so a changed part rewrites its own block and
leaves its neighbours' JSON alone. Blocks pydantic-ai has no part for (server tool use, search
results, blocks newer than this module) become text parts of their JSON for counting, and go
upstream as the client sent them unless governance changed them.
"""

from __future__ import annotations

import base64
import binascii
import json
from functools import partial
from typing import Any

from pydantic_ai.messages import (
    BinaryContent,
    DocumentUrl,
    FinishReason,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from gateway.wire import (
    StoredResponse,
    WireMessage,
    WireRequest,
    one_message,
    read_messages,
    storable,
)
from gateway.wire.spans import (
    BodyError,
    Span,
    object_spans,
    optional_list,
    read_body,
    replace_items,
    required_string,
)
from gateway.wire.sse import Event

WIRE = "anthropic"
PROVIDER = "anthropic"
SYSTEM = "system"
"""The ``role`` of the system prompt's message in the session (not a role Anthropic knows)."""

_FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_call",
    "refusal": "content_filter",
}


def parse(body: bytes) -> WireRequest:
    """A Messages request read: a BodyError names the first field that is wrong."""
    text, members = read_body(body, arrays=frozenset({"messages"}), reader=WIRE)
    model = required_string(members, "model")
    messages_span = members.get("messages")
    if messages_span is None:
        raise BodyError("messages", "required")
    messages = [_system(members["system"])] if "system" in members else []
    messages += read_messages(WIRE, messages_span, "messages", _message)
    tools = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(optional_list(members, "tools"))]
    metadata = members["metadata"].value if "metadata" in members else None
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    stream = members["stream"].value if "stream" in members else False
    if not isinstance(stream, bool):
        raise BodyError("stream", "must be true or false")
    return WireRequest(
        wire=WIRE,
        text=text,
        members=members,
        messages=messages,
        tools=tools,
        model=model,
        stream=stream,
        client_session=user_id if isinstance(user_id, str) and user_id else None,
        title=_first_prompt(messages),
    )


def _system(span: Span) -> WireMessage:
    value = storable(span.text, span.value)
    if isinstance(value, str):
        content = value
    elif isinstance(value, list) and all(
        isinstance(block, dict) and isinstance(block.get("text"), str) for block in value
    ):
        content = "\n\n".join(block["text"] for block in value)
    else:
        raise BodyError("system", "must be a string or an array of text blocks")
    wrapped = {"role": SYSTEM, "content": value}
    raw = f'{{"role":"{SYSTEM}","content":{span.text}}}'
    return WireMessage(raw, wrapped, ModelRequest(parts=[SystemPromptPart(content)]))


def _message(span: Span, field: str, names: dict[str, str]) -> WireMessage:
    value = _checked_message(storable(span.text, span.value), field)
    _named_calls(value, names)
    return WireMessage(span.text, value, build=partial(_view, value, names))


def message_view(raw: str, value: Any, field: str, names: dict[str, str]) -> ModelMessage:
    """pydantic-ai's view of one message read outside a request (a line of a transcript): its
    JSON ``raw`` and parsed ``value``; ``names`` as for a request's messages. BodyError, naming
    ``field``, when it is not a message."""
    checked = _checked_message(storable(raw, value), field)
    _named_calls(checked, names)
    return _view(checked, names)


def response_view(blocks: list[Any], head: dict[str, Any]) -> ModelResponse:
    """A response's view from its content ``blocks`` and the response's other members
    (``head``: model, id, stop reason, usage), as a whole response body would give them."""
    return _stored("", blocks, head).view


def _checked_message(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BodyError(field, "must be an object")
    if value.get("role") not in ("user", "assistant"):
        raise BodyError(f"{field}.role", "must be user or assistant")
    content = value.get("content")
    if isinstance(content, str):
        return value
    if not isinstance(content, list):
        raise BodyError(f"{field}.content", "must be a string or an array of blocks")
    for i, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise BodyError(f"{field}.content[{i}]", "must be a block with a type")
        if block["type"] == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            raise BodyError(f"{field}.content[{i}].tool_use_id", "required, a string")
    return value


def _named_calls(value: dict[str, Any], names: dict[str, str]) -> None:
    """The tool names of an assistant message's calls, by id: a result names only its call."""
    if value["role"] != "assistant" or isinstance(value["content"], str):
        return
    for block in value["content"]:
        call_id, name = block.get("id"), block.get("name")
        if block["type"] == "tool_use" and isinstance(call_id, str) and isinstance(name, str):
            names[call_id] = name


def _tool(tool: Any, field: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise BodyError(f"{field}.name", "required, a string")
    schema = tool.get("input_schema")
    description = tool.get("description")
    return {
        "name": tool["name"],
        "description": description if isinstance(description, str) else None,
        # A server tool (web search, code execution) has a type and no schema.
        "parameters": schema if isinstance(schema, dict) else {},
    }


def _blocks(value: dict[str, Any]) -> list[dict[str, Any]]:
    content = value["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _view(value: dict[str, Any], names: dict[str, str]) -> ModelMessage:
    blocks = _blocks(value)
    if value["role"] == "assistant":
        parts = [_response_part(block, names) for block in blocks]
        return ModelResponse(parts=parts, provider_name=PROVIDER)
    return ModelRequest(parts=[_request_part(block, names) for block in blocks])


def _unknown(block: dict[str, Any]) -> str:
    return json.dumps(block, ensure_ascii=False)


def _response_part(block: dict[str, Any], names: dict[str, str]) -> ModelResponsePart:
    kind = block["type"]
    if kind == "text" and isinstance(block.get("text"), str):
        return TextPart(block["text"])
    if (
        kind == "tool_use"
        and isinstance(block.get("id"), str)
        and isinstance(block.get("name"), str)
    ):
        names[block["id"]] = block["name"]
        return ToolCallPart(block["name"], block.get("input") or {}, tool_call_id=block["id"])
    if kind == "thinking" and isinstance(block.get("thinking"), str):
        signature = block.get("signature")
        return ThinkingPart(
            block["thinking"],
            signature=signature if isinstance(signature, str) else None,
            provider_name=PROVIDER,
        )
    if kind == "redacted_thinking" and isinstance(block.get("data"), str):
        return ThinkingPart(
            "", id="redacted_thinking", signature=block["data"], provider_name=PROVIDER
        )
    return TextPart(_unknown(block))


def _request_part(block: dict[str, Any], names: dict[str, str]) -> ModelRequestPart:
    kind = block["type"]
    if kind == "text" and isinstance(block.get("text"), str):
        return UserPromptPart(block["text"])
    if kind == "tool_result":
        call_id = block["tool_use_id"]  # checked with the message
        content = _result_content(block.get("content"))
        name = names.get(call_id, "tool")
        failed = block.get("is_error") is True
        return ToolReturnPart(
            name, content, tool_call_id=call_id, outcome="failed" if failed else "success"
        )
    if kind in ("image", "document"):
        media = _media(block.get("source"), kind)
        if media is not None:
            return UserPromptPart([media])
    return UserPromptPart(_unknown(block))


def _result_content(content: Any) -> str | list[Any]:
    """A tool result's content: its text, and the images and documents in it as media (counted
    by their size, not as the text of their base64)."""
    if not isinstance(content, list):
        return _result_text(content)
    read = [(block, _block_media(block)) for block in content]
    media = [found for _, found in read if found is not None]
    if not media:
        return _result_text(content)
    texts = [block for block, found in read if found is None]
    return [_result_text(texts), *media] if texts else media


def _block_media(block: Any) -> UserContent | None:
    """The image or document a content block carries, as media; None for any other block."""
    if not isinstance(block, dict) or block.get("type") not in ("image", "document"):
        return None
    found = _media(block.get("source"), block["type"])
    return None if isinstance(found, str) else found


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            block["text"]
            if isinstance(block, dict) and isinstance(block.get("text"), str)
            else _unknown(block)
            if isinstance(block, dict)
            else str(block)
            for block in content
        )
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def _media(source: Any, kind: str) -> UserContent | None:
    if not isinstance(source, dict):
        return None
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return ImageUrl(source["url"]) if kind == "image" else DocumentUrl(source["url"])
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        try:
            data = base64.b64decode(source["data"], validate=True)
        except (binascii.Error, ValueError):
            return None
        media_type = source.get("media_type")
        fallback = "image/png" if kind == "image" else "application/pdf"
        return BinaryContent(
            data, media_type=media_type if isinstance(media_type, str) else fallback
        )
    text = source.get("data")
    return text if source.get("type") == "text" and isinstance(text, str) else None


def _first_prompt(messages: list[WireMessage]) -> str:
    for message in messages:
        if isinstance(message.view, ModelRequest):
            for part in message.view.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


# --- writing a governed request back -----------------------------------------------------------


def body(request: WireRequest, messages: list[str]) -> bytes:
    """The client's body with its messages replaced by ``messages`` (JSON texts; the system
    prompt's message is left out: the client's ``system`` member stays as it was)."""
    kept = [text for text in messages if not text.startswith(f'{{"role":"{SYSTEM}"')]
    originals = (m.raw for m in request.messages if m.value.get("role") != SYSTEM)
    return replace_items(request.text, request.members["messages"], kept, originals).encode()


MAX_BREAKPOINTS = 4
"""Anthropic's limit of ``cache_control`` breakpoints in one request."""
BREAKPOINT = {"type": "ephemeral"}


def with_breakpoint(request: WireRequest, messages: list[str]) -> list[str]:
    """The governed messages with a cache breakpoint at their end, where the prompt cache pays:
    between the Governor's actions the next request is this one with new messages after it, so
    all of this one is the stable prefix. The client's own breakpoints stay where it put them;
    none is added when the last block has one or the request already holds the four allowed."""
    if not messages or _breakpoints(request, messages) >= MAX_BREAKPOINTS:
        return messages
    last = json.loads(messages[-1])
    blocks = _blocks(last)
    if last.get("role") == SYSTEM or not blocks or "cache_control" in blocks[-1]:
        return messages
    blocks = [*blocks[:-1], {**blocks[-1], "cache_control": BREAKPOINT}]
    return [*messages[:-1], json.dumps({**last, "content": blocks}, ensure_ascii=False)]


def _breakpoints(request: WireRequest, messages: list[str]) -> int:
    """The breakpoints the request holds: in the client's system prompt and tools, and in the
    messages sent (as a key, ``"cache_control"`` is never inside a JSON string, where its
    quotes would be escaped)."""
    head = [request.members[name].text for name in ("system", "tools") if name in request.members]
    return sum(text.count('"cache_control"') for text in (*head, *messages))


def render(view: ModelMessage, stored: WireMessage | None, changed: frozenset[int] | None) -> str:
    """A governed message as JSON text. ``stored``: the client's message it stands for (None:
    one governance added); ``changed``: the indexes of the parts governance rewrote in place
    (None: it changed the message's shape, parts added, dropped or moved). Unchanged, it is the
    client's own text; with parts rewritten in place, the client's message with those blocks
    rewritten and every other block and member as it was; otherwise written afresh. The system
    prompt goes as the client's ``system`` member, whatever governance made of it."""
    if stored is not None and (stored.value.get("role") == SYSTEM or changed == frozenset()):
        return stored.raw  # the common case, answered without reading the message again
    if stored is not None and changed and len(view.parts) == len(stored.view.parts):
        blocks = [
            _rewritten(block, part) if index in changed else block
            for index, (block, part) in enumerate(
                zip(_blocks(stored.value), view.parts, strict=True)
            )
        ]
        return json.dumps({**stored.value, "content": blocks}, ensure_ascii=False)
    role = "assistant" if isinstance(view, ModelResponse) else "user"
    return json.dumps(
        {"role": role, "content": [_block(part) for part in view.parts]}, ensure_ascii=False
    )


def _rewritten(block: dict[str, Any], part: Any) -> dict[str, Any]:
    if block["type"] == "tool_result" and isinstance(part, ToolReturnPart | RetryPromptPart):
        text = part.model_response_str() if isinstance(part, ToolReturnPart) else _retry_text(part)
        original = block.get("content")
        listed = original if isinstance(original, list) else []
        kept = [item for item in listed if _block_media(item) is not None]
        if kept and isinstance(part, ToolReturnPart) and part.files:
            # Governance rewrote the text; the images and documents go as the client sent them.
            return {**block, "content": [{"type": "text", "text": text}, *kept]}
        return {**block, "content": text}
    if (
        block["type"] == "text"
        and isinstance(part, TextPart | UserPromptPart)
        and isinstance(part.content, str)
    ):
        return {**block, "text": part.content}
    return _block(part)


def _retry_text(part: RetryPromptPart) -> str:
    return part.content if isinstance(part.content, str) else part.model_response()


def _block(part: Any) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.content}
    if isinstance(part, ToolCallPart):
        return {
            "type": "tool_use",
            "id": part.tool_call_id,
            "name": part.tool_name,
            "input": part.args_as_dict(),
        }
    if isinstance(part, ThinkingPart):
        if part.id == "redacted_thinking":
            return {"type": "redacted_thinking", "data": part.signature or ""}
        return {"type": "thinking", "thinking": part.content, "signature": part.signature or ""}
    if isinstance(part, ToolReturnPart):
        block = {
            "type": "tool_result",
            "tool_use_id": part.tool_call_id,
            "content": part.model_response_str(),
        }
        return {**block, "is_error": True} if part.outcome == "failed" else block
    if isinstance(part, RetryPromptPart):
        return {
            "type": "tool_result",
            "tool_use_id": part.tool_call_id,
            "content": _retry_text(part),
            "is_error": True,
        }
    if isinstance(part, SystemPromptPart | UserPromptPart) and isinstance(part.content, str):
        return {"type": "text", "text": part.content}
    if isinstance(part, UserPromptPart):
        return {
            "type": "text",
            "text": "\n".join(
                item if isinstance(item, str) else f"[{type(item).__name__}]"
                for item in part.content
            ),
        }
    return {"type": "text", "text": str(getattr(part, "content", ""))}


response_items = one_message
"""The response as the log stores it: one message."""

# --- reading the response ----------------------------------------------------------------------


def response(text: str) -> StoredResponse | None:
    """A whole (not streamed) Messages response as the message stored after the request; None
    when it is not one (an error body)."""
    try:
        members, _ = object_spans(text)
    except BodyError:
        return None
    content = members.get("content")
    if content is None or not isinstance(content.value, list):
        return None
    head = {key: span.value for key, span in members.items() if key != "content"}
    return _stored(f'{{"role":"assistant","content":{content.text}}}', content.value, head)


def _stored(raw: str, blocks: list[Any], head: dict[str, Any]) -> StoredResponse:
    value = {"role": "assistant", "content": blocks}
    view = _view(value, {})
    assert isinstance(view, ModelResponse)
    usage = _object(head.get("usage"))
    view.usage = _usage(usage)
    view.model_name = head.get("model") if isinstance(head.get("model"), str) else None
    view.provider_response_id = head.get("id") if isinstance(head.get("id"), str) else None
    stop = head.get("stop_reason")
    view.finish_reason = _FINISH.get(stop) if isinstance(stop, str) else None
    return StoredResponse(raw, value, view, {"usage": usage, "stop_reason": stop})


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _usage(usage: dict[str, Any]) -> RequestUsage:
    def count(name: str) -> int:
        value = usage.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    read, written = count("cache_read_input_tokens"), count("cache_creation_input_tokens")
    # The writes kept an hour are priced apart from those kept five minutes.
    hour = _object(usage.get("cache_creation")).get("ephemeral_1h_input_tokens")
    return RequestUsage(
        # Anthropic's input_tokens leaves out what the cache read and wrote; pydantic-ai's
        # counts every input token.
        input_tokens=count("input_tokens") + read + written,
        cache_read_tokens=read,
        cache_write_tokens=written,
        cache_write_1h_tokens=min(hour, written) if isinstance(hour, int) and hour > 0 else 0,
        output_tokens=count("output_tokens"),
    )


class StreamAssembler:
    """Builds the response from its stream's events, as the client's SDK would."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, str] = {}
        self.usage: dict[str, Any] = {}
        self.done = False

    def feed(self, event: Event) -> None:
        try:
            data = json.loads(event.data)
        except ValueError:
            return
        if not isinstance(data, dict):
            return
        kind = data.get("type")
        if kind == "message_start" and isinstance(data.get("message"), dict):
            self.head = data["message"]
            self.usage = dict(self.head.get("usage") or {})
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            self.blocks[data.get("index", len(self.blocks))] = dict(data["content_block"])
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            self._delta(data.get("index", 0), data["delta"])
        elif kind == "content_block_stop":
            self._stop(data.get("index", 0))
        elif kind == "message_delta":
            delta = _object(data.get("delta"))
            self.head = {
                **self.head,
                **{k: v for k, v in delta.items() if k in ("stop_reason", "stop_sequence")},
            }
            if isinstance(data.get("usage"), dict):
                self.usage.update({k: v for k, v in data["usage"].items() if v is not None})
        elif kind == "message_stop":
            self.done = True

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks.get(index)
        if block is None:
            return
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + str(delta.get("text", ""))
        elif kind == "input_json_delta":
            self.partial_json[index] = self.partial_json.get(index, "") + str(
                delta.get("partial_json", "")
            )
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + str(delta.get("signature", ""))
        elif kind == "citations_delta" and "citation" in delta:
            block["citations"] = [*(block.get("citations") or []), delta["citation"]]

    def _stop(self, index: int) -> None:
        block = self.blocks.get(index)
        if block is not None and index in self.partial_json:
            try:
                block["input"] = json.loads(self.partial_json.pop(index) or "{}")
            except ValueError:
                block["input"] = {}

    def result(self) -> StoredResponse | None:
        """The response so far (all of it once the stream ended); None before any block."""
        if not self.blocks:
            return None
        for index in list(self.partial_json):
            self._stop(index)
        blocks = [self.blocks[index] for index in sorted(self.blocks)]
        raw = json.dumps({"role": "assistant", "content": blocks}, ensure_ascii=False)
        return _stored(raw, blocks, {**self.head, "usage": self.usage})
