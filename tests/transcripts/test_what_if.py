"""What ctxhub would have done, checked by hand: a Claude Code session whose recorded input is
exactly ctxhub's count of the agent's context plus a hidden prefix of 1,000 tokens, so the
calibration is exact and every figure of the page can be worked out here."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from pydantic_ai.messages import ModelRequest, UserPromptPart

from ctxhub.governance.facts import message_facts
from ctxhub.governance.tokens import tokenizer_for
from tests.transcripts import lines
from transcripts import claude_code
from transcripts.importing import import_file
from transcripts.models import Transcript
from transcripts.reading import Compacted, Said, lines_from

pytestmark = pytest.mark.django_db

HIDDEN = 1_000
FRESH = 3
# Claude Sonnet 4.5 per million tokens, for requests under 200,000 tokens (genai-prices).
INPUT, READ, WRITE, OUTPUT = Decimal(3), Decimal("0.3"), Decimal("3.75"), Decimal(15)
SUMMARY = "This session is being continued. The cart total was off by one; fixed in cart.py."


def _conversation(spent: list[dict[str, int]]) -> str:
    """The session's lines, the nth response carrying ``spent[n]``."""
    read = lines.tool_use("t1", "Read", {"file_path": "cart.py"})
    return "".join(
        [
            lines.prompt("u1", None, 0, "The cart total is off by one, please fix it"),
            lines.answer("a1", "u1", 2, "m1", lines.text("Reading cart.py."), spent[0]),
            lines.answer("a2", "a1", 3, "m1", read, spent[0]),
            lines.result("u2", "a2", 4, "t1", "def total(items):\n    return sum(items) + 1\n"),
            lines.answer(
                "a3", "u2", 6, "m2", lines.text("Found it: a stray + 1. Fixed."), spent[1]
            ),
            lines.prompt("u3", "a3", 30, "Thanks. Now add a test for it"),
            lines.answer("a4", "u3", 33, "m3", lines.text("Added test_total_is_exact."), spent[2]),
            '{"parentUuid":null,"logicalParentUuid":"a4","isSidechain":false,"type":"system",'
            '"subtype":"compact_boundary","content":"Conversation compacted","sessionId":"'
            + lines.SESSION
            + '","uuid":"c1","timestamp":"2025-10-01T10:01:00.000Z",'
            '"compactMetadata":{"trigger":"manual","preTokens":900}}\n',
            lines.prompt("s1", "c1", 61, SUMMARY, isCompactSummary=True),
            lines.prompt("u4", "s1", 70, "Run the whole suite"),
            lines.answer("a5", "u4", 75, "m4", lines.text("All 212 tests pass."), spent[3]),
        ]
    )


def _counts(text: str) -> tuple[list[int], list[int], int]:
    """ctxhub's count of each message, the seq of each response, and of the summary."""
    reading = claude_code.read(list(lines_from(text.encode(), 0, 1)), lines.SESSION, {}, final=True)
    tokenizer = tokenizer_for(f"anthropic:{lines.MODEL}")
    units = reading.streams[lines.SESSION].units
    said = [unit for unit in units if isinstance(unit, Said)]
    [compaction] = [unit for unit in units if isinstance(unit, Compacted)]
    summary = message_facts(
        ModelRequest(parts=[UserPromptPart(compaction.summary)]), tokenizer
    ).tokens
    tokens = [message_facts(unit.view, tokenizer).tokens for unit in said]
    responses = [n for n, unit in enumerate(said) if unit.view.kind == "response"]
    return tokens, responses, summary


def _session(tmp_path: Path, owner: Any) -> tuple[Any, list[dict[str, int]], list[int], list[int]]:
    outputs = [12, 9, 8, 7]
    draft = _conversation([lines.usage(0, 1, n) for n in outputs])
    tokens, responses, summary = _counts(draft)
    # The agent's context for each response: everything before it, or, after the compaction
    # (before the fourth), the summary and what came after it.
    agent = [sum(tokens[:seq]) for seq in responses[:3]]
    agent.append(summary + sum(tokens[responses[2] + 1 : responses[3]]))
    spent = []
    for number, context in enumerate(agent):
        total = context + HIDDEN
        cached = 0 if number in (0, 3) else agent[number - 1] + HIDDEN
        spent.append(lines.usage(cached, total - cached - FRESH, outputs[number], FRESH))
    path = tmp_path / f"{lines.SESSION}.jsonl"
    path.write_text(_conversation(spent))
    import_file(path, owner)
    session = Transcript.objects.get(source=lines.SESSION).session
    return session, spent, tokens, responses


def _money(total: int, read: int, write: int, output: int) -> Decimal:
    fresh = total - read - write
    million = Decimal(1_000_000)
    return (fresh * INPUT + read * READ + write * WRITE + output * OUTPUT) / million


def _figures(html: str, testid: str) -> list[str]:
    row = re.search(rf'data-testid="{testid}">(.*?)</tr>', html, re.S)
    assert row is not None, testid
    return [
        re.sub(r"<[^>]+>", "", cell).strip()
        for cell in re.findall(r"<td[^>]*>(.*?)</td>", row[1], re.S)
    ]


def test_the_totals_are_those_worked_out_by_hand(tmp_path: Path, alice: Any) -> None:
    session, spent, tokens, responses = _session(tmp_path, alice)
    client = Client()
    client.force_login(alice)

    page = client.get(f"/imports/sessions/{session.pk}/")

    assert page.status_code == 200
    html = page.content.decode()
    # The agent, as it recorded each request.
    totals = [
        u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
        for u in spent
    ]
    reads = [u["cache_read_input_tokens"] for u in spent]
    writes = [u["cache_creation_input_tokens"] for u in spent]
    outputs = [u["output_tokens"] for u in spent]
    agent_money = sum(
        (_money(*row) for row in zip(totals, reads, writes, outputs, strict=True)), Decimal(0)
    )
    assert _figures(html, "what-if-agent") == [
        "4",
        f"{sum(totals):,}",
        f"{sum(reads):,}",
        f"{sum(writes):,}",
        f"{sum(outputs):,}",
        f"${agent_money:.4f}",
    ]
    # ctxhub, instead of the agent's compaction: every request carries the whole log before its
    # response (nothing here for the policy to act on), the hidden prefix calibrated back in;
    # the previous request is its prefix, read from the cache, the rest written.
    ours = [sum(tokens[:seq]) + HIDDEN for seq in responses]
    our_reads = [0] + [sum(tokens[:seq]) + HIDDEN for seq in responses[:-1]]
    our_writes = [total - read for total, read in zip(ours, our_reads, strict=True)]
    our_money = sum(
        (_money(*row) for row in zip(ours, our_reads, our_writes, outputs, strict=True)),
        Decimal(0),
    )
    assert _figures(html, "what-if-ctxhub") == [
        "4",
        f"{sum(ours):,}",
        f"{sum(our_reads):,}",
        f"{sum(our_writes):,}",
        f"{sum(outputs):,}",
        f"${our_money:.4f}",
    ]
    # The agent's compaction made its last request smaller than ctxhub's would have been.
    assert totals[3] < ours[3]
    saved = re.search(r'data-testid="what-if-saved"><strong>([^<]+)</strong>', html)
    assert saved is not None
    difference = agent_money - our_money
    assert saved[1] == (
        f"Saved ${difference:.4f}" if difference >= 0 else f"Would cost ${-difference:.4f} more"
    )
    assert html.count('data-testid="agent-compacted"') == 1
    assert "the agent compacted (manual)" in html


def test_over_the_agents_compactions_ctxhub_sends_what_the_agent_did(
    tmp_path: Path, alice: Any
) -> None:
    session, spent, _, _ = _session(tmp_path, alice)
    client = Client()
    client.force_login(alice)

    html = client.get(f"/imports/sessions/{session.pk}/?compactions=kept").content.decode()

    totals = [
        u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
        for u in spent
    ]
    figures = _figures(html, "what-if-ctxhub")
    assert figures[1] == f"{sum(totals):,}"
    assert "over the agent's own compactions" in html


def test_another_users_session_is_not_found(tmp_path: Path, alice: Any, bob: Any) -> None:
    session, *_ = _session(tmp_path, alice)
    client = Client()
    client.force_login(bob)
    assert client.get(f"/imports/sessions/{session.pk}/").status_code == 404
    assert client.get("/imports/saved/").content.decode().count(str(session.pk)) == 0
