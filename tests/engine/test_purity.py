"""The engine is a library: no Django, no Celery, JSON-ready reports, provider-valid output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine_builders import MODEL, _tight
from pydantic_ai.messages import ModelMessagesTypeAdapter

from ctxhub.governance import ContextReport, govern
from ctxhub.governance.steps.truncate import truncate_text
from ctxhub.governance.tokens import APPROXIMATE_FALLBACK, Tokenizer
from tests.messages import reply, tool_call, tool_result, user, words

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_engine_imports_neither_django_nor_celery() -> None:
    code = (
        "import sys, ctxhub.governance\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'celery'})\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def _governed():  # type: ignore[no-untyped-def]
    history = [
        user("go", system="sys"),
        tool_call("read", id="c1"),
        tool_result("read", words(3000), id="c1"),
    ]
    history += [reply("ok"), user("more"), tool_call("read", id="c2")]
    return govern(history, _tight(2000, tool_output={"limit": 100}), model=MODEL)


def test_governed_output_round_trips_through_the_type_adapter() -> None:
    governed = _governed()
    data = ModelMessagesTypeAdapter.dump_json(governed.messages)
    assert ModelMessagesTypeAdapter.validate_json(data) == governed.messages


def test_the_report_serialises_to_json_and_back() -> None:
    report = _governed().report
    data = json.loads(report.model_dump_json())
    assert data["budget_tokens"] == report.budget_tokens
    assert {m["zone"] for m in data["messages"]} <= {"head", "middle", "tail", "pinned"}
    assert ContextReport.model_validate(data) == report


def test_governing_is_deterministic() -> None:
    first, second = _governed(), _governed()
    assert first.messages == second.messages
    assert first.report == second.report


def test_bytes_over_four_fallback_counts_and_truncates() -> None:
    fallback = Tokenizer(APPROXIMATE_FALLBACK, exact=False)
    assert fallback.count("x" * 400) == 100
    cut = truncate_text("y" * 4000, 100, unit="tokens", strategy="head", tokenizer=fallback)
    assert cut is not None
    assert fallback.count(cut) <= 100
