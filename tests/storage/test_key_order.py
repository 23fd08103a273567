"""A message comes back as it was written, byte for byte: object keys in their order, from the
database to the context the hub sends, the meter and the export (PostgreSQL's jsonb would
re-sort them, shorter keys first)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from ctxhub.governance.counting import message_tokens
from ctxhub.governance.tokens import tokenizer_for
from sessions.api.keys import create_key
from sessions.history.effective import REMEMBERED
from sessions.models import GovernedSnapshot, Message
from sessions.services.transfer import export_jsonl
from tests.factories import make_session

pytestmark = pytest.mark.django_db

# Longer keys first, nested, repeated at two depths: jsonb would give {"b", "alpha", "zeta_…"}.
ARGS = '{"zeta_long_key":"z","b":2,"alpha":{"yy":1,"x":0,"mm":[{"k2":1,"k1":2}]}}'
TOOLS = [{"name": "probe", "description": "d", "parameters": json.loads(
    '{"type":"object","properties":{"zeta":{"type":"string"},"a":{"type":"integer"}}}'
)}]  # fmt: skip


def _messages() -> str:
    return (
        '{"messages": ['
        '{"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "probe"}]},'
        '{"kind": "response", "parts": [{"part_kind": "tool-call", "tool_name": "probe", '
        f'"args": {ARGS}, "tool_call_id": "c1"}}]}}]}}'
    )


def test_tool_arguments_keep_their_key_order_everywhere(alice: Any) -> None:
    session = make_session(alice, tool_definitions=TOOLS)
    key = create_key(alice, name="agent", scopes=["read", "write"])[1]
    api = Client(headers={"Authorization": f"Bearer {key}"})
    appended = api.post(
        f"/api/v1/sessions/{session.pk}/messages", _messages(), content_type="application/json"
    )
    assert appended.status_code == 201, appended.content

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT payload::text FROM agent_sessions_message WHERE session_id = %s AND seq = 1",
            [session.pk],
        )
        stored = cursor.fetchone()[0]
        cursor.execute(
            "SELECT tool_definitions::text FROM agent_sessions_agentsession WHERE id = %s",
            [session.pk],
        )
        tools = cursor.fetchone()[0]
    assert f'"args":{ARGS}' in stored
    assert '"properties":{"zeta":{"type":"string"},"a":{"type":"integer"}}' in tools

    # As a process that never served the session reads it: from the rows alone.
    REMEMBERED.clear()
    GovernedSnapshot.objects.filter(session=session).delete()
    context = api.get(f"/api/v1/sessions/{session.pk}/context")
    assert context.status_code == 200
    args = context.json()["messages"][1]["parts"][0]["args"]
    assert json.dumps(args, separators=(",", ":")) == ARGS
    detail = api.get(f"/api/v1/sessions/{session.pk}").json()
    assert list(detail["tools"][0]["parameters"]["properties"]) == ["zeta", "a"]

    # The meter counts what is sent: the message as read back counts as it did when appended.
    message = Message.objects.get(session=session, seq=1)
    assert message.tokens == message_tokens(message.message, tokenizer_for(session.model))
    exported = json.loads(export_jsonl(session).splitlines()[2])
    assert json.dumps(exported["message"]["parts"][0]["args"], separators=(",", ":")) == ARGS
