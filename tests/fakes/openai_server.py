"""A local fake of the OpenAI chat-completions API, for the real HTTP provider path offline.

``FakeOpenAI`` serves ``POST /v1/chat/completions`` on 127.0.0.1 (a free port) from a thread,
answering with plain JSON or, when the request asks for ``stream``, server-sent events. What it
answers is decided by ``replies`` (a queue of texts or tool calls; when empty it answers a fixed
text) and it can be told to refuse any request above a size with OpenAI's own
``context_length_exceeded`` error, to answer the next requests with HTTP errors (``failures``:
a 429 with its Retry-After, a 503), to take its time (``delay``) or to run a hook on each
request (``on_request``). Every request body is recorded in ``requests``.

Use it through the ``fake_openai`` fixture::

    from tests.fakes.openai_server import fake_openai  # noqa: F401  (the fixture)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

DEFAULT_TEXT = "Done."


@dataclass
class ToolCallReply:
    """A reply that calls one tool."""

    name: str
    arguments: dict[str, Any]
    call_id: str = "call_1"


Reply = str | ToolCallReply


def prompt_chars(body: dict[str, Any]) -> int:
    """Characters of every message's content and tool-call arguments in a request body."""
    total = 0
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(str(item.get("text", ""))) for item in content)
        for call in message.get("tool_calls") or []:
            total += len(call.get("function", {}).get("arguments", ""))
    return total


@dataclass
class FakeOpenAI:
    """The fake server's state: what to answer, when to refuse, and what it received."""

    replies: list[Reply] = field(default_factory=list)
    max_prompt_chars: int | None = None
    """Requests whose messages exceed this many characters get ``context_length_exceeded``."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    """(status, headers) answered, in order, before any reply."""
    delay: float = 0.0
    """Seconds each answer waits."""
    on_request: Callable[[dict[str, Any]], None] | None = None
    overflows: int = 0
    url: str = ""
    _server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        """What ``OpenAIProvider(base_url=...)`` takes."""
        return f"{self.url}/v1"

    def overflowing(self, body: dict[str, Any]) -> bool:
        """Whether this request is refused as too long."""
        return self.max_prompt_chars is not None and prompt_chars(body) > self.max_prompt_chars

    def next_reply(self) -> Reply:
        """The next scripted reply (a fixed text once the script is used up)."""
        return self.replies.pop(0) if self.replies else DEFAULT_TEXT

    def start(self) -> None:
        """Serve on a free port of 127.0.0.1 from a daemon thread."""
        fake = self

        class Handler(_Handler):
            state = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _message(reply: Reply) -> dict[str, Any]:
    if isinstance(reply, ToolCallReply):
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": reply.call_id,
                    "type": "function",
                    "function": {"name": reply.name, "arguments": json.dumps(reply.arguments)},
                }
            ],
        }
    return {"role": "assistant", "content": reply}


class _Handler(BaseHTTPRequestHandler):
    state: FakeOpenAI

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``requests`` instead."""

    def _json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        state = self.state
        state.requests.append(body)
        if state.on_request is not None:
            state.on_request(body)
        if state.delay:
            time.sleep(state.delay)
        if state.failures:
            status, headers = state.failures.pop(0)
            self._json(
                status,
                {"error": {"message": f"fake failure {status}", "type": "server_error"}},
                headers,
            )
            return
        if state.overflowing(body):
            state.overflows += 1
            size = prompt_chars(body) // 4
            limit = (state.max_prompt_chars or 0) // 4
            self._json(
                400,
                {
                    "error": {
                        "message": (
                            f"This model's maximum context length is {limit} tokens. However, "
                            f"your messages resulted in {size} tokens. Please reduce the length "
                            "of the messages."
                        ),
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "context_length_exceeded",
                    }
                },
            )
            return
        reply = state.next_reply()
        model = body.get("model", "gpt-4o")
        finish = "tool_calls" if isinstance(reply, ToolCallReply) else "stop"
        usage = {"prompt_tokens": prompt_chars(body) // 4, "completion_tokens": 5}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        base = {"id": "chatcmpl-fake", "created": 1_700_000_000, "model": model}
        if not body.get("stream"):
            self._json(
                200,
                {
                    **base,
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": _message(reply), "finish_reason": finish}],
                    "usage": usage,
                },
            )
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        chunk = {**base, "object": "chat.completion.chunk"}

        def send(payload: dict[str, Any] | str) -> None:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            self.wfile.write(f"data: {data}\n\n".encode())
            self.wfile.flush()

        if isinstance(reply, ToolCallReply):
            delta = _message(reply)
            delta["tool_calls"][0]["index"] = 0
            send({**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        else:
            send({**chunk, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
            for word in reply.split(" "):
                piece = {"content": word + " "}
                send({**chunk, "choices": [{"index": 0, "delta": piece, "finish_reason": None}]})
        send({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            send({**chunk, "choices": [], "usage": usage})
        send("[DONE]")


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A running fake OpenAI server, stopped after the test."""
    fake = FakeOpenAI()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
