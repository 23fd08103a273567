"""What the gateway adds to a model request, against calling the provider directly.

Run from the repository root; it starts everything itself and stops it at the end: a throwaway
PostgreSQL and Redis (as ``scripts/test.sh`` starts them), one Celery worker, the production web
server (``scripts/web.sh``: gunicorn with uvicorn workers, production settings) pointed at the
fake Anthropic of the gateway's tests (``tests/gateway/fake_upstream.py``), served by uvicorn in
a process of its own. Every figure is the gateway against the same fake called directly, in the
same run, by the same client:

    .venv/bin/python benchmarks/bench_gateway.py            # 400 turns, 20,000 messages, 50 clients
    .venv/bin/python benchmarks/bench_gateway.py --quick    # a short run of each part

1. **Observe mode**: one growing Anthropic conversation (a coding agent's loop: a prompt, a tool
   call, its result, an answer), a few hundred sequential requests with a plain ``httpx``
   client, streaming and whole answers alternating. Each request is sent through the gateway
   and directly, in alternating order: the added latency is the per-request difference (whole
   answers: to the last byte; streams: to the first and to the last byte of the body).
2. **Govern mode at 20,000 messages**: a session built by one first request of 19,999 messages
   (with its system prompt and the answer, 20,001 in the session), then requests that add a
   turn each. The upstream gets the Governor's request, not the client's, so the baseline is
   that very request sent directly (read back from the fake); the direct call with the
   client's whole body is shown beside it.
3. **50 concurrent clients** (asyncio + httpx), each its own streaming conversation: errors,
   throughput and latency, against the same clients calling the fake directly.
4. **Where the time goes**: the gateway's ASGI application run in this process (no server,
   the same database, upstream and code) on both conversations, each phase of a request timed
   by wrapping the function that does it, then one cProfile of a few requests.

Results go to ``benchmarks/results/gateway.json``, the servers' logs to
``test-artifacts/gateway/``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import inspect
import io
import json
import pstats
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import cpu_seconds, free_port, process, services, setup_django, stack_env, web

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "gateway.json"
LOGS = ROOT / "test-artifacts" / "gateway"
MESSAGES_PATH = "/v1/messages"
GATEWAY_PATH = "/gateway/anthropic/v1/messages"
MODEL = "claude-sonnet-4-6"
PROVIDER_KEY = "sk-ant-api03-benchmark-not-a-real-key-0123456789"
TIMEOUT = httpx.Timeout(600.0, connect=10.0)


# --- the fake provider, in a process of its own --------------------------------------------------


class _Tally(list):  # type: ignore[type-arg]
    """Stands for ``FakeUpstream.received``: counts the requests (the fake numbers its answers
    by that count) but keeps only the last one per path, so a run of 20,000-message bodies does
    not fill the fake's memory."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0
        self.last: dict[str, Any] = {}

    def append(self, request: Any) -> None:
        self.seen += 1
        self.last[request.path] = request

    def clear(self) -> None:
        self.seen = 0
        self.last.clear()

    def __len__(self) -> int:
        return self.seen


def serve_fake(port: int) -> None:
    """The fake Anthropic on ``port`` (this process), plus ``GET /bench/last``: the body of the
    last request it received at ``/v1/messages``, so the benchmark can send the very request
    the gateway sent."""
    import uvicorn

    sys.path.insert(0, str(ROOT))
    from tests.gateway.fake_upstream import FakeUpstream

    fake = FakeUpstream()
    tally = _Tally()
    fake.received = tally

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/bench/last":
            last = tally.last.get(MESSAGES_PATH)
            body = last.body if last is not None else b""
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        await fake(scope, receive, send)

    uvicorn.run(
        app, host="127.0.0.1", port=port, lifespan="off", log_level="warning", access_log=False
    )


@contextlib.contextmanager
def fake_upstream(env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """The fake's URL and process group."""
    port = free_port()
    args = [sys.executable, __file__, "--serve-fake", str(port)]
    with process(args, env, LOGS / "fake-upstream.log") as fake:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/bench/last", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or fake.poll() is not None:
                    raise RuntimeError((LOGS / "fake-upstream.log").read_text()[-3000:]) from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", fake.pid


# --- the conversation ----------------------------------------------------------------------------

SYSTEM = (
    "You are a coding agent working in a Python repository. Read before you edit, run the "
    "tests after every change, keep diffs small and explain what you changed. "
) * 16  # about 3 KB, a short system prompt by coding agents' standards

TOOLS = [
    {
        "name": name,
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "A repository path."}},
            "required": ["path"],
        },
    }
    for name, description in (
        ("Read", "Read a file of the repository, with line numbers."),
        ("Grep", "Search the repository for a regular expression."),
        ("Bash", "Run a shell command in the repository and return its output."),
        ("Edit", "Replace a unique string in a file with another."),
    )
]

_WORDS = [
    *("def", "return", "self", "value", "result", "session", "message", "request", "token"),
    *("window", "budget", "policy", "import", "from", "class", "assert", "for", "in", "if"),
    *("else", "None", "True", "False", "raise", "error", "path", "line", "count"),
]


def tool_output(rng: random.Random, low: int, high: int) -> str:
    """Code-like text of ``low`` to ``high`` bytes, different every time."""
    size = rng.randint(low, high)
    lines: list[str] = []
    total = 0
    while total < size:
        words = rng.choices(_WORDS, k=rng.randint(3, 12))
        line = f"{len(lines) + 1:>5}  " + "    " * rng.randint(0, 3) + " ".join(words)
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:size]


class Conversation:
    """A coding agent's conversation in the Messages format. The fake calls the first tool
    unless the last message carries a tool's result, so it goes prompt, tool call, result,
    answer, prompt...: every request adds two messages, the previous answer and the user's
    next message (the tool's result, or the next prompt)."""

    def __init__(self, seed: int, low: int = 300, high: int = 4_000) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.low, self.high = low, high
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": self.prompt(0)}]
        self.turns = 0
        self.session = ""  # the hub's session, once a request went through the gateway

    def prompt(self, n: int) -> str:
        return f"Task {n}: find where {' '.join(self.rng.choices(_WORDS, k=6))} is handled."

    def body(self, stream: bool) -> bytes:
        request = {
            "model": MODEL,
            "max_tokens": 4096,
            "system": SYSTEM,
            "tools": TOOLS,
            "messages": self.messages,
            "stream": stream,
        }
        return json.dumps(request, ensure_ascii=False).encode()

    def answered(self, content: list[dict[str, Any]]) -> None:
        """The model's answer, as the client sends it back, and the user's next message."""
        self.messages.append({"role": "assistant", "content": content})
        calls = [block for block in content if block.get("type") == "tool_use"]
        if calls:
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": call["id"],
                    "content": tool_output(self.rng, self.low, self.high),
                }
                for call in calls
            ]
            self.messages.append({"role": "user", "content": results})
        else:
            self.messages.append({"role": "user", "content": self.prompt(self.turns)})
        self.turns += 1

    def prebuilt(self, count: int) -> None:
        """Grow to ``count`` messages (odd: it ends with the user's) without a model: tool
        calls with ids of their own, and answers, in the pattern the fake follows."""
        assert count % 2 == 1
        while len(self.messages) < count:
            last = self.messages[-1]["content"]
            if isinstance(last, str):  # a prompt: the model calls a tool
                call = {
                    "type": "tool_use",
                    "id": f"toolu_pre_{len(self.messages)}",
                    "name": "Read",
                    "input": {"path": f"src/module_{len(self.messages)}.py"},
                }
                self.answered([call])
            else:
                self.answered([{"type": "text", "text": f"answer {len(self.messages)}"}])


def answer_content(body: bytes, stream: bool) -> list[dict[str, Any]]:
    """The answer's content blocks, from a whole answer or from its stream's events."""
    if not stream:
        return list(json.loads(body)["content"])
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = defaultdict(str)
    for line in body.decode().split("\n"):
        if not line.startswith("data: "):
            continue
        event = json.loads(line[6:])
        kind = event.get("type")
        if kind == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif kind == "content_block_delta":
            delta = event["delta"]
            if delta["type"] == "text_delta":
                blocks[event["index"]]["text"] += delta["text"]
            elif delta["type"] == "input_json_delta":
                partial[event["index"]] += delta["partial_json"]
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text or "{}")
    return [blocks[i] for i in sorted(blocks)]


# --- timing requests -----------------------------------------------------------------------------


@dataclass
class Timed:
    status: int
    total: float  # to the last byte of the body
    first: float  # to the first byte of the body
    body: bytes
    headers: httpx.Headers


def headers_for(key: str | None, mode: str | None) -> dict[str, str]:
    headers = {
        "x-api-key": PROVIDER_KEY,
        "anthropic-version": "2023-06-01",
        "content-type": "application/json",
    }
    if key:
        headers["x-ctxhub-key"] = key
    if mode:
        headers["x-ctxhub-mode"] = mode
    return headers


def timed(client: httpx.Client, url: str, body: bytes, headers: dict[str, str]) -> Timed:
    started = time.perf_counter()
    first = None
    chunks = []
    with client.stream("POST", url, content=body, headers=headers) as response:
        for chunk in response.iter_raw():
            if first is None:
                first = time.perf_counter()
            chunks.append(chunk)
    ended = time.perf_counter()
    return Timed(
        response.status_code,
        ended - started,
        (first or ended) - started,
        b"".join(chunks),
        response.headers,
    )


def last_upstream_body(client: httpx.Client, fake: str) -> bytes:
    return client.get(f"{fake}/bench/last").content


def ms(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (seconds) in ms, nearest rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def spread(values: list[float]) -> dict[str, float]:
    return {"p50": ms(values, 0.50), "p90": ms(values, 0.90), "p99": ms(values, 0.99)}


# --- 1 and 2: sequential requests ----------------------------------------------------------------


@dataclass
class Turn:
    messages: int
    stream: bool
    client_bytes: int
    gateway: Timed
    direct: Timed
    upstream_bytes: int = 0
    direct_client: Timed | None = None  # govern mode: the client's own body, sent directly


def sequential(
    hub: str,
    fake: str,
    key: str,
    conversation: Conversation,
    turns: int,
    *,
    mode: str,
    streams: Callable[[int], bool],
    label: str,
) -> list[Turn]:
    """``turns`` requests of ``conversation``, each through the gateway and directly.

    Observe: the two calls carry the same body, in alternating order. Govern: the gateway
    first, then directly the body it sent upstream (and the client's own, for reference)."""
    done: list[Turn] = []
    gw_headers, direct_headers = headers_for(key, mode), headers_for(None, None)
    gw_headers["x-ctxhub-session"] = f"{label}-{conversation.seed}"
    with httpx.Client(timeout=TIMEOUT) as gw, httpx.Client(timeout=TIMEOUT) as direct:
        for n in range(turns):
            stream = streams(n)
            body = conversation.body(stream)
            own = None
            if mode == "observe":
                # The same body both ways, which goes first alternating from turn to turn.
                if n % 2:
                    baseline = timed(direct, fake + MESSAGES_PATH, body, direct_headers)
                    through = timed(gw, hub + GATEWAY_PATH, body, gw_headers)
                else:
                    through = timed(gw, hub + GATEWAY_PATH, body, gw_headers)
                    baseline = timed(direct, fake + MESSAGES_PATH, body, direct_headers)
                sent = len(body)
            else:
                through = timed(gw, hub + GATEWAY_PATH, body, gw_headers)
                upstream = last_upstream_body(direct, fake)
                sent = len(upstream)
                baseline = timed(direct, fake + MESSAGES_PATH, upstream, direct_headers)
                own = timed(direct, fake + MESSAGES_PATH, body, direct_headers)
            if through.status != 200:
                raise RuntimeError(f"{label} turn {n}: {through.status} {through.body[:500]!r}")
            if mode == "govern" and through.headers.get("x-ctxhub-governed") != "yes":
                raise RuntimeError(f"{label} turn {n}: forwarded ungoverned")
            # Observe mode forwards before the session is found: its answers do not name it.
            conversation.session = through.headers.get("x-ctxhub-session") or conversation.session
            done.append(
                Turn(len(conversation.messages), stream, len(body), through, baseline, sent, own)
            )
            conversation.answered(answer_content(through.body, stream))
            if (n + 1) % 50 == 0:
                print(f"  {label}: {n + 1}/{turns} turns", flush=True)
    return done


def added(turns: list[Turn], what: str) -> dict[str, Any]:
    """Through the gateway minus directly, request by request."""
    pick: Callable[[Timed], float] = (lambda t: t.first) if what == "first" else (lambda t: t.total)
    diffs = [pick(t.gateway) - pick(t.direct) for t in turns]
    return {
        "requests": len(turns),
        "added": spread(diffs),
        "gateway": spread([pick(t.gateway) for t in turns]),
        "direct": spread([pick(t.direct) for t in turns]),
        "ratio_p50": ms([pick(t.gateway) for t in turns], 0.5)
        / ms([pick(t.direct) for t in turns], 0.5),
    }


def per_turn(turns: list[Turn]) -> list[list[Any]]:
    """Every request, for a closer look: messages, stream, client bytes, upstream bytes, and in
    ms the gateway's first and last byte, the direct call's first and last byte."""
    return [
        [
            t.messages, t.stream, t.client_bytes, t.upstream_bytes,
            *(round(1000 * v, 2) for v in (t.gateway.first, t.gateway.total)),
            *(round(1000 * v, 2) for v in (t.direct.first, t.direct.total)),
        ]
        for t in turns
    ]  # fmt: skip


def observe_results(turns: list[Turn]) -> dict[str, Any]:
    whole = [t for t in turns if not t.stream]
    streamed = [t for t in turns if t.stream]
    return {
        "turns": per_turn(turns),
        "messages": [turns[0].messages, turns[-1].messages],
        "body_kb": [turns[0].client_bytes / 1024, turns[-1].client_bytes / 1024],
        "whole": added(whole, "total"),
        "stream_first_byte": added(streamed, "first"),
        "stream_last_byte": added(streamed, "total"),
    }


def govern_results(turns: list[Turn]) -> dict[str, Any]:
    own = [t.direct_client.total for t in turns if t.direct_client is not None]
    return {
        "turns": per_turn(turns),
        "messages": [turns[0].messages, turns[-1].messages],
        "client_body_mb": turns[-1].client_bytes / 2**20,
        "upstream_body_mb": statistics.median(t.upstream_bytes for t in turns) / 2**20,
        "whole": added([t for t in turns if not t.stream], "total"),
        "stream_first_byte": added([t for t in turns if t.stream], "first"),
        "stream_last_byte": added([t for t in turns if t.stream], "total"),
        "all": added(turns, "total"),
        "direct_client_body": spread(own),
        "added_vs_client_body": spread(
            [t.gateway.total - t.direct_client.total for t in turns if t.direct_client]
        ),
    }


# --- 3: concurrent streaming clients -------------------------------------------------------------


@dataclass
class Crowd:
    first: list[float] = field(default_factory=list)
    last: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    elapsed: float = 0.0
    cpu: Counter[str] = field(default_factory=Counter)


async def converse(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    conversation: Conversation,
    turns: int,
    crowd: Crowd,
    *,
    through_gateway: bool,
) -> None:
    for _ in range(turns):
        body = conversation.body(True)
        started = time.perf_counter()
        first = None
        chunks = []
        try:
            async with client.stream("POST", url, content=body, headers=headers) as response:
                async for chunk in response.aiter_raw():
                    if first is None:
                        first = time.perf_counter()
                    chunks.append(chunk)
        except httpx.HTTPError as error:
            crowd.errors[type(error).__name__] += 1
            return
        ended = time.perf_counter()
        crowd.requests += 1
        if response.status_code != 200:
            crowd.errors[str(response.status_code)] += 1
            return
        if through_gateway and response.headers.get("x-ctxhub-governed") is None:
            crowd.errors["no gateway header"] += 1
        crowd.first.append((first or ended) - started)
        crowd.last.append(ended - started)
        try:
            conversation.answered(answer_content(b"".join(chunks), True))
        except (ValueError, KeyError) as error:
            crowd.errors[f"unreadable stream ({type(error).__name__})"] += 1
            return


async def crowd_run(
    url: str,
    keys: list[str] | None,
    mode: str | None,
    clients: int,
    turns: int,
    seed: int,
    groups: dict[str, int],
) -> Crowd:
    crowd = Crowd()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=TIMEOUT, limits=limits) as client:
        conversations = [Conversation(seed + i) for i in range(clients)]
        before = cpu_seconds(groups)
        started = time.perf_counter()
        await asyncio.gather(
            *(
                converse(
                    client,
                    url,
                    headers_for(keys[i] if keys else None, mode),
                    conversations[i],
                    turns,
                    crowd,
                    through_gateway=keys is not None,
                )
                for i in range(clients)
            )
        )
        crowd.elapsed = time.perf_counter() - started
        crowd.cpu = cpu_seconds(groups)
        crowd.cpu.subtract(before)
    return crowd


def crowd_results(crowd: Crowd) -> dict[str, Any]:
    return {
        "requests": crowd.requests,
        "errors": dict(crowd.errors),
        "per_second": crowd.requests / crowd.elapsed,
        "first_byte": spread(crowd.first),
        "last_byte": spread(crowd.last),
        "cpu_ms_per_request": {
            part: 1000 * seconds / max(crowd.requests, 1)
            for part, seconds in sorted(crowd.cpu.items())
        },
    }


# --- 4: where the time goes ----------------------------------------------------------------------

# The functions timed: a name, and where the function is looked up when it is called.
TIMED: dict[str, tuple[str, str]] = {
    "caller": ("gateway.access", "_caller"),
    "rate": ("gateway.access", "_counted"),
    "parse": ("gateway.wire.anthropic", "parse"),
    "thread": ("gateway.threads", "thread"),
    "hashes": ("gateway.chain", "hashes"),
    "continued": ("gateway.threads", "_continued"),
    "start": ("gateway.threads", "_start"),
    "store": ("gateway.threads", "_store"),
    "append": ("gateway.threads", "append_messages"),
    "set_tools": ("gateway.threads", "set_tools"),
    "facts": ("sessions.services.log", "message_facts"),
    "pieces": ("sessions.services.log", "store_pieces"),
    "events": ("sessions.events", "send"),
    "governed_request": ("gateway.exchange", "governed_request"),
    "send_context": ("gateway.governing", "send_context"),
    "effective_history": ("sessions.services.governed", "effective_history"),
    "govern": ("sessions.services.governed", "_govern"),
    "record_sent": ("sessions.services.governed", "record_sent"),
    "report": ("sessions.services.governed", "GovernedContext.report"),
    "written": ("gateway.governing", "_written"),
    "call": ("gateway.exchange", "_call"),
    "live": ("gateway.live", "_watched"),
    "write": ("gateway.exchange", "_write"),
    "store_response": ("gateway.threads", "store_response"),
}

# The rows of the breakdown: (what, function, the timed functions it is called within on its
# thread, outermost first). Top-level rows add up (with the hand-offs and the rest) to the
# request; a row within others is part of the one above it.
PHASES: list[tuple[str, str, str]] = [
    ("authenticate the keys", "caller", ""),
    ("count the rate (beside the body's reading, not added)", "rate", ""),
    ("parse the body (wire.parse)", "parse", ""),
    ("chain hashes (of the messages new to the process)", "hashes", ""),
    ("thread: find the session, store the new messages", "thread", ""),
    ("look the session up (_continued)", "continued", "thread"),
    ("start a session (_start)", "start", "thread"),
    ("store the new messages (_store)", "store", "thread"),
    ("set_tools (the tool definitions compared)", "set_tools", "thread/store"),
    ("append_messages (log rows, facts, recall pieces)", "append", "thread/store"),
    ("facts: tokenise the new messages", "facts", "thread/store/append"),
    ("recall pieces", "pieces", "thread/store/append"),
    ("after commit: live push and settle (events.send)", "events", "thread"),
    ("govern: the Governor's request", "governed_request", ""),
    ("send_context", "send_context", "governed_request"),
    ("effective history (the session's messages)", "effective_history",
     "governed_request/send_context"),
    ("Governor.govern", "govern", "governed_request/send_context"),
    ("record the request sent (record_sent)", "record_sent", "governed_request/send_context"),
    ("the report (context.report)", "report", "governed_request"),
    ("render the body (_written)", "written", "governed_request"),
    ("upstream call, to its headers (the fake's time included)", "call", ""),
    ("live-answer check (streams; beside the relay)", "live", ""),
    ("record: store the answer and the exchange (_write)", "write", ""),
    ("store_response", "store_response", "write"),
    ("append_messages (the answer)", "append", "write/store_response"),
    ("facts: tokenise the answer", "facts", "write/store_response/append"),
    ("recall pieces", "pieces", "write/store_response/append"),
    ("after commit: live push and settle (events.send)", "events", "write/store_response"),
]  # fmt: skip
BESIDE = ("rate",)
"""Top-level phases that run beside another (shown, not added into the request's time)."""
IN_THREADS = ("thread", "governed_request", "write")
"""The depth-1 phases that run inside ``gateway.storage.stored`` (on the request's thread)."""


class PhaseClock:
    """Times the phases of the gateway's requests in this process by wrapping their functions
    (module attributes, looked up at call time, so the wrapped one is called). Each call's time
    is kept under its name and the name of the timed function it was called within, on the
    same thread."""

    def __init__(self) -> None:
        self.current: dict[tuple[str, str], float] = defaultdict(float)
        self.stored_outer = 0.0
        self._undo: list[Callable[[], None]] = []
        self._local = threading.local()

    def install(self) -> None:
        import importlib

        for name, (module_name, attribute) in TIMED.items():
            owner: Any = importlib.import_module(module_name)
            if "." in attribute:
                owner_name, attribute = attribute.split(".")
                owner = getattr(owner, owner_name)
            self._wrap(owner, attribute, name)
        # The hand-offs to the request's thread (a slot, the hop, handing the connection back):
        # stored()'s time minus the work it ran.
        import gateway.exchange

        for name in ("stored", "stored_apart"):
            original = getattr(gateway.exchange, name)

            async def stored(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await _original(*args, **kwargs)
                finally:
                    self.stored_outer += time.perf_counter() - started

            setattr(gateway.exchange, name, stored)
            self._undo.append(
                lambda name=name, original=original: setattr(gateway.exchange, name, original)
            )

    def _stack(self) -> list[str]:
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        stack: list[str] = self._local.stack
        return stack

    def _wrap(self, owner: Any, attribute: str, name: str) -> None:
        raw = inspect.getattr_static(owner, attribute)
        clock = self.current

        def timing(function: Callable[..., Any]) -> Callable[..., Any]:
            if inspect.iscoroutinefunction(function):

                @functools.wraps(function)
                async def timed_async(*args: Any, **kwargs: Any) -> Any:
                    started = time.perf_counter()
                    try:
                        return await function(*args, **kwargs)
                    finally:  # the event loop's: nothing else is timed within these
                        clock[(name, "")] += time.perf_counter() - started

                return timed_async

            @functools.wraps(function)
            def timed_sync(*args: Any, **kwargs: Any) -> Any:
                stack = self._stack()
                within = "/".join(stack)
                stack.append(name)
                started = time.perf_counter()
                try:
                    return function(*args, **kwargs)
                finally:
                    clock[(name, within)] += time.perf_counter() - started
                    stack.pop()

            return timed_sync

        if isinstance(raw, property):
            replacement: Any = property(timing(raw.fget))  # type: ignore[arg-type]
        elif isinstance(raw, classmethod):
            replacement = classmethod(timing(raw.__func__))
        else:
            replacement = timing(raw)
        setattr(owner, attribute, replacement)
        self._undo.append(lambda: setattr(owner, attribute, raw))

    def uninstall(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def take(self) -> dict[Any, float]:
        taken: dict[Any, float] = dict(self.current)
        taken["_stored"] = self.stored_outer
        self.current.clear()
        self.stored_outer = 0.0
        return taken


async def asgi_request(app: Any, path: str, headers: dict[str, str], body: bytes) -> Timed:
    """One request to the ASGI application in this process, as the server would make it."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-length", str(len(body)).encode())]
        + [(name.lower().encode(), value.encode()) for name, value in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    given = False
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    status, answer_headers, chunks = 0, httpx.Headers(), []
    first: float | None = None

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, answer_headers, first
        if message["type"] == "http.response.start":
            status = message["status"]
            answer_headers = httpx.Headers(
                [(k.decode(), v.decode()) for k, v in message.get("headers", [])]
            )
        elif message["type"] == "http.response.body":
            if first is None and message.get("body"):
                first = time.perf_counter()
            chunks.append(message.get("body", b""))

    started = time.perf_counter()
    await app(scope, receive, send)
    ended = time.perf_counter()
    return Timed(
        status, ended - started, (first or ended) - started, b"".join(chunks), answer_headers
    )


async def in_process(
    conversation: Conversation | None,
    key: str,
    mode: str,
    turns: int,
    profiled: int,
    warm: int,
) -> dict[str, Any]:
    """``turns`` requests of ``conversation`` to the gateway's ASGI app in this process, each
    phase timed; then ``profiled`` more under cProfile. ``warm`` unmeasured ones first (this
    process has not seen the session: its first request reads it whole). Without a
    conversation, each request is the first of a new one (a new session)."""
    from config.asgi import application
    from gateway.exchange import RECORDINGS

    clock = PhaseClock()
    clock.install()
    headers = headers_for(key, mode)
    rows: list[dict[Any, float]] = []
    totals: list[float] = []
    profile = cProfile.Profile()
    try:
        for n in range(warm + turns + profiled):
            talk = conversation or Conversation(seed=700 + n)
            stream = n % 2 == 1
            body = talk.body(stream)
            measuring = warm <= n < warm + turns
            if n >= warm + turns:
                profile.enable()
            started = time.perf_counter()
            answer = await asgi_request(application, GATEWAY_PATH, headers, body)
            # The exchange is recorded after the client had the answer: its work is the
            # request's all the same.
            await RECORDINGS.idle()
            answer.total = time.perf_counter() - started
            if n >= warm + turns:
                profile.disable()
            phases = clock.take()
            if answer.status != 200:
                raise RuntimeError(f"in-process {mode}: {answer.status} {answer.body[:300]!r}")
            if measuring:
                phases["_total"] = answer.total
                rows.append(phases)
                totals.append(answer.total)
            talk.answered(answer_content(answer.body, stream))
    finally:
        clock.uninstall()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(25)
    out.write("\n")
    stats.sort_stats("cumulative").print_stats(45)
    return {
        "messages": len(talk.messages),
        "requests": len(rows),
        "total": spread(totals),
        "phases": phase_medians(rows),
        "profile": out.getvalue(),
    }


def phase_medians(rows: list[dict[Any, float]]) -> list[dict[str, Any]]:
    """Each phase's median and mean in ms over the requests, and the rest of the request."""
    out = []
    for label, name, within in PHASES:
        values = [row.get((name, within), 0.0) for row in rows]
        depth = 1 + (within.count("/") + 1 if within else 0)
        out.append({"phase": label, "depth": depth, **_median_mean(values)})
    shown = {(name, within) for _, name, within in PHASES}
    for key in sorted({k for row in rows for k in row if isinstance(k, tuple)} - shown):
        values = [row.get(key, 0.0) for row in rows]  # a call from elsewhere than expected
        out.append({"phase": f"{key[0]} within {key[1]}", "depth": 1, **_median_mean(values)})
    hops = [row["_stored"] - sum(row.get((w, ""), 0.0) for w in IN_THREADS) for row in rows]
    out.append(
        {
            "phase": "hand-offs to the request's thread (slot, hop, connection back)",
            "depth": 1,
            **_median_mean(hops),
        }
    )
    top = {name for _, name, within in PHASES if not within and name not in BESIDE}
    rest = [
        row["_total"] - sum(row.get((name, ""), 0.0) for name in top) - hop
        for row, hop in zip(rows, hops, strict=True)
    ]
    out.append(
        {"phase": "the rest: handler, relaying the answer, response", "depth": 1,
         **_median_mean(rest)}
    )  # fmt: skip
    out.append({"phase": "whole request", "depth": 0, **_median_mean([r["_total"] for r in rows])})
    return out


def _median_mean(values: list[float]) -> dict[str, float]:
    return {
        "median_ms": 1000 * statistics.median(values),
        "mean_ms": 1000 * statistics.fmean(values),
    }


# --- reading the results -------------------------------------------------------------------------


def trio(spread_ms: dict[str, float]) -> str:
    return f"{spread_ms['p50']:.1f} / {spread_ms['p99']:.1f}"


def tables(results: dict[str, Any]) -> str:
    lines = [
        "| part | requests | messages | gateway p50 / p99 ms | direct p50 / p99 ms "
        "| added p50 / p99 ms | ratio of p50s |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for part in ("observe", "govern"):
        r = results.get(part)
        if not r:
            continue
        name = part if part == "observe" else f"govern, {r['build_messages'] + 1:,} messages"
        span = f"{r['messages'][0]:,} to {r['messages'][1]:,}"
        for kind, label in (
            ("whole", "whole answer"),
            ("stream_first_byte", "stream, first byte"),
            ("stream_last_byte", "stream, last byte"),
        ):
            row = r[kind]
            lines.append(
                f"| {name}: {label} | {row['requests']} | {span} | {trio(row['gateway'])} "
                f"| {trio(row['direct'])} | {trio(row['added'])} | {row['ratio_p50']:.2f} |"
            )
    g = results.get("govern")
    if g:
        lines.append("")
        lines.append(
            f"Govern: the client's body {g['client_body_mb']:.1f} MB, the upstream's "
            f"{g['upstream_body_mb']:.1f} MB (median); the client's body sent directly "
            f"p50 / p99 {trio(g['direct_client_body'])} ms; the gateway minus that "
            f"{trio(g['added_vs_client_body'])} ms. Building the session: "
            f"{g['build_seconds']:.1f} s for the first request of {g['build_messages']:,} "
            f"messages; compaction jobs during the timed turns: {g['compactions_during']}."
        )
    for name, crowd in results.get("concurrent", {}).items():
        lines.append("")
        lines.append(f"Concurrent ({name}):")
        lines.append(
            "| | requests | errors | requests/s | first byte p50 / p99 ms "
            "| last byte p50 / p99 ms | CPU ms per request: web/worker/postgres/redis/fake/client |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---|")
        for side in ("direct", "gateway"):
            c = crowd[side]
            cpu = "/".join(
                f"{c['cpu_ms_per_request'].get(p, 0):.1f}"
                for p in ("web", "worker", "postgres", "redis", "fake", "client")
            )
            errors = sum(c["errors"].values())
            lines.append(
                f"| {side} | {c['requests']} | {errors} {c['errors'] or ''} "
                f"| {c['per_second']:.0f} | {trio(c['first_byte'])} | {trio(c['last_byte'])} "
                f"| {cpu} |"
            )
    for name, phases in results.get("phases", {}).items():
        lines.append("")
        lines.append(
            f"Where the time goes, {name} ({phases['requests']} requests in this process at "
            f"{phases['messages']:,} messages; whole request p50 / p99 {trio(phases['total'])} "
            "ms):"
        )
        lines.append("| phase | median ms | mean ms |")
        lines.append("|---|---:|---:|")
        for row in phases["phases"]:
            indent = "&nbsp;&nbsp;" * max(0, row["depth"] - 1)
            lines.append(
                f"| {indent}{row['phase']} | {row['median_ms']:.2f} | {row['mean_ms']:.2f} |"
            )
    return "\n".join(lines)


# --- the run -------------------------------------------------------------------------------------


def wait_for_jobs(session_id: Any, timeout: float) -> int:
    """Wait until no compaction job of the session is queued or running; how many it has."""
    from sessions.models import ACTIVE_JOB_STATUSES, CompactionJob

    deadline = time.monotonic() + timeout
    while CompactionJob.objects.filter(session_id=session_id, status__in=ACTIVE_JOB_STATUSES):
        if time.monotonic() > deadline:
            print(f"  compaction of {session_id} still running after {timeout:.0f} s", flush=True)
            break
        time.sleep(1)
    return CompactionJob.objects.filter(session_id=session_id).count()


def session_named(marker: str) -> Any:
    """The session of the client session ``marker`` (its first, for a conversation's own)."""
    from gateway.models import GatewaySession

    found = GatewaySession.objects.filter(client_session=marker, parent=None)
    return found.values_list("session_id", flat=True).get()


def check_threaded(conversation: Conversation, timeout: float = 10) -> str:
    """The session holds the conversation, system prompt and last answer included (the last
    answer is recorded after the client had it: waited for)."""
    from sessions.models import Message

    expected = 1 + len(conversation.messages) - 1  # the system prompt; the last prompt unsent
    deadline = time.monotonic() + timeout
    while True:
        stored = Message.objects.filter(session_id=conversation.session).count()
        if stored >= expected or time.monotonic() > deadline:
            return f"{stored} messages in the session for {expected} sent and answered"
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run of each part")
    parser.add_argument("--turns", type=int, help="observe-mode requests (400; quick 60)")
    parser.add_argument("--big", type=int, help="govern-mode session size (20,000; quick 2,000)")
    parser.add_argument("--govern-turns", type=int, help="govern-mode requests (200; quick 30)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--client-turns", type=int, help="turns per client (30; quick 8)")
    parser.add_argument("--crowd-mode", default="govern,observe", help="modes of the crowd run")
    parser.add_argument("--web", type=int, default=2, help="web processes")
    parser.add_argument("--skip", default="", help="parts to skip: observe,govern,crowd,phases")
    parser.add_argument("--serve-fake", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        serve_fake(args.serve_fake)
        return
    quick = args.quick
    turns = args.turns or (60 if quick else 400)
    big = args.big or (2_000 if quick else 20_000)
    govern_turns = args.govern_turns or (30 if quick else 200)
    client_turns = args.client_turns or (8 if quick else 30)
    skip = set(filter(None, args.skip.split(",")))

    work = Path(tempfile.mkdtemp(prefix="ctxhub-gateway."))
    shutil.rmtree(LOGS, ignore_errors=True)
    LOGS.mkdir(parents=True)
    results: dict[str, Any] = {
        "settings": {
            "quick": quick,
            "web_processes": args.web,
            "observe_turns": turns,
            "big": big,
            "govern_turns": govern_turns,
            "clients": args.clients,
            "client_turns": client_turns,
        }
    }
    try:
        with services(work) as urls:
            env = stack_env(work, urls)
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
                cwd=ROOT,
                env=env,
                check=True,
            )
            with fake_upstream(env) as (fake, fake_group):
                env["CTXHUB_GATEWAY_ANTHROPIC_URL"] = fake
                env["CTXHUB_GATEWAY_OPENAI_URL"] = fake + "/v1"
                setup_django(env)
                from django.contrib.auth.models import User

                from sessions.api.keys import create_key

                owner, _ = User.objects.get_or_create(username="gateway-bench")
                key = create_key(owner, name="bench", scopes=["read", "write"])[1]
                worker = [
                    sys.executable, "-m", "celery", "-A", "config.celery", "worker",
                    "--pool=solo", "--without-gossip", "--without-mingle",
                    "--without-heartbeat", "--loglevel=WARNING",
                ]  # fmt: skip
                with (
                    process(worker, env, LOGS / "worker.log") as celery,
                    web(env, args.web, LOGS / "web.log") as (hub, web_group),
                ):
                    groups = {"web": web_group, "worker": celery.pid, "fake": fake_group}
                    run_parts(
                        results, hub, fake, key, owner, groups, skip,
                        turns=turns, big=big, govern_turns=govern_turns,
                        clients=args.clients, client_turns=client_turns,
                        crowd_modes=args.crowd_mode.split(","),
                    )  # fmt: skip
                if "phases" not in skip:
                    run_phases(results, key, quick)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(tables(results))
    for name, phases in results.get("phases", {}).items():
        print(f"\ncProfile, {name}:\n" + phases["profile"][:6000])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, default=str) + "\n")


# The conversations the in-process phase timing continues (after the server's measurements).
_CONTINUED: dict[str, Conversation] = {}


def run_parts(
    results: dict[str, Any],
    hub: str,
    fake: str,
    key: str,
    owner: Any,
    groups: dict[str, int],
    skip: set[str],
    *,
    turns: int,
    big: int,
    govern_turns: int,
    clients: int,
    client_turns: int,
    crowd_modes: list[str],
) -> None:
    from sessions.api.keys import create_key
    from sessions.models import CompactionJob

    # Unmeasured: each web process's first gateway requests (its upstream client, its pools,
    # what it loads on first use) take a few hundred ms. Eight clients at once, so that every
    # process gets some (the kernel spreads the connections), in both modes.
    for mode in ("observe", "govern"):
        keys = [create_key(owner, name=f"warm {mode} {i}", scopes=["write"])[1] for i in range(8)]
        warm = asyncio.run(crowd_run(hub + GATEWAY_PATH, keys, mode, 8, 3, 90, groups))
        if warm.errors:
            raise RuntimeError(f"warming up: {dict(warm.errors)}")

    if "observe" not in skip:
        print(f"observe mode: {turns} sequential requests, each through the gateway and directly")
        conversation = Conversation(seed=1)
        done = sequential(hub, fake, key, conversation, turns, mode="observe",
                          streams=lambda n: n % 2 == 1, label="observe")  # fmt: skip
        results["observe"] = observe_results(done)
        conversation.session = str(session_named(f"observe-{conversation.seed}"))
        results["observe"]["threaded"] = check_threaded(conversation)
        results["observe"]["compaction_jobs"] = CompactionJob.objects.filter(
            session_id=conversation.session
        ).count()
        _CONTINUED["observe"] = conversation
        print("  " + results["observe"]["threaded"], flush=True)

    if "govern" not in skip:
        conversation = Conversation(seed=2, low=200, high=1_500)
        first = big - 1 if big % 2 == 0 else big - 2  # odd: it ends with the user's message
        conversation.prebuilt(first)  # with the system prompt and the answer, about ``big``
        body = conversation.body(False)
        print(
            f"govern mode: building a session of {big:,} messages "
            f"({len(body) / 2**20:.1f} MB first request)",
            flush=True,
        )
        with httpx.Client(timeout=TIMEOUT) as client:
            built = timed(client, hub + GATEWAY_PATH, body, headers_for(key, "govern"))
        if built.status != 200:
            raise RuntimeError(f"building: {built.status} {built.body[:500]!r}")
        session_id = built.headers["x-ctxhub-session"]
        conversation.answered(answer_content(built.body, False))
        jobs = wait_for_jobs(session_id, timeout=600)
        print(f"  built in {built.total:.1f} s; {jobs} compaction jobs since", flush=True)
        sequential(hub, fake, key, conversation, 4, mode="govern",
                   streams=lambda n: n % 2 == 1, label="govern warm-up")  # fmt: skip
        jobs_before = CompactionJob.objects.filter(session_id=session_id).count()
        done = sequential(hub, fake, key, conversation, govern_turns, mode="govern",
                          streams=lambda n: n % 2 == 1, label="govern")  # fmt: skip
        results["govern"] = govern_results(done)
        results["govern"]["build_seconds"] = built.total
        results["govern"]["build_messages"] = first
        results["govern"]["compactions_during"] = (
            CompactionJob.objects.filter(session_id=session_id).count() - jobs_before
        )
        results["govern"]["threaded"] = check_threaded(conversation)
        _CONTINUED["govern"] = conversation
        print("  " + results["govern"]["threaded"], flush=True)

    if "crowd" not in skip:
        results["concurrent"] = {}
        for mode in crowd_modes:
            name = f"{clients} clients, {client_turns} streaming turns each, {mode} mode"
            print(f"concurrent: {name}", flush=True)
            keys = [
                create_key(owner, name=f"crowd {mode} {i}", scopes=["read", "write"])[1]
                for i in range(clients)
            ]
            seed = 1000 * (1 + crowd_modes.index(mode))
            direct = asyncio.run(
                crowd_run(fake + MESSAGES_PATH, None, None, clients, client_turns, seed, groups)
            )
            through = asyncio.run(
                crowd_run(hub + GATEWAY_PATH, keys, mode, clients, client_turns, seed, groups)
            )
            results["concurrent"][name] = {
                "direct": crowd_results(direct),
                "gateway": crowd_results(through),
            }


def run_phases(results: dict[str, Any], key: str, quick: bool) -> None:
    """The in-process breakdown, on the conversations the server's measurements left."""
    results["phases"] = {}
    count, profiled = (10, 3) if quick else (40, 6)
    for part, mode in (("observe", "observe"), ("govern", "govern")):
        conversation = _CONTINUED.get(part)
        if conversation is None:
            continue
        print(f"where the time goes: {mode} mode, in this process", flush=True)
        name = f"{mode} mode"
        results["phases"][name] = asyncio.run(
            in_process(conversation, key, mode, count, profiled, warm=3)
        )
        if part == "observe":
            print("where the time goes: a new session's first request, in this process")
            results["phases"]["a new session's first request, observe mode"] = asyncio.run(
                in_process(None, key, mode, count // 2, profiled, warm=0)
            )


if __name__ == "__main__":
    main()
