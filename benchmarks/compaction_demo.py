"""One compaction of a generated session: tokens before and after, ledger items kept by the
summariser and by the ledger, and the time it took.

    .venv/bin/python benchmarks/compaction_demo.py [--messages 1000] [--seed 0]
        [--summarizer offline:extractive] [--model openai:gpt-4o]

The session comes from the engine benchmarks' seeded generator; the default summariser is the
offline extractive one, so the demo needs no API key (any pydantic-ai model name works).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from histories import history

from ctxhub.governance import Policy
from ctxhub.governance.compact import compact


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--summarizer", default="offline:extractive")
    parser.add_argument("--model", default="openai:gpt-4o")
    args = parser.parse_args()

    started = time.perf_counter()
    session = history(args.messages, seed=args.seed)
    generated = time.perf_counter() - started
    started = time.perf_counter()
    compacted = await compact(session, Policy(), summarizer=args.summarizer, model=args.model)
    took = time.perf_counter() - started
    report = compacted.report
    ledger = len(report.ledger)
    print(f"session            {report.messages_before} messages (generated in {generated:.2f} s)")
    print(f"summariser         {report.summarizer}; chat model {report.model}")
    print(f"outcome            {report.outcome}" + (f" ({report.error})" if report.error else ""))
    print(f"tokens             {report.tokens_before:,} -> {report.tokens_after:,}")
    print(
        f"next request       {report.sent_before:,} -> {report.sent_after:,} (at most "
        f"{report.sent_after_max:,}; low-water mark {report.low_water:,})"
    )
    print(f"messages           {report.messages_before} -> {report.messages_after}")
    print(
        f"summarised         {len(report.summarized_indices)} messages in {report.chunks} "
        f"chunks, {report.rounds} rounds; {len(report.kept_user_indices)} user messages kept"
    )
    print(
        f"summary            {report.summary_tokens:,} tokens replacing {report.replaced_tokens:,}"
    )
    print(
        f"ledger items       {ledger}: kept by the summariser {len(report.kept_by_summarizer)}, "
        f"added by the ledger {len(report.added_by_ledger)}, left out for room "
        f"{report.ledger_omitted}"
    )
    print(
        f"unseen before      {report.hidden_messages} of the {report.summarized_messages} "
        "messages summarised were not sent in full"
    )
    print(f"time               {took:.2f} s")


if __name__ == "__main__":
    asyncio.run(main())
