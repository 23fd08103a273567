"""Stored-history benchmark: ``govern`` over stored facts and messages parsed on demand.

A hub keeps each message as one pydantic-ai ``ModelMessage`` JSON row and, beside it, the
engine's ``MessageFacts`` as JSON. Serving the governed context must not parse every payload:
``govern(lazy, facts=...)`` reads only the messages it sends or changes. Measured here, engine
only (no database), for a history of large tool outputs and one of small ones:

* baseline: parsing every stored payload with ``ModelMessagesTypeAdapter.validate_python``;
* reading every stored facts row back (``MessageFacts.from_json``), which a hub does once per
  history it keeps in memory;
* a cold call: ``govern`` with the facts and a lazy sequence, and its report built;
* warm calls: one message appended (facts extended by one, the same objects; the lazy sequence
  extended by one, the same loaded messages), ``govern`` and the report again.

Run from the repository root:  .venv/bin/python benchmarks/bench_stored.py [messages]
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from histories import HistoryGenerator
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from ctxhub.governance import Policy, govern
from ctxhub.governance.facts import MessageFacts, message_facts
from ctxhub.governance.tokens import tokenizer_for

MODEL = "openai:gpt-4o"
POLICY = Policy()
SIZE = 20_000
APPENDS = 50


class SmallOutputs(HistoryGenerator):
    """The same sessions with tool outputs of 200 to 500 characters: many more messages fit
    the budget, so more are sent, loaded and reported (the worst case for the lazy path)."""

    def output(self) -> str:
        size = self.rng.randint(200, 500)
        start = self.rng.randint(0, len(self.corpus) - size - 1)
        return self.corpus[start : start + size]


class Stored:
    """One session as a hub stores it: a JSON payload and a facts JSON per message."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self.facts_rows: list[dict[str, Any]] = []

    def append(self, message: ModelMessage) -> None:
        facts = message_facts(message, tokenizer_for(MODEL))
        self.payloads.append(ModelMessagesTypeAdapter.dump_python([message], mode="json")[0])
        self.facts_rows.append(facts.to_json())


class Lazy(Sequence[ModelMessage]):
    """Stored payloads parsed one at a time when asked for, each parsed once (``loaded`` is
    shared with the sequence of the history grown, as a hub would keep it)."""

    def __init__(self, payloads: list[dict[str, Any]], loaded: dict[int, ModelMessage]) -> None:
        self.payloads = payloads
        self.size = len(payloads)
        self.loaded = loaded
        self.parsed = 0

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> ModelMessage: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ModelMessage]: ...

    def __getitem__(self, index: int | slice) -> ModelMessage | Sequence[ModelMessage]:
        if isinstance(index, slice):
            raise TypeError("governance reads stored histories by position only")
        message = self.loaded.get(index)
        if message is None:
            message = ModelMessagesTypeAdapter.validate_python([self.payloads[index]])[0]
            self.loaded[index] = message
            self.parsed += 1
        return message

    def __iter__(self) -> Iterator[ModelMessage]:
        raise TypeError("governance reads stored histories by position only")


def timed[T](work: Callable[[], T]) -> tuple[float, T]:
    gc.collect()
    start = time.perf_counter()
    result = work()
    return (time.perf_counter() - start) * 1000, result


def run(name: str, generator: HistoryGenerator, size: int) -> None:
    stream = generator.messages()
    stored = Stored()
    for _ in range(size):
        stored.append(next(stream))
    extra = [next(stream) for _ in range(APPENDS)]

    parse_ms, _ = timed(lambda: ModelMessagesTypeAdapter.validate_python(stored.payloads))
    facts_ms, facts = timed(lambda: [MessageFacts.from_json(row) for row in stored.facts_rows])
    tokens = sum(f.tokens for f in facts)

    loaded: dict[int, ModelMessage] = {}
    lazy = Lazy(stored.payloads, loaded)

    def call() -> Any:
        governed = govern(lazy, POLICY, model=MODEL, facts=facts)
        governed.report  # noqa: B018 - the hub returns the report with every call
        return governed

    cold_ms, governed = timed(call)
    cold_parsed, kept = lazy.parsed, len(governed.messages)

    warm: list[float] = []
    warm_parsed: list[int] = []
    for message in extra:
        stored.append(message)
        facts = [*facts, MessageFacts.from_json(stored.facts_rows[-1])]
        lazy = Lazy(stored.payloads, loaded)
        governed = None
        ms, governed = timed(call)
        warm.append(ms)
        warm_parsed.append(lazy.parsed)

    median = statistics.median(warm)
    p95 = sorted(warm)[int(0.95 * len(warm)) - 1]
    print(f"## {name}: {size:,} messages, {tokens:,} tokens, {kept:,} sent\n")
    print("| step | ms | vs parsing every payload | payloads parsed |")
    print("|---|---:|---:|---:|")
    print(f"| parse every payload (baseline) | {parse_ms:.1f} | 1.00 | {size:,} |")
    print(f"| read every facts row | {facts_ms:.1f} | {facts_ms / parse_ms:.2f} | 0 |")
    print(f"| cold govern + report | {cold_ms:.1f} | {cold_ms / parse_ms:.2f} | {cold_parsed:,} |")
    print(
        f"| warm govern + report after one append, median of {len(warm)} | {median:.1f} | "
        f"{median / parse_ms:.3f} | {statistics.median(warm_parsed):.0f} |"
    )
    print(f"| warm, p95 | {p95:.1f} | {p95 / parse_ms:.3f} | {max(warm_parsed)} (max) |")
    print()


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else SIZE
    run("small tool outputs (200-500 chars)", SmallOutputs(seed=7), size)
    run("tool outputs of 2-60 KB", HistoryGenerator(seed=size), size)


if __name__ == "__main__":
    main()
