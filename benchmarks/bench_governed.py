"""Governed context of a stored 20,000-message session against loading its whole log.

Run from the repository root (PostgreSQL recommended; without DATABASE_URL a throwaway SQLite
file is used):

    DATABASE_URL=postgres://... .venv/bin/python benchmarks/bench_governed.py --profile chatty

It stores one generated session (once per database and profile), then measures, each in a fresh
process so nothing is cached in Python:

* baseline: every payload of the log read from the database and parsed with
  ``ModelMessagesTypeAdapter`` (what a naive governed context would start with);
* first: ``governed_context(session)`` with its report in a fresh process, the session never
  governed before (no snapshot: planned from stored facts, payloads parsed only where kept,
  and the snapshot written for the next process);
* fresh: the same in another fresh process, the session governed before (as every session an
  agent appends to is: a worker refreshes the snapshot after appends);
* after an append: in a process that governed the session once (from the snapshot, its
  carried state then built in the background), one more message is appended and the governed
  context taken again;
* sent after an append: a fresh process appends an agent's turn (a tool call and its result)
  and sends the next request (``send_context``, as the API's ``/context`` does), its answer
  (messages and report, as JSON) included: continued from the last request sent, kept in the
  shared cache, and the new messages (``sessions.services.continuing``). A process before it
  sent the request before (untimed), so it was not an action;
* sent at an action: the same, the turn's outputs large enough to pass the budget, so the
  Governor acts and the whole history is governed;
* two processes taking turns: each has served the session once; then, turn after turn, one
  of them appends an agent's turn (a tool call and its result) and sends the next request
  (``send_context``, as the API's ``/context`` does, its answer included), then the other: each
  continues from the Governor state the other stored and its own carried work, stale by the
  other's appends. The median of the requests sent is timed.

Ratios are against the baseline measured in the same run. Results go to
benchmarks/results/governed-<profile>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

MESSAGES = 20_000
REPEATS = 3
TITLE = "benchmark: {profile} {messages}"


def setup_django() -> None:
    if not os.environ.get("DATABASE_URL"):
        path = Path(tempfile.gettempdir()) / "ctxhub-bench.sqlite3"
        os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()


def generated(profile: str, n: int) -> list:  # type: ignore[type-arg]
    from histories import HistoryGenerator

    # Chatty: short outputs (200-1,200 characters), the worst case for skipping payloads.
    sizes = (200, 1_200) if profile == "chatty" else (2_000, 60_000)
    stream = HistoryGenerator(seed=7, output_bytes=sizes).messages()
    return [next(stream) for _ in range(n)]


def stored_session(profile: str, n: int) -> str:
    """The benchmark session's id, storing it first if this database has none."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from sessions import services
    from sessions.models import AgentSession

    call_command("migrate", verbosity=0)
    title = TITLE.format(profile=profile, messages=n)
    found = AgentSession.objects.filter(title=title).first()
    if found is not None and found.messages.count() >= n:  # the append runs add a few
        return str(found.pk)
    owner, _ = get_user_model().objects.get_or_create(username="benchmark")
    session = AgentSession.objects.create(
        owner=owner,
        title=title,
        model="openai:gpt-4o",
        policy={"compaction": {"auto": False}},
    )
    messages = generated(profile, n)
    started = time.perf_counter()
    for start in range(0, n, 500):
        services.append_messages(session, messages[start : start + 500])
    print(f"stored {n} messages in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return str(session.pk)


def measure(what: str, session_id: str) -> float:
    """One measurement, in this (fresh) process."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from sessions import services
    from sessions.models import AgentSession, Message

    session = AgentSession.objects.get(pk=session_id)
    if what == "first":
        from sessions.models import GovernedSnapshot

        GovernedSnapshot.objects.filter(session=session).delete()
    if what == "baseline":
        started = time.perf_counter()
        payloads = list(
            Message.objects.filter(session=session)
            .order_by("seq")
            .values_list("payload", flat=True)
        )
        ModelMessagesTypeAdapter.validate_python(payloads)
        return time.perf_counter() - started
    if what in ("first", "fresh"):
        started = time.perf_counter()
        context = services.governed_context(session)
        context.report  # noqa: B018  (built on first access: part of the cost)
        return time.perf_counter() - started
    if what == "prepare":
        # Requests until one is no action (a request after a last resort acts again).
        for _ in range(5):
            services.append_messages(session, agent_turn(session))
            if services.send_context(session).acted is None:
                return 0.0
        raise SystemExit("the Governor kept acting")
    if what in ("send", "action"):
        services.append_messages(session, agent_turn(session, large=what == "action"))
        started = time.perf_counter()
        context = services.send_context(session)
        answer = context.messages_json() + context.report_json()  # the API's answer
        elapsed = time.perf_counter() - started
        print(
            f"{what}: {context.source}, acted {context.acted}, {len(answer):,} bytes",
            file=sys.stderr,
        )
        if what == "send" and context.source != "continued":
            raise SystemExit("the request after an append was not continued")
        if what == "action" and context.acted is None:
            raise SystemExit("the turn did not make the Governor act")
        return elapsed
    assert what == "append"
    services.governed_context(session).report  # noqa: B018  (this process governed it once)
    # Served from the snapshot, the process builds its carried state in the background; an
    # agent's next request comes after its model answered, by when that is done.
    from sessions.services.governed import wait_for_warm_up

    wait_for_warm_up(session)
    from histories import HistoryGenerator

    message = next(HistoryGenerator(seed=99).messages())
    services.append_message(session, message)
    started = time.perf_counter()
    context = services.governed_context(session)
    context.report  # noqa: B018
    return time.perf_counter() - started


def agent_turn(session: Any, *, large: bool = False) -> list[Any]:
    """An agent's turn: a response with tool calls and the request with their results; with
    ``large``, outputs enough to pass the history's budget (each under the eviction
    threshold, so none is evicted: the Governor must act)."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart

    from sessions.services.governed import session_policy, session_window

    calls = 1
    output = "x = 1\n" * 300
    if large:
        budget = session_policy(session).history_budget(session_window(session))
        calls = budget // 15_000 + 1
        output = "\n".join(f"value_{n} = {n} * {n}" for n in range(1_300))  # ~15k tokens
    base = f"bench_{time.monotonic_ns()}"
    ids = [f"{base}_{n}" for n in range(calls)]
    return [
        ModelResponse(parts=[ToolCallPart("read_file", {"path": "a.py"}, i) for i in ids]),
        ModelRequest(parts=[ToolReturnPart("read_file", output, i) for i in ids]),
    ]


ROUNDS = 20
"""Requests each of the two processes sends in the taking-turns measurement."""


def serve(session_id: str) -> None:
    """One of the two processes taking turns: ``warm`` sends a request untimed; ``turn N``
    appends an agent's turn and times the request sent after it."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart

    from sessions import services
    from sessions.models import AgentSession

    session = AgentSession.objects.get(pk=session_id)
    for line in sys.stdin:
        word, *rest = line.split()
        if word == "turn":
            call = f"bench_{rest[0]}"
            services.append_messages(
                session,
                [
                    ModelResponse(parts=[ToolCallPart("read_file", {"path": "a.py"}, call)]),
                    ModelRequest(parts=[ToolReturnPart("read_file", "x = 1\n" * 300, call)]),
                ],
            )
        started = time.perf_counter()
        context = services.send_context(session)
        context.messages_json() + context.report_json()  # the API's answer
        print(time.perf_counter() - started if word == "turn" else 0.0, flush=True)


def taking_turns(session_id: str) -> float:
    """The median time of a request sent by two processes taking turns (see the module)."""
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, "--serve", "--session", session_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for _ in range(2)
    ]

    def ask(process: subprocess.Popen[str], command: str) -> float:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(command + "\n")
        process.stdin.flush()
        return float(process.stdout.readline())

    try:
        for process in processes:
            ask(process, "warm")
        base = time.monotonic_ns()
        times = [ask(processes[n % 2], f"turn {base}_{n}") for n in range(2 * ROUNDS)]
    finally:
        for process in processes:
            assert process.stdin is not None
            process.stdin.close()
            process.wait()
    return statistics.median(times)


def in_fresh_process(what: str, session_id: str, script: str = __file__) -> float:
    """One measurement by ``script --measure``, in a process of its own."""
    out = subprocess.run(
        [sys.executable, script, "--measure", what, "--session", session_id],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", choices=["agentic", "chatty"], default="agentic")
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument(
        "--measure", choices=["baseline", "first", "fresh", "append", "prepare", "send", "action"]
    )
    parser.add_argument("--session")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    setup_django()
    if args.serve:
        serve(args.session)
        return
    if args.measure:
        print(measure(args.measure, args.session))
        return
    session_id = stored_session(args.profile, args.messages)
    results: dict[str, list[float]] = {
        "baseline": [],
        "first": [],
        "fresh": [],
        "append": [],
        "turns": [],
        "action": [],
        "send": [],
    }
    for _ in range(REPEATS):
        for what in results:
            if what == "turns":
                results[what].append(taking_turns(session_id))
                continue
            if what == "send":
                in_fresh_process("prepare", session_id)  # the request before: no action
            results[what].append(in_fresh_process(what, session_id))
    medians = {what: statistics.median(times) for what, times in results.items()}
    base = medians["baseline"]
    print(f"\n{args.profile} session, {args.messages:,} messages, medians of {REPEATS} runs\n")
    print("| measurement | median s | ratio to baseline | target |")
    print("|---|---:|---:|---:|")
    targets = {
        "baseline": "",
        "first": "",
        "fresh": "≤ 0.2",
        "append": "≤ 0.05",
        "turns": "≤ 0.05",
        "action": "≤ 0.5",
        "send": "≤ 0.05",
    }
    labels = {
        "baseline": "load + parse the whole log (baseline)",
        "first": "governed context + report, never governed before",
        "fresh": "governed context + report, fresh process",
        "append": "governed context + report after one append",
        "turns": "request sent + answer, two processes taking turns",
        "action": "request sent + answer, fresh process, at the Governor's action",
        "send": "request sent + answer after an append, fresh process",
    }
    for what, median in medians.items():
        print(f"| {labels[what]} | {median:.3f} | {median / base:.3f} | {targets[what]} |")
    write_results(f"governed-{args.profile}", args.profile, args.messages, results, medians)


def write_results(
    name: str,
    profile: str,
    messages: int,
    results: dict[str, list[float]],
    medians: dict[str, float],
) -> None:
    """benchmarks/results/<name>.json: every run, the medians and their ratios to the
    baseline."""
    out = ROOT / "benchmarks" / "results" / f"{name}.json"
    out.parent.mkdir(exist_ok=True)
    base = medians["baseline"]
    out.write_text(
        json.dumps(
            {
                "messages": messages,
                "profile": profile,
                "runs": results,
                "medians": medians,
                "ratios": {k: v / base for k, v in medians.items()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
