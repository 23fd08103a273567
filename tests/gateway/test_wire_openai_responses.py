"""OpenAI's Responses format read and written back: the client's bytes survive wherever
governance leaves an item alone, every item type has a view of its own, the provider's stored
state is refused, errors name their field, and a response's output items are stored one
message each, hashing as the client will send them back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response as SdkResponse
from pydantic_ai.messages import (
    BinaryContent,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from gateway import chain, offline
from gateway.wire import BodyError, WireMessage
from gateway.wire import openai_responses as wire
from gateway.wire.sse import EventReader

# A Codex turn as it reaches the gateway (its developer and context messages, reasoning replayed
# with encrypted content and no ids, calls of a function, a custom and the local shell tool, a
# hosted search), written with odd spacing, key orders, escapes and items nobody here knows: all
# of it must reach the upstream as it was.
INSTRUCTIONS = '"You are Codex, based on GPT-5.\\nYou and the user share one workspace."'
ITEMS = [
    '{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": '
    '"<permissions instructions>\\nsandbox: workspace-write\\n</permissions instructions>"'
    "}]}",
    '{"type":"message","role":"user","content":[{"type":"input_text","text":'
    '"# AGENTS.md instructions for /repo\\n\\n<INSTRUCTIONS>\\nRun pytest.\\n</INSTRUCTIONS>"}]}',
    '{"type":"message","role":"user","content":[{"type":"input_text","text":'
    '"<environment_context>\\n  <cwd>/repo</cwd>\\n</environment_context>"}]}',
    '{"type":"message","role":"user","content":[{"type":"input_text","text":'
    '"fix the caf\\u00e9 test  please \\ud83d\\ude00"}]}',
    '{"type":"reasoning","summary":[{"type":"summary_text","text":"**Reading the test**"}],'
    '"content":null,"encrypted_content":"gAAAAABoZ2VuY3J5cHRlZC0x\\/\\/=="}',
    '{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Let me look."}],'
    '"phase":"commentary"}',
    '{"type":"function_call","name":"shell","arguments":"{\\"command\\":'
    '[\\"bash\\",\\"-lc\\",\\"cat tests/test_caf\\u00e9.py\\"]}","call_id":"call_1"}',
    '{"call_id": "call_1",  "type": "function_call_output", "output": '
    '"def test():\\n    assert 1 == 2\\n", "status": "completed"}',
    '{"type":"reasoning","summary":[],"content":null,"encrypted_content":"gAAAAABoZW5jcnlwdGVkLTI="}',
    '{"type":"custom_tool_call","status":"completed","call_id":"call_2","name":"apply_patch",'
    '"input":"*** Begin Patch\\n*** Update File: tests/test_caf\\u00e9.py\\n-    assert 1 == 2\\n'
    '+    assert 2 == 2\\n*** End Patch"}',
    '{"type":"custom_tool_call_output","call_id":"call_2","output":"Success. Updated the '
    'following files:\\nM tests/test_caf\\u00e9.py"}',
    '{"type":"local_shell_call","call_id":"call_3","status":"completed","action":{"type":"exec",'
    '"command":["ls"],"timeout_ms":null,"working_directory":null,"env":null,"user":null}}',
    '{"type":"function_call_output","call_id":"call_3","output":[{"type":"input_text",'
    '"text":"a.py\\nb.py"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo=",'
    '"detail":"auto"}]}',
    '{"type":"web_search_call","status":"completed","action":{"type":"search","query":"pytest"}}',
    '{"role": "user", "content": "and run them"}',
    '{"type": "item_reference", "id": "msg_abc"}',
    '{"type": "future_item", "payload": {"x": [1, 2.50, null]}}',
]
TOOLS = (
    '[{"type":"function","name":"shell","description":"Runs a shell command","strict":false,'
    '"parameters":{"type":"object","properties":{"command":{"type":"array","items":'
    '{"type":"string"}}},"required":["command"],"additionalProperties":false}},'
    ' {"type":"custom","name":"apply_patch","description":"Edit files.","format":'
    '{"type":"grammar","syntax":"lark","definition":"start: begin_patch hunk+ end_patch"}},'
    ' {"type":"web_search"}, {"type":"local_shell"}]'
)
BODY = (
    '{"model": "gpt-5-codex", "instructions": ' + INSTRUCTIONS + ",\n"
    '  "input": [\n    ' + ",\n    ".join(ITEMS) + "\n  ],\n"
    '  "tools": ' + TOOLS + ', "tool_choice": "auto", "parallel_tool_calls": false,\n'
    '  "reasoning": {"effort": "medium", "summary": "auto"}, "store": false, "stream": true,\n'
    '  "include": ["reasoning.encrypted_content"],'
    ' "prompt_cache_key": "0199a1b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b"}'
).encode()


def test_every_item_is_one_message_with_its_text_and_a_view() -> None:
    request = wire.parse(BODY)
    assert request.model == "gpt-5-codex"
    assert request.stream is True
    assert request.client_session == "0199a1b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b"
    assert request.title == "fix the café test  please 😀"  # past Codex's context messages
    assert [tool["name"] for tool in request.tools] == [
        "shell",
        "apply_patch",
        "web_search",
        "local_shell",
    ]
    assert request.tools[0]["parameters"]["required"] == ["command"]
    assert request.tools[1] == {
        "name": "apply_patch",
        "description": "Edit files.",
        "parameters": {},
    }
    # The instructions first, then exactly one message per item: the log's #i is the item i-1.
    assert len(request.messages) == 1 + len(ITEMS)
    (
        instructions,
        developer,
        agents,
        _context,
        prompt,
        reasoning,
        commentary,
        call,
        result,
        bare_reasoning,
        patch,
        patched,
        shell,
        listing,
        search,
        easy,
        reference,
        future,
    ) = (m.view for m in request.messages)
    assert isinstance(instructions, ModelRequest)
    assert [p.content for p in instructions.parts] == [json.loads(INSTRUCTIONS)]
    assert isinstance(instructions.parts[0], SystemPromptPart)
    assert isinstance(developer, ModelRequest)
    assert isinstance(developer.parts[0], SystemPromptPart)
    assert isinstance(agents, ModelRequest)
    assert isinstance(agents.parts[0], UserPromptPart)
    assert isinstance(prompt, ModelRequest)
    assert prompt.parts[0].content == "fix the café test  please 😀"
    assert isinstance(reasoning, ModelResponse)
    (thinking,) = reasoning.parts
    assert isinstance(thinking, ThinkingPart)
    assert thinking.content == "**Reading the test**"
    assert thinking.signature == "gAAAAABoZ2VuY3J5cHRlZC0x//=="
    assert thinking.provider_name == "openai"
    assert isinstance(commentary, ModelResponse)
    assert commentary.parts == [TextPart("Let me look.")]
    assert isinstance(call, ModelResponse)
    (tool_call,) = call.parts
    assert isinstance(tool_call, ToolCallPart)
    assert tool_call.tool_call_id == "call_1"
    assert tool_call.args == '{"command":["bash","-lc","cat tests/test_café.py"]}'  # its own text
    assert isinstance(result, ModelRequest)
    (returned,) = result.parts
    assert isinstance(returned, ToolReturnPart)
    assert (returned.tool_name, returned.tool_call_id) == ("shell", "call_1")
    assert returned.content == "def test():\n    assert 1 == 2\n"
    assert isinstance(bare_reasoning.parts[0], ThinkingPart)
    assert bare_reasoning.parts[0].content == ""
    assert isinstance(patch.parts[0], ToolCallPart)
    assert patch.parts[0].args_as_dict()["input"].startswith("*** Begin Patch")
    assert isinstance(patched.parts[0], ToolReturnPart)
    assert patched.parts[0].tool_name == "apply_patch"
    assert isinstance(shell.parts[0], ToolCallPart)
    assert shell.parts[0].tool_name == "local_shell"
    assert isinstance(listing.parts[0], ToolReturnPart)
    assert listing.parts[0].tool_name == "local_shell"
    assert listing.parts[0].content.startswith("a.py\nb.py\n")
    assert isinstance(search, ModelResponse)
    assert "web_search_call" in search.parts[0].content
    assert isinstance(easy, ModelRequest)
    assert [(type(p), p.content) for p in easy.parts] == [(UserPromptPart, "and run them")]
    assert isinstance(reference, ModelRequest)
    assert "msg_abc" in str(reference.parts[0].content)
    assert isinstance(future, ModelResponse)
    assert "future_item" in future.parts[0].content
    # Each raw text is the client's, exactly: the body's own bytes.
    for message, item in zip(request.messages[1:], ITEMS, strict=True):
        assert message.raw == item
        assert message.raw.encode() in BODY


def test_an_items_value_is_what_the_client_sends_back() -> None:
    request = wire.parse(BODY)
    result = request.messages[8]
    assert json.loads(result.raw)["status"] == "completed"
    assert result.value == {
        "call_id": "call_1",
        "type": "function_call_output",
        "output": "def test():\n    assert 1 == 2\n",
    }
    reference = request.messages[16]
    assert reference.value == {"type": "item_reference", "id": "msg_abc"}  # its id is its meaning
    commentary = request.messages[6]
    assert commentary.value == json.loads(commentary.raw)
    easy = request.messages[15]
    assert easy.value == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "and run them"}],
    }
    call = request.messages[7]
    assert call.value["arguments"] == '{"command":["bash","-lc","cat tests/test_café.py"]}'
    for message in request.messages[9:15]:
        parsed = json.loads(message.raw)
        assert message.value == {k: v for k, v in parsed.items() if k not in ("id", "status")}


def test_a_body_written_back_unchanged_is_the_clients_to_the_byte() -> None:
    request = wire.parse(BODY)
    written = [wire.render(m.view, m, frozenset()) for m in request.messages]
    assert wire.body(request, written) == BODY
    assert written[0] == '{"type":"instructions","instructions":' + INSTRUCTIONS + "}"


def test_a_string_input_stays_a_string_until_something_changes() -> None:
    body = b'{"model": "gpt-x", "instructions": "Be brief.", "input": "hi  caf\\u00e9"}'
    request = wire.parse(body)
    instructions, prompt = request.messages
    assert isinstance(prompt.view, ModelRequest)
    assert [(type(p), p.content) for p in prompt.view.parts] == [(UserPromptPart, "hi  café")]
    assert prompt.value == {  # the message it stands for
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "hi  café"}],
    }
    assert wire.body(request, [m.raw for m in request.messages]) == body
    shorter = ModelRequest(parts=[UserPromptPart("hi")])
    written = wire.render(shorter, prompt, frozenset({0}))
    rewritten = wire.body(request, [instructions.raw, written])
    assert json.loads(rewritten) == {
        "model": "gpt-x",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": "hi"}],
    }
    assert rewritten.startswith(b'{"model": "gpt-x", "instructions": "Be brief.", "input": [')


def test_a_rewritten_output_keeps_every_other_key_in_its_order() -> None:
    request = wire.parse(BODY)
    stored = request.messages[8]
    masked = ModelRequest(parts=[ToolReturnPart("shell", "[masked]", tool_call_id="call_1")])
    written = wire.render(masked, stored, frozenset({0}))
    original = json.loads(stored.raw)
    assert json.loads(written) == {**original, "output": "[masked]"}
    assert list(json.loads(written)) == ["call_id", "type", "output", "status"]
    # An output given as parts becomes the text governance made of it.
    listing = request.messages[13]
    truncated = ModelRequest(parts=[ToolReturnPart("local_shell", "a.py", tool_call_id="call_3")])
    assert json.loads(wire.render(truncated, listing, frozenset({0}))) == {
        "type": "function_call_output",
        "call_id": "call_3",
        "output": "a.py",
    }
    # A changed text part rewrites its own slot; a call keeps its id and its neighbours.
    commentary = request.messages[6]
    said = ModelResponse(parts=[TextPart("Looking.")])
    assert json.loads(wire.render(said, commentary, frozenset({0}))) == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Looking."}],
        "phase": "commentary",
    }
    call = request.messages[7]
    shorter = ModelResponse(
        parts=[ToolCallPart("shell", '{"command":["ls"]}', tool_call_id="call_1")]
    )
    assert json.loads(wire.render(shorter, call, frozenset({0}))) == {
        **json.loads(call.raw),
        "arguments": '{"command":["ls"]}',
    }


def test_a_message_governance_added_is_written_from_its_parts() -> None:
    summary = ModelRequest(parts=[UserPromptPart("Summary of the earlier work")])
    assert json.loads(wire.render(summary, None, None)) == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Summary of the earlier work"}],
    }
    # One view may be several items, joined by ",": body splices them in as they are.
    answer = ModelResponse(
        parts=[
            ThinkingPart("plan", signature="gAAAA==", provider_name="openai"),
            ThinkingPart("not ours", signature="c2ln", provider_name="anthropic"),
            TextPart("Reading."),
            ToolCallPart("shell", {"command": ["ls"]}, tool_call_id="call_9"),
        ]
    )
    assert json.loads("[" + wire.render(answer, None, None) + "]") == [
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "plan"}],
            "encrypted_content": "gAAAA==",
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Reading."}],
        },
        {
            "type": "function_call",
            "call_id": "call_9",
            "name": "shell",
            "arguments": '{"command":["ls"]}',
        },
    ]
    results = ModelRequest(
        parts=[
            ToolReturnPart("shell", "done", tool_call_id="call_9"),
            UserPromptPart(["look", BinaryContent(b"\x89PNG", media_type="image/png")]),
            SystemPromptPart("Mind the budget."),
        ]
    )
    assert json.loads("[" + wire.render(results, None, None) + "]") == [
        {"type": "function_call_output", "call_id": "call_9", "output": "done"},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {
                    "type": "input_image",
                    "image_url": "data:image/png;base64,iVBORw==",
                    "detail": "auto",
                },
            ],
        },
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "Mind the budget."}],
        },
    ]
    # The instructions always go as the client's own member, never as an item.
    request = wire.parse(BODY)
    written = [wire.render(m.view, m, None) for m in request.messages]
    sent = json.loads(wire.body(request, written))
    assert sent["instructions"] == json.loads(INSTRUCTIONS)
    assert all(item.get("type") != "instructions" for item in sent["input"])
    assert len(sent["input"]) == len(ITEMS)


def test_a_reshaped_item_keeps_its_kind() -> None:
    request = wire.parse(BODY)
    patched = request.messages[11]
    reshaped = ModelRequest(
        parts=[ToolReturnPart("apply_patch", "ok", tool_call_id="call_2"), UserPromptPart("next")]
    )
    first, second = json.loads("[" + wire.render(reshaped, patched, None) + "]")
    assert first == {"type": "custom_tool_call_output", "call_id": "call_2", "output": "ok"}
    assert second["role"] == "user"
    patch = request.messages[10]
    view = ModelResponse(
        parts=[ToolCallPart("apply_patch", {"input": "*** x"}, tool_call_id="call_2")]
    )
    assert json.loads(wire.render(view, patch, None)) == {
        "type": "custom_tool_call",
        "call_id": "call_2",
        "name": "apply_patch",
        "input": "*** x",
    }
    developer = request.messages[1]
    prompt = ModelRequest(parts=[SystemPromptPart("a"), SystemPromptPart("b")])
    assert json.loads(wire.render(prompt, developer, None))["role"] == "developer"


@pytest.mark.parametrize("field", ["previous_response_id", "conversation"])
def test_the_providers_stored_state_is_refused_naming_the_field(field: str) -> None:
    body = json.dumps({"model": "gpt-x", "input": "hi", field: "resp_123"}).encode()
    with pytest.raises(BodyError) as raised:
        wire.parse(body)
    assert raised.value.field == field
    assert "stateless" in raised.value.message
    assert '"store": false' in raised.value.message
    # Null is the stateless form, said out loud.
    assert wire.parse(json.dumps({"model": "gpt-x", "input": "hi", field: None}).encode())


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"[]", ""),
        (b'{"input": []}', "model"),
        (b'{"model": "m"}', "input"),
        (b'{"model": "m", "input": {}}', "input"),
        (b'{"model": "m", "input": [3]}', "input[0]"),
        (b'{"model": "m", "input": [{"content": "x"}]}', "input[0].type"),
        (b'{"model": "m", "input": [{"type": 5}]}', "input[0].type"),
        (b'{"model": "m", "input": [{"role": "tool", "content": "x"}]}', "input[0].role"),
        (b'{"model": "m", "input": [{"role": "user", "content": 3}]}', "input[0].content"),
        (
            b'{"model": "m", "input": [{"role": "user", "content": [{"text": "x"}]}]}',
            "input[0].content[0]",
        ),
        (
            b'{"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}',
            "input[0].call_id",
        ),
        (
            b'{"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f",'
            b' "arguments": {}}]}',
            "input[0].arguments",
        ),
        (
            b'{"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]}',
            "input[0].output",
        ),
        (b'{"model": "m", "input": [{"type": "reasoning"}]}', "input[0].summary"),
        (
            b'{"model": "m", "input": [{"type": "reasoning", "summary": [],'
            b' "encrypted_content": 1}]}',
            "input[0].encrypted_content",
        ),
        (b'{"model": "m", "input": [{"type": "item_reference"}]}', "input[0].id"),
        (
            b'{"model": "m", "input": [{"type": "local_shell_call", "call_id": "c"}]}',
            "input[0].action",
        ),
        (b'{"model": "m", "input": [], "instructions": 5}', "instructions"),
        (b'{"model": "m", "input": [], "stream": "yes"}', "stream"),
        (b'{"model": "m", "input": [], "store": 1}', "store"),
        (b'{"model": "m", "input": [], "tools": {}}', "tools"),
        (b'{"model": "m", "input": [], "tools": [{"name": "x"}]}', "tools[0].type"),
        (b'{"model": "m", "input": [], "tools": [{"type": "function"}]}', "tools[0].name"),
        (b'{"model": "m", "input": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}", "input[0]"),
        (b'{"model": "m", "input": []} trailing', ""),
        ('{"model": "caf\u00e9"}'.encode("latin-1"), ""),
    ],
)
def test_a_wrong_body_names_its_field(body: bytes, field: str) -> None:
    with pytest.raises(BodyError) as raised:
        wire.parse(body)
    assert raised.value.field == field


# --- the response ------------------------------------------------------------------------------

# A response as the API writes it: reasoning with its encrypted content, a message whose text
# cites a page, a call; the usage with cached tokens.
OUTPUT = [
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "**Planning** the fix"}],
        "encrypted_content": "gAAAAABoY2lwaGVy",
    },
    {
        "id": "msg_1",
        "type": "message",
        "status": "completed",
        "content": [
            {
                "type": "output_text",
                "annotations": [
                    {
                        "type": "url_citation",
                        "start_index": 0,
                        "end_index": 4,
                        "title": "pytest",
                        "url": "https://docs.pytest.org/",
                    }
                ],
                "logprobs": [],
                "text": "Docs say run it.",
            }
        ],
        "role": "assistant",
        "phase": "commentary",
    },
    {
        "id": "fc_1",
        "type": "function_call",
        "status": "completed",
        "arguments": '{"command":["pytest","-q"]}',
        "call_id": "call_7",
        "name": "shell",
    },
]
USAGE = {
    "input_tokens": 1200,
    "input_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 0},
    "output_tokens": 90,
    "output_tokens_details": {"reasoning_tokens": 64},
    "total_tokens": 1290,
}
RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1760000000,
    "status": "completed",
    "error": None,
    "incomplete_details": None,
    "instructions": "Be brief.",
    "model": "gpt-5-codex",
    "output": OUTPUT,
    "parallel_tool_calls": False,
    "tool_choice": "auto",
    "tools": [],
    "store": False,
    "usage": USAGE,
}


def _whole() -> str:
    return json.dumps(RESPONSE, indent=1).replace('"text": "Docs', '"text":  "Docs')


def test_a_response_is_stored_as_its_output_items() -> None:
    text = _whole()
    stored = wire.response(text)
    assert stored is not None
    assert stored.raw in text
    assert json.loads(stored.raw) == OUTPUT
    thinking, said, call = stored.view.parts
    assert isinstance(thinking, ThinkingPart)
    assert thinking.signature == "gAAAAABoY2lwaGVy"
    assert thinking.id == "rs_1"
    assert said == TextPart("Docs say run it.")
    assert isinstance(call, ToolCallPart)
    assert call.tool_call_id == "call_7"
    usage = stored.view.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (1200, 1024, 90)
    assert stored.view.model_name == "gpt-5-codex"
    assert stored.view.provider_response_id == "resp_1"
    assert stored.view.finish_reason == "tool_call"
    assert stored.extra["usage"] == USAGE
    # One message per output item: exact texts, values, views; the usage counted once.
    items = wire.response_items(stored)
    assert [item.raw for item in items] == [
        text[text.index(item.raw) : text.index(item.raw) + len(item.raw)] for item in items
    ]
    assert [json.loads(item.raw) for item in items] == OUTPUT
    assert [item.value for item in items] == stored.value
    assert all(isinstance(item, WireMessage) for item in items)
    assert all(isinstance(item.view, ModelResponse) for item in items)
    assert [item.view.provider_response_id for item in items] == ["resp_1"] * 3
    assert [item.view.usage.input_tokens for item in items] == [0, 0, 1200]
    assert [item.view.finish_reason for item in items] == [None, None, "tool_call"]


@pytest.mark.parametrize(
    ("status", "details", "finish"),
    [
        ("completed", None, "stop"),
        ("incomplete", {"reason": "max_output_tokens"}, "length"),
        ("incomplete", {"reason": "content_filter"}, "content_filter"),
        ("failed", None, "error"),
    ],
)
def test_the_finish_reason_is_the_status(status: str, details: Any, finish: str) -> None:
    body = {**RESPONSE, "status": status, "incomplete_details": details, "output": OUTPUT[:2]}
    stored = wire.response(json.dumps(body))
    assert stored is not None
    assert stored.view.finish_reason == finish


@pytest.mark.parametrize(
    "text",
    ['{"error": {"message": "overloaded", "type": "server_error"}}', "not json", '{"output": 5}'],
)
def test_what_is_no_response_is_not_stored(text: str) -> None:
    assert wire.response(text) is None


def _codex(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as Codex sends it back (codex-rs ``ResponseItem``'s serde): no ``id``,
    no ``status`` on messages, reasoning and calls; text parts as their text alone; a
    reasoning's absent content as null."""
    kind = item["type"]
    if kind == "message":
        content = [{"type": part["type"], "text": part["text"]} for part in item["content"]]
        kept = {"type": kind, "role": item["role"], "content": content}
        return {**kept, **({"phase": item["phase"]} if "phase" in item else {})}
    if kind == "reasoning":
        return {
            "type": kind,
            "summary": item["summary"],
            "content": None,
            "encrypted_content": item.get("encrypted_content"),
        }
    if kind == "function_call":
        keys = ("name", "arguments", "call_id")
        return {"type": kind, **{key: item[key] for key in keys}}
    return item


def _sent_back(output: list[Any]) -> dict[str, list[Any]]:
    """The output items as each client sends them back in its next request's ``input``."""
    sdk = SdkResponse.model_validate({**RESPONSE, "output": output}).output
    return {
        "sdk model_dump(exclude_none=True)": [i.model_dump(exclude_none=True) for i in sdk],
        # The Agents SDK's to_input_list(): each raw item dumped with exclude_unset, a status
        # of None dropped, a reasoning item's id optionally omitted.
        "agents to_input_list()": [i.model_dump(exclude_unset=True) for i in sdk],
        "agents, reasoning ids omitted": [
            {k: v for k, v in i.model_dump(exclude_unset=True).items() if k != "id"}
            if i.type == "reasoning"
            else i.model_dump(exclude_unset=True)
            for i in sdk
        ],
        "codex": [_codex(i) for i in output],
    }


@pytest.mark.parametrize("client", list(_sent_back(OUTPUT)))
def test_the_output_sent_back_continues_the_chain(client: str) -> None:
    stored = wire.response(_whole())
    assert stored is not None
    first = wire.parse(b'{"model": "gpt-5-codex", "instructions": "Be brief.", "input": "hi"}')
    items = wire.response_items(stored)
    chained = chain.hashes(wire.WIRE, [*first.messages, *items])
    sent = _sent_back(OUTPUT)[client]
    result = {"type": "function_call_output", "call_id": "call_7", "output": "1 passed"}
    body = {
        "model": "gpt-5-codex",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": "hi"}, *sent, result],
        "store": False,
    }
    following = wire.parse(json.dumps(body).encode())
    hashes = chain.hashes(wire.WIRE, following.messages)
    assert hashes[: len(chained)] == chained
    assert [chain.canonical(m.value) for m in following.messages[2:5]] == [
        chain.canonical(i.value) for i in items
    ]
    # The SDK's dumps hash alike even as written; what Codex and the Agents SDK leave out (the
    # items' ids and statuses, the text parts' annotations) only as the items' values.
    as_written = [chain.canonical(json.loads(i.raw)) for i in items]
    alike = [chain.canonical(item) for item in sent] == as_written
    assert alike == client.startswith(("sdk", "agents to_input_list"))


# --- the stream --------------------------------------------------------------------------------


def _events() -> list[dict[str, Any]]:
    """A streamed response as the API sends it: the reasoning's summary, the message's text and
    the call's arguments in deltas, each item whole in its done event, the whole response last."""
    reasoning, message, call = OUTPUT
    created = {**RESPONSE, "status": "in_progress", "output": [], "usage": None}
    text_part = {**message["content"][0], "text": "", "annotations": []}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": created},
        {"type": "response.in_progress", "response": created},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning", "summary": []},
        },
        {
            "type": "response.reasoning_summary_part.added",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "part": {"type": "summary_text", "text": ""},
        },
        *(
            {
                "type": "response.reasoning_summary_text.delta",
                "item_id": "rs_1",
                "output_index": 0,
                "summary_index": 0,
                "delta": piece,
            }
            for piece in ("**Planning** ", "the fix")
        ),
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {**message, "status": "in_progress", "content": []},
        },
        {
            "type": "response.content_part.added",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "part": text_part,
        },
        *(
            {
                "type": "response.output_text.delta",
                "item_id": "msg_1",
                "output_index": 1,
                "content_index": 0,
                "delta": piece,
                "logprobs": [],
            }
            for piece in ("Docs ", "say ", "run it.")
        ),
        {"type": "response.output_item.done", "output_index": 1, "item": message},
        {
            "type": "response.output_item.added",
            "output_index": 2,
            "item": {**call, "status": "in_progress", "arguments": ""},
        },
        *(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": "fc_1",
                "output_index": 2,
                "delta": piece,
            }
            for piece in ('{"command":', '["pytest",', '"-q"]}')
        ),
        {"type": "response.output_item.done", "output_index": 2, "item": call},
        {"type": "response.completed", "response": RESPONSE},
    ]
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def _stream(events: list[dict[str, Any]]) -> bytes:
    return b"".join(
        f"event: {event['type']}\r\ndata: {json.dumps(event)}\r\n\r\n".encode() for event in events
    )


def _assemble(raw: bytes, size: int) -> Any:
    reader, assembler = EventReader(), wire.StreamAssembler()
    for start in range(0, len(raw), size):  # chunks cut through lines and events
        for event in reader.feed(raw[start : start + size]):
            assembler.feed(event)
    return assembler


def test_a_stream_cut_anywhere_assembles_the_response() -> None:
    assembler = _assemble(_stream(_events()), 7)
    assert assembler.done
    stored = assembler.result()
    assert stored is not None
    assert json.loads(stored.raw) == OUTPUT  # the completed event's output, as written
    whole = wire.response(json.dumps(RESPONSE))
    assert whole is not None
    assert stored.value == whole.value
    assert stored.view.parts == whole.view.parts
    assert stored.view.usage == whole.view.usage
    assert stored.view.finish_reason == "tool_call"
    assert [i.raw for i in wire.response_items(stored)] == [json.dumps(item) for item in OUTPUT]


def test_a_stream_without_the_whole_response_keeps_each_done_item() -> None:
    events = _events()
    events[-1] = {**events[-1], "response": {**RESPONSE, "output": []}}
    stored = _assemble(_stream(events), 5).result()
    assert stored is not None
    assert [i.raw for i in wire.response_items(stored)] == [json.dumps(item) for item in OUTPUT]
    assert stored.view.usage.cache_read_tokens == 1024


def test_a_stream_cut_short_keeps_what_the_deltas_built() -> None:
    events = _events()
    cut = next(i for i, e in enumerate(events) if e["type"] == "response.output_item.done") + 1
    assembler = _assemble(_stream(events[: cut + 4]), 11)  # the message's text half-way
    assert not assembler.done
    stored = assembler.result()
    assert stored is not None
    reasoning, message = json.loads(stored.raw)
    assert reasoning == OUTPUT[0]
    assert message["content"][0]["text"] == "Docs say "
    half_call = _assemble(_stream(events[:-3]), 13).result()
    assert half_call is not None
    assert json.loads(half_call.raw)[2]["arguments"] == '{"command":["pytest",'
    assert half_call.view.finish_reason is None
    assert wire.StreamAssembler().result() is None
    failed = _assemble(_stream([{"type": "error", "code": "server_error", "message": "x"}]), 3)
    assert failed.result() is None


# --- the offline model, read by the real SDK ---------------------------------------------------


def _client(seen: list[tuple[Any, bytes]]) -> openai.OpenAI:
    """The SDK pointed at the offline model: each request it sends read by ``parse``, kept
    with the bytes it was answered."""

    async def read(answer: Any) -> bytes:
        return b"".join([chunk async for chunk in answer.chunks])

    def handle(request: httpx.Request) -> httpx.Response:
        parsed = wire.parse(request.content)
        answer = offline.openai_responses(parsed)
        body = asyncio.run(read(answer))
        seen.append((parsed, body))
        return httpx.Response(answer.status, headers=answer.headers, content=body)

    transport = httpx.MockTransport(handle)
    return openai.OpenAI(
        api_key="x", base_url="http://offline/v1", http_client=httpx.Client(transport=transport)
    )


SHELL: Any = {
    "type": "function",
    "name": "shell",
    "description": "Runs a shell command",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "array", "items": {"type": "string"}}},
        "required": ["command"],
    },
}


def test_the_sdk_reads_the_offline_answers() -> None:
    seen: list[tuple[Any, bytes]] = []
    client = _client(seen)
    response = client.responses.create(model="gpt-x", instructions="Be brief.", input="hi")
    assert response.output_text.startswith("[offline demo model")
    assert response.usage is not None
    assert response.usage.input_tokens > 0
    stored = wire.response(seen[-1][1].decode())
    assert stored is not None
    assert [p.content for p in stored.view.parts] == [response.output_text]
    assert stored.view.usage.input_tokens == response.usage.input_tokens

    with_tools = client.responses.create(model="gpt-x", input="list it", tools=[SHELL])
    calls = [item for item in with_tools.output if item.type == "function_call"]
    assert calls
    assert calls[0].name == "shell"
    assert json.loads(calls[0].arguments) == {"command": []}

    events = list(
        client.responses.create(model="gpt-x", input="list it", tools=[SHELL], stream=True)
    )
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"
    assert [item.type for item in events[-1].response.output] == ["message", "function_call"]

    with client.responses.stream(model="gpt-x", input="list it", tools=[SHELL]) as stream:
        final = stream.get_final_response()
    assert [item.type for item in final.output] == ["message", "function_call"]
    assert final.usage is not None
    assert final.usage.output_tokens > 0


def test_the_sdk_sends_an_offline_answer_back_as_the_chain_goes_on() -> None:
    seen: list[tuple[Any, bytes]] = []
    client = _client(seen)
    with client.responses.stream(model="gpt-x", input="list it", tools=[SHELL]) as stream:
        final = stream.get_final_response()
    request, answered = seen[-1]
    stored = _assemble(answered, 9).result()
    assert stored is not None
    items = wire.response_items(stored)
    assert [chain.canonical(json.loads(i.raw)) for i in items] == [
        chain.canonical(i.model_dump()) for i in final.output
    ]
    chained = chain.hashes(wire.WIRE, [*request.messages, *items])
    call = final.output[1]
    assert call.type == "function_call"
    following = client.responses.create(
        model="gpt-x",
        input=[
            {"role": "user", "content": "list it"},
            *[item.model_dump(exclude_none=True) for item in final.output],
            {"type": "function_call_output", "call_id": call.call_id, "output": "a.py"},
        ],
        tools=[SHELL],
    )
    assert "a.py" in following.output_text
    sent = seen[-1][0]
    assert chain.hashes(wire.WIRE, sent.messages)[: len(chained)] == chained


async def test_pydantic_ai_sends_the_offline_answers_back_as_the_chain_goes_on() -> None:
    # pydantic-ai's own Responses model as the client: its second request carries the first
    # answer back (compacting the call's arguments), and continues the first request's chain.
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    seen: list[tuple[Any, bytes]] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        parsed = wire.parse(request.content)
        answer = offline.openai_responses(parsed)
        body = b"".join([chunk async for chunk in answer.chunks])
        seen.append((parsed, body))
        return httpx.Response(answer.status, headers=answer.headers, content=body)

    client = openai.AsyncOpenAI(
        api_key="x",
        base_url="http://offline/v1",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(handle)),
    )
    model = OpenAIResponsesModel("gpt-x", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, instructions="Be brief.")

    @agent.tool_plain
    def shell(command: list[str]) -> str:
        return "a.py"

    result = await agent.run("list it")
    assert "a.py" in result.output
    (first, answered), (second, _) = seen
    stored = wire.response(answered.decode())
    assert stored is not None
    items = wire.response_items(stored)
    chained = chain.hashes(wire.WIRE, [*first.messages, *items])
    assert chain.hashes(wire.WIRE, second.messages)[: len(chained)] == chained


def test_a_nul_or_half_a_surrogate_pair_is_kept_as_written_and_read_as_a_replacement() -> None:
    body = (
        b'{"model": "m", "instructions": "be \\u0000 brief", "input": [{"role": "user",'
        b' "content": "bad \\ud800 half"}, {"type": "function_call_output", "call_id": "c",'
        b' "output": "x\\udfffy", "status": "completed"}]}'
    )
    request = wire.parse(body)
    instructions, prompt, result = request.messages
    assert instructions.view.parts[0].content == "be \ufffd brief"
    assert prompt.raw == '{"role": "user", "content": "bad \\ud800 half"}'
    assert prompt.view.parts[0].content == "bad \ufffd half"
    assert wire.body(request, [m.raw for m in request.messages]) == body
    assert chain.hashes(wire.WIRE, request.messages)
    masked = ModelRequest(parts=[ToolReturnPart("tool", "[masked]", tool_call_id="c")])
    written = (
        wire.render(prompt.view, prompt, None) + "," + wire.render(masked, result, frozenset({0}))
    )
    assert json.loads(wire.body(request, [instructions.raw, written]))["input"] == [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "bad \ufffd half"}],
        },
        {
            "type": "function_call_output",
            "call_id": "c",
            "output": "[masked]",
            "status": "completed",
        },
    ]
