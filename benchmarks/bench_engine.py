"""Engine benchmark: cold ``govern`` against raw tiktoken; per-turn cost on a growing history.

Run from the repository root:  .venv/bin/python benchmarks/bench_engine.py
Results are printed as markdown and written to benchmarks/results/engine.json.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from histories import HistoryGenerator, history, texts

from ctxhub.governance import Policy, govern
from ctxhub.governance.tokens import load_encoding

MODEL = "openai:gpt-4o"
POLICY = Policy()
COLD_SIZES = (100, 1_000, 5_000, 20_000)
TURN_SIZES = (1_000, 5_000, 20_000)
TURNS = 200


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


def _grow(n: int, turns: int, with_report: bool) -> tuple[list[float], list[float]]:
    """Govern a fresh n-message history once, then after each of ``turns`` new messages.

    Returns per-turn seconds (govern, plus building the report when ``with_report``) and raw
    tiktoken seconds of each new message's texts. The history is generated afresh from the same
    seed, so both loops see the same messages and neither finds the other's objects in a cache.
    """
    generator = HistoryGenerator(seed=1000 + n)
    stream = generator.messages()
    messages = [next(stream) for _ in range(n)]
    govern(messages, POLICY, model=MODEL)  # the cold call an agent pays once
    encoding = load_encoding("o200k_base")
    assert encoding is not None
    costs, new_text = [], []
    governed = None
    gc.collect()
    for _ in range(turns):
        message = next(stream)
        messages.append(message)
        start = time.perf_counter()
        for text in texts([message]):
            encoding.encode(text, disallowed_special=())
        new_text.append(time.perf_counter() - start)
        # Free the previous turn's result (and any report built from it) before the clock
        # starts: releasing thousands of report objects is not part of governing this turn.
        governed = None
        start = time.perf_counter()
        governed = govern(messages, POLICY, model=MODEL)
        if with_report:
            governed.report  # noqa: B018 - built lazily, as a dashboard reads it
        costs.append(time.perf_counter() - start)
    return costs, new_text


def per_turn(n: int, turns: int = TURNS) -> dict[str, float]:
    # (a) What an agent pays: govern() before each request, the report never read (as the
    # ContextGovernor capability does). (b) What a dashboard pays: govern() and the full report.
    agent, new_text = _grow(n, turns, with_report=False)
    gc.collect()
    reported, _ = _grow(n, turns, with_report=True)
    ms = [c * 1000 for c in agent]
    with_report = [c * 1000 for c in reported]
    return {
        "messages": n,
        "turns": turns,
        "median_ms": statistics.median(ms),
        "p95_ms": sorted(ms)[int(0.95 * len(ms)) - 1],
        "max_ms": max(ms),
        "mean_ms": statistics.fmean(ms),
        "median_with_report_ms": statistics.median(with_report),
        "p95_with_report_ms": sorted(with_report)[int(0.95 * len(with_report)) - 1],
        "median_raw_new_message_ms": statistics.median(c * 1000 for c in new_text),
    }


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
    print(
        "| history | turns | agent median ms | agent p95 ms | agent max ms | "
        "with report median ms | with report p95 ms | raw tiktoken of the new message, median ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results["per_turn"]:
        print(
            f"| {r['messages']} | {r['turns']} | {r['median_ms']:.2f} | {r['p95_ms']:.2f} | "
            f"{r['max_ms']:.2f} | {r['median_with_report_ms']:.2f} | "
            f"{r['p95_with_report_ms']:.2f} | {r['median_raw_new_message_ms']:.2f} |"
        )


if __name__ == "__main__":
    main()
