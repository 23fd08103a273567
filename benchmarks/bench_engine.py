"""Engine benchmark: cold ``govern`` against raw tiktoken; per-turn cost on a growing history.

A turn is what an agent does between two model requests: the response comes back, the request
after it (tool results, or the user's next prompt) is added, and the history is governed for
the next request. Per turn is measured for the agent path (the same message objects, the
history grown by the turn's messages) and the stored path (``facts=``: the same
``MessageFacts`` objects, read back from their JSON form as a hub stores them), split into pair
repair and the rest. Every history size is grown by the same new messages (a second session's
turns, generated from one seed), so the sizes time the same turns: a turn bringing three 60 KB
outputs costs their tokenisation at any history size. Each size is timed beside a 1,000-message
history grown the same way, in alternating blocks of turns, and given as a ratio to it: on a
shared machine, runs minutes apart differ by more than the sizes do.

Run from the repository root:  .venv/bin/python benchmarks/bench_engine.py
Results are printed as markdown and written to benchmarks/results/engine.json.
"""

from __future__ import annotations

import gc
import importlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from histories import HistoryGenerator, history, texts
from pydantic_ai.messages import ModelMessage, ModelRequest

from ctxhub.governance import Governor, Policy, govern
from ctxhub.governance.facts import MessageFacts, message_facts
from ctxhub.governance.tokens import load_encoding, tokenizer_for

MODEL = "openai:gpt-4o"
POLICY = Policy()
COLD_SIZES = (100, 1_000, 5_000, 20_000)
TURN_SIZES = (5_000, 20_000)
BASELINE = 1_000
"""Each per-turn size is timed beside a history of this many messages, grown the same way."""
TURNS = 200
BLOCK = 10
NEW_TURNS_SEED = 7


def raw_tiktoken(messages: list) -> tuple[float, int]:  # type: ignore[type-arg]
    encoding = load_encoding("o200k_base")
    assert encoding is not None
    start = time.perf_counter()
    tokens = sum(len(encoding.encode(t, disallowed_special=())) for t in texts(messages))
    return time.perf_counter() - start, tokens


def cold(n: int) -> dict[str, float]:
    messages = history(n, seed=n)
    raw_s, raw_tokens = raw_tiktoken(messages)
    gc.collect()
    start = time.perf_counter()
    governed = govern(messages, POLICY, model=MODEL)
    govern_s = time.perf_counter() - start
    start = time.perf_counter()
    governed.report.model_dump_json()
    report_s = time.perf_counter() - start
    return {
        "messages": n,
        "text_mb": sum(len(t) for t in texts(messages)) / 1e6,
        "raw_tokens": raw_tokens,
        "raw_s": raw_s,
        "govern_s": govern_s,
        "ratio": govern_s / raw_s,
        "report_s": report_s,
        "kept": len(governed.messages),
        "fits": governed.fits,
    }


class _PairRepairClock:
    """Time spent in pair repair (``normalize``) during one ``govern`` call, read per turn."""

    def __init__(self) -> None:
        self.module: Any = importlib.import_module("ctxhub.governance.pipeline")
        self.normalize: Callable[..., Any] = self.module.normalize
        self.seconds = 0.0

    def __enter__(self) -> _PairRepairClock:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return self.normalize(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        self.module.normalize = timed
        return self

    def __exit__(self, *_: object) -> None:
        self.module.normalize = self.normalize


class _Loop:
    """One history of ``n`` messages governed once, then grown turn by turn.

    ``mode`` is "agent" (govern the messages), "report" (govern them and build the report) or
    "stored" (govern them with their facts, each read back from its JSON form once, as a hub
    keeps them; the facts list grows by the new messages' facts, the same objects first). The
    history is generated afresh from its seed, so no loop finds another's objects in a cache.
    """

    def __init__(self, n: int, mode: str) -> None:
        self.mode = mode
        self.tokenizer = tokenizer_for(MODEL)
        base = HistoryGenerator(seed=1000 + n).messages()
        self.messages = [next(base) for _ in range(n)]
        self.stream = HistoryGenerator(
            seed=NEW_TURNS_SEED, call_ids="next", first_turn=1
        ).messages()
        self.facts: list[MessageFacts] | None = None
        if mode == "stored":
            self.facts = [_stored(m, self.tokenizer) for m in self.messages]
        # One Governor per history, as an agent run or a stored session has.
        self.governor = Governor(POLICY, model=MODEL)
        self.governor.govern(self.messages, facts=self.facts)  # the cold call paid once
        self.encoding = load_encoding("o200k_base")
        self.governed: Any = None

    def turn(self, clock: _PairRepairClock) -> tuple[float, float, float]:
        """Add the next turn's messages up to and including the next request (the response
        and the results or prompt after it), then govern for the model request that follows,
        as an agent does. Seconds governing, seconds of it in pair repair, and raw tiktoken
        seconds of the new messages' texts."""
        new: list[ModelMessage] = []
        while not new or not isinstance(new[-1], ModelRequest):
            new.append(next(self.stream))
        self.messages.extend(new)
        if self.facts is not None:
            # Counted when they were stored, outside the clock.
            self.facts = [*self.facts, *(_stored(m, self.tokenizer) for m in new)]
        assert self.encoding is not None
        start = time.perf_counter()
        for text in texts(new):
            self.encoding.encode(text, disallowed_special=())
        raw = time.perf_counter() - start
        # Free the previous turn's result (and any report built from it) before the clock
        # starts: releasing thousands of report objects is not part of governing this turn.
        self.governed = None
        clock.seconds = 0.0
        start = time.perf_counter()
        self.governed = self.governor.govern(self.messages, facts=self.facts)
        if self.mode == "report":
            self.governed.report  # noqa: B018 - built lazily, as a dashboard reads it
        return time.perf_counter() - start, clock.seconds, raw


def _alongside(n: int, mode: str, turns: int) -> dict[int, list[tuple[float, float, float]]]:
    """Per-turn timings of an ``n``-message history and a ``BASELINE`` one grown side by side:
    blocks of ``BLOCK`` turns in alternation, so a slow minute of a shared machine weighs on
    both (each history has its own Governor)."""
    loops = {size: _Loop(size, mode) for size in dict.fromkeys((BASELINE, n))}
    timings: dict[int, list[tuple[float, float, float]]] = {size: [] for size in loops}
    # The histories as built are left out of garbage collection, so neither size pays for
    # collecting the other's objects; what governance allocates is collected as usual.
    gc.collect()
    gc.freeze()
    try:
        with _PairRepairClock() as clock:
            for done in range(0, turns, BLOCK):
                for size, loop in loops.items():
                    timings[size] += [loop.turn(clock) for _ in range(min(BLOCK, turns - done))]
    finally:
        gc.unfreeze()
    return timings


def _stored(message: Any, tokenizer: Any) -> MessageFacts:
    """A message's facts as a hub holds them: read back from the JSON stored beside it."""
    return MessageFacts.from_json(message_facts(message, tokenizer).to_json())


def _ms(seconds: list[float]) -> list[float]:
    return [s * 1000 for s in seconds]


def _p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * len(values)) - 1]


def _stats(timings: list[tuple[float, float, float]]) -> dict[str, float]:
    ms, repair, raw = (_ms(list(column)) for column in zip(*timings, strict=True))
    return {
        "median_ms": statistics.median(ms),
        "mean_ms": statistics.fmean(ms),
        "p95_ms": _p95(ms),
        "max_ms": max(ms),
        "median_pair_repair_ms": statistics.median(repair),
        "median_without_pair_repair_ms": statistics.median(
            t - r for t, r in zip(ms, repair, strict=True)
        ),
        "median_raw_new_messages_ms": statistics.median(raw),
    }


def per_turn(n: int, turns: int = TURNS) -> dict[str, Any]:
    # (a) What an agent pays: govern() before each request, the report never read (as the
    # ContextGovernor capability does). (b) What a dashboard pays: govern() and the full report.
    # (c) What a hub pays for the governed messages of a stored session: govern() with facts.
    row: dict[str, Any] = {"messages": n, "turns": turns}
    for mode in ("agent", "report", "stored"):
        timings = _alongside(n, mode, turns)
        row[mode] = _stats(timings[n])
        row[f"{mode}_baseline"] = _stats(timings[BASELINE])
        gc.collect()
    return row


def _ratio(row: dict[str, Any], mode: str, key: str) -> float:
    """``key`` of ``mode`` in ``row`` over the same of the 1,000-message history beside it."""
    return float(row[mode][key] / row[f"{mode}_baseline"][key])


def main() -> None:
    args = sys.argv[1:]
    # --per-turn-only skips the cold table (minutes at 20,000 messages).
    turns_only = "--per-turn-only" in args
    # Sizes given (other than 1,000, which every size is timed beside) replace the defaults.
    sizes = [int(a) for a in args if a != "--per-turn-only"] or None
    results = {
        "cold": [] if turns_only else [cold(n) for n in (sizes or COLD_SIZES)],
        "per_turn": [per_turn(n) for n in (sizes or TURN_SIZES) if n != BASELINE],
    }
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "engine.json").write_text(json.dumps(results, indent=2))
    if results["cold"]:
        print(
            "| messages | text MB | tokens | raw tiktoken s | govern s | ratio | report s | kept |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in results["cold"]:
            print(
                f"| {r['messages']} | {r['text_mb']:.1f} | {r['raw_tokens']} | {r['raw_s']:.2f} | "
                f"{r['govern_s']:.2f} | {r['ratio']:.2f} | {r['report_s']:.3f} | {r['kept']} |"
            )
        print()
    rows = results["per_turn"]
    if not rows:
        return
    print(
        "| history | turns | agent median ms | 1,000 beside it | agent ratio (median / mean) | "
        "stored median ms | 1,000 beside it | stored ratio (median / mean) | "
        "with report median ms | 1,000 beside it | agent p95 ms | stored p95 ms | "
        "raw tiktoken of the new messages, median ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        agent, stored, report = r["agent"], r["stored"], r["report"]
        print(
            f"| {r['messages']} | {r['turns']} | {agent['median_ms']:.2f} | "
            f"{r['agent_baseline']['median_ms']:.2f} | {_ratio(r, 'agent', 'median_ms'):.2f} / "
            f"{_ratio(r, 'agent', 'mean_ms'):.2f} | {stored['median_ms']:.2f} | "
            f"{r['stored_baseline']['median_ms']:.2f} | {_ratio(r, 'stored', 'median_ms'):.2f} / "
            f"{_ratio(r, 'stored', 'mean_ms'):.2f} | {report['median_ms']:.2f} | "
            f"{r['report_baseline']['median_ms']:.2f} | {agent['p95_ms']:.2f} | "
            f"{stored['p95_ms']:.2f} | {agent['median_raw_new_messages_ms']:.2f} |"
        )
    print()
    print(
        "| history | agent: pair repair median ms | agent: the rest, median ms | ratio | "
        "stored: pair repair median ms | stored: the rest, median ms | ratio |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        rest = "median_without_pair_repair_ms"
        print(
            f"| {r['messages']} | {r['agent']['median_pair_repair_ms']:.2f} | "
            f"{r['agent'][rest]:.2f} | {_ratio(r, 'agent', rest):.2f} | "
            f"{r['stored']['median_pair_repair_ms']:.2f} | {r['stored'][rest]:.2f} | "
            f"{_ratio(r, 'stored', rest):.2f} |"
        )


if __name__ == "__main__":
    main()
