"""OpenAI's Responses API (``POST /v1/responses``), as Codex CLI and the OpenAI Agents SDK speak it.

Only the stateless form is governed: the client sends its whole conversation in ``input`` each
time (Codex with ``store: false``). A request that continues a conversation the provider keeps
(``previous_response_id``, ``conversation``) carries only its newest items, so there is nothing
here to thread or to govern; it is refused, naming the field.

The ``instructions`` member plays the part of Anthropic's ``system``: the session keeps it as
its first message, ``{"type":"instructions","instructions":<the client's text>}`` (not an item
the API knows), always sent as the client's own member and never as an item of ``input``.

Responses items are finer than chat messages: a model's answer is a list of output items
(reasoning, a message, function calls) that the client sends back as as many input items. Each
item is one message of the session, so the request's message at position i is the log's #i,
and a response is stored as one message per output item (``response_items``). An item maps to
parts in a fixed order, which ``render`` relies on to rewrite a changed part in place:

- ``message`` (its ``type`` may be left out, the "easy" form): a string content is one part; an
  array content is one part per content part. ``system``/``developer``: ``SystemPromptPart``;
  ``user``: ``UserPromptPart``; ``assistant``: ``TextPart`` (a refusal by its text).
- ``function_call``: one ``ToolCallPart`` (the arguments stay the client's JSON text);
  ``custom_tool_call``: one ``ToolCallPart`` with ``{"input": ...}``; ``local_shell_call``: one
  ``ToolCallPart`` named ``local_shell`` with the action as its arguments.
- ``function_call_output``, ``custom_tool_call_output``, ``local_shell_call_output``: one
  ``ToolReturnPart``.
- ``reasoning``: one ``ThinkingPart``, the summary's text with ``encrypted_content`` as its
  signature, which only the provider can read and which must go back intact.
- Anything else (``item_reference``, hosted tools' calls, types newer than this module): one
  part of its JSON text, for counting; a ``UserPromptPart`` for what the caller writes (outputs,
  references), a ``TextPart`` for what the model does.

The chain hashes an item's ``value``, which is the item as the client sends it back: the
parsed item without what the server assigns and Codex leaves out when it replays its history
(an item's ``id``, unless it names another item, and its ``status``; a text part's
``annotations`` and ``logprobs``), a message in its full form (a string content as its one
text part) and a call's arguments written compactly, as pydantic-ai sends them. The stored
truth is ``raw``, the exact text, from which ``render`` rewrites.

A response is stored as its ``output`` array (``StoredResponse.raw`` its exact text,
``value`` the list of its items' values) with one view of all its items; ``response_items``
splits it into one message per item, as the client's next request will carry them.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Sequence
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

from gateway.wire import StoredResponse, WireMessage, WireRequest, read_messages, storable
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

WIRE = "openai_responses"
PROVIDER = "openai"
INSTRUCTIONS = "instructions"
"""The ``type`` of the instructions' message in the session (not an item type the API knows)."""
LOCAL_SHELL = "local_shell"
ROLES = ("user", "system", "developer", "assistant")

_INSTRUCTIONS_PREFIX = f'{{"type":"{INSTRUCTIONS}"'
_OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_ID_IS_MEANING = ("item_reference", "local_shell_call_output")
"""Items whose ``id`` names what they refer to (an item, the shell call answered), not them."""
_STATEFUL = {
    "previous_response_id": "continues a response the provider stored",
    "conversation": "continues a conversation the provider stores",
}
_FINISH: dict[str, FinishReason] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
    "failed": "error",
    "cancelled": "error",
}
_CONTEXT_PREFIXES = ("<", "# AGENTS.md instructions")
"""How Codex's context messages open (``<environment_context>``, ``<user_instructions>``, the
AGENTS.md text): sent as user messages before the first prompt, they make no title."""


def parse(body: bytes) -> WireRequest:
    """A Responses request read: a BodyError names the first field that is wrong."""
    text, members = read_body(body, arrays=frozenset({"input"}), reader=WIRE)
    model = required_string(members, "model")
    _stateless(members)
    messages: list[WireMessage] = []
    if "instructions" in members and members["instructions"].value is not None:
        messages.append(_instructions(members["instructions"]))
    messages += _input(members)
    tools = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(optional_list(members, "tools"))]
    return WireRequest(
        wire=WIRE,
        text=text,
        members=members,
        messages=messages,
        tools=tools,
        model=model,
        stream=_flag(members, "stream"),
        client_session=_client_session(members),
        title=_title(messages),
    )


def _flag(members: dict[str, Span], name: str) -> bool:
    value = members[name].value if name in members else None
    if value is not None and not isinstance(value, bool):
        raise BodyError(name, "must be true or false")
    return bool(value)


def _stateless(members: dict[str, Span]) -> None:
    """The provider's stored state continued is refused: the request holds only what is new
    since, so the session cannot be threaded nor governed."""
    _flag(members, "store")
    for name, what in _STATEFUL.items():
        if name in members and members[name].value is not None:
            raise BodyError(
                name,
                f"{what}: the gateway governs only the stateless form. Send the whole "
                'conversation in "input" (with "store": false), as Codex does',
            )


def _instructions(span: Span) -> WireMessage:
    text = storable(span.text, span.value)
    if not isinstance(text, str):
        raise BodyError("instructions", "must be a string")
    value = {"type": INSTRUCTIONS, "instructions": text}
    raw = f"{_INSTRUCTIONS_PREFIX},{json.dumps(INSTRUCTIONS)}:{span.text}}}"
    return WireMessage(raw, value, ModelRequest(parts=[SystemPromptPart(text)]))


def _input(members: dict[str, Span]) -> list[WireMessage]:
    """The input's items. A string ``input`` is one user message, whose text is the string's
    own JSON in an easy-form message."""
    span = members.get("input")
    if span is None:
        raise BodyError("input", "required")
    if isinstance(span.value, str):
        raw = f'{{"role":"user","content":{span.text}}}'
        value = {"role": "user", "content": span.value}
        return [_item(Span(raw, 0, len(raw), value), "input", {})]
    if not isinstance(span.value, list):
        raise BodyError("input", "must be a string or an array of items")
    return read_messages(WIRE, span, "input", _item)


def _item(span: Span, field: str, names: dict[str, str]) -> WireMessage:
    """One input item (a NUL or half a surrogate pair read as U+FFFD, the text left as
    written)."""
    item = _checked_item(storable(span.text, span.value), field)
    _named_call(item, names)
    return WireMessage(span.text, _meaning(item), build=partial(_view, item, names))


def _client_session(members: dict[str, Span]) -> str | None:
    """The client's marker of its session: Codex's ``prompt_cache_key`` (its conversation's
    id), else ``metadata.user_id``, else ``user``."""
    for value in (
        members["prompt_cache_key"].value if "prompt_cache_key" in members else None,
        _object(members["metadata"].value if "metadata" in members else None).get("user_id"),
        members["user"].value if "user" in members else None,
    ):
        if isinstance(value, str) and value:
            return value
    return None


def _kind(item: dict[str, Any]) -> str:
    """An item's type; a message in the easy form has a role and no type."""
    kind = item.get("type")
    return kind if isinstance(kind, str) else "message"


def _checked_item(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BodyError(field, "must be an object")
    kind = value.get("type")
    if kind is None and "role" not in value:
        raise BodyError(f"{field}.type", "required, a string (or a role, for a message)")
    if kind is not None and not isinstance(kind, str):
        raise BodyError(f"{field}.type", "must be a string")
    kind = _kind(value)
    if kind == "message":
        _check_message(value, field)
    elif kind in ("function_call", "custom_tool_call"):
        _require(
            value, field, "call_id", "name", "arguments" if kind == "function_call" else "input"
        )
    elif kind in ("function_call_output", "custom_tool_call_output"):
        _require(value, field, "call_id")
        if not isinstance(value.get("output"), str | list):
            raise BodyError(f"{field}.output", "must be a string or an array of parts")
    elif kind == "local_shell_call":
        if not isinstance(value.get("call_id") or value.get("id"), str):
            raise BodyError(f"{field}.call_id", "required, a string")
        if not isinstance(value.get("action"), dict):
            raise BodyError(f"{field}.action", "must be an object")
    elif kind == "local_shell_call_output":
        _require(value, field, "id", "output")
    elif kind == "reasoning":
        if not isinstance(value.get("summary"), list):
            raise BodyError(f"{field}.summary", "must be an array")
        if not isinstance(value.get("encrypted_content"), str | None):
            raise BodyError(f"{field}.encrypted_content", "must be a string or null")
    elif kind == "item_reference":
        _require(value, field, "id")
    return value


def _require(value: dict[str, Any], field: str, *names: str) -> None:
    for name in names:
        if not isinstance(value.get(name), str):
            raise BodyError(f"{field}.{name}", "required, a string")


def _check_message(value: dict[str, Any], field: str) -> None:
    if value.get("role") not in ROLES:
        raise BodyError(f"{field}.role", f"must be one of {', '.join(ROLES)}")
    content = value.get("content")
    if not isinstance(content, str | list):
        raise BodyError(f"{field}.content", "must be a string or an array of parts")
    for i, part in enumerate(content if isinstance(content, list) else []):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise BodyError(f"{field}.content[{i}]", "must be a part with a type")


def _tool(tool: Any, field: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
        raise BodyError(f"{field}.type", "required, a string")
    name, description = tool.get("name"), tool.get("description")
    if tool["type"] == "function":
        if not isinstance(name, str):
            raise BodyError(f"{field}.name", "required, a string")
        parameters = tool.get("parameters")
        return {
            "name": name,
            "description": description if isinstance(description, str) else None,
            "parameters": parameters if isinstance(parameters, dict) else {},
        }
    # A built-in tool (web_search, local_shell), a custom one (free text in, a grammar) or a
    # type newer than this module: its name where it has one, and no schema.
    return {
        "name": name if isinstance(name, str) else tool["type"],
        "description": description if isinstance(description, str) else None,
        "parameters": {},
    }


def _meaning(item: Any) -> Any:
    """The item as the chain hashes it: one value for every way the clients write it back when
    they replay their history. Codex leaves out every ``id`` the server assigned (an
    ``item_reference`` is its id) and ``status``, and sends a text part as its type and text
    alone; pydantic-ai may send a message in the easy form (``{"role", "content": "text"}``)
    and writes a call's arguments compactly."""
    if not isinstance(item, dict):
        return item
    dropped = ("status",) if item.get("type") in _ID_IS_MEANING else ("id", "status")
    kept = {key: value for key, value in item.items() if key not in dropped}
    if item.get("type") == "function_call" and isinstance(item.get("arguments"), str):
        kept["arguments"] = _compact(item["arguments"])
    if _kind(item) == "message":
        kept = {"type": "message", **kept, "content": _text_parts(item)}
    return kept


def _text_parts(message: dict[str, Any]) -> Any:
    """A message's content as the parts it stands for, each text part its type and text."""
    content = message.get("content")
    if isinstance(content, str):
        kind = "output_text" if message.get("role") == "assistant" else "input_text"
        return [{"type": kind, "text": content}]
    if not isinstance(content, list):
        return content
    return [
        {k: v for k, v in part.items() if k not in ("annotations", "logprobs")}
        if isinstance(part, dict) and part.get("type") == "output_text"
        else part
        for part in content
    ]


def _compact(arguments: str) -> str:
    """A call's arguments as compact JSON, their keys in order: pydantic-ai's
    ``OpenAIResponsesModel`` sends back ``{"a":1}`` for the model's ``{"a": 1}``."""
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        return arguments


# --- the pydantic-ai view ----------------------------------------------------------------------


def item_view(raw: str, value: Any, field: str, names: dict[str, str]) -> ModelMessage:
    """pydantic-ai's view of one item read outside a request (a line of a transcript): its
    JSON ``raw`` and parsed ``value``; ``names`` as for a request's items. BodyError, naming
    ``field``, when it is not an item."""
    checked = _checked_item(storable(raw, value), field)
    _named_call(checked, names)
    return _view(checked, names)


def _named_call(item: dict[str, Any], names: dict[str, str]) -> None:
    """The tool name of a call item, by its id: an output names only its call."""
    if _kind(item) in _CALLS:
        call = _call_part(item)
        names[call.tool_call_id] = call.tool_name


def _view(item: dict[str, Any], names: dict[str, str]) -> ModelMessage:
    """The item's one message, its parts in the order the module docstring gives. ``names``
    carries the tool names of the request's calls, which an output does not repeat."""
    kind = _kind(item)
    if kind == "message":
        return _message_view(item)
    if kind in _CALLS:
        return ModelResponse(parts=[_call_part(item)], provider_name=PROVIDER)
    if kind in _OUTPUTS:
        call_id = item["id"] if kind == "local_shell_call_output" else item["call_id"]
        content = _output_text(item.get("output"))
        name = names.get(call_id, LOCAL_SHELL if kind == "local_shell_call_output" else "tool")
        return ModelRequest(parts=[ToolReturnPart(name, content, tool_call_id=call_id)])
    if kind == "reasoning":
        return ModelResponse(parts=[_thinking(item)], provider_name=PROVIDER)
    if kind == "item_reference" or kind.endswith(("_output", "_response")):
        return ModelRequest(parts=[UserPromptPart(_unknown(item))])
    return ModelResponse(parts=[TextPart(_unknown(item))], provider_name=PROVIDER)


def _unknown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _contents(item: dict[str, Any]) -> list[Any]:
    """A message's content as parts: a string stands for one text part; an empty array is
    one empty part, so that every message has a part to count and to rewrite."""
    content = item["content"]
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    return content or [{"type": "input_text", "text": ""}]


def _message_view(item: dict[str, Any]) -> ModelMessage:
    parts = _contents(item)
    role = item["role"]
    if role == "assistant":
        return ModelResponse(
            parts=[TextPart(_text(part)) for part in parts], provider_name=PROVIDER
        )
    if role in ("system", "developer"):
        return ModelRequest(parts=[SystemPromptPart(_text(part)) for part in parts])
    return ModelRequest(parts=[_user_part(part) for part in parts])


def _text(part: dict[str, Any]) -> str:
    for key in ("text", "refusal"):
        if isinstance(part.get(key), str):
            return str(part[key])
    return _unknown(part)


def _user_part(part: dict[str, Any]) -> ModelRequestPart:
    kind = part["type"]
    if kind in ("input_text", "text") and isinstance(part.get("text"), str):
        return UserPromptPart(part["text"])
    media = _image(part) if kind == "input_image" else _file(part) if kind == "input_file" else None
    return UserPromptPart([media]) if media is not None else UserPromptPart(_unknown(part))


def _image(part: dict[str, Any]) -> UserContent | None:
    url = part.get("image_url")
    if not isinstance(url, str):
        return None  # a file_id: nothing here to read
    detail = part.get("detail")
    metadata = {"detail": detail} if isinstance(detail, str) else None
    if url.startswith("data:"):
        content = _data_uri(url)
        if content is not None:
            content.vendor_metadata = metadata
        return content
    return ImageUrl(url, vendor_metadata=metadata)


def _file(part: dict[str, Any]) -> UserContent | None:
    if isinstance(part.get("file_url"), str):
        return DocumentUrl(part["file_url"])
    data = part.get("file_data")
    return _data_uri(data) if isinstance(data, str) and data.startswith("data:") else None


def _data_uri(uri: str) -> BinaryContent | None:
    try:
        return BinaryContent.from_data_uri(uri)
    except (binascii.Error, ValueError):
        return None


def _call_part(item: dict[str, Any]) -> ToolCallPart:
    kind = _kind(item)
    if kind == "function_call":
        # The arguments stay the client's JSON text: a re-serialised dict would not be it.
        return ToolCallPart(item["name"], item["arguments"], tool_call_id=item["call_id"])
    if kind == "custom_tool_call":
        # A custom tool takes free text, not JSON arguments.
        return ToolCallPart(item["name"], {"input": item["input"]}, tool_call_id=item["call_id"])
    call_id = item.get("call_id") or item["id"]
    return ToolCallPart(LOCAL_SHELL, item["action"], tool_call_id=call_id)


def _output_text(output: Any) -> str:
    """A tool's output as text: its text parts joined, any other part as its JSON."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(
            part["text"]
            if isinstance(part, dict) and isinstance(part.get("text"), str)
            else _unknown(part)
            for part in output
        )
    return "" if output is None else _unknown(output)


def _thinking(item: dict[str, Any]) -> ThinkingPart:
    summary = "\n\n".join(
        part["text"]
        for part in item["summary"]
        if isinstance(part, dict) and isinstance(part.get("text"), str)
    )
    encrypted = item.get("encrypted_content")
    ident = item.get("id")
    return ThinkingPart(
        summary,
        id=ident if isinstance(ident, str) else None,
        signature=encrypted if isinstance(encrypted, str) else None,
        provider_name=PROVIDER,
    )


def _title(messages: list[WireMessage]) -> str:
    """The first prompt's text; past the context messages Codex sends before it."""
    prompts = [
        part.content
        for message in messages
        if isinstance(message.view, ModelRequest)
        for part in message.view.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    ]
    own = [text for text in prompts if not text.lstrip().startswith(_CONTEXT_PREFIXES)]
    return (own or prompts or [""])[0]


# --- writing a governed request back -----------------------------------------------------------


def body(request: WireRequest, messages: list[str]) -> bytes:
    """The client's body with its ``input`` replaced by ``messages`` (JSON texts, each one item
    or, from ``render``, several joined by ","), every other byte as it was. The instructions'
    message is left out: the client's ``instructions`` member stays as it was. Unchanged, the
    body is the client's to the byte; a string ``input`` becomes an array only when something
    changed."""
    kept = [text for text in messages if not text.startswith(_INSTRUCTIONS_PREFIX)]
    originals = (m.raw for m in request.messages if not m.raw.startswith(_INSTRUCTIONS_PREFIX))
    return replace_items(request.text, request.members["input"], kept, originals).encode()


def with_breakpoint(request: WireRequest, messages: list[str]) -> list[str]:
    """The governed messages as they are: OpenAI caches a request's longest known prefix by
    itself, with no breakpoint to place."""
    return messages


def render(view: ModelMessage, stored: WireMessage | None, changed: frozenset[int] | None) -> str:
    """A governed message as JSON text. ``stored``: the client's item it stands for (None: one
    governance added); ``changed``: the indexes of the parts governance rewrote in place (None:
    it changed the message's shape, parts added, dropped or moved). Unchanged, it is the
    client's own text; with parts rewritten in place, the client's item with only those slots
    rewritten (an output's ``output``, a content part's ``text``, a call's ``arguments``), every
    other key as it was and in its order; otherwise written afresh.

    Written afresh, a message may become several items (a request of prompts and tool results
    is a user message and one output item per result; a response of text and calls is an
    assistant message and one call item per call): the result is then their JSON texts joined
    by ",", which ``body`` splices into the array as they are. The instructions always go as
    the client's ``instructions`` member, whatever governance made of them."""
    item: dict[str, Any] | None = None
    if stored is not None:
        if stored.raw.startswith(_INSTRUCTIONS_PREFIX) or changed == frozenset():
            return stored.raw  # the common case, answered without reading the item again
        item = storable(stored.raw, json.loads(stored.raw))  # every key in its order
        if changed is not None and len(view.parts) == len(stored.view.parts):
            if not changed:
                return stored.raw
            rewritten = _rewritten(item, view.parts, changed)
            if rewritten is not None:
                return json.dumps(rewritten, ensure_ascii=False)
    if isinstance(view, ModelResponse):
        items = _responses(view.parts, item)
    else:
        items = _requests(view.parts, item)
    return ",".join(json.dumps(entry, ensure_ascii=False) for entry in items)


def _rewritten(
    item: dict[str, Any], parts: Sequence[Any], changed: frozenset[int]
) -> dict[str, Any] | None:
    """The client's item with the changed parts' slots rewritten; None when a part no longer
    fits its slot (a text where a call was), and the item is written afresh."""
    kind = _kind(item)
    part = parts[0]
    if kind in _OUTPUTS:
        text = _part_text(part)
        return None if text is None else {**item, "output": text}
    if kind == "function_call" and isinstance(part, ToolCallPart):
        return {**item, "name": part.tool_name, "arguments": _arguments(part)}
    if kind == "custom_tool_call" and isinstance(part, ToolCallPart):
        text = part.args_as_dict().get("input")
        return {**item, "name": part.tool_name, "input": text} if isinstance(text, str) else None
    if kind != "message":
        return None
    content = item["content"]
    if isinstance(content, str) or not content:
        text = _part_text(part)
        return None if text is None else {**item, "content": text}
    rewritten = list(content)
    for index in changed:
        slot = _content_slot(content[index], parts[index])
        if slot is None:
            return None
        rewritten[index] = slot
    return {**item, "content": rewritten}


def _content_slot(slot: dict[str, Any], part: Any) -> dict[str, Any] | None:
    text = _part_text(part)
    if text is not None and isinstance(slot.get("text"), str):
        return {**slot, "text": text}
    if text is not None and isinstance(slot.get("refusal"), str):
        return {**slot, "refusal": text}
    if isinstance(part, UserPromptPart):
        contents = _input_contents(part)
        return contents[0] if len(contents) == 1 else None
    return None


def _part_text(part: Any) -> str | None:
    """The text a slot takes from its part; None for a part that is no text."""
    if isinstance(part, ToolReturnPart):
        return part.model_response_str()
    if isinstance(part, RetryPromptPart):
        return _retry_text(part)
    if isinstance(part, TextPart | SystemPromptPart):
        return part.content
    if isinstance(part, UserPromptPart) and isinstance(part.content, str):
        return part.content
    return None


def _retry_text(part: RetryPromptPart) -> str:
    return part.content if isinstance(part.content, str) else part.model_response()


def _arguments(part: ToolCallPart) -> str:
    return part.args if isinstance(part.args, str) else part.args_as_json_str()


def _responses(parts: Sequence[Any], stored: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A response's parts as output items in their order: consecutive texts one assistant
    message (keeping the stored message's ``phase``), each call its item (of the stored call's
    type), each thinking with an OpenAI signature a reasoning item. A thinking part of another
    provider cannot go back: it is left out."""
    kind = _kind(stored) if stored is not None else None
    items: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []

    def flush() -> None:
        if texts:
            message: dict[str, Any] = {"type": "message", "role": "assistant"}
            if kind == "message" and stored is not None and "phase" in stored:
                message["phase"] = stored["phase"]
            items.append({**message, "content": list(texts)})
            texts.clear()

    for part in parts:
        if isinstance(part, TextPart):
            texts.append({"type": "output_text", "text": part.content})
            continue
        flush()
        if isinstance(part, ToolCallPart):
            items.append(_call_item(part, kind))
        elif isinstance(part, ThinkingPart) and part.signature and part.provider_name == PROVIDER:
            summary = [{"type": "summary_text", "text": part.content}] if part.content else []
            items.append(
                {"type": "reasoning", "summary": summary, "encrypted_content": part.signature}
            )
    flush()
    return items or [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": ""}]}
    ]


def _call_item(part: ToolCallPart, kind: str | None) -> dict[str, Any]:
    args = part.args_as_dict() if kind in ("custom_tool_call", "local_shell_call") else {}
    if kind == "custom_tool_call" and isinstance(args.get("input"), str):
        return {
            "type": "custom_tool_call",
            "call_id": part.tool_call_id,
            "name": part.tool_name,
            "input": args["input"],
        }
    if kind == "local_shell_call" and part.tool_name == LOCAL_SHELL:
        return {
            "type": "local_shell_call",
            "call_id": part.tool_call_id,
            "status": "completed",
            "action": args,
        }
    return {
        "type": "function_call",
        "call_id": part.tool_call_id,
        "name": part.tool_name,
        "arguments": _arguments(part),
    }


def _requests(parts: Sequence[Any], stored: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A request's parts as input items in their order: consecutive system prompts one message
    (the stored message's role when it was a system or developer one, else ``developer``),
    consecutive prompts one ``user`` message, each tool result an output item (of the stored
    output's type)."""
    kind = _kind(stored) if stored is not None else None
    role = stored.get("role") if stored is not None and kind == "message" else None
    system_role = role if role in ("system", "developer") else "developer"
    items: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    pending_role = "user"

    def flush() -> None:
        if pending:
            items.append({"type": "message", "role": pending_role, "content": list(pending)})
            pending.clear()

    def add(role: str, contents: list[dict[str, Any]]) -> None:
        nonlocal pending_role
        if role != pending_role:
            flush()
            pending_role = role
        pending.extend(contents)

    for part in parts:
        if isinstance(part, ToolReturnPart):
            flush()
            items.append(_output_item(part.tool_call_id, part.model_response_str(), stored))
        elif isinstance(part, RetryPromptPart) and part.tool_name is not None:
            flush()
            items.append(_output_item(part.tool_call_id, _retry_text(part), stored))
        elif isinstance(part, SystemPromptPart):
            add(system_role, [{"type": "input_text", "text": part.content}])
        elif isinstance(part, RetryPromptPart):
            add("user", [{"type": "input_text", "text": part.model_response()}])
        else:
            add("user", _input_contents(part))
    flush()
    return items or [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ""}]}
    ]


def _output_item(call_id: str, output: str, stored: dict[str, Any] | None) -> dict[str, Any]:
    kind = _kind(stored) if stored is not None else None
    if kind == "local_shell_call_output" and stored is not None and stored.get("id") == call_id:
        return {"type": kind, "id": call_id, "output": output}
    if kind == "custom_tool_call_output":
        return {"type": kind, "call_id": call_id, "output": output}
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def _input_contents(part: Any) -> list[dict[str, Any]]:
    content = getattr(part, "content", "")
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    if not isinstance(content, list):
        return [{"type": "input_text", "text": str(content)}]
    return [_input_content(item) for item in content]


def _input_content(item: Any) -> dict[str, Any]:
    if isinstance(item, str):
        return {"type": "input_text", "text": item}
    detail = (getattr(item, "vendor_metadata", None) or {}).get("detail")
    detail = detail if isinstance(detail, str) else "auto"
    if isinstance(item, ImageUrl):
        return {"type": "input_image", "image_url": item.url, "detail": detail}
    if isinstance(item, BinaryContent) and item.is_image:
        return {"type": "input_image", "image_url": item.data_uri, "detail": detail}
    if isinstance(item, DocumentUrl):
        return {"type": "input_file", "file_url": item.url}
    if isinstance(item, BinaryContent):
        return {
            "type": "input_file",
            "file_data": item.data_uri,
            "filename": f"file.{item.format}",
        }
    return {"type": "input_text", "text": f"[{type(item).__name__}]"}


# --- reading the response ----------------------------------------------------------------------


def response(text: str) -> StoredResponse | None:
    """A whole (not streamed) ``response`` object as what is stored after the request: its
    ``output`` array, the exact text, with pydantic-ai's view of all its items (usage, model,
    id and finish reason included); None when it is not one (an error body). Store it one log
    message per output item, with ``response_items``."""
    try:
        members, _ = object_spans(text)
    except BodyError:
        return None
    output = members.get("output")
    if output is None or not isinstance(output.value, list):
        return None
    head = {key: span.value for key, span in members.items() if key != "output"}
    return _stored(output.text, storable(output.text, output.value), head)


def response_items(stored: StoredResponse) -> list[WireMessage]:
    """The stored response as one message per output item, in order, as the client's next
    request carries them: each item's exact text (``raw``), its chain value (``value``, as
    ``parse`` reads the same item sent back) and its view. Every view is a ``ModelResponse``
    with the response's model name and id; the last carries the response's usage and finish
    reason, so that summed over the log the usage counts once."""
    spans = array_spans(Span(stored.raw, 0, len(stored.raw), stored.value), "output")
    messages: list[WireMessage] = []
    for index, span in enumerate(spans):
        item = storable(span.text, span.value)
        view = _output_view(item)
        view.model_name = stored.view.model_name
        view.provider_response_id = stored.view.provider_response_id
        if index == len(spans) - 1:
            view.usage = stored.view.usage
            view.finish_reason = stored.view.finish_reason
        messages.append(WireMessage(span.text, _meaning(item), view))
    return messages


def _output_view(item: Any) -> ModelResponse:
    """An output item's view: the model's, whatever the item (one this module cannot read, a
    server tool's output, is a text part of its JSON)."""
    try:
        view = _view(_checked_item(item, "output"), {})
    except BodyError:
        view = ModelRequest(parts=[])
    if isinstance(view, ModelResponse):
        return view
    return ModelResponse(parts=[TextPart(_unknown(item))], provider_name=PROVIDER)


def _stored(raw: str, items: list[Any], head: dict[str, Any]) -> StoredResponse:
    parts = [part for item in items for part in _output_view(item).parts]
    usage = _object(head.get("usage"))
    model = head.get("model")
    ident = head.get("id")
    view = ModelResponse(
        parts=parts,
        usage=_usage(usage),
        model_name=model if isinstance(model, str) else None,
        provider_name=PROVIDER,
        provider_response_id=ident if isinstance(ident, str) else None,
        finish_reason=_finish(head, items),
    )
    value = [_meaning(item) for item in items]
    extra = {
        "usage": usage,
        "status": head.get("status"),
        "incomplete_details": head.get("incomplete_details"),
    }
    return StoredResponse(raw, value, view, extra)


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _finish(head: dict[str, Any], items: list[Any]) -> FinishReason | None:
    reason = _object(head.get("incomplete_details")).get("reason")
    if isinstance(reason, str):
        return _FINISH.get(reason)
    status = head.get("status")
    if status == "completed":
        calls = any(isinstance(item, dict) and item.get("type") in _CALLS for item in items)
        return "tool_call" if calls else "stop"
    return _FINISH.get(status) if isinstance(status, str) else None


def _usage(usage: dict[str, Any]) -> RequestUsage:
    def count(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    details = _object(usage.get("input_tokens_details"))
    # Like Chat Completions', and unlike Anthropic's, input_tokens already counts the cache.
    return RequestUsage(
        input_tokens=count(usage.get("input_tokens")),
        cache_read_tokens=count(details.get("cached_tokens")),
        cache_write_tokens=count(details.get("cache_write_tokens")),
        output_tokens=count(usage.get("output_tokens")),
    )


class StreamAssembler:
    """Builds the response from its stream's events. Each ``response.output_item.done`` brings
    a whole item, kept as its exact text; the closing ``response.completed`` (or
    ``response.incomplete``, ``response.failed``) brings the whole response, whose ``output``,
    when it has one, is the authority. Items that never got their ``done`` (the stream was cut
    short) are put together from ``response.output_item.added`` and the deltas after it."""

    _TERMINAL = ("response.completed", "response.incomplete", "response.failed")
    _HEAD = ("response.created", "response.queued", "response.in_progress", *_TERMINAL)

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.output: str | None = None
        """The exact text of the closing event's ``output``, when it has items."""
        self.done_items: dict[int, str] = {}
        self.partial: dict[int, dict[str, Any]] = {}
        self.done = False

    def feed(self, event: Event) -> None:
        try:
            data = json.loads(event.data)
        except ValueError:
            return
        if not isinstance(data, dict):
            return
        kind: str = data["type"] if isinstance(data.get("type"), str) else event.name
        if kind in self._HEAD and isinstance(data.get("response"), dict):
            self._head(event.data, data["response"], final=kind in self._TERMINAL)
            self.done = self.done or kind in self._TERMINAL
            return
        index = data.get("output_index")
        if not isinstance(index, int):
            return
        if kind == "response.output_item.done" and isinstance(data.get("item"), dict):
            self.done_items[index] = _member_text(event.data, "item")
        elif kind == "response.output_item.added" and isinstance(data.get("item"), dict):
            self.partial[index] = data["item"]
        elif index in self.partial:
            _delta(self.partial[index], kind, data)

    def _head(self, text: str, response: dict[str, Any], *, final: bool) -> None:
        self.head = {key: value for key, value in response.items() if key != "output"}
        output = response.get("output")
        if final and isinstance(output, list) and output:
            self.output = _member_text(_member_text(text, "response"), "output")

    def result(self) -> StoredResponse | None:
        """The response so far (all of it once the stream ended); None before any item."""
        if self.output is not None:
            return _stored(self.output, storable(self.output, json.loads(self.output)), self.head)
        texts = dict(self.done_items)
        for index, item in self.partial.items():
            texts.setdefault(index, json.dumps(item, ensure_ascii=False))
        if not texts:
            return None
        raw = "[" + ",".join(texts[index] for index in sorted(texts)) + "]"
        return _stored(raw, storable(raw, json.loads(raw)), self.head)


def _member_text(text: str, name: str) -> str:
    """The exact text of a member of the JSON object ``text``."""
    members, _ = object_spans(text)
    return members[name].text


def _delta(item: dict[str, Any], kind: str, data: dict[str, Any]) -> None:
    """An unfinished item grown by one delta event, as the SDK's accumulator grows it."""
    delta = data.get("delta")
    if kind == "response.content_part.added" and isinstance(data.get("part"), dict):
        _slot(item, "content", data.get("content_index"), dict(data["part"]))
    elif kind == "response.output_text.delta" and isinstance(delta, str):
        _append(_slot(item, "content", data.get("content_index")), "output_text", "text", delta)
    elif kind == "response.refusal.delta" and isinstance(delta, str):
        _append(_slot(item, "content", data.get("content_index")), "refusal", "refusal", delta)
    elif kind == "response.function_call_arguments.delta" and isinstance(delta, str):
        item["arguments"] = str(item.get("arguments") or "") + delta
    elif kind == "response.custom_tool_call_input.delta" and isinstance(delta, str):
        item["input"] = str(item.get("input") or "") + delta
    elif kind == "response.reasoning_summary_part.added" and isinstance(data.get("part"), dict):
        _slot(item, "summary", data.get("summary_index"), dict(data["part"]))
    elif kind == "response.reasoning_summary_text.delta" and isinstance(delta, str):
        _append(_slot(item, "summary", data.get("summary_index")), "summary_text", "text", delta)


def _slot(
    item: dict[str, Any], key: str, index: Any, part: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``index``-th part of the item's ``key`` array (set to ``part`` when given), the
    array grown with empty parts as far as it."""
    parts = item.get(key)
    if not isinstance(parts, list):
        parts = item[key] = []
    index = index if isinstance(index, int) and 0 <= index < 1024 else len(parts)
    while len(parts) <= index:
        parts.append({})
    if part is not None:
        parts[index] = part
    slot: dict[str, Any] = parts[index]
    return slot


def _append(part: dict[str, Any], kind: str, key: str, delta: str) -> None:
    part.setdefault("type", kind)
    part[key] = str(part.get(key) or "") + delta
