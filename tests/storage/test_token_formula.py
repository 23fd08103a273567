"""One token formula: the count stored with a message is the engine's count of that message.

The log, the meter, the dashboard and the API read the ``tokens`` column; governance counts with
``message_facts``. A mixed history (every kind of part, media, unicode, a legacy retry that
pydantic-ai loads as its successor) shows both are one number, for exact and approximate
tokenizers alike.
"""

from __future__ import annotations

import pytest
from pydantic_ai.messages import (
    BinaryContent,
    FilePart,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RequestUsage,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ctxhub.governance import count_tokens
from ctxhub.governance.facts import history_tokens, message_facts
from ctxhub.governance.tokens import tokenizer_for
from sessions import services
from sessions.history import effective_tokens
from sessions.models import Message
from tests.factories import make_session

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

MODELS = ["openai:gpt-4o", "openai:gpt-4", "anthropic:claude-sonnet-4-5"]
"""o200k_base and cl100k_base (exact), and a model counted approximately."""

INSTRUCTIONS = "You fix failing builds. Answer briefly."
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
LEGACY = 6
"""Position of the legacy retry in ``mixed_history()``."""


def mixed_history() -> list[ModelMessage]:
    with pytest.warns(UserWarning, match="RetryPromptPart"):
        # As an older pydantic-ai wrote it; its stored form loads as a retried tool return.
        legacy = RetryPromptPart(
            "target must be a string", tool_name="run_tests", tool_call_id="c4"
        )
    return [
        ModelRequest(
            parts=[
                SystemPromptPart("You are a careful engineer."),
                UserPromptPart("CI fails on tests/test_parser.py — fix it, s'il vous plaît."),
            ],
            instructions=INSTRUCTIONS,
        ),
        ModelResponse(
            parts=[
                ThinkingPart("The parser probably chokes on a byte-order mark."),
                TextPart("Let me look."),
                ToolCallPart(
                    "read_file",
                    {"path": "src/parser.py", "lines": [1, 40], "note": "Ünïcödé ✓"},
                    tool_call_id="c1",
                ),
                ToolCallPart("run_tests", '{"target": "tests/test_parser.py"}', tool_call_id="c2"),
            ]
        ),
        ModelRequest(
            parts=[
                ToolReturnPart(
                    "read_file", "def parse(text):\n    return text.split(',')\n" * 200, "c1"
                ),
                ToolReturnPart(
                    "run_tests",
                    {"failed": 1, "passed": 41, "errors": ["AssertionError: '\\ufeffa' != 'a'"]},
                    "c2",
                ),
            ],
            instructions=INSTRUCTIONS,
        ),
        ModelResponse(parts=[ToolCallPart("run_tests", {"target": 7}, tool_call_id="c3")]),
        ModelRequest(
            parts=[ToolReturnPart("run_tests", "target must be a string", "c3", outcome="retried")]
        ),
        ModelResponse(parts=[ToolCallPart("run_tests", {"target": [7]}, tool_call_id="c4")]),
        ModelRequest(parts=[legacy]),
        ModelRequest(
            parts=[
                UserPromptPart(
                    [
                        "The failure, as the CI page shows it:",
                        ImageUrl("https://ci.example.com/runs/42.png"),
                        BinaryContent(PNG, media_type="image/png"),
                    ]
                )
            ],
            instructions=INSTRUCTIONS,
        ),
        ModelResponse(
            parts=[
                TextPart("Stripping the BOM in `parse` fixes it: `text.lstrip('\\ufeff')`."),
                FilePart(BinaryContent(PNG, media_type="image/png")),
            ],
            usage=RequestUsage(input_tokens=1_234, output_tokens=56),
        ),
    ]


def _stored(session: object) -> list[Message]:
    return list(Message.objects.filter(session=session).order_by("seq"))


@pytest.mark.parametrize("model", MODELS)
def test_stored_counts_are_the_engines_counts_of_the_stored_messages(
    alice: object, model: str
) -> None:
    session = make_session(alice, model=model)
    history = mixed_history()
    appended = services.append_messages(session, history, auto_compact=False)
    tokenizer = tokenizer_for(model)

    rows = _stored(session)
    assert [row.tokens for row in appended] == [row.tokens for row in rows]
    stored = [row.message for row in rows]  # fresh objects, loaded from the payloads
    for row, message in zip(rows, stored, strict=True):
        facts = message_facts(message, tokenizer)
        assert (row.tokens, row.encoding, row.tokens_exact) == (
            facts.tokens,
            tokenizer.encoding_name,
            tokenizer.exact,
        )
        assert row.facts == facts.to_json()
    # What was handed in counts the same, except the legacy retry, which is stored as (and
    # counted as) the part pydantic-ai loads it as.
    for position, (row, message) in enumerate(zip(rows, history, strict=True)):
        if position != LEGACY:
            assert row.tokens == message_facts(message, tokenizer).tokens

    # The meter, the effective history and the engine's public count agree (the engine counts
    # the latest instructions once on top of the messages).
    totals = services.token_totals(session)
    assert totals.tokens == sum(row.tokens for row in rows) == history_tokens(stored, tokenizer)
    assert effective_tokens(session) == totals.tokens
    assert count_tokens(stored, model=model) == totals.tokens + tokenizer.count(INSTRUCTIONS)
    assert (totals.encoding, totals.exact) == (tokenizer.encoding_name, tokenizer.exact)


def test_a_recount_finds_nothing_to_change_after_an_append(alice: object) -> None:
    session = make_session(alice, model="openai:gpt-4o")
    services.append_messages(session, mixed_history(), auto_compact=False)
    before = [(row.tokens, row.encoding, row.tokens_exact, row.facts) for row in _stored(session)]

    totals = services.recount_tokens(session)

    after = [(row.tokens, row.encoding, row.tokens_exact, row.facts) for row in _stored(session)]
    assert after == before
    assert totals.tokens == sum(tokens for tokens, *_ in before)
