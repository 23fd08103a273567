"""The asynchronous client (what ``RemoteGovernor`` uses)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import httpx
from pydantic_ai.messages import ModelMessage

import ctxhub.client.calls as calls
from ctxhub.client.calls import RETRIED_STATUSES, Tools
from ctxhub.client.models import (
    Appended,
    Context,
    Job,
    Preview,
    Recalled,
    Session,
    StoredMessage,
)

T = TypeVar("T")


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
        self._settings = calls.Settings(base_url, api_key, timeout, max_retries)
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

    async def _send(self, call: calls.Call[T]) -> T:
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
                    raise calls.error(response)
            await asyncio.sleep(calls.wait(response, attempt))
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
        return await self._send(calls.create_session(title, model, context_window, policy, tools))

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
        return await self._send(calls.update_session(session_id, changes))

    async def session(self, session_id: uuid.UUID | str) -> Session:
        return await self._send(
            calls.Call("GET", f"/sessions/{session_id}", Session.model_validate)
        )

    async def sessions(self, *, page_size: int = 50) -> AsyncIterator[Session]:
        cursor: str | None = None
        while True:
            sessions, cursor = calls.sessions_of(
                await self._send(calls.sessions_page(cursor, page_size))
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
        return await self._send(calls.append(session_id, messages, expected_seq, idempotency_key))

    async def messages(
        self, session_id: uuid.UUID | str, *, after_seq: int = -1, page_size: int = 200
    ) -> AsyncIterator[StoredMessage]:
        cursor: int | None = after_seq
        while cursor is not None:
            rows, cursor = calls.messages_of(
                await self._send(calls.messages_page(session_id, cursor, page_size))
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
        return await self._send(calls.context(session_id, model, max_tokens))

    async def preview_compaction(self, session_id: uuid.UUID | str, *, focus: str = "") -> Preview:
        return await self._send(calls.preview_compaction(session_id, focus))

    async def compact(
        self, session_id: uuid.UUID | str, *, focus: str = "", expected: str | None = None
    ) -> Job:
        return await self._send(calls.compact(session_id, focus, expected))

    async def undo_compaction(self, compaction_id: int) -> None:
        await self._send(calls.undo_compaction(compaction_id))

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
        return await self._send(calls.fork(session_id, seq, title, model, policy))

    async def job(self, job_id: uuid.UUID | str) -> Job:
        return await self._send(calls.Call("GET", f"/jobs/{job_id}", Job.model_validate))

    async def export_session(self, session_id: uuid.UUID | str, format: str = "jsonl") -> str:
        return await self._send(calls.export_session(session_id, format))

    async def import_session(self, text: str) -> Session:
        return await self._send(calls.import_session(text))

    async def recall(self, session_id: uuid.UUID | str, query: str, *, limit: int = 5) -> Recalled:
        return await self._send(calls.recall(session_id, query, limit))
