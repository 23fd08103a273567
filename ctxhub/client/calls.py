"""Each API call built once, as data (method, path, parameters, how to read the answer), for
either client to send and retry; and how a retry waits."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import httpx
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.tools import ToolDefinition

from ctxhub.client.models import (
    Appended,
    Context,
    HubError,
    Job,
    Preview,
    Recalled,
    Session,
    StoredMessage,
)

T = TypeVar("T")
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_WAIT_SECONDS = 60.0


@dataclass(frozen=True)
class Call[T]:
    method: str
    path: str
    parse: Callable[[Any], T]
    params: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    """JSON; a string is sent as it is (an export's text)."""
    headers: dict[str, str] = field(default_factory=dict)
    text: bool = False
    """The answer is text (an export), not JSON."""

    def arguments(self) -> dict[str, Any]:
        sent = {"content": self.body} if isinstance(self.body, str) else {"json": self.body}
        return {"params": self.params, "headers": self.headers, **sent}

    def answer(self, response: httpx.Response) -> T:
        return self.parse(response.text if self.text else response.json())


def dump(messages: Sequence[ModelMessage]) -> list[Any]:
    dumped: list[Any] = ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
    return dumped


def present(**values: Any) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


Tools = Sequence[ToolDefinition | Mapping[str, Any]]
"""Tool definitions: pydantic-ai's, or their JSON (``{"name", "description", "parameters"}``)."""


def tool_json(tools: Tools) -> list[dict[str, Any]]:
    """Tool definitions as the API takes them."""
    return [
        {"name": t.name, "description": t.description, "parameters": t.parameters_json_schema}
        if isinstance(t, ToolDefinition)
        else {
            "name": t["name"],
            "description": t.get("description"),
            "parameters": t.get("parameters") or {},
        }
        for t in tools
    ]


def create_session(
    title: str,
    model: str,
    context_window: int | None,
    policy: dict[str, Any] | None,
    tools: Tools | None,
) -> Call[Session]:
    body = {
        "title": title,
        "model": model,
        "context_window": context_window,
        "policy": policy or {},
        "tools": tool_json(tools or ()),
    }
    return Call("POST", "/sessions", Session.model_validate, body=body)


def update_session(session_id: uuid.UUID | str, changes: dict[str, Any]) -> Call[Session]:
    body = {name: value for name, value in changes.items() if value is not None}
    if "tools" in body:
        body["tools"] = tool_json(body["tools"])
    return Call("PATCH", f"/sessions/{session_id}", Session.model_validate, body=body)


def append(
    session_id: uuid.UUID | str,
    messages: Sequence[ModelMessage],
    expected_seq: int | None,
    idempotency_key: str | None,
) -> Call[Appended]:
    body: dict[str, Any] = {"messages": dump(messages)}
    if expected_seq is not None:
        body["expected_seq"] = expected_seq
    # Made once per append and sent again with each of its retries.
    key = idempotency_key or str(uuid.uuid4())
    return Call(
        "POST",
        f"/sessions/{session_id}/messages",
        Appended.model_validate,
        body=body,
        headers={"Idempotency-Key": key},
    )


def context(
    session_id: uuid.UUID | str, model: str | None, max_tokens: int | None
) -> Call[Context]:
    return Call(
        "GET",
        f"/sessions/{session_id}/context",
        Context.model_validate,
        params=present(model=model, max_tokens=max_tokens),
    )


def sessions_page(cursor: str | None, limit: int) -> Call[dict[str, Any]]:
    return Call("GET", "/sessions", dict, params=present(cursor=cursor, limit=limit))


def messages_page(session_id: uuid.UUID | str, after_seq: int, limit: int) -> Call[dict[str, Any]]:
    return Call(
        "GET",
        f"/sessions/{session_id}/messages",
        dict,
        params={"after_seq": after_seq, "limit": limit},
    )


def compact(session_id: uuid.UUID | str, focus: str, expected: str | None = None) -> Call[Job]:
    body = present(focus=focus, expected=expected)
    return Call("POST", f"/sessions/{session_id}/compactions", Job.model_validate, body=body)


def preview_compaction(session_id: uuid.UUID | str, focus: str) -> Call[Preview]:
    body = {"focus": focus, "dry_run": True}
    return Call("POST", f"/sessions/{session_id}/compactions", Preview.model_validate, body=body)


def undo_compaction(compaction_id: int) -> Call[dict[str, Any]]:
    return Call("POST", f"/compactions/{compaction_id}/undo", dict)


def fork(
    session_id: uuid.UUID | str,
    seq: int,
    title: str | None,
    model: str | None,
    policy: dict[str, Any] | None,
) -> Call[Session]:
    body = {"seq": seq, **present(title=title, model=model, policy=policy)}
    # Made once per fork and sent again with each of its retries: a retry makes no second fork.
    return Call(
        "POST",
        f"/sessions/{session_id}/fork",
        Session.model_validate,
        body=body,
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )


def export_session(session_id: uuid.UUID | str, format: str) -> Call[str]:
    params = {"format": format}
    return Call("GET", f"/sessions/{session_id}/export", str, params=params, text=True)


def recall(session_id: uuid.UUID | str, query: str, limit: int) -> Call[Recalled]:
    params = {"query": query, "limit": limit}
    return Call("GET", f"/sessions/{session_id}/recall", Recalled.model_validate, params=params)


def import_session(text: str) -> Call[Session]:
    headers = {"Content-Type": "application/x-ndjson"}
    return Call("POST", "/sessions/import", Session.model_validate, body=text, headers=headers)


def error(response: httpx.Response) -> HubError:
    try:
        body = response.json()["error"]
        return HubError(response.status_code, body["code"], body["message"], body.get("field"))
    except (ValueError, KeyError, TypeError):
        return HubError(response.status_code, "http_error", response.text[:500])


def retry_after(header: str) -> float:
    """Retry-After in seconds: a number of seconds or an HTTP date."""
    try:
        return float(header)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return 0.0
    return (when - datetime.now(when.tzinfo)).total_seconds()


def wait(response: httpx.Response | None, attempt: int) -> float:
    """Seconds before retry ``attempt`` (from 0): the server's Retry-After at least, else
    exponential backoff (0.5 s doubling, at most 8 s) with jitter."""
    backoff = min(8.0, 0.5 * float(2**attempt)) * random.uniform(0.5, 1.0)
    header = response.headers.get("Retry-After") if response is not None else None
    if header:
        return min(MAX_WAIT_SECONDS, max(backoff, retry_after(header)))
    return backoff


def sessions_of(page: dict[str, Any]) -> tuple[list[Session], str | None]:
    return [Session.model_validate(s) for s in page["sessions"]], page["next_cursor"]


def messages_of(page: dict[str, Any]) -> tuple[list[StoredMessage], int | None]:
    return [StoredMessage.model_validate(m) for m in page["messages"]], page["next_after_seq"]


API_PATH = "/api/v1"


class Settings:
    def __init__(self, base_url: str, api_key: str, timeout: float, max_retries: int) -> None:
        root = base_url.rstrip("/")
        # The hub's address, or its API's: both are what a user copies from the browser.
        self.base_url = root if root.endswith(API_PATH) else root + API_PATH
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.timeout = timeout
        self.max_retries = max_retries
