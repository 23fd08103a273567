"""Codex rollouts imported: every message, usage figure and compaction accounted for against
the fixture's manifest (written as the rollout was, never read back from it)."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, UserPromptPart

from ctxhub.governance import Policy
from sessions.models import Compaction, Message
from tests.transcripts.fixtures.codex import Manifest, SessionManifest, write_sessions
from transcripts.models import KeptLine, Transcript, TranscriptFile
from transcripts.whatif import CALIBRATION_REQUESTS, replay

pytestmark = pytest.mark.django_db


@pytest.fixture
def rollouts(tmp_path: Path) -> Manifest:
    return write_sessions(tmp_path / "sessions", seed=3, turns=60)


def _import(path: Path, owner: Any) -> str:
    out = StringIO()
    call_command("import_transcripts", str(path), owner=owner.username, stdout=out, stderr=out)
    return out.getvalue()


def _log(expected: SessionManifest) -> list[Any]:
    session = Transcript.objects.get(source=expected.id).session
    return [row.message for row in Message.objects.filter(session=session).order_by("seq")]


def test_every_message_usage_figure_and_compaction_is_accounted_for(
    rollouts: Manifest, alice: Any
) -> None:
    _import(rollouts.root, alice)

    for expected in rollouts.sessions:
        log = _log(expected)
        context = len(expected.context_item_lines)  # the AGENTS.md and environment the model got
        assert len(log) == expected.message_count + context
        responses = [m for m in log if isinstance(m, ModelResponse)]
        assert len(responses) == expected.response_count
        # The context Codex sends as user messages comes first, then the first prompt.
        assert all(isinstance(m, ModelRequest) for m in log[:context])
        first_prompt = log[context]
        assert isinstance(first_prompt, ModelRequest)
        assert isinstance(first_prompt.parts[0], UserPromptPart)
        assert Transcript.objects.get(source=expected.id).session.title.startswith(
            expected.title.split()[0]
        )

        compaction = Compaction.objects.filter(session__transcript__source=expected.id).first()
        spent = compaction.usage if compaction is not None else {}
        reported = {
            name: sum(getattr(m.usage, name) for m in responses) + spent.get(name, 0)
            for name in ("input_tokens", "cache_read_tokens", "output_tokens")
        }
        assert reported == {
            "input_tokens": expected.usage.input_tokens,
            "cache_read_tokens": expected.usage.cached_input_tokens,
            "output_tokens": expected.usage.output_tokens,
        }
        reasoning = sum(m.usage.details.get("reasoning_tokens", 0) for m in responses)
        assert reasoning + spent.get("details", {}).get("reasoning_tokens", 0) == (
            expected.usage.reasoning_output_tokens
        )
        # Each response carries its own request's input, in order (repeats counted once).
        answered = [c for c in expected.calls if c.kind == "response"]
        assert [m.usage.input_tokens for m in responses] == [c.usage.input_tokens for c in answered]
        calls = {p.tool_call_id for m in responses for p in m.parts if p.part_kind == "tool-call"}
        assert set(expected.tool_call_ids) <= calls
        returns = {
            p.tool_call_id: p
            for m in log
            if isinstance(m, ModelRequest)
            for p in m.parts
            if p.part_kind == "tool-return"
        }
        assert set(returns) == set(expected.tool_call_ids) - set(expected.orphan_call_ids)
        assert all(returns[call].tool_name != "tool" for call in returns)  # named by their call

        if expected.compaction is None:
            assert compaction is None
        else:
            assert compaction is not None
            assert compaction.summary == expected.compaction.message
            assert compaction.summarizer == "codex"
            # The summary stands for every message before it.
            assert compaction.first_seq == 0
            assert compaction.last_seq == expected.compaction.after_message_index + context
            assert (
                spent["input_tokens"]
                == expected.calls[expected.compaction.call_index].usage.input_tokens
            )

        file = TranscriptFile.objects.get(key=expected.id)
        assert file.read_lines == expected.line_count
        broken = [line for line, _ in file.skipped]
        assert broken == ([expected.broken_line] if expected.broken_line else [])
        kept = set(
            KeptLine.objects.filter(session__transcript__source=expected.id).values_list(
                "line", "kind"
            )
        )
        assert {(u.line, u.type) for u in expected.unknown_lines} <= kept

    child = Transcript.objects.get(source=rollouts.subagent.id)
    assert child.parent == Transcript.objects.get(source=rollouts.main.id).session


def test_the_instructions_and_context_are_the_models_own_messages(
    rollouts: Manifest, alice: Any
) -> None:
    _import(rollouts.root, alice)
    log = _log(rollouts.main)
    first = log[0]
    assert isinstance(first, ModelRequest)
    text = (
        first.parts[0].content
        if isinstance(first.parts[0], UserPromptPart | SystemPromptPart)
        else ""
    )
    assert "AGENTS.md" in str(text)


def test_importing_again_adds_nothing_and_a_grown_rollout_adds_its_new_lines(
    rollouts: Manifest, alice: Any
) -> None:
    _import(rollouts.root, alice)
    messages, compactions = Message.objects.count(), Compaction.objects.count()

    again = _import(rollouts.root, alice)

    assert (Message.objects.count(), Compaction.objects.count()) == (messages, compactions)
    assert "0 new sessions, 0 messages" in again
    assert "2 had nothing new" in again

    path = rollouts.main.path
    with path.open("a", encoding="utf-8") as handle:
        handle.write(
            '{"timestamp":"2030-01-01T00:00:00.000Z","type":"response_item","payload":{"type":'
            '"message","role":"user","content":[{"type":"input_text","text":"one more"}]}}\n'
        )
    _import(path, alice)
    assert Message.objects.count() == messages + 1
    last = _log(rollouts.main)[-1]
    assert isinstance(last, ModelRequest)
    assert last.parts[0].content == "one more"  # type: ignore[union-attr]


@pytest.mark.parametrize("seed", [3, 8])
def test_calibrated_on_ten_responses_the_rest_are_predicted_within_three_percent(
    tmp_path: Path, alice: Any, seed: int
) -> None:
    rollouts = write_sessions(tmp_path / "sessions", seed=seed, turns=60)
    _import(rollouts.root, alice)
    session = Transcript.objects.get(source=rollouts.main.id).session

    result = replay(session, Policy())

    assert result.calibration is not None
    later = result.rows[CALIBRATION_REQUESTS:]
    assert len(later) == rollouts.main.response_count - CALIBRATION_REQUESTS
    for row in later:
        assert abs(row.predicted - row.agent.input) <= 0.03 * row.agent.input, row
