"""One prompt, forty large tool results: what ``ContextGovernor`` sends, and what in-run
summarisation costs.

An agent answers one request by reading forty logs of about 3,000 tokens each into a 32,000
token window: the run outgrows its window several times over inside a single turn. It runs
twice in the same process, with the same offline model and tools:

* governed only (the deterministic steps: masking, the window inside the turn, groups);
* governed with in-run summarisation by the offline extractive summariser.

Printed: what each request of the summarised run carried (messages, tokens, budget, whether a
summary stood for older messages, the newest result kept), the compactions, and the time spent
governing per request in each run, with their ratio.

Run from the repository root:  .venv/bin/python benchmarks/bench_in_run.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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

from ctxhub.governance import Compacted, ContextGovernor, Governed, Policy, count_tokens
from ctxhub.governance.ledger import is_summary_text

MODEL = "openai:gpt-4o"
FILES = 40
PROMPT = "Find why the nightly export to db-west-3 fails (ticket OPS-1234); read every log."
POLICY = Policy(context_window=32_000, reserved_output_tokens=2_000)


def _log(n: int) -> str:
    lines = [
        f"2026-11-0{n % 9 + 1}T02:{i % 60:02d}:00Z export[{n}] batch {i}: wrote 500 rows "
        f"to exports/part_{n}_{i}.csv in {i * 7 % 300} ms"
        for i in range(160)
    ]
    if n % 7 == 3:
        lines.append(f"ERROR export[{n}]: connection reset by db-west-3:5432 after 30 s")
    return "\n".join(lines)


class Reader:
    """Reads ``FILES`` logs one call at a time, then answers; keeps what each request held."""

    def __init__(self) -> None:
        self.seen: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        done = len(self.seen)
        if done <= FILES:
            args = {"path": f"/var/log/export/night_{done}.log"}
            return ModelResponse(parts=[ToolCallPart("read_log", args, tool_call_id=f"r{done}")])
        return ModelResponse(parts=[TextPart("The exports fail on db-west-3 resets.")])


async def run(
    summarizer: str | None,
) -> tuple[Reader, list[float], list[Governed], list[Compacted]]:
    reader = Reader()
    governed: list[Governed] = []
    compactions: list[Compacted] = []
    governor = ContextGovernor(
        POLICY,
        tokenizer_model=MODEL,
        summarizer=summarizer,
        on_governed=governed.append,
        on_compacted=compactions.append,
    )
    timings: list[float] = []
    prepare = governor.prepare_model_request

    async def timed(ctx, request_context):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            return await prepare(ctx, request_context)
        finally:
            timings.append(time.perf_counter() - start)

    governor.prepare_model_request = timed  # type: ignore[method-assign]
    agent = Agent(FunctionModel(reader), capabilities=[governor])

    @agent.tool_plain
    def read_log(path: str) -> str:
        """Read a log file."""
        return _log(int(path.rsplit("_", 1)[-1].split(".")[0]))

    result = await agent.run(PROMPT)
    assert result.output.startswith("The exports fail")
    return reader, timings, governed, compactions


def _summaries(messages: list[ModelMessage]) -> int:
    return sum(
        1
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart) and isinstance(p.content, str)
        if is_summary_text(p.content)
    )


def _newest_result(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                return part.tool_call_id
    return "-"


def main() -> None:
    plain_reader, plain, _, _ = asyncio.run(run(None))
    reader, summarised, governed, compactions = asyncio.run(run("offline:extractive"))
    print("What each request of the summarised run carried:\n")
    print("| request | messages | tokens | budget | summaries | newest result | steps |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for n, (sent, g) in enumerate(zip(reader.seen, governed, strict=True), 1):
        steps = ", ".join(s.step for s in g.report.steps) or "-"
        print(
            f"| {n} | {len(sent)} | {count_tokens(sent, model=MODEL)} | {g.budget_tokens} | "
            f"{_summaries(sent)} | {_newest_result(sent)} | {steps} |"
        )
    print("\nCompactions:\n")
    print("| # | outcome | messages summarised | tokens before | tokens after | ms |")
    print("|---:|---|---:|---:|---:|---:|")
    for n, c in enumerate(compactions, 1):
        r = c.report
        print(
            f"| {n} | {r.outcome} | {r.summarized_messages} | {r.tokens_before} | "
            f"{r.tokens_after} | {r.duration_ms:.0f} |"
        )
    plain_ms = statistics.median(plain) * 1000
    summarised_ms = statistics.median(summarised) * 1000
    print("\nGoverning before each request (same process, same run):\n")
    print("| run | requests | median ms | total ms | ratio of totals |")
    print("|---|---:|---:|---:|---:|")
    print(f"| governed only | {len(plain)} | {plain_ms:.2f} | {sum(plain) * 1000:.0f} | 1.00 |")
    print(
        f"| with in-run summarisation | {len(summarised)} | {summarised_ms:.2f} | "
        f"{sum(summarised) * 1000:.0f} | {sum(summarised) / sum(plain):.2f} |"
    )
    fitted = all(
        count_tokens(sent, model=MODEL) <= g.budget_tokens
        for sent, g in zip(reader.seen, governed, strict=True)
    )
    print(f"\nEvery request of the summarised run within its budget: {fitted}")
    print(f"Requests: {len(plain_reader.seen)} governed only, {len(reader.seen)} summarised")


if __name__ == "__main__":
    main()
