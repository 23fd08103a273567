"""Transcripts through the API: ``POST /sessions/import`` with ``format=``, the same file sent
again adding only what is new, a pydantic-ai message list, and bad input refused by field with
nothing stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from pydantic_ai.messages import ModelMessagesTypeAdapter

from sessions.api.keys import create_key
from sessions.models import AgentSession, Message
from tests.messages import reply, user
from tests.transcripts import lines
from tests.transcripts.fixtures.codex import write_session
from transcripts.models import TranscriptFile

pytestmark = pytest.mark.django_db

ALL = ["read", "write", "govern"]


def _post(key: str, body: bytes, query: str = "") -> Any:
    return Client().post(
        f"/api/v1/sessions/import{query}",
        data=body,
        content_type="application/x-ndjson",
        headers={"Authorization": f"Bearer {key}"},
    )


def test_a_codex_rollout_imports_and_sending_it_again_adds_nothing(
    tmp_path: Path, alice: Any
) -> None:
    expected = write_session(tmp_path / "rollout.jsonl", seed=5, turns=12)
    body = expected.path.read_bytes()
    key = create_key(alice, name="w", scopes=ALL)[1]

    first = _post(key, body, "?format=codex&name=rollout.jsonl")

    assert first.status_code == 201, first.content
    answer = first.json()
    assert answer["format"] == "codex"
    assert answer["created"] == 1
    [session] = answer["sessions"]
    context = len(expected.context_item_lines)
    assert answer["messages"] == session["messages"] == expected.message_count + context
    assert answer["skipped_lines"] == []
    assert TranscriptFile.objects.get(owner=alice).path == "rollout.jsonl"

    again = _post(key, body)  # the format read from the file
    assert again.status_code == 201
    assert again.json()["messages"] == 0
    assert again.json()["created"] == 0
    assert Message.objects.count() == expected.message_count + context


def test_a_claude_code_transcript_reports_its_unreadable_lines_and_reads_the_rest(
    alice: Any,
) -> None:
    body = (
        lines.prompt("u1", None, 0, "Deploy the shop")
        + '{"parentUuid":"u1","type":"assis\n'
        + lines.answer("a1", "u1", 2, "msg_1", lines.text("Deployed."), lines.usage(0, 700, 9))
    ).encode()
    key = create_key(alice, name="w", scopes=ALL)[1]

    response = _post(key, body, "?format=claude-code")

    assert response.status_code == 201
    answer = response.json()
    assert answer["messages"] == 2
    assert [item["line"] for item in answer["skipped_lines"]] == [2]
    assert answer["sessions"][0]["title"] == "Deploy the shop"


def test_a_pydantic_ai_message_list_is_a_new_session(alice: Any) -> None:
    history = [user("Plan the migration"), reply("Step one: back up the data.")]
    key = create_key(alice, name="w", scopes=ALL)[1]

    response = _post(key, ModelMessagesTypeAdapter.dump_json(history), "?format=pydantic-ai")

    assert response.status_code == 201
    assert response.json()["title"] == "Plan the migration"
    assert response.json()["messages"] == 2


@pytest.mark.parametrize(
    ("query", "body", "field"),
    [
        ("?format=yaml", b"{}", "format"),
        ("", b"just some text\n", "body"),
        ("", b"\xff\xfe", "body"),
        ("?format=codex", lines.prompt("u1", None, 0, "hi").encode(), "body"),
        ("?format=pydantic-ai", b'{"not": "a list"}', "body"),
        ("?format=pydantic-ai", json.dumps([{"kind": "request", "parts": 3}]).encode(), "body[0]"),
        ("?format=pydantic-ai", b"[" * 5000, "body"),
        ("?format=ctxhub", b"\xff\xfe", "body"),
    ],
)
def test_bad_input_is_refused_by_field_and_stores_nothing(
    alice: Any, query: str, body: bytes, field: str
) -> None:
    key = create_key(alice, name="w", scopes=ALL)[1]

    response = _post(key, body, query)

    assert response.status_code in (400, 422), response.content
    error = response.json()["error"]
    assert error["field"].startswith(field), error
    assert AgentSession.objects.count() == 0
    assert TranscriptFile.objects.count() == 0


def test_a_name_with_a_nul_is_stored_without_it(alice: Any) -> None:
    key = create_key(alice, name="w", scopes=ALL)[1]
    body = lines.prompt("u1", None, 0, "hi").encode()

    response = _post(key, body, "?format=claude-code&name=a%00b.jsonl")

    assert response.status_code == 201
    assert TranscriptFile.objects.get().path == "a\ufffdb.jsonl"


def test_a_read_key_cannot_import(alice: Any) -> None:
    key = create_key(alice, name="r", scopes=["read"])[1]
    assert _post(key, lines.prompt("u1", None, 0, "hi").encode()).status_code == 403
    assert AgentSession.objects.count() == 0


def test_a_line_a_buggy_agent_wrote_is_reported_and_the_rest_read(alice: Any) -> None:
    huge = lines.usage(0, 10**20, 5)
    nested = (
        '{"type":"user","sessionId":"'
        + lines.SESSION
        + '","message":'
        + "[" * 5000
        + "]" * 5000
        + "}\n"
    )
    body = (
        lines.prompt("u1", None, 0, "Check the \\ud800 escape and a \x00-free line")
        + lines.answer("a1", "u1", 2, "m1", lines.text("A huge usage."), huge)
        + nested
        + '{"type":"user","sessionId":"'
        + lines.SESSION
        + '","message":{"role":"user","content":7}}\n'
        + lines.prompt("u2", "u1", 9, "Still here")
    ).encode()
    key = create_key(alice, name="w", scopes=ALL)[1]

    response = _post(key, body, "?format=claude-code")

    assert response.status_code == 201, response.content
    answer = response.json()
    assert answer["messages"] == 2
    skipped = {item["line"]: item["why"] for item in answer["skipped_lines"]}
    assert set(skipped) == {2, 3, 4}
    assert "message.usage.cache_creation_input_tokens" in skipped[2]
    assert "nested too deep" in skipped[3] or "not JSON" in skipped[3]
    assert "message.content" in skipped[4]
    session = AgentSession.objects.get()
    page = Client()
    page.force_login(alice)
    assert page.get(session.get_absolute_url()).status_code == 200
