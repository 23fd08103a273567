from __future__ import annotations

import json

import pytest
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    UserPromptPart,
)

from sessions import services
from sessions.models import Message
from sessions.payloads import InvalidPayload, parse_payload
from tests.factories import make_session
from tests.messages import reply, tool_call, tool_result, user

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def _errors(data: object) -> dict[str, str]:
    with pytest.raises(InvalidPayload) as exc:
        parse_payload(data)
    return {e.path: e.message for e in exc.value.errors}


def test_it_names_a_bad_part_field() -> None:
    errors = _errors({"kind": "request", "parts": [{"part_kind": "user-prompt", "content": 5}]})
    assert list(errors) == ["parts.0.content"]


def test_it_names_a_bad_tool_name() -> None:
    errors = _errors({"kind": "response", "parts": [{"part_kind": "tool-call", "tool_name": 3}]})
    assert "parts.0.tool_name" in errors


def test_it_names_an_unknown_kind() -> None:
    assert list(_errors({"kind": "nope", "parts": []})) == ["kind"]


def test_it_names_a_part_that_does_not_belong_in_a_response() -> None:
    errors = _errors(
        {
            "kind": "response",
            "parts": [{"part_kind": "tool-return", "tool_name": "x", "content": "y"}],
        }
    )
    assert list(errors) == ["parts.0.part_kind"]


def test_it_rejects_broken_json() -> None:
    assert "Invalid JSON" in " ".join(_errors('{"kind": "request", "parts": [').values())


def test_a_bad_message_in_a_batch_stores_nothing(alice: object) -> None:
    session = make_session(alice)
    good = ModelMessagesTypeAdapter.dump_python([user("hello")], mode="json")[0]
    bad = {"kind": "request", "parts": [{"part_kind": "user-prompt"}]}
    with pytest.raises(InvalidPayload) as exc:
        services.append_messages(session, [good, good, bad])
    assert exc.value.errors[0].path == "parts.0.content"
    assert Message.objects.filter(session=session).count() == 0


@pytest.mark.parametrize(
    "message",
    [
        user("Fix the failing test in tests/test_parser.py"),
        tool_call("read_file", id="call_1", path="src/parser.py", limit=200),
        tool_result(
            "read_file", {"lines": ["def parse():", "    ..."], "truncated": False}, id="call_1"
        ),
        reply("Done: `parse()` now strips the BOM. 3 tests pass."),
        ModelRequest(
            parts=[UserPromptPart(["look at this", "and this"])], instructions="Be brief."
        ),
        ModelRequest(
            parts=[UserPromptPart(["this image", BinaryContent(data=PNG, media_type="image/png")])]
        ),
    ],
)
def test_a_valid_message_round_trips_exactly(
    alice: object, message: ModelRequest | ModelResponse
) -> None:
    session = make_session(alice)
    stored = services.append_message(
        session, json.loads(ModelMessagesTypeAdapter.dump_json([message]))[0]
    )
    loaded = Message.objects.get(pk=stored.pk).message
    # Exactly what pydantic-ai's own adapter decodes (it narrows an image's BinaryContent to
    # BinaryImage), which is the message itself for every part without media.
    own = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json([message]))[0]
    assert loaded == own
    assert ModelMessagesTypeAdapter.dump_json([loaded]) == ModelMessagesTypeAdapter.dump_json(
        [message]
    )


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (user("before\x00after"), "parts.0.content"),
        (tool_call("read\x00", id="c1", path="a"), "parts.0.tool_name"),
        (tool_call("read", id="c1", path="a\x00b"), "parts.0.args.path"),
    ],
)
def test_a_nul_character_is_refused_by_name_and_nothing_is_stored(
    alice: object, message: object, field: str
) -> None:
    # PostgreSQL's JSON cannot hold it; storing the message changed would lose what was sent.
    session = make_session(alice)
    with pytest.raises(InvalidPayload) as exc:
        services.append_messages(session, [user("fine"), message])
    # Named within the batch: the second message.
    assert [e.path for e in exc.value.errors] == [f"messages[1].{field}"]
    assert "NUL" in exc.value.errors[0].message
    assert not Message.objects.filter(session=session).exists()
