"""The full stack under load: concurrent external agents, and browsers watching them.

Run from the repository root; it starts everything itself (a throwaway PostgreSQL and Redis,
the production web server with 1 or 2 processes, a Celery worker) and stops it at the end:

    .venv/bin/python benchmarks/bench_load.py                    # C = 1, 10, 50, 200; 1 and 2 web
    .venv/bin/python benchmarks/bench_load.py --agents 50 --web 2 --seconds 10

For each number of web processes and each C:

* **healthz**: C clients calling ``/healthz`` in a loop (the process answers and reads the
  database once): the floor any request pays on this machine at this concurrency.
* **agents**: C external agents, each with its own key and session, doing what an agent does
  per turn: append a tool call and its ~4 KB result (one request, with ``Idempotency-Key`` and
  ``expected_seq``), then pull the governed context. A 503 or 429 must carry ``Retry-After``;
  the agent waits that long and retries the same request, as the client does. Afterwards every
  session must hold exactly the turns its agent sent, in order: nothing lost, duplicated or
  out of place.

Then **watchers**: 100 websocket clients watching 10 sessions (10 each, logged in as their
owner) while one agent per session appends a turn every half second: the time from sending an
append to the moment every watcher of its session has the new message.

Latencies are per request (p50/p95/p99, ms); operations/s counts appends and contexts answered
201/200. Results go to benchmarks/results/load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import websockets

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "load.json"
LOGS = ROOT / "test-artifacts" / "load"  # the servers' and worker's logs of the last run
OUTPUT = "x" * 60 + "\n"  # a 61-character line; 64 of them make a ~4 KB tool result


# --- the stack -----------------------------------------------------------------------------------


@contextlib.contextmanager
def services(work: Path) -> Iterator[dict[str, str]]:
    """PostgreSQL and Redis, started as the test command starts them (scripts/lib.sh)."""
    for binary in ("redis-server", "pg_ctl"):
        if not shutil.which(binary) and not list(
            Path("/usr/lib/postgresql").glob(f"*/bin/{binary}")
        ):
            sys.exit(f"{binary} not found: run scripts/test.sh once (it installs the services)")
    work.chmod(0o755)  # the PostgreSQL cluster below it belongs to another user when run as root
    script = 'set -e; . scripts/lib.sh; start_services "$1"; echo "$DATABASE_URL $REDIS_URL"'
    started = subprocess.run(
        ["bash", "-c", script, "_", str(work / "services")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    database, redis = started.stdout.split()
    import psycopg

    server, name = database.rsplit("/", 1)
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {"DATABASE_URL": database, "REDIS_URL": redis}
    finally:
        subprocess.run(
            ["bash", "-c", '. scripts/lib.sh; stop_services "$1"', "_", str(work / "services")],
            cwd=ROOT,
            check=False,
        )


def stack_env(work: Path, urls: dict[str, str]) -> dict[str, str]:
    """Production settings: DEBUG off, secure defaults, plain HTTP on loopback. The per-key
    rate limit is lifted: this measures capacity, not the limiter."""
    return {
        **os.environ,
        **urls,
        "CTXHUB_PRODUCTION": "true",
        "SECRET_KEY": "load-benchmark-" + "k" * 40,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "false",
        "CTXHUB_API_RATE_PER_MINUTE": "10000000",
        "CTXHUB_DATA_DIR": str(work / "var"),
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def process(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()


@contextlib.contextmanager
def web(
    env: dict[str, str], processes: int, log: Path = LOGS / "web.log"
) -> Iterator[tuple[str, int]]:
    """The web server's URL and process group (its output in ``log``)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["bash", "scripts/web.sh", f"127.0.0.1:{port}"]
    with process(args, {**env, "WEB_CONCURRENCY": str(processes)}, log) as server:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(log.read_text()[-3000:]) from None
                time.sleep(0.2)
        # Every process booted, not just the first (each answers on its own).
        time.sleep(2 * processes)
        yield url, server.pid


def cpu_seconds(groups: dict[str, int]) -> Counter[str]:
    """CPU time (user + system) used so far by each part of the stack on this machine: the
    process groups given (web, worker), PostgreSQL's and Redis's processes, and this client.
    Read from /proc, so Linux only; elsewhere the table's CPU columns stay empty."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    used: Counter[str] = Counter()
    by_group = {pgid: role for role, pgid in groups.items()}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        pid = int(stat.parent.name)
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :]
        fields = rest.split()
        group, cpu = int(fields[2]), (int(fields[11]) + int(fields[12])) / ticks
        if pid == os.getpid():
            used["client"] += cpu
        elif group in by_group:
            used[by_group[group]] += cpu
        elif name == "postgres":
            used["postgres"] += cpu
        elif name.startswith("redis-server"):
            used["redis"] += cpu
    return used


def setup_django(env: dict[str, str]) -> None:
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


# --- the agents ----------------------------------------------------------------------------------


@dataclass
class Agent:
    key: str
    session: str
    turns: int = 0


def make_agents(count: int, label: str) -> list[Agent]:
    from django.contrib.auth.models import User

    from sessions.api.keys import create_key
    from sessions.models import AgentSession

    owner, _ = User.objects.get_or_create(username="load")
    agents = []
    for i in range(count):
        _, key = create_key(owner, name=f"{label} {i}", scopes=["read", "write"])
        session = AgentSession.objects.create(
            owner=owner, title=f"{label} agent {i}", model="openai:gpt-4o"
        )
        agents.append(Agent(key, str(session.pk)))
    return agents


def turn_messages(agent: Agent, turn: int) -> list[dict[str, Any]]:
    call_id = f"call-{turn}"
    return [
        {
            "kind": "response",
            "parts": [
                {
                    "part_kind": "tool-call",
                    "tool_name": "read_file",
                    "args": {"path": f"src/module_{turn}.py"},
                    "tool_call_id": call_id,
                }
            ],
        },
        {
            "kind": "request",
            "parts": [
                {
                    "part_kind": "tool-return",
                    "tool_name": "read_file",
                    "content": f"# turn {turn}\n" + OUTPUT * 64,
                    "tool_call_id": call_id,
                }
            ],
        },
    ]


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: Counter[tuple[str, str]] = field(default_factory=Counter)
    without_retry_after: int = 0
    cpu: Counter[str] = field(default_factory=Counter)  # seconds per part of the stack

    def record(self, op: str, status: str, seconds: float) -> None:
        self.statuses[(op, status)] += 1
        if status in ("200", "201"):
            self.latencies[op].append(seconds)


async def call(
    client: aiohttp.ClientSession, stats: Stats, op: str, method: str, url: str, **kw: Any
) -> bytes | None:
    """One operation, retried as a client does: after a 503/429's Retry-After, or a lost
    connection (the same Idempotency-Key, so a retry stores nothing twice). The answer's body,
    or None if it was refused."""
    for _ in range(20):
        started = time.perf_counter()
        try:
            async with client.request(method, url, **kw) as response:
                body = await response.read()
        except (aiohttp.ClientError, TimeoutError) as error:
            stats.record(op, type(error).__name__, time.perf_counter() - started)
            await asyncio.sleep(1)
            continue
        stats.record(op, str(response.status), time.perf_counter() - started)
        if response.status in (429, 503):
            wait = response.headers.get("Retry-After")
            if wait is None:
                stats.without_retry_after += 1
            await asyncio.sleep(float(wait or 1))
            continue
        return body if response.status < 400 else None
    return None


async def run_agent(
    client: aiohttp.ClientSession, agent: Agent, stats: Stats, until: float
) -> None:
    headers = {"Authorization": f"Bearer {agent.key}"}
    base = f"/api/v1/sessions/{agent.session}"
    while time.monotonic() < until:
        turn = agent.turns
        body = {"messages": turn_messages(agent, turn), "expected_seq": 2 * turn}
        appended = await call(
            client,
            stats,
            "append",
            "POST",
            f"{base}/messages",
            json=body,
            headers={**headers, "Idempotency-Key": f"{agent.session}-{turn}"},
        )
        if appended is None:
            return  # a refusal the agent cannot retry: counted, and the session is checked
        agent.turns += 1
        await call(client, stats, "context", "GET", f"{base}/context", headers=headers)


async def warm_up(url: str, agents: list[Agent]) -> None:
    """A few turns per web process, unmeasured: each process's first requests open its
    connections (database pool, Redis, broker)."""
    async with client_for(url, len(agents)) as client:
        until = time.monotonic() + 3
        await asyncio.gather(*(run_agent(client, a, Stats(), until) for a in agents))


async def run_healthz(client: aiohttp.ClientSession, stats: Stats, until: float) -> None:
    while time.monotonic() < until:
        await call(client, stats, "healthz", "GET", "/healthz")


def client_for(url: str, concurrency: int) -> aiohttp.ClientSession:
    """One connection per concurrent client, kept alive. aiohttp rather than httpx: the load
    generator shares the machine with the server, and httpx cost it about four times the CPU
    per request (2.2 against 0.6 ms per operation), which also held `/healthz` to what the
    client could send rather than what the server could answer."""
    return aiohttp.ClientSession(
        base_url=url,
        connector=aiohttp.TCPConnector(limit=concurrency),
        timeout=aiohttp.ClientTimeout(total=120),
    )


async def load(
    url: str, agents: list[Agent], seconds: float, healthz_seconds: float, groups: dict[str, int]
) -> Stats:
    stats = Stats()
    async with client_for(url, len(agents)) as client:
        until = time.monotonic() + healthz_seconds
        await asyncio.gather(*(run_healthz(client, stats, until) for _ in agents))
        before = cpu_seconds(groups)
        started = time.monotonic()
        until = started + seconds
        await asyncio.gather(*(run_agent(client, a, stats, until) for a in agents))
        stats.latencies["_elapsed"] = [time.monotonic() - started]
        stats.cpu = cpu_seconds(groups)
        stats.cpu.subtract(before)
    return stats


def check_sessions(agents: list[Agent]) -> list[str]:
    """Every session holds exactly its agent's turns: seqs 0..2n-1, each turn's pair in place."""
    from sessions.models import Message

    problems = []
    for agent in agents:
        rows = list(
            Message.objects.filter(session_id=agent.session)
            .order_by("seq")
            .values_list("seq", "payload")
        )
        seqs = [seq for seq, _ in rows]
        if seqs != list(range(2 * agent.turns)):
            problems.append(f"{agent.session}: {len(seqs)} messages for {agent.turns} turns")
            continue
        for seq, payload in rows:
            call_id = payload["parts"][0]["tool_call_id"]
            if call_id != f"call-{seq // 2}":
                problems.append(f"{agent.session}: #{seq} holds {call_id}")
                break
    return problems


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99)}


def summary(stats: Stats, agents: list[Agent], healthz_seconds: float) -> dict[str, Any]:
    elapsed = stats.latencies.pop("_elapsed")[0]
    done = len(stats.latencies["append"]) + len(stats.latencies["context"])
    errors = {
        f"{op} {status}": count
        for (op, status), count in sorted(stats.statuses.items())
        if status not in ("200", "201")
    }
    return {
        "ops_per_second": done / elapsed,
        # What one append or context costs the machine, part by part: unlike throughput and
        # latency, this hardly depends on what else the machine was doing.
        "cpu_ms_per_op": {part: 1000 * s / max(done, 1) for part, s in sorted(stats.cpu.items())},
        "healthz_per_second": len(stats.latencies["healthz"]) / healthz_seconds,
        "turns": sum(a.turns for a in agents),
        **{op: percentiles(stats.latencies[op]) for op in ("append", "context", "healthz")},
        "errors": errors,
        "server_errors": sum(c for (_, s), c in stats.statuses.items() if s.startswith("5")),
        "without_retry_after": stats.without_retry_after,
        "problems": check_sessions(agents),
    }


# --- the watchers --------------------------------------------------------------------------------


async def watch(
    url: str, session: str, cookie: str, arrivals: dict[int, float], ready: asyncio.Event
) -> None:
    ws_url = url.replace("http://", "ws://") + f"/ws/sessions/{session}/"
    headers = {"Origin": url, "Cookie": f"sessionid={cookie}"}
    async with websockets.connect(ws_url, additional_headers=headers, max_size=None) as socket:
        ready.set()
        async for frame in socket:
            now = time.perf_counter()
            for seq in re.findall(r'id="msg-(\d+)"', str(frame)):
                arrivals.setdefault(int(seq), now)


async def fan_out(
    url: str, agents: list[Agent], cookie: str, per_session: int, seconds: float
) -> dict[str, Any]:
    watchers, events = [], []
    by_session: dict[str, list[dict[int, float]]] = {}
    for agent in agents:
        by_session[agent.session] = [{} for _ in range(per_session)]
        for seen in by_session[agent.session]:
            ready = asyncio.Event()
            events.append(ready)
            watchers.append(asyncio.create_task(watch(url, agent.session, cookie, seen, ready)))
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 60)
    sent: list[tuple[str, int, float]] = []
    stats = Stats()
    async with client_for(url, len(agents)) as client:

        async def paced(agent: Agent) -> None:
            headers = {"Authorization": f"Bearer {agent.key}"}
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                turn = agent.turns
                started = time.perf_counter()
                answer = await call(
                    client,
                    stats,
                    "append",
                    "POST",
                    f"/api/v1/sessions/{agent.session}/messages",
                    json={"messages": turn_messages(agent, turn), "expected_seq": 2 * turn},
                    headers={**headers, "Idempotency-Key": f"{agent.session}-w{turn}"},
                )
                if answer is None:
                    return
                agent.turns += 1
                sent.append((agent.session, json.loads(answer)["first_seq"], started))
                await asyncio.sleep(max(0.0, 0.5 - (time.perf_counter() - started)))

        await asyncio.gather(*(paced(a) for a in agents))
    await asyncio.sleep(5)  # the last pushes on their way
    for task in watchers:
        task.cancel()
    await asyncio.gather(*watchers, return_exceptions=True)
    delays, missing = [], 0
    for session, seq, started in sent:
        seen = [w.get(seq) for w in by_session[session]]
        if any(s is None for s in seen):
            missing += sum(s is None for s in seen)
            continue
        delays.append(max(seen) - started)  # type: ignore[type-var]
    return {
        "watchers": len(watchers),
        "appends": len(sent),
        "to_every_watcher_ms": percentiles(delays),
        "missed_deliveries": missing,
    }


def login_cookie() -> str:
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client()
    client.force_login(User.objects.get(username="load"))
    return str(client.cookies["sessionid"].value)


# --- the run -------------------------------------------------------------------------------------


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| web | C | append+context/s | append p50/p95/p99 ms | context p50/p95/p99 ms "
        "| healthz p95 ms | healthz/s | 5xx | other non-2xx | lost/dup/out of order "
        "| CPU ms per op: web/worker/postgres/redis/client |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:

        def trio(op: str, r: dict[str, Any] = r) -> str:
            return "/".join(f"{r[op][p]:.0f}" for p in ("p50", "p95", "p99"))

        others = sum(c for k, c in r["errors"].items() if not k.split()[1].startswith("5"))
        parts = ("web", "worker", "postgres", "redis", "client")
        cpu = "/".join(f"{r['cpu_ms_per_op'].get(part, 0):.1f}" for part in parts)
        lines.append(
            f"| {r['web']} | {r['agents']} | {r['ops_per_second']:.0f} | {trio('append')} "
            f"| {trio('context')} | {r['healthz']['p95']:.0f} | {r['healthz_per_second']:.0f} "
            f"| {r['server_errors']} | {others} | {len(r['problems'])} | {cpu} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--agents", default="1,10,50,200", help="concurrent agents, comma-separated"
    )
    parser.add_argument("--web", default="1,2", help="web processes, comma-separated")
    parser.add_argument("--seconds", type=float, default=20, help="agent load per run")
    parser.add_argument("--healthz-seconds", type=float, default=8)
    parser.add_argument("--watchers", type=int, default=100, help="0 skips the fan-out")
    args = parser.parse_args()
    counts = [int(c) for c in args.agents.split(",")]
    webs = [int(w) for w in args.web.split(",")]

    work = Path(tempfile.mkdtemp(prefix="ctxhub-load."))
    shutil.rmtree(LOGS, ignore_errors=True)
    LOGS.mkdir(parents=True)
    results: list[dict[str, Any]] = []
    fan: dict[str, Any] = {}
    try:
        with services(work) as urls:
            env = stack_env(work, urls)
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
                cwd=ROOT,
                env=env,
                check=True,
            )
            setup_django(env)
            worker = [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config.celery",
                "worker",
                "--pool=solo",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=WARNING",
            ]
            with process(worker, env, LOGS / "worker.log") as celery:
                for processes in webs:
                    with web(env, processes) as (url, web_group):
                        asyncio.run(warm_up(url, make_agents(8 * processes, f"warm{processes}")))
                        groups = {"web": web_group, "worker": celery.pid}
                        for count in counts:
                            agents = make_agents(count, f"w{processes}c{count}")
                            stats = asyncio.run(
                                load(url, agents, args.seconds, args.healthz_seconds, groups)
                            )
                            result = {
                                "web": processes,
                                "agents": count,
                                **summary(stats, agents, args.healthz_seconds),
                            }
                            results.append(result)
                            print(table([result]).splitlines()[-1], flush=True)
                        if args.watchers and processes == max(webs):
                            agents = make_agents(10, f"watched{processes}")
                            fan = asyncio.run(
                                fan_out(url, agents, login_cookie(), args.watchers // 10, 15)
                            )
                            fan["web"] = processes
                            fan["problems"] = check_sessions(agents)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(table(results))
    if fan:
        d = fan["to_every_watcher_ms"]
        print(
            f"\nfan-out, {fan['web']} web processes: {fan['watchers']} watchers of 10 sessions, "
            f"{fan['appends']} appends: append → every watcher p50 {d['p50']:.0f} ms, "
            f"p95 {d['p95']:.0f} ms, p99 {d['p99']:.0f} ms; missed {fan['missed_deliveries']}"
        )
    for r in results:
        for problem in r["problems"][:5]:
            print(f"  web {r['web']} C {r['agents']}: {problem}")
        if r["errors"]:
            print(f"  web {r['web']} C {r['agents']} non-2xx: {r['errors']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"runs": results, "fan_out": fan}, indent=2) + "\n")


if __name__ == "__main__":
    main()
