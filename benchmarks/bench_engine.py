"""Engine benchmark: cold ``govern`` against raw tiktoken; per-turn cost on a growing history.

Per turn is measured for the agent path (the same message objects, the history grown by one)
and the stored path (``facts=``: the same ``MessageFacts`` objects, read back from their JSON
form as a hub stores them), each with its ratio to the 1,000-message row of the same run, and
split into pair repair and the rest. Every history size is grown by the same new messages (a
second session's turns, generated from one seed), so the rows time the same turns: a turn
bringing three 60 KB outputs costs their tokenisation at any history size.

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

from ctxhub.governance import Policy, govern
from ctxhub.governance.counting import MessageFacts, message_facts
from ctxhub.governance.tokens import load_encoding, tokenizer_for

MODEL = "openai:gpt-4o"
POLICY = Policy()
COLD_SIZES = (100, 1_000, 5_000, 20_000)
TURN_SIZES = (1_000, 5_000, 20_000)
TURNS = 200
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
        self.module: Any = importlib.import_module("ctxhub.governance.govern")
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


def _grow(n: int, turns: int, mode: str) -> tuple[list[float], list[float], list[float]]:
    """Govern a fresh n-message history once, then after each of ``turns`` new messages.

    ``mode`` is "agent" (govern the messages), "report" (govern them and build the report) or
    "stored" (govern them with their facts, each read back from its JSON form once, as a hub
    keeps them; the facts list grows by the new message's facts, the same objects first).
    Returns per-turn seconds, the seconds of each turn spent in pair repair, and raw tiktoken
    seconds of each new message's texts. The history is generated afresh from the same seed,
    so every loop sees the same messages and none finds another's objects in a cache.
    """
    tokenizer = tokenizer_for(MODEL)
    base = HistoryGenerator(seed=1000 + n).messages()
    messages = [next(base) for _ in range(n)]
    stream = HistoryGenerator(seed=NEW_TURNS_SEED, call_ids="next", first_turn=1).messages()
    facts: list[MessageFacts] | None = None
    if mode == "stored":
        facts = [_stored(m, tokenizer) for m in messages]
    govern(messages, POLICY, model=MODEL, facts=facts)  # the cold call paid once
    encoding = load_encoding("o200k_base")
    assert encoding is not None
    costs, repair, new_text = [], [], []
    governed = None
    gc.collect()
    with _PairRepairClock() as clock:
        for _ in range(turns):
            message = next(stream)
            messages.append(message)
            if facts is not None:
                # Counted when it was stored, outside the clock.
                facts = [*facts, _stored(message, tokenizer)]
            start = time.perf_counter()
            for text in texts([message]):
                encoding.encode(text, disallowed_special=())
            new_text.append(time.perf_counter() - start)
            # Free the previous turn's result (and any report built from it) before the clock
            # starts: releasing thousands of report objects is not part of governing this turn.
            governed = None
            clock.seconds = 0.0
            start = time.perf_counter()
            governed = govern(messages, POLICY, model=MODEL, facts=facts)
            if mode == "report":
                governed.report  # noqa: B018 - built lazily, as a dashboard reads it
            costs.append(time.perf_counter() - start)
            repair.append(clock.seconds)
    return costs, repair, new_text


def _stored(message: Any, tokenizer: Any) -> MessageFacts:
    """A message's facts as a hub holds them: read back from the JSON stored beside it."""
    return MessageFacts.from_json(message_facts(message, tokenizer).to_json())


def _ms(seconds: list[float]) -> list[float]:
    return [s * 1000 for s in seconds]


def _p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * len(values)) - 1]


def per_turn(n: int, turns: int = TURNS) -> dict[str, float]:
    # (a) What an agent pays: govern() before each request, the report never read (as the
    # ContextGovernor capability does). (b) What a dashboard pays: govern() and the full report.
    # (c) What a hub pays for the governed messages of a stored session: govern() with facts.
    agent, agent_repair, new_text = _grow(n, turns, "agent")
    gc.collect()
    reported, _, _ = _grow(n, turns, "report")
    gc.collect()
    stored, stored_repair, _ = _grow(n, turns, "stored")
    ms, stored_ms, with_report = _ms(agent), _ms(stored), _ms(reported)
    agent_rest = [t - r for t, r in zip(ms, _ms(agent_repair), strict=True)]
    stored_rest = [t - r for t, r in zip(stored_ms, _ms(stored_repair), strict=True)]
    return {
        "messages": n,
        "turns": turns,
        "median_ms": statistics.median(ms),
        "p95_ms": _p95(ms),
        "max_ms": max(ms),
        "mean_ms": statistics.fmean(ms),
        "median_pair_repair_ms": statistics.median(_ms(agent_repair)),
        "median_without_pair_repair_ms": statistics.median(agent_rest),
        "median_stored_ms": statistics.median(stored_ms),
        "mean_stored_ms": statistics.fmean(stored_ms),
        "p95_stored_ms": _p95(stored_ms),
        "median_stored_pair_repair_ms": statistics.median(_ms(stored_repair)),
        "median_stored_without_pair_repair_ms": statistics.median(stored_rest),
        "median_with_report_ms": statistics.median(with_report),
        "p95_with_report_ms": _p95(with_report),
        "median_raw_new_message_ms": statistics.median(c * 1000 for c in new_text),
    }


def _ratio(rows: list[dict[str, Any]], row: dict[str, Any], key: str) -> str:
    """``row[key]`` over the same column of the 1,000-message row of this run."""
    base = next((r for r in rows if r["messages"] == 1_000), None)
    if base is None or not base[key]:
        return "—"
    return f"{row[key] / base[key]:.2f}"


def main() -> None:
    args = sys.argv[1:]
    # --per-turn-only skips the cold table (minutes at 20,000 messages).
    turns_only = "--per-turn-only" in args
    sizes = [int(a) for a in args if a != "--per-turn-only"] or None
    results = {
        "cold": [] if turns_only else [cold(n) for n in (sizes or COLD_SIZES)],
        "per_turn": [per_turn(n) for n in (sizes or TURN_SIZES)],
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
    print(
        "| history | turns | agent median ms | agent ratio to 1,000 | agent mean ratio | "
        "stored median ms | stored ratio to 1,000 | stored mean ratio | agent p95 ms | "
        "stored p95 ms | with report median ms | raw tiktoken of the new message, median ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['messages']} | {r['turns']} | {r['median_ms']:.2f} | "
            f"{_ratio(rows, r, 'median_ms')} | {_ratio(rows, r, 'mean_ms')} | "
            f"{r['median_stored_ms']:.2f} | {_ratio(rows, r, 'median_stored_ms')} | "
            f"{_ratio(rows, r, 'mean_stored_ms')} | {r['p95_ms']:.2f} | "
            f"{r['p95_stored_ms']:.2f} | {r['median_with_report_ms']:.2f} | "
            f"{r['median_raw_new_message_ms']:.2f} |"
        )
    print()
    print(
        "| history | agent: pair repair median ms | agent: the rest, median ms | ratio to 1,000 | "
        "stored: pair repair median ms | stored: the rest, median ms | ratio to 1,000 |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['messages']} | {r['median_pair_repair_ms']:.2f} | "
            f"{r['median_without_pair_repair_ms']:.2f} | "
            f"{_ratio(rows, r, 'median_without_pair_repair_ms')} | "
            f"{r['median_stored_pair_repair_ms']:.2f} | "
            f"{r['median_stored_without_pair_repair_ms']:.2f} | "
            f"{_ratio(rows, r, 'median_stored_without_pair_repair_ms')} |"
        )


if __name__ == "__main__":
    main()
