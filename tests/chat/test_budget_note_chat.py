"""A chat turn on a session whose policy turns the budget note on: the model, behind the real
HTTP provider path, receives the note the session's Governor wrote, in system voice, and the
same note in every request of the turn until the Governor acts."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from ctxhub.governance import Policy, count_tokens
from sessions import services
from sessions.models import SentRequest, TurnStatus
from tests.chat.test_turns import openai_session, owner, run_turn
from tests.fakes.openai_server import FakeOpenAI, ToolCallReply, fake_openai

__all__ = ["fake_openai", "owner"]  # the fixtures, imported for pytest

pytestmark = pytest.mark.django_db(transaction=True)


def _with_note(owner: Any, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Any:
    session = openai_session(owner, fake, monkeypatch)
    services.set_policy(session, Policy(awareness={"budget_note": True}))
    return session


async def test_the_model_receives_the_budget_note_in_every_request(
    owner: Any, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.replies = [
        ToolCallReply("read_file", {"path": "README.md", "limit": 5}, call_id="call_readme"),
        "The README describes ctxhub.",
    ]
    session = await sync_to_async(_with_note)(owner, fake_openai, monkeypatch)

    turn = await run_turn(session, owner, "What is this project?")

    assert turn.status == TurnStatus.DONE, turn.error
    rows = [row async for row in SentRequest.objects.filter(session=session).order_by("number")]
    assert len(rows) == len(fake_openai.requests) == 2
    notes = []
    for body, row in zip(fake_openai.requests, rows, strict=True):
        messages = body["messages"]
        found = [
            m
            for m in messages
            if m["role"] in ("system", "developer") and "Context budget" in str(m["content"])
        ]
        assert len(found) == 1, messages
        text = str(found[0]["content"])
        assert f"Context window: {row.window_tokens:,} tokens" in text
        assert f"history may use {row.budget_tokens:,}" in text
        notes.append(text)
    # Written with the first request (after the prompt), sent again as it was with the second:
    # the prompt, the note, the call, its result.
    assert notes[0] == notes[1]
    second = [m["role"] for m in fake_openai.requests[1]["messages"]]
    assert second[-4:] == ["user", found[0]["role"], "assistant", "tool"]
    # Nothing acted: the whole first request is the prefix the second keeps.
    assert rows[1].acted == ""
    opened = await sync_to_async(services.open_sent_request)(session, 1)
    assert opened is not None
    assert opened.exact
    assert rows[1].prefix_tokens == count_tokens(opened.messages, model=session.model)
