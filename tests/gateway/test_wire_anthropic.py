"""Anthropic's Messages format read and written back: the client's bytes survive wherever
governance leaves a message alone, every block type has a view, errors name their field."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import anthropic
import pytest
from anthropic.types import Message as SdkMessage
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ctxhub.governance.counting import cached_part_tokens
from ctxhub.governance.tokens import tokenizer_for
from gateway import chain
from gateway.wire import BodyError
from gateway.wire import anthropic as wire
from gateway.wire.sse import EventReader

# Odd spacing, key orders, escapes, a block type nobody knows and cache_control markers: what a
# real client's body may hold, all of which must reach the upstream as it was.
BODY = (Path(__file__).parent / "data" / "anthropic_messages.json").read_bytes()


def test_every_message_keeps_its_text_and_gets_a_view() -> None:
    request = wire.parse(BODY)
    assert request.model == "claude-sonnet-4-6"
    assert request.client_session == "user_abc_account_x_session_42"
    assert request.title == "read café.md  please"
    assert [tool["name"] for tool in request.tools] == ["Read", "web_search"]
    assert request.tools[1]["parameters"] == {}
    system, prompt, answer, results, call, failure = (m.view for m in request.messages)
    assert isinstance(system, ModelRequest)
    assert isinstance(system.parts[0], SystemPromptPart)
    assert system.parts[0].content == "You are a coder."
    assert isinstance(prompt, ModelRequest)
    assert prompt.parts[0].content == "read café.md  please"
    assert isinstance(answer, ModelResponse)
    thinking, redacted, text, tool = answer.parts
    assert isinstance(thinking, ThinkingPart)
    assert thinking.signature == "c2lnbmF0dXJl"
    assert isinstance(redacted, ThinkingPart)
    assert redacted.signature == "ZW5jcnlwdGVk"
    assert text == TextPart("Reading.")
    assert isinstance(tool, ToolCallPart)
    assert tool.args == {"path": "café.md"}
    assert isinstance(results, ModelRequest)
    result, image, url, unknown = results.parts
    assert isinstance(result, ToolReturnPart)
    assert result.tool_name == "Read"
    assert result.content == "# Café\nline two"
    assert isinstance(image, UserPromptPart)
    assert isinstance(image.content[0], BinaryContent)
    assert isinstance(url, UserPromptPart)
    assert url.content == [ImageUrl("https://example.com/a.png")]
    assert isinstance(unknown, UserPromptPart)
    assert "future_block" in str(unknown.content)
    assert isinstance(call, ModelResponse)
    assert isinstance(failure, ModelRequest)
    assert isinstance(failure.parts[0], ToolReturnPart)
    assert failure.parts[0].outcome == "failed"
    # Each raw text is the client's, exactly: the body's own bytes.
    for message in request.messages[1:]:
        assert message.raw.encode() in BODY
        assert json.loads(message.raw) == message.value


def test_a_body_written_back_unchanged_is_the_clients_to_the_byte() -> None:
    request = wire.parse(BODY)
    written = [wire.render(m.view, m, frozenset()) for m in request.messages]
    assert wire.body(request, written) == BODY


def test_a_rewritten_result_changes_that_block_alone() -> None:
    request = wire.parse(BODY)
    stored = request.messages[3]
    view = stored.view
    assert isinstance(view, ModelRequest)
    masked = ModelRequest(
        parts=[ToolReturnPart("Read", "[masked]", tool_call_id="toolu_1"), *view.parts[1:]]
    )
    written = json.loads(wire.render(masked, stored, frozenset({0})))
    original = json.loads(stored.raw)
    assert written["content"][0] == {**original["content"][0], "content": "[masked]"}
    assert list(written["content"][0]) == list(original["content"][0])  # key order kept
    assert written["content"][1:] == original["content"][1:]


def _png(width: int, height: int) -> str:
    ihdr = struct.pack(">II", width, height) + bytes([8, 6, 0, 0, 0])
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\0" * 4
    return base64.b64encode(head + b"\0" * 3000).decode()


def test_an_image_in_a_tool_result_is_media_and_survives_a_rewrite_of_its_text() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": _png(1280, 720)},
    }
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_9",
        "content": [{"type": "text", "text": "the screen:"}, image],
    }
    message = {"role": "user", "content": [result]}
    raw = json.dumps(message)

    view = wire.message_view(raw, message, "messages[0]", {"toolu_9": "Screenshot"})

    assert isinstance(view, ModelRequest)
    [part] = view.parts
    assert isinstance(part, ToolReturnPart)
    assert part.tool_name == "Screenshot"
    assert part.model_response_str() == "the screen:"
    [media] = part.files
    assert isinstance(media, BinaryContent)
    # Counted by its size (1280 x 720: 1,229 tokens of 750 pixels), not as its base64.
    tokenizer = tokenizer_for("anthropic:claude-sonnet-4-5")
    words = tokenizer.count("Screenshot") + tokenizer.count("the screen:")
    assert cached_part_tokens(part, tokenizer) == 1 + words + 1229

    stored = wire.WireMessage(raw, message, view)
    masked = ModelRequest(
        parts=[ToolReturnPart("Screenshot", ["[masked]", media], tool_call_id="toolu_9")]
    )
    written = json.loads(wire.render(masked, stored, frozenset({0})))
    assert written["content"][0]["content"] == [{"type": "text", "text": "[masked]"}, image]


def test_a_message_governance_added_is_written_from_its_parts() -> None:
    summary = ModelRequest(parts=[UserPromptPart("Summary of the earlier work")])
    assert json.loads(wire.render(summary, None, None)) == {
        "role": "user",
        "content": [{"type": "text", "text": "Summary of the earlier work"}],
    }
    # The system prompt always goes as the client's own member, never as a message.
    request = wire.parse(BODY)
    assert b'"role":"system"' not in wire.body(request, [m.raw for m in request.messages])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"[]", ""),
        (b'{"messages": []}', "model"),
        (b'{"model": "m"}', "messages"),
        (b'{"model": "m", "messages": {}}', "messages"),
        (b'{"model": "m", "messages": [{"role": "tool", "content": "x"}]}', "messages[0].role"),
        (b'{"model": "m", "messages": [{"role": "user", "content": 3}]}', "messages[0].content"),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": [{"text": "x"}]}]}',
            "messages[0].content[0]",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}',
            "messages[0].content[0].tool_use_id",
        ),
        (b'{"model": "m", "system": 5, "messages": []}', "system"),
        (b'{"model": "m", "messages": [], "stream": "yes"}', "stream"),
        (b'{"model": "m", "messages": [], "tools": [{"description": "x"}]}', "tools[0].name"),
        (b'{"model": "m", "messages": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}", "messages[0]"),
        (b'{"model": "m", "max_tokens": 1' + b"0" * 5000 + b', "messages": []}', "max_tokens"),
        (b'{"model": "m", "messages": []} trailing', ""),
        (b'{"model": "m", "messages": [}', "messages[0]"),
        ('{"model": "caf\u00e9"}'.encode("latin-1"), ""),
        # Python's parser reads these; JSON has no such values, and none could be stored.
        (b'{"model": "m", "max_tokens": Infinity, "messages": []}', "max_tokens"),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}, '
            b'{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", '
            b'"input": {"v": NaN}}]}]}',
            "messages[1]",
        ),
    ],
)
def test_a_wrong_body_names_its_field(body: bytes, field: str) -> None:
    with pytest.raises(BodyError) as raised:
        wire.parse(body)
    assert raised.value.field == field


def test_lone_surrogates_are_read_and_kept_as_written() -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "bad \\ud800 half"}]}'
    request = wire.parse(body)
    assert request.messages[0].raw == '{"role": "user", "content": "bad \\ud800 half"}'
    assert wire.body(request, [m.raw for m in request.messages]) == body
    assert chain.hashes("anthropic", request.messages)


STREAM = [
    (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-x",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 10,
                    "cache_read_input_tokens": 90,
                    "cache_creation_input_tokens": 5,
                    "output_tokens": 1,
                },
            },
        },
    ),
    (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Let me "},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "think."},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "sig=="},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("ping", {"type": "ping"}),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "text_delta", "text": "Hello "},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "text_delta", "text": "there."},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_9", "name": "Read", "input": {}},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"pa'},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": 'th": "a.md"}'},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 2}),
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 42},
        },
    ),
    ("message_stop", {"type": "message_stop"}),
]


def _stream_bytes() -> bytes:
    return b"".join(
        f"event: {name}\r\ndata: {json.dumps(data)}\r\n\r\n".encode() for name, data in STREAM
    )


def test_a_stream_cut_anywhere_assembles_the_message_the_sdk_builds() -> None:
    raw = _stream_bytes()
    reader, assembler = EventReader(), wire.StreamAssembler()
    for start in range(0, len(raw), 7):  # chunks cut through lines and events
        for event in reader.feed(raw[start : start + 7]):
            assembler.feed(event)
    stored = assembler.result()
    assert stored is not None
    thinking, text, tool = stored.view.parts
    assert isinstance(thinking, ThinkingPart)
    assert (thinking.content, thinking.signature) == (
        "Let me think.",
        "sig==",
    )
    assert text == TextPart("Hello there.")
    assert isinstance(tool, ToolCallPart)
    assert tool.args == {"path": "a.md"}
    usage = stored.view.usage
    assert (
        usage.input_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.output_tokens,
    ) == (105, 90, 5, 42)
    assert stored.view.finish_reason == "tool_call"
    # The SDK's own accumulation of the same events, sent back as its next request's assistant
    # message, hashes as the stored response does: the client's next request continues the chain.
    sdk = SdkMessage.model_validate(
        {
            **STREAM[0][1]["message"],
            "content": [block for block in stored.value["content"]],
            "stop_reason": "tool_use",
        }
    )
    for dump in (
        {"role": "assistant", "content": [b.model_dump() for b in sdk.content]},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in sdk.content]},
        {"role": "assistant", "content": sdk.content},
    ):
        sent_back = json.loads(json.dumps(dump, default=lambda b: b.model_dump(exclude_unset=True)))
        assert chain.canonical(sent_back) == chain.canonical(stored.value)


def test_the_sdk_reads_the_offline_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the SDK parses is what the wire module stores: usage included.
    from gateway import offline

    request = wire.parse(
        b'{"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}'
    )
    answer = offline.anthropic(request)
    import asyncio

    async def read() -> bytes:
        return b"".join([chunk async for chunk in answer.chunks])

    body = asyncio.run(read())
    message = SdkMessage.model_validate_json(body)
    stored = wire.response(body.decode())
    assert stored is not None
    assert [b.text for b in message.content if b.type == "text"] == [
        p.content for p in stored.view.parts if isinstance(p, TextPart)
    ]
    assert anthropic.__version__


def test_a_breakpoint_goes_at_the_end_unless_the_client_placed_one_or_four() -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    request = wire.parse(body)
    written = wire.with_breakpoint(request, [m.raw for m in request.messages])
    assert json.loads(written[-1]) == {
        "role": "user",
        "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
    }
    request = wire.parse(BODY)  # the tool result before last carries the client's breakpoint
    raws = [m.raw for m in request.messages]
    assert json.loads(wire.with_breakpoint(request, raws)[-1])["content"][-1]["cache_control"]
    assert wire.with_breakpoint(request, raws)[:-1] == raws[:-1]
    crowded = json.loads(BODY)
    crowded["tools"] = [
        {**tool, "cache_control": {"type": "ephemeral"}} for tool in crowded["tools"]
    ]
    crowded["system"] = crowded["system"] * 2
    request = wire.parse(json.dumps(crowded).encode())  # four already: none added
    raws = [m.raw for m in request.messages]
    assert wire.with_breakpoint(request, raws) == raws
