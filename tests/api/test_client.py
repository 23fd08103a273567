"""The Python client against a real server process (the web server on the test database, a real
worker for its jobs), an external agent on the offline demo model keeping its history in the
hub through ``RemoteGovernor`` while a browser watches its session, and a compaction previewed,
run and undone through the API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import FunctionToolset

from ctxhub.client import AsyncHub, Hub, HubError, Job, RemoteGovernor
from ctxhub.client.calls import wait
from ctxhub.governance import is_summary
from ctxhub.governance.offline import demo_model, demo_toolset
from sessions.api.keys import create_key
from sessions.figures import compaction_outcome
from sessions.models import Message
from tests.conftest import ARTIFACTS
from tests.engine.compact_builders import generated_session
from tests.messages import agent_turns, reply, user
from tests.processes import asgi_server, celery_worker

pytestmark = pytest.mark.django_db(transaction=True)

ALL = ["read", "write", "govern"]


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[str]:
    with (
        asgi_server(ARTIFACTS / "logs" / "web-api.log") as url,
        celery_worker(ARTIFACTS / "logs" / "worker-api.log"),  # the compaction jobs
    ):
        yield url


@pytest.fixture
def key(alice: Any) -> str:
    return create_key(alice, name="client", scopes=ALL)[1]


class LosesFirstAnswer(httpx.BaseTransport):
    """The request reaches the server, its answer is lost on the way back (once)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST" and self.lost == 0:
            self.lost += 1
            response.close()
            raise httpx.ReadError("connection reset", request=request)
        return response


def test_a_retried_append_stores_once(
    server: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ctxhub.client.calls.wait", lambda response, attempt: 0.0)
    transport = LosesFirstAnswer()
    with Hub(server, key) as setup:
        session = setup.create_session("Retried", model="openai:gpt-4o")
    with Hub(server, key, transport=transport) as hub:
        appended = hub.append(session.id, [user("hello"), reply("hi")])
    assert transport.lost == 1
    assert (appended.first_seq, appended.last_seq) == (0, 1)
    assert Message.objects.filter(session_id=session.id).count() == 2


def test_sessions_messages_and_context_round_trip(server: str, key: str) -> None:
    with Hub(server, key) as hub:
        made = [hub.create_session(f"s{i}", model="openai:gpt-4o") for i in range(3)]
        assert [s.id for s in hub.sessions(page_size=2)] == [s.id for s in reversed(made)]
        history = agent_turns(4, 2, "row\n" * 50, "Deploy db-west-3")
        hub.append(made[0].id, history, expected_seq=0)
        stored = list(hub.messages(made[0].id, page_size=5))
        assert [m.seq for m in stored] == list(range(len(history)))
        assert stored[0].message == history[0]
        context = hub.context(made[0].id)
        assert context.report.tokens_after > 0
        assert isinstance(context.messages[0], ModelRequest)
        with pytest.raises(HubError) as refused:
            hub.append(made[0].id, [user("late")], expected_seq=0)
        assert (refused.value.status, refused.value.field) == (409, "expected_seq")
        with pytest.raises(HubError) as missing:
            hub.session("00000000-0000-0000-0000-000000000000")
        assert missing.value.status == 404
    with Hub(server, "ctxh_nope_nope") as stranger, pytest.raises(HubError) as denied:
        stranger.session(made[0].id)
    assert denied.value.status == 401
    # The API's own address, as copied from the browser, reaches the same API.
    for address in (f"{server}/api/v1", f"{server}/api/v1/"):
        with Hub(address, key) as hub:
            assert hub.session(made[0].id).id == made[0].id


def test_the_client_waits_as_the_server_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = httpx.Response(429, headers={"Retry-After": "7"})
    assert 7 <= wait(asked, 0) <= 60
    assert wait(httpx.Response(503), 0) <= 0.5
    assert wait(httpx.Response(503), 10) <= 8
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) < 3:
            return httpx.Response(
                503, json={"error": {"code": "down", "message": "down", "field": None}}
            )
        return httpx.Response(200, json={"first_seq": 0, "last_seq": 0, "tokens": 1})

    keys: list[str] = []

    def recording(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers["Idempotency-Key"])
        return handler(request)

    hub = Hub("http://hub.test", "k", transport=httpx.MockTransport(recording))
    monkeypatch.setattr("ctxhub.client.calls.wait", lambda response, attempt: 0.0)
    assert hub.append("s", [user("x")]).tokens == 1
    assert len(calls) == 3
    assert len(set(keys)) == 1  # one key, reused on each retry


async def test_an_external_agent_keeps_its_history_in_the_hub(server: str, key: str) -> None:
    async with AsyncHub(server, key) as hub:
        session = await hub.create_session("External agent", model="offline:demo")
        agent = Agent(
            demo_model(),
            toolsets=[demo_toolset()],
            capabilities=[RemoteGovernor(hub, session.id)],
        )
        result = await agent.run("read README.md")
        assert "Here is what I found" in result.output
        second = await agent.run("list sessions/api")
        assert "sessions/api" in second.output
        stored = [m.message async for m in hub.messages(session.id)]
    kinds = [type(m).__name__ for m in stored]
    assert kinds == ["ModelRequest", "ModelResponse"] * 4
    prompts = [p.content for m in stored for p in m.parts if isinstance(p, UserPromptPart)]
    assert prompts == ["read README.md", "list sessions/api"]
    calls = [
        p
        for m in stored
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    ]
    assert [c.tool_name for c in calls] == ["read_file", "list_files"]
    assert isinstance(stored[-1].parts[0], TextPart)


async def read_file(path: str, offset: int = 0, limit: int = 400) -> str:
    """Read lines of a text file.

    Args:
        path: File path.
        offset: First line to return.
        limit: How many lines to return.
    """
    return "nothing to see\n"


class Recording(httpx.AsyncBaseTransport):
    """Passes requests on to the server, noting the method and path of each."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.seen: list[tuple[str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.method, request.url.path))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_tools_given_and_changed_through_the_client(server: str, key: str) -> None:
    read = ToolDefinition(
        name="read_log",
        description="Read a job's log.",
        parameters_json_schema={"type": "object", "properties": {"job": {"type": "string"}}},
    )
    deploy = {"name": "deploy", "description": "Deploy a build.", "parameters": {"type": "object"}}
    with Hub(server, key) as hub:
        session = hub.create_session("Tooled", model="openai:gpt-4o", tools=[read])
        assert [t.name for t in session.tools] == ["read_log"]
        assert session.tool_tokens == session.tools[0].tokens > 0
        assert session.tools[0].parameters == read.parameters_json_schema
        hub.append(session.id, [user("deploy the nightly build"), reply("on it")])
        assert hub.context(session.id).report.tool_definition_tokens == session.tool_tokens

        changed = hub.update_session(session.id, tools=[read, deploy])
        assert [t.name for t in changed.tools] == ["read_log", "deploy"]
        assert changed.title == "Tooled"
        report = hub.context(session.id).report
        assert report.tool_definition_tokens == changed.tool_tokens > session.tool_tokens

        assert hub.update_session(session.id, title="Renamed").tools == changed.tools
        assert hub.update_session(session.id, tools=[]).tool_tokens == 0
        with pytest.raises(HubError) as refused:
            hub.update_session(session.id, tools=[deploy, deploy])
        assert (refused.value.status, refused.value.field) == (422, "tools")


async def test_an_external_agents_tools_reach_the_hub_when_they_change(
    server: str, key: str
) -> None:
    transport = Recording()
    async with AsyncHub(server, key, transport=transport) as hub:
        session = await hub.create_session("External tools", model="offline:demo")
        governor = RemoteGovernor(hub, session.id)
        agent = Agent(demo_model(), toolsets=[demo_toolset()], capabilities=[governor])
        await agent.run("read README.md")
        await agent.run("list sessions/api")
        # Sent at the first request of the first run, then only when they change.
        patches = [path for method, path in transport.seen if method == "PATCH"]
        assert patches == [f"/api/v1/sessions/{session.id}"]
        stored = await hub.session(session.id)
        # The demo's tools and RemoteGovernor's own recall.
        assert sorted(t.name for t in stored.tools) == ["list_files", "read_file", "recall"]
        report = (await hub.context(session.id)).report
        assert report.tool_definition_tokens == stored.tool_tokens > 0
        # The history's room is smaller by them.
        assert report.budget_tokens == (
            report.window_tokens
            - report.system_tokens
            - report.tool_definition_tokens
            - report.reserved_output_tokens
            - report.safety_margin_tokens
        )

        fewer = FunctionToolset([read_file], id="fewer")
        other = Agent(demo_model(), toolsets=[fewer], capabilities=[governor])
        await other.run("read README.md")
        patches = [path for method, path in transport.seen if method == "PATCH"]
        assert len(patches) == 2
        assert [t.name for t in (await hub.session(session.id)).tools] == ["read_file", "recall"]


# --- compaction ------------------------------------------------------------------------------


def finished(hub: Hub, job: Job) -> Job:
    deadline = time.monotonic() + 120
    while job.active and time.monotonic() < deadline:
        time.sleep(0.2)
        job = hub.job(job.id)
    assert not job.active, job
    return job


def test_a_600_message_session_at_64k_compacts_and_undo_gives_its_context_back(
    server: str, key: str
) -> None:
    history = generated_session(600)
    with Hub(server, key) as hub:
        session = hub.create_session(
            "Six hundred messages",
            model="openai:gpt-4o",
            policy={"context_window": 64_000, "compaction": {"auto": False}},
        )
        for start in range(0, len(history), 200):
            hub.append(session.id, history[start : start + 200])
        before = hub.context(session.id)
        sent_now = before.report.tokens_after + before.report.tool_definition_tokens
        # The window drops or cuts a third of the log: a compaction gives the model a summary
        # of it.
        preview = hub.preview_compaction(session.id)
        assert not preview.nothing_to_compact
        assert not preview.refused
        assert preview.sent_now == sent_now
        assert preview.unseen > 150
        assert preview.message.startswith(
            f"the model gets a summary of {preview.messages:,} messages, "
            f"{preview.unseen:,} of which it no longer saw in full; next request "
            f"{sent_now:,} → at most {preview.sent_after_max:,} tokens"
        )

        job = finished(hub, hub.compact(session.id, expected=preview.fingerprint))
        assert (job.status, job.outcome) == ("done", "summarized"), job.error
        result = job.result
        after = hub.context(session.id)
        assert result["sent_before"] == sent_now
        assert result["sent_after"] == (
            after.report.tokens_after + after.report.tool_definition_tokens
        )
        # The preview's promise holds, ledger included.
        assert result["sent_after"] <= preview.sent_after_max
        assert result["sent_after"] <= max(result["low_water"], sent_now)
        assert job.message == f"compacted: {compaction_outcome(result)}"
        assert job.message.startswith(
            f"compacted: the model gets a summary of {result['messages']:,} messages"
        )
        assert sum(1 for m in after.messages if is_summary(m)) == 1

        # Compacting again finds nothing new before the kept tail.
        again = hub.preview_compaction(session.id)
        assert again.nothing_to_compact
        assert again.message.startswith("nothing to compact")

        hub.undo_compaction(result["compaction"])
        restored = hub.context(session.id)
    dump = ModelMessagesTypeAdapter.dump_json
    assert dump(restored.messages) == dump(before.messages)
    assert restored.report.tokens_after == before.report.tokens_after


def test_the_server_runs_the_api_through_a_chain_without_the_login_s_and_pages_through_theirs(
    server: str, key: str, alice: Any
) -> None:
    """The API is keyed, not logged in: the server runs it without the session, CSRF, login
    and messages middleware, and pages (its browsable docs among them) with theirs."""
    hub = Hub(server, key)
    session = hub.create_session(title="Chains", model="openai:gpt-4o")
    appended = httpx.post(
        f"{server}/api/v1/sessions/{session.id}/messages",
        json={"messages": ModelMessagesTypeAdapter.dump_python([user("hi")], mode="json")},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert appended.status_code == 201  # a POST with no CSRF token, as every agent sends
    assert "set-cookie" not in appended.headers
    assert "x-frame-options" not in appended.headers
    missing = httpx.get(f"{server}/api/v1/no-such-thing")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    docs = httpx.get(f"{server}/api/v1/docs")
    assert docs.status_code == 200
    assert "content-security-policy" in docs.headers
    assert docs.headers["x-frame-options"] == "DENY"
    page = httpx.get(f"{server}/")
    assert page.status_code == 302
    assert page.headers["location"].startswith("/login/")
