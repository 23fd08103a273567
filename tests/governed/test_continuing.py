"""A session's request continued from the last one sent (``sessions.services.continuing``) is
the request governing its whole history sends: two sessions fed the same turns and records, one
continued wherever it can be and the other governed whole every time, send the same requests,
leave the same Governor states and record the same requests."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    UserPromptPart,
)

from sessions import services
from sessions.models import AgentSession, EvictedOutput, SentRequest, SessionGovernor
from sessions.services import continuing
from sessions.services.continuing import forget, sent_shape
from sessions.services.governed import GovernedContext
from sessions.services.tools import set_tools
from tests.factories import make_session
from tests.governed.builders import turn

pytestmark = [pytest.mark.django_db(transaction=True)]

POLICY = {
    "context_window": 9_000,
    "reserved_output_tokens": 0,
    "compaction": {"auto": False},
    # Outputs over 350 tokens evicted as they arrive: a continued request stores them too.
    "eviction": {"threshold_tokens": 350, "preview_chars": 200},
}

TOOLS = [{"name": "read_file", "description": "Read a file.", "parameters": {"type": "object"}}]


def _appends(turns: int) -> list[list[ModelMessage]]:
    """An agent's session in appends: each turn's prompt with its call, then the results with
    the answer and the next prompt's instructions; now and then an output large enough to be
    evicted."""
    appends: list[list[ModelMessage]] = []
    for n in range(turns):
        messages = turn(n, size=500 if n % 4 == 3 else 120)
        prompt, call, results, answer = messages
        if n % 3 == 1:
            # An agent run's request carries its instructions.
            assert isinstance(prompt, ModelRequest)
            prompt = ModelRequest(parts=prompt.parts, instructions=f"Be brief ({n}).")
        appends += [
            [prompt],
            [call, results],
            [answer, ModelRequest(parts=[UserPromptPart("go on")])],
        ]
    return appends


def _request(session: AgentSession, context: GovernedContext) -> dict[str, Any]:
    """What a request sent is, as its session keeps it."""
    recorded = SentRequest.objects.filter(session=session).order_by("-number").values().first()
    assert recorded is not None
    for own in ("id", "session_id", "created_at", "state"):
        recorded.pop(own)
    return {
        "messages": context.messages_json(),
        "report": context.report_json(),
        "sent": context.sent_shapes(),
        "state": SessionGovernor.objects.get(session=session).state,
        "recorded": recorded,
        "evicted": sorted(
            EvictedOutput.objects.filter(session=session).values_list("ref", "text", "tokens")
        ),
    }


def test_requests_continued_are_the_requests_governed_whole(alice: Any) -> None:
    continued, whole = (make_session(alice, policy=POLICY) for _ in range(2))
    sources = []
    for number, batch in enumerate(_appends(24)):
        for session in (continued, whole):
            services.append_messages(session, batch)
            if number == 20:
                services.pin(session, 4)  # a record: the next request is governed whole
            if number == 40:
                set_tools(session, TOOLS)
            session.refresh_from_db()
        found = services.send_context(continued)
        forget(whole.pk)
        expected = services.send_context(whole)
        assert expected.source == "governed"
        sources.append(found.source)
        assert _request(continued, found) == _request(whole, expected), (number, found.source)
    # Continued but after the Governor's actions and the records' changes.
    assert sources.count("continued") >= len(sources) * 3 // 4, sources
    assert "governed" in sources[21:23]


def _continued_context(owner: Any) -> GovernedContext:
    """The context of a session's fourth request, continued from its third."""
    session = make_session(owner, policy=POLICY)
    for batch in _appends(3):
        services.append_messages(session, batch)
        services.send_context(session)
    services.append_messages(session, _appends(4)[-1])
    context = services.send_context(session)
    assert context.source == "continued"
    return context


def test_a_continued_request_parses_its_messages_and_report_only_when_read(alice: Any) -> None:
    context = _continued_context(alice)
    assert context._messages is None
    assert context._report is None
    body = context.report_json()
    assert context._report is None
    assert context.report.model_dump_json().encode() == body
    assert context.report.messages_before == len(context.seqs)
    assert context.tokens == context.report.tokens_after + context.report.tool_definition_tokens
    shapes = context.sent_shapes()
    assert shapes == [sent_shape(entry) for entry in context.report.messages if entry.kept]
    assert len(shapes) == len(context.messages)


def test_a_continued_request_reads_a_message_alone(alice: Any) -> None:
    context = _continued_context(alice)
    shapes = context.sent_shapes()
    alone = [context.sent_message(position) for position in range(len(shapes))]
    assert context._messages is None
    assert context._report is None
    assert alone == context.messages
    # Its items are the array the API answers with, byte for byte.
    assert context.messages_json() == ModelMessagesTypeAdapter.dump_json(context.messages)


def test_an_entry_that_is_not_one_is_governed_whole_and_written_anew(alice: Any) -> None:
    session = make_session(alice, policy=POLICY)
    appends = _appends(3)
    for batch in appends[:-1]:
        services.append_messages(session, batch)
        services.send_context(session)
    key = continuing._cache_key(session.pk)
    entry = cache.get(key)
    assert isinstance(entry, dict)
    cache.set(key, {**entry, "tail": [{"v": "garbled"}], "count": "many"})
    services.append_messages(session, appends[-1])
    assert services.send_context(session).source == "governed"
    services.append_messages(session, _appends(4)[-1])
    assert services.send_context(session).source == "continued"
