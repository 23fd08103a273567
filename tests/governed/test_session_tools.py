"""The tool definitions a session's agent sends: counted once when set, passed to every
governance of the session (the budget is smaller by them), and part of what a snapshot is
made under."""

from __future__ import annotations

from typing import Any

import pytest

from ctxhub.governance import Policy, govern, tool_definition_tokens
from ctxhub.governance.offline import demo_toolset
from ctxhub.governance.tokens import tokenizer_for
from sessions import services
from sessions.history import REMEMBERED
from sessions.models import AgentSession
from sessions.services import governed as governed_module
from sessions.services import tools as tools_module
from sessions.services.tools import definitions_of, session_tools, set_tools
from sessions.xray import xray
from tests.factories import make_session
from tests.governed.builders import SMALL_POLICY, turn

pytestmark = [pytest.mark.django_db(transaction=True)]


def schema(words: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "where " * words}},
        "required": ["path"],
    }


TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file of the repository.",
        "parameters": schema(6_000),
    },
    {"name": "list_files", "description": "List a folder.", "parameters": schema(4_000)},
]


def session_with(alice: Any, tools: list[dict[str, Any]] | None = None) -> AgentSession:
    session = make_session(alice, policy=SMALL_POLICY)
    for n in range(8):
        services.append_messages(session, turn(n), auto_compact=False)
    if tools is not None:
        set_tools(session, tools)
    return session


def test_tools_are_counted_once_and_shrink_the_budget(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bare = session_with(alice)
    tooled = session_with(alice, TOOLS)
    tokenizer = tokenizer_for(tooled.model)
    expected = [tool_definition_tokens([t], tokenizer) for t in TOOLS]
    tooled.refresh_from_db()
    assert tooled.tool_tokens == expected
    assert tooled.tool_encoding == tokenizer.encoding_name
    assert sum(expected) > 9_000  # more than the history has room for beside them

    # Governing reads the stored counts: nothing is tokenised again.
    monkeypatch.setattr(tools_module, "tool_definition_tokens", _must_not_count)
    with_tools = services.governed_context(tooled).report
    without = services.governed_context(bare).report
    assert with_tools.tool_definition_tokens == sum(expected)
    assert without.tool_definition_tokens == 0
    assert with_tools.budget_tokens == without.budget_tokens - sum(expected)
    assert with_tools.history_tokens_after <= with_tools.budget_tokens
    assert with_tools.tokens_after < without.tokens_after
    # What the engine itself sends for the same definitions.
    cold = govern(
        [row.message for row in tooled.messages.order_by("seq")],
        Policy.model_validate(SMALL_POLICY),
        model=tooled.model,
        tool_definitions=TOOLS,
    )
    assert cold.report.tool_definition_tokens == sum(expected)
    assert cold.budget_tokens == with_tools.budget_tokens


def _must_not_count(*args: Any) -> int:
    raise AssertionError("tool definitions counted again")


def test_setting_the_same_tools_again_stores_nothing(alice: Any) -> None:
    session = session_with(alice, TOOLS)
    stamp = AgentSession.objects.get(pk=session.pk).updated_at
    reordered = [{"parameters": t["parameters"], "name": t["name"], **t} for t in TOOLS]
    assert set_tools(session, reordered) is False
    assert AgentSession.objects.get(pk=session.pk).updated_at == stamp
    assert set_tools(session, TOOLS[:1]) is True
    assert [t["name"] for t in AgentSession.objects.get(pk=session.pk).tool_definitions] == [
        "read_file"
    ]


def test_another_model_counts_them_with_its_own_tokenizer(alice: Any) -> None:
    session = session_with(alice, TOOLS)
    other = "openai:gpt-4-turbo"  # cl100k_base, where gpt-4o counts with o200k_base
    assert tokenizer_for(other).encoding_name != session.tool_encoding
    recounted = session_tools(session, other)
    assert recounted.tokens == [tool_definition_tokens([t], tokenizer_for(other)) for t in TOOLS]
    report = services.governed_context(session, model=other).report
    assert report.tool_definition_tokens == recounted.total


def test_a_snapshot_governed_with_other_tools_is_not_read(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = session_with(alice, TOOLS)
    first = services.governed_context(session)  # governed cold: the snapshot is written
    REMEMBERED.clear()  # as in another process
    assert services.governed_context(session).report == first.report  # read from it

    set_tools(session, TOOLS[:1])
    REMEMBERED.clear()
    monkeypatch.setattr(governed_module, "effective_history", _must_not_govern)
    with pytest.raises(AssertionError, match="governed cold"):
        services.governed_context(session)
    monkeypatch.undo()
    again = services.governed_context(session).report
    assert again.tool_definition_tokens == session_tools(session).total
    assert again.tool_definition_tokens < first.report.tool_definition_tokens


def _must_not_govern(session: Any) -> Any:
    raise AssertionError("governed cold instead of reading the snapshot")


def test_the_xray_meter_counts_the_tools_and_adds_up(alice: Any) -> None:
    tools = definitions_of(tool.tool_def for tool in demo_toolset().tools.values())
    session = session_with(alice, tools)
    view = xray(services.governed_context(session))
    by_key = {c.key: c.tokens for c in view.categories}
    assert by_key["tools"] == session_tools(session).total > 0
    assert sum(c.tokens for c in view.used) == view.governed
    assert [name for name, _ in view.tools] == ["list_files", "read_file"]
    assert sum(tokens for _, tokens in view.tools) == by_key["tools"]
    assert "read_file: " in view.tools_title
