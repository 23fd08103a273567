"""Generated agent sessions with facts planted in them, for the recall tests: long enough that
governance masks, cuts and drops most of them. In ``planted_session`` a fact is a sentence in a
tool output or a user's message; in ``settings_session`` it is a setting a configuration file
states only by its key (``STG_DB_HOST=…``, ``"prodRepoAddr": …``, nested YAML, dotted names),
asked for in a model's words ("staging database host")."""

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


ENVIRONMENTS = (
    ("staging", "STG", "stg"),
    ("production", "PROD", "prod"),
    ("development", "DEV", "dev"),
)
"""Each environment: how a model names it, and its abbreviations in keys."""
COMPONENTS = (
    ("database", "DB"),
    ("repository", "REPO"),
    ("cache", "CACHE"),
    ("queue", "QUEUE"),
    ("search", "SEARCH"),
)
ATTRIBUTES_IN_KEYS = (("host", "HOST"), ("password", "PWD"), ("address", "ADDR"), ("port", "PORT"))
SPELLINGS = ("env", "json", "yaml", "dotted")
_OTHER_KEYS = ("LOG_LEVEL", "WORKER_COUNT", "FEATURE_FLAGS", "TIMEOUT_MS", "REGION", "TRACE_RATE")


@dataclass(frozen=True)
class Setting:
    environment: int
    component: int
    attribute: int
    value: str
    spelling: str
    seq: int
    """The message it was planted in."""

    @property
    def query(self) -> str:
        """What a model looking for it would ask: the setting in words."""
        return " ".join(
            (
                ENVIRONMENTS[self.environment][0],
                COMPONENTS[self.component][0],
                ATTRIBUTES_IN_KEYS[self.attribute][0],
            )
        )

    def lines(self) -> list[str]:
        """The setting as the configuration file spells it."""
        _, env, short = ENVIRONMENTS[self.environment]
        component = COMPONENTS[self.component][1]
        attribute = ATTRIBUTES_IN_KEYS[self.attribute][1]
        if self.spelling == "env":
            return [f"{env}_{component}_{attribute}={self.value}"]
        if self.spelling == "json":
            key = short + component.capitalize() + attribute.capitalize()
            return [f'  "{key}": "{self.value}",']
        if self.spelling == "yaml":
            return [
                f"{short}:",
                f"  {component.lower()}:",
                f"    {attribute.lower()}: {self.value}",
            ]
        return [f"{short}.{component.lower()}.{attribute.lower()} = {self.value}"]


def settings_session(
    settings: int = 60, *, seed: int = 5, lines: int = 40
) -> tuple[list[ModelMessage], list[Setting]]:
    """A session of turns (user request, a ``read_file`` call of a configuration file, its
    output of ``lines`` lines, an answer), each output stating one setting among other keys
    and log lines; no two settings are the same setting."""
    rng = random.Random(seed)
    every = [
        (e, c, a)
        for e in range(len(ENVIRONMENTS))
        for c in range(len(COMPONENTS))
        for a in range(len(ATTRIBUTES_IN_KEYS))
    ]
    assert settings <= len(every), f"at most {len(every)} distinct settings"
    chosen = rng.sample(every, settings)
    planted: list[Setting] = []
    messages: list[ModelMessage] = []
    for turn, (e, c, a) in enumerate(chosen):
        seq = len(messages)
        setting = Setting(e, c, a, _setting_value(rng), SPELLINGS[turn % len(SPELLINGS)], seq + 2)
        planted.append(setting)
        path = f"deploy/service-{turn}/settings.conf"
        messages.append(
            ModelRequest(parts=[UserPromptPart(f"Check {path} for batch {turn}.", timestamp=WHEN)])
        )
        messages.append(
            ModelResponse(
                parts=[ToolCallPart("read_file", {"path": path}, f"call-{turn}")], timestamp=WHEN
            )
        )
        output = [_other_line(rng) for _ in range(lines)]
        at = rng.randrange(len(output) + 1)
        output[at:at] = setting.lines()
        messages.append(
            ModelRequest(
                parts=[
                    ToolReturnPart("read_file", "\n".join(output), f"call-{turn}", timestamp=WHEN)
                ]
            )
        )
        messages.append(ModelResponse(parts=[TextPart(f"Read {path}.")], timestamp=WHEN))
    return messages, planted


def _setting_value(rng: random.Random) -> str:
    """A value that names none of the words asked with: an address, a port or a secret."""
    kind = rng.randrange(3)
    if kind == 0:
        return f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    if kind == 1:
        return f"{rng.randrange(20000, 29999)}"
    return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghjkmnpqrstuvwxyz") for _ in range(12))


def _other_line(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return f"{rng.choice(_OTHER_KEYS)}={rng.randrange(1, 500)}"
    return _filler(rng)
