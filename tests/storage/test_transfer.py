"""Export and import of a session: what comes back governs exactly as what went out, and a
bad file is refused whole, naming its line and field."""

from __future__ import annotations

import json
import re
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    UserPromptPart,
)

from sessions import services
from sessions.demo import TOUR, TOUR_PINNED_REQUEST, TOUR_POLICY, tour_messages
from sessions.models import (
    AgentSession,
    AuditEvent,
    Clear,
    Compaction,
    EvictedOutput,
    Message,
    Pin,
)
from sessions.payloads import InvalidPayload, storable_payload
from sessions.services.transfer import (
    BadExport,
    export_jsonl,
    export_markdown,
    import_session,
)

# Compaction jobs are dispatched once their request commits.
pytestmark = pytest.mark.django_db(transaction=True)


def _governed(session: AgentSession) -> tuple[bytes, int, int]:
    context = services.governed_context(session)
    return (
        ModelMessagesTypeAdapter.dump_json(context.messages),
        context.tokens,
        context.report.tokens_after,
    )


def _comparable(text: str) -> list[dict[str, Any]]:
    """An export's lines without what an import cannot carry: when each message was appended
    (the import appends it) and who acted (another hub's people)."""
    lines = [json.loads(line) for line in text.splitlines()]
    for line in lines:
        if line.get("type") == "message":
            line.pop("created_at")
        line.pop("actor", None)
    return lines


def _demo_sessions() -> list[AgentSession]:
    """The demo sessions, the one with a small window compacted twice (the second compaction
    taking in the first's summary)."""
    call_command("seed_demo", stdout=StringIO())
    sessions = list(AgentSession.objects.filter(owner__username="demo").order_by("title"))
    small = next(s for s in sessions if s.context_window)
    if not Compaction.objects.filter(session=small).exists():
        services.request_compaction(small)  # eager: done when it returns
        services.request_compaction(small, focus="the gateway")
    return sessions


def test_every_demo_session_comes_back_governing_the_same(alice: Any) -> None:
    sessions = _demo_sessions()
    assert len(sessions) == 5
    assert Compaction.objects.filter(session__in=sessions).exists(), "a demo session compacted"
    tour = next(s for s in sessions if s.title == TOUR.title)
    for session in sessions:
        before = _governed(session)  # governing stores the evicted outputs: they are exported
        text = export_jsonl(session)
        copy = import_session(text, alice)

        assert copy.pk != session.pk
        assert copy.owner == alice
        assert (copy.title, copy.model, copy.policy) == (
            session.title,
            session.model,
            session.policy,
        )
        assert _governed(copy) == before, session.title
        assert _comparable(export_jsonl(copy)) == _comparable(text), session.title
        # Counted, faceted and hashed by this hub, as the originals were.
        assert list(copy.messages.values_list("seq", "tokens", "content_hash", "facts")) == list(
            session.messages.values_list("seq", "tokens", "content_hash", "facts")
        )
        for model in (Compaction, Clear, Pin, EvictedOutput, AuditEvent):
            assert (
                model._default_manager.filter(session=copy).count()
                == model._default_manager.filter(session=session).count()
            ), (session.title, model.__name__)
    assert Pin.objects.filter(session=tour).exists()
    assert EvictedOutput.objects.filter(session=tour).exists()


def test_a_clear_undone_records_and_an_unpin_come_back(alice: Any) -> None:
    session = _tour()
    pinned = Pin.objects.get(session=session).seq
    services.unpin(session, pinned)
    services.pin(session, pinned)
    cleared = services.clear(session)
    services.undo_clear(session, cleared.record.pk)
    services.clear(session)
    text = export_jsonl(session)

    copy = import_session(text, alice)

    assert _comparable(export_jsonl(copy)) == _comparable(text)
    assert list(Pin.objects.filter(session=copy).values_list("seq", "undone_at")) == list(
        Pin.objects.filter(session=session).values_list("seq", "undone_at")
    )
    # The kept message names its clear by id: the same but for that id.
    original, imported = _governed(session), _governed(copy)
    new_id = Clear.objects.get(session=copy, undone_at__isnull=True).pk
    old_id = Clear.objects.get(session=session, undone_at__isnull=True).pk
    assert imported[1:] == original[1:]
    assert imported[0] == original[0].replace(
        f'"clear":{old_id}'.encode(), f'"clear":{new_id}'.encode()
    )
    events = AuditEvent.objects.filter(session=copy, verb="undo_clear").get()
    assert events.data["clear"] == Clear.objects.get(session=copy, undone_at__isnull=False).pk


def test_compactions_refer_to_each_other_by_position(alice: Any) -> None:
    session = next(s for s in _demo_sessions() if Compaction.objects.filter(session=s).exists())
    lines = export_jsonl(session).splitlines()
    compaction = next(json.loads(line) for line in lines if '"type":"compaction"' in line)
    assert compaction["supersedes"] is None
    # A second compaction superseding the first, by its position in the file.
    second = dict(compaction, supersedes=0)
    copy = import_session("\n".join([*lines, json.dumps(second)]), alice)
    first, then = Compaction.objects.filter(session=copy).order_by("id")
    assert then.supersedes_id == first.pk


def _tour() -> AgentSession:
    """The demo's tour alone (seeding every demo session takes a while): a message pinned,
    outputs evicted once governed."""
    owner = get_user_model().objects.get_or_create(username="demo")[0]
    session = AgentSession.objects.create(
        owner=owner, title=TOUR.title, model=TOUR.model, policy=TOUR_POLICY
    )
    rows = services.append_messages(session, tour_messages(), auto_compact=False)
    services.pin(session, next(r.seq for r in rows if TOUR_PINNED_REQUEST in str(r.payload)))
    return session


def _small_export() -> list[str]:
    session = _tour()
    services.governed_context(session)
    return export_jsonl(session).splitlines()


def _refused(lines: list[str], owner: Any) -> BadExport:
    sessions, messages = AgentSession.objects.count(), Message.objects.count()
    records = [m._default_manager.count() for m in (Compaction, Clear, Pin, EvictedOutput)]
    with pytest.raises(BadExport) as caught:
        import_session("\n".join(lines), owner)
    assert AgentSession.objects.count() == sessions
    assert Message.objects.count() == messages
    assert [m._default_manager.count() for m in (Compaction, Clear, Pin, EvictedOutput)] == records
    return caught.value


def _with(lines: list[str], number: int, line: str) -> list[str]:
    return [*lines[: number - 1], line, *lines[number:]]


def _message_line(lines: list[str]) -> int:
    """The line number of the first message holding a tool output."""
    return next(n for n, line in enumerate(lines, 1) if '"tool-return"' in line)


def test_a_line_that_is_not_json_is_named(alice: Any) -> None:
    lines = _small_export()
    error = _refused(_with(lines, 4, '{"type": "message", "seq": 2,'), alice)
    assert str(error).startswith("line 4: not JSON")
    assert error.line == 4


def test_a_field_of_the_wrong_type_is_named(alice: Any) -> None:
    lines = _small_export()
    line = json.loads(lines[2])
    line["seq"] = "2"
    error = _refused(_with(lines, 3, json.dumps(line)), alice)
    assert str(error) == "line 3: seq: a whole number is expected, not a string"
    assert error.field == "seq"


def test_a_lone_surrogate_is_named_with_its_path(alice: Any) -> None:
    lines = _small_export()
    number = _message_line(lines)
    line = json.loads(lines[number - 1])
    line["message"]["parts"][0]["content"] = "before \ud800 after"
    error = _refused(_with(lines, number, json.dumps(line)), alice)
    assert str(error).startswith(
        f"line {number}: message.parts[0].content: contains a lone surrogate (\\ud800)"
    )


def test_deep_nesting_is_refused(alice: Any) -> None:
    lines = _small_export()
    number = _message_line(lines)
    line = json.loads(lines[number - 1])
    line["message"]["parts"][0]["metadata"] = json.loads("[" * 150 + "]" * 150)
    error = _refused(_with(lines, number, json.dumps(line)), alice)
    assert str(error).startswith(f"line {number}: message.parts[0].metadata")
    assert "nests deeper than 100 levels" in str(error)
    # Deeper than the JSON parser goes, too.
    error = _refused(_with(lines, number, "[" * 100_000 + "]" * 100_000), alice)
    assert str(error).startswith(f"line {number}:")


def _deep_call(levels: int) -> ModelResponse:
    """A tool call whose arguments nest ``levels`` objects deep."""
    args: Any = 0
    for _ in range(levels):
        args = {"deeper": args}
    return ModelResponse(parts=[ToolCallPart("probe", args, "c1")])


def _storable(message: ModelResponse) -> bool:
    try:
        storable_payload(message)
    except InvalidPayload:
        return False
    return True


def test_a_session_as_deep_as_the_log_takes_comes_back(alice: Any) -> None:
    """Depth is measured from a message's root, on the way in and in its export line alike:
    what the log took, its export gives back."""
    deepest = next(n for n in range(90, 110) if not _storable(_deep_call(n + 1)))
    session = AgentSession.objects.create(owner=alice, title="Deep", model="openai:gpt-4o")
    call = _deep_call(deepest)
    services.append_messages(
        session, [ModelRequest(parts=[UserPromptPart("go")]), call], auto_compact=False
    )

    copy = import_session(export_jsonl(session), alice)

    assert Message.objects.get(session=copy, seq=1).message == call


def test_a_number_too_large_is_refused(alice: Any) -> None:
    lines = _small_export()
    line = json.loads(lines[2])
    line["seq"] = 2**40
    assert "is not between 0 and" in str(_refused(_with(lines, 3, json.dumps(line)), alice))
    huge = re.sub(r'"seq":\d+', '"seq":1e999', lines[2], count=1)
    error = _refused(_with(lines, 3, huge), alice)
    assert str(error).startswith("line 3: not JSON: the number 1e999 is not a finite number")


def test_a_reported_usage_beyond_what_is_stored_is_named(alice: Any) -> None:
    lines = _small_export()
    number = next(n for n, line in enumerate(lines, 1) if '"kind":"response"' in line)
    line = json.loads(lines[number - 1])
    line["message"]["usage"] = {"input_tokens": 10**15}
    error = _refused(_with(lines, number, json.dumps(line)), alice)
    assert str(error).startswith(f"line {number}: message.usage.input_tokens: is over")


def test_a_time_out_of_range_is_named(alice: Any) -> None:
    lines = _small_export()
    line = json.loads(lines[2])
    line["created_at"] = "9999-12-31T23:59:59-23:00"
    error = _refused(_with(lines, 3, json.dumps(line)), alice)
    assert str(error) == "line 3: created_at: '9999-12-31T23:59:59-23:00' is out of range"


def test_an_invalid_message_is_named(alice: Any) -> None:
    lines = _small_export()
    line = json.loads(lines[2])
    line["message"]["parts"][0]["part_kind"] = "nonsense"
    error = _refused(_with(lines, 3, json.dumps(line)), alice)
    assert str(error).startswith("line 3: message.parts[0].part_kind:")


def test_a_compaction_of_a_missing_message_is_named(alice: Any) -> None:
    session = next(s for s in _demo_sessions() if Compaction.objects.filter(session=s).exists())
    lines = export_jsonl(session).splitlines()
    number = next(n for n, line in enumerate(lines, 1) if '"type":"compaction"' in line)
    line = json.loads(lines[number - 1])
    messages = session.messages.count()
    line["last_seq"] = messages + 5
    error = _refused(_with(lines, number, json.dumps(line)), alice)
    assert str(error) == (
        f"line {number}: last_seq: no message #{messages + 5} in this file "
        f"(its last is #{messages - 1})"
    )


def test_a_pin_of_a_missing_message_is_named(alice: Any) -> None:
    lines = _small_export()
    number = next(n for n, line in enumerate(lines, 1) if '"type":"pin"' in line)
    line = json.loads(lines[number - 1])
    line["seq"] = 10_000
    error = _refused(_with(lines, number, json.dumps(line)), alice)
    assert str(error).startswith(f"line {number}: seq: no message #10000 in this file")


def test_a_header_of_an_unknown_version_is_refused(alice: Any) -> None:
    lines = _small_export()
    header = json.loads(lines[0])
    header["ctxhub_export"] = 2
    error = _refused(_with(lines, 1, json.dumps(header)), alice)
    assert str(error) == "line 1: ctxhub_export: version 2 is not one this hub reads (it reads 1)"
    error = _refused(lines[1:], alice)
    assert str(error) == "line 1: ctxhub_export: missing: this is not a ctxhub export header"
    assert str(_refused([], alice)).startswith("line 1: the file is empty")


def test_a_bad_session_field_is_named(alice: Any) -> None:
    lines = _small_export()
    header = json.loads(lines[0])
    header["session"]["policy"] = {"masking": {"keep_last": "many"}}
    error = _refused(_with(lines, 1, json.dumps(header)), alice)
    assert str(error).startswith("line 1: session.policy.masking.keep_last:")


def test_messages_out_of_order_and_after_records_are_refused(alice: Any) -> None:
    lines = _small_export()
    error = _refused([lines[0], lines[2]], alice)
    assert str(error) == "line 2: seq: #1 out of order: the next message is #0"
    number = next(n for n, line in enumerate(lines, 1) if '"type":"pin"' in line)
    error = _refused([*lines, lines[1]], alice)
    assert str(error).startswith(f"line {len(lines) + 1}: type: a message after the records")
    assert number < len(lines) + 1


def test_an_unknown_line_type_is_refused(alice: Any) -> None:
    lines = _small_export()
    error = _refused([*lines, '{"type": "secret"}'], alice)
    assert str(error).startswith(f"line {len(lines) + 1}: type: 'secret' is not a line type")


def test_a_file_over_the_upload_limit_is_refused(alice: Any, settings: Any) -> None:
    lines = _small_export()
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    with pytest.raises(services.Invalid, match="over the 1,024-byte limit"):
        import_session("\n".join(lines), alice)


def test_the_markdown_transcript_shows_messages_and_records() -> None:
    session = _tour()
    services.governed_context(session)
    text = "".join(export_markdown(session))
    assert text.startswith(f"# {TOUR.title}\n")
    assert "### #0 · request" in text
    assert "**tool call** `build`" in text
    assert "**tool result** `build`" in text
    assert "[cut: " in text  # the long build log is cut, and says so
    assert "## Records" in text
    pinned = Pin.objects.get(session=session).seq
    assert f"- Pin of #{pinned} (pinned)" in text
    assert "- Evicted output `ev_" in text


def test_the_commands_export_and_import(alice: Any, tmp_path: Any) -> None:
    session = _tour()
    path = tmp_path / "tour.jsonl"
    call_command("export_session", str(session.pk), "-o", str(path), stderr=StringIO())
    out = StringIO()
    call_command("import_session", str(path), "--owner", "alice", stdout=out)
    copy = AgentSession.objects.get(owner=alice)
    assert f"as session {copy.pk} ({session.messages.count()} messages)" in out.getvalue()
    assert _comparable(export_jsonl(copy)) == _comparable(path.read_text())
    markdown = StringIO()
    call_command("export_session", str(copy.pk), "--format", "markdown", stdout=markdown)
    assert markdown.getvalue().startswith(f"# {TOUR.title}\n")

    path.write_text(path.read_text().replace('"ctxhub_export":1', '"ctxhub_export":7'))
    with pytest.raises(CommandError, match="line 1: ctxhub_export: version 7"):
        call_command("import_session", str(path), "--owner", "alice")
    with pytest.raises(CommandError, match="no session nonsense"):
        call_command("export_session", "nonsense")
