"""Claude Code transcript lines made by hand, for tests that need a line at a time."""

from __future__ import annotations

import json
from typing import Any

SESSION = "5d1e0c9e-1111-4a5b-9c3d-000000000001"
MODEL = "claude-sonnet-4-5-20250929"


def _line(kind: str, uuid: str, parent: str | None, second: int, **rest: Any) -> str:
    envelope = {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/dev/shop",
        "sessionId": rest.pop("session", SESSION),
        "version": "2.0.14",
        "gitBranch": "main",
        "type": kind,
        "uuid": uuid,
        "timestamp": f"2025-10-01T10:{second // 60:02d}:{second % 60:02d}.000Z",
        **rest,
    }
    return json.dumps(envelope) + "\n"


def prompt(uuid: str, parent: str | None, second: int, text: str, **rest: Any) -> str:
    return _line("user", uuid, parent, second, message={"role": "user", "content": text}, **rest)


def result(uuid: str, parent: str, second: int, call: str, text: str) -> str:
    block = {"type": "tool_result", "tool_use_id": call, "content": text}
    return _line("user", uuid, parent, second, message={"role": "user", "content": [block]})


def usage(read: int, written: int, output: int, fresh: int = 3) -> dict[str, int]:
    return {
        "input_tokens": fresh,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": written,
        "output_tokens": output,
    }


def answer(
    uuid: str,
    parent: str,
    second: int,
    message_id: str,
    block: dict[str, Any],
    spent: dict[str, int],
    **rest: Any,
) -> str:
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [block],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": spent,
    }
    return _line(
        "assistant", uuid, parent, second, message=message, requestId=f"req_{message_id}", **rest
    )


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


def tool_use(call: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call, "name": name, "input": arguments}
