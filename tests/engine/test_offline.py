"""Offline models: resolved by name, labelled offline, deterministic, and the demo tools stay
inside the repository."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart

from ctxhub.governance import ContextGovernor, Policy
from ctxhub.governance.llm import ModelChoice, UnknownOfflineModel, is_offline, resolve_model
from ctxhub.governance.offline import demo_toolset, extractive_draft
from ctxhub.governance.offline.demo import PathRefused, confine, default_root, read_file


def test_models_resolve_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # constructing a client sends nothing
    assert resolve_model("offline:demo").model_name == "offline:demo"
    assert resolve_model("offline:extractive").model_name == "offline:extractive"
    assert resolve_model("openai:gpt-4o").model_name == "gpt-4o"
    with pytest.raises(UnknownOfflineModel):
        resolve_model("offline:gpt")
    choice = ModelChoice(chat="offline:demo")
    assert choice.summarizer_name == "offline:extractive"
    assert ModelChoice(chat="openai:gpt-4o").summarizer_name == "openai:gpt-4o"
    assert ModelChoice(chat="openai:gpt-4o", summarizer="openai:gpt-4o-mini").summarizer_name == (
        "openai:gpt-4o-mini"
    )
    assert is_offline(choice.chat_model())
    assert is_offline(choice.summarizer_model())


async def test_the_demo_model_chats_with_its_tools_under_governance() -> None:
    agent = Agent(
        resolve_model("offline:demo"),
        toolsets=[demo_toolset()],
        capabilities=[ContextGovernor(Policy(context_window=32_000))],
    )
    result = await agent.run("Please read pyproject.toml")
    calls = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolCallPart)]
    assert [(c.tool_name, c.args_as_dict()) for c in calls] == [
        ("read_file", {"path": "pyproject.toml"})
    ]
    returns = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert returns[0].content.startswith("pyproject.toml: lines 1-")
    assert result.output.startswith("[offline demo model")
    responses = [m for m in result.all_messages() if isinstance(m, ModelResponse)]
    assert all(r.model_name == "offline:demo" for r in responses)

    async with agent.run_stream("list the files", message_history=result.all_messages()) as stream:
        text = await stream.get_output()
    assert text.startswith("[offline demo model")


def test_demo_tools_refuse_to_leave_the_repository(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.txt").write_text("hello\n")
    (root / ".env").write_text("SECRET=1\n")
    (tmp_path / "outside.txt").write_text("nope\n")
    (root / "link.txt").symlink_to(tmp_path / "outside.txt")
    assert read_file(root, "a.txt").endswith("hello")
    for bad in ("../outside.txt", "/etc/passwd", ".env", "link.txt", "sub/../../outside.txt"):
        assert read_file(root, bad).startswith("Refused:"), bad
    with pytest.raises(PathRefused):
        confine(default_root(), "../..")


def test_the_extractive_summariser_is_deterministic() -> None:
    transcript = (
        "[user] Build the report in reports/q3.py for Acme.\n"
        "[assistant] We decided to use pandas instead of csv.\n"
        '[tool call read_file] {"path": "reports/q3.py"}\n'
        "[tool result read_file] KeyError: 'revenue'\n"
        "[assistant] Fixed the KeyError. Next we need to add charts."
    )
    draft = extractive_draft(transcript)
    assert draft == extractive_draft(transcript)
    assert draft.goal == "Build the report in reports/q3.py for Acme."
    assert draft.decisions == ["We decided to use pandas instead of csv."]
    assert "reports/q3.py" in draft.files_and_identifiers
    assert draft.errors_and_fixes == ["KeyError: 'revenue'"]
    assert draft.pending_tasks == ["Next we need to add charts."]
    assert draft.current_state == "Fixed the KeyError. Next we need to add charts."


@pytest.mark.parametrize(
    ("prompt", "calls"),
    [
        ("list the files in ctxhub/governance", [("list_files", {"path": "ctxhub/governance"})]),
        ("what is in sessions/ ?", [("list_files", {"path": "sessions"})]),
        (
            "show me templates/sessions and README.md",
            [("list_files", {"path": "templates/sessions"}), ("read_file", {"path": "README.md"})],
        ),
        ("look at /etc/passwd", [("list_files", {"path": "/etc/passwd"})]),
    ],
)
async def test_the_demo_model_lists_directories_and_reads_files_it_is_asked_about(
    prompt: str, calls: list[tuple[str, dict[str, str]]]
) -> None:
    agent = Agent(resolve_model("offline:demo"), toolsets=[demo_toolset()])
    result = await agent.run(prompt)
    made = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolCallPart)]
    assert [(c.tool_name, c.args_as_dict()) for c in made] == calls
    returns = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    if prompt.startswith("list"):
        assert "llm.py" in str(returns[0].content)
    if "/etc/passwd" in prompt:
        assert str(returns[0].content).startswith("Refused:")
