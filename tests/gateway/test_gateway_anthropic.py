"""The gateway as Claude Code and apps on the Anthropic SDK use it: the official SDK pointed at a
real hub process (the production web server on the test database), the hub pointed at a fake
Anthropic written from the documented format, which records every body it receives."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from django.conf import settings
from django.test import Client

from gateway.chain import canonical
from gateway.models import Exchange, GatewaySession, RawMessage
from sessions.api.keys import create_key
from sessions.models import AgentSession, Message, SentRequest
from tests.gateway.conftest import TIMEOUT_SECONDS
from tests.gateway.fake_upstream import (
    Error,
    FakeUpstream,
    Slow,
    Text,
    Thinking,
    ToolCalls,
)
from tests.gateway.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

PROVIDER_KEY = "sk-ant-api03-PLANTED-provider-secret-0123456789"
TOOLS = [
    {
        "name": "Read",
        "description": "Read a file of the repository.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    }
]


@pytest.fixture
def hub_key(alice: Any) -> str:
    return create_key(alice, name="gateway", scopes=["read", "write"])[1]


class Sent:
    """The bodies a client sent, as its HTTP client wrote them."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, request: httpx2.Request) -> None:
        if request.url.path.endswith("/messages"):
            self.bodies.append(request.read())


def client(
    url: str, hub_key: str, *, mode: str, sent: Sent | None = None, **headers: str
) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=f"{url}/gateway/anthropic",
        api_key=PROVIDER_KEY,
        max_retries=0,
        default_headers={"X-Ctxhub-Key": hub_key, "X-Ctxhub-Mode": mode, **headers},
        # The SDK brings its own HTTP client package.
        http_client=httpx2.Client(event_hooks={"request": [sent]} if sent else {}),
    )


def tool_loop(
    sdk: anthropic.Anthropic,
    turns: int,
    *,
    system: str = "You are a careful coder.",
    result: Callable[[int], str] = lambda n: f"line {n}\n" * 3,
    messages: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> list[dict[str, Any]]:
    """A coding agent's loop: each answer's tool calls are run and their results sent back;
    a text answer gets a new prompt. Streaming and whole answers alternate."""
    if messages is None:
        messages = [{"role": "user", "content": "Read the README, then the docs."}]
    for turn in range(turns):
        kwargs = {
            "model": "claude-sonnet-4-6",
            "max_tokens": 512,
            "system": system,
            "messages": messages,
            "tools": TOOLS,
            **extra,
        }
        if turn % 2:
            with sdk.messages.stream(**kwargs) as stream:
                answer = stream.get_final_message()
        else:
            answer = sdk.messages.create(**kwargs)
        messages.append(
            {
                "role": "assistant",
                "content": [block.model_dump(exclude_none=True) for block in answer.content],
            }
        )
        calls = [block for block in answer.content if block.type == "tool_use"]
        if calls:
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": c.id, "content": result(turn)}
                        for c in calls
                    ],
                }
            )
        else:
            messages.append({"role": "user", "content": f"Now the next file, #{turn}."})
    return messages


def only_session() -> AgentSession:
    (session,) = AgentSession.objects.filter(gateway__isnull=False)
    return session


def test_observe_mode_forwards_the_clients_bytes_and_stores_each_message_once(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    url = served[0]
    sent = Sent()
    messages = tool_loop(client(url, hub_key, mode="observe", sent=sent), 50)
    received = [r.body for r in upstream.received if r.path == "/v1/messages"]
    assert received == sent.bodies  # byte for byte, all fifty
    session = only_session()
    wait_for(lambda: Exchange.objects.filter(session=session).count() == 50)
    # The log is the conversation: the system prompt, then every message once, the last
    # answer included. The client's messages are stored as it wrote them; the answers as the
    # provider gave them, which is what the client sent back.
    assert session.messages.count() == 1 + len(messages) - 1
    last_body = json.loads(sent.bodies[-1])
    stored = RawMessage.objects.filter(
        session=session, seq__gte=1, seq__lte=len(last_body["messages"])
    )
    raws = list(stored.order_by("seq").values_list("raw", flat=True))
    assert [json.loads(raw) for raw in raws] == last_body["messages"]
    assert all(raw.encode() in sent.bodies[-1] for raw in raws if json.loads(raw)["role"] == "user")
    assert Exchange.objects.filter(session=session, governed=False, status=200).count() == 50
    usage = Exchange.objects.filter(session=session).order_by("pk").last()
    assert usage is not None
    assert usage.usage["cache_read_input_tokens"] > 0


def test_an_answer_names_its_session_unless_observe_mode_forwarded_it_before_the_session_was_found(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    url = served[0]
    headers = {"x-api-key": PROVIDER_KEY, "x-ctxhub-key": hub_key}
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Which session am I?"}],
    }
    governed = httpx.post(
        f"{url}/gateway/anthropic/v1/messages",
        json=body,
        headers={**headers, "x-ctxhub-mode": "govern"},
    )
    assert governed.status_code == 200
    assert governed.headers["x-ctxhub-governed"] == "yes"
    (named,) = AgentSession.objects.filter(gateway__isnull=False)
    assert governed.headers["x-ctxhub-session"] == str(named.pk)
    observed = httpx.post(
        f"{url}/gateway/anthropic/v1/messages",
        json={**body, "messages": [{"role": "user", "content": "And now, unwatched?"}]},
        headers={**headers, "x-ctxhub-mode": "observe"},
    )
    assert observed.status_code == 200
    assert observed.headers["x-ctxhub-governed"] == "no"
    assert "x-ctxhub-session" not in observed.headers
    # Stored all the same, beside the model's work: a session of its own, the answer in it.
    wait_for(lambda: Exchange.objects.exclude(session=named).filter(status=200).exists())
    other = AgentSession.objects.filter(gateway__isnull=False).exclude(pk=named.pk).get()
    assert other.messages.count() == 2
    assert other.gateway.mode == "observe"


def test_govern_mode_sends_the_governors_request_within_the_window_with_pairs_and_thinking_intact(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    url = served[0]
    sdk = client(url, hub_key, mode="govern")
    upstream.script(
        Thinking(
            "I will read it.", "c2lnbmF0dXJlLTE=", ToolCalls([("Read", {"path": "README.md"})])
        )
    )
    messages = tool_loop(sdk, 1)
    session = only_session()
    AgentSession.objects.filter(pk=session.pk).update(context_window=16_000)
    # Big results, so that the window has to act; thinking before every call.
    for n in range(2, 50):
        upstream.script(
            Thinking(f"step {n}", f"c2lnLXt{n}", ToolCalls([("Read", {"path": f"f{n}.md"})]))
        )
    tool_loop(sdk, 49, result=lambda n: f"{n}: " + "word " * 400, messages=messages)
    bodies = [json.loads(r.body) for r in upstream.received if r.path == "/v1/messages"]
    requests = list(SentRequest.objects.filter(session=session).order_by("number"))
    assert len(requests) == 50
    assert all(r.tokens + r.tool_tokens <= r.window_tokens for r in requests[1:])
    for body in bodies:
        calls: set[str] = set()
        for message in body["messages"]:
            blocks = message["content"] if isinstance(message["content"], list) else []
            for block in blocks:
                if block["type"] == "tool_use":
                    calls.add(block["id"])
                if block["type"] == "tool_result":
                    assert block["tool_use_id"] in calls, "a result without its call"
                if block["type"] == "thinking":
                    assert block["signature"].startswith("c2l")
    # Between the Governor's actions, a request is the previous one with the new messages
    # after it (the breakpoint the gateway places at its end aside): the provider's cache reads
    # all of it.
    sent = [[canonical(message) for message in body["messages"]] for body in bodies]
    grown = sum(1 for before, after in itertools.pairwise(sent) if after[: len(before)] == before)
    assert all("cache_control" in body["messages"][-1]["content"][-1] for body in bodies)
    assert grown / (len(bodies) - 1) >= 0.9
    acted = [r for r in requests if r.acted]
    assert acted, "the window never acted: the test's history was too small"


def test_interleaved_clients_and_their_sub_agents_thread_into_their_own_sessions(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    url = served[0]
    clients = 20
    conversations: list[list[dict[str, Any]]] = [[] for _ in range(clients)]
    sdk = client(url, hub_key, mode="observe")

    def step(n: int, *, sub_agent: bool = False) -> None:
        marker = f"user_x_account_y_session_{n}"
        system = f"Sub-agent of {n}: search." if sub_agent else f"You are agent {n}."
        messages = (
            conversations[n] if not sub_agent else [{"role": "user", "content": f"search for {n}"}]
        )
        if not sub_agent:
            messages.append({"role": "user", "content": f"task {len(messages)} of agent {n}"})
        answer = sdk.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=64,
            system=system,
            messages=messages,
            metadata={"user_id": marker},
        )
        if not sub_agent:
            messages.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in answer.content],
                }
            )

    for turn in range(3):
        for n in range(clients):
            upstream.script(Text(f"answer {turn} to {n}"))
            step(n)
            if turn == 1 and n % 4 == 0:
                upstream.script(Text("found it"))
                step(n, sub_agent=True)
    sessions = GatewaySession.objects.select_related("session")
    wait_for(lambda: Exchange.objects.count() == 3 * clients + clients // 4)
    parents = [g for g in sessions if g.parent_id is None]
    children = [g for g in sessions if g.parent_id is not None]
    assert len(parents) == clients
    assert len(children) == clients // 4
    for gateway in parents:
        n = int(gateway.client_session.rsplit("_", 1)[1])
        stored = [
            json.loads(raw)
            for raw in RawMessage.objects.filter(session=gateway.session_id)
            .order_by("seq")
            .values_list("raw", flat=True)
        ]
        assert stored[0]["content"] == f"You are agent {n}."
        assert stored[1:] == conversations[n]  # every message once, none of another agent's
    for gateway in children:
        parent = GatewaySession.objects.get(pk=gateway.parent_id)
        assert parent.client_session == gateway.client_session
        assert Message.objects.filter(session=gateway.session_id).count() == 3


def test_a_retried_or_rewound_conversation_goes_on_in_a_fork_of_its_session(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str, alice: Any
) -> None:
    url = served[0]
    messages = tool_loop(client(url, hub_key, mode="govern"), 6)
    original = only_session()
    wait_for(lambda: Exchange.objects.filter(session=original).count() == 6)
    stored_before = original.messages.count()  # the system prompt and every message sent

    def send(
        conversation: list[dict[str, Any]], user_id: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        marker = {"metadata": {"user_id": user_id}} if user_id else {}
        answer = httpx.post(
            f"{url}/gateway/anthropic/v1/messages",
            json={
                "model": "claude-sonnet-4-6",
                "max_tokens": 512,
                "system": "You are a careful coder.",
                "tools": TOOLS,
                "messages": conversation,
                **marker,
            },
            headers={"x-api-key": PROVIDER_KEY, "x-ctxhub-key": hub_key},
        )
        assert answer.status_code == 200
        return answer.headers["x-ctxhub-session"], answer.json()

    # Rewound to the first answer (the system prompt, then messages 0 to 3), then edited.
    upstream.script(Text("The tests are in tests/."))
    rewound = [*messages[:4], {"role": "user", "content": "Instead, list the tests."}]
    fork_id, answer = send(rewound)
    assert fork_id != str(original.pk)
    fork = AgentSession.objects.get(pk=fork_id)
    assert fork.gateway.parent_id == original.pk
    assert fork.title.endswith("(fork at #4)")
    wait_for(lambda: Exchange.objects.filter(session=fork, status=200).exists())
    raws = lambda session: list(  # noqa: E731
        RawMessage.objects.filter(session=session).order_by("seq").values_list("raw", flat=True)
    )
    assert raws(fork)[:5] == raws(original)[:5]
    assert [json.loads(raw) for raw in raws(fork)[5:6]] == [rewound[-1]]
    assert fork.messages.count() == 7  # the shared five, the edit, the answer
    assert original.messages.count() == stored_before  # the original is left as it was
    assert fork.gateway.branched_at == 4
    pages = Client()
    pages.force_login(alice)
    fork_page = pages.get(fork.get_absolute_url()).content.decode()
    assert f'Went on from #4 of <a href="{original.get_absolute_url()}">' in fork_page
    original_page = pages.get(original.get_absolute_url()).content.decode()
    assert "Went on elsewhere (retried, rewound or edited)" in original_page
    assert fork.get_absolute_url() in original_page

    # The fork goes on as any session: its next request continues it.
    upstream.script(Text("Done."))
    answered = {"role": "assistant", "content": answer["content"]}
    go_on = [*rewound, answered, {"role": "user", "content": "Thanks."}]
    assert send(go_on)[0] == fork_id
    assert AgentSession.objects.filter(gateway__isnull=False).count() == 2

    # The original's last request sent again after its answer was stored (a client's retry):
    # its own fork, at the request's last message, holding the retry's answer.
    upstream.script(Text("A second opinion."))
    retry_id, _ = send(messages[:-2])
    assert retry_id not in (str(original.pk), fork_id)
    retried = AgentSession.objects.get(pk=retry_id)
    assert retried.gateway.parent_id == original.pk
    wait_for(lambda: retried.messages.count() == len(messages) - 2 + 1 + 1)
    assert original.messages.count() == stored_before

    # Another conversation that shares only the system prompt and a first prompt, no answer,
    # is a session of its own.
    upstream.script(Text("Hello."))
    other_id, _ = send(messages[:1])
    other = AgentSession.objects.get(pk=other_id)
    assert other.gateway.parent_id is None
    assert other.pk not in (original.pk, fork.pk, retried.pk)
    wait_for(lambda: other.messages.count() == 3)

    # A client that marks its session (Claude Code's metadata.user_id) and sends its first
    # request again after the answer was stored: a retry, so a fork of that session.
    marked = [{"role": "user", "content": "Start the review."}]
    upstream.script(Text("Reviewing."), Text("Reviewing, again."))
    first_id, _ = send(marked, user_id="user_x_account_y_session_retry")
    wait_for(lambda: AgentSession.objects.get(pk=first_id).messages.count() == 3)
    again_id, _ = send(marked, user_id="user_x_account_y_session_retry")
    again = AgentSession.objects.get(pk=again_id)
    assert again.gateway.parent_id == uuid.UUID(first_id)
    assert again.gateway.branched_at == 1


def test_upstream_errors_reach_the_client_as_the_provider_sent_them(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    sdk = client(served[0], hub_key, mode="govern")
    ask = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
    }
    upstream.script(
        Error(
            429,
            {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
            {"retry-after": "7"},
        )
    )
    with pytest.raises(anthropic.RateLimitError) as limited:
        sdk.messages.create(**ask)
    assert limited.value.response.headers["retry-after"] == "7"
    assert limited.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
    }
    upstream.script(
        Error(
            529,
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            {},
        )
    )
    with pytest.raises(anthropic.InternalServerError) as overloaded:
        sdk.messages.create(**ask)
    assert overloaded.value.status_code == 529
    # A retry of the same request after the errors finds the same session, nothing doubled.
    sdk.messages.create(**ask)
    session = only_session()
    wait_for(lambda: Exchange.objects.filter(session=session).count() == 3)
    assert session.messages.count() == 2  # the prompt, then the one answer
    statuses = sorted(Exchange.objects.filter(session=session).values_list("status", flat=True))
    assert statuses == [200, 429, 529]


def test_a_wrong_body_or_key_is_refused_in_the_providers_shape_and_nothing_is_stored(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    url = served[0]
    endpoint = f"{url}/gateway/anthropic/v1/messages"
    headers = {
        "x-api-key": PROVIDER_KEY,
        "x-ctxhub-key": hub_key,
        "anthropic-version": "2023-06-01",
    }
    bad = httpx.post(
        endpoint,
        content=b'{"model": "m", "messages": [{"role": "robot", "content": "x"}]}',
        headers=headers,
    )
    assert bad.status_code == 400
    assert bad.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages[0].role: must be user or assistant",
        },
    }
    assert not AgentSession.objects.exists()
    assert not upstream.received
    with pytest.raises(anthropic.AuthenticationError):
        client(url, "ctxh_000000000000_wrong", mode="observe").messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
    without_provider_key = httpx.post(
        endpoint,
        json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": hub_key},
    )
    assert without_provider_key.status_code == 401
    assert "X-Ctxhub-Key" in without_provider_key.json()["error"]["message"]
    assert not AgentSession.objects.exists()
    assert not upstream.received


def test_a_body_the_provider_takes_is_taken_and_one_over_it_refused_whole_or_chunked(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    most = settings.CTXHUB_GATEWAY_MAX_BODY_BYTES  # Anthropic's 32 MB, over the hub's uploads
    assert most > settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    headers = {"x-api-key": PROVIDER_KEY, "x-ctxhub-key": hub_key, "x-ctxhub-mode": "observe"}
    endpoint = f"{served[0]}/gateway/anthropic/v1/messages"

    def body(size: int) -> bytes:
        """A request of ``size`` bytes, most of them in a member the hub forwards unread."""
        request = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        shell = json.dumps({**request, "padding": ""}).encode()
        return json.dumps({**request, "padding": "x" * (size - len(shell))}).encode()

    taken = body(most)
    assert len(taken) == most
    answered = httpx.post(endpoint, content=taken, headers=headers, timeout=60)
    assert answered.status_code == 200
    assert upstream.received[-1].body == taken

    over = body(most + 1)

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(over), 1 << 20):
            yield over[start : start + (1 << 20)]

    for content in (over, chunks()):
        refused = httpx.post(endpoint, content=content, headers=headers, timeout=60)
        assert refused.status_code == 413
        assert refused.json()["error"] == {
            "type": "request_too_large",
            "message": "the body is over 33,554,432 bytes, the most the hub takes",
        }
    openai = httpx.post(
        f"{served[0]}/gateway/openai/v1/chat/completions",
        content=over,
        headers={"authorization": f"Bearer {PROVIDER_KEY}", "x-ctxhub-key": hub_key},
    )
    assert openai.status_code == 413
    assert openai.json()["error"]["type"] == "invalid_request_error"
    assert len(upstream.received) == 1


def test_a_client_that_goes_away_mid_stream_cancels_the_upstream_and_keeps_what_came(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    upstream.script(Slow(Text("one two three four five six seven eight nine ten"), 0.2))
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": "count"}],
    }
    headers = {"x-api-key": PROVIDER_KEY, "x-ctxhub-key": hub_key}
    with (
        httpx.Client() as http,
        http.stream(
            "POST", f"{served[0]}/gateway/anthropic/v1/messages", json=body, headers=headers
        ) as answer,
    ):
        for chunk in answer.iter_raw():
            if b"two" in chunk:
                break
    upstream.wait_for_cancelled(1)
    session = only_session()
    wait_for(lambda: Exchange.objects.filter(session=session).exists())
    exchange = Exchange.objects.get(session=session)
    assert exchange.response_seq is None
    assert "went away" in exchange.error
    assert "one" in exchange.unfinished
    assert session.messages.count() == 1  # the prompt; the cut answer is not in the log


def test_an_upstream_that_does_not_answer_in_time_is_a_504(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    sdk = client(served[0], hub_key, mode="observe")
    upstream.script(Slow(Text("late"), TIMEOUT_SECONDS + 2))
    with pytest.raises(anthropic.APIStatusError) as late:
        sdk.messages.create(
            model="claude-sonnet-4-6", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
    assert late.value.status_code == 504
    assert late.value.body["error"]["type"] == "timeout_error"


def test_count_tokens_is_the_upstreams_answer_and_stores_nothing(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    sdk = client(served[0], hub_key, mode="govern")
    ask: dict[str, Any] = {
        "model": "claude-sonnet-4-6",
        "system": "You are a careful coder.",
        "messages": [{"role": "user", "content": "How long is this?"}],
        "tools": TOOLS,
    }
    counted = sdk.messages.count_tokens(**ask)
    direct = httpx.post(f"{upstream.url}/v1/messages/count_tokens", json=ask).json()
    assert counted.input_tokens == direct["input_tokens"] > 0
    assert not AgentSession.objects.exists()


def test_a_request_refused_as_too_long_is_shrunk_once_and_sent_again_in_govern_mode(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    too_long = Error(
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 210000 tokens > 200000 maximum",
            },
        },
        {},
    )
    messages = tool_loop(client(served[0], hub_key, mode="govern"), 12)
    upstream.reset()
    upstream.script(too_long, Text("fits now"))
    answer = client(served[0], hub_key, mode="govern").messages.create(
        model="claude-sonnet-4-6",
        max_tokens=64,
        system="You are a careful coder.",
        messages=messages,
        tools=TOOLS,
    )
    assert answer.content[0].type == "text"
    refused, retried = (body["messages"] for body in upstream.bodies("/v1/messages"))
    assert len(retried) < len(refused)
    assert retried[-1]["content"] == refused[-1]["content"]  # the latest request stays
    blocks = [b for m in retried if isinstance(m["content"], list) for b in m["content"]]
    called = {b["id"] for b in blocks if b["type"] == "tool_use"}
    assert all(b["tool_use_id"] in called for b in blocks if b["type"] == "tool_result")
    # In observe mode the refusal reaches the client as it came.
    upstream.script(too_long)
    with pytest.raises(anthropic.BadRequestError) as passed_on:
        client(served[0], hub_key, mode="observe").messages.create(
            model="claude-sonnet-4-6", max_tokens=64, messages=messages, tools=TOOLS
        )
    assert "prompt is too long" in str(passed_on.value)


def test_observe_mode_relays_the_upstreams_events_byte_for_byte(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 256,
        "stream": True,
        "messages": [{"role": "user", "content": "Think, then read a file."}],
        "tools": TOOLS,
    }
    script = Thinking("Reading first.", "c2lnbmF0dXJl", ToolCalls([("Read", {"path": "a.md"})]))

    def streamed(url: str, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
        upstream.reset()
        upstream.script(script)
        with httpx.stream("POST", url, json=body, headers=headers) as answer:
            return answer.read(), dict(answer.headers)

    through, headers = streamed(
        f"{served[0]}/gateway/anthropic/v1/messages",
        {"x-api-key": PROVIDER_KEY, "x-ctxhub-key": hub_key, "x-ctxhub-mode": "observe"},
    )
    direct, direct_headers = streamed(f"{upstream.url}/v1/messages", {"x-api-key": PROVIDER_KEY})
    assert through == direct
    assert b"signature_delta" in through
    assert b"input_json_delta" in through
    assert headers["content-type"] == direct_headers["content-type"]
