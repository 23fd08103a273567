"""OpenAI's Chat Completions API (``POST /v1/chat/completions``), as the OpenAI SDK, Aider,
LiteLLM and pydantic-ai's ``OpenAIChatModel`` speak it.

Unlike Anthropic's, the system prompt is an ordinary message of the list (``system``, or
``developer`` for newer models), so it is stored, counted and sent like any other message.

Each message maps to parts in a fixed order, and ``render`` relies on it to rewrite a changed
part in place (its own slot of the client's JSON, every other key and part as it was):

- ``system``/``developer``: one ``SystemPromptPart`` for the whole ``content``.
- ``user``: an array content, one ``UserPromptPart`` per content part; a string (or null, or
  an empty array), one part for the whole ``content``.
- ``assistant``: a non-empty string content, one ``TextPart``; an array content, one
  ``TextPart`` per content part (a refusal part by its text); then one ``ToolCallPart`` per
  ``tool_calls`` item; then one for the deprecated ``function_call``.
- ``tool`` and the deprecated ``function``: one ``ToolReturnPart`` for the whole ``content``.

Content parts pydantic-ai has no item for (a ``file_id`` file, parts newer than this module)
become text parts of their JSON for counting, and go upstream as the client sent them unless
governance changed them.
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
from collections.abc import Sequence
from functools import partial
from typing import Any

from pydantic_ai.messages import (
    BinaryContent,
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
    array_spans,
    object_spans,
    optional_list,
    read_body,
    replace_items,
    required_string,
)
from gateway.wire.sse import Event

WIRE = "openai_chat"
PROVIDER = "openai"
ROLES = ("system", "developer", "user", "assistant", "tool", "function")

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_call",
    "function_call": "tool_call",
    "content_filter": "content_filter",
}
_AUDIO_TYPES = {"wav": "audio/wav", "mp3": "audio/mpeg"}
_DONE = "[DONE]"


def parse(body: bytes) -> WireRequest:
    """A Chat Completions request read: a BodyError names the first field that is wrong."""
    text, members = read_body(body, arrays=frozenset({"messages"}), reader=WIRE)
    model = required_string(members, "model")
    messages_span = members.get("messages")
    if messages_span is None:
        raise BodyError("messages", "required")
    messages = read_messages(WIRE, messages_span, "messages", _message)
    tools = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(optional_list(members, "tools"))]
    tools += [
        _function(f, f"functions[{i}]") for i, f in enumerate(optional_list(members, "functions"))
    ]
    stream = members["stream"].value if "stream" in members else None
    if stream is not None and not isinstance(stream, bool):
        raise BodyError("stream", "must be true or false")
    return WireRequest(
        wire=WIRE,
        text=text,
        members=members,
        messages=messages,
        tools=tools,
        model=model,
        stream=bool(stream),
        client_session=_client_session(members),
        title=_first_prompt(messages),
    )


def _client_session(members: dict[str, Span]) -> str | None:
    """The client's marker of its session: the (deprecated, still sent) ``user`` string, else a
    ``metadata.user_id`` as Anthropic clients write it."""
    user = members["user"].value if "user" in members else None
    if isinstance(user, str) and user:
        return user
    metadata = members["metadata"].value if "metadata" in members else None
    marker = metadata.get("user_id") if isinstance(metadata, dict) else None
    return marker if isinstance(marker, str) and marker else None


def _message(span: Span, field: str, names: dict[str, str]) -> WireMessage:
    value = _checked_message(storable(span.text, span.value), field)
    _named_calls(value, names)
    return WireMessage(span.text, value, build=partial(_view, value, names))


def _checked_message(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BodyError(field, "must be an object")
    role = value.get("role")
    if role not in ROLES:
        raise BodyError(f"{field}.role", f"must be one of {', '.join(ROLES)}")
    content = value.get("content")
    if content is not None and not isinstance(content, str | list):
        raise BodyError(f"{field}.content", "must be a string, null or an array of parts")
    for i, part in enumerate(content if isinstance(content, list) else []):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise BodyError(f"{field}.content[{i}]", "must be a part with a type")
    if role == "tool" and not isinstance(value.get("tool_call_id"), str):
        raise BodyError(f"{field}.tool_call_id", "required, a string")
    if role == "function" and not isinstance(value.get("name"), str):
        raise BodyError(f"{field}.name", "required, a string")
    if role == "assistant":
        _check_calls(value, field)
    return value


def _check_calls(value: dict[str, Any], field: str) -> None:
    calls = value.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise BodyError(f"{field}.tool_calls", "must be an array")
    for i, call in enumerate(calls or []):
        at = f"{field}.tool_calls[{i}]"
        if not isinstance(call, dict):
            raise BodyError(at, "must be an object")
        if not isinstance(call.get("id"), str):
            raise BodyError(f"{at}.id", "required, a string")
        if call.get("type", "function") == "function":
            _check_function(call.get("function"), f"{at}.function")
    if value.get("function_call") is not None:
        _check_function(value["function_call"], f"{field}.function_call")


def _check_function(function: Any, field: str) -> None:
    if not isinstance(function, dict):
        raise BodyError(field, "must be an object")
    if not isinstance(function.get("name"), str):
        raise BodyError(f"{field}.name", "required, a string")
    if not isinstance(function.get("arguments"), str):
        raise BodyError(f"{field}.arguments", "must be a string (the arguments' JSON text)")


def _tool(tool: Any, field: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
        raise BodyError(f"{field}.type", "required, a string")
    if tool["type"] == "function":
        return _function(tool.get("function"), f"{field}.function")
    # A custom tool (free-form input, a grammar) or a type newer than this module: its name
    # and description where it has them, and no schema.
    spec = tool.get(tool["type"])
    spec = spec if isinstance(spec, dict) else {}
    name, description = spec.get("name"), spec.get("description")
    return {
        "name": name if isinstance(name, str) else tool["type"],
        "description": description if isinstance(description, str) else None,
        "parameters": {},
    }


def _function(function: Any, field: str) -> dict[str, Any]:
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise BodyError(f"{field}.name", "required, a string")
    description, parameters = function.get("description"), function.get("parameters")
    return {
        "name": function["name"],
        "description": description if isinstance(description, str) else None,
        "parameters": parameters if isinstance(parameters, dict) else {},
    }


# --- the pydantic-ai view ----------------------------------------------------------------------


def _view(value: dict[str, Any], names: dict[str, str]) -> ModelMessage:
    """The message's parts, in the order the module docstring gives. ``names`` carries the
    tool names of the calls so far, which a tool message does not repeat."""
    role, content = value["role"], value.get("content")
    if role in ("system", "developer"):
        return ModelRequest(parts=[SystemPromptPart(_text(content))])
    if role == "user":
        if isinstance(content, list) and content:
            return ModelRequest(parts=[_user_part(part) for part in content])
        return ModelRequest(parts=[UserPromptPart(content or "")])
    if role == "tool":
        call_id = value["tool_call_id"]
        name = names.get(call_id, "tool")
        return ModelRequest(parts=[ToolReturnPart(name, _text(content), tool_call_id=call_id)])
    if role == "function":
        name = value["name"]
        return ModelRequest(
            parts=[ToolReturnPart(name, _text(content), tool_call_id=_function_call_id(name))]
        )
    parts: list[ModelResponsePart] = [TextPart(text) for text in _assistant_texts(content)]
    parts += [_call_part(call) for call in value.get("tool_calls") or []]
    function_call = value.get("function_call")
    if function_call is not None:
        name = function_call["name"]
        parts.append(
            ToolCallPart(name, function_call["arguments"], tool_call_id=_function_call_id(name))
        )
    return ModelResponse(parts=parts, provider_name=PROVIDER)


def _function_call_id(name: str) -> str:
    """The deprecated ``function_call`` has no id; the call and its ``function`` result pair
    by the function's name, so both get this one."""
    return f"function_call:{name}"


def _unknown(part: Any) -> str:
    return json.dumps(part, ensure_ascii=False)


def _text(content: Any) -> str:
    """A content that stands for text (a system prompt, a tool result): its text parts joined,
    any other part as its JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"] if isinstance(part.get("text"), str) else _unknown(part)
            for part in content
        )
    return ""


def _assistant_texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content] if content else []
    if not isinstance(content, list):
        return []
    texts = []
    for part in content:
        kind = part["type"]
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            texts.append(_unknown(part))
    return texts


def _named_calls(value: dict[str, Any], names: dict[str, str]) -> None:
    """The tool names of an assistant message's calls, by id: a tool message names only its
    call."""
    if value["role"] != "assistant":
        return
    for call in value.get("tool_calls") or []:
        kind = call.get("type", "function")
        inner = call.get("function") if kind == "function" else call.get("custom")
        if isinstance(inner, dict) and isinstance(inner.get("name"), str):
            names[call["id"]] = inner["name"]


def _call_part(call: dict[str, Any]) -> ModelResponsePart:
    kind = call.get("type", "function")
    if kind == "function":
        function = call["function"]
        # The arguments stay the client's JSON text: a re-serialised dict would not be it.
        return ToolCallPart(function["name"], function["arguments"], tool_call_id=call["id"])
    custom = call.get("custom")
    if kind == "custom" and isinstance(custom, dict) and isinstance(custom.get("name"), str):
        # A custom tool takes free text, not JSON arguments.
        args = {"input": custom.get("input")}
        return ToolCallPart(custom["name"], args, tool_call_id=call["id"])
    return TextPart(_unknown(call))


def _user_part(part: dict[str, Any]) -> ModelRequestPart:
    kind = part["type"]
    if kind == "text" and isinstance(part.get("text"), str):
        return UserPromptPart(part["text"])
    item: UserContent | None = None
    if kind == "image_url":
        item = _image(part.get("image_url"))
    elif kind == "input_audio":
        item = _audio(part.get("input_audio"))
    elif kind == "file":
        item = _file(part.get("file"))
    return UserPromptPart([item]) if item is not None else UserPromptPart(_unknown(part))


def _image(image: Any) -> UserContent | None:
    if not isinstance(image, dict) or not isinstance(image.get("url"), str):
        return None
    detail = image.get("detail")
    metadata = {"detail": detail} if isinstance(detail, str) else None
    if image["url"].startswith("data:"):
        content = _data_uri(image["url"])
        if content is not None:
            content.vendor_metadata = metadata
        return content
    return ImageUrl(image["url"], vendor_metadata=metadata)


def _audio(audio: Any) -> UserContent | None:
    if not isinstance(audio, dict) or not isinstance(audio.get("data"), str):
        return None
    audio_format = audio.get("format")
    media_type = _AUDIO_TYPES.get(audio_format) if isinstance(audio_format, str) else None
    data = _base64(audio["data"])
    if media_type is None or data is None:
        return None
    return BinaryContent(data, media_type=media_type)


def _file(file: Any) -> UserContent | None:
    """A file given inline (a data URI, or bare base64 named by its ``filename``); one given by
    ``file_id`` has nothing here to read."""
    if not isinstance(file, dict) or not isinstance(file.get("file_data"), str):
        return None
    if file["file_data"].startswith("data:"):
        return _data_uri(file["file_data"])
    data = _base64(file["file_data"])
    if data is None:
        return None
    filename = file.get("filename")
    guessed = mimetypes.guess_type(filename)[0] if isinstance(filename, str) else None
    return BinaryContent(data, media_type=guessed or "application/pdf")


def _data_uri(uri: str) -> BinaryContent | None:
    try:
        return BinaryContent.from_data_uri(uri)
    except (binascii.Error, ValueError):
        return None


def _base64(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _first_prompt(messages: list[WireMessage]) -> str:
    for message in messages:
        if isinstance(message.view, ModelRequest):
            for part in message.view.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


# --- writing a governed request back -----------------------------------------------------------


def body(request: WireRequest, messages: list[str]) -> bytes:
    """The client's body with its messages replaced by ``messages`` (JSON texts, each one
    message or, from ``render``, several joined by ","), every other byte as it was; the body
    itself, spacing between messages included, when they are the client's own."""
    originals = (message.raw for message in request.messages)
    return replace_items(request.text, request.members["messages"], messages, originals).encode()


def with_breakpoint(request: WireRequest, messages: list[str]) -> list[str]:
    """The governed messages as they are: OpenAI caches a request's longest known prefix by
    itself, with no breakpoint to place."""
    return messages


def render(view: ModelMessage, stored: WireMessage | None, changed: frozenset[int] | None) -> str:
    """A governed message as JSON text. ``stored``: the client's message it stands for (None:
    one governance added); ``changed``: the indexes of the parts governance rewrote in place
    (None: it changed the message's shape, parts added, dropped or moved). Unchanged, it is the
    client's own text; with parts rewritten in place, the client's message with only those
    slots rewritten (a tool result's ``content``, a text part's ``text``, a call's
    ``function``), every other key as it was and in its order; otherwise written afresh.

    Written afresh, a request may become several messages (each tool result is a ``tool``
    message of its own): the result is then their JSON texts joined by ",", which ``body``
    splices into the array as they are. A system prompt governance added goes as a ``user``
    message, since some models reject a system message after the first; one the client sent
    keeps its role."""
    if stored is not None and changed == frozenset():
        return stored.raw  # the common case, answered without reading the message again
    if stored is not None and changed is not None and len(view.parts) == len(stored.view.parts):
        rewritten = _rewritten(stored.value, view, changed)
        if rewritten is not None:
            return json.dumps(rewritten, ensure_ascii=False)
    if stored is not None and stored.value["role"] in ("system", "developer"):
        texts = [part.content for part in view.parts if isinstance(part, SystemPromptPart)]
        if texts and len(texts) == len(view.parts):
            return json.dumps({**stored.value, "content": "\n\n".join(texts)}, ensure_ascii=False)
    if isinstance(view, ModelResponse):
        return json.dumps(_assistant(view.parts), ensure_ascii=False)
    return ",".join(json.dumps(message, ensure_ascii=False) for message in _requests(view.parts))


def _rewritten(
    value: dict[str, Any], view: ModelMessage, changed: frozenset[int]
) -> dict[str, Any] | None:
    """The client's message with the changed parts' slots rewritten; None when a part no
    longer fits its slot (a text where a call was), and the message is written afresh."""
    role, content = value["role"], value.get("content")
    parts = view.parts
    if role in ("system", "developer", "tool", "function"):
        text = _part_text(parts[0])
        return None if text is None else {**value, "content": text}
    if role == "user":
        if not (isinstance(content, list) and content):
            text = _part_text(parts[0])
            return None if text is None else {**value, "content": text}
        items = [
            _user_item(item, parts[i]) if i in changed else item for i, item in enumerate(content)
        ]
        return {**value, "content": items}
    return _rewritten_assistant(value, parts, changed)


def _rewritten_assistant(
    value: dict[str, Any], parts: Sequence[Any], changed: frozenset[int]
) -> dict[str, Any] | None:
    content = value.get("content")
    texts = len(_assistant_texts(content))
    calls = list(value.get("tool_calls") or [])
    result = dict(value)
    for index in sorted(changed):
        part = parts[index]
        if index < texts:
            if not isinstance(part, TextPart):
                return None
            if isinstance(content, str):
                result["content"] = part.content
            else:
                result["content"] = [
                    _text_item(item, part.content) if i == index else item
                    for i, item in enumerate(result["content"])
                ]
        elif not isinstance(part, ToolCallPart):
            return None
        elif index - texts < len(calls):
            call = calls[index - texts]
            if call.get("type", "function") != "function":
                return None
            calls[index - texts] = {**call, "function": _call_function(call["function"], part)}
            result["tool_calls"] = calls
        else:
            result["function_call"] = _call_function(value["function_call"], part)
    return result


def _call_function(function: dict[str, Any], part: ToolCallPart) -> dict[str, Any]:
    return {**function, "name": part.tool_name, "arguments": _arguments(part)}


def _arguments(part: ToolCallPart) -> str:
    return part.args if isinstance(part.args, str) else part.args_as_json_str()


def _text_item(item: dict[str, Any], text: str) -> dict[str, Any]:
    if item["type"] == "refusal":
        return {**item, "refusal": text}
    if item["type"] == "text":
        return {**item, "text": text}
    return {"type": "text", "text": text}


def _user_item(item: dict[str, Any], part: Any) -> dict[str, Any]:
    if isinstance(part, UserPromptPart | SystemPromptPart) and isinstance(part.content, str):
        return _text_item(item, part.content)
    contents = _content_parts(part)
    return contents[0] if len(contents) == 1 else {"type": "text", "text": _plain(part)}


def _part_text(part: Any) -> str | None:
    """The text a whole-content slot takes from its part; None for a part that is no text."""
    if isinstance(part, ToolReturnPart):
        return part.model_response_str()
    if isinstance(part, RetryPromptPart):
        return _retry_text(part)
    if isinstance(part, SystemPromptPart | UserPromptPart) and isinstance(part.content, str):
        return part.content
    return None


def _retry_text(part: RetryPromptPart) -> str:
    return part.content if isinstance(part.content, str) else part.model_response()


def _plain(part: Any) -> str:
    content = getattr(part, "content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            item if isinstance(item, str) else f"[{type(item).__name__}]" for item in content
        )
    return str(content)


def _assistant(parts: Sequence[Any]) -> dict[str, Any]:
    texts = [part.content for part in parts if isinstance(part, TextPart)]
    calls = [
        {
            "id": part.tool_call_id,
            "type": "function",
            "function": {"name": part.tool_name, "arguments": _arguments(part)},
        }
        for part in parts
        if isinstance(part, ToolCallPart)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""  # the API refuses an assistant message with neither
    return message


def _requests(parts: Sequence[Any]) -> list[dict[str, Any]]:
    """A request's parts as messages in their order: each tool result a ``tool`` message,
    consecutive prompts (system or user) one ``user`` message."""
    messages: list[dict[str, Any]] = []
    prompt: list[dict[str, Any]] = []

    def flush() -> None:
        if prompt:
            only_text = len(prompt) == 1 and prompt[0]["type"] == "text"
            content = prompt[0]["text"] if only_text else list(prompt)
            messages.append({"role": "user", "content": content})
            prompt.clear()

    for part in parts:
        if isinstance(part, ToolReturnPart):
            flush()
            messages.append(_tool_message(part.tool_call_id, part.model_response_str()))
        elif isinstance(part, RetryPromptPart) and part.tool_name is not None:
            flush()
            messages.append(_tool_message(part.tool_call_id, _retry_text(part)))
        elif isinstance(part, RetryPromptPart):
            prompt.append({"type": "text", "text": part.model_response()})
        else:
            prompt.extend(_content_parts(part))
    flush()
    return messages or [{"role": "user", "content": ""}]


def _tool_message(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _content_parts(part: Any) -> list[dict[str, Any]]:
    content = getattr(part, "content", "")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return [{"type": "text", "text": str(content)}]
    return [_content_part(item) for item in content]


def _content_part(item: Any) -> dict[str, Any]:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    detail = (getattr(item, "vendor_metadata", None) or {}).get("detail")
    if isinstance(item, ImageUrl):
        return {"type": "image_url", "image_url": _image_url(item.url, detail)}
    if isinstance(item, BinaryContent) and item.is_image:
        return {"type": "image_url", "image_url": _image_url(item.data_uri, detail)}
    if isinstance(item, BinaryContent) and item.is_audio and item.format in ("wav", "mp3"):
        return {"type": "input_audio", "input_audio": {"data": item.base64, "format": item.format}}
    if isinstance(item, BinaryContent):
        return {
            "type": "file",
            "file": {"file_data": item.data_uri, "filename": f"file.{item.format}"},
        }
    return {"type": "text", "text": f"[{type(item).__name__}]"}


def _image_url(url: str, detail: Any) -> dict[str, Any]:
    return {"url": url, "detail": detail} if isinstance(detail, str) else {"url": url}


response_items = one_message
"""The response as the log stores it: one message."""

# --- reading the response ----------------------------------------------------------------------


def response(text: str) -> StoredResponse | None:
    """A whole (not streamed) ``chat.completion`` as the message stored after the request: the
    first choice's message, its exact text; None when it is not one (an error body)."""
    try:
        members, _ = object_spans(text)
        choices = members.get("choices")
        if choices is None or not isinstance(choices.value, list) or not choices.value:
            return None
        choice = array_spans(choices, "choices")[0]
        if not isinstance(choice.value, dict):
            return None
        choice_members, _ = object_spans(choice.text, 0, "choices[0]")
        message = choice_members.get("message")
        if message is None:
            return None
        value = _checked_message(message.value, "choices[0].message")
    except BodyError:
        return None
    head = {key: span.value for key, span in members.items() if key != "choices"}
    finish = choice.value.get("finish_reason")
    return _stored(message.text, value, head, finish)


def _stored(raw: str, value: dict[str, Any], head: dict[str, Any], finish: Any) -> StoredResponse:
    view = _view(value, {})
    assert isinstance(view, ModelResponse)
    usage = head.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    view.usage = _usage(usage)
    view.model_name = head.get("model") if isinstance(head.get("model"), str) else None
    view.provider_response_id = head.get("id") if isinstance(head.get("id"), str) else None
    view.finish_reason = _FINISH.get(finish) if isinstance(finish, str) else None
    return StoredResponse(raw, value, view, {"usage": usage, "finish_reason": finish})


def _usage(usage: dict[str, Any]) -> RequestUsage:
    def count(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    # Unlike Anthropic's, OpenAI's prompt_tokens already counts the cached tokens.
    return RequestUsage(
        input_tokens=count(usage.get("prompt_tokens")),
        cache_read_tokens=count(cached),
        output_tokens=count(usage.get("completion_tokens")),
    )


class StreamAssembler:
    """Builds the response from its ``chat.completion.chunk`` events, as the OpenAI SDK's
    accumulator does: the content's pieces concatenated, each tool call gathered by its
    ``index`` (``id`` and name from the delta that first carries them, the arguments' pieces
    concatenated), the usage from the chunk with no choices that ``stream_options:
    {"include_usage": true}`` adds. Only the first choice is kept (``n`` > 1 is not a
    conversation)."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.started = False
        self.content: str | None = None
        self.refusal: str | None = None
        self.calls: dict[int, dict[str, Any]] = {}
        self.function_call: dict[str, str] | None = None
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] = {}
        self.done = False

    def feed(self, event: Event) -> None:
        if event.data.strip() == _DONE:
            self.done = True
            return
        try:
            data = json.loads(event.data)
        except ValueError:
            return
        if not isinstance(data, dict):
            return
        for key in ("id", "model"):
            if isinstance(data.get(key), str) and data[key]:
                self.head.setdefault(key, data[key])
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]
        for choice in data.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        self.started = True
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        if isinstance(delta.get("content"), str):
            self.content = (self.content or "") + delta["content"]
        if isinstance(delta.get("refusal"), str):
            self.refusal = (self.refusal or "") + delta["refusal"]
        for call in delta.get("tool_calls") or []:
            if isinstance(call, dict):
                self._call(call)
        function_call = delta.get("function_call")
        if isinstance(function_call, dict):
            self.function_call = self.function_call or {"name": "", "arguments": ""}
            _extend(self.function_call, function_call)

    def _call(self, delta: dict[str, Any]) -> None:
        index = delta.get("index", len(self.calls))
        call = self.calls.setdefault(
            index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if isinstance(delta.get("id"), str) and not call["id"]:
            call["id"] = delta["id"]
        if isinstance(delta.get("type"), str):
            call["type"] = delta["type"]
        if isinstance(delta.get("function"), dict):
            _extend(call["function"], delta["function"])

    def result(self) -> StoredResponse | None:
        """The response so far (all of it once the stream ended); None before any choice."""
        if not self.started:
            return None
        value: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.refusal:
            value["refusal"] = self.refusal
        if self.calls:
            value["tool_calls"] = [self.calls[index] for index in sorted(self.calls)]
        if self.function_call is not None:
            value["function_call"] = self.function_call
        raw = json.dumps(value, ensure_ascii=False)
        value = json.loads(raw)  # a copy: later chunks must not change what was returned
        head = {**self.head, "usage": self.usage}
        return _stored(raw, value, head, self.finish_reason)


def _extend(function: dict[str, str], delta: dict[str, Any]) -> None:
    """A function's name comes whole in its first delta (a later repeat is not appended); its
    arguments come in pieces."""
    if isinstance(delta.get("name"), str) and not function["name"]:
        function["name"] = delta["name"]
    if isinstance(delta.get("arguments"), str):
        function["arguments"] += delta["arguments"]
