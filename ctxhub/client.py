"""A client for the hub's REST API (sync ``Hub`` and async ``AsyncHub``) and ``RemoteGovernor``,
the capability that lets an external pydantic-ai agent keep its history in the hub.

::

    hub = Hub("https://ctxhub.example", api_key="ctxh_…")
    session = hub.create_session("Fix the build", model="openai:gpt-4o", tools=definitions)
    hub.append(session.id, messages)             # pydantic-ai messages in
    context = hub.context(session.id)            # pydantic-ai messages out, with the report
    hub.update_session(session.id, tools=other)  # the tool definitions the agent now sends

    agent = Agent("openai:gpt-4o", capabilities=[RemoteGovernor(AsyncHub(...), session.id)])

The hub counts the tool definitions an agent sends with each request into what the request
carries (the history's budget is smaller by them): give them as pydantic-ai ``ToolDefinition``
objects or as ``{"name", "description", "parameters"}`` JSON. ``RemoteGovernor`` sends its
agent's own whenever they change.

Both clients retry a request answered 429 or 5xx (or lost in transport) with exponential
backoff and jitter, waiting at least the server's ``Retry-After``; an append carries an
``Idempotency-Key`` made once and reused on its retries, so a retry never stores twice. Pages
are iterators. Errors raise ``HubError`` with the server's code, message and field.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from pydantic import BaseModel
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.tools import RunContext, ToolDefinition

from ctxhub.governance.recall import recall_toolset
from ctxhub.governance.report import ContextReport

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.toolsets import AbstractToolset

T = TypeVar("T")
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_WAIT_SECONDS = 60.0


class HubError(Exception):
    """The hub refused a request: its status, and the error body's code, message and field."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field


# --- what the API answers ------------------------------------------------------------------


class Tool(BaseModel):
    """A tool definition the session's agent sends, with its tokens."""

    name: str
    description: str | None
    parameters: dict[str, Any]
    tokens: int


class Session(BaseModel):
    id: uuid.UUID
    title: str
    model: str
    context_window: int | None
    policy: dict[str, Any]
    tools: list[Tool] = []
    tool_tokens: int = 0
    messages: int
    tokens: int
    created_at: datetime
    updated_at: datetime


class Appended(BaseModel):
    first_seq: int
    last_seq: int
    tokens: int


class StoredMessage(BaseModel):
    seq: int
    kind: str
    tokens: int
    source: str
    created_at: datetime
    message: ModelMessage


class Context(BaseModel):
    """What to send next, and why."""

    messages: list[ModelMessage]
    report: ContextReport


class RecallHit(BaseModel):
    """A passage the session's next request no longer carries in full."""

    seq: int
    part: int
    kind: str
    tool_name: str | None
    fate: str
    excerpt: str


class Recalled(BaseModel):
    query: str
    hits: list[RecallHit]
    text: str
    """The answer as the recall tool gives it to a model."""


class Job(BaseModel):
    id: uuid.UUID
    session: uuid.UUID
    status: str
    trigger: str
    focus: str
    outcome: str
    error: str
    progress: dict[str, Any]
    result: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None


# --- calls: built once, sent (and retried) by either client ------------------------------------


@dataclass(frozen=True)
class _Call[T]:
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


def _dump(messages: Sequence[ModelMessage]) -> list[Any]:
    dumped: list[Any] = ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
    return dumped


def _params(**values: Any) -> dict[str, Any]:
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


def _create_session(
    title: str,
    model: str,
    context_window: int | None,
    policy: dict[str, Any] | None,
    tools: Tools | None,
) -> _Call[Session]:
    body = {
        "title": title,
        "model": model,
        "context_window": context_window,
        "policy": policy or {},
        "tools": tool_json(tools or ()),
    }
    return _Call("POST", "/sessions", Session.model_validate, body=body)


def _update_session(session_id: uuid.UUID | str, changes: dict[str, Any]) -> _Call[Session]:
    body = {name: value for name, value in changes.items() if value is not None}
    if "tools" in body:
        body["tools"] = tool_json(body["tools"])
    return _Call("PATCH", f"/sessions/{session_id}", Session.model_validate, body=body)


def _append(
    session_id: uuid.UUID | str,
    messages: Sequence[ModelMessage],
    expected_seq: int | None,
    idempotency_key: str | None,
) -> _Call[Appended]:
    body: dict[str, Any] = {"messages": _dump(messages)}
    if expected_seq is not None:
        body["expected_seq"] = expected_seq
    # Made once per append and sent again with each of its retries.
    key = idempotency_key or str(uuid.uuid4())
    return _Call(
        "POST",
        f"/sessions/{session_id}/messages",
        Appended.model_validate,
        body=body,
        headers={"Idempotency-Key": key},
    )


def _context(
    session_id: uuid.UUID | str, model: str | None, max_tokens: int | None
) -> _Call[Context]:
    return _Call(
        "GET",
        f"/sessions/{session_id}/context",
        Context.model_validate,
        params=_params(model=model, max_tokens=max_tokens),
    )


def _page_of_sessions(cursor: str | None, limit: int) -> _Call[dict[str, Any]]:
    return _Call("GET", "/sessions", dict, params=_params(cursor=cursor, limit=limit))


def _page_of_messages(
    session_id: uuid.UUID | str, after_seq: int, limit: int
) -> _Call[dict[str, Any]]:
    return _Call(
        "GET",
        f"/sessions/{session_id}/messages",
        dict,
        params={"after_seq": after_seq, "limit": limit},
    )


def _compact(session_id: uuid.UUID | str, focus: str) -> _Call[Job]:
    return _Call(
        "POST", f"/sessions/{session_id}/compactions", Job.model_validate, body={"focus": focus}
    )


def _preview(session_id: uuid.UUID | str, focus: str) -> _Call[dict[str, Any]]:
    body = {"focus": focus, "dry_run": True}
    return _Call("POST", f"/sessions/{session_id}/compactions", dict, body=body)


def _fork(
    session_id: uuid.UUID | str,
    seq: int,
    title: str | None,
    model: str | None,
    policy: dict[str, Any] | None,
) -> _Call[Session]:
    body = {"seq": seq, **_params(title=title, model=model, policy=policy)}
    # Made once per fork and sent again with each of its retries: a retry makes no second fork.
    return _Call(
        "POST",
        f"/sessions/{session_id}/fork",
        Session.model_validate,
        body=body,
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )


def _export(session_id: uuid.UUID | str, format: str) -> _Call[str]:
    params = {"format": format}
    return _Call("GET", f"/sessions/{session_id}/export", str, params=params, text=True)


def _recall(session_id: uuid.UUID | str, query: str, limit: int) -> _Call[Recalled]:
    params = {"query": query, "limit": limit}
    return _Call("GET", f"/sessions/{session_id}/recall", Recalled.model_validate, params=params)


def _import(text: str) -> _Call[Session]:
    headers = {"Content-Type": "application/x-ndjson"}
    return _Call("POST", "/sessions/import", Session.model_validate, body=text, headers=headers)


def _error(response: httpx.Response) -> HubError:
    try:
        body = response.json()["error"]
        return HubError(response.status_code, body["code"], body["message"], body.get("field"))
    except (ValueError, KeyError, TypeError):
        return HubError(response.status_code, "http_error", response.text[:500])


def _retry_after(header: str) -> float:
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


def _wait(response: httpx.Response | None, attempt: int) -> float:
    """Seconds before retry ``attempt`` (from 0): the server's Retry-After at least, else
    exponential backoff (0.5 s doubling, at most 8 s) with jitter."""
    backoff = min(8.0, 0.5 * float(2**attempt)) * random.uniform(0.5, 1.0)
    header = response.headers.get("Retry-After") if response is not None else None
    if header:
        return min(MAX_WAIT_SECONDS, max(backoff, _retry_after(header)))
    return backoff


def _session_pages(page: dict[str, Any]) -> tuple[list[Session], str | None]:
    return [Session.model_validate(s) for s in page["sessions"]], page["next_cursor"]


def _message_pages(page: dict[str, Any]) -> tuple[list[StoredMessage], int | None]:
    return [StoredMessage.model_validate(m) for m in page["messages"]], page["next_after_seq"]


API_PATH = "/api/v1"


class _Settings:
    def __init__(self, base_url: str, api_key: str, timeout: float, max_retries: int) -> None:
        root = base_url.rstrip("/")
        # The hub's address, or its API's: both are what a user copies from the browser.
        self.base_url = root if root.endswith(API_PATH) else root + API_PATH
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.timeout = timeout
        self.max_retries = max_retries


# --- the clients -------------------------------------------------------------------------------


class Hub:
    """The synchronous client."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._settings = _Settings(base_url, api_key, timeout, max_retries)
        self._http = httpx.Client(
            base_url=self._settings.base_url,
            headers=self._settings.headers,
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Hub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: _Call[T]) -> T:
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                response = self._http.request(call.method, call.path, **call.arguments())
            except httpx.TransportError:
                if attempt >= self._settings.max_retries:
                    raise
            else:
                if response.status_code < 400:
                    return call.answer(response)
                if (
                    response.status_code not in RETRIED_STATUSES
                    or attempt >= self._settings.max_retries
                ):
                    raise _error(response)
            time.sleep(_wait(response, attempt))
            attempt += 1

    def create_session(
        self,
        title: str,
        *,
        model: str,
        context_window: int | None = None,
        policy: dict[str, Any] | None = None,
        tools: Tools | None = None,
    ) -> Session:
        return self._send(_create_session(title, model, context_window, policy, tools))

    def update_session(
        self,
        session_id: uuid.UUID | str,
        *,
        title: str | None = None,
        model: str | None = None,
        context_window: int | None = None,
        policy: dict[str, Any] | None = None,
        tools: Tools | None = None,
    ) -> Session:
        """Change what is given (``tools=[]``: the agent sends none); the rest stays."""
        changes = dict(
            title=title, model=model, context_window=context_window, policy=policy, tools=tools
        )
        return self._send(_update_session(session_id, changes))

    def session(self, session_id: uuid.UUID | str) -> Session:
        return self._send(_Call("GET", f"/sessions/{session_id}", Session.model_validate))

    def sessions(self, *, page_size: int = 50) -> Iterator[Session]:
        """Every session of the key's owner, newest first, fetched a page at a time."""
        cursor: str | None = None
        while True:
            sessions, cursor = _session_pages(self._send(_page_of_sessions(cursor, page_size)))
            yield from sessions
            if cursor is None:
                return

    def append(
        self,
        session_id: uuid.UUID | str,
        messages: Sequence[ModelMessage],
        *,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> Appended:
        return self._send(_append(session_id, messages, expected_seq, idempotency_key))

    def messages(
        self, session_id: uuid.UUID | str, *, after_seq: int = -1, page_size: int = 200
    ) -> Iterator[StoredMessage]:
        """The stored messages after ``after_seq``, oldest first, a page at a time."""
        cursor: int | None = after_seq
        while cursor is not None:
            rows, cursor = _message_pages(
                self._send(_page_of_messages(session_id, cursor, page_size))
            )
            yield from rows

    def context(
        self,
        session_id: uuid.UUID | str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
    ) -> Context:
        return self._send(_context(session_id, model, max_tokens))

    def preview_compaction(self, session_id: uuid.UUID | str, *, focus: str = "") -> dict[str, Any]:
        return self._send(_preview(session_id, focus))

    def compact(self, session_id: uuid.UUID | str, *, focus: str = "") -> Job:
        return self._send(_compact(session_id, focus))

    def fork(
        self,
        session_id: uuid.UUID | str,
        seq: int,
        *,
        title: str | None = None,
        model: str | None = None,
        policy: dict[str, Any] | None = None,
    ) -> Session:
        """A new session whose log is this one's up to and including message ``seq``, with
        the records over it: to go on from there under another policy, model or prompt."""
        return self._send(_fork(session_id, seq, title, model, policy))

    def job(self, job_id: uuid.UUID | str) -> Job:
        return self._send(_Call("GET", f"/jobs/{job_id}", Job.model_validate))

    def export_session(self, session_id: uuid.UUID | str, format: str = "jsonl") -> str:
        """The session as a file: ``jsonl`` (its log and records; ``import_session`` reads it
        back) or a ``markdown`` transcript."""
        return self._send(_export(session_id, format))

    def import_session(self, text: str) -> Session:
        """A new session of the key's owner from an export's JSONL text."""
        return self._send(_import(text))

    def recall(self, session_id: uuid.UUID | str, query: str, *, limit: int = 5) -> Recalled:
        """Search what the session's next request no longer carries in full (masked, cut,
        evicted, dropped, summarised): the best passages for ``query``, with their seqs."""
        return self._send(_recall(session_id, query, limit))


class AsyncHub:
    """The asynchronous client (what ``RemoteGovernor`` uses)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._settings = _Settings(base_url, api_key, timeout, max_retries)
        self._http = httpx.AsyncClient(
            base_url=self._settings.base_url,
            headers=self._settings.headers,
            timeout=timeout,
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncHub:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, call: _Call[T]) -> T:
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                response = await self._http.request(call.method, call.path, **call.arguments())
            except httpx.TransportError:
                if attempt >= self._settings.max_retries:
                    raise
            else:
                if response.status_code < 400:
                    return call.answer(response)
                if (
                    response.status_code not in RETRIED_STATUSES
                    or attempt >= self._settings.max_retries
                ):
                    raise _error(response)
            await asyncio.sleep(_wait(response, attempt))
            attempt += 1

    async def create_session(
        self,
        title: str,
        *,
        model: str,
        context_window: int | None = None,
        policy: dict[str, Any] | None = None,
        tools: Tools | None = None,
    ) -> Session:
        return await self._send(_create_session(title, model, context_window, policy, tools))

    async def update_session(
        self,
        session_id: uuid.UUID | str,
        *,
        title: str | None = None,
        model: str | None = None,
        context_window: int | None = None,
        policy: dict[str, Any] | None = None,
        tools: Tools | None = None,
    ) -> Session:
        """Change what is given (``tools=[]``: the agent sends none); the rest stays."""
        changes = dict(
            title=title, model=model, context_window=context_window, policy=policy, tools=tools
        )
        return await self._send(_update_session(session_id, changes))

    async def session(self, session_id: uuid.UUID | str) -> Session:
        return await self._send(_Call("GET", f"/sessions/{session_id}", Session.model_validate))

    async def sessions(self, *, page_size: int = 50) -> AsyncIterator[Session]:
        cursor: str | None = None
        while True:
            sessions, cursor = _session_pages(
                await self._send(_page_of_sessions(cursor, page_size))
            )
            for session in sessions:
                yield session
            if cursor is None:
                return

    async def append(
        self,
        session_id: uuid.UUID | str,
        messages: Sequence[ModelMessage],
        *,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> Appended:
        return await self._send(_append(session_id, messages, expected_seq, idempotency_key))

    async def messages(
        self, session_id: uuid.UUID | str, *, after_seq: int = -1, page_size: int = 200
    ) -> AsyncIterator[StoredMessage]:
        cursor: int | None = after_seq
        while cursor is not None:
            rows, cursor = _message_pages(
                await self._send(_page_of_messages(session_id, cursor, page_size))
            )
            for row in rows:
                yield row

    async def context(
        self,
        session_id: uuid.UUID | str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
    ) -> Context:
        return await self._send(_context(session_id, model, max_tokens))

    async def preview_compaction(
        self, session_id: uuid.UUID | str, *, focus: str = ""
    ) -> dict[str, Any]:
        return await self._send(_preview(session_id, focus))

    async def compact(self, session_id: uuid.UUID | str, *, focus: str = "") -> Job:
        return await self._send(_compact(session_id, focus))

    async def fork(
        self,
        session_id: uuid.UUID | str,
        seq: int,
        *,
        title: str | None = None,
        model: str | None = None,
        policy: dict[str, Any] | None = None,
    ) -> Session:
        """See ``Hub.fork``."""
        return await self._send(_fork(session_id, seq, title, model, policy))

    async def job(self, job_id: uuid.UUID | str) -> Job:
        return await self._send(_Call("GET", f"/jobs/{job_id}", Job.model_validate))

    async def export_session(self, session_id: uuid.UUID | str, format: str = "jsonl") -> str:
        return await self._send(_export(session_id, format))

    async def import_session(self, text: str) -> Session:
        return await self._send(_import(text))

    async def recall(self, session_id: uuid.UUID | str, query: str, *, limit: int = 5) -> Recalled:
        return await self._send(_recall(session_id, query, limit))


# --- the remote capability ---------------------------------------------------------------------


@dataclass
class _SentTools:
    sent: list[dict[str, Any]] | None = None
    """None: none sent yet."""


@dataclass
class RemoteGovernor(AbstractCapability[Any]):
    """Keeps an agent's history in the hub and sends what the hub governs.

    Before every model request of a run, the messages the run added since the last request
    are appended to the session (a user prompt, tool results), and the request carries the
    session's governed context; each response is appended as it arrives. The session shows
    live in the dashboard, and compactions, clears and pins made there apply to the agent's
    next request. The hub holds the history: run the agent without ``message_history`` (or
    with what the hub gave back); only what a run adds is pushed. The tool definitions the
    request carries are sent to the session when they differ from those sent last, so the hub
    counts them into the request.

    The agent also gets the ``recall`` tool (``recall=False`` leaves it out): it searches, in
    the hub, what the session's governed context no longer carries in full. Name it as the
    session's policy does (``awareness.recall_tool_name``) when that is not ``recall``: the
    notices the hub writes tell the model to call it by that name.
    """

    hub: AsyncHub
    session_id: uuid.UUID | str
    recall: bool = True
    recall_tool_name: str = "recall"
    _pushed: int | None = field(default=None, init=False, repr=False)
    """How many of the run's messages the hub has (None: the run has made no request yet)."""
    _tools: _SentTools = field(default_factory=lambda: _SentTools(), init=False, repr=False)
    """The tool definitions sent to the session last, shared by the runs of this capability."""

    async def for_run(self, ctx: RunContext[Any]) -> AbstractCapability[Any]:
        run = replace(self)
        run._tools = self._tools
        return run

    def get_toolset(self) -> AbstractToolset[Any] | None:
        if not self.recall:
            return None

        async def search(ctx: RunContext[Any], query: str, limit: int) -> str:
            return (await self.hub.recall(self.session_id, query, limit=limit)).text

        return recall_toolset(search, self.recall_tool_name)

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        messages = request_context.messages
        if self._pushed is None:
            # What came before the run's first request is the history it was given.
            self._pushed = len(messages) - 1
        new = messages[self._pushed :]
        if new:
            await self.hub.append(self.session_id, new)
            self._pushed = len(messages)
        parameters = request_context.model_request_parameters
        tools = tool_json([*parameters.function_tools, *parameters.output_tools])
        if tools != self._tools.sent:
            await self.hub.update_session(self.session_id, tools=tools)
            self._tools.sent = tools
        request_context.messages = (await self.hub.context(self.session_id)).messages
        return request_context

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        await self.hub.append(self.session_id, [response])
        if self._pushed is not None:
            self._pushed += 1
        return response
