"""The REST API's contract, endpoint by endpoint: keys and scopes, isolation, idempotent
appends, conflicts, bad input that stores nothing, rate limits, the error shape."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from config.celery import app as celery_app
from ctxhub.governance import Policy
from sessions import services
from sessions.api import keys
from sessions.api.keys import create_key, revoke
from sessions.models import (
    AgentSession,
    ApiKey,
    Compaction,
    CompactionJob,
    EvictedOutput,
    Message,
    Pin,
)
from tests.factories import make_session
from tests.governed.oracle import dump, naive_governed
from tests.messages import agent_turns, reply, user

pytestmark = pytest.mark.django_db

ALL = ["read", "write", "govern"]


def as_json(messages: list[Any]) -> list[dict[str, Any]]:
    from sessions.payloads import message_to_payload

    return [message_to_payload(m) for m in messages]


class Api:
    """A client speaking to /api/v1 with one key."""

    def __init__(self, key: str) -> None:
        self.client = Client()
        self.key = key

    def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Any:
        extra = {"Authorization": f"Bearer {self.key}", **(headers or {})}
        if method == "get":
            return self.client.get(f"/api/v1{path}", headers=extra)
        data = json.dumps(body) if body is not None else None
        return getattr(self.client, method)(
            f"/api/v1{path}", data=data, content_type="application/json", headers=extra
        )


@pytest.fixture
def api(alice: Any) -> Api:
    return Api(create_key(alice, name="agent", scopes=ALL)[1])


@pytest.fixture
def session(alice: Any) -> AgentSession:
    return make_session(alice, title="Pushed", model="openai:gpt-4o")


def error(response: Any) -> dict[str, Any]:
    body: dict[str, Any] = response.json()["error"]
    assert set(body) >= {"code", "message", "field"}
    return body


# --- keys -----------------------------------------------------------------------------------


@pytest.mark.smoke
def test_every_bad_key_is_a_401(alice: Any, session: AgentSession) -> None:
    revoked_key, revoked = create_key(alice, name="old", scopes=ALL)
    revoke(revoked_key)
    expired_key, expired = create_key(alice, name="exp", scopes=ALL, expires_days=1)
    ApiKey.objects.filter(pk=expired_key.pk).update(expires_at=timezone.now() - timedelta(1))
    _, good = create_key(alice, name="good", scopes=ALL)
    wrong = good[:-3] + ("aaa" if not good.endswith("aaa") else "bbb")
    for key in ("", "nonsense", wrong, revoked, expired):
        response = Api(key).call("get", f"/sessions/{session.pk}")
        assert response.status_code == 401, key
        assert error(response)["code"] == "unauthenticated"
    assert Client().get("/api/v1/sessions").status_code == 401  # no header at all
    assert Api(good).call("get", f"/sessions/{session.pk}").status_code == 200


def test_a_key_checked_lately_is_taken_without_a_query_until_it_is_stale(
    alice: Any, session: AgentSession, monkeypatch: Any
) -> None:
    """An agent's requests come many times a minute: the key is asked of the database once per
    ``FRESH_SECONDS``. A key revoked by another process (the row changed under this one) is
    refused once that time is up; one that expires meanwhile, at once."""
    key, text = create_key(alice, name="agent", scopes=ALL, expires_days=1)
    agent = Api(text)
    assert agent.call("get", f"/sessions/{session.pk}").status_code == 200
    with CaptureQueriesContext(connection) as asked:
        assert agent.call("get", f"/sessions/{session.pk}").status_code == 200
    assert asked.captured_queries
    assert not [q for q in asked.captured_queries if ApiKey._meta.db_table in q["sql"]]
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    assert agent.call("get", f"/sessions/{session.pk}").status_code == 200
    now = time.monotonic()
    monkeypatch.setattr(keys.time, "monotonic", lambda: now + keys.FRESH_SECONDS)
    assert agent.call("get", f"/sessions/{session.pk}").status_code == 401

    _, text = create_key(alice, name="brief", scopes=ALL, expires_days=1)
    brief = Api(text)
    assert brief.call("get", f"/sessions/{session.pk}").status_code == 200
    soon = timezone.now() + timedelta(minutes=1)
    monkeypatch.setattr(keys.timezone, "now", lambda: soon + timedelta(days=1))
    assert brief.call("get", f"/sessions/{session.pk}").status_code == 401


def test_keys_are_stored_hashed_and_shown_once(alice: Any) -> None:
    out, err = StringIO(), StringIO()
    call_command("create_api_key", "alice", "--scopes", "read,write", stdout=out, stderr=err)
    text = out.getvalue().strip()
    key = ApiKey.objects.get(owner=alice)
    assert text.startswith("ctxh_")
    assert key.digest not in text
    assert text.split("_", 2)[2] not in json.dumps(list(ApiKey.objects.values()), default=str)
    assert key.scopes == ["read", "write"]
    assert "not shown again" in err.getvalue()
    with pytest.raises(Exception, match="choose among"):
        call_command("create_api_key", "alice", "--scopes", "admin", stdout=out, stderr=err)


@pytest.mark.parametrize(
    ("scopes", "method", "path", "body", "missing"),
    [
        (["write", "govern"], "get", "/sessions", None, "read"),
        (["read"], "post", "/sessions", {"title": "t", "model": "m:x"}, "write"),
        (["read", "write"], "post", "/sessions/{id}/clear", None, "govern"),
        (["read", "write"], "put", "/sessions/{id}/pins/0", None, "govern"),
        (["read", "govern"], "post", "/sessions/{id}/messages", {"messages": [{}]}, "write"),
    ],
)
def test_scopes_are_enforced(
    alice: Any, session: AgentSession, scopes: list[str], method: str, path: str, body: Any,
    missing: str,
) -> None:  # fmt: skip
    api = Api(create_key(alice, name="narrow", scopes=scopes)[1])
    response = api.call(method, path.format(id=session.pk), body)
    assert response.status_code == 403
    assert missing in error(response)["message"]
    assert not Message.objects.exists()
    assert not AgentSession.objects.exclude(pk=session.pk).exists()


def test_another_users_session_is_a_404_whatever_the_scopes(
    bob: Any, session: AgentSession
) -> None:
    api = Api(create_key(bob, name="bob", scopes=ALL)[1])
    for method, path in [
        ("get", ""), ("patch", ""), ("get", "/messages"), ("get", "/context"),
        ("post", "/messages"), ("post", "/clear"), ("put", "/pins/0"), ("post", "/compactions"),
    ]:  # fmt: skip
        body = {"messages": as_json([user("x")])} if path == "/messages" else {}
        response = api.call(method, f"/sessions/{session.pk}{path}", body)
        assert response.status_code == 404, (method, path, response.content)
    assert api.call("get", "/sessions").json()["sessions"] == []
    assert not Message.objects.exists()


# --- sessions --------------------------------------------------------------------------------


def test_sessions_are_created_listed_by_cursor_read_and_patched(api: Api, alice: Any) -> None:
    created = [
        api.call("post", "/sessions", {"title": f"s{i}", "model": "openai:gpt-4o"}).json()
        for i in range(5)
    ]
    seen: list[str] = []
    cursor = None
    while True:
        page = api.call("get", "/sessions?limit=2" + (f"&cursor={cursor}" if cursor else ""))
        assert page.status_code == 200
        seen += [s["id"] for s in page.json()["sessions"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert seen == [s["id"] for s in reversed(created)]
    one = created[0]["id"]
    patched = api.call(
        "patch", f"/sessions/{one}", {"title": "renamed", "policy": {"context_window": 50_000}}
    )
    assert patched.status_code == 200, patched.content
    assert patched.json()["title"] == "renamed"
    assert AgentSession.objects.get(pk=one).policy == {"context_window": 50_000}
    assert api.call("get", f"/sessions/{one}").json()["title"] == "renamed"
    nul = api.call("patch", f"/sessions/{one}", {"title": "x\u0000"})
    assert nul.status_code == 422
    assert error(nul)["field"] == "title"
    assert AgentSession.objects.get(pk=one).title == "renamed"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "openai:gpt-4o"}, "title"),
        (
            {"title": "t", "model": "openai:gpt-4o", "policy": {"safety_margin": 2}},
            "policy.safety_margin",
        ),
        ({"title": "t", "model": "openai:gpt-4o", "context_window": 5}, "context_window"),
        # PostgreSQL keeps no NUL character: refused, not a failed write.
        ({"title": "p\u0000k", "model": "openai:gpt-4o"}, "title"),
        (
            {"title": "t", "model": "openai:gpt-4o", "policy": {"window": {"notice": "\u0000"}}},
            "policy.window.notice",
        ),
    ],
)
def test_a_bad_session_names_its_field(api: Api, body: dict[str, Any], field: str) -> None:
    response = api.call("post", "/sessions", body)
    assert response.status_code == 422
    assert error(response)["field"] == field
    assert not AgentSession.objects.exists()


def test_a_bad_cursor_is_a_422(api: Api) -> None:
    response = api.call("get", "/sessions?cursor=%%%")
    assert response.status_code == 422
    assert error(response)["field"] == "cursor"


# --- messages --------------------------------------------------------------------------------


@pytest.mark.smoke
def test_an_append_is_idempotent_with_its_key(api: Api, session: AgentSession) -> None:
    body = {"messages": as_json([user("hello"), reply("hi")])}
    path = f"/sessions/{session.pk}/messages"
    first = api.call("post", path, body, {"Idempotency-Key": "turn-1"})
    assert first.status_code == 201
    assert first.json()["first_seq"] == 0
    assert first.json()["last_seq"] == 1
    again = api.call("post", path, body, {"Idempotency-Key": "turn-1"})
    assert (again.status_code, again.json()) == (201, first.json())
    assert Message.objects.filter(session=session).count() == 2
    other = api.call(
        "post", path, {"messages": as_json([user("else")])}, {"Idempotency-Key": "turn-1"}
    )
    assert other.status_code == 422
    assert error(other)["code"] == "idempotency_key_reused"
    assert Message.objects.filter(session=session).count() == 2
    # Without a key, the same body is a new append.
    assert api.call("post", path, body).json()["first_seq"] == 2


def test_a_retry_whose_expected_seq_has_passed_gets_the_first_answer(
    api: Api, session: AgentSession
) -> None:
    path = f"/sessions/{session.pk}/messages"
    body = {"messages": as_json([user("hello")]), "expected_seq": 0}
    first = api.call("post", path, body, {"Idempotency-Key": "turn-1"})
    assert first.status_code == 201
    again = api.call("post", path, body, {"Idempotency-Key": "turn-1"})
    assert (again.status_code, again.json()) == (201, first.json())
    # Without the key, the same body is refused: the log has moved past seq 0.
    conflict = api.call("post", path, body)
    assert conflict.status_code == 409
    assert error(conflict)["field"] == "expected_seq"
    assert Message.objects.filter(session=session).count() == 1


LONE_SURROGATE = "a\ud800b"  # a JSON "\ud800" escape without its pair


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (
            {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": LONE_SURROGATE}]},
            "messages[1].parts[0].content",
        ),
        (
            {"kind": "response", "parts": [
                {"part_kind": "tool-call", "tool_name": "grep", "tool_call_id": "c1",
                 "args": {"pattern": LONE_SURROGATE}}]},
            "messages[1].parts[0].args.pattern",
        ),
    ],
)  # fmt: skip
def test_text_that_is_not_unicode_is_refused_naming_its_field(
    api: Api, session: AgentSession, message: dict[str, Any], field: str
) -> None:
    messages = [*as_json([user("hello")]), message]
    appended = api.call("post", f"/sessions/{session.pk}/messages", {"messages": messages})
    assert appended.status_code == 422
    assert error(appended)["field"] == field
    assert not Message.objects.exists()
    governed = api.call("post", "/govern", {"messages": messages, "model": "openai:gpt-4o"})
    assert governed.status_code == 422
    assert error(governed)["field"] == field
    titled = api.call("patch", f"/sessions/{session.pk}", {"title": LONE_SURROGATE})
    assert titled.status_code == 422
    assert error(titled)["field"] == "title"


def test_expected_seq_guards_against_a_concurrent_append(api: Api, session: AgentSession) -> None:
    path = f"/sessions/{session.pk}/messages"
    assert (
        api.call("post", path, {"messages": as_json([user("a")]), "expected_seq": 0}).status_code
        == 201
    )
    stale = api.call("post", path, {"messages": as_json([user("b")]), "expected_seq": 0})
    assert stale.status_code == 409
    assert error(stale)["field"] == "expected_seq"
    assert error(stale)["next_seq"] == 1
    assert Message.objects.filter(session=session).count() == 1


def test_a_malformed_message_names_its_path_and_stores_nothing(
    api: Api, session: AgentSession
) -> None:
    good = as_json([user("a"), reply("b"), user("c")])
    bad = {"kind": "response", "parts": [{"part_kind": "tool-call", "tool_name": 5}]}
    response = api.call("post", f"/sessions/{session.pk}/messages", {"messages": [*good, bad]})
    assert response.status_code == 422
    assert error(response)["field"] == "messages[3].parts[0].tool_name"
    assert not Message.objects.exists()


def test_a_body_over_the_limit_is_a_413_and_stores_nothing(
    api: Api, session: AgentSession, settings: Any
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    body = {"messages": as_json([user("x" * 20_000)])}
    response = api.call("post", f"/sessions/{session.pk}/messages", body)
    assert response.status_code == 413
    assert error(response)["code"] == "too_large"
    assert not Message.objects.exists()


def test_messages_page_after_a_seq_or_the_newest(api: Api, session: AgentSession) -> None:
    services.append_messages(session, [user(f"m{i}") for i in range(7)], auto_compact=False)
    path = f"/sessions/{session.pk}/messages"
    after = api.call("get", f"{path}?after_seq=2&limit=3").json()
    assert [m["seq"] for m in after["messages"]] == [3, 4, 5]
    assert after["next_after_seq"] == 5
    newest = api.call("get", f"{path}?limit=3").json()
    assert [m["seq"] for m in newest["messages"]] == [4, 5, 6]
    assert newest["next_after_seq"] is None
    assert newest["messages"][0]["message"]["parts"][0]["content"] == "m4"


# --- context and governance ---------------------------------------------------------------


@pytest.mark.smoke
def test_the_context_is_the_stored_history_governed_under_the_sessions_policy(
    api: Api, session: AgentSession
) -> None:
    history = agent_turns(8, 3, "line\n" * 2_000, "Migrate db-west-3")
    services.append_messages(session, history, auto_compact=False)
    services.pin(session, 4)  # the result of call c0_1, in the first turn: the window drops it
    path = f"/sessions/{session.pk}/context"

    def pinned_result(body: dict[str, Any]) -> list[str]:
        return [
            part["content"]
            for message in body["messages"]
            for part in message["parts"]
            if part.get("tool_call_id") == "c0_1" and part["part_kind"] == "tool-return"
        ]

    def expect(body: dict[str, Any], governed: Any) -> None:
        assert body["messages"] == dump(governed.messages)
        assert body["report"]["tokens_after"] == governed.report.tokens_after
        assert body["report"]["budget_tokens"] == governed.report.budget_tokens
        assert body["report"]["model"] == governed.report.model

    body = api.call("get", path).json()
    expect(body, naive_governed(session, Policy()))
    assert pinned_result(body) == ["line\n" * 2_000]  # sent whole
    assert body["report"]["tokens_before"] > body["report"]["tokens_after"]

    small = api.call("get", f"{path}?max_tokens=20000").json()
    expect(small, naive_governed(session, Policy(context_window=20_000)))
    assert small["report"]["tokens_after"] <= 20_000

    # Another model's tokenizer counts afresh; the pins still hold.
    other_model = "anthropic:claude-sonnet-4-5"
    other = api.call("get", f"{path}?model={other_model}").json()
    expect(other, naive_governed(session, Policy(), model=other_model))
    assert other["report"]["model"] == other_model
    assert pinned_result(other) == ["line\n" * 2_000]


def test_a_governor_state_sent_back_keeps_the_previous_request(api: Api) -> None:
    # An agent that keeps its own history sends each answer's state with its next request:
    # between the governor's actions the request is the previous one with the new messages.
    session = agent_turns(40, 2, "row\n" * 300, "Fix OPS-1")
    policy = {"context_window": 16_000}
    state = None
    previous: list[Any] | None = None
    appended = 0
    for end in range(len(session) - 60, len(session) + 1, 3):
        body = {"messages": as_json(session[:end]), "model": "openai:gpt-4o", "policy": policy}
        if state is not None:
            body["state"] = state
        answer = api.call("post", "/govern", body)
        assert answer.status_code == 200
        found = answer.json()
        assert found["report"]["fits"]
        if found["acted"] is None:
            assert previous is not None
            assert found["messages"][: len(previous) - 1] == previous[:-1]
            appended += 1
        previous, state = found["messages"], found["state"]
    assert appended > 10
    assert not Message.objects.exists()


def test_a_governor_state_continues_a_history_sent_without_timestamps(api: Api) -> None:
    # Hand-written JSON without timestamps is given new ones each time it is parsed: the
    # state still continues (providers are not sent timestamps).
    turns = [
        {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": f"q{n} " * 40}]}
        for n in range(12)
    ]
    state = None
    acted = []
    for end in range(6, 13):
        body: dict[str, Any] = {"messages": turns[:end], "model": "openai:gpt-4o"}
        if state is not None:
            body["state"] = state
        found = api.call("post", "/govern", body).json()
        acted.append(found["acted"])
        state = found["state"]
    assert acted == ["start", *[None] * 6]


def test_stateless_govern(api: Api) -> None:
    history = as_json(agent_turns(6, 2, "row\n" * 3_000, "Fix OPS-1"))
    response = api.call(
        "post",
        "/govern",
        {"messages": history, "model": "openai:gpt-4o", "policy": {"context_window": 16_000}},
    )
    assert response.status_code == 200
    body = response.json()
    assert body["report"]["tokens_after"] <= 16_000
    assert len(body["messages"]) <= len(history)
    assert not Message.objects.exists()


@pytest.mark.django_db(transaction=True)  # the job runs as a worker would, committing
def test_compaction_dry_run_job_conflict_and_undo(api: Api, session: AgentSession) -> None:
    services.append_messages(session, agent_turns(10, 3, "x\n" * 400, "OPS-7"), auto_compact=False)
    path = f"/sessions/{session.pk}/compactions"
    preview = api.call("post", path, {"dry_run": True, "focus": "OPS-7"})
    assert preview.status_code == 200
    assert preview.json()["summarized_seqs"]
    assert not Compaction.objects.exists()
    celery_app.conf.task_always_eager = False  # no worker: the job stays queued
    try:
        queued = api.call("post", path, {"focus": "OPS-7"})
        assert queued.status_code == 202
        job = queued.json()
        assert job["status"] == "queued"
        second = api.call("post", path, {"focus": "something else"})
        assert second.status_code == 409
        assert error(second)["job"] == job["id"]
        assert api.call("get", f"/jobs/{job['id']}").json()["status"] == "queued"
    finally:
        celery_app.conf.task_always_eager = True
    from sessions.jobs.compaction import run_job

    run_job(job["id"])
    compaction = Compaction.objects.get(session=session)
    undone = api.call("post", f"/compactions/{compaction.pk}/undo")
    assert undone.status_code == 200
    assert undone.json()["undone"] is True
    assert api.call("post", f"/compactions/{compaction.pk}/undo").status_code == 409


def test_clear_undo_and_pins(api: Api, session: AgentSession) -> None:
    services.append_messages(session, [user("a"), reply("b")], auto_compact=False)
    pinned = api.call("put", f"/sessions/{session.pk}/pins/0")
    assert pinned.status_code == 200
    assert Pin.objects.filter(session=session, seq=0, undone_at=None).exists()
    assert api.call("delete", f"/sessions/{session.pk}/pins/0").status_code == 200
    assert api.call("delete", f"/sessions/{session.pk}/pins/0").status_code == 404
    assert api.call("put", f"/sessions/{session.pk}/pins/99").status_code == 404
    cleared = api.call("post", f"/sessions/{session.pk}/clear")
    assert cleared.status_code == 201
    assert api.call("get", f"/sessions/{session.pk}/context").json()["messages"] == []
    assert api.call("post", f"/sessions/{session.pk}/clear").status_code == 409
    assert api.call("post", f"/clears/{cleared.json()['id']}/undo").status_code == 200
    assert len(api.call("get", f"/sessions/{session.pk}/context").json()["messages"]) == 2


def test_evicted_outputs_read_back(api: Api, session: AgentSession) -> None:
    session.policy = {"eviction": {"threshold_tokens": 2_000}}
    session.save()
    huge = "\n".join(f"line {i} payload" for i in range(3_000))
    services.append_messages(session, agent_turns(3, 1, huge, "Read the log"), auto_compact=False)
    context = api.call("get", f"/sessions/{session.pk}/context").json()
    refs = (
        [p["ref"] for p in context["report"]["parts"] if p.get("ref")]
        if "parts" in context["report"]
        else []
    )

    ref = EvictedOutput.objects.filter(session=session).values_list("ref", flat=True).first()
    assert ref is not None, refs
    found = api.call("get", f"/sessions/{session.pk}/evicted/{ref}?grep=line 2999")
    assert found.status_code == 200
    assert "line 2999 payload" in found.json()["text"]
    assert api.call("get", f"/sessions/{session.pk}/evicted/nope").status_code == 404
    assert api.call("get", f"/sessions/{session.pk}/evicted/{ref}?grep=(").status_code == 422


# --- limits and docs ---------------------------------------------------------------------------


@pytest.mark.smoke
def test_a_key_over_its_rate_gets_429_and_others_do_not(
    alice: Any, settings: Any, mid_minute: None
) -> None:
    settings.CTXHUB_API_RATE_PER_MINUTE = 3
    busy = Api(create_key(alice, name="busy", scopes=ALL)[1])
    calm = Api(create_key(alice, name="calm", scopes=ALL)[1])
    statuses = [busy.call("get", "/sessions").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    limited = busy.call("get", "/sessions")
    assert 1 <= int(limited["Retry-After"]) <= 61
    assert error(limited)["code"] == "rate_limited"
    assert calm.call("get", "/sessions").status_code == 200


def test_the_schema_and_docs_are_served_offline(client: Client) -> None:
    schema = client.get("/api/v1/openapi.json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/v1/sessions/{session_id}/messages" in paths
    assert "/api/v1/govern" in paths
    docs = client.get("/api/v1/docs").content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in docs
    assert "cdn" not in docs.lower()


def test_errors_outside_the_operations_are_json_too(api: Api) -> None:
    unknown = api.call("get", "/nowhere")
    assert unknown.status_code == 404
    assert error(unknown)["code"] == "not_found"
    wrong_method = api.call("delete", "/sessions")
    assert wrong_method.status_code == 405
    assert error(wrong_method)["code"] == "method_not_allowed"
    assert set(wrong_method["Allow"].split(", ")) == {"GET", "POST"}
    broken = api.call("post", "/sessions", None)
    assert broken.status_code in (400, 422)
    assert error(broken)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("put", "/sessions/{id}/pins/99999999999"),
        ("delete", "/sessions/{id}/pins/99999999999"),
        ("post", "/compactions/99999999999/undo"),
        ("get", "/sessions/{id}/messages?after_seq=99999999999"),
    ],
)
def test_numbers_beyond_the_database_are_a_422(
    api: Api, session: AgentSession, method: str, path: str
) -> None:
    response = api.call(method, path.format(id=session.pk), {})
    assert response.status_code == 422
    assert error(response)["code"] == "invalid"


# --- what a session's settings must leave room for ----------------------------------------------


def test_a_window_too_small_for_the_policy_is_refused_naming_the_least(
    api: Api, session: AgentSession
) -> None:
    # The default policy reserves 8,192 tokens for the answer and keeps a 10 % margin.
    least = services.session_policy(session).least_window()
    assert 9_000 < least < 9_200
    too_small = api.call("patch", f"/sessions/{session.pk}", {"context_window": least - 1})
    assert too_small.status_code == 422
    assert error(too_small)["field"] == "context_window"
    assert f"the least window is {least} tokens" in error(too_small)["message"]
    session.refresh_from_db()
    assert session.context_window is None  # nothing stored
    enough = api.call("patch", f"/sessions/{session.pk}", {"context_window": least})
    assert enough.status_code == 200

    tiny = {"title": "tiny", "model": "openai:gpt-4o", "context_window": 3_986}
    created = api.call("post", "/sessions", tiny)
    assert created.status_code == 422
    assert error(created)["field"] == "context_window"
    # A policy that reserves more than the session's window holds is refused as well, and
    # a window and policy changed together are judged together.
    greedy = {"policy": {"reserved_output_tokens": 20_000}}
    refused = api.call("patch", f"/sessions/{session.pk}", greedy)
    assert refused.status_code == 422
    assert error(refused)["field"] == "policy"
    assert "leaves no room for history" in error(refused)["message"]
    both = api.call("patch", f"/sessions/{session.pk}", {"context_window": 64_000, **greedy})
    assert both.status_code == 200
    assert both.json()["policy"] == greedy["policy"]


def test_a_compaction_bound_to_a_stale_preview_is_refused(api: Api, session: AgentSession) -> None:
    services.append_messages(session, agent_turns(10, 3, "x\n" * 400, "OPS-7"), auto_compact=False)
    path = f"/sessions/{session.pk}/compactions"
    preview = api.call("post", path, {"dry_run": True}).json()
    services.append_messages(session, [user("one more thing")], auto_compact=False)

    stale = api.call("post", path, {"expected": preview["fingerprint"]})
    assert stale.status_code == 409
    assert error(stale)["field"] == "expected"
    assert not Compaction.objects.exists()
    fresh = api.call("post", path, {"dry_run": True}).json()
    bound = api.call("post", path, {"expected": fresh["fingerprint"]})
    assert bound.status_code == 202


@pytest.mark.parametrize("body", [[], [{"focus": "x"}], "compact", 7, None])
def test_a_body_that_is_not_an_object_is_refused(
    api: Api, session: AgentSession, body: Any
) -> None:
    services.append_messages(session, agent_turns(10, 3, "x\n" * 400, "OPS-7"), auto_compact=False)
    raw = json.dumps(body)
    answer = api.client.post(
        f"/api/v1/sessions/{session.pk}/compactions",
        data=raw,
        content_type="application/json",
        headers={"Authorization": f"Bearer {api.key}"},
    )
    assert answer.status_code == 422, answer.content
    assert error(answer)["field"] == "body"
    assert "a JSON object is expected" in error(answer)["message"]
    assert not CompactionJob.objects.exists()
