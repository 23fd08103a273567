"""Recall in-process: the model finds what governance hid from it, in one call."""

from __future__ import annotations

from itertools import pairwise

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxhub.governance import ContextGovernor, Policy, govern
from ctxhub.governance.recall import (
    PIECE_CHARS,
    Piece,
    excerpt,
    fate_of,
    hidden,
    pieces,
    query_terms,
    rank,
    search_history,
    split,
)
from ctxhub.governance.recall_terms import added_terms
from tests.recall_session import planted_session, settings_session

MODEL = "openai:gpt-4o"


def test_facts_hidden_by_masking_and_the_window_are_found_in_one_call() -> None:
    history, facts = planted_session()
    governed = govern(history, Policy(context_window=32_000), model=MODEL)
    dropped, parts = hidden(governed.report, lambda position: position)
    assert set(dropped.values()) == {"dropped"}
    assert set(parts.values()) == {"masked"}

    def fate(piece: Piece) -> str | None:
        return fate_of(piece, dropped, parts)

    hid = [f for f in facts if f.seq in dropped or (f.seq, 0) in parts]
    assert len(hid) >= 200, "the generated session must hide at least 200 planted facts"
    sent = "".join(str(m) for m in governed.messages)
    assert not any(f.value in sent for f in hid), "a hidden fact is still sent"

    found = [
        f
        for f in hid
        if any(f.value in h.excerpt for h in search_history(history, fate, f.query, 5))
    ]
    assert len(found) / len(hid) >= 0.95, f"found {len(found)} of {len(hid)}"


def test_settings_a_file_names_only_by_their_keys_are_found_by_the_words_a_model_asks_with() -> (
    None
):
    history, settings = settings_session()
    governed = govern(history, Policy(context_window=16_000), model=MODEL)
    dropped, parts = hidden(governed.report, lambda position: position)

    def fate(piece: Piece) -> str | None:
        return fate_of(piece, dropped, parts)

    hid = [s for s in settings if s.seq in dropped or (s.seq, 0) in parts]
    assert len(hid) >= 50, "the generated session must hide at least 50 settings"
    assert {s.spelling for s in hid} == {"env", "json", "yaml", "dotted"}
    # "staging database host" for STG_DB_HOST=…, "stgDbHost", stg: db: host: and stg.db.host.
    found = [
        s
        for s in hid
        if any(s.value in h.excerpt for h in search_history(history, fate, s.query, 5))
    ]
    assert len(found) / len(hid) >= 0.95, f"found {len(found)} of {len(hid)}"


def test_identifiers_are_searched_by_their_words_and_abbreviations_by_what_they_stand_for() -> None:
    assert added_terms("STAGING_DB_HOST=db-stg-4.internal").split() == [
        "staging",
        "database",
        "host",
        "database",
        "staging",
    ]
    assert added_terms('"stagingDatabaseHost": 1, HTTPServer').split() == [
        "staging",
        "database",
        "host",
        "http",
        "server",
    ]
    assert added_terms("cfg.payments.retry_limit, the repo's pwd") == (
        "config retry limit repository password"
    )
    # Timestamps are not identifiers, and words with more than one common reading stay as
    # they are.
    assert added_terms("2026-11-05T05:00 took 30 ms, min 2 sec, auth ok") == ""
    # A query's abbreviation is searched by what it stands for (every text holding it holds
    # that too); an identifier in a query by itself and by its words.
    assert query_terms("the staging db host") == ["staging", "database", "host"]
    assert query_terms("STAGING_DB_HOST") == ["staging_db_host", "staging", "database", "host"]
    assert query_terms("stagingDbHost") == ["stagingdbhost", "staging", "database", "host"]


def test_a_passage_naming_the_query_together_outranks_one_naming_its_words_apart() -> None:
    noise = "\n".join(f"2026-11-0{n}T00:00 listening port check {n} passed" for n in range(1, 9))
    apart = Piece(1, 0, 0, "tool output", "read_file", f"dev tools\n{noise}\nrepo: clean\n{noise}")
    together = Piece(2, 0, 0, "tool output", "read_file", f"{noise}\ndev:\n  repo:\n    port: 2243")
    others = [Piece(n, 0, 0, "tool output", "read_file", noise) for n in range(3, 12)]
    ranked = rank([apart, together, *others], query_terms("development repository port"), 2)
    assert [p.seq for p in ranked] == [2, 1]


def test_hostile_queries_find_nothing_and_break_nothing_in_memory() -> None:
    history, _ = settings_session(settings=20)
    governed = govern(history, Policy(context_window=12_000), model=MODEL)
    dropped, parts = hidden(governed.report, lambda position: position)
    for query in (
        "",
        "!!! ::: &&& |||",
        "(((( [[ \\ .* $ ^",
        "' OR 1=1 --",
        "\x00\ud800 nul and surrogate",
        "the of and",
        "x" * 5_000,
        "aB" * 2_000,
        "_" * 1_000,
    ):
        search_history(history, lambda p: fate_of(p, dropped, parts), query, 5)
    assert search_history(history, lambda p: fate_of(p, dropped, parts), "!!! :::", 5) == []


def test_what_is_sent_in_full_is_not_searched() -> None:
    history, facts = planted_session(facts=10)
    governed = govern(history, Policy(context_window=1_000_000), model=MODEL)
    dropped, parts = hidden(governed.report, lambda position: position)
    assert dropped == {}
    assert parts == {}
    hits = search_history(history, lambda p: fate_of(p, dropped, parts), facts[0].query, 5)
    assert hits == []


def test_a_long_output_is_searched_in_overlapping_pieces_each_sentence_whole_in_one() -> None:
    sentences = [f"Sentence {i} names the token zx{i:05d} once." for i in range(800)]
    text = " ".join(sentences)
    cut = list(split(text))
    assert len(cut) > len(text) // PIECE_CHARS - 1
    assert cut[0][0] == 0
    for (start, piece), (after, _) in pairwise(cut):
        assert after > start
        assert text[start : start + len(piece)] == piece
        assert start + len(piece) > after, "pieces overlap"
    for sentence in sentences:
        assert any(sentence in piece for _, piece in cut), sentence


def test_an_excerpt_centres_on_the_words_asked_for() -> None:
    filler = "nothing to see here " * 200
    text = f"{filler}The vault code of Orbital is QQ7781. {filler}"
    cut = excerpt(text, query_terms("vault code Orbital"))
    assert "QQ7781" in cut
    assert len(cut) < 700
    assert cut.startswith("…")
    assert cut.endswith("…")


def test_parts_are_searched_by_kind_system_prompts_left_out() -> None:
    request = ModelRequest(parts=[UserPromptPart("where is the key")])
    call = ModelResponse(parts=[ToolCallPart("grep", {"pattern": "secret_key"}, "c1")])
    output = ModelRequest(parts=[ToolReturnPart("grep", {"matches": ["a.py:3"]}, "c1")])
    found = [
        (p.seq, p.kind, p.tool_name, p.text)
        for seq, m in enumerate([request, call, output])
        for p in pieces(seq, m)
    ]
    assert found == [
        (0, "user", None, "where is the key"),
        (1, "tool call", "grep", 'grep({"pattern": "secret_key"})'),
        (2, "tool output", "grep", '{"matches": ["a.py:3"]}'),
    ]


def test_the_window_notice_names_the_tool_and_says_nothing_when_recall_is_off() -> None:
    history, _ = planted_session(facts=60)
    on = govern(history, Policy(context_window=16_000), model=MODEL)
    off = govern(history, Policy(context_window=16_000, awareness={"recall": False}), model=MODEL)
    named = Policy(context_window=16_000, awareness={"recall_tool_name": "search_past"})
    renamed = govern(history, named, model=MODEL)
    assert "older messages omitted] Search what is no longer shown with recall(query)." in str(
        on.messages
    )
    assert "search_past(query)" in str(renamed.messages)
    assert "recall(query)" not in str(off.messages)


def _long_run_model(queries: list[str], answers: list[str], sent: list[str]) -> FunctionModel:
    """A model that reads 30 files, then recalls each query, then answers. It counts its own
    calls: what it is sent is governed, older outputs masked or dropped."""
    calls = iter(
        [ToolCallPart("read_file", {"n": n}, f"r{n}") for n in range(30)]
        + [ToolCallPart("recall", {"query": q}, f"q{i}") for i, q in enumerate(queries)]
    )

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart) and part.tool_name == "recall":
                answers.append(f"{part.content}")
        sent.append(str(messages))
        call = next(calls, None)
        return ModelResponse(parts=[call if call else TextPart("done")])

    return FunctionModel(respond, profile={"context_window": 12_000})


async def test_an_agent_recalls_outputs_its_governor_hid() -> None:
    _, facts = planted_session(facts=3)
    planted = dict(zip((3, 5, 7), facts, strict=True))
    answers: list[str] = []
    sent: list[str] = []
    agent = Agent(
        _long_run_model([fact.query for fact in facts], answers, sent),
        capabilities=[ContextGovernor(Policy(reserved_output_tokens=1_000))],
    )

    @agent.tool_plain
    def read_file(n: int) -> str:
        fact = planted.get(n)
        return "line\n" * 80 + (fact.sentence if fact else "") + " filler" * 300

    await agent.run("read the files, then find the three facts")
    assert len(answers) == 3
    # All three were hidden from the request that first called recall.
    assert not [fact.value for fact in facts if fact.value in sent[30]]
    for fact, answered in zip(facts, answers, strict=True):
        assert fact.value in answered, answered
        assert "(masked)" in answered or "(dropped)" in answered


async def test_the_agent_has_no_recall_tool_when_the_policy_leaves_it_out() -> None:
    seen: list[list[str]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(sorted(t.name for t in info.function_tools))
        return ModelResponse(parts=[TextPart("ok")])

    for policy in (Policy(), Policy(awareness={"recall": False})):
        agent = Agent(FunctionModel(respond), capabilities=[ContextGovernor(policy)])
        await agent.run("hi")
    assert seen == [["read_evicted_output", "recall"], ["read_evicted_output"]]
