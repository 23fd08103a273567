"""Following a transcript as its agent writes it: what is complete is read at once, a response
still being written waits for its last line (or for the file to go quiet), and nothing is read
twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelResponse

from sessions.models import Message
from tests.transcripts import lines
from transcripts.following import QUIET_SECONDS, Follower
from transcripts.models import Transcript

pytestmark = pytest.mark.django_db


def _log() -> list[Any]:
    session = Transcript.objects.get(source=lines.SESSION).session
    return [row.message for row in Message.objects.filter(session=session).order_by("seq")]


def test_a_response_written_a_block_a_line_is_read_whole_once_its_last_line_is_there(
    tmp_path: Path, alice: Any
) -> None:
    path = tmp_path / "project" / f"{lines.SESSION}.jsonl"
    path.parent.mkdir()
    follower = Follower([tmp_path], alice)
    path.write_text(lines.prompt("u1", None, 0, "Why does the cart test fail?"))

    follower.poll(now=0.0)
    assert len(_log()) == 1  # the prompt is in at once

    # The response's first block: its usage still counts output as it streams.
    with path.open("a") as handle:
        handle.write(
            lines.answer("a1", "u1", 2, "msg_1", lines.text("Let me look."), lines.usage(0, 900, 2))
        )
    follower.poll(now=0.5)
    assert len(_log()) == 1  # held back: its other blocks may still come

    with path.open("a") as handle:
        handle.write(
            lines.answer(
                "a2",
                "a1",
                3,
                "msg_1",
                lines.tool_use("toolu_1", "Read", {"file_path": "tests/test_cart.py"}),
                lines.usage(0, 900, 41),
            )
        )
        handle.write(lines.result("u2", "a2", 4, "toolu_1", "def test_cart(): assert total == 3"))
    follower.poll(now=1.0)

    log = _log()
    assert len(log) == 3
    response = log[1]
    assert isinstance(response, ModelResponse)
    assert [part.part_kind for part in response.parts] == ["text", "tool-call"]
    # The usage of the line that counted most: the last one's, once.
    assert response.usage.output_tokens == 41
    assert response.usage.input_tokens == 3 + 900
    assert log[2].parts[0].tool_name == "Read"  # type: ignore[union-attr]

    follower.poll(now=5.0)
    assert len(_log()) == 3  # nothing read twice


def test_a_response_left_unfinished_is_read_once_the_file_has_been_quiet(
    tmp_path: Path, alice: Any
) -> None:
    path = tmp_path / f"{lines.SESSION}.jsonl"
    path.write_text(
        lines.prompt("u1", None, 0, "Summarise the README")
        + lines.answer("a1", "u1", 2, "msg_1", lines.text("It says"), lines.usage(0, 500, 3))
    )
    follower = Follower([tmp_path], alice)
    follower.poll(now=0.0)
    assert len(_log()) == 1
    follower.poll(now=QUIET_SECONDS / 2)
    assert len(_log()) == 1

    follower.poll(now=QUIET_SECONDS + 0.1)

    log = _log()
    assert len(log) == 2
    assert isinstance(log[1], ModelResponse)
    follower.poll(now=QUIET_SECONDS * 3)
    assert len(_log()) == 2


def test_a_line_being_written_is_not_read_until_its_newline(tmp_path: Path, alice: Any) -> None:
    path = tmp_path / f"{lines.SESSION}.jsonl"
    whole = lines.prompt("u1", None, 0, "First") + lines.prompt("u2", "u1", 1, "Second")
    path.write_text(whole[:-20])  # the second line half written
    follower = Follower([tmp_path], alice)
    follower.poll(now=0.0)
    assert len(_log()) == 1
    path.write_text(whole)
    follower.poll(now=0.5)
    assert [m.parts[0].content for m in _log()] == ["First", "Second"]  # type: ignore[union-attr]
    assert Transcript.objects.get(source=lines.SESSION).file.skipped == []
