"""Deterministic demo sessions: agentic coding work as a real agent's log would hold it.

Turns of user requests, assistant tool calls (some in parallel), tool results from a few
hundred bytes to tens of kilobytes (test logs, files, build output), validation retries, and
turns interrupted with their tool calls left unanswered. Same seed, same sessions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

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


@dataclass(frozen=True)
class DemoSession:
    title: str
    model: str
    turns: int
    context_window: int | None = None
    seed: int = 0


DEMO_SESSIONS = (
    DemoSession("Fix the flaky tokenizer test in the parser package", "openai:gpt-4o", 40, seed=1),
    DemoSession(
        "Migrate the billing service to PostgreSQL 16", "anthropic:claude-sonnet-4-5", 55, seed=2
    ),
    DemoSession(
        "Memory leak in the websocket gateway (small 32k window)",
        "openai:gpt-4.1",
        30,
        context_window=32_000,
        seed=3,
    ),
    DemoSession("Explain the retry policy of the job runner", "openai:gpt-4o-mini", 3, seed=4),
)

SYSTEM_PROMPT = (
    "You are a careful software engineer working in the user's repository. Use the tools to "
    "read, search and run code before you change it. Keep answers short and precise."
)

_MODULES = ("parser", "billing", "gateway", "jobs", "auth", "storage", "api", "metrics")
_WORDS = (
    "token",
    "buffer",
    "session",
    "retry",
    "invoice",
    "ledger",
    "frame",
    "socket",
    "cursor",
    "batch",
    "window",
    "offset",
    "schema",
    "payload",
    "handler",
    "queue",
    "lease",
    "span",
)
_REQUESTS = (
    "The CI run on main failed in {module}; find out why and fix it.",
    "Add a regression test for the {word} handling in {module}.",
    "Why does {module} allocate a new {word} on every request? Make it reuse one.",
    "Rename `{word}_count` to `{word}_total` across {module} and keep the API compatible.",
    "The {word} timeout in {module} is hard-coded; make it configurable with a default of 30s.",
    "Run the full test suite and summarise what is still failing.",
    "Check the migration for {module}: does it lock the {word} table for long?",
    "Profile {module} under load and tell me where the time goes.",
)


@dataclass
class _Writer:
    """Builds one session's messages with a shared clock and random source."""

    rng: random.Random
    model_name: str
    clock: datetime = field(default_factory=lambda: datetime(2026, 11, 2, 9, 0, tzinfo=UTC))
    messages: list[ModelMessage] = field(default_factory=list)
    calls: int = 0

    def tick(self, seconds: tuple[int, int] = (2, 40)) -> datetime:
        self.clock += timedelta(seconds=self.rng.randint(*seconds))
        return self.clock

    def call_id(self) -> str:
        self.calls += 1
        return f"call_{self.rng.getrandbits(48):012x}{self.calls:03d}"

    def word(self) -> str:
        return self.rng.choice(_WORDS)

    def module(self) -> str:
        return self.rng.choice(_MODULES)

    def path(self) -> str:
        kind = self.rng.choice(("core", "io", "utils", "models"))
        return f"src/{self.module()}/{self.word()}_{kind}.py"


def _source_file(w: _Writer, path: str, functions: int) -> str:
    lines = [
        f'"""{path}: {w.word()} and {w.word()} handling."""',
        "",
        "from __future__ import annotations",
        "",
    ]
    for i in range(functions):
        name = f"{w.word()}_{w.word()}_{i}"
        lines += [
            "",
            f"def {name}({w.word()}: bytes, *, limit: int = {w.rng.randint(8, 4096)}) -> list:",
            f'    """Split the {w.word()} into frames no larger than limit."""',
            "    out: list[int] = []",
            f"    for index, value in enumerate({w.word()}):",
            "        if index >= limit:",
            f'            raise ValueError(f"{w.word()} too long: {{index}} >= {{limit}}")',
            "        out.append(value ^ 0x5A)",
            "    return out",
        ]
    return "\n".join(lines) + "\n"


def _pytest_log(w: _Writer, tests: int, failing: int) -> str:
    module = w.module()
    lines = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.12.1, pytest-9.2.0, pluggy-1.6.0",
        f"collected {tests} items",
        "",
    ]
    failed = set(w.rng.sample(range(tests), failing))
    for i in range(tests):
        status = "FAILED" if i in failed else "PASSED"
        lines.append(
            f"tests/{module}/test_{w.word()}.py::test_{w.word()}_{i} {status} "
            f"[{100 * (i + 1) // tests:3d}%]"
        )
    for i in sorted(failed):
        lines += [
            "",
            f"_________________________ test_{w.word()}_{i} _________________________",
            f"    def test_{w.word()}_{i}():",
            f">       assert split_{w.word()}(b'x' * {w.rng.randint(10, 999)}) == expected",
            "E       AssertionError: assert [90, 90, 90] == [90, 90]",
            f"E         Left contains one more item: {w.rng.randint(0, 255)}",
            "",
            f"src/{module}/{w.word()}_core.py:{w.rng.randint(20, 400)}: AssertionError",
        ]
    seconds = w.rng.uniform(3, 90)
    lines.append(
        f"=========== {failing} failed, {tests - failing} passed in {seconds:.2f}s ==========="
    )
    return "\n".join(lines)


def _grep(w: _Writer, pattern: str, hits: int) -> str:
    return "\n".join(
        f"{w.path()}:{w.rng.randint(1, 900)}:    {pattern} = {w.word()}.get({w.rng.randint(0, 99)})"
        for _ in range(hits)
    )


def _build_log(w: _Writer, steps: int) -> str:
    lines = []
    for i in range(steps):
        lines.append(
            f"#{i} [{w.module()} {i}/{steps}] RUN pip install -r requirements/{w.word()}.txt"
        )
        lines += [
            f"#{i} {w.rng.uniform(0, 40):.3f} Collecting {w.word()}-{w.word()}"
            f"=={w.rng.randint(0, 9)}.{w.rng.randint(0, 30)}.{w.rng.randint(0, 9)}"
            for _ in range(w.rng.randint(3, 12))
        ]
        lines.append(f"#{i} DONE {w.rng.uniform(0.1, 30):.1f}s")
    return "\n".join(lines)


def _listing(w: _Writer, entries: int) -> str:
    return "\n".join(sorted({w.path() for _ in range(entries)}))


def _tool_result(w: _Writer, call: ToolCallPart) -> str:
    """A plausible result for each demo tool, sized like real ones (200 B to ~60 KB)."""
    size = w.rng.random()
    match call.tool_name:
        case "read_file":
            return _source_file(
                w, str(call.args_as_dict()["path"]), 3 if size < 0.6 else 40 if size < 0.9 else 160
            )
        case "run_tests":
            return _pytest_log(w, 40 if size < 0.5 else 400, w.rng.randint(0, 4))
        case "grep":
            return _grep(w, str(call.args_as_dict()["pattern"]), 5 if size < 0.7 else 300)
        case "build":
            return _build_log(w, 4 if size < 0.5 else 60)
        case "list_files":
            return _listing(w, 20 if size < 0.8 else 600)
        case _:
            path = call.args_as_dict().get("path", w.path())
            return f"Applied edit to {path}: {w.rng.randint(1, 40)} lines changed."


def _tool_call(w: _Writer) -> ToolCallPart:
    tool = w.rng.choices(
        ("read_file", "run_tests", "grep", "build", "list_files", "edit_file"),
        weights=(30, 15, 20, 5, 8, 22),
    )[0]
    args: dict[str, object] = {}
    if tool in {"read_file", "edit_file"}:
        args["path"] = w.path()
    if tool == "edit_file":
        args |= {"old": f"{w.word()}_count", "new": f"{w.word()}_total"}
    if tool == "grep":
        args["pattern"] = f"{w.word()}_{w.word()}"
    if tool == "run_tests":
        args["selector"] = f"tests/{w.module()}"
    return ToolCallPart(tool, args, tool_call_id=w.call_id())


def _turn(w: _Writer, request: str, *, interrupted: bool) -> None:
    w.messages.append(ModelRequest(parts=[UserPromptPart(request, timestamp=w.tick((30, 600)))]))
    iterations = w.rng.randint(1, 6)
    for iteration in range(iterations):
        calls = [_tool_call(w) for _ in range(w.rng.choices((1, 2, 3), weights=(6, 3, 1))[0])]
        thought = (
            TextPart(f"Let me look at the {w.word()} handling first.") if iteration == 0 else None
        )
        w.messages.append(
            ModelResponse(
                parts=[p for p in (thought, *calls) if p is not None],
                model_name=w.model_name,
                timestamp=w.tick(),
            )
        )
        if interrupted and iteration == iterations - 1:
            return  # the user stopped the run: these calls never got their results
        parts: list[ToolReturnPart] = []
        for call in calls:
            if w.rng.random() < 0.05:
                # The tool refused the arguments and asked the model to call it again.
                path = call.args_as_dict().get("path", "that path")
                content = f"{path} does not exist; list the directory first"
                outcome: Literal["success", "retried"] = "retried"
            else:
                content, outcome = _tool_result(w, call), "success"
            parts.append(
                ToolReturnPart(
                    call.tool_name,
                    content,
                    tool_call_id=call.tool_call_id,
                    outcome=outcome,
                    timestamp=w.tick((1, 20)),
                )
            )
        w.messages.append(ModelRequest(parts=parts))
    w.messages.append(
        ModelResponse(
            parts=[
                TextPart(
                    f"Done. The {w.word()} in `{w.path()}` was rebuilt per call and is now reused, "
                    f"and `tests/{w.module()}` passes ({w.rng.randint(40, 400)} tests)."
                )
            ],
            model_name=w.model_name,
            timestamp=w.tick(),
        )
    )


def demo_messages(spec: DemoSession) -> list[ModelMessage]:
    """The full log of one demo session."""
    w = _Writer(random.Random(spec.seed), spec.model.rsplit(":", 1)[-1])
    w.messages.append(
        ModelRequest(
            parts=[
                SystemPromptPart(SYSTEM_PROMPT, timestamp=w.clock),
                UserPromptPart(spec.title, timestamp=w.clock),
            ]
        )
    )
    w.messages.append(
        ModelResponse(
            parts=[TextPart("I'll start by looking around the repository.")],
            model_name=w.model_name,
            timestamp=w.tick(),
        )
    )
    interrupted = False
    for turn in range(spec.turns):
        request = w.rng.choice(_REQUESTS).format(module=w.module(), word=w.word())
        if interrupted:
            request = f"Stop, that was the wrong module. {request}"
        interrupted = 0 < turn < spec.turns - 1 and w.rng.random() < 0.1
        _turn(w, request, interrupted=interrupted)
    return w.messages


# One short run built to show every action governance takes on what a request carries, under
# a policy that masks always (demo logs are well under their windows otherwise) and with
# automatic compaction off, so the actions stay in view rather than inside a summary.
TOUR = DemoSession("Tour: every governance action on one short run", "openai:gpt-4o", 0, seed=5)
TOUR_POLICY = {
    "masking": {"apply": "always", "keep_first": 2, "keep_last": 5},
    "compaction": {"auto": False},
}
TOUR_PINNED_REQUEST = "Keep to Python 3.12 syntax: the export runs on the 3.12 image."
"""The user message the tour pins (governance keeps a pinned message verbatim)."""


def tour_messages() -> list[ModelMessage]:
    """The tour's log: an output large enough to be evicted (read back with
    ``read_evicted_output``), an older long file truncated, a search run twice (the older copy
    deduplicated), an older test log masked, and a turn stopped with its call unanswered
    (repaired with a synthetic result)."""
    w = _Writer(random.Random(TOUR.seed), "gpt-4o")

    def ask(text: str, *, system: bool = False) -> None:
        parts: list[SystemPromptPart | UserPromptPart] = [UserPromptPart(text, timestamp=w.tick())]
        if system:
            parts.insert(0, SystemPromptPart(SYSTEM_PROMPT, timestamp=w.clock))
        w.messages.append(ModelRequest(parts=parts))

    def call(tool: str, args: dict[str, object], output: str | None) -> None:
        part = ToolCallPart(tool, args, tool_call_id=w.call_id())
        w.messages.append(ModelResponse(parts=[part], model_name=w.model_name, timestamp=w.tick()))
        if output is not None:
            result = ToolReturnPart(
                tool, output, tool_call_id=part.tool_call_id, timestamp=w.tick()
            )
            w.messages.append(ModelRequest(parts=[result]))

    def answer(text: str) -> None:
        w.messages.append(
            ModelResponse(parts=[TextPart(text)], model_name=w.model_name, timestamp=w.tick())
        )

    batch = _grep(w, "batch_size", 40)
    ask("The nightly export fails since Tuesday; find out why.", system=True)
    call("build", {"target": "export"}, _build_log(w, 260))  # ~40,000 tokens: evicted
    call("read_file", {"path": "src/export/job.py"}, _source_file(w, "src/export/job.py", 110))
    call("run_tests", {"selector": "tests/export"}, _pytest_log(w, 60, 2))  # masked
    call("grep", {"pattern": "batch_size"}, batch)
    answer("The build log is long; the failure is a batch size read as text. Fixing it.")
    ask(TOUR_PINNED_REQUEST)
    call("grep", {"pattern": "batch_size"}, batch)  # the same search again: deduplicated
    call("edit_file", {"path": "src/export/job.py"}, "Applied edit: 3 lines changed.")
    call("run_tests", {"selector": "tests/export"}, None)  # stopped: no result
    ask("Stop, run only the failing test first.")
    call("run_tests", {"selector": "tests/export/test_batch.py"}, _pytest_log(w, 6, 0))
    answer("`batch_size` is parsed as an int now and the export tests pass.")
    return w.messages
