"""Token accounting: encodings per model, instructions and tool definitions, caching."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import pytest
from engine_builders import MODEL, _off, _tight
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import ToolDefinition

from ctxhub.governance import count_tokens, govern
from ctxhub.governance.counting import cached_part_tokens
from ctxhub.governance.facts import message_facts
from ctxhub.governance.tokens import Tokenizer, context_window, load_encoding, tokenizer_for
from tests.messages import T0, reply, tool_call, tool_result, user, words


def test_encodings_per_model_family() -> None:
    assert tokenizer_for("openai:gpt-4o").encoding_name == "o200k_base"
    assert tokenizer_for("openai:gpt-5-mini").encoding_name == "o200k_base"
    assert tokenizer_for("o3-mini").encoding_name == "o200k_base"
    assert tokenizer_for("openai:gpt-4-turbo").encoding_name == "cl100k_base"
    assert tokenizer_for("gpt-3.5-turbo").encoding_name == "cl100k_base"
    assert tokenizer_for("openai:gpt-4o").exact
    claude = tokenizer_for("anthropic:claude-sonnet-4-5")
    assert (claude.encoding_name, claude.exact) == ("o200k_base", False)


def test_exact_counts_match_known_values() -> None:
    assert count_tokens("hello world", model="openai:gpt-4o") == 2
    assert count_tokens("hello world", model="gpt-4") == 2
    assert count_tokens("<|endoftext|>", model="gpt-4o") > 1  # data, not a control token


def test_message_counts_are_the_text_tokens_plus_the_framing() -> None:
    # The documented formula, worked out from tiktoken itself: 3 tokens per message, 1 per
    # part, 85 per media item; a tool call counts its name and its arguments as compact JSON
    # (as a provider is sent them), a tool result its name and its output.
    encoding = load_encoding("o200k_base")
    assert encoding is not None

    def text(value: str) -> int:
        return len(encoding.encode(value, disallowed_special=()))

    tokenizer = tokenizer_for(MODEL)
    args = {"path": "src/app.py", "lines": [1, 40]}
    output = "def main():\n    return 0\n" * 40
    response = ModelResponse(
        parts=[TextPart("Reading the file."), ToolCallPart("read_file", args, tool_call_id="c")],
        timestamp=T0,
    )
    request = ModelRequest(
        parts=[
            ToolReturnPart("read_file", output, tool_call_id="c", timestamp=T0),
            UserPromptPart([ImageUrl("https://example.com/a.png")], timestamp=T0),
        ]
    )
    call_tokens = 1 + text("read_file") + text(json.dumps(args, separators=(",", ":")))
    result_tokens = 1 + text("read_file") + text(output)
    assert cached_part_tokens(response.parts[1], tokenizer) == call_tokens
    assert cached_part_tokens(request.parts[0], tokenizer) == result_tokens
    assert cached_part_tokens(request.parts[1], tokenizer) == 1 + 85
    assert message_facts(response, tokenizer).tokens == (
        3 + (1 + text("Reading the file.")) + call_tokens
    )
    assert message_facts(request, tokenizer).tokens == 3 + result_tokens + (1 + 85)
    assert message_facts(request, tokenizer).part_tokens == (result_tokens, 1 + 85)


def test_context_windows_by_family_with_override() -> None:
    assert context_window("openai:gpt-4o") == 128_000
    assert context_window("openai:gpt-4.1-mini") == 1_000_000
    assert context_window("anthropic:claude-opus-4") == 200_000
    assert context_window("something-new") == 128_000
    governed = govern([user("hi")], _tight(5000), model="openai:gpt-4o")
    assert governed.report.window_tokens == 5000


def test_instructions_are_counted_once_from_the_latest_request() -> None:
    first = ModelRequest(parts=[UserPromptPart("a")], instructions=words(500))
    latest = ModelRequest(parts=[UserPromptPart("b")], instructions="short")
    tokenizer = tokenizer_for(MODEL)
    expected = message_facts(first, tokenizer).tokens + message_facts(latest, tokenizer).tokens + 1
    assert count_tokens([first, reply("x"), latest], model=MODEL) == expected + 5


def test_budget_subtracts_system_instructions_tools_output_and_margin() -> None:
    request = ModelRequest(parts=[UserPromptPart("hi")], instructions="be terse")
    tools = [ToolDefinition(name="read", description="Read a file", parameters_json_schema={})]
    governed = govern([request], None, model="openai:gpt-4o", tool_definitions=tools)
    report = governed.report
    assert report.tool_definition_tokens > 5
    assert report.system_tokens == count_tokens("be terse", model=MODEL)
    assert report.budget_tokens == (
        128_000 - report.system_tokens - report.tool_definition_tokens - 8_192 - 12_800
    )


def test_history_cap_lowers_the_budget() -> None:
    governed = govern([user("hi")], _tight(100_000, history_cap_tokens=3000), model=MODEL)
    assert governed.budget_tokens == 3000


def test_report_totals_equal_count_tokens() -> None:
    history = [
        user("go", system="sys"),
        tool_call("read", id="c"),
        tool_result("read", words(900), id="c"),
    ]
    history += [reply("done"), user("next")]
    governed = govern(history, _tight(100_000, tool_output={"limit": 100}), model=MODEL)
    assert governed.report.tokens_before == count_tokens(history, model=MODEL)
    assert governed.report.tokens_after == count_tokens(governed.messages, model=MODEL)
    assert governed.report.tokens_after < governed.report.tokens_before
    assert sum(m.tokens_after for m in governed.report.messages) == governed.report.tokens_after


@contextmanager
def _tokenised() -> Iterator[list[str]]:
    """Every text a tokenizer counts or encodes meanwhile."""
    texts: list[str] = []
    count, encode = Tokenizer.count, Tokenizer.encode

    def counted(self: Tokenizer, text: str) -> int:
        texts.append(text)
        return count(self, text)

    def encoded(self: Tokenizer, text: str) -> list[int] | None:
        texts.append(text)
        return encode(self, text)

    with (
        mock.patch.object(Tokenizer, "count", counted),
        mock.patch.object(Tokenizer, "encode", encoded),
    ):
        yield texts


def test_a_growing_history_only_counts_new_messages() -> None:
    # Counts are kept with the messages: governing the history again, grown by one message,
    # tokenises that message's text and nothing else, even with a Governor of its own.
    history = [user(f"message {n} " + words(50)) for n in range(200)]
    policy = _tight(10_000_000, **_off())
    with _tokenised() as texts:
        govern(history, policy, model=MODEL)
    assert sorted(texts) == sorted(str(m.parts[0].content) for m in history)
    history.append(reply("one more"))
    with _tokenised() as texts:
        govern(history, policy, model=MODEL)
    assert texts == ["one more"]


def test_approximate_families_are_marked_in_the_report() -> None:
    governed = govern([user("hi")], None, model="anthropic:claude-sonnet-4-5")
    assert governed.report.exact is False
    assert governed.report.encoding == "o200k_base"


def _png(width: int, height: int) -> bytes:
    header = struct.pack(">II", width, height) + bytes([8, 6, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + header + b"\0" * 4


def _jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0" + b"\1\1\0\0\1\0\1\0\0"
    frame = b"\xff\xc0" + struct.pack(">HBHH", 17, 8, height, width) + b"\3" + b"\0" * 9
    return b"\xff\xd8" + app0 + frame + b"\xff\xd9"


@pytest.mark.parametrize(
    ("data", "tokens"),
    [
        # 1280 x 720: the shorter side to 768 (1365 x 768), 3 x 2 tiles of 512.
        (_png(1280, 720), 85 + 170 * 6),
        # 4000 x 3000: fit in 2048 (2048 x 1536), then 1024 x 768: 2 x 2 tiles.
        (_jpeg(4000, 3000), 85 + 170 * 4),
        # Small images are not scaled up: one tile.
        (b"GIF89a" + struct.pack("<HH", 64, 48) + b"\0" * 8, 85 + 170),
        # A header that gives no size counts as one low-detail image.
        (b"\x89PNG\r\n\x1a\n" + b"\0" * 40, 85),
    ],
)
def test_an_image_costs_what_its_size_does(data: bytes, tokens: int) -> None:
    tokenizer = tokenizer_for(MODEL)  # an OpenAI model: its tiles
    part = UserPromptPart([BinaryContent(data, media_type="image/png")], timestamp=T0)
    assert cached_part_tokens(part, tokenizer) == 1 + tokens
    # A URL's image is not at hand: one low-detail image.
    url = UserPromptPart([ImageUrl("https://example.com/a.png")], timestamp=T0)
    assert cached_part_tokens(url, tokenizer) == 1 + 85


def test_a_claude_image_costs_its_pixels() -> None:
    # 2560 x 1600: the long edge to 1568 (1568 x 980), one token per 750 pixels.
    part = UserPromptPart([BinaryContent(_png(2560, 1600), media_type="image/png")], timestamp=T0)
    claude = tokenizer_for("anthropic:claude-sonnet-4-5")
    assert cached_part_tokens(part, claude) == 1 + math.ceil(1568 * 980 / 750)
    # The same part counted for an OpenAI model is counted again, by its tiles.
    assert cached_part_tokens(part, tokenizer_for(MODEL)) == 1 + 85 + 170 * 6
