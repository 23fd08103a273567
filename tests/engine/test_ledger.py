"""The fact ledger: what it extracts, from where, and how it completes a summary."""

from __future__ import annotations

from pydantic_ai.messages import ModelMessage

from ctxhub.governance.fact_patterns import FACTS_HEADING
from ctxhub.governance.ledger import (
    LedgerItem,
    contains,
    extract_ledger,
    reconcile,
)
from tests.messages import reply, tool_call, tool_result, user


def _by_kind(texts: list[tuple[str, str]], kind: str) -> list[str]:
    return [t for k, t in texts if k == kind]


def test_it_extracts_the_facts_people_lose() -> None:
    history = [
        user(
            "Fix src/app/views.py so port 8080 uses `DATABASE_URL`; see "
            "https://docs.example.com/db. Ask Maria Lopez, run `pytest -q tests/web`, "
            'and call the release "blue falcon".'
        ),
        tool_call("bash", id="c1", command="make deploy"),
        tool_result(
            "bash", "ok\nValueError: invalid literal for int() with base 10: 'abc'", id="c1"
        ),
        reply("I will edit ./config/settings.py next."),
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
    history = [
        tool_call("read", id="c"),
        tool_result("read", "see other/file.py and https://x.org", id="c"),
    ]
    assert extract_ledger(history).items == []


def test_reconcile_appends_only_what_the_summary_lacks() -> None:
    ledger = extract_ledger([user("Edit src/a.py and src/b.py on port 8080")])
    result = reconcile("## Goal\nEdit src/a.py", ledger)
    assert [i.text for i in result.kept_by_summarizer] == ["src/a.py"]
    assert {i.text for i in result.added_by_ledger} == {"src/b.py", "8080"}
    assert result.text.endswith(f"{FACTS_HEADING}\n- path: src/b.py\n- number: 8080")


def test_facts_of_an_earlier_summary_are_carried_over() -> None:
    first = reconcile("## Goal\nship", extract_ledger([user("Deploy to host db-7.internal:5432")]))
    again = extract_ledger([user(f"[Summary of 4 earlier messages]\n{first.text}")])
    assert {i.text for i in again.items} >= {i.text for i in first.added_by_ledger}


def _items(*messages: ModelMessage, max_items: int | None = None) -> list[tuple[str, str]]:
    return [(i.kind, i.text) for i in extract_ledger(messages, max_items=max_items).items]


def test_identifiers_a_user_types_in_passing_are_kept() -> None:
    items = _items(
        user(
            "By the way the outage hit db-west-3 and api-eu-1 in us-east-1 (OPS-1234, JIRA-77, "
            "CVE-2024-3094). We run v2.3.1, the candidate is 1.4.0-rc2 on python 3.12 and "
            "Postgres 16.2, the image is redis:7-alpine, the host db-7.internal:5432, mail "
            "ops-team@example.com; set env=prod and LOG_LEVEL=debug. Deploy to staging first, "
            "then production, on 2024-01-05."
        )
    )
    assert "2024-01-05" in _by_kind(items, "number")
    identifiers = _by_kind(items, "identifier")
    for fact in (
        "db-west-3",
        "api-eu-1",
        "us-east-1",
        "OPS-1234",
        "JIRA-77",
        "CVE-2024-3094",
        "v2.3.1",
        "1.4.0-rc2",
        "python 3.12",
        "Postgres 16.2",
        "redis:7-alpine",
        "db-7.internal:5432",
        "ops-team@example.com",
        "env=prod",
        "LOG_LEVEL=debug",
        "staging",
        "production",
    ):
        assert fact in identifiers, fact
    # Each fact once, whole: no truncated or nested copy of a longer one.
    for partial in ("CVE-2024", "prod", "3.12", "16.2", "5432", "LOG_LEVEL", "v2"):
        assert partial not in identifiers, partial
    assert not {"3.12", "16.2", "5432", "1.4.0"} & set(_by_kind(items, "number"))


def test_environments_are_facts_only_when_stated_as_environments() -> None:
    assert "staging" in _by_kind(_items(user("deploy to staging")), "identifier")
    assert "Production" in _by_kind(_items(user("Production is down again.")), "identifier")
    stated = _items(user("Reproduce it on the dev cluster, then in the test environment."))
    assert {"dev cluster", "test environment"} <= set(_by_kind(stated, "identifier"))
    plain = _items(user("I want to test the development of the new dashboard locally."))
    assert _by_kind(plain, "identifier") == []


def test_capitalised_paths_and_paths_at_the_start_of_a_sentence_are_kept() -> None:
    items = _items(
        user(
            "Makefile is broken. Dockerfile too. Config/settings.yaml is wrong. Also check "
            "README.md, Docs/Setup.md, src/App.tsx, Jenkinsfile, LICENSE, .env, "
            "C:\\Work\\App.tsx and .pre-commit-config.yaml"
        )
    )
    paths = _by_kind(items, "path")
    for path in (
        "Makefile",
        "Dockerfile",
        "Config/settings.yaml",
        "README.md",
        "Docs/Setup.md",
        "src/App.tsx",
        "Jenkinsfile",
        "LICENSE",
        ".env",
        ".pre-commit-config.yaml",
        "C:\\Work\\App.tsx",
    ):
        assert path in paths, path
    assert "App.tsx" not in paths  # the file of the Windows path is not a path of its own
    # No pseudo-name made of a path's pieces.
    assert _by_kind(items, "name") == []


def test_every_path_an_agent_acted_on_is_kept() -> None:
    items = _items(
        tool_call("read_file", id="c1", path="Makefile"),
        tool_call("edit_file", id="c2", file_path="Docs/Setup.md", old_string="a", new_string="b"),
        tool_call("read_many", id="c3", files=["Dockerfile", "src/App.tsx"]),
        tool_call(
            "move", id="c4", old_path="Config/settings.yaml", new_path="Config/Settings.yaml"
        ),
        tool_call("multi_edit", id="c5", edits=[{"path": "README.md", "text": "x"}]),
        tool_call("bash", id="c6", command="make -f Makefile.ci lint && cat Dockerfile.prod"),
        tool_call("notebook", id="c7", notebook_path="Analysis.ipynb"),
    )
    paths = _by_kind(items, "path")
    for path in (
        "Makefile",
        "Docs/Setup.md",
        "Dockerfile",
        "src/App.tsx",
        "Config/settings.yaml",
        "Config/Settings.yaml",
        "README.md",
        "Makefile.ci",
        "Dockerfile.prod",
        "Analysis.ipynb",
    ):
        assert path in paths, path
    assert "make -f Makefile.ci lint && cat Dockerfile.prod" in _by_kind(items, "command")


def test_names_are_verbatim_runs_of_capitalised_words() -> None:
    items = _items(user("Ask Maria Lopez, Priya and Tom. The review goes to Grace Hopper Labs."))
    assert _by_kind(items, "name") == ["Maria Lopez", "Priya", "Tom", "Grace Hopper Labs"]


def test_ordinary_prose_gives_no_identifiers_and_no_paths() -> None:
    prose = (
        "Profile pages load slowly. Thanks for the well-known, state-of-the-art follow-up, "
        "e.g. the re-run of the nightly job and/or the read/write checks; it's up-to-date. "
        "We want to test the new approach during development, then ship it to the team in "
        "the 2nd week of the 3-day sprint. Which of these should come first? I'd rather "
        "keep it simple, i.e. one change at a time... Set it up and make it work."
    )
    for message in (user(prose), reply(prose)):
        items = _items(message)
        assert _by_kind(items, "identifier") == [], items
        assert _by_kind(items, "path") == [], items
        assert _by_kind(items, "command") == [], items
        assert _by_kind(items, "url") == [], items


def test_the_cap_keeps_user_facts_and_acted_on_paths() -> None:
    history: list[ModelMessage] = [
        user("Fix Config/settings.yaml for db-west-3 (OPS-1234)."),
        tool_call("edit_file", id="e", path="Makefile"),
        tool_result("edit_file", "ok", id="e"),
    ]
    for n in range(20):
        history += [
            reply(f"Next I look at `helper_{n}` in pkg/mod_{n}.py."),
            tool_call("bash", id=f"b{n}", command=f"make check-{n}"),
            tool_result("bash", f"ok\nValueError: bad record {n}", id=f"b{n}"),
        ]
    everything = extract_ledger(history)
    capped = extract_ledger(history, max_items=6)
    kept = [(i.kind, i.text) for i in capped.items]
    assert len(kept) == 6
    assert capped.omitted == len(everything) - 6
    for fact in (
        ("path", "Config/settings.yaml"),
        ("identifier", "db-west-3"),
        ("identifier", "OPS-1234"),
        ("path", "Makefile"),
    ):
        assert fact in kept, fact
    # The rest of the room goes to the agent's newest paths before any old tool error.
    assert ("path", "pkg/mod_19.py") in kept
    assert _by_kind(kept, "error") == []


def test_when_the_cap_must_drop_user_facts_it_drops_the_lower_value_kinds_first() -> None:
    history = [user("Ask Maria Lopez to fix Config/settings.yaml on db-west-3 at port 8080.")]
    capped = extract_ledger(history, max_items=2)
    assert [(i.kind, i.text) for i in capped.items] == [
        ("path", "Config/settings.yaml"),
        ("identifier", "db-west-3"),
    ]
    assert capped.omitted == 2


def test_a_fact_is_kept_by_a_summary_only_when_stated_as_a_whole() -> None:
    summary = "Checked db-west-30 for OPS-12345; production-like setup on port 18080. See Makefile."
    for text, kind in (("db-west-3", "identifier"), ("OPS-1234", "identifier"), ("8080", "number")):
        assert not contains(summary, LedgerItem(kind=kind, text=text)), text  # type: ignore[arg-type]
    assert contains(summary, LedgerItem(kind="path", text="Makefile"))
    assert contains("ask Maria\n  Lopez", LedgerItem(kind="name", text="Maria Lopez"))
    ledger = extract_ledger([user("deploy db-west-3 to staging for OPS-1234 on port 8080")])
    added = {i.text for i in reconcile(summary, ledger).added_by_ledger}
    assert {"db-west-3", "staging", "OPS-1234", "8080"} <= added
