"""A seeded generator of realistic agentic histories, for the engine benchmarks.

A session opens with a system prompt; each turn is a user request, one to six tool iterations
(one to three parallel calls each: file reads, greps, test runs, JSON API calls) with outputs of
2 to 60 KB, and a final answer. About one turn in twelve is interrupted: its last calls never
get results. Texts are cut from a corpus of code, logs and JSON built from the seed, so every
output differs while generation stays fast. Only the oldest pydantic-ai message constructors are
used, so the peer benchmark can import this module from its own virtualenv.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

SYSTEM = (
    "You are a careful software engineer working in a large Python repository. Use the tools "
    "to read files, search and run tests. Explain what you change and why."
)
TOOLS = ("read_file", "grep", "run_tests", "http_get")
_START = datetime(2026, 1, 1, tzinfo=UTC)


def _corpus(rng: random.Random, size: int = 1_500_000) -> str:
    names = ["session", "policy", "budget", "window", "message", "token", "report", "store"]
    lines: list[str] = []
    total = 0
    while total < size:
        kind = rng.random()
        a, b = rng.choice(names), rng.choice(names)
        if kind < 0.4:
            line = f"    def {a}_{b}(self, {b}: int = {rng.randint(0, 999)}) -> {a.title()}:"
        elif kind < 0.7:
            day, hour, minute = rng.randint(1, 28), rng.randint(0, 23), rng.randint(0, 59)
            line = (
                f"2026-01-{day:02d}T{hour:02d}:{minute:02d}"
                f" INFO {a}.{b} handled request {rng.randint(1000, 99999)} in {rng.random():.3f}s"
            )
        elif kind < 0.85:
            line = json.dumps({"id": rng.randint(1, 10**6), a: b, "score": round(rng.random(), 4)})
        else:
            line = f"src/ctxhub/{a}/{b}.py:{rng.randint(1, 900)}: {a} = {b}({rng.randint(0, 99)})"
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)


class HistoryGenerator:
    """Messages of one synthetic session, reproducible from ``seed``."""

    def __init__(
        self,
        seed: int = 0,
        output_bytes: tuple[int, int] = (2_000, 60_000),
        *,
        call_ids: str = "call",
        first_turn: int = 0,
    ) -> None:
        self.rng = random.Random(seed)
        self.output_bytes = output_bytes
        self.corpus = _corpus(self.rng)
        self.calls = 0
        self.clock = _START
        self.call_ids = call_ids
        """Prefix of the call ids, so a second session's messages can follow a first's."""
        self.first_turn = first_turn
        """Number of the first turn (turn 0 opens with the system prompt)."""

    def _tick(self) -> datetime:
        self.clock += timedelta(seconds=self.rng.randint(1, 30))
        return self.clock

    def output(self) -> str:
        """A tool output of 2 to 60 KB (or the sizes given)."""
        size = self.rng.randint(*self.output_bytes)
        start = self.rng.randint(0, len(self.corpus) - size - 1)
        return self.corpus[start : start + size]

    def turn(self, number: int) -> Iterator[ModelMessage]:
        """The messages of one turn."""
        parts: list[object] = [SystemPromptPart(SYSTEM)] if number == 0 else []
        prompt = f"Task {number}: look into the {self.rng.choice(TOOLS)} failure and fix it."
        yield ModelRequest(parts=[*parts, UserPromptPart(prompt, timestamp=self._tick())])  # type: ignore[list-item]
        interrupted = self.rng.random() < 1 / 12
        iterations = self.rng.randint(1, 6)
        for iteration in range(iterations):
            calls = [
                ToolCallPart(
                    self.rng.choice(TOOLS),
                    {"path": f"src/module_{self.rng.randint(1, 400)}.py"},
                    tool_call_id=f"{self.call_ids}_{self._next_call()}",
                )
                for _ in range(self.rng.randint(1, 3))
            ]
            yield ModelResponse(parts=calls, timestamp=self._tick())
            if interrupted and iteration == iterations - 1:
                return
            yield ModelRequest(
                parts=[
                    ToolReturnPart(
                        c.tool_name,
                        self.output(),
                        tool_call_id=c.tool_call_id,
                        timestamp=self._tick(),
                    )
                    for c in calls
                ]
            )
        answer = "I changed the handler and the tests pass. " * self.rng.randint(1, 20)
        yield ModelResponse(parts=[TextPart(answer)], timestamp=self._tick())

    def _next_call(self) -> int:
        self.calls += 1
        return self.calls

    def messages(self) -> Iterator[ModelMessage]:
        """An endless stream of messages, turn after turn."""
        number = self.first_turn
        while True:
            yield from self.turn(number)
            number += 1


def history(n: int, seed: int = 0) -> list[ModelMessage]:
    """The first ``n`` messages of the session with ``seed``."""
    stream = HistoryGenerator(seed).messages()
    return [next(stream) for _ in range(n)]


def texts(messages: list[ModelMessage]) -> list[str]:
    """Every text the messages carry, as a raw tokeniser would see it."""
    out: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                out += [part.tool_name, part.args_as_json_str()]
            elif isinstance(part, ToolReturnPart):
                out += [part.tool_name, part.model_response_str()]
            else:
                content = getattr(part, "content", "")
                out.append(content if isinstance(content, str) else str(content))
    return out
