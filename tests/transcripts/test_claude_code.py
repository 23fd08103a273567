"""Claude Code projects imported: every message, usage figure, compaction and sub-agent
accounted for against the fixture's manifest (written as the files were, never read back)."""

from __future__ import annotations

from datetime import datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from pydantic_ai.messages import ModelRequest, ModelResponse

from ctxhub.governance import Policy
from sessions.models import Compaction, Message
from tests.transcripts import lines
from tests.transcripts.fixtures.claude_code import Manifest, SessionManifest, write_project
from transcripts.importing import import_bytes
from transcripts.models import KeptLine, Transcript, TranscriptFile
from transcripts.whatif import CALIBRATION_REQUESTS, replay

pytestmark = pytest.mark.django_db


@pytest.fixture
def project(tmp_path: Path) -> Manifest:
    return write_project(tmp_path / "projects", seed=4, turns=120)


def _import(path: Path, owner: Any) -> str:
    out = StringIO()
    call_command("import_transcripts", str(path), owner=owner.username, stdout=out, stderr=out)
    return out.getvalue()


def _transcript(expected: SessionManifest) -> Transcript:
    if expected.layout in ("main", "plain"):
        return Transcript.objects.get(source=expected.session_id)
    if expected.agent_id:
        return Transcript.objects.get(source=f"{expected.session_id}/agent-{expected.agent_id}")
    return Transcript.objects.get(source__startswith=f"{expected.session_id}/sidechain-")


def _merged(expected: SessionManifest, upto: int | None = None) -> int:
    """The manifest's messages (the first ``upto``) as the log holds them: the results of one
    response's calls (a line each) one request, and each compact summary a compaction record,
    not a message."""
    count, previous = 0, ""
    for message in expected.messages[:upto]:
        if message.kind == "compact_summary":
            previous = message.kind
            continue
        if not (message.kind == "tool_results" and previous == "tool_results"):
            count += 1
        previous = message.kind
    return count


def test_every_message_usage_figure_compaction_and_sub_agent_is_accounted_for(
    project: Manifest, alice: Any
) -> None:
    output = _import(project.root, alice)

    assert f"{len(project.files)} files: {len(project.sessions)} new sessions" in output
    for expected in project.sessions:
        transcript = _transcript(expected)
        session = transcript.session
        log = [row.message for row in Message.objects.filter(session=session).order_by("seq")]
        assert len(log) == _merged(expected), expected.layout
        responses = [m for m in log if isinstance(m, ModelResponse)]
        assert len(responses) == expected.response_count
        assert session.title == expected.title or session.title == expected.summary
        assert session.model == f"anthropic:{expected.models[0]}"

        # Each response once, with the usage of its last line (not a sum over its lines).
        usage = expected.usage
        assert sum(m.usage.input_tokens for m in responses) == (
            usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
        )
        assert sum(m.usage.cache_read_tokens for m in responses) == usage.cache_read_input_tokens
        assert sum(m.usage.cache_write_tokens for m in responses) == (
            usage.cache_creation_input_tokens
        )
        assert sum(m.usage.cache_write_1h_tokens for m in responses) == (
            usage.ephemeral_1h_input_tokens
        )
        assert sum(m.usage.output_tokens for m in responses) == usage.output_tokens
        assert [m.usage.input_tokens for m in responses] == [
            r.total_input for r in expected.responses
        ]
        assert [m.provider_response_id for m in responses] == [
            r.message_id for r in expected.responses
        ]

        # Tool calls and their results, named by their calls.
        calls = {p.tool_call_id for m in responses for p in m.parts if p.part_kind == "tool-call"}
        assert calls == set(expected.tool_use_ids)
        returns = {
            p.tool_call_id: p
            for m in log
            if isinstance(m, ModelRequest)
            for p in m.parts
            if p.part_kind == "tool-return"
        }
        assert set(returns) == set(expected.tool_use_ids)
        assert {c for c, p in returns.items() if p.outcome == "failed"} == set(
            expected.error_tool_use_ids
        )
        assert all(returns[call].files for call in expected.image_tool_use_ids)

        # The agent's compactions, each standing for everything before it.
        compactions = list(Compaction.objects.filter(session=session).order_by("last_seq"))
        assert [(c.trigger, c.summary) for c in compactions] == [
            (c.trigger, c.summary) for c in expected.compactions
        ]
        assert all(c.first_seq == 0 and c.summarizer == "claude-code" for c in compactions)
        for record, planted in zip(compactions, expected.compactions, strict=True):
            assert record.last_seq == _merged(expected, planted.after_message_index + 1) - 1

        # Lines with no message kept; the unreadable one reported by its number.
        kept = set(KeptLine.objects.filter(session=session).values_list("line", "kind"))
        assert {(u.line, u.type) for u in expected.unknown_lines} <= kept

        # When the agent began, not when it was imported.
        session.refresh_from_db()
        assert session.created_at == datetime.fromisoformat(expected.first_timestamp)

        if expected.layout == "main":
            file = TranscriptFile.objects.get(key=expected.session_id)
            assert file.read_lines == expected.file_line_count
            assert [line for line, _ in file.skipped] == [expected.broken_line]
        else:
            main = Transcript.objects.get(source=project.main.session_id).session
            assert transcript.parent == main


def test_importing_again_adds_nothing(project: Manifest, alice: Any) -> None:
    _import(project.root, alice)
    counts = (Message.objects.count(), Compaction.objects.count(), KeptLine.objects.count())

    again = _import(project.root, alice)

    assert (Message.objects.count(), Compaction.objects.count(), KeptLine.objects.count()) == (
        counts
    )
    assert "0 new sessions, 0 messages" in again


@pytest.mark.parametrize("seed", [4, 9])
def test_calibrated_on_ten_responses_the_rest_are_predicted_within_three_percent(
    tmp_path: Path, alice: Any, seed: int
) -> None:
    project = write_project(tmp_path / "projects", seed=seed, turns=120)
    _import(project.root, alice)
    session = Transcript.objects.get(source=project.main.session_id).session

    result = replay(session, Policy())

    assert result.calibration is not None
    assert result.calibration.requests == CALIBRATION_REQUESTS
    later = result.rows[CALIBRATION_REQUESTS:]
    assert len(later) == project.main.response_count - CALIBRATION_REQUESTS
    for row in later:
        assert abs(row.predicted - row.agent.input) <= 0.03 * row.agent.input, row


def test_a_line_with_a_number_json_has_not_is_reported_and_the_rest_imported(
    alice: Any,
) -> None:
    # NaN and Infinity are read by Python's parser, never written by an agent's (JSON has no
    # such values): such a line is broken, not stored with a null in its place.
    spent: dict[str, Any] = {**lines.usage(0, 900, 4), "output_tokens": float("nan")}
    answer = lines.answer("a1", "u1", 2, "m1", lines.text("Looking."), spent)
    assert '"output_tokens": NaN' in answer  # as Python's json writes it
    data = (
        lines.prompt("u1", None, 0, "Fix the cart")
        + answer
        + lines.prompt("u2", "a1", 3, "And the tests?")
    ).encode()

    report = import_bytes(f"{lines.SESSION}.jsonl", data, alice)

    assert report.broken == [(2, "not JSON (NaN is not a JSON value)")]
    session = Transcript.objects.get(source=lines.SESSION).session
    assert [m.message.parts[0].content for m in session.messages.order_by("seq")] == [
        "Fix the cart",
        "And the tests?",
    ]
