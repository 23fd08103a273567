"""What threading a request appends: in observe mode nothing the model sees changes, so its
appends start no automatic compaction (a summary nobody sends would cost a summariser's call);
in govern mode they may."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway import chain
from gateway.threads import Thread, store_response, thread
from gateway.wire import anthropic
from sessions import events

pytestmark = pytest.mark.django_db


def threaded(owner: Any, asked_mode: str | None) -> Thread:
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "What is 2 + 2?"}],
    }
    parsed = anthropic.parse(json.dumps(body).encode())
    hashes = chain.hashes(parsed.wire, parsed.messages)
    return thread(owner.pk, parsed, hashes, provider="anthropic", named=None, asked_mode=asked_mode)


def answered(done: Thread) -> None:
    stored = anthropic.response(
        json.dumps(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-6",
                "content": [{"type": "text", "text": "4"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 12, "output_tokens": 1},
            }
        )
    )
    assert stored is not None
    assert store_response(done, anthropic.response_items(stored)) is not None


@pytest.mark.parametrize(
    ("asked_mode", "default", "compacts"),
    [("observe", "govern", False), ("govern", "observe", True), (None, "observe", False)],
)
def test_only_governed_requests_may_start_an_automatic_compaction(
    alice: Any,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    asked_mode: str | None,
    default: str,
    compacts: bool,
) -> None:
    settings.CTXHUB_GATEWAY_MODE = default
    reported: list[bool] = []

    def appended(sender: object, auto_compact: bool, **kwargs: Any) -> None:
        reported.append(auto_compact)

    events.messages_appended.connect(appended)
    try:
        with django_capture_on_commit_callbacks(execute=True):  # reported once committed
            done = threaded(alice, asked_mode)
            answered(done)
    finally:
        events.messages_appended.disconnect(appended)
    assert done.governed is compacts
    assert reported == [compacts, compacts]  # the request's messages, then the answer
