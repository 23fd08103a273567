"""Chat turns in-process, on the real database and channel layer: what each turn stores, what
it pushes, how it stops, fails and recovers. (The browser tests drive the same through a real
server.)"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from html import unescape
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.utils import timezone
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from sessions import live, services
from sessions.chat import runner, turns
from sessions.chat.turns import INTERRUPTED
from sessions.models import ChatTurn, Message, MessageSource, SentRequest, TurnStatus
from sessions.xray import xray
from tests.factories import make_session
from tests.fakes.openai_server import FakeOpenAI, ToolCallReply, fake_openai
from tests.messages import agent_turns
from tests.pushes import listening_layer

__all__ = ["fake_openai"]  # the fixture, imported for pytest

pytestmark = pytest.mark.django_db(transaction=True)


class Pushes:
    """Every push to a session's group, as a page watching it would get them."""

    def __init__(self) -> None:
        self.html: list[str] = []
        self.arrived = asyncio.Event()
        self.failed: BaseException | None = None
        """Why receiving stopped, if it did: waiting for more would only time out."""

    def text(self) -> str:
        return "\n".join(self.html)

    async def until(self, arrived: Callable[[Pushes], bool]) -> None:
        """Wait until the pushes so far satisfy ``arrived``: they reach the channel after the
        change that sends them, later on a busy machine (ten seconds at most)."""
        async with asyncio.timeout(10):
            while not arrived(self):
                if self.failed is not None:
                    raise AssertionError("receiving pushes failed") from self.failed
                self.arrived.clear()
                await self.arrived.wait()


@pytest.fixture
async def watch() -> AsyncIterator[Any]:
    layer = listening_layer()
    tasks: list[asyncio.Task[None]] = []

    async def start(session: Any) -> Pushes:
        pushes = Pushes()
        channel = await layer.new_channel()
        await live.mark_watched(session.pk)  # as an open page's socket does
        await layer.group_add(session.group_name, channel)

        async def collect() -> None:
            try:
                while True:
                    pushes.html.append((await layer.receive(channel))["html"])
                    pushes.arrived.set()
            except Exception as error:
                pushes.failed = error
                pushes.arrived.set()

        tasks.append(asyncio.create_task(collect()))
        return pushes

    yield start
    for task in tasks:
        task.cancel()
    # A receive holds the layer's lock on this process's inbox while it waits, and the layer
    # outlives this test's event loop: the cancellation must run here, in this loop, or the
    # lock stays held, bound to a loop that is gone, and every later receive fails.
    await asyncio.gather(*tasks, return_exceptions=True)


def chat_session(owner: Any, **kw: Any) -> Any:
    return make_session(owner, title="Chat", model="offline:demo", **kw)


async def run_turn(session: Any, owner: Any, prompt: str) -> ChatTurn:
    await runner.start_turn(session, owner, prompt)
    await asyncio.wait_for(runner.wait_for_turn(session), timeout=30)
    return await ChatTurn.objects.aget(session=session, prompt=prompt)


def log_of(session: Any) -> list[Message]:
    return list(Message.objects.filter(session=session).order_by("seq"))


def assert_pairs_valid(messages: list[Any]) -> None:
    """The provider rule: every call's result is in the request right after its response."""
    for position, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            calls = {p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)}
            if not calls:
                continue
            following = messages[position + 1] if position + 1 < len(messages) else None
            assert isinstance(following, ModelRequest), f"no results after message {position}"
            answers = ToolReturnPart | RetryPromptPart
            results = {p.tool_call_id for p in following.parts if isinstance(p, answers)}
            assert calls <= results, f"calls {calls - results} of message {position} unanswered"


def streamed(html: str, answer: str, *, batches: int) -> bool:
    """Whether the pushed deltas, placed at their offsets, make up ``answer`` after its first
    words (those come with the part's start), in at least ``batches`` pushes."""
    deltas = re.findall(r'<span data-at="(\d+)">(.*?)</span>', html, re.S)
    assert len(deltas) >= batches, deltas
    start = int(deltas[0][0])
    rebuilt = ""
    for offset, text in deltas:
        assert int(offset) == start + len(rebuilt)
        rebuilt += unescape(text)
    return start > 0 and answer[start:] == rebuilt


@pytest.fixture
async def owner(django_user_model: Any) -> AsyncIterator[Any]:
    yield await django_user_model.objects.acreate(username="chatter")
    # The ORM thread of async code keeps its connection; the test database is dropped after.
    await sync_to_async(connections.close_all)()


@pytest.mark.smoke
async def test_a_turn_stores_every_message_as_it_completes_and_streams_it(
    owner: Any, watch: Any, settings: Any
) -> None:
    settings.CTXHUB_DEMO_PACE_MS = 5
    session = await sync_to_async(chat_session)(owner)
    pushes = await watch(session)

    turn = await run_turn(session, owner, "read README.md and list sessions/chat")

    assert turn.status == TurnStatus.DONE
    assert turn.error == ""
    rows = await sync_to_async(log_of)(session)
    kinds = [(row.kind, row.source) for row in rows]
    assert kinds == [("request", MessageSource.CHAT), ("response", MessageSource.CHAT)] * 3
    messages = [row.message for row in rows]
    assert isinstance(messages[0].parts[0], UserPromptPart)
    assert messages[0].parts[0].content == "read README.md and list sessions/chat"
    calls = [p for m in messages if isinstance(m, ModelResponse) for p in m.parts]
    assert [p.tool_name for p in calls if isinstance(p, ToolCallPart)] == [
        "list_files",
        "read_file",
    ]
    answer = messages[-1].parts[0]
    assert isinstance(answer, TextPart)
    assert "Here is what I found" in answer.content
    # The usage the model reported is kept on every response.
    assert all(row.reported_input_tokens for row in rows if row.kind == "response")
    assert (turn.first_seq, turn.last_seq, turn.requests) == (0, 5, 3)
    assert_pairs_valid(messages)

    # The turn's last push (its fragment, done) comes after the last delta: both are awaited.
    await pushes.until(
        lambda p: streamed(p.text(), answer.content, batches=3) and 'data-status="done"' in p.text()
    )
    html = pushes.text()
    # Deltas carry the offset they start at, and rebuild the whole answer in order.
    assert streamed(html, answer.content, batches=3)
    # The tools were shown running, then done; each request's x-ray went out; the messages
    # were appended live; the turn ended done.
    assert 'data-testid="tool-running"' in html
    assert 'data-testid="tool-done"' in html
    for number in (1, 2, 3):
        assert f"request {number} of the running turn" in html
    assert html.count('id="messages" hx-swap-oob="beforeend"') == 6
    states = re.findall(r'<div id="chat-turn"[^>]*?data-status="(\w+)"', html, re.S)
    assert states[0] == "running"
    assert states[-1] == "done"


async def test_a_second_prompt_while_a_turn_runs_is_refused(owner: Any, settings: Any) -> None:
    settings.CTXHUB_DEMO_PACE_MS = 50
    session = await sync_to_async(chat_session)(owner)
    await runner.start_turn(session, owner, "read README.md")
    with pytest.raises(services.Conflict, match="still running"):
        await runner.start_turn(session, owner, "and another")
    await asyncio.wait_for(runner.wait_for_turn(session), timeout=30)
    assert await ChatTurn.objects.filter(session=session).acount() == 1
    # Once it ended, the next prompt goes.
    assert (await run_turn(session, owner, "list files")).status == TurnStatus.DONE


async def wait_until(predicate: Any) -> None:
    """Poll the database: the state is written by the turn's own thread, nothing to await."""
    async with asyncio.timeout(20):
        while not await sync_to_async(predicate)():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


@pytest.mark.smoke
async def test_stop_during_a_tool_leaves_a_valid_log_and_the_next_turn_runs(
    owner: Any, settings: Any
) -> None:
    settings.CTXHUB_DEMO_PACE_MS = 100  # tools take a second
    session = await sync_to_async(chat_session)(owner)
    await runner.start_turn(session, owner, "read README.md")

    def tool_running() -> bool:
        turn = ChatTurn.objects.get(session=session)
        return any(t["state"] == "running" for t in (turn.live or {}).get("tools", []))

    await wait_until(tool_running)
    await runner.stop_turn(session)
    await asyncio.wait_for(runner.wait_for_turn(session), timeout=10)

    turn = await ChatTurn.objects.aget(session=session)
    assert turn.status == TurnStatus.STOPPED
    assert turn.live == {}
    rows = await sync_to_async(log_of)(session)
    messages = [row.message for row in rows]
    # The prompt, the call, and the call's synthetic result: nothing dangles.
    assert [row.kind for row in rows] == ["request", "response", "request"]
    call = messages[1].parts[0]
    result = messages[2].parts[0]
    assert isinstance(call, ToolCallPart)
    assert isinstance(result, ToolReturnPart)
    assert (result.tool_call_id, result.content) == (call.tool_call_id, INTERRUPTED)
    assert result.outcome == "interrupted"
    assert turn.last_seq == 2

    settings.CTXHUB_DEMO_PACE_MS = 0
    assert (await run_turn(session, owner, "list files")).status == TurnStatus.DONE
    context = await sync_to_async(services.governed_context)(session)
    assert_pairs_valid(context.messages)
    assert_pairs_valid([row.message for row in await sync_to_async(log_of)(session)])


async def test_stop_while_the_answer_streams_keeps_what_completed(
    owner: Any, settings: Any
) -> None:
    settings.CTXHUB_DEMO_PACE_MS = 30
    session = await sync_to_async(chat_session)(owner)
    await runner.start_turn(session, owner, "list the files")  # one tool, then the answer

    def streaming() -> bool:
        parts = (ChatTurn.objects.get(session=session).live or {}).get("parts") or []
        return any(p and p["kind"] == "text" and len(p["text"]) > 10 for p in parts)

    await wait_until(streaming)
    await runner.stop_turn(session)
    await asyncio.wait_for(runner.wait_for_turn(session), timeout=10)
    assert (await ChatTurn.objects.aget(session=session)).status == TurnStatus.STOPPED
    # The prompt, the call and its result are in the log; the half answer is not (it never
    # completed).
    rows = await sync_to_async(log_of)(session)
    assert [row.kind for row in rows] == ["request", "response", "request"]


async def test_stop_with_no_turn_running_is_refused(owner: Any) -> None:
    session = await sync_to_async(chat_session)(owner)
    with pytest.raises(services.Conflict, match="no turn is running"):
        await runner.stop_turn(session)


async def test_a_model_that_cannot_run_fails_the_turn_and_stores_nothing(
    owner: Any, monkeypatch: pytest.MonkeyPatch, watch: Any
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    session = await sync_to_async(chat_session)(owner, chat_model="openai:gpt-4o")
    pushes = await watch(session)
    turn = await run_turn(session, owner, "hello")
    assert turn.status == TurnStatus.FAILED
    assert "OPENAI_API_KEY" in turn.error
    # The advice is the hub's (an offline chat model), not pydantic-ai's test model.
    assert "offline:demo" in turn.error
    assert "Agent('test')" not in turn.error
    assert await Message.objects.filter(session=session).acount() == 0
    await pushes.until(lambda p: bool(p.html) and 'data-testid="chat-error"' in p.html[-1])
    assert "Your message was not sent" in pushes.html[-1]

    unknown = await sync_to_async(chat_session)(owner, chat_model="offline:nope")
    turn = await run_turn(unknown, owner, "hello")
    assert turn.status == TurnStatus.FAILED
    assert "not an offline model" in turn.error


def openai_session(owner: Any, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    return chat_session(owner, chat_model="openai-chat:gpt-4o")


async def test_the_real_http_provider_path_streams_over_sse(
    owner: Any, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, watch: Any
) -> None:
    fake_openai.replies = [
        ToolCallReply("read_file", {"path": "README.md", "limit": 5}, call_id="call_readme"),
        "The README describes ctxhub and how to run it.",
    ]
    session = await sync_to_async(openai_session)(owner, fake_openai, monkeypatch)
    pushes = await watch(session)

    turn = await run_turn(session, owner, "What is this project?")

    assert turn.status == TurnStatus.DONE, turn.error
    assert all(request.get("stream") for request in fake_openai.requests)
    rows = await sync_to_async(log_of)(session)
    messages = [row.message for row in rows]
    assert [row.kind for row in rows] == ["request", "response", "request", "response"]
    result = messages[2].parts[0]
    assert isinstance(result, ToolReturnPart)
    assert result.tool_call_id == "call_readme"
    assert "README.md: lines 1-5" in result.model_response_str()
    assert messages[3].parts[0].content.strip() == "The README describes ctxhub and how to run it."
    # The provider's usage, streamed at the end, is kept on the responses.
    assert all(row.reported_input_tokens for row in rows if row.kind == "response")
    # The second request carried the governed history: the prompt, the call, its result.
    second = fake_openai.requests[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool"]
    await pushes.until(lambda p: streamed(p.text(), messages[3].parts[0].content, batches=1))


async def test_a_provider_that_is_down_fails_the_turn_keeping_the_prompt(
    owner: Any, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.failures = [(503, {})] * 10
    session = await sync_to_async(openai_session)(owner, fake_openai, monkeypatch)
    turn = await run_turn(session, owner, "Are you there?")
    assert turn.status == TurnStatus.FAILED
    assert "503" in turn.error
    rows = await sync_to_async(log_of)(session)
    assert [row.kind for row in rows] == ["request"]  # the prompt, stored before the request
    # The next turn, with the provider back, answers after it.
    fake_openai.failures = []
    fake_openai.replies = ["Yes."]
    assert (await run_turn(session, owner, "Now?")).status == TurnStatus.DONE


async def test_an_overflow_the_recovery_cannot_fix_is_a_failed_turn(
    owner: Any, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await sync_to_async(openai_session)(owner, fake_openai, monkeypatch)
    history = agent_turns(6, 2, "log line\n" * 200, "Investigate OPS-9")
    await sync_to_async(services.append_messages)(session, history, auto_compact=False)
    fake_openai.max_prompt_chars = 10  # less than the newest prompt alone: nothing can fit
    turn = await run_turn(session, owner, "A prompt the provider finds too long")
    assert turn.status == TurnStatus.FAILED
    assert "too long" in turn.error
    assert fake_openai.overflows >= 2  # recovery retried smaller before giving up
    # Nothing stored was lost: the history and the prompt are all in the log.
    assert await Message.objects.filter(session=session).acount() == len(history) + 1


def test_a_turn_whose_server_died_is_closed_when_the_next_prompt_comes(alice: Any) -> None:
    session = chat_session(alice)
    services.append_messages(
        session,
        [
            ModelRequest(parts=[UserPromptPart("read it")]),
            ModelResponse(parts=[ToolCallPart("read_file", {"path": "x"}, tool_call_id="c1")]),
        ],
    )
    dead = turns.begin(session, alice, "read it", "")
    ChatTurn.objects.filter(pk=dead.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    fresh = turns.begin(session, alice, "again", "")
    dead.refresh_from_db()
    assert dead.status == TurnStatus.LOST
    assert fresh.running
    last = Message.objects.filter(session=session).order_by("-seq").first()
    assert last is not None
    result = last.message.parts[0]
    assert isinstance(result, ToolReturnPart)
    assert result.tool_call_id == "c1"


def test_a_live_turn_is_not_taken_over(alice: Any) -> None:
    session = chat_session(alice)
    turns.begin(session, alice, "first", "")
    with pytest.raises(services.Conflict):
        turns.begin(session, alice, "second", "")


@pytest.mark.parametrize(
    ("prompt", "reason"),
    [
        ("", "type a message"),
        ("   ", "type a message"),
        ("a\x00b", "NUL"),
        ("x" * 100_001, "limited"),
    ],
)
def test_a_bad_prompt_is_refused_before_anything_is_written(
    alice: Any, prompt: str, reason: str
) -> None:
    session = chat_session(alice)
    with pytest.raises(services.Invalid, match=reason) as refused:
        turns.begin(session, alice, prompt, "")
    assert refused.value.field == "prompt"
    assert not ChatTurn.objects.filter(session=session).exists()


async def test_a_tool_call_with_bad_arguments_shows_the_retry(
    owner: Any, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, watch: Any
) -> None:
    fake_openai.replies = [ToolCallReply("read_file", {"file": "README.md"}), "Sorry."]
    session = await sync_to_async(openai_session)(owner, fake_openai, monkeypatch)
    pushes = await watch(session)
    turn = await run_turn(session, owner, "Read the readme")
    assert turn.status == TurnStatus.DONE, turn.error
    await pushes.until(lambda p: 'data-testid="tool-retried"' in p.text())
    assert "refused its arguments" in pushes.text()
    # The retry request is in the log, paired with its call.
    assert_pairs_valid([row.message for row in await sync_to_async(log_of)(session)])


async def test_a_turn_stores_the_agents_tools_and_the_xray_counts_them(
    owner: Any, watch: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.CTXHUB_DEMO_PACE_MS = 5
    session = await sync_to_async(chat_session)(owner)
    pushes = await watch(session)

    turn = await run_turn(session, owner, "read README.md")
    assert turn.status == TurnStatus.DONE, turn.error

    await session.arefresh_from_db()
    # The demo's tools, reading an evicted output back and recall: what each request carried.
    names = [tool["name"] for tool in session.tool_definitions]
    assert sorted(names) == ["list_files", "read_evicted_output", "read_file", "recall"]
    total = sum(session.tool_tokens)
    assert total > 100
    sent = [r async for r in SentRequest.objects.filter(session=session).order_by("number")]
    assert [r.tool_tokens for r in sent] == [total] * turn.requests
    # The offline model measures nothing: each response stores what its request carried, as
    # the hub counted it, not pydantic-ai's guess of 50 input tokens.
    answers = [
        m async for m in Message.objects.filter(session=session, kind="response").order_by("seq")
    ]
    assert [m.reported_input_tokens for m in answers] == [r.tokens + r.tool_tokens for r in sent]
    assert all(m.payload["usage"]["output_tokens"] > 0 for m in answers)

    # The x-ray each request pushed, and the page's, count them and add up to the total sent.
    await pushes.until(lambda p: "request 2 of the running turn" in p.text())
    rows = re.findall(r'data-category="tools".*?data-tokens="(\d+)"', pushes.text(), re.S)
    assert rows
    assert {int(tokens) for tokens in rows} == {total}
    view = await sync_to_async(lambda: xray(services.governed_context(session)))()
    assert {c.key: c.tokens for c in view.categories}["tools"] == total
    assert sum(c.tokens for c in view.used) == view.governed
    assert sorted(name for name, _ in view.tools) == sorted(names)

    # A second turn with the same tools stores nothing again.
    stored: list[bool] = []
    set_tools = runner.set_tools

    def recording(*args: Any, **kwargs: Any) -> bool:
        stored.append(set_tools(*args, **kwargs))
        return stored[-1]

    monkeypatch.setattr(runner, "set_tools", recording)
    await run_turn(session, owner, "list sessions")
    assert stored
    assert not any(stored)


async def test_the_model_recalls_what_governance_hid_during_a_turn(
    owner: Any, settings: Any
) -> None:
    from tests.recall_session import planted_session

    settings.CTXHUB_DEMO_PACE_MS = 0
    session = await sync_to_async(chat_session)(owner, policy={"context_window": 32_000})
    history, facts = planted_session(120)
    await sync_to_async(services.append_messages)(session, history, auto_compact=False)
    sent = str((await sync_to_async(services.governed_context)(session)).messages)
    fact = next(f for f in facts if f.value not in sent)

    turn = await run_turn(session, owner, f"recall {fact.query}")
    assert turn.status == TurnStatus.DONE, turn.error
    rows = await sync_to_async(log_of)(session)
    call, result, answer = (row.message for row in rows[-3:])
    assert isinstance(call, ModelResponse)
    assert [(p.tool_name, p.args_as_dict()) for p in call.parts if isinstance(p, ToolCallPart)] == [
        ("recall", {"query": fact.query})
    ]
    returned = next(p for p in result.parts if isinstance(p, ToolReturnPart))
    assert fact.value in str(returned.content)
    assert f"#{fact.seq} tool output of read_file" in str(returned.content)
    assert fact.value in str(answer)
