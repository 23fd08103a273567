"""The synchronous client."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
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
        self._settings = calls.Settings(base_url, api_key, timeout, max_retries)
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

    def _send(self, call: calls.Call[T]) -> T:
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
                    raise calls.error(response)
            time.sleep(calls.wait(response, attempt))
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
        return self._send(calls.create_session(title, model, context_window, policy, tools))

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
        return self._send(calls.update_session(session_id, changes))

    def session(self, session_id: uuid.UUID | str) -> Session:
        return self._send(calls.Call("GET", f"/sessions/{session_id}", Session.model_validate))

    def sessions(self, *, page_size: int = 50) -> Iterator[Session]:
        """Every session of the key's owner, newest first, fetched a page at a time."""
        cursor: str | None = None
        while True:
            sessions, cursor = calls.sessions_of(self._send(calls.sessions_page(cursor, page_size)))
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
        return self._send(calls.append(session_id, messages, expected_seq, idempotency_key))

    def messages(
        self, session_id: uuid.UUID | str, *, after_seq: int = -1, page_size: int = 200
    ) -> Iterator[StoredMessage]:
        """The stored messages after ``after_seq``, oldest first, a page at a time."""
        cursor: int | None = after_seq
        while cursor is not None:
            rows, cursor = calls.messages_of(
                self._send(calls.messages_page(session_id, cursor, page_size))
            )
            yield from rows

    def context(
        self,
        session_id: uuid.UUID | str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
    ) -> Context:
        return self._send(calls.context(session_id, model, max_tokens))

    def preview_compaction(self, session_id: uuid.UUID | str, *, focus: str = "") -> Preview:
        """What compacting now would summarise and keep, and what the next request would
        carry: changes nothing."""
        return self._send(calls.preview_compaction(session_id, focus))

    def compact(
        self, session_id: uuid.UUID | str, *, focus: str = "", expected: str | None = None
    ) -> Job:
        """Queue a compaction (``expected``: a preview's fingerprint, refused with a 409 when
        the session changed since); follow it with ``job``."""
        return self._send(calls.compact(session_id, focus, expected))

    def undo_compaction(self, compaction_id: int) -> None:
        """Undo a compaction (``job.result["compaction"]``): the model sees what it replaced."""
        self._send(calls.undo_compaction(compaction_id))

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
        return self._send(calls.fork(session_id, seq, title, model, policy))

    def job(self, job_id: uuid.UUID | str) -> Job:
        return self._send(calls.Call("GET", f"/jobs/{job_id}", Job.model_validate))

    def export_session(self, session_id: uuid.UUID | str, format: str = "jsonl") -> str:
        """The session as a file: ``jsonl`` (its log and records; ``import_session`` reads it
        back) or a ``markdown`` transcript."""
        return self._send(calls.export_session(session_id, format))

    def import_session(self, text: str) -> Session:
        """A new session of the key's owner from an export's JSONL text."""
        return self._send(calls.import_session(text))

    def recall(self, session_id: uuid.UUID | str, query: str, *, limit: int = 5) -> Recalled:
        """Search what the session's next request no longer carries in full (masked, cut,
        evicted, dropped, summarised): the best passages for ``query``, with their seqs."""
        return self._send(calls.recall(session_id, query, limit))
