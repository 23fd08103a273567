"""The x-ray's top consumers: what holds the history's tokens by tool and by the argument of the
call behind each result, as stored and as sent, adding up to the history the x-ray shows."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from pydantic_ai.messages import ModelResponse, ToolCallPart

from sessions import services
from sessions.chat import commands
from sessions.consumers_report import call_what, top_consumers
from sessions.models import Message
from sessions.xray import xray
from tests.factories import make_session
from tests.messages import T0, reply, tool_call, tool_result, user, words

pytestmark = pytest.mark.django_db

SYSTEM = "You are a careful engineer. " * 20


def _history() -> list[Any]:
    """Reads of a big file (twice), a grep, a late result pair repair moves up next to its
    call, and a call that never got a result (pair repair writes one)."""
    big = words(3_000, "def")
    return [
        user("Fix the parser", system=SYSTEM),
        tool_call("read_file", id="r1", path="src/big.py"),
        tool_result("read_file", big, id="r1"),
        tool_call("grep", id="g1", pattern="TODO", path="src"),
        tool_result("grep", "src/a.py:1: TODO", id="g1"),
        reply("Read it; looking again."),
        tool_call("read_file", id="r2", path="src/big.py"),
        tool_result("read_file", big, id="r2"),
        tool_call("list_files", id="l1", dir="src"),
        user("also check the tests"),
        tool_result("list_files", "a.py\nb.py", id="l1"),
        tool_call("run_tests", id="t1", command="pytest -q tests/parser"),
        user("never mind, stop"),
        reply("Stopped."),
    ]


@pytest.fixture
def session(alice: Any) -> Any:
    session = make_session(alice, title="Parser", policy={"tool_output": {"limit": 200}})
    services.append_messages(session, _history(), auto_compact=False)
    return session


def test_the_rows_add_up_to_the_history_sent_and_the_log_stored(session: Any) -> None:
    context = services.governed_context(session)
    report = context.report
    found = top_consumers(context)
    # Sent: every part of the governed history but the system prompt's is in one row and each
    # message's framing in the last, so the rows add up to the x-ray's history tokens.
    assert sum(row.sent for row in found.rows) == found.history == xray(context).history
    framing = sum(
        m.tokens_after - sum(p.tokens_after for p in m.parts) for m in report.messages if m.kept
    )
    assert found.rows[-1].kind == "framing"
    assert found.rows[-1].sent == framing
    # Stored: the log's tokens without its system prompt (no records here), each result counted
    # once though pair repair moved one and wrote another.
    system = sum(
        p.tokens_before for m in report.messages for p in m.parts if p.part_kind == "system-prompt"
    )
    logged = sum(session.messages.values_list("tokens", flat=True))
    assert sum(row.stored for row in found.rows) == found.stored == logged - system
    actions = {p.action for m in report.messages for p in m.parts}
    assert {"moved", "synthesized", "truncated"} <= actions
    # The shares are of the history sent.
    assert sum(row.share for row in found.rows) == pytest.approx(100.0)


def test_a_truncated_tool_sends_less_than_it_stores(session: Any) -> None:
    found = top_consumers(services.governed_context(session))
    tools = {row.tool: row for row in found.tools}
    read = tools["read_file"]
    assert read.results == 2
    assert read.sent < read.stored
    assert read.cut
    assert tools["grep"].sent == tools["grep"].stored
    assert not tools["grep"].cut
    # The largest consumer comes first.
    assert found.rows[0].tool == "read_file"
    # The moved result counts once, the written one too (nothing of it is stored).
    assert tools["list_files"].results == 1
    assert tools["run_tests"].results == 1
    assert {row.kind for row in found.rows} >= {"user", "answers", "framing"}


def test_the_label_comes_from_the_calls_path_and_groups_the_reads(session: Any) -> None:
    found = top_consumers(services.governed_context(session))
    first = found.by_argument[0]
    assert (first.tool, first.what, first.results) == ("read_file", "src/big.py", 2)
    assert first.sent < first.stored
    by_label = {row.label: row for row in found.by_argument}
    assert "grep src" in by_label  # path is preferred to pattern
    assert "list_files src" in by_label  # no known key: the first short string
    assert "run_tests pytest -q tests/parser" in by_label


def test_the_panel_shows_the_rows_and_someone_elses_session_is_404(
    session: Any, client: Client, bob: Any
) -> None:
    client.force_login(session.owner)
    page = client.get(f"/sessions/{session.pk}/")
    assert 'data-testid="consumers-control"' in page.content.decode()
    answer = client.get(f"/sessions/{session.pk}/consumers/")
    assert answer.status_code == 200
    html = answer.content.decode()
    found = top_consumers(services.governed_context(session))
    assert 'data-tool="read_file"' in html
    assert "src/big.py" in html
    assert f'data-testid="consumers-sent">{found.history:,}<' in html
    client.force_login(bob)
    assert client.get(f"/sessions/{session.pk}/consumers/").status_code == 404


def test_context_command_names_the_top_consumers(session: Any) -> None:
    note = commands.run(session, session.owner, "/context")
    top = [line for line in note.lines if line.startswith("Top: ")]
    assert 0 < len(top) <= 5
    first = top_consumers(services.governed_context(session)).by_argument[0]
    assert top[0] == (f"Top: read_file src/big.py {first.sent:,} sent / {first.stored:,} stored")


def _raw_call(args: Any, id: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart("read_file", args, tool_call_id=id)], timestamp=T0)


def test_hostile_arguments_never_break_the_panel(alice: Any, client: Client) -> None:
    nested: Any = "deep"
    for _ in range(60):
        nested = {"a": nested}
    session = make_session(alice, title="Hostile")
    history: list[Any] = [user("go")]
    hostile = [
        '{"path": ',  # broken JSON text
        "[1, 2, 3]",  # JSON, but not an object
        json.dumps({"path": "x" * 200_000}),  # too long to parse for a label
        {"path": "p\n" * 50_000},  # a huge, many-line path
        {"path": 12, "data": nested},  # a path that is no string, deep nesting
        {"query": "<script>alert(1)</script>"},
    ]
    for n, args in enumerate(hostile):
        history += [_raw_call(args, f"h{n}"), tool_result("read_file", "ok " * 50, id=f"h{n}")]
    history.append(reply("done"))
    services.append_messages(session, history, auto_compact=False)
    client.force_login(alice)
    answer = client.get(f"/sessions/{session.pk}/consumers/")
    assert answer.status_code == 200
    html = answer.content.decode()
    assert "<script>alert" not in html
    assert "&lt;script&gt;" in html
    found = top_consumers(services.governed_context(session))
    assert sum(row.sent for row in found.rows) == found.history
    labels = {row.what for row in found.by_argument}
    assert None in labels  # the calls with no usable label are grouped under the tool
    assert all(what is None or len(what) <= 60 for what in labels)
    assert Message.objects.filter(session=session).count() == len(history)


@pytest.mark.parametrize(
    ("args", "what"),
    [
        ({"file_path": "a.py", "path": "b.py"}, "b.py"),
        ({"content": "x" * 500, "mode": "w"}, "w"),
        ({"n": 3}, None),
        ('{"url": "https://example.com/a"}', "https://example.com/a"),
        ('{"path": ', None),
        ("[" * 100_000, None),
        ("[" * 5_000 + "]" * 5_000, None),
        (None, None),
        ({"path": "  two\n lines  "}, "two lines"),
        ({"command": "y" * 100}, "y" * 59 + "…"),
    ],
)
def test_call_what(args: Any, what: str | None) -> None:
    assert call_what(args) == what
