"""The fidelity benchmark's measurement on small sessions, so it keeps running: every policy
governs a session to its end, the oracle reads what a request states (all of it when nothing is
hidden), and ten compactions chain. Its figures are the benchmark's to report, not asserted."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_fidelity as bench
from fidelity_sessions import EXPLICIT, IMPLICIT, SUPERSEDED, Fact, session, stated

SEED, TURNS = 3, 24


async def test_every_policy_governs_a_session_to_its_end_and_judges_every_fact() -> None:
    _, facts = session(SEED, turns=TURNS)
    figures = await bench.measure([SEED], turns=TURNS, window=16_000)
    assert list(figures) == ["window only", "masking", "compaction", "compaction + recall"]
    for name, f in figures.items():
        categories = {k: row for k, row in f.facts.items() if ":" not in k}
        assert sum(row[3] for row in categories.values()) == len(facts), name
        assert all(row[0] == row[1] + row[2] <= row[3] for row in f.facts.values()), name
        assert f.requests > TURNS
        assert f.weighted < bench.CACHE_WRITE * f.tokens, "the prompt cache serves some of it"
    assert figures["compaction"].compactions.get("summarized"), "compaction ran"
    assert not figures["masking"].compactions
    # A 16k window hides facts: the oracle does not find everything everywhere.
    assert figures["window only"].share(EXPLICIT) < 1
    # Only recall finds facts by its calls.
    assert sum(row[2] for row in figures["compaction"].facts.values()) == 0
    assert sum(row[2] for row in figures["compaction + recall"].facts.values()) > 0


async def test_with_a_window_that_holds_the_whole_session_every_fact_is_known() -> None:
    figures = await bench.measure([SEED], turns=TURNS, window=2_000_000)
    for name, f in figures.items():
        for category in (EXPLICIT, IMPLICIT, SUPERSEDED):
            row = f.facts[category]
            assert row[1] == row[3], (name, category, row)


FACT = Fact("restated", SUPERSEDED, "current release branch", ("release", "branch"), ("r/1", "r/2"))


def test_a_superseded_value_is_right_when_the_newest_reads_as_current() -> None:
    old, new = "The release branch is r/1.", "Update: the release branch is now r/2."

    def right(request: list[str]) -> bool:
        return bench.judge([FACT], request, None)[0].known

    assert right([old, new])
    assert right([f"{old}\n{new}"])
    assert right([new])
    assert not right([new, old]), "the older value reads as current"
    assert right([new, "Superseded: the release branch was r/1."])
    assert not right([old]), "the newest is not known"
    assert not right(["r/2 is merged"]), "a value without what it is says nothing"


def test_a_value_is_stated_only_with_the_words_saying_what_it_is() -> None:
    assert stated("STG_DB_HOST=10.1.2.3", "10.1.2.3", ("staging", "database", "host"))
    assert stated("stg:\n  db:\n    host: 10.1.2.3", "10.1.2.3", ("staging", "database", "host"))
    assert not stated("- identifier: 10.1.2.3", "10.1.2.3", ("staging", "database", "host"))
    assert not stated("STG_DB_HOST=10.1.2.35", "10.1.2.3", ("staging", "database", "host"))


async def test_ten_compactions_chain_and_their_ledger_is_read_back() -> None:
    chained = await bench.chain(SEED, turns=80, window=24_000)
    assert len(chained.outcomes) == bench.CHAIN
    assert chained.items > 0
    assert chained.kept + len(chained.lost) == chained.items
