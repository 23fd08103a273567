"""The fake upstream against the providers' official SDKs: every answer it gives parses, tool
arguments arrive whole however they are split, what it records is exactly what was sent, errors
keep their status and headers, and a client leaving a stream early is noticed. The gateway's
tests trust it as a stand-in for the real providers; these tests are why they can."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from tests.gateway.fake_upstream import (
    ANTHROPIC_COUNT_TOKENS,
    ANTHROPIC_MESSAGES,
    CHAT_COMPLETIONS,
    RESPONSES,
    Error,
    FakeUpstream,
    Slow,
    Text,
    Thinking,
    ToolCalls,
    anthropic_error,
    fake_upstream,
    openai_error,
)

__all__ = ["fake_upstream"]  # the fixture, imported for pytest

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
}
ANTHROPIC_TOOLS = [
    {"name": "weather", "description": "The forecast.", "input_schema": WEATHER_SCHEMA},
    {"name": "clock", "description": "The time.", "input_schema": {"type": "object"}},
]
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "weather", "parameters": WEATHER_SCHEMA}},
    {"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}},
]
RESPONSES_TOOLS = [
    {"type": "function", "name": "weather", "parameters": WEATHER_SCHEMA, "strict": False},
    {"type": "function", "name": "clock", "parameters": {"type": "object"}, "strict": False},
]
# Arguments with nesting, escapes and non-ASCII text: split anywhere, they must still join up.
TRICKY_ARGUMENTS = {"city": 'Zürich "old town"', "days": 3, "tags": ["a", {"b": None}]}
HELLO = [{"role": "user", "content": "Hello there, how are you today?"}]


class Sent:
    """The body bytes of every request a client sent, taken from its HTTP client's hook."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def hook(self, request: httpx2.Request) -> None:
        self.bodies.append(request.read())


@pytest.fixture
def sent() -> Sent:
    return Sent()


@pytest.fixture
def claude(fake_upstream: FakeUpstream, sent: Sent) -> Iterator[anthropic.Anthropic]:
    http = httpx2.Client(event_hooks={"request": [sent.hook]})
    with anthropic.Anthropic(
        base_url=fake_upstream.url, api_key="test-key", max_retries=0, http_client=http
    ) as client:
        yield client


@pytest.fixture
def gpt(fake_upstream: FakeUpstream, sent: Sent) -> Iterator[openai.OpenAI]:
    http = httpx2.Client(event_hooks={"request": [sent.hook]})
    with openai.OpenAI(
        base_url=f"{fake_upstream.url}/v1", api_key="test-key", max_retries=0, http_client=http
    ) as client:
        yield client


def async_claude(upstream: FakeUpstream) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=upstream.url, api_key="test-key", max_retries=0)


def async_gpt(upstream: FakeUpstream) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{upstream.url}/v1", api_key="test-key", max_retries=0)


def raw_events(upstream: FakeUpstream, path: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """``(event line, data line)`` of every server-sent event, read without any SDK."""
    response = httpx2.post(f"{upstream.url}{path}", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.endswith("\n\n")
    events = []
    for block in response.text.removesuffix("\n\n").split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines.get("event", ""), lines["data"]))
    return events


# --- Anthropic Messages ---------------------------------------------------------------------


def test_anthropic_text_answer(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(model="claude-test", max_tokens=100, messages=HELLO)

    assert message.id.startswith("msg_")
    assert message.model == "claude-test"
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "fake answer 1"
    assert message.stop_reason == "end_turn"
    assert message.stop_sequence is None
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens > 0
    assert message.usage.cache_read_input_tokens == 0


def test_anthropic_stream_follows_the_documented_event_sequence(
    fake_upstream: FakeUpstream,
) -> None:
    fake_upstream.script(Text("one two three"))
    body = {"model": "claude-test", "max_tokens": 50, "messages": HELLO, "stream": True}

    events = raw_events(fake_upstream, ANTHROPIC_MESSAGES, body)

    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    # The data's type repeats the event's name, as the documentation shows.
    assert [json.loads(data)["type"] for _, data in events] == names
    delta = json.loads(events[-2][1])
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["usage"]["output_tokens"] > 0


def test_anthropic_stream_helper_joins_thinking_and_parallel_tool_calls(
    fake_upstream: FakeUpstream, claude: anthropic.Anthropic
) -> None:
    calls = ToolCalls([("weather", TRICKY_ARGUMENTS), ("clock", {})])
    fake_upstream.script(Thinking("Let me look that up.", "sig-123", then=calls))

    pieces: dict[int, int] = {}
    with claude.messages.stream(
        model="claude-test", max_tokens=100, messages=HELLO, tools=ANTHROPIC_TOOLS
    ) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                pieces[event.index] = pieces.get(event.index, 0) + 1
        message = stream.get_final_message()

    thinking, weather, clock = message.content
    assert thinking.type == "thinking"
    assert (thinking.thinking, thinking.signature) == ("Let me look that up.", "sig-123")
    assert weather.type == "tool_use"
    assert clock.type == "tool_use"
    assert (weather.name, weather.input) == ("weather", TRICKY_ARGUMENTS)
    assert (clock.name, clock.input) == ("clock", {})
    assert weather.id != clock.id
    assert weather.id.startswith("toolu_")
    assert pieces[1] > 2, "the arguments arrive in several pieces"
    assert message.stop_reason == "tool_use"


def test_anthropic_default_calls_the_first_tool_then_answers_its_result(
    fake_upstream: FakeUpstream, claude: anthropic.Anthropic
) -> None:
    first = claude.messages.create(
        model="claude-test", max_tokens=100, messages=HELLO, tools=ANTHROPIC_TOOLS
    )
    call = first.content[0]
    assert call.type == "tool_use"
    # Only required string properties get a value.
    assert (call.name, call.input) == ("weather", {"city": "x"})

    # Every kind of block a conversation can carry, an unknown one included.
    history: list[Any] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look at these."},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "A note."},
                },
                {"type": "some_future_block", "payload": [1, 2]},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Hmm.", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny."}],
        },
    ]
    second = claude.messages.create(
        model="claude-test",
        max_tokens=100,
        system=[{"type": "text", "text": "Be brief."}],
        messages=history,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "auto"},
        metadata={"user_id": "u-1"},
        thinking={"type": "enabled", "budget_tokens": 1024},
    )

    assert second.content[0].type == "text"
    assert second.content[0].text == "fake answer 2"
    assert fake_upstream.bodies(ANTHROPIC_MESSAGES)[1]["messages"] == history


async def test_anthropic_async_stream_text(fake_upstream: FakeUpstream) -> None:
    async with (
        async_claude(fake_upstream) as client,
        client.messages.stream(model="claude-test", max_tokens=10, messages=HELLO) as stream,
    ):
        pieces = [piece async for piece in stream.text_stream]
        message = await stream.get_final_message()

    assert pieces == ["fake ", "answer ", "1"]
    assert message.content[0].type == "text"
    assert message.content[0].text == "fake answer 1"
    assert message.usage.output_tokens > 0


async def test_anthropic_async_create_parses_thinking_then_text(
    fake_upstream: FakeUpstream,
) -> None:
    fake_upstream.script(Thinking("Pondering.", "sig-9", then=Text("Forty-two.")))

    async with async_claude(fake_upstream) as client:
        message = await client.messages.create(model="claude-test", max_tokens=10, messages=HELLO)

    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.stop_reason == "end_turn"


def test_anthropic_cache_reads_the_prefix_shared_with_the_previous_request(
    fake_upstream: FakeUpstream, claude: anthropic.Anthropic
) -> None:
    system = "You are a careful assistant. " * 20
    first = claude.messages.create(
        model="claude-test", max_tokens=10, system=system, messages=HELLO
    )
    longer = [*HELLO, {"role": "assistant", "content": "Fine."}, {"role": "user", "content": "Go"}]
    second = claude.messages.create(
        model="claude-test", max_tokens=10, system=system, messages=longer
    )
    counted = claude.messages.count_tokens(model="claude-test", system=system, messages=longer)

    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation_input_tokens
    assert second.usage.cache_read_input_tokens
    assert second.usage.cache_read_input_tokens >= first.usage.cache_creation_input_tokens
    total = (
        second.usage.input_tokens
        + (second.usage.cache_creation_input_tokens or 0)
        + second.usage.cache_read_input_tokens
    )
    assert total == counted.input_tokens
    assert len(fake_upstream.bodies(ANTHROPIC_COUNT_TOKENS)) == 1


def test_count_tokens_leaves_the_script_alone(
    fake_upstream: FakeUpstream, claude: anthropic.Anthropic
) -> None:
    fake_upstream.script(Text("scripted"))

    claude.messages.count_tokens(model="claude-test", messages=HELLO)
    message = claude.messages.create(model="claude-test", max_tokens=10, messages=HELLO)
    after = claude.messages.create(model="claude-test", max_tokens=10, messages=HELLO)

    assert message.content[0].text == "scripted"
    assert after.content[0].text == "fake answer 3"


def test_anthropic_errors_keep_their_status_and_headers(
    fake_upstream: FakeUpstream, claude: anthropic.Anthropic
) -> None:
    fake_upstream.script(
        anthropic_error(429, "rate_limit_error", "Slow down.", {"retry-after": "7"}),
        anthropic_error(529, "overloaded_error", "Overloaded."),
        anthropic_error(400, "invalid_request_error", "prompt is too long: 300000 tokens"),
    )

    with pytest.raises(anthropic.RateLimitError) as limited:
        claude.messages.create(model="claude-test", max_tokens=10, messages=HELLO)
    with (
        pytest.raises(anthropic.OverloadedError) as overloaded,
        claude.messages.stream(model="claude-test", max_tokens=10, messages=HELLO),
    ):
        pass
    with pytest.raises(anthropic.BadRequestError) as too_long:
        claude.messages.create(model="claude-test", max_tokens=10, messages=HELLO)

    assert limited.value.status_code == 429
    assert limited.value.response.headers["retry-after"] == "7"
    assert limited.value.type == "rate_limit_error"
    assert overloaded.value.status_code == 529
    assert overloaded.value.type == "overloaded_error"
    assert "prompt is too long" in str(too_long.value.api_message)


def test_a_request_the_provider_would_refuse_gets_its_400(fake_upstream: FakeUpstream) -> None:
    no_max_tokens = {"model": "claude-test", "messages": HELLO}
    bad_role = {"model": "gpt-test", "messages": [{"role": "robot", "content": "hi"}]}

    anthropic_refusal = httpx2.post(f"{fake_upstream.url}{ANTHROPIC_MESSAGES}", json=no_max_tokens)
    openai_refusal = httpx2.post(f"{fake_upstream.url}{CHAT_COMPLETIONS}", json=bad_role)
    not_json = httpx2.post(f"{fake_upstream.url}{RESPONSES}", content=b"{oops")
    nowhere = httpx2.post(f"{fake_upstream.url}/v1/completions", json={})

    assert anthropic_refusal.status_code == 400
    assert anthropic_refusal.json()["error"]["type"] == "invalid_request_error"
    assert openai_refusal.status_code == 400
    assert "role" in openai_refusal.json()["error"]["message"]
    assert not_json.status_code == 400
    assert nowhere.status_code == 404
    assert len(fake_upstream.received) == 4


# --- OpenAI Chat Completions ----------------------------------------------------------------


def test_chat_text_answer_and_cached_prefix(gpt: openai.OpenAI) -> None:
    history: list[Any] = [
        {"role": "system", "content": "You are a careful assistant. " * 20},
        *HELLO,
    ]
    first = gpt.chat.completions.create(model="gpt-test", messages=history)
    history += [{"role": "assistant", "content": "Fine."}, {"role": "user", "content": "Go"}]
    second = gpt.chat.completions.create(model="gpt-test", messages=history)

    assert first.object == "chat.completion"
    assert first.choices[0].message.content == "fake answer 1"
    assert first.choices[0].finish_reason == "stop"
    assert first.usage is not None
    assert second.usage is not None
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens
    assert first.usage.prompt_tokens_details is not None
    assert second.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == first.usage.prompt_tokens


def test_chat_stream_parallel_tool_calls_with_usage(
    fake_upstream: FakeUpstream, gpt: openai.OpenAI
) -> None:
    fake_upstream.script(ToolCalls([("weather", TRICKY_ARGUMENTS), ("clock", {})]))

    chunks = list(
        gpt.chat.completions.create(
            model="gpt-test",
            messages=HELLO,
            tools=CHAT_TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    assert chunks[0].choices[0].delta.role == "assistant"
    arguments: dict[int, list[str]] = {}
    ids: dict[int, str] = {}
    for chunk in chunks[:-1]:
        for call in chunk.choices[0].delta.tool_calls or []:
            if call.id:
                ids[call.index] = call.id
            if call.function and call.function.arguments:
                arguments.setdefault(call.index, []).append(call.function.arguments)
    assert len(arguments[0]) > 1, "the arguments arrive in several pieces"
    assert json.loads("".join(arguments[0])) == TRICKY_ARGUMENTS
    assert json.loads("".join(arguments[1])) == {}
    assert ids[0] != ids[1]
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens > 0


def test_chat_stream_ends_with_done(fake_upstream: FakeUpstream) -> None:
    body = {"model": "gpt-test", "messages": HELLO, "stream": True}

    events = raw_events(fake_upstream, CHAT_COMPLETIONS, body)

    assert all(name == "" for name, _ in events), "chat chunks come without an event line"
    assert events[-1][1] == "[DONE]"
    chunks = [json.loads(data) for _, data in events[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == (
        "fake answer 1"
    )
    assert "usage" not in chunks[-1], "no usage unless asked for"


def test_chat_stream_helper_gives_the_whole_completion(
    fake_upstream: FakeUpstream, gpt: openai.OpenAI
) -> None:
    fake_upstream.script(ToolCalls([("weather", TRICKY_ARGUMENTS)]))

    with gpt.chat.completions.stream(model="gpt-test", messages=HELLO, tools=CHAT_TOOLS) as stream:
        for _ in stream:
            pass
        completion = stream.get_final_completion()

    calls = completion.choices[0].message.tool_calls or []
    assert [call.function.name for call in calls] == ["weather"]
    assert json.loads(calls[0].function.arguments) == TRICKY_ARGUMENTS


def test_chat_answers_text_after_a_tool_result(gpt: openai.OpenAI) -> None:
    messages: list[Any] = [
        {"role": "developer", "content": "Be brief."},
        {"role": "system", "content": "Use tools."},
        *HELLO,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "clock", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "clock", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "noon"},
        {"role": "tool", "tool_call_id": "b", "content": "noon"},
    ]

    after_result = gpt.chat.completions.create(
        model="gpt-test", messages=messages, tools=CHAT_TOOLS
    )
    named = gpt.chat.completions.create(
        model="gpt-test",
        messages=HELLO,
        tools=CHAT_TOOLS,
        tool_choice={"type": "function", "function": {"name": "clock"}},
    )
    refused = gpt.chat.completions.create(
        model="gpt-test",
        messages=HELLO,
        tools=CHAT_TOOLS,
        tool_choice="none",
    )

    assert after_result.choices[0].message.content == "fake answer 1"
    assert (named.choices[0].message.tool_calls or [])[0].function.name == "clock"
    assert refused.choices[0].message.content == "fake answer 3"


async def test_chat_async_stream_text(fake_upstream: FakeUpstream) -> None:
    async with async_gpt(fake_upstream) as client:
        stream = await client.chat.completions.create(model="gpt-test", messages=HELLO, stream=True)
        pieces = [
            chunk.choices[0].delta.content
            async for chunk in stream
            if chunk.choices and chunk.choices[0].delta.content
        ]

    assert pieces == ["fake ", "answer ", "1"]


def test_chat_errors_keep_their_status_and_headers(
    fake_upstream: FakeUpstream, gpt: openai.OpenAI
) -> None:
    too_long = "This model's maximum context length is 128000 tokens."
    fake_upstream.script(
        openai_error(
            429, "Rate limit reached.", "requests", "rate_limit_exceeded", {"retry-after": "2"}
        ),
        openai_error(400, too_long, code="context_length_exceeded"),
        Error(503, {"error": {"message": "Unavailable."}}, {"x-custom": "yes"}),
    )

    with pytest.raises(openai.RateLimitError) as limited:
        gpt.chat.completions.create(model="gpt-test", messages=HELLO, stream=True)
    with pytest.raises(openai.BadRequestError) as refused:
        gpt.chat.completions.create(model="gpt-test", messages=HELLO)
    with pytest.raises(openai.InternalServerError) as unavailable:
        gpt.responses.create(model="gpt-test", input="hi")

    assert limited.value.status_code == 429
    assert limited.value.response.headers["retry-after"] == "2"
    assert limited.value.code == "rate_limit_exceeded"
    assert refused.value.code == "context_length_exceeded"
    assert unavailable.value.status_code == 503
    assert unavailable.value.response.headers["x-custom"] == "yes"


# --- OpenAI Responses -----------------------------------------------------------------------


def test_responses_text_then_function_call_then_its_output(
    fake_upstream: FakeUpstream, gpt: openai.OpenAI
) -> None:
    text = gpt.responses.create(model="gpt-test", input="Hello", instructions="Be brief.")
    call = gpt.responses.create(model="gpt-test", input="Weather?", tools=RESPONSES_TOOLS)
    function_call = call.output[0]
    assert function_call.type == "function_call"
    follow_up = gpt.responses.create(
        model="gpt-test",
        previous_response_id=call.id,
        tools=RESPONSES_TOOLS,
        input=[
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello.", "annotations": []}],
            },
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "function_call",
                "call_id": function_call.call_id,
                "name": function_call.name,
                "arguments": function_call.arguments,
            },
            {
                "type": "function_call_output",
                "call_id": function_call.call_id,
                "output": "Sunny.",
            },
        ],
    )

    assert text.object == "response"
    assert text.status == "completed"
    assert text.output_text == "fake answer 1"
    assert text.usage is not None
    assert text.usage.total_tokens == text.usage.input_tokens + text.usage.output_tokens
    assert text.usage.input_tokens_details.cached_tokens == 0
    assert function_call.name == "weather"
    assert json.loads(function_call.arguments) == {"city": "x"}
    assert function_call.call_id.startswith("call_")
    assert follow_up.output_text == "fake answer 3"
    assert follow_up.previous_response_id == call.id


def test_responses_stream_sends_numbered_documented_events(
    fake_upstream: FakeUpstream, gpt: openai.OpenAI
) -> None:
    fake_upstream.script(Text("one two three"))

    events = list(gpt.responses.create(model="gpt-test", input="Hello", stream=True))

    assert [event.type for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "one two three"
    assert completed.response.usage is not None


def test_responses_stream_helper_joins_parallel_function_calls(
    fake_upstream: FakeUpstream, gpt: openai.OpenAI
) -> None:
    fake_upstream.script(ToolCalls([("weather", TRICKY_ARGUMENTS), ("clock", {})]))

    with gpt.responses.stream(model="gpt-test", input="Weather?", tools=RESPONSES_TOOLS) as stream:
        deltas = sum(
            1 for event in stream if event.type == "response.function_call_arguments.delta"
        )
        response = stream.get_final_response()

    weather, clock = response.output
    assert weather.type == "function_call"
    assert clock.type == "function_call"
    assert json.loads(weather.arguments) == TRICKY_ARGUMENTS
    assert json.loads(clock.arguments) == {}
    assert weather.call_id != clock.call_id
    assert deltas > 2


async def test_responses_async_stream_answers_thinking_as_its_text(
    fake_upstream: FakeUpstream,
) -> None:
    fake_upstream.script(Thinking("Hidden.", "sig", then=Text("Shown.")))

    async with async_gpt(fake_upstream) as client:
        stream = await client.responses.create(model="gpt-test", input="Hello", stream=True)
        events = [event async for event in stream]

    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "Shown."


# --- Recording ------------------------------------------------------------------------------


def test_recorded_bodies_are_the_bytes_the_sdks_sent(
    fake_upstream: FakeUpstream, claude: anthropic.Anthropic, gpt: openai.OpenAI, sent: Sent
) -> None:
    claude.messages.create(model="claude-test", max_tokens=10, messages=HELLO)
    gpt.chat.completions.create(model="gpt-test", messages=HELLO)
    gpt.responses.create(model="gpt-test", input="Zürich")

    assert [request.body for request in fake_upstream.received] == sent.bodies
    first, second, third = fake_upstream.received
    assert (first.method, first.path) == ("POST", ANTHROPIC_MESSAGES)
    # The key travels as x-api-key or, in newer SDKs, as a bearer token.
    assert "test-key" in first.headers.get("x-api-key", first.headers.get("authorization", ""))
    assert "anthropic-version" in first.headers
    assert second.headers["authorization"] == "Bearer test-key"
    assert fake_upstream.bodies(CHAT_COMPLETIONS) == [json.loads(sent.bodies[1])]
    assert fake_upstream.bodies(RESPONSES)[0]["input"] == "Zürich"
    assert third.json()["model"] == "gpt-test"


def test_raw_bytes_are_recorded_untouched(fake_upstream: FakeUpstream) -> None:
    # Spacing, key order and escapes a re-serialisation would change.
    body = '{ "stream":false,"model" : "claude-test",\n"max_tokens":5,'
    body += '"messages":[{"role":"user","content":"caf\\u00e9 \u2603"}] }'

    response = httpx2.post(
        f"{fake_upstream.url}{ANTHROPIC_MESSAGES}",
        content=body.encode(),
        headers={"X-Mixed-Case": "Kept", "Content-Type": "application/json"},
    )

    assert response.status_code == 200
    (received,) = fake_upstream.received
    assert received.body == body.encode()
    assert received.headers["x-mixed-case"] == "Kept"
    assert fake_upstream.bodies(ANTHROPIC_MESSAGES)[0]["messages"][0]["content"] == "café ☃"


# --- Slow streams ---------------------------------------------------------------------------


def test_a_client_leaving_a_slow_stream_is_counted(
    fake_upstream: FakeUpstream, claude: anthropic.Anthropic
) -> None:
    # Long enough that only a client gone for good, not a slow machine, ends it early.
    words = " ".join(f"word{n}" for n in range(40))
    fake_upstream.script(Slow(Text(words), 0.05), Slow(Text("done"), 0.001))

    with claude.messages.stream(model="claude-test", max_tokens=10, messages=HELLO) as stream:
        first = next(iter(stream.text_stream))
    fake_upstream.wait_for_cancelled(1)
    with claude.messages.stream(model="claude-test", max_tokens=10, messages=HELLO) as stream:
        finished = stream.get_final_text()

    assert first == "word0 "
    assert finished == "done"
    assert fake_upstream.cancelled == 1, "a stream read to its end is not cancelled"


async def test_an_async_client_leaving_a_slow_stream_is_counted(
    fake_upstream: FakeUpstream,
) -> None:
    fake_upstream.script(Slow(Text(" ".join(f"word{n}" for n in range(40))), 0.05))

    async with async_gpt(fake_upstream) as client:
        stream = await client.chat.completions.create(model="gpt-test", messages=HELLO, stream=True)
        async for _ in stream:
            break
        await stream.close()
        fake_upstream.wait_for_cancelled(1)

    assert fake_upstream.cancelled == 1
