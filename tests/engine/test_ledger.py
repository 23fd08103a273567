"""The fact ledger: what it extracts, from where, and how it completes a summary."""

from __future__ import annotations

from engine_builders import _call, _ret, _text, _user

from ctxhub.governance.ledger import FACTS_HEADING, extract_ledger, reconcile


def _by_kind(texts: list[tuple[str, str]], kind: str) -> list[str]:
    return [t for k, t in texts if k == kind]


def test_it_extracts_the_facts_people_lose() -> None:
    history = [
        _user(
            "Fix src/app/views.py so port 8080 uses `DATABASE_URL`; see "
            "https://docs.example.com/db. Ask Maria Lopez, run `pytest -q tests/web`, "
            'and call the release "blue falcon".'
        ),
        _call("bash", id="c1", command="make deploy"),
        _ret("bash", "ok\nValueError: invalid literal for int() with base 10: 'abc'", id="c1"),
        _text("I will edit ./config/settings.py next."),
    ]
    items = [(i.kind, i.text) for i in extract_ledger(history).items]
    assert "src/app/views.py" in _by_kind(items, "path")
    assert "./config/settings.py" in _by_kind(items, "path")
    assert "https://docs.example.com/db" in _by_kind(items, "url")
    assert "DATABASE_URL" in _by_kind(items, "identifier")
    assert {"pytest -q tests/web", "make deploy"} <= set(_by_kind(items, "command"))
    assert "8080" in _by_kind(items, "number")
    assert {"Maria Lopez", "blue falcon"} <= set(_by_kind(items, "name"))
    assert _by_kind(items, "error") == ["ValueError: invalid literal for int() with base 10: 'abc'"]


def test_tool_outputs_give_only_their_errors() -> None:
    history = [_call("read", id="c"), _ret("read", "see other/file.py and https://x.org", id="c")]
    assert extract_ledger(history).items == []


def test_reconcile_appends_only_what_the_summary_lacks() -> None:
    ledger = extract_ledger([_user("Edit src/a.py and src/b.py on port 8080")])
    result = reconcile("## Goal\nEdit src/a.py", ledger)
    assert [i.text for i in result.kept_by_summarizer] == ["src/a.py"]
    assert {i.text for i in result.added_by_ledger} == {"src/b.py", "8080"}
    assert result.text.endswith(f"{FACTS_HEADING}\n- path: src/b.py\n- number: 8080")


def test_facts_of_an_earlier_summary_are_carried_over() -> None:
    first = reconcile("## Goal\nship", extract_ledger([_user("Deploy to host db-7.internal:5432")]))
    again = extract_ledger([_user(f"[Summary of 4 earlier messages]\n{first.text}")])
    assert {i.text for i in again.items} >= {i.text for i in first.added_by_ledger}
