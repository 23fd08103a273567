"""Fidelity benchmark: what a model can still know at the end of a long session.

Generated long agentic sessions (``fidelity_sessions.py``) with planted facts — explicit (a
user's constraint, an identifier, a number, a path, a decision), implicit (a setting only a
configuration file states) and superseded (a value replaced later by a newer one) — are governed
request after request, as an agent's or the hub's ``Governor`` governs them, under four
policies:

* **window only**: the sliding window, no masking, no deduplication;
* **masking**: the default policy (masking over the budget, then the window);
* **compaction**: the default policy, and the session compacted with the offline extractive
  summariser whenever its history passes the soft threshold (``compaction.soft_threshold`` of
  the history budget), as the hub compacts a stored session in the background; after three
  compactions in a row that leave it above the threshold (refused, or not small enough), no
  more, as the hub stops;
* **compaction + recall**: the same, and the model has the ``recall`` tool.

What the model can know at the end is read from the last request: a fact is known when its
value stands in what the request carries with the words that say what it is (its subject)
beside it, as it was stated; with recall, also when one ``recall`` call asking for its topic in
a model's words ("staging database host", never the value) answers with it so. A superseded
fact is right when its newest value is known and no older one reads as current: an older value
the request states after the newest (or without it) counts as current unless marked superseded
on its line; recall's passages carry message numbers, so among them the newest wins. The model
is simulated: it knows what its last request says, plus one recall answer per fact.

Beside it, what each policy sends: every request's tokens, and its cost weighted as a provider
with a prompt cache bills it (the unchanged leading messages at ``CACHE_READ``, the rest at
``CACHE_WRITE``, as ``bench_prefix.py``). And the chain: ten compactions in a row, each after
the history passed the soft threshold again, and the share of the ledger items of all ten that
the final history still states.

Run from the repository root:  .venv/bin/python benchmarks/bench_fidelity.py [--check]
The table is printed as markdown; the figures are written to benchmarks/results/fidelity.json.
``--check`` exits 1 when a target of compaction + recall, or of the chain, is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity_sessions import EXPLICIT, IMPLICIT, SUPERSEDED, Fact, session, stated, texts
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest

from ctxhub.governance import CompactionReport, Governed, Governor, Policy, compact
from ctxhub.governance.actions import CACHE_READ, CACHE_WRITE
from ctxhub.governance.counting import message_tokens
from ctxhub.governance.ledger import contains
from ctxhub.governance.recall import Hit, Piece, fate_of, hidden, search_history
from ctxhub.governance.tokens import tokenizer_for

MODEL = "openai:gpt-4o"
WINDOW = 32_000
SEEDS = (1, 2, 3, 4)
CHAIN_SEED = 101
CHAIN_TURNS = 200
"""Turns of the chain's session: more than ten compactions need."""
SUMMARIZER = "offline:extractive"
RUNAWAY_RUNS = 3
"""Compactions in a row that leave the history above the soft threshold before the session is
compacted no more (the hub's ``auto_compaction.RUNAWAY_RUNS``)."""
CHAIN = 10
SUMMARISED = ("summarized", "fallback")
SUPERSEDED_MARK = re.compile(r"supersed|replaced|outdated|no longer|previously|formerly", re.I)
"""What marks an older value on its line as no longer current."""
TARGETS = {EXPLICIT: 0.95, IMPLICIT: 0.85, SUPERSEDED: 0.95, "chain": 0.99}


@dataclass(frozen=True)
class Arm:
    """A policy compared: how it governs, whether it compacts, whether the model recalls."""

    name: str
    policy: Policy
    compacts: bool
    recalls: bool


def arms(window: int) -> list[Arm]:
    """The four policies compared."""

    def policy(**changes: object) -> Policy:
        return Policy.model_validate({"context_window": window, **changes})

    quiet = {"awareness": {"recall": False}}  # no recall tool, and no notice naming it
    return [
        Arm(
            "window only",
            policy(masking={"apply": "never"}, dedupe={"enabled": False}, **quiet),
            compacts=False,
            recalls=False,
        ),
        Arm("masking", policy(**quiet), compacts=False, recalls=False),
        Arm("compaction", policy(**quiet), compacts=True, recalls=False),
        Arm("compaction + recall", policy(), compacts=True, recalls=True),
    ]


@dataclass
class Run:
    """A session governed to its end under one policy."""

    tokens: list[int] = field(default_factory=list)
    """Tokens of every request sent."""
    cached: list[int] = field(default_factory=list)
    """Tokens of each request's leading messages sent unchanged by the request before."""
    compactions: list[str] = field(default_factory=list)
    """The outcome of each compaction."""
    stopped: bool = False
    """Compactions stopped after ``RUNAWAY_RUNS`` in a row left the history above the soft
    threshold."""
    summarised_tokens: int = 0
    """Tokens the summaries stood for when written: what a model summariser reads at least."""


def history_tokens(governed: Governed) -> int:
    return governed.tokens_before - governed.system_tokens


def threshold(governed: Governed, policy: Policy) -> float:
    return policy.compaction.soft_threshold * governed.budget_tokens


async def govern_session(
    history: Sequence[ModelMessage], arm: Arm
) -> tuple[Run, list[ModelMessage], Governed]:
    """Every request of the session governed in turn by one ``Governor``, compacted where the
    arm compacts; the run's figures, the history as it stands at the end (compactions applied)
    and the last request."""
    governor = Governor(arm.policy, model=MODEL)
    tokenizer = tokenizer_for(MODEL)
    run = Run()
    effective: list[ModelMessage] = []
    previous: list[bytes] = []
    dumped: dict[int, tuple[ModelMessage, bytes]] = {}  # a message sent again is the same object

    def dump(message: ModelMessage) -> bytes:
        if id(message) not in dumped:
            dumped[id(message)] = (message, ModelMessagesTypeAdapter.dump_json([message]))
        return dumped[id(message)][1]

    ineffective = 0
    governed: Governed | None = None
    for message in history:
        effective.append(message)
        if not isinstance(message, ModelRequest):
            continue  # a model request follows a user prompt or tool results
        governed = governor.govern(effective)
        due = history_tokens(governed) >= threshold(governed, arm.policy)
        if arm.compacts and due and ineffective < RUNAWAY_RUNS:
            compacted = await compact(effective, arm.policy, summarizer=SUMMARIZER, model=MODEL)
            report = compacted.report
            run.compactions.append(report.outcome)
            if report.outcome in SUMMARISED:
                run.summarised_tokens += report.replaced_tokens
                effective = list(compacted.messages)
                governed = governor.govern(effective)
            still = history_tokens(governed) >= threshold(governed, arm.policy)
            ineffective = ineffective + 1 if report.outcome not in SUMMARISED or still else 0
            run.stopped = ineffective >= RUNAWAY_RUNS
        sent = [dump(m) for m in governed.messages]
        counts = [message_tokens(m, tokenizer) for m in governed.messages]
        same = 0
        while same < min(len(sent), len(previous)) and sent[same] == previous[same]:
            same += 1
        run.tokens.append(sum(counts))
        run.cached.append(sum(counts[:same]))
        previous = sent
    assert governed is not None, "a session ends with a request"
    return run, effective, governed


def recall_search(
    history: Sequence[ModelMessage], effective: Sequence[ModelMessage], governed: Governed
) -> Callable[[str], list[Hit]]:
    """The ``recall`` tool at the end, answering as ``ContextGovernor`` answers: over the
    session's messages the last request did not carry in full (a summary stood for them, the
    window dropped them, masking hid them)."""
    numbers = {id(message): n for n, message in enumerate(history)}
    positions = [numbers.get(id(message)) for message in effective]
    dropped, parts = hidden(governed.report, lambda position: positions[position])
    held = set(positions)

    def fate(piece: Piece) -> str | None:
        if piece.seq not in held:
            return "summarised"
        return fate_of(piece, dropped, parts)

    return lambda query: search_history(history, fate, query, 5)


@dataclass
class Verdict:
    fact: Fact
    in_request: bool
    by_recall: bool
    """Known only through its recall answer."""

    @property
    def known(self) -> bool:
        return self.in_request or self.by_recall


def judge(
    facts: Sequence[Fact], request: Sequence[str], recall: Callable[[str], list[Hit]] | None
) -> list[Verdict]:
    """What the model can know of each fact from the texts of its last ``request`` (in order)
    and, given ``recall``, one recall answer per fact."""
    verdicts = []
    for fact in facts:
        where = {v: _statements(request, v, fact) for v in fact.values}
        newest = where[fact.value]
        # The model asks for what its request does not tell it.
        hits = recall(fact.query) if recall is not None and not newest else []
        recalled = any(stated(h.excerpt, fact.value, fact.subject) for h in hits)
        if fact.category == SUPERSEDED:
            last = max(newest, default=None)
            current = [
                at
                for value in fact.values[:-1]
                for at in where[value]
                if (last is None or at > last) and not _marked(request, at)
            ]
            right = bool(newest or recalled) and not current
            verdicts.append(Verdict(fact, right and bool(newest), right and not newest))
        else:
            verdicts.append(Verdict(fact, bool(newest), not newest and recalled))
    return verdicts


def _statements(request: Sequence[str], value: str, fact: Fact) -> list[tuple[int, int]]:
    """Where the request states ``value`` of ``fact``: (text number, offset), in order."""
    return [(n, at) for n, text in enumerate(request) for at in stated(text, value, fact.subject)]


def _marked(request: Sequence[str], at: tuple[int, int]) -> bool:
    """Whether the line of the value stated at ``at`` marks it as no longer current."""
    text = request[at[0]]
    start = text.rfind("\n", 0, at[1]) + 1
    end = text.find("\n", at[1])
    return SUPERSEDED_MARK.search(text[start : end if end >= 0 else len(text)]) is not None


@dataclass
class Figures:
    """One policy over every session."""

    facts: dict[str, list[int]] = field(default_factory=dict)
    """Category (and kind) → [known, in the request, by recall, total]."""
    requests: int = 0
    tokens: int = 0
    weighted: float = 0.0
    final_tokens: list[int] = field(default_factory=list)
    compactions: dict[str, int] = field(default_factory=dict)
    """Compactions by outcome."""
    stopped: int = 0
    summarised_tokens: int = 0
    seconds: float = 0.0

    def add(self, run: Run, verdicts: list[Verdict]) -> None:
        for verdict in verdicts:
            for key in (verdict.fact.category, f"{verdict.fact.category}: {verdict.fact.kind}"):
                row = self.facts.setdefault(key, [0, 0, 0, 0])
                row[0] += verdict.known
                row[1] += verdict.in_request
                row[2] += verdict.by_recall
                row[3] += 1
        self.requests += len(run.tokens)
        self.tokens += sum(run.tokens)
        self.weighted += sum(
            CACHE_READ * cached + CACHE_WRITE * (tokens - cached)
            for tokens, cached in zip(run.tokens, run.cached, strict=True)
        )
        self.final_tokens.append(run.tokens[-1])
        for outcome in run.compactions:
            self.compactions[outcome] = self.compactions.get(outcome, 0) + 1
        self.stopped += run.stopped
        self.summarised_tokens += run.summarised_tokens

    def share(self, key: str) -> float:
        known, _, _, total = self.facts.get(key, [0, 0, 0, 0])
        return known / total if total else 1.0


async def measure(seeds: Sequence[int], *, turns: int, window: int) -> dict[str, Figures]:
    """Every session governed under every policy, and what the model knows at the end."""
    figures = {arm.name: Figures() for arm in arms(window)}
    for seed in seeds:
        history, facts = session(seed, turns=turns)
        for arm in arms(window):
            started = time.perf_counter()
            run, effective, governed = await govern_session(history, arm)
            search = recall_search(history, effective, governed) if arm.recalls else None
            request = list(texts(governed.messages))
            figures[arm.name].add(run, judge(facts, request, search))
            figures[arm.name].seconds += time.perf_counter() - started
    return figures


@dataclass
class Chain:
    outcomes: list[str]
    items: int
    """Distinct ledger items of the compactions that summarised."""
    kept: int
    """Of those, the ones the final history states."""
    lost: list[str]

    @property
    def share(self) -> float:
        return self.kept / self.items if self.items else 1.0


async def chain(seed: int, *, turns: int, window: int) -> Chain:
    """``CHAIN`` compactions in a row, each once the history (compacted so far, with the
    session's next messages appended) passed the soft threshold again; what the final history
    still states of every ledger item they listed."""
    history, _ = session(seed, turns=turns)
    policy = Policy(context_window=window)
    tokenizer = tokenizer_for(MODEL)
    governed = Governor(policy, model=MODEL).govern(history[:1])
    limit = threshold(governed, policy)
    upcoming = iter(history)
    effective: list[ModelMessage] = []
    reports: list[CompactionReport] = []
    for _ in range(CHAIN):
        tokens = sum(message_tokens(m, tokenizer) for m in effective)
        while tokens < limit or not isinstance(effective[-1], ModelRequest):
            message = next(upcoming, None)
            if message is None:
                raise ValueError(f"{turns} turns are too few for {CHAIN} compactions")
            effective.append(message)
            tokens += message_tokens(message, tokenizer)
        compacted = await compact(effective, policy, summarizer=SUMMARIZER, model=MODEL)
        reports.append(compacted.report)
        effective = list(compacted.messages)
    final = "\n".join(texts(effective))
    items = {
        item.text: item
        for report in reports
        if report.outcome in SUMMARISED
        for item in report.ledger
    }
    lost = [text for text, item in items.items() if not contains(final, item)]
    return Chain([r.outcome for r in reports], len(items), len(items) - len(lost), lost)


def _percent(row: list[int], column: int = 0) -> str:
    return f"{row[column] / row[3]:.0%} ({row[column]}/{row[3]})" if row[3] else "—"


def table(figures: dict[str, Figures], chained: Chain) -> str:
    lines = [
        "| policy | explicit | implicit | superseded right | by recall | requests "
        "| tokens sent | cache-weighted | vs uncached | final request (mean) | compactions "
        "| tokens summarised |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, f in figures.items():
        rows = {c: f.facts.get(c, [0, 0, 0, 0]) for c in (EXPLICIT, IMPLICIT, SUPERSEDED)}
        recalled = sum(row[2] for row in rows.values())
        total = sum(row[3] for row in rows.values())
        outcomes = ", ".join(f"{n} {o}" for o, n in sorted(f.compactions.items())) or "—"
        if f.stopped:
            outcomes += f"; stopped in {f.stopped} sessions"
        lines.append(
            f"| {name} | {_percent(rows[EXPLICIT])} | {_percent(rows[IMPLICIT])} "
            f"| {_percent(rows[SUPERSEDED])} | {recalled}/{total} | {f.requests} "
            f"| {f.tokens:,} | {f.weighted:,.0f} | {f.weighted / f.tokens:.2f}x "
            f"| {sum(f.final_tokens) / len(f.final_tokens):,.0f} | {outcomes} "
            f"| {f.summarised_tokens:,} |"
        )
    kinds = sorted({k for f in figures.values() for k in f.facts if ":" in k})
    lines += ["", "| kind | " + " | ".join(figures) + " |", "|---" * (len(figures) + 1) + "|"]
    for kind in kinds:
        cells = " | ".join(_percent(f.facts.get(kind, [0, 0, 0, 0])) for f in figures.values())
        lines.append(f"| {kind} | {cells} |")
    outcomes = ", ".join(f"{n} {o}" for o, n in sorted(Counter(chained.outcomes).items()))
    lines += [
        "",
        f"{CHAIN} chained compactions ({outcomes}): {chained.share:.1%} of ledger items "
        f"kept ({chained.kept}/{chained.items})",
    ]
    return "\n".join(lines)


def missed(figures: dict[str, Figures], chained: Chain) -> list[str]:
    """The targets compaction + recall and the chain miss."""
    best = figures["compaction + recall"]
    found = [
        f"compaction + recall: {category} {best.share(category):.1%} < {target:.0%}"
        for category, target in TARGETS.items()
        if category != "chain" and best.share(category) < target
    ]
    if chained.share < TARGETS["chain"]:
        found.append(f"chain: {chained.share:.1%} < {TARGETS['chain']:.0%}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--turns", type=int, default=120, help="turns of each session")
    parser.add_argument("--chain-turns", type=int, default=CHAIN_TURNS)
    parser.add_argument("--window", type=int, default=WINDOW)
    args = parser.parse_args()
    started = time.perf_counter()
    figures = asyncio.run(measure(args.seeds, turns=args.turns, window=args.window))
    chained = asyncio.run(chain(CHAIN_SEED, turns=args.chain_turns, window=args.window))
    print(table(figures, chained))
    print(f"\n{time.perf_counter() - started:.0f} s")
    out = Path(__file__).resolve().parent / "results" / "fidelity.json"
    out.parent.mkdir(exist_ok=True)
    results = {
        **vars(args),
        "policies": {name: asdict(f) for name, f in figures.items()},
        "chain": asdict(chained),
    }
    out.write_text(json.dumps(results, indent=2) + "\n")
    misses = missed(figures, chained)
    for miss in misses:
        print(f"target missed: {miss}")
    return 1 if args.check and misses else 0


if __name__ == "__main__":
    sys.exit(main())
