"""A generated agent session with facts planted in its tool outputs and user messages, for the
recall tests: long enough that governance masks, cuts and drops most of them."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

ATTRIBUTES = (
    "access code",
    "owner",
    "listening port",
    "release date",
    "backup bucket",
    "on-call engineer",
    "budget code",
    "database host",
)
_SYLLABLES = (
    "ka", "lo", "mir", "tan", "vek", "zor", "quil", "bra", "dun", "fey",
    "gop", "hax", "jin", "lum", "nop", "rud", "sev", "tor", "uzz", "wym",
)  # fmt: skip
_FILLER = (
    "INFO worker-{n} processed {k} jobs for the {attribute} service in {ms} ms",
    "DEBUG cache hit ratio {k}% on shard {n}, owner unchanged",
    "WARN retrying request {n} to the database host after {ms} ms",
    "INFO release pipeline step {n} finished with {k} artifacts",
    "DEBUG listening port check {n} passed ({ms} ms)",
)
WHEN = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Fact:
    entity: str
    attribute: str
    value: str
    seq: int
    """The message it was planted in."""

    @property
    def sentence(self) -> str:
        return f"The {self.attribute} for project {self.entity} is {self.value}."

    @property
    def query(self) -> str:
        """What a model looking for it would ask."""
        return f"{self.attribute} of project {self.entity}"


def _names(rng: random.Random, count: int) -> list[str]:
    names: set[str] = set()
    while len(names) < count:
        names.add("".join(rng.sample(_SYLLABLES, 3)).capitalize())
    return sorted(names, key=lambda _: rng.random())


def planted_session(
    facts: int = 230, *, seed: int = 7, lines: int = 40
) -> tuple[list[ModelMessage], list[Fact]]:
    """A session of turns (user request, a ``read_file`` call, its output of ``lines`` log
    lines, an answer) with ``facts`` facts planted: two in each output, every fifth in the
    user's request instead."""
    rng = random.Random(seed)
    names = _names(rng, facts)
    planted: list[Fact] = []
    messages: list[ModelMessage] = []
    turn = 0
    while len(planted) < facts:
        seq = len(messages)
        spoken = None
        if turn % 5 == 4:
            spoken = Fact(names[len(planted)], rng.choice(ATTRIBUTES), _value(rng), seq)
            planted.append(spoken)
        ask = f"Check the logs of batch {turn} and tell me what failed."
        if spoken is not None:
            ask = f"Keep this in mind: {spoken.sentence} {ask}"
        messages.append(ModelRequest(parts=[UserPromptPart(ask, timestamp=WHEN)]))
        call = ToolCallPart("read_file", {"path": f"logs/batch-{turn}.log"}, f"call-{turn}")
        messages.append(ModelResponse(parts=[call], timestamp=WHEN))
        output = [_filler(rng) for _ in range(lines)]
        for _ in range(2):
            if len(planted) == facts:
                break
            fact = Fact(names[len(planted)], rng.choice(ATTRIBUTES), _value(rng), seq + 2)
            planted.append(fact)
            output.insert(rng.randrange(len(output) + 1), fact.sentence)
        text = "\n".join(output)
        messages.append(
            ModelRequest(parts=[ToolReturnPart("read_file", text, f"call-{turn}", timestamp=WHEN)])
        )
        answer = TextPart(f"Batch {turn}: two retries, no failure.")
        messages.append(ModelResponse(parts=[answer], timestamp=WHEN))
        turn += 1
    return messages, planted


def _value(rng: random.Random) -> str:
    letters = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(3))
    return f"{letters}{rng.randrange(1000, 9999)}"


def _filler(rng: random.Random) -> str:
    line = rng.choice(_FILLER).format(
        n=rng.randrange(1, 64),
        k=rng.randrange(1, 100),
        ms=rng.randrange(1, 900),
        attribute=rng.choice(ATTRIBUTES),
    )
    return f"2026-11-{rng.randrange(1, 28):02d}T{rng.randrange(0, 24):02d}:00 {line}"
