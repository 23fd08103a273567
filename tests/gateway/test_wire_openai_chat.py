"""OpenAI's Chat Completions format read and written back: the client's bytes survive wherever
governance leaves a message alone, every message and content type has a view, errors name their
field, and a streamed answer is stored as the SDK will send it back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from gateway import chain
from gateway.wire import BodyError, WireMessage
from gateway.wire import openai_chat as wire
from gateway.wire.sse import EventReader

# Odd spacing, key orders, escapes, parts and fields nobody here knows, cache breakpoints: what a
# real client's body may hold, all of which must reach the upstream as it was.
MESSAGES = [
    '{"role": "system", "content": "You are a coder."}',
    '{"role": "developer",  "content": [{"type": "text", "text": "Be terse.", '
    '"prompt_cache_breakpoint": {"mode": "explicit"}}]}',
    '{"role": "user", "name": "ann", "content": "read caf\\u00e9.md  please \\ud83d\\ude00"}',
    '{"content": null, "role": "assistant", "refusal": null, "tool_calls": ['
    '{"id": "call_1", "type": "function", "function": {"name": "read", '
    '"arguments": "{\\"path\\": \\"caf\\\\u00e9.md\\"}"}},'
    ' {"type": "function", "id": "call_2", "function": {"arguments": "{}", "name": "ls"}}]}',
    '{"role": "tool", "tool_call_id": "call_1", "content": "# Caf\\u00e9\\nline two"}',
    '{"tool_call_id": "call_2", "role": "tool", "content": [{"type": "text", "text": "a.md"},'
    ' {"type": "text", "text": "b.md"}]}',
    '{"role": "user", "content": [{"type": "text", "text": "look"},'
    ' {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=",'
    ' "detail": "low"}},'
    ' {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},'
    ' {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},'
    ' {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=",'
    ' "filename": "a.pdf"}},'
    ' {"type": "file", "file": {"file_id": "file-abc"}},'
    ' {"type": "future_part", "payload": {"x": [1, 2.50, null]}}]}',
    '{"role": "assistant", "content": [{"type": "text", "text": "It says"},'
    ' {"type": "refusal", "refusal": "no more"}], "function_call": null}',
    '{"role": "assistant", "content": "Calling.",'
    ' "function_call": {"name": "legacy", "arguments": "{}"}}',
    '{"role": "function", "name": "legacy", "content": "done"}',
    '{"role": "assistant", "content": "", "tool_calls": [{"id": "call_3", "type": "custom",'
    ' "custom": {"name": "grep", "input": "foo bar"}}]}',
    '{"role": "tool", "tool_call_id": "call_3", "content": "match", "x-extra": true}',
]
BODY = (
    '{ "model": "gpt-4o",  "temperature": 0.2,\n'
    '  "messages": [\n    ' + ",\n    ".join(MESSAGES) + "\n  ],\n"
    '  "tools": [{"type": "function", "function": {"name": "read", "description": "read a file",'
    ' "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},'
    ' "strict": true}},'
    ' {"type": "custom", "custom": {"name": "grep", "description": "search"}}],\n'
    '  "stream" : true, "stream_options": {"include_usage": true}, "user": "user-42",'
    ' "future_option": {"a": [1e5, "\\u00e9"]}\n'
    "}"
).encode()


def _parts(message: WireMessage) -> list[Any]:
    return list(message.view.parts)


def _texts(message: WireMessage) -> list[tuple[str, Any]]:
    """Each part's kind and content (the parts' timestamps differ from run to run)."""
    return [(type(part).__name__, getattr(part, "content", None)) for part in message.view.parts]


def test_every_message_keeps_its_text_and_gets_a_view() -> None:
    request = wire.parse(BODY)
    assert (request.wire, request.model, request.stream) == ("openai_chat", "gpt-4o", True)
    assert request.client_session == "user-42"
    assert request.title == "read café.md  please 😀"
    assert request.tools == [
        {
            "name": "read",
            "description": "read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
        {"name": "grep", "description": "search", "parameters": {}},
    ]
    messages = request.messages
    assert [m.raw for m in messages] == MESSAGES  # the body's own text, exactly
    for message in messages:
        assert json.loads(message.raw) == message.value
    (
        system,
        developer,
        prompt,
        calls,
        read,
        listed,
        media,
        said,
        legacy,
        legacy_result,
        custom,
        grep,
    ) = messages
    assert isinstance(system.view, ModelRequest)
    assert isinstance(developer.view, ModelRequest)
    assert _texts(system) == [("SystemPromptPart", "You are a coder.")]
    assert _texts(developer) == [("SystemPromptPart", "Be terse.")]
    assert _texts(prompt) == [("UserPromptPart", "read café.md  please 😀")]

    assert isinstance(calls.view, ModelResponse)
    assert calls.view.provider_name == "openai"
    first, second = calls.view.parts
    assert isinstance(first, ToolCallPart)
    assert isinstance(second, ToolCallPart)
    assert (first.tool_name, first.args, first.tool_call_id) == (
        "read",
        '{"path": "caf\\u00e9.md"}',  # the client's JSON text, not a re-serialised dict
        "call_1",
    )
    assert first.args_as_dict() == {"path": "café.md"}
    assert (second.tool_name, second.tool_call_id) == ("ls", "call_2")

    (result,) = _parts(read)
    assert isinstance(result, ToolReturnPart)
    assert (result.tool_name, result.content, result.tool_call_id) == (
        "read",
        "# Café\nline two",
        "call_1",
    )
    (result,) = _parts(listed)
    assert isinstance(result, ToolReturnPart)
    assert result.tool_name == "ls"
    assert result.content == "a.md\nb.md"

    text, data_image, url_image, audio, pdf, file_id, unknown = _parts(media)
    assert (type(text), text.content) == (UserPromptPart, "look")
    (image,) = data_image.content
    assert isinstance(image, BinaryContent)
    assert image.media_type == "image/png"
    assert image.vendor_metadata == {"detail": "low"}
    assert url_image.content == [ImageUrl("https://example.com/a.png")]
    (sound,) = audio.content
    assert isinstance(sound, BinaryContent)
    assert sound.media_type == "audio/wav"
    assert sound.data == b"RIFF"
    (document,) = pdf.content
    assert isinstance(document, BinaryContent)
    assert document.media_type == "application/pdf"
    assert json.loads(file_id.content) == {"type": "file", "file": {"file_id": "file-abc"}}
    assert json.loads(unknown.content)["type"] == "future_part"

    assert _parts(said) == [TextPart("It says"), TextPart("no more")]
    text_part, call = _parts(legacy)
    assert text_part == TextPart("Calling.")
    assert isinstance(call, ToolCallPart)
    assert call.tool_name == "legacy"
    (result,) = _parts(legacy_result)
    assert isinstance(result, ToolReturnPart)
    assert result.tool_call_id == call.tool_call_id
    (call,) = _parts(custom)  # an empty content is no part
    assert isinstance(call, ToolCallPart)
    assert call.args == {"input": "foo bar"}
    (result,) = _parts(grep)
    assert isinstance(result, ToolReturnPart)
    assert result.tool_name == "grep"


def test_a_body_written_back_unchanged_is_the_clients_to_the_byte() -> None:
    request = wire.parse(BODY)
    assert wire.body(request, [m.raw for m in request.messages]) == BODY
    written = [wire.render(m.view, m, frozenset()) for m in request.messages]
    assert written == MESSAGES
    assert wire.body(request, written) == BODY


def test_a_rewritten_result_keeps_every_other_key_in_its_order() -> None:
    request = wire.parse(BODY)
    for stored in (request.messages[4], request.messages[5], request.messages[11]):
        (part,) = _parts(stored)
        masked = ModelRequest(
            parts=[ToolReturnPart(part.tool_name, "[masked]", tool_call_id=part.tool_call_id)]
        )
        written = json.loads(wire.render(masked, stored, frozenset({0})))
        assert written == {**stored.value, "content": "[masked]"}
        assert list(written) == list(stored.value)  # key order kept


def test_a_rewritten_part_changes_its_own_slot_alone() -> None:
    request = wire.parse(BODY)
    media = request.messages[6]
    parts = _parts(media)
    view = ModelRequest(parts=[parts[0], UserPromptPart("[image dropped]"), *parts[2:]])
    written = json.loads(wire.render(view, media, frozenset({1})))
    assert written["content"][1] == {"type": "text", "text": "[image dropped]"}
    assert [p for i, p in enumerate(written["content"]) if i != 1] == [
        p for i, p in enumerate(media.value["content"]) if i != 1
    ]

    calls = request.messages[3]
    first, _second = _parts(calls)
    shorter = ToolCallPart("ls", '{"all": true}', tool_call_id="call_2")
    written = json.loads(wire.render(ModelResponse(parts=[first, shorter]), calls, frozenset({1})))
    assert written["tool_calls"][0] == calls.value["tool_calls"][0]
    assert written["tool_calls"][1] == {
        **calls.value["tool_calls"][1],
        "function": {"arguments": '{"all": true}', "name": "ls"},
    }
    assert {k: v for k, v in written.items() if k != "tool_calls"} == {
        k: v for k, v in calls.value.items() if k != "tool_calls"
    }

    said = request.messages[7]
    reworded = ModelResponse(parts=[TextPart("It said"), _parts(said)[1]])
    written = json.loads(wire.render(reworded, said, frozenset({0})))
    assert written["content"] == [
        {"type": "text", "text": "It said"},
        {"type": "refusal", "refusal": "no more"},
    ]
    assert "function_call" in written  # its null kept as the client sent it

    # A part that no longer fits its slot (a text where a call was) rewrites the message.
    odd = ModelResponse(parts=[first, TextPart("instead")])
    written = json.loads(wire.render(odd, calls, frozenset({1})))
    assert written["content"] == "instead"
    assert len(written["tool_calls"]) == 1


def test_a_message_governance_added_is_written_from_its_parts() -> None:
    summary = ModelRequest(parts=[SystemPromptPart("Summary of the earlier work")])
    assert json.loads(wire.render(summary, None, None)) == {
        "role": "user",
        "content": "Summary of the earlier work",
    }
    answer = ModelResponse(
        parts=[
            TextPart("Reading both."),
            ToolCallPart("read", {"path": "a.md"}, tool_call_id="call_7"),
            ToolCallPart("read", '{"path": "b.md"}', tool_call_id="call_8"),
        ]
    )
    assert json.loads(wire.render(answer, None, None)) == {
        "role": "assistant",
        "content": "Reading both.",
        "tool_calls": [
            {
                "id": "call_7",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path":"a.md"}'},
            },
            {
                "id": "call_8",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path": "b.md"}'},
            },
        ],
    }
    # One request of two tool results (and a note) is three messages, joined by ",".
    results = ModelRequest(
        parts=[
            ToolReturnPart("read", "A", tool_call_id="call_7"),
            ToolReturnPart("read", {"lines": 2}, tool_call_id="call_8"),
            UserPromptPart(["and this", ImageUrl("https://example.com/c.png")]),
        ]
    )
    written = wire.render(results, None, None)
    request = wire.parse(b'{"model": "m", "messages": []}')
    assert json.loads(wire.body(request, [written])) == {
        "model": "m",
        "messages": [
            {"role": "tool", "tool_call_id": "call_7", "content": "A"},
            {"role": "tool", "tool_call_id": "call_8", "content": '{"lines":2}'},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "and this"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/c.png"}},
                ],
            },
        ],
    }


def test_a_reshaped_system_prompt_keeps_its_role() -> None:
    request = wire.parse(BODY)
    developer = request.messages[1]
    view = ModelRequest(parts=[SystemPromptPart("Be terse."), SystemPromptPart("And kind.")])
    assert json.loads(wire.render(view, developer, None)) == {
        "role": "developer",
        "content": "Be terse.\n\nAnd kind.",
    }


def _body(messages: str, extra: str = "") -> bytes:
    return ('{"model": "m", "messages": [' + messages + "]" + extra + "}").encode()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"[]", ""),
        (b'{"messages": []}', "model"),
        (b'{"model": 4, "messages": []}', "model"),
        (b'{"model": "m"}', "messages"),
        (b'{"model": "m", "messages": {}}', "messages"),
        (_body('"hi"'), "messages[0]"),
        (
            _body('{"role": "user", "content": "a"}, {"role": "bot", "content": "x"}'),
            "messages[1].role",
        ),
        (_body('{"content": "x"}'), "messages[0].role"),
        (_body('{"role": "user", "content": 3}'), "messages[0].content"),
        (_body('{"role": "user", "content": [{"text": "x"}]}'), "messages[0].content[0]"),
        (_body('{"role": "tool", "content": "x"}'), "messages[0].tool_call_id"),
        (_body('{"role": "function", "content": "x"}'), "messages[0].name"),
        (_body('{"role": "assistant", "tool_calls": {}}'), "messages[0].tool_calls"),
        (
            _body('{"role": "assistant", "tool_calls": [{"type": "function"}]}'),
            "messages[0].tool_calls[0].id",
        ),
        (
            _body(
                '{"role": "user", "content": "a"}, {"role": "user", "content": "b"},'
                '{"role": "assistant", "content": null,'
                ' "tool_calls": [{"id": "c", "type": "function",'
                ' "function": {"name": "f", "arguments": {"a": 1}}}]}'
            ),
            "messages[2].tool_calls[0].function.arguments",
        ),
        (
            _body(
                '{"role": "assistant",'
                ' "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}'
            ),
            "messages[0].tool_calls[0].function.name",
        ),
        (
            _body('{"role": "assistant", "function_call": {"name": "f", "arguments": null}}'),
            "messages[0].function_call.arguments",
        ),
        (_body("", ', "stream": "yes"'), "stream"),
        (_body("", ', "tools": {}'), "tools"),
        (_body("", ', "tools": [{"function": {"name": "f"}}]'), "tools[0].type"),
        (_body("", ', "tools": [{"type": "function", "function": {}}]'), "tools[0].function.name"),
        (_body("[" * 100_000 + "]" * 100_000), "messages[0]"),
        (b'{"model": "m", "max_tokens": 1' + b"0" * 5000 + b', "messages": []}', "max_tokens"),
        (_body("") + b" trailing", ""),
        (b'{"model": "m", "messages": [}', "messages[0]"),
        ('{"model": "caf\u00e9", "messages": []}'.encode("latin-1"), ""),
    ],
)
def test_a_wrong_body_names_its_field(body: bytes, field: str) -> None:
    with pytest.raises(BodyError) as raised:
        wire.parse(body)
    assert raised.value.field == field


def test_lone_surrogates_and_nuls_are_kept_as_written_and_read_as_replacement_characters() -> None:
    body = _body(
        '{"role": "user", "content": "bad \\ud800 half"}, '
        '{"role": "user", "content": [{"type": "text", "text": "\\udc00 and \\u0000"}]}',
        ', "user": "\\ud83d"',
    )
    request = wire.parse(body)
    assert wire.body(request, [m.raw for m in request.messages]) == body
    first, second = (m.view for m in request.messages)
    assert first.parts[0].content == "bad \ufffd half"
    assert second.parts[0].content == "\ufffd and \ufffd"
    changed = wire.render(second, request.messages[1], frozenset({0}))
    assert changed.encode()  # a rewrite of it is text


def test_optional_members_may_be_absent_or_null() -> None:
    request = wire.parse(
        b'{"model": "m", "messages": [{"role": "user", "content": null}], "stream": null,'
        b' "tools": null, "metadata": {"user_id": "session-9"}}'
    )
    assert (request.stream, request.tools, request.client_session) == (False, [], "session-9")
    assert _texts(request.messages[0]) == [("UserPromptPart", "")]
    assert wire.parse(b'{"model": "m", "messages": []}').client_session is None


COMPLETION = (
    '{\n  "id": "chatcmpl-1",\n  "object": "chat.completion",\n  "created": 1700000000,\n'
    '  "model": "gpt-4o-2024-08-06",\n  "choices": [\n    {\n      "index": 0,\n'
    '      "message": {\n        "role": "assistant",\n        "content": "Caf\\u00e9 it is.",\n'
    '        "refusal": null,\n        "annotations": []\n      },\n'
    '      "logprobs": null,\n      "finish_reason": "stop"\n    }\n  ],\n'
    '  "usage": {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127,'
    ' "prompt_tokens_details": {"cached_tokens": 100, "audio_tokens": 0},'
    ' "completion_tokens_details": {"reasoning_tokens": 0}},\n'
    '  "system_fingerprint": "fp_1"\n}'
)


def test_a_completion_is_stored_as_its_message() -> None:
    stored = wire.response(COMPLETION)
    assert stored is not None
    assert stored.raw == (
        '{\n        "role": "assistant",\n        "content": "Caf\\u00e9 it is.",\n'
        '        "refusal": null,\n        "annotations": []\n      }'
    )
    assert stored.value == json.loads(stored.raw)
    view = stored.view
    assert view.parts == [TextPart("Café it is.")]
    assert (view.usage.input_tokens, view.usage.cache_read_tokens, view.usage.output_tokens) == (
        120,
        100,
        7,
    )
    assert (view.model_name, view.provider_response_id, view.finish_reason) == (
        "gpt-4o-2024-08-06",
        "chatcmpl-1",
        "stop",
    )
    assert stored.extra == {"usage": json.loads(COMPLETION)["usage"], "finish_reason": "stop"}
    # As the SDK hands it back for the next request, it continues the chain.
    sdk = ChatCompletion.model_validate_json(COMPLETION).choices[0].message
    assert chain.canonical(sdk.model_dump()) == chain.canonical(stored.value)


@pytest.mark.parametrize(
    "text",
    [
        '{"error": {"message": "Rate limit", "type": "requests", "code": "rate_limit_exceeded"}}',
        '{"id": "x", "choices": []}',
        '{"choices": [{"index": 0}]}',
        "not json",
        "",
    ],
)
def test_what_is_no_completion_is_not_stored(text: str) -> None:
    assert wire.response(text) is None


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    )
    return {
        "id": "chatcmpl-9",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-4o-2024-08-06",
        "system_fingerprint": "fp_1",
        "choices": choices,
        "usage": None,
        **extra,
    }


def _call(index: int, **fields: Any) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, **fields}]}


# Text, then two calls made in parallel whose arguments come in pieces (the second's id and name
# in its first delta only), the finish, the usage chunk of include_usage, and [DONE].
CHUNKS: list[Any] = [
    _chunk({"role": "assistant", "content": "", "refusal": None}),
    _chunk({"content": "Reading "}),
    _chunk({"content": "both caf\u00e9 files."}),
    _chunk(_call(0, id="call_a", type="function", function={"name": "read", "arguments": ""})),
    _chunk(_call(0, function={"arguments": '{"pa'})),
    _chunk(
        _call(1, id="call_b", type="function", function={"name": "read", "arguments": '{"path"'})
    ),
    _chunk(_call(0, function={"arguments": 'th": "a.md"}'})),
    _chunk(_call(1, function={"arguments": ': "b.md"}'})),
    _chunk({}, "tool_calls"),
    _chunk(
        None,
        usage={
            "prompt_tokens": 300,
            "completion_tokens": 40,
            "total_tokens": 340,
            "prompt_tokens_details": {"cached_tokens": 256},
        },
    ),
    "[DONE]",
]


def _stream_bytes(chunks: list[Any]) -> bytes:
    return b"".join(
        b"data: " + (chunk if isinstance(chunk, str) else json.dumps(chunk)).encode() + b"\n\n"
        for chunk in chunks
    )


def _assemble(raw: bytes, step: int) -> wire.StreamAssembler:
    reader, assembler = EventReader(), wire.StreamAssembler()
    for start in range(0, len(raw), step):  # chunks cut through lines and events
        for event in reader.feed(raw[start : start + step]):
            assembler.feed(event)
    return assembler


def test_a_stream_cut_anywhere_assembles_the_message_the_sdk_builds() -> None:
    raw = _stream_bytes(CHUNKS)
    assembler = _assemble(raw, 7)
    assert assembler.done
    stored = assembler.result()
    assert stored is not None
    assert (
        json.loads(stored.raw)
        == stored.value
        == {
            "role": "assistant",
            "content": "Reading both café files.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "a.md"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "b.md"}'},
                },
            ],
        }
    )
    text, first, second = stored.view.parts
    assert text == TextPart("Reading both café files.")
    assert isinstance(first, ToolCallPart)
    assert first.args_as_dict() == {"path": "a.md"}
    assert isinstance(second, ToolCallPart)
    assert second.tool_call_id == "call_b"
    usage = stored.view.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (300, 256, 40)
    assert stored.view.finish_reason == "tool_call"
    assert stored.view.provider_response_id == "chatcmpl-9"
    assert stored.extra["finish_reason"] == "tool_calls"
    for step in (1, len(raw)):
        again = _assemble(raw, step).result()
        assert again is not None
        assert (again.raw, again.extra) == (stored.raw, stored.extra)

    # The message as the SDK hands it back for the next request hashes as the stored one: the
    # client's next request continues the chain.
    sdk = ChatCompletionMessage(
        role="assistant",
        content="Reading both café files.",
        tool_calls=[
            ChatCompletionMessageFunctionToolCall(
                id=call["id"], type="function", function=Function(**call["function"])
            )
            for call in stored.value["tool_calls"]
        ],
    )
    for dump in (sdk.model_dump(exclude_unset=False), sdk.model_dump(exclude_none=True)):
        assert chain.canonical(dump) == chain.canonical(stored.value)


def test_a_stream_of_calls_alone_stores_a_null_content() -> None:
    chunks = [
        _chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_z",
                        "type": "function",
                        "function": {"name": "ls", "arguments": ""},
                    }
                ],
            }
        ),
        _chunk(_call(0, function={"arguments": "{}"})),
        _chunk({}, "tool_calls"),
        "[DONE]",
    ]
    stored = _assemble(_stream_bytes(chunks), 5).result()
    assert stored is not None
    assert stored.value["content"] is None
    assert stored.view.usage.input_tokens == 0  # no usage chunk without include_usage
    sdk = ChatCompletionMessage(
        role="assistant",
        content=None,
        tool_calls=[
            ChatCompletionMessageFunctionToolCall(
                id="call_z", type="function", function=Function(name="ls", arguments="{}")
            )
        ],
    )
    for dump in (sdk.model_dump(exclude_unset=False), sdk.model_dump(exclude_none=True)):
        assert chain.canonical(dump) == chain.canonical(stored.value)


def test_a_stream_so_far_and_a_stream_of_nothing() -> None:
    assembler = _assemble(_stream_bytes(CHUNKS[:5]), 11)
    partial = assembler.result()
    assert partial is not None
    assert not assembler.done
    assert partial.value["tool_calls"][0]["function"]["arguments"] == '{"pa'
    assert wire.StreamAssembler().result() is None
    only_done = _assemble(_stream_bytes(['{"error": {"message": "overloaded"}}', "[DONE]"]), 3)
    assert only_done.result() is None
    assert only_done.done


def test_the_sdk_reads_the_offline_answers() -> None:
    # What the SDK parses is what the wire module stores.
    from gateway import offline

    async def read(answer: Any) -> bytes:
        return b"".join([chunk async for chunk in answer.chunks])

    body = b'{"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}'
    request = wire.parse(body)
    whole = asyncio.run(read(offline.openai_chat(request, False)))
    message = ChatCompletion.model_validate_json(whole).choices[0].message
    stored = wire.response(whole.decode())
    assert stored is not None
    assert chain.canonical(message.model_dump()) == chain.canonical(stored.value)

    streamed = wire.parse(body[:-1] + b', "stream": true}')
    raw = asyncio.run(read(offline.openai_chat(streamed, True)))
    assembled = _assemble(raw, 13).result()
    assert assembled is not None
    assert assembled.view.usage.input_tokens > 0
    assert [p.content for p in assembled.view.parts if isinstance(p, TextPart)] == [
        p.content for p in stored.view.parts if isinstance(p, TextPart)
    ]
