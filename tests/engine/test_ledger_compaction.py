"""End to end: facts a user typed in passing and paths the agent acted on survive a compaction
whose summary forgets them."""

from __future__ import annotations

import re

import pytest
from engine_builders import MODEL
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxhub.governance import Threshold
from ctxhub.governance.compact import compact
from ctxhub.governance.draft import SummaryDraft
from ctxhub.governance.summaries import is_summary
from ctxhub.governance.summarise import transcript_text
from tests.messages import reply, tool_call, tool_result, user, words

TYPED = (
    "db-west-3",
    "api-eu-1",
    "OPS-1234",
    "JIRA-77",
    "v2.3.1",
    "1.4.0-rc2",
    "python 3.12",
    "staging",
    "production",
    "env=prod",
    "Makefile",
    "Config/settings.yaml",
)
ACTED_ON = (
    "Dockerfile",
    "Docs/Setup.md",
    "src/App.tsx",
    "Vagrantfile",
    "Config/Base.yaml",
    "Containerfile",
    "Jenkinsfile",
    "Procfile",
)


def _history() -> list[ModelMessage]:
    return [
        user("Prepare the release.", system="You are careful."),
        reply("Ready."),
        user(
            "While you are at it: the outage was on db-west-3 and api-eu-1, tracked in OPS-1234 "
            "and JIRA-77. We run v2.3.1 and the candidate is 1.4.0-rc2 on python 3.12; deploy "
            "to staging first, then production, with env=prod. Makefile is broken. "
            "Config/settings.yaml is wrong too."
        ),
        tool_call("read_file", id="c1", path="Dockerfile"),
        tool_result("read_file", words(400, "layer"), id="c1"),
        tool_call(
            "edit_file", id="c2", file_path="Docs/Setup.md", old_string="old", new_string="new"
        ),
        tool_result("edit_file", words(400, "edited"), id="c2"),
        tool_call("read_many", id="c3", files=["src/App.tsx", "Vagrantfile"]),
        tool_result("read_many", words(400, "component"), id="c3"),
        tool_call("multi_edit", id="c4", edits=[{"path": "Config/Base.yaml", "new_string": "x"}]),
        tool_result("multi_edit", words(400, "edit"), id="c4"),
        tool_call("move", id="c5", old_path="Containerfile", new_path="build/Containerfile.prod"),
        tool_result("move", words(400, "moved"), id="c5"),
        tool_call("bash", id="c6", command="cat Jenkinsfile Procfile"),
        tool_result("bash", words(400, "stage"), id="c6"),
        reply("I read them all."),
        user("Now summarise what is left."),
        reply("Nothing much."),
        user("Then tidy up."),
        reply("Tidied."),
    ]


def _text_of(messages: list[ModelMessage]) -> str:
    texts: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                texts.append(str(part.content))
            elif isinstance(part, TextPart):
                texts.append(part.content)
            elif isinstance(part, ToolCallPart):
                texts.append(part.args_as_json_str())
            elif isinstance(part, ToolReturnPart):
                texts.append(part.model_response_str())
    return "\n".join(texts)


def _stated(fact: str, text: str) -> bool:
    """Whether ``text`` states ``fact`` as itself, not inside a longer token or path."""
    return re.search(rf"(?<![\w/.-]){re.escape(fact)}(?![\w/-]|\.\w)", text) is not None


async def test_typed_facts_and_acted_on_paths_survive_a_forgetful_summary() -> None:
    seen: list[str] = []

    def forget(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(transcript_text(messages))
        draft = SummaryDraft(
            goal="Prepare the release.",
            decisions=["Look at the configuration and the build files."],
            current_state="The files were read.",
        )
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, draft.model_dump())])

    history = _history()
    compacted = await compact(
        history,
        summarizer=FunctionModel(forget, model_name="function:forgetful"),
        model=MODEL,
        keep=Threshold(kind="messages", value=4),
        user_messages_tokens=0,
    )
    report = compacted.report
    assert report.outcome == "summarized", report.error
    assert compacted.summary is not None
    # The messages stating the facts were summarised, not kept ...
    stating = (2, 3, 5, 7, 9, 11, 13)
    assert set(stating) <= set(report.summarized_indices)
    assert all(history[i] not in compacted.messages for i in stating)
    assert report.kept_user_indices == []
    # ... the summariser saw them and forgot every one ...
    assert seen
    assert all(_stated(fact, "\n".join(seen)) for fact in (*TYPED, *ACTED_ON))
    draft_only = compacted.summary.split("## Facts kept verbatim")[0]
    assert [fact for fact in (*TYPED, *ACTED_ON) if _stated(fact, draft_only)] == []
    # ... and the compacted history states each of them, verbatim, in its summary.
    summaries = [m for m in compacted.messages if is_summary(m)]
    assert len(summaries) == 1
    whole = _text_of(compacted.messages)
    summary = _text_of(summaries)
    for fact in (*TYPED, *ACTED_ON):
        assert _stated(fact, whole), fact
        assert _stated(fact, summary), fact
    assert report.ledger_omitted == 0


async def test_a_compaction_scores_the_facts_its_history_held_before_the_ledger() -> None:
    def forget_most(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        draft = SummaryDraft(
            goal="Prepare the release on db-west-3.",  # one fact it keeps by itself
            current_state="The files were read.",
        )
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, draft.model_dump())])

    history = _history()
    # A message kept beside the summary states one of the forgotten facts again.
    history[-1] = reply("Tidied; OPS-1234 can be closed.")
    compacted = await compact(
        history,
        summarizer=FunctionModel(forget_most, model_name="function:forgetful"),
        model=MODEL,
        keep=Threshold(kind="messages", value=4),
        user_messages_tokens=0,
    )
    report = compacted.report
    assert report.outcome == "summarized", report.error
    ledger = [item.text for item in report.ledger]
    assert "db-west-3" in report.kept_by_summarizer
    assert "OPS-1234" in report.added_by_ledger  # appended all the same ...
    assert "OPS-1234" not in report.missing_facts  # ... but the kept messages held it
    assert set(report.missing_facts) == set(report.added_by_ledger) - {"OPS-1234"}
    assert report.fact_score == pytest.approx(1 - len(report.missing_facts) / len(ledger))
    assert 0 < report.fact_score < 1
    # What the summariser's call used, as its model reported it.
    assert report.summarizer_input_tokens > 0
    assert report.summarizer_output_tokens > 0
