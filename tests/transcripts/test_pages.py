"""The transcripts' pages: files dropped on the imports page (several at once, a bad one
reported beside the good), the fleet page's import taking a transcript, a session's panel,
and what each user may see."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from sessions.models import AgentSession
from tests.transcripts import lines
from tests.transcripts.fixtures.codex import write_session
from transcripts.models import KeptLine, Transcript, TranscriptFile

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _claude() -> bytes:
    return (
        '{"type":"summary","summary":"Cart fix","leafUuid":"a1"}\n'
        + lines.prompt("u1", None, 0, "Fix the cart")
        + lines.answer("a1", "u1", 2, "m1", lines.text("Fixed."), lines.usage(0, 900, 4))
        + '{"type":"assis\n'
    ).encode()


def test_several_files_dropped_at_once_each_say_what_they_added(tmp_path: Path, alice: Any) -> None:
    rollout = write_session(tmp_path / "rollout.jsonl", seed=1, turns=8)
    files = [
        SimpleUploadedFile("rollout.jsonl", rollout.path.read_bytes()),
        SimpleUploadedFile(f"{lines.SESSION}.jsonl", _claude()),
        SimpleUploadedFile("notes.txt", b"shopping list\n"),
    ]

    page = _client(alice).post("/imports/", {"file": files})

    assert page.status_code == 200
    html = " ".join(page.content.decode().split())
    assert "rollout.jsonl</strong>:" in html
    assert f"{lines.SESSION}.jsonl</strong>: 2 messages in 1 new session" in html
    assert "line 4 (not JSON" in html
    assert "notes.txt</strong>: not a file this hub reads" in html
    assert AgentSession.objects.filter(owner=alice).count() == 2
    # Titled by the agent's own summary line.
    assert Transcript.objects.get(source=lines.SESSION).session.title == "Cart fix"

    again = _client(alice).post(
        "/imports/", {"file": [SimpleUploadedFile("again.jsonl", _claude())]}
    )
    assert "nothing new since it was last imported" in " ".join(again.content.decode().split())
    assert AgentSession.objects.count() == 2


def test_the_fleet_pages_import_takes_a_transcript(alice: Any) -> None:
    upload = SimpleUploadedFile(f"{lines.SESSION}.jsonl", _claude())

    response = _client(alice).post("/sessions/import/", {"file": upload})

    session = Transcript.objects.get(source=lines.SESSION).session
    assert response.status_code == 302
    assert response["Location"] == session.get_absolute_url()
    page = _client(alice).get(session.get_absolute_url()).content.decode()
    assert 'data-testid="transcript-panel"' in page
    assert "Claude Code's transcript" in page
    assert 'data-testid="transcript-skipped"' in page  # line 4
    assert KeptLine.objects.filter(session=session, kind="summary").exists()
    assert 'data-testid="transcript-kept"' in page

    bad = _client(alice).post(
        "/sessions/import/", {"file": SimpleUploadedFile("x.jsonl", b"\x00\x01")}
    )
    assert bad.status_code == 422
    assert 'data-testid="import-error"' in bad.content.decode()


def test_nobody_else_sees_a_users_transcripts(alice: Any, bob: Any) -> None:
    _client(alice).post(
        "/imports/", {"file": [SimpleUploadedFile(f"{lines.SESSION}.jsonl", _claude())]}
    )
    session = Transcript.objects.get(source=lines.SESSION).session

    bobs = _client(bob)
    assert lines.SESSION not in bobs.get("/imports/").content.decode()
    assert bobs.get(session.get_absolute_url()).status_code == 404
    assert bobs.get(f"/imports/sessions/{session.pk}/").status_code == 404
    # Bob importing the same file gets sessions of his own, not Alice's.
    bobs.post("/imports/", {"file": [SimpleUploadedFile("same.jsonl", _claude())]})
    assert TranscriptFile.objects.filter(key=lines.SESSION).count() == 2
    assert AgentSession.objects.filter(owner=bob).count() == 1
    assert Client().get("/imports/").status_code == 302  # logged out: the login page


def test_a_summary_of_another_conversation_titles_nothing(alice: Any) -> None:
    other = '{"type":"summary","summary":"Some older session","leafUuid":"elsewhere"}\n'
    body = (other + lines.prompt("u1", None, 0, "Fix the cart")).encode()

    _client(alice).post("/imports/", {"file": [SimpleUploadedFile("s.jsonl", body)]})

    assert Transcript.objects.get(source=lines.SESSION).session.title == "Fix the cart"
