"""Seeded long agentic sessions with planted facts, for the fidelity benchmark.

A session is an engineer's day with a coding agent on a payments service: a system prompt, then
turns of a user request, one to five tool iterations (file reads, greps, test runs, shell
commands, HTTP calls) with outputs of a few hundred bytes to 6 KB of code, logs and JSON, and
an answer. Facts are planted in it, each with the words a model would ask for it with:

* **explicit**: stated in words by the user or the agent: a constraint, an identifier, a
  number, a path, a decision;
* **implicit**: stated only by a tool output, as a configuration file spells a setting —
  ``STG_DB_HOST=10.4.7.21``, ``"prodRepoAddr": "…"``, nested YAML, ``dev.cache.port = …`` —
  among other keys;
* **superseded**: a value stated, then replaced by a newer one later in the session, in words
  by the user or by a configuration file read again.

Every planted value occurs in the session only where it was planted (checked), so finding the
value in what the model is sent, with the words that say what it is beside it, means the model
was told that fact.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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

from ctxhub.governance.recall_terms import query_words

SYSTEM = (
    "You are a careful software engineer working on the payments service of Acme. Use the "
    "tools to read files, search, run tests and commands. Explain what you change and why."
)
START = datetime(2026, 11, 2, 8, tzinfo=UTC)

EXPLICIT = "explicit"
IMPLICIT = "implicit"
SUPERSEDED = "superseded"


@dataclass(frozen=True)
class Fact:
    """A planted fact: what it is about, in a model's words, and its values, oldest first."""

    kind: str
    """``constraint``, ``identifier``, ``decision``, ``path``, ``number`` (explicit),
    ``setting`` (implicit), ``restated`` or ``reconfigured`` (superseded)."""
    category: str
    query: str
    """What a model looking for it would ask (never its value)."""
    subject: tuple[str, ...]
    """The words (recall's terms) that say what the value is: the value counts as stated only
    with them beside it."""
    values: tuple[str, ...]
    """Its values in the order they were stated; the last is the current one."""
    seqs: tuple[int, ...] = ()
    """The message each value was stated in."""

    @property
    def value(self) -> str:
        return self.values[-1]


@dataclass(frozen=True)
class Topic:
    """A kind of explicit fact: how it is stated and asked for."""

    kind: str
    speaker: str
    """``user`` or ``assistant``."""
    statement: str
    """The sentence stating it, with ``{value}``."""
    query: str
    subject: tuple[str, ...]
    values: Callable[[random.Random], str]


def _number(low: int, high: int, unit: str = "") -> Callable[[random.Random], str]:
    return lambda rng: f"{rng.randrange(low, high)}{unit}"


def _pick(*options: str) -> Callable[[random.Random], str]:
    return lambda rng: rng.choice(options)


def _ident(prefix: str, digits: int) -> Callable[[random.Random], str]:
    return lambda rng: f"{prefix}{rng.randrange(10 ** (digits - 1), 10**digits)}"


REGIONS = ("eu", "us", "ap")
STAGES = ("beta", "canary", "ramp")
TOPICS = (
    # Constraints the user sets.
    Topic("constraint", "user",
          "Hard constraint from the client: the search endpoint's p95 latency must stay under "
          "{value}.", "search endpoint latency limit", ("search", "endpoint", "latency"),
          _number(130, 480, " ms")),
    Topic("constraint", "user",
          "Compliance rule: any refund above {value} needs a manual review, never auto-approve "
          "it.", "refund amount needing manual review", ("refund", "manual", "review"),
          _number(1100, 4900, " EUR")),
    Topic("constraint", "user",
          "Keep in mind that the settlement job must finish before {value}, the bank "
          "cut-off.", "settlement job deadline", ("settlement", "job"),
          _pick("04:15 UTC", "04:45 UTC", "05:20 UTC", "05:40 UTC", "06:10 UTC")),
    Topic("constraint", "user",
          "The webhook relay may send at most {value} to any merchant.",
          "webhook relay rate limit per merchant", ("webhook", "relay", "merchant"),
          _number(11, 97, " requests per second")),
    Topic("constraint", "user",
          "We must keep supporting Python {value} on the batch hosts until the migration.",
          "oldest python version to support on the batch hosts", ("python", "batch", "hosts"),
          _pick("3.9.18", "3.10.13", "3.10.14", "3.11.8")),
    Topic("constraint", "user",
          "Do not touch the {value} table: the ledger team owns its schema.",
          "table owned by the ledger team we must not touch", ("ledger", "team", "table"),
          _pick("ledger_entries_v2", "journal_lines_archive", "posting_batches_v3")),
    Topic("constraint", "user",
          "Card numbers may be kept in logs for at most {value} before they are scrubbed.",
          "retention of card numbers in logs", ("card", "numbers", "logs"),
          _pick("36 hours", "18 hours", "90 minutes", "7 hours")),
    # Identifiers the user gives.
    Topic("identifier", "user",
          "For the record, the incident ticket for the double-charge bug is {value}.",
          "ticket for the double charge bug", ("ticket", "double", "charge"), _ident("INC-", 5)),
    Topic("identifier", "user",
          "Use the service account {value} for anything that talks to the bank gateway.",
          "service account for the bank gateway", ("service", "account", "bank", "gateway"),
          lambda rng: f"svc-bankgw-{rng.randrange(10, 99)}@acme-pay.iam"),
    Topic("identifier", "user",
          "The merchant who reported the missing payouts is {value}.",
          "merchant who reported missing payouts", ("merchant", "payouts"), _ident("MER-", 6)),
    Topic("identifier", "user",
          "The last good deploy of the checkout service was commit {value}.",
          "last good deploy commit of the checkout service", ("deploy", "checkout", "commit"),
          lambda rng: f"{rng.getrandbits(28):07x}"),
    Topic("identifier", "user",
          "Settlement files land in the bucket {value}, nowhere else.",
          "bucket where settlement files land", ("settlement", "files", "bucket"),
          lambda rng: f"s3://acme-settle-{rng.choice(REGIONS)}-{rng.randrange(100, 999)}"),
    Topic("identifier", "user",
          "The feature flag for the new checkout flow is {value}.",
          "feature flag of the new checkout flow", ("feature", "flag", "checkout"),
          lambda rng: f"checkout_flow_v{rng.randrange(3, 9)}_{rng.choice(STAGES)}"),
    # Numbers the user gives.
    Topic("number", "user",
          "The importer's batch size has to be {value} rows, the bank's API rejects more.",
          "importer batch size", ("importer", "batch", "size"), _number(1100, 9800)),
    Topic("number", "user",
          "Our monthly budget for the fraud scoring API is {value} USD.",
          "monthly budget for the fraud scoring api", ("budget", "fraud", "scoring"),
          _number(1200, 9900)),
    Topic("number", "user",
          "The reconciliation tolerance is {value}, anything above is an alert.",
          "reconciliation tolerance per batch", ("reconciliation", "tolerance"),
          _number(13, 97, " cents per batch")),
    Topic("number", "user",
          "We expect about {value} payouts per day at peak after the launch.",
          "expected payouts per day at peak", ("payouts", "peak"), _number(12000, 98000)),
    Topic("number", "user",
          "The chargeback window we honour is {value} from the capture.",
          "chargeback window in days", ("chargeback", "window"), _number(41, 179, " days")),
    # Paths, from the user or found by the agent.
    Topic("path", "user",
          "The fee rules that legal signed off live in {value}; read them before changing fees.",
          "file with the fee rules legal signed off", ("fee", "rules", "legal"),
          _pick("docs/legal/fee_rules_2026.md", "policy/fees/approved_rules.yaml",
                "docs/compliance/fee-schedule-v4.md")),
    Topic("path", "assistant",
          "I found it: the root cause of the rounding bug is in {value}.",
          "file with the root cause of the rounding bug", ("root", "cause", "rounding", "bug"),
          _pick("src/payments/money/round_half.py", "src/payments/fx/convert_amounts.py",
                "src/payments/ledger/totals_calc.py")),
    Topic("path", "assistant",
          "The flaky settlement test is {value}; it depends on the wall clock.",
          "flaky settlement test file", ("flaky", "settlement", "test"),
          _pick("tests/settlement/test_close_batch.py", "tests/settlement/test_cutoff_window.py",
                "tests/integration/test_settle_daily.py")),
    Topic("path", "user",
          "Put the new migration for the payout schedule in {value}.",
          "where the payout schedule migration goes", ("payout", "schedule", "migration"),
          _pick("migrations/2026_11_payout_schedule.sql", "db/migrate/0142_payout_schedule.py",
                "schema/changes/payout_sched_11.sql")),
    Topic("path", "user",
          "The runbook for failed settlements is {value}; follow it step by step.",
          "runbook for failed settlements", ("runbook", "failed", "settlements"),
          _pick("docs/runbooks/settlement_failures.md", "ops/runbooks/failed-settlement.md",
                "docs/oncall/settlements_failed.md")),
    Topic("path", "assistant",
          "The duplicated currency table lives in {value}, which is what the importer reads.",
          "where the duplicated currency table lives", ("duplicated", "currency", "table"),
          _pick("data/fx/currencies_copy.csv", "src/payments/fx/static_currencies.json",
                "fixtures/currency_table_dup.yaml")),
    Topic("number", "user",
          "The fraud score threshold is {value}: anything above it is held for review.",
          "fraud score threshold", ("fraud", "score", "threshold"),
          lambda rng: f"0.{rng.randrange(7000, 9900)}"),
    # Decisions the agent or the user states.
    Topic("decision", "assistant",
          "Decision: for the notifier's event queue we will use {value}.",
          "what we decided for the notifier event queue", ("notifier", "event", "queue"),
          _pick("NATS JetStream", "SQS FIFO queues", "Redis Streams with consumer groups")),
    Topic("decision", "assistant",
          "We agreed that the export files will be written as {value}.",
          "format decided for the export files", ("export", "files"),
          _pick("Parquet with zstd", "gzipped NDJSON", "Avro with a registry")),
    Topic("decision", "user",
          "Let's settle it: ledger writes take {value}, nothing else.",
          "locking decided for ledger writes", ("ledger", "writes"),
          _pick("advisory locks per account", "SELECT FOR UPDATE SKIP LOCKED",
                "an optimistic version column")),
    Topic("decision", "assistant",
          "I chose {value} for the PDF invoices, it handles the Arabic fonts.",
          "library chosen for the pdf invoices", ("pdf", "invoices"),
          _pick("WeasyPrint", "ReportLab Platypus", "Typst templates")),
    Topic("decision", "user",
          "Decided: the retry policy of the payout sender is {value}.",
          "retry policy decided for the payout sender", ("retry", "policy", "payout", "sender"),
          _pick("exponential backoff capped at 10 minutes", "three tries then a dead letter",
                "a fixed 30 second delay, five tries")),
)  # fmt: skip

RESTATED = (
    Topic("restated", "user", "The release branch for this sprint is {value}.",
          "current release branch", ("release", "branch"),
          lambda rng: f"release/2026.{rng.randrange(10, 99)}"),
    Topic("restated", "user", "The code freeze is on {value}.",
          "date of the code freeze", ("code", "freeze"),
          lambda rng: f"2027-0{rng.randrange(1, 9)}-{rng.randrange(10, 28)}"),
    Topic("restated", "user", "The on-call engineer for payouts this week is {value}.",
          "on-call engineer for payouts", ("call", "engineer", "payouts"),
          _pick("Ines Haddad", "Tomasz Wrobel", "Aiko Tanaka", "Femi Adeyemi", "Lucia Ferraro")),
    Topic("restated", "user", "The staging environment for the demo is at {value}.",
          "url of the staging environment for the demo", ("staging", "demo"),
          lambda rng: f"https://demo-{rng.randrange(100, 999)}.stg.acme-pay.dev"),
)  # fmt: skip
CHANGED = ("Change of plan: ", "Update: ", "Correction, it changed: ", "Heads up, new value: ")

ENVIRONMENTS = (
    ("staging", "STG", "stg"),
    ("production", "PROD", "prod"),
    ("development", "DEV", "dev"),
)
COMPONENTS = (
    ("database", "DB"),
    ("cache", "CACHE"),
    ("queue", "QUEUE"),
    ("repository", "REPO"),
    ("search", "SEARCH"),
    ("ledger", "LEDGER"),
)
ATTRIBUTES = (
    ("host", "HOST"),
    ("port", "PORT"),
    ("password", "PWD"),
    ("address", "ADDR"),
    ("user", "USER"),
    ("directory", "DIR"),
)
SPELLINGS = ("env", "json", "yaml", "dotted")
_OTHER_KEYS = (
    "LOG_LEVEL", "WORKER_COUNT", "FEATURE_FLAGS", "TIMEOUT_MS", "REGION", "TRACE_RATE",
    "GUNICORN_THREADS", "SENTRY_SAMPLE", "LOCALE", "TZ", "METRICS_PREFIX", "BATCH_WINDOW",
)  # fmt: skip


@dataclass(frozen=True)
class Setting:
    """A configuration setting: environment, component and attribute (indices)."""

    environment: int
    component: int
    attribute: int

    @property
    def query(self) -> str:
        return " ".join(
            (
                ENVIRONMENTS[self.environment][0],
                COMPONENTS[self.component][0],
                ATTRIBUTES[self.attribute][0],
            )
        )

    def lines(self, value: str, spelling: str) -> list[str]:
        """The setting as a configuration file in ``spelling`` states it."""
        _, env, short = ENVIRONMENTS[self.environment]
        component = COMPONENTS[self.component][1]
        attribute = ATTRIBUTES[self.attribute][1]
        if spelling == "env":
            return [f"{env}_{component}_{attribute}={value}"]
        if spelling == "json":
            return [f'  "{short}{component.capitalize()}{attribute.capitalize()}": "{value}"']
        if spelling == "yaml":
            return [f"{short}:", f"  {component.lower()}:", f"    {attribute.lower()}: {value}"]
        return [f"{short}.{component.lower()}.{attribute.lower()} = {value}"]


def _setting_value(rng: random.Random, attribute: int) -> str:
    name = ATTRIBUTES[attribute][0]
    if name in ("host", "address"):
        return f"10.{rng.randrange(16, 250)}.{rng.randrange(256)}.{rng.randrange(2, 250)}"
    if name == "port":
        return str(rng.randrange(20000, 29999))
    if name == "user":
        return f"svc_{rng.choice(('kiwi', 'lark', 'moss', 'pike', 'wren'))}{rng.randrange(10, 99)}"
    if name == "directory":
        volume = f"{rng.choice(('vol', 'data', 'mnt'))}{rng.randrange(2, 9)}"
        return f"/srv/{volume}/{rng.choice(('spool', 'blobs', 'work'))}"
    return "".join(
        rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghjkmnpqrstuvwxyz23456789") for _ in range(14)
    )


# --- filler ------------------------------------------------------------------------------------

_NAMES = ("payout", "ledger", "refund", "capture", "merchant", "invoice", "batch", "account")
_TASKS = (
    "Look into why {a} totals drift after the nightly run.",
    "Add pagination to the {a} export endpoint.",
    "The {a} service logs a warning on every request, find out why.",
    "Write tests for the {a} reconciliation edge cases.",
    "Refactor the {a} client so it retries on timeouts.",
    "Check what the {a} worker does when the queue is empty.",
    "Review the error handling in the {a} module.",
    "Make the {a} report faster, it takes minutes.",
)
_ANSWERS = (
    "Done: the {a} change is in, tests pass.",
    "I updated the {a} module and added two tests; all green.",
    "The {a} issue is fixed; the cause was a missing await.",
    "Finished the {a} work. Nothing else stands out in the logs.",
)


def _code(rng: random.Random, size: int) -> str:
    lines: list[str] = []
    while sum(len(x) + 1 for x in lines) < size:
        a, b = rng.choice(_NAMES), rng.choice(_NAMES)
        lines += [
            f"def {a}_{b}_{rng.randrange(1, 99)}(self, {b}: int = {rng.randrange(0, 99)}) -> int:",
            f'    """Return the {a} count for one {b}."""',
            f"    return self.{a}s.get({b}, 0) + {rng.randrange(0, 9)}",
            "",
        ]
    return "\n".join(lines)


def _log(rng: random.Random, size: int) -> str:
    lines: list[str] = []
    while sum(len(x) + 1 for x in lines) < size:
        a = rng.choice(_NAMES)
        level = rng.choice(("INFO", "INFO", "INFO", "DEBUG", "WARN"))
        lines.append(
            f"2026-11-{rng.randrange(1, 28):02d} {rng.randrange(24):02d}:{rng.randrange(60):02d} "
            f"{level} {a}.worker handled {rng.randrange(1, 999)} items "
            f"in 0.{rng.randrange(1, 999):03d}s"
        )
    return "\n".join(lines)


def _json(rng: random.Random, size: int) -> str:
    rows: list[dict[str, object]] = []
    while len(json.dumps(rows)) < size:
        rows.append(
            {
                "id": rng.randrange(1, 999),
                "kind": rng.choice(_NAMES),
                "state": rng.choice(("open", "settled", "failed", "pending")),
                "amount": round(rng.random() * 999, 2),
            }
        )
    return json.dumps({"items": rows}, indent=1)


def _tests(rng: random.Random, size: int) -> str:
    lines = ["============================= test session starts =============================="]
    while sum(len(x) + 1 for x in lines) < size:
        a = rng.choice(_NAMES)
        lines.append(
            f"tests/{a}/test_{rng.choice(_NAMES)}_{rng.randrange(1, 99)}.py ........ "
            f"[ {rng.randrange(1, 99)}%]"
        )
    lines.append(
        f"========== {rng.randrange(40, 400)} passed in 3.{rng.randrange(10, 99)}s =========="
    )
    return "\n".join(lines)


Args = Callable[[random.Random], dict[str, object]]
Text = Callable[[random.Random, int], str]


def _page(rng: random.Random) -> dict[str, object]:
    return {"url": f"http://localhost:8000/internal/{rng.choice(_NAMES)}s?page={rng.randrange(9)}"}


_OUTPUTS: tuple[tuple[str, Args, Text], ...] = (
    ("read_file", lambda rng: {"path": f"src/payments/{rng.choice(_NAMES)}.py"}, _code),
    ("grep", lambda rng: {"pattern": f"{rng.choice(_NAMES)}_total", "path": "src/"}, _code),
    ("shell", lambda rng: {"command": f"tail -n 200 /var/log/{rng.choice(_NAMES)}.log"}, _log),
    ("http_get", _page, _json),
    ("run_tests", lambda rng: {"target": f"tests/{rng.choice(_NAMES)}"}, _tests),
)


def _config(rng: random.Random, lines: list[str], spelling: str) -> str:
    """A configuration file in ``spelling``: ``lines`` among other keys."""
    keys = rng.sample(_OTHER_KEYS, rng.randrange(6, len(_OTHER_KEYS)))
    other = [_other_key(key, rng.randrange(1, 500), spelling) for key in keys]
    at = rng.randrange(len(other) + 1)
    every = [*other[:at], *lines, *other[at:]]
    return "{\n" + ",\n".join(every) + "\n}" if spelling == "json" else "\n".join(every)


def _other_key(key: str, value: int, spelling: str) -> str:
    if spelling == "env":
        return f"{key}={value}"
    if spelling == "json":
        first, *rest = key.lower().split("_")
        return f'  "{first}{"".join(word.capitalize() for word in rest)}": {value}'
    if spelling == "yaml":
        return f"{key.lower()}: {value}"
    return f"app.{key.lower()} = {value}"


# --- the session ---------------------------------------------------------------------------------

NEAR_CHARS = 80
"""A value counts as stated when the words saying what it is stand within this many characters
of it (about a line), in the same text."""


def occurrences(text: str, value: str) -> Iterator[int]:
    """Where ``value`` stands in ``text`` whole (``10.4.7.21`` is not in ``10.4.7.215``)."""
    for match in re.finditer(rf"(?<!\w){re.escape(value)}(?!\w)", text):
        yield match.start()


def words_near(text: str, at: int, value: str) -> set[str]:
    """Recall's terms of the words within ``NEAR_CHARS`` of ``value`` at ``at`` (its own words
    left out: ``db-stg-4`` does not say it is the staging database host)."""
    end = at + len(value)
    around = f"{text[max(0, at - NEAR_CHARS) : at]} {text[end : end + NEAR_CHARS]}"
    return set(query_words(around))


def stated(text: str, value: str, subject: tuple[str, ...]) -> list[int]:
    """Where ``text`` states ``value`` with every word of ``subject`` beside it."""
    return [at for at in occurrences(text, value) if set(subject) <= words_near(text, at, value)]


@dataclass(frozen=True)
class _Planted:
    """A fact being planted: its values and what states them (a topic or a setting)."""

    kind: str
    category: str
    query: str
    subject: tuple[str, ...]
    values: list[str]
    carrier: Topic | Setting

    @property
    def speaker(self) -> str:
        return "tool" if isinstance(self.carrier, Setting) else self.carrier.speaker

    def statement(self, value: int, rng: random.Random) -> str:
        assert isinstance(self.carrier, Topic)
        sentence = self.carrier.statement.format(value=self.values[value])
        return rng.choice(CHANGED) + sentence[0].lower() + sentence[1:] if value else sentence


@dataclass
class _Builder:
    rng: random.Random
    output_bytes: tuple[int, int]
    messages: list[ModelMessage] = field(default_factory=list)
    clock: datetime = START
    calls: int = 0

    def tick(self) -> datetime:
        self.clock += timedelta(seconds=self.rng.randrange(5, 90))
        return self.clock

    def user(self, text: str) -> int:
        self.messages.append(ModelRequest(parts=[UserPromptPart(text, timestamp=self.tick())]))
        return len(self.messages) - 1

    def answer(self, text: str) -> int:
        self.messages.append(ModelResponse(parts=[TextPart(text)], timestamp=self.tick()))
        return len(self.messages) - 1

    def call(self, tool: str, args: dict[str, object], output: str) -> int:
        """One tool iteration; the number of the message holding its output."""
        self.calls += 1
        call_id = f"call-{self.calls}"
        call = ToolCallPart(tool, args, call_id)
        self.messages.append(ModelResponse(parts=[call], timestamp=self.tick()))
        result = ToolReturnPart(tool, output, call_id, timestamp=self.tick())
        self.messages.append(ModelRequest(parts=[result]))
        return len(self.messages) - 1

    def filler_call(self) -> None:
        tool, args, text = self.rng.choice(_OUTPUTS)
        self.call(tool, args(self.rng), text(self.rng, self.rng.randrange(*self.output_bytes)))

    def config_read(self, setting: Setting, value: str, spelling: str) -> int:
        text = _config(self.rng, setting.lines(value, spelling), spelling)
        env = ENVIRONMENTS[setting.environment][2]
        extension = "json" if spelling == "json" else "yaml" if spelling == "yaml" else "conf"
        path = f"deploy/{env}/{COMPONENTS[setting.component][0]}.{extension}"
        return self.call("read_file", {"path": path}, text)


def session(
    seed: int,
    *,
    turns: int = 120,
    explicit_per_kind: int = 5,
    settings: int = 24,
    superseded: int = 8,
    output_bytes: tuple[int, int] = (300, 6_000),
) -> tuple[list[ModelMessage], list[Fact]]:
    """A session of ``turns`` turns and the facts planted in it, ending with the user's
    request the last governed request answers."""
    rng = random.Random(seed)
    planned = _plan(rng, explicit_per_kind, settings, superseded)
    # Each value is stated in a turn spread over the session; a newer value at least a tenth
    # of the session after the one it replaces.
    gap = max(1, turns // 10)
    schedule: dict[int, list[tuple[int, int]]] = {}
    for number, fact in enumerate(planned):
        turn = rng.randrange(0, turns - gap * (len(fact.values) - 1))
        schedule.setdefault(turn, []).append((number, 0))
        if len(fact.values) > 1:
            schedule.setdefault(rng.randrange(turn + gap, turns), []).append((number, 1))

    build = _Builder(rng, output_bytes)
    build.messages.append(
        ModelRequest(
            parts=[SystemPromptPart(SYSTEM), UserPromptPart("Let's start with the payout backlog.")]
        )
    )
    build.answer("Reading the payout queue first.")
    seqs: dict[tuple[int, int], int] = {}
    for turn in range(turns):
        plans = schedule.get(turn, [])
        by = {
            who: [p for p in plans if planned[p[0]].speaker == who]
            for who in ("user", "tool", "assistant")
        }
        subject = rng.choice(_NAMES)
        task = rng.choice(_TASKS).format(a=subject)
        said = " ".join(planned[n].statement(v, rng) for n, v in by["user"])
        at = build.user(f"{said} {task}" if said else task)
        seqs.update({plan: at for plan in by["user"]})
        shown = by["tool"]
        for i in range(max(rng.randrange(1, 6), len(shown))):
            if i < len(shown):
                n, v = shown[i]
                setting = planned[n].carrier
                assert isinstance(setting, Setting)
                spelling = SPELLINGS[(n + v) % len(SPELLINGS)]
                seqs[shown[i]] = build.config_read(setting, planned[n].values[v], spelling)
            else:
                build.filler_call()
        told = [planned[n].statement(v, rng) for n, v in by["assistant"]]
        at = build.answer(" ".join([rng.choice(_ANSWERS).format(a=subject), *told]))
        seqs.update({plan: at for plan in by["assistant"]})
    build.user("Before we stop for today: where do things stand, and what should I keep in mind?")

    facts = [
        Fact(
            p.kind,
            p.category,
            p.query,
            p.subject,
            tuple(p.values),
            tuple(seqs[(n, v)] for v in range(len(p.values))),
        )
        for n, p in enumerate(planned)
    ]
    _check(build.messages, facts)
    return build.messages, facts


def _plan(
    rng: random.Random, explicit_per_kind: int, settings: int, superseded: int
) -> list[_Planted]:
    """The facts of a session, each value distinct from every other."""
    used: set[str] = set()

    def fresh(draw: Callable[[], str]) -> str:
        value = draw()
        while value in used:
            value = draw()
        used.add(value)
        return value

    planned: list[_Planted] = []
    for kind in sorted({t.kind for t in TOPICS}):
        for topic in rng.sample([t for t in TOPICS if t.kind == kind], explicit_per_kind):
            value = fresh(lambda t=topic: t.values(rng))
            planned.append(_Planted(kind, EXPLICIT, topic.query, topic.subject, [value], topic))
    every = [
        Setting(e, c, a)
        for e in range(len(ENVIRONMENTS))
        for c in range(len(COMPONENTS))
        for a in range(len(ATTRIBUTES))
    ]
    chosen = rng.sample(every, settings + superseded // 2)
    for number, setting in enumerate(chosen):
        reconfigured = number >= settings
        values = [
            fresh(lambda s=setting: _setting_value(rng, s.attribute))
            for _ in range(2 if reconfigured else 1)
        ]
        kind, category = ("reconfigured", SUPERSEDED) if reconfigured else ("setting", IMPLICIT)
        words = tuple(setting.query.split())
        planned.append(_Planted(kind, category, setting.query, words, values, setting))
    for topic in rng.sample(RESTATED, superseded - superseded // 2):
        values = [fresh(lambda t=topic: t.values(rng)) for _ in range(2)]
        planned.append(_Planted("restated", SUPERSEDED, topic.query, topic.subject, values, topic))
    return planned


def texts(messages: list[ModelMessage]) -> Iterator[str]:
    """Every text of a history a model reads: prompts, outputs, calls' arguments, answers."""
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                yield part.args if isinstance(part.args, str) else json.dumps(part.args)
            else:
                content = getattr(part, "content", None)
                if isinstance(content, str):
                    yield content
                elif content is not None:
                    yield json.dumps(content, default=str)


def _check(messages: list[ModelMessage], facts: list[Fact]) -> None:
    """Each value occurs only in the message it was planted in, stated with its subject: a
    value found is that fact told, a value found with its subject is that fact understood."""
    planted = {
        value: (fact, seq)
        for fact in facts
        for value, seq in zip(fact.values, fact.seqs, strict=True)
    }
    values = sorted(planted, key=len, reverse=True)
    anywhere = re.compile(rf"(?<!\w)(?:{'|'.join(map(re.escape, values))})(?!\w)")
    found: dict[str, list[int]] = {value: [] for value in values}
    for seq, message in enumerate(messages):
        for text in texts([message]):
            for match in anywhere.finditer(text):
                found[match.group()].append(seq)
                fact = planted[match.group()][0]
                assert stated(text, match.group(), fact.subject), (match.group(), fact)
    for value, seqs in found.items():
        fact, seq = planted[value]
        assert set(fact.subject) <= set(query_words(fact.query)), fact
        assert seqs == [seq], f"{value!r} ({fact.query}) found in {seqs}, planted in {seq}"
