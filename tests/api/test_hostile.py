"""What an attacker or a buggy agent sends: each is a 4xx naming the field, nothing is stored,
and a stored row that cannot be read back takes down no page but its own session's, which
says why."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import Client

from ctxhub.governance.tokens import tokenizer_for
from sessions import services
from sessions.api.keys import create_key
from sessions.models import AgentSession, EvictedOutput, Message
from sessions.payloads import MAX_DEPTH, message_from_payload
from sessions.services.log import _unlogged
from tests.factories import make_session
from tests.messages import reply, user

pytestmark = pytest.mark.django_db


def nested(depth: int, leaf: Any = "x") -> Any:
    for _ in range(depth):
        leaf = {"a": leaf}
    return leaf


def tool_call(args: Any) -> dict[str, Any]:
    return {
        "kind": "response",
        "parts": [{"part_kind": "tool-call", "tool_name": "t", "args": args, "tool_call_id": "c"}],
    }


class Api:
    def __init__(self, key: str) -> None:
        self.client = Client()
        self.auth = {"Authorization": f"Bearer {key}"}

    def post(self, path: str, raw: str) -> Any:
        return self.client.post(
            f"/api/v1{path}", raw, content_type="application/json", headers=self.auth
        )

    def get(self, path: str) -> Any:
        return self.client.get(f"/api/v1{path}", headers=self.auth)


@pytest.fixture
def api(alice: Any) -> Api:
    return Api(create_key(alice, name="agent", scopes=["read", "write", "govern"])[1])


def refused(response: Any, status: int = 422) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body: dict[str, Any] = response.json()["error"]
    return body


@pytest.mark.parametrize("depth", [MAX_DEPTH, 300, 900])
def test_arguments_nested_deeper_than_can_be_read_back_are_refused(
    api: Api, alice: Any, depth: int
) -> None:
    session = make_session(alice)
    body = json.dumps({"messages": [tool_call(nested(depth))]})
    error = refused(api.post(f"/sessions/{session.pk}/messages", body))
    assert error["field"].startswith("messages[0].parts[0].args")
    assert f"deeper than {MAX_DEPTH} levels" in error["message"]
    assert not Message.objects.exists()
    governed = json.dumps({"model": "openai:gpt-4o", "messages": [tool_call(nested(depth))]})
    assert refused(api.post("/govern", governed))["field"].startswith("messages[0].parts[0]")


def test_arguments_as_deep_as_allowed_are_stored_and_read_back(api: Api, alice: Any) -> None:
    session = make_session(alice)
    # The message itself takes three levels (its parts, a part, the arguments).
    body = json.dumps({"messages": [tool_call(nested(MAX_DEPTH - 4))]})
    assert api.post(f"/sessions/{session.pk}/messages", body).status_code == 201
    assert api.get(f"/sessions/{session.pk}/context").status_code == 200


def test_a_body_deeper_than_any_parser_goes_is_a_400_naming_the_body(api: Api, alice: Any) -> None:
    session = make_session(alice)
    for deep in ("[" * 200_000 + "]" * 200_000, '{"messages": [' + '{"a": ' * 5_000):
        error = refused(api.post(f"/sessions/{session.pk}/messages", deep), status=400)
        assert error["field"] == "body"
    assert not Message.objects.exists()


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ("nested(1_000)", "policy.a.a.a.a.a.a"),  # where the chain starts
        ('{"context_window": ' + "9" * 400 + "}", "policy.context_window"),
        ('{"reserved_output_tokens": ' + "9" * 400 + "}", "policy.reserved_output_tokens"),
        ('{"safety_margin": 1e400}', "policy.safety_margin"),
        ('{"masking": {"keep_last": -' + "9" * 400 + "}}", "policy.masking.keep_last"),
    ],
)
def test_policies_nested_or_numbered_beyond_reason_are_refused(
    api: Api, policy: str, field: str
) -> None:
    raw_policy = json.dumps(nested(1_000)) if policy == "nested(1_000)" else policy
    raw = '{"title": "x", "model": "openai:gpt-4o", "policy": ' + raw_policy + "}"
    assert refused(api.post("/sessions", raw))["field"] == field
    assert not AgentSession.objects.exists()


@pytest.mark.parametrize(
    ("state", "field"),
    [
        ('{"size": -1}', "state.size"),
        ('{"size": 1' + "0" * 400 + "}", "state.size"),
        ('{"plan": {"turn_start": "x", "head_end": 0}}', "state.plan.turn_start"),
        ('{"plan": {"turn_start": 0, "head_end": 0, "spared": [[1]]}}', "state.plan.spared[0]"),
        ('{"version": 2}', "state.version"),
        ('{"digest": "' + "f" * 100 + '"}', "state.digest"),
        ('{"sneaky": 1}', "state.sneaky"),
    ],
)
def test_a_governor_state_that_is_not_one_is_refused_naming_the_field(
    api: Api, state: str, field: str
) -> None:
    messages = json.dumps(
        [{"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "hi"}]}]
    )
    raw = '{"model": "openai:gpt-4o", "messages": ' + messages + ', "state": ' + state + "}"
    assert refused(api.post("/govern", raw))["field"] == field


@pytest.mark.parametrize(
    "plan",
    [
        {"turn_start": 0, "head_end": 0, "repeated": [[10**9, 0, 1, 0]]},
        {"turn_start": 0, "head_end": 0, "repeated": [[0, 99, 1, 0]]},
        {"turn_start": 0, "head_end": 0, "mask_span": [0, 0, 10**9, 0]},
        {"turn_start": 0, "head_end": 3, "cut": 1},
        {"turn_start": 0, "head_end": 0, "cut": 2, "spared": [10**9]},
    ],
)
def test_a_state_naming_what_the_history_does_not_have_is_a_new_start(
    api: Api, plan: dict[str, Any]
) -> None:
    # Timestamped, as pydantic-ai writes messages: the same history in both calls.
    turns = [
        {
            "kind": "request",
            "parts": [
                {
                    "part_kind": "user-prompt",
                    "content": f"q{n}",
                    "timestamp": "2026-01-01T00:00:00Z",
                }
            ],
        }
        for n in range(5)
    ]
    first = api.post("/govern", json.dumps({"model": "openai:gpt-4o", "messages": turns[:4]}))
    state = {**first.json()["state"], "plan": plan}
    answer = api.post(
        "/govern", json.dumps({"model": "openai:gpt-4o", "messages": turns, "state": state})
    )
    assert answer.status_code == 200
    assert answer.json()["acted"] == "edited"


def test_a_state_of_another_history_is_a_new_start(api: Api) -> None:
    turns = [
        {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": f"q{n} " * 50}]}
        for n in range(5)
    ]
    state = {"size": 400, "digest": "0" * 32, "plan": {"turn_start": 9_000, "head_end": 9_000}}
    answer = api.post(
        "/govern", json.dumps({"model": "openai:gpt-4o", "messages": turns, "state": state})
    )
    assert answer.status_code == 200
    assert answer.json()["acted"] == "edited"
    assert len(answer.json()["messages"]) == 5


def test_an_evicted_reference_that_names_nothing_is_a_404(api: Api, alice: Any) -> None:
    session = make_session(alice)
    for ref in ("%00", "..%2f..%2fetc%2fpasswd", "ev_" + "0" * 20):
        assert refused(api.get(f"/sessions/{session.pk}/evicted/{ref}"), 404)
    page = Client()
    page.force_login(alice)
    assert page.get(f"/sessions/{session.pk}/evicted/%00/").status_code == 404


def test_a_backtracking_grep_stops_in_time_with_a_note(api: Api, alice: Any) -> None:
    session = make_session(alice)
    text = "word " * 140_000 + "!"  # one 700 KB line the pattern below backtracks over
    ref = "ev_" + "a" * 20
    EvictedOutput.objects.create(session=session, ref=ref, text=text, tokens=140_000)
    started = time.monotonic()
    answer = api.get(f"/sessions/{session.pk}/evicted/{ref}?grep=(%5Cw%2B%5Cs%3F)*%24")
    assert answer.status_code == 200
    assert time.monotonic() - started < 30  # without the limit: minutes at full CPU
    assert "grep stopped at line 0" in answer.json()["text"]
    plain = api.get(f"/sessions/{session.pk}/evicted/{ref}?grep=word")
    assert plain.json()["text"].startswith(f"[{ref}: matches of 'word' 0-0 of 1; the output")
    assert "stopped" not in plain.json()["text"]


def test_a_stored_message_that_cannot_be_read_back_breaks_no_listing(
    api: Api, alice: Any, django_user_model: Any
) -> None:
    """As a message stored before the edge refused such nesting: the fleet (the owner's and
    staff's) still lists every session, the session's own page and context say what is wrong,
    and other sessions are untouched."""
    healthy = make_session(alice, title="healthy")
    services.append_messages(healthy, [user("hello"), reply("hi")], auto_compact=False)
    broken = make_session(alice, title="broken")
    services.append_messages(broken, [user("start")], auto_compact=False)
    payload = tool_call(nested(250))
    message = message_from_payload(payload)
    row = _unlogged(broken, message, payload, "api", tokenizer_for(broken.model))
    row.seq = 1
    Message.objects.bulk_create([row])

    staff = django_user_model.objects.create_user("carol", password="pw", is_staff=True)
    for viewer in (alice, staff):
        pages = Client()
        pages.force_login(viewer)
        fleet = pages.get("/")
        assert fleet.status_code == 200
        listing = fleet.content.decode()
        assert "healthy" in listing
        assert "broken" in listing
        assert "cannot be governed" in listing
    pages = Client()
    pages.force_login(alice)
    page = pages.get(f"/sessions/{broken.pk}/")
    assert page.status_code == 200
    assert 'data-testid="unreadable"' in page.content.decode()
    assert "message #1" in page.content.decode()
    assert pages.get(f"/sessions/{healthy.pk}/").status_code == 200

    error = refused(api.get(f"/sessions/{broken.pk}/context"), 409)
    assert error["code"] == "unreadable_message"
    assert error["seq"] == 1
    assert api.get(f"/sessions/{healthy.pk}/context").status_code == 200


def test_an_encoded_lone_surrogate_is_a_422_naming_the_field(api: Api, alice: Any) -> None:
    session = make_session(alice)
    raw = (
        b'{"messages": [{"kind": "request", "parts": [{"part_kind": "user-prompt", '
        b'"content": "a\xed\xa0\x80b"}]}]}'
    )
    answer = api.client.post(
        f"/api/v1/sessions/{session.pk}/messages",
        raw,
        content_type="application/json",
        headers=api.auth,
    )
    # The bytes ED A0 80: a surrogate encoded as if it were a character, not UTF-8.
    assert refused(answer)["field"] == "messages[0].parts[0].content"
    assert not Message.objects.exists()


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_number_json_cannot_write_back_is_a_422_naming_the_field(
    api: Api, alice: Any, constant: str
) -> None:
    """Python's JSON parser reads NaN and Infinity (and 1e999 as Infinity); stored, they would
    come back as null, a value the agent never sent."""
    session = make_session(alice)
    arguments = '{"messages": [{"kind": "response", "parts": [{"part_kind": "tool-call", '
    arguments += f'"tool_name": "t", "args": {{"ratio": {constant}}}, "tool_call_id": "c"}}]}}]}}'
    error = refused(api.post(f"/sessions/{session.pk}/messages", arguments))
    assert error["field"] == "messages[0].parts[0].args.ratio"
    assert "not a finite number" in error["message"]
    details = '{"messages": [{"kind": "response", "parts": [{"part_kind": "text", "content": "x"}],'
    details += f' "usage": {{"details": {{"reasoning": {constant}}}}}}}]}}'
    assert refused(api.post(f"/sessions/{session.pk}/messages", details))["field"] == (
        "messages[0].usage.details.reasoning"
    )
    assert not Message.objects.exists()
    policy = f'{{"policy": {{"max_tokens": {constant}}}}}'
    answer = api.client.patch(
        f"/api/v1/sessions/{session.pk}", policy, content_type="application/json", headers=api.auth
    )
    assert refused(answer)["field"].startswith("policy")
    session.refresh_from_db()
    assert session.policy == {}


@pytest.mark.parametrize("tokens", [2**31, 10**30])
def test_usage_too_large_to_store_is_a_422_naming_the_field(
    api: Api, alice: Any, tokens: int
) -> None:
    session = make_session(alice)
    response = {
        "kind": "response",
        "parts": [{"part_kind": "text", "content": "done"}],
        "usage": {"input_tokens": tokens, "output_tokens": 3},
    }
    answer = api.client.post(
        f"/api/v1/sessions/{session.pk}/messages",
        json.dumps({"messages": [{"kind": "request", "parts": [
            {"part_kind": "user-prompt", "content": "go"}]}, response]}),
        content_type="application/json",
        headers=api.auth,
    )  # fmt: skip
    assert refused(answer)["field"] == "messages[1].usage.input_tokens"
    assert not Message.objects.exists()


HOSTILE_TOOLS = [
    ('"read_log"', "tools"),
    ("[42]", "tools[0]"),
    ('[{"description": "no name"}]', "tools[0].name"),
    ('[{"name": 7}]', "tools[0].name"),
    ('[{"name": ""}]', "tools[0].name"),
    ('[{"name": "' + "n" * 201 + '"}]', "tools[0].name"),
    ('[{"name": "a\\u0000b"}]', "tools[0].name"),
    ('[{"name": "a", "description": "x\\ud800y"}]', "tools[0].description"),
    ('[{"name": "a", "description": "' + "d" * 50_001 + '"}]', "tools[0].description"),
    ('[{"name": "a", "parameters": {"\\udfff": {}}}]', "tools[0].parameters"),
    ('[{"name": "a", "parameters": {"enum": ["\\udc00"]}}]', "tools[0].parameters.enum[0]"),
    (
        '[{"name": "a", "parameters": ' + json.dumps(nested(150)) + "}]",
        "tools[0].parameters.a.a.a.a.a.a",
    ),
    (
        '[{"name": "a", "parameters": ' + json.dumps(nested(1_000)) + "}]",
        "tools[0].parameters.a.a.a.a.a.a",
    ),
    ('[{"name": "a", "parameters": {"maximum": 1e400}}]', "tools[0].parameters.maximum"),
    ('[{"name": "a", "parameters": {"maximum": NaN}}]', "tools[0].parameters.maximum"),
    ('[{"name": "a", "parameters": []}]', "tools[0].parameters"),
    ('[{"name": "a", "parameters": {"d": "' + "p" * 100_001 + '"}}]', "tools[0].parameters"),
    ('[{"name": "a", "parameters_json_schema": {}}]', "tools[0].parameters_json_schema"),
    ('[{"name": "a"}, {"name": "b"}, {"name": "a"}]', "tools"),
    (json.dumps([{"name": f"t{n}"} for n in range(501)]), "tools"),
]


@pytest.mark.parametrize(("tools", "field"), HOSTILE_TOOLS)
def test_hostile_tool_definitions_are_refused_naming_the_field_and_store_nothing(
    api: Api, alice: Any, tools: str, field: str
) -> None:
    created = api.post(
        "/sessions", '{"title": "x", "model": "openai:gpt-4o", "tools": ' + tools + "}"
    )
    assert refused(created)["field"] == field
    assert not AgentSession.objects.exists()

    session = make_session(alice, tool_definitions=[{"name": "kept", "parameters": {}}])
    changed = api.client.patch(
        f"/api/v1/sessions/{session.pk}",
        '{"title": "renamed", "tools": ' + tools + "}",
        content_type="application/json",
        headers=api.auth,
    )
    assert refused(changed)["field"] == field
    session.refresh_from_db()
    assert (session.title, session.tool_definitions) == (
        "Fix the build",
        [{"name": "kept", "parameters": {}}],
    )

    governed = '{"model": "openai:gpt-4o", "messages": [], "tools": ' + tools + "}"
    assert refused(api.post("/govern", governed))["field"] == field
