"""The gateway as apps on the OpenAI SDK and pydantic-ai agents use it: the official clients
pointed at a real hub process, the hub pointed at a fake provider written from the documented
formats, which records every body it receives."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import httpx2
import openai
import pytest
from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

from gateway.chain import canonical
from gateway.models import Exchange, GatewaySession, RawMessage
from sessions.api.keys import create_key
from sessions.models import AgentSession, SentRequest
from tests.gateway.fake_upstream import FakeUpstream, Text, ToolCalls
from tests.gateway.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

PROVIDER_KEY = "sk-proj-PLANTED-openai-secret-0123456789"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


@pytest.fixture
def hub_key(alice: Any) -> str:
    return create_key(alice, name="gateway", scopes=["read", "write"])[1]


def sdk(url: str, hub_key: str, mode: str, sent: list[bytes] | None = None) -> openai.OpenAI:
    def capture(request: httpx2.Request) -> None:
        if sent is not None:
            sent.append(request.read())

    return openai.OpenAI(
        base_url=f"{url}/gateway/openai/v1",
        api_key=PROVIDER_KEY,
        max_retries=0,
        default_headers={"X-Ctxhub-Key": hub_key, "X-Ctxhub-Mode": mode},
        http_client=httpx2.Client(event_hooks={"request": [capture]}),
    )


def chat_loop(
    client: openai.OpenAI,
    turns: int,
    *,
    result: Callable[[int], str] = lambda n: f"line {n}\n" * 3,
    messages: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """A tool loop on Chat Completions: parallel calls answered, streaming (with usage) and
    whole answers alternating; the SDK's own message objects sent back."""
    if messages is None:
        messages = [
            {"role": "system", "content": "You are a careful coder."},
            {"role": "user", "content": "Read the README and the docs."},
        ]
    for turn in range(turns):
        ask: dict[str, Any] = {"model": "gpt-4o", "messages": messages, "tools": TOOLS}
        if turn % 2:
            with client.chat.completions.stream(
                **ask, stream_options={"include_usage": True}
            ) as stream:
                completion = stream.get_final_completion()
        else:
            completion = client.chat.completions.create(**ask)
        message = completion.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if message.tool_calls:
            messages += [
                {"role": "tool", "tool_call_id": call.id, "content": result(turn)}
                for call in message.tool_calls
            ]
        else:
            messages.append({"role": "user", "content": f"Next file, #{turn}."})
    return messages


def only_session() -> AgentSession:
    (session,) = AgentSession.objects.filter(gateway__isnull=False)
    return session


def test_observe_mode_forwards_the_clients_bytes_and_stores_each_message_once(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    sent: list[bytes] = []
    for _ in range(25):
        upstream.script(
            ToolCalls([("read_file", {"path": "a.md"}), ("read_file", {"path": "b.md"})]),
            Text("Both read."),
        )
    messages = chat_loop(sdk(served[0], hub_key, "observe", sent), 50)
    received = [r.body for r in upstream.received if r.path == "/v1/chat/completions"]
    assert received == sent
    session = only_session()
    wait_for(lambda: Exchange.objects.filter(session=session).count() == 50)
    assert session.messages.count() == len(messages) - 1  # all but the last prompt, unsent
    last = json.loads(sent[-1])["messages"]
    stored = RawMessage.objects.filter(session=session, seq__lt=len(last)).order_by("seq")
    # The client's messages as it wrote them; the answers as the provider gave them, which mean
    # what the SDK sent back.
    raws = list(stored.values_list("raw", flat=True))
    assert [canonical(json.loads(raw)) for raw in raws] == [canonical(m) for m in last]
    assert all(
        raw.encode() in sent[-1]
        for raw, m in zip(raws, last, strict=True)
        if m["role"] != "assistant"
    )
    streamed = Exchange.objects.filter(session=session, stream=True)
    assert streamed.count() == 25
    assert all(exchange.usage.get("prompt_tokens") for exchange in streamed)


def test_govern_mode_keeps_the_window_and_reuses_the_previous_request(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    client = sdk(served[0], hub_key, "govern")
    upstream.script(ToolCalls([("read_file", {"path": "README.md"})]))
    messages = chat_loop(client, 1)
    AgentSession.objects.filter(pk=only_session().pk).update(context_window=16_000)
    for n in range(49):
        upstream.script(ToolCalls([("read_file", {"path": f"f{n}.md"})]))
    chat_loop(client, 49, result=lambda n: f"{n}: " + "word " * 400, messages=messages)
    session = only_session()
    requests = list(SentRequest.objects.filter(session=session).order_by("number"))
    assert len(requests) == 50
    assert all(r.tokens + r.tool_tokens <= r.window_tokens for r in requests[1:])
    assert any(r.acted for r in requests)
    bodies = [body["messages"] for body in upstream.bodies("/v1/chat/completions")]
    for body in bodies:
        called: set[str] = set()
        for message in body:
            called |= {call["id"] for call in message.get("tool_calls") or []}
            if message["role"] == "tool":
                assert message["tool_call_id"] in called
    grown = sum(1 for a, b in itertools.pairwise(bodies) if b[: len(a)] == a)
    assert grown / (len(bodies) - 1) >= 0.9


PROMPTS = 25
"""Prompts of the pydantic-ai agents' runs: each a tool call and an answer, fifty requests."""


def _reader(reads: list[str]) -> Callable[[str], str]:
    def read_file(path: str) -> str:
        """Read a file."""
        reads.append(path)
        return f"contents of {path}"

    return read_file


def test_pydantic_ai_agents_run_through_the_gateway_on_both_providers(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    url = served[0]
    headers = {"X-Ctxhub-Key": hub_key, "X-Ctxhub-Mode": "govern"}
    openai_client = openai.AsyncOpenAI(
        base_url=f"{url}/gateway/openai/v1", api_key=PROVIDER_KEY, default_headers=headers
    )
    import anthropic

    anthropic_client = anthropic.AsyncAnthropic(
        base_url=f"{url}/gateway/anthropic", api_key=PROVIDER_KEY, default_headers=headers
    )
    models = [
        OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=openai_client)),
        AnthropicModel(
            "claude-sonnet-4-6", provider=AnthropicProvider(anthropic_client=anthropic_client)
        ),
    ]
    for model in models:
        agent = Agent(model, instructions="Answer briefly.")
        reads: list[str] = []
        agent.tool_plain(name="read_file")(_reader(reads))

        history = None
        for turn in range(PROMPTS):
            upstream.script(ToolCalls([("read_file", {"path": f"{turn}.md"})]), Text("done"))
            result = agent.run_sync(f"read {turn}.md", message_history=history)
            history = result.all_messages()
        assert reads == [f"{turn}.md" for turn in range(PROMPTS)]
    gateways = GatewaySession.objects.all()
    assert sorted(g.wire for g in gateways) == ["anthropic", "openai_chat"]
    for gateway in gateways:
        wait_for(
            lambda g=gateway: Exchange.objects.filter(session=g.session_id).count() == 2 * PROMPTS
        )
        # One session each, fifty exchanges (a call and an answer for each prompt), and every
        # message once: the system prompt, then for each prompt its call, result and answer.
        count = RawMessage.objects.filter(session=gateway.session_id).count()
        assert count == 1 + PROMPTS * 4


RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file of the repository.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    }
]


def test_the_responses_api_stateless_as_codex_uses_it(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    sent: list[bytes] = []
    client = sdk(served[0], hub_key, "govern", sent)
    items: list[Any] = [{"role": "user", "content": "Read the README."}]
    for turn in range(20):
        upstream.script(ToolCalls([("read_file", {"path": f"{turn}.md"})]), Text(f"read {turn}"))
        for _ in range(2):
            ask: dict[str, Any] = {
                "model": "gpt-5",
                "instructions": "You are a coding agent.",
                "input": items,
                "tools": RESPONSES_TOOLS,
                "store": False,
            }
            if turn % 2:
                with client.responses.stream(**ask) as stream:
                    response = stream.get_final_response()
            else:
                response = client.responses.create(**ask)
            items += [item.model_dump(exclude_none=True) for item in response.output]
            calls = [item for item in response.output if item.type == "function_call"]
            items += [
                {"type": "function_call_output", "call_id": c.call_id, "output": f"{c.arguments}"}
                for c in calls
            ]
        items.append({"role": "user", "content": f"Now #{turn + 1}."})
    session = only_session()
    wait_for(lambda: Exchange.objects.filter(session=session).count() == 40)
    # One session: the instructions, then every item once (the last prompt was never sent).
    assert RawMessage.objects.filter(session=session).count() == 1 + len(items) - 1
    assert SentRequest.objects.filter(session=session).count() == 40
    refused = httpx2.post(
        f"{served[0]}/gateway/openai/v1/responses",
        json={"model": "gpt-5", "input": "hi", "previous_response_id": "resp_1"},
        headers={"Authorization": f"Bearer {PROVIDER_KEY}", "X-Ctxhub-Key": hub_key},
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "previous_response_id"
    assert "input" in refused.json()["error"]["message"]
