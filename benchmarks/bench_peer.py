"""Peer benchmark: summarization-pydantic-ai's SlidingWindowProcessor with a tiktoken counter.

It pins nothing that conflicts with ctxhub today, but it is kept out of ctxhub's dependencies
on purpose; it runs from its own virtualenv:

    python3 -m venv benchmarks/.peer-venv
    benchmarks/.peer-venv/bin/pip install summarization-pydantic-ai==0.1.11 tiktoken
    benchmarks/.peer-venv/bin/python benchmarks/bench_peer.py

The token counter is the one its documentation shows: tiktoken over the text of every part.
The processor is configured like ctxhub's default budget for gpt-4o (107,008 history tokens,
window filled from the newest message, first message kept).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from histories import HistoryGenerator, texts
from pydantic_ai_summarization import SlidingWindowProcessor

from ctxhub.governance.tokens import load_encoding

ENCODING = load_encoding("o200k_base")
BUDGET = 128_000 - 8_192 - 12_800


def count(messages: list) -> int:  # type: ignore[type-arg]
    assert ENCODING is not None
    return sum(len(ENCODING.encode(t, disallowed_special=())) for t in texts(messages))


async def per_turn(n: int, turns: int) -> dict[str, float]:
    processor = SlidingWindowProcessor(
        trigger=("tokens", BUDGET),
        keep=("tokens", BUDGET),
        keep_head=("messages", 1),
        token_counter=count,
    )
    stream = HistoryGenerator(seed=1000 + n).messages()
    messages = [next(stream) for _ in range(n)]
    costs = []
    for _ in range(turns):
        messages.append(next(stream))
        start = time.perf_counter()
        await processor(messages)
        costs.append((time.perf_counter() - start) * 1000)
    return {
        "messages": n,
        "turns": turns,
        "median_ms": statistics.median(costs),
        "max_ms": max(costs),
    }


def main() -> None:
    plan = [(1_000, 5), (5_000, 3)]
    results = [asyncio.run(per_turn(n, turns)) for n, turns in plan]
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "peer.json").write_text(json.dumps(results, indent=2))
    print("| history | turns | median ms | max ms |")
    print("|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['messages']} | {r['turns']} | {r['median_ms']:.0f} | {r['max_ms']:.0f} |")


if __name__ == "__main__":
    main()
