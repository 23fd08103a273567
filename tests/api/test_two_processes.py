"""Two web processes serving one session in turn (an append, then ``/context``, each through
either) send what one ``Governor`` sends over the same appends: the session's Governor state is
stored with it, so neither process resets the prompt cache the other kept warm."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from ctxhub.client import Hub
from ctxhub.governance import Governor, Policy
from ctxhub.governance.counting import message_tokens
from ctxhub.governance.tokens import tokenizer_for
from sessions.api.keys import create_key
from sessions.models import SentRequest
from tests.conftest import ARTIFACTS
from tests.messages import reply, tool_calls, tool_results, user, words
from tests.processes import asgi_server

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = {"context_window": 6_000, "reserved_output_tokens": 0}
"""Small enough that the Governor acts several times in a session of 50 appends."""


@pytest.fixture(scope="module")
def servers(django_db_setup: None) -> Iterator[tuple[str, str]]:
    logs = ARTIFACTS / "logs"
    with (
        asgi_server(logs / "web-turns-a.log") as first,
        asgi_server(logs / "web-turns-b.log") as second,
    ):
        yield first, second


@pytest.fixture
def key(alice: Any) -> str:
    return create_key(alice, name="turns", scopes=["read", "write"])[1]


def appends(rng: random.Random, count: int) -> Iterator[list[ModelMessage]]:
    """An agent's session as it is stored: a prompt, then turns of tool calls and results of
    random sizes, now and then an answer and a new prompt; one to three messages at a time."""
    pending: list[ModelMessage] = [user("Find why the build fails")]
    call = 0
    for _ in range(count):
        if rng.random() < 0.2:
            pending += [
                reply(f"Done with step {call}. " + words(rng.randint(5, 60))),
                user("Go on"),
            ]
        else:
            ids = [f"c{call + i}" for i in range(rng.randint(1, 2))]
            call += len(ids)
            pending.append(tool_calls(*[("read", i) for i in ids]))
            pending.append(
                tool_results(*[("read", words(rng.randint(20, 700), f"w{i}"), i) for i in ids])
            )
        take = rng.randint(1, 3)
        yield pending[:take]
        pending = pending[take:]


@pytest.mark.parametrize("seed", [1, 2])
def test_two_processes_taking_turns_send_what_one_governor_sends(
    servers: tuple[str, str], key: str, seed: int
) -> None:
    rng = random.Random(seed)
    alone = Governor(Policy.model_validate(POLICY), model="openai:gpt-4o")
    history: list[ModelMessage] = []
    sent: list[list[bytes]] = []
    messages: list[list[ModelMessage]] = []
    with Hub(servers[0], key) as first, Hub(servers[1], key) as second:
        session = first.create_session(f"Turns {seed}", model="openai:gpt-4o", policy=POLICY)
        for batch in appends(rng, 50):
            appending, asking = rng.choice([first, second]), rng.choice([first, second])
            appending.append(session.id, batch)
            history += batch
            context = asking.context(session.id)
            expected = alone.govern(list(history))
            got = [ModelMessagesTypeAdapter.dump_json([m]) for m in context.messages]
            assert got == [ModelMessagesTypeAdapter.dump_json([m]) for m in expected.messages]
            sent.append(got)
            messages.append(context.messages)
    requests = list(SentRequest.objects.filter(session_id=session.id).order_by("number"))
    assert [r.number for r in requests] == list(range(1, len(sent) + 1))
    acted = [r for r in requests if r.acted]
    assert acted[0].number == 1
    assert len(acted) >= 3, "the session is long enough for the Governor to act"
    tokenizer = tokenizer_for("openai:gpt-4o")
    for number, request in enumerate(requests[1:], start=2):
        previous, now = sent[number - 2], sent[number - 1]
        if not request.acted:
            # Between actions: the previous request, byte-identical and grown, but for its last
            # message where that answered calls whose results had not arrived yet.
            assert now[: len(previous) - 1] == previous[:-1]
        if request.acted in ("start", "edited"):
            continue
        same = 0
        while same < min(len(now), len(previous)) and now[same] == previous[same]:
            same += 1
        kept = sum(message_tokens(m, tokenizer) for m in messages[number - 1][:same])
        assert request.prefix_tokens == kept, (number, request.acted)
    assert all(r.action for r in acted[1:])
