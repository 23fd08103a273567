"""The only bridge between the ORM and the governance engine.

Views, consumers, tasks and commands call these functions; they never count tokens or build
messages themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Count, Max, Sum
from django.utils import timezone
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from ctxhub.governance.tokens import Tokenizer, context_window, message_tokens, tokenizer_for
from sessions import live
from sessions.models import AgentSession, Message, MessageKind, MessageSource
from sessions.payloads import content_hash, message_to_payload, parse_payload


def session_tokenizer(session: AgentSession) -> Tokenizer:
    return tokenizer_for(session.model)


def session_window(session: AgentSession) -> int:
    """The context window the session is governed against: its override, else the model's."""
    return session.context_window or context_window(session.model)


def _build(
    session: AgentSession, seq: int, message: ModelMessage, source: str, tokenizer: Tokenizer
) -> Message:
    payload = message_to_payload(message)
    return Message(
        session=session,
        seq=seq,
        kind=MessageKind.REQUEST if isinstance(message, ModelRequest) else MessageKind.RESPONSE,
        payload=payload,
        tokens=message_tokens(message, tokenizer),
        encoding=tokenizer.encoding_name,
        tokens_exact=tokenizer.exact,
        content_hash=content_hash(payload),
        source=source,
    )


def append_messages(
    session: AgentSession, items: Iterable[ModelMessage | Any], *, source: str = MessageSource.API
) -> list[Message]:
    """Append messages to the end of a session's log, all or none.

    Each item is a ``ModelMessage`` or its JSON form; JSON is validated first, so a bad item
    raises ``InvalidPayload`` (naming the field) before anything is written.
    """
    messages = [
        item if isinstance(item, ModelRequest | ModelResponse) else parse_payload(item)
        for item in items
    ]
    if not messages:
        return []
    tokenizer = session_tokenizer(session)
    with transaction.atomic():
        # Updating the session row locks it until commit, so concurrent appends to one
        # session take turns and get consecutive, unique seq numbers.
        AgentSession.objects.filter(pk=session.pk).update(updated_at=timezone.now())
        last = session.messages.aggregate(last=Max("seq"))["last"]
        start = 0 if last is None else last + 1
        rows = Message.objects.bulk_create(
            [_build(session, start + i, m, source, tokenizer) for i, m in enumerate(messages)]
        )
        transaction.on_commit(lambda: live.messages_appended(session, rows, token_totals(session)))
    return rows


def append_message(
    session: AgentSession, item: ModelMessage | Any, *, source: str = MessageSource.API
) -> Message:
    return append_messages(session, [item], source=source)[0]


# The detail page shows the newest messages; earlier ones load a page at a time.
PAGE_SIZE = 200


def message_page(session: AgentSession, *, before: int | None = None) -> list[Message]:
    """The newest PAGE_SIZE messages (before a seq, if given), oldest first."""
    rows = session.messages.order_by("-seq")
    if before is not None:
        rows = rows.filter(seq__lt=before)
    return list(reversed(rows[:PAGE_SIZE]))


@dataclass(frozen=True, slots=True)
class TokenTotals:
    messages: int
    tokens: int
    window: int
    encoding: str
    exact: bool

    @property
    def percent(self) -> float:
        return 100.0 * self.tokens / self.window if self.window else 0.0


def token_totals(session: AgentSession) -> TokenTotals:
    """The size of the whole log against the session's window, from the cached counts."""
    tokenizer = session_tokenizer(session)
    agg = session.messages.aggregate(tokens=Sum("tokens"), messages=Max("seq"))
    return TokenTotals(
        messages=0 if agg["messages"] is None else agg["messages"] + 1,
        tokens=agg["tokens"] or 0,
        window=session_window(session),
        encoding=tokenizer.encoding_name,
        exact=tokenizer.exact,
    )


def recount_tokens(session: AgentSession) -> TokenTotals:
    """Recount every message with the session's current tokenizer and refresh the cache.

    The payloads are untouched: only the derived count columns change, and only where the
    model (hence the encoding) or the counting rules changed.
    """
    tokenizer = session_tokenizer(session)
    stale: dict[tuple[int, str, bool], list[int]] = {}
    for row in session.messages.only("pk", "payload", "tokens", "encoding", "tokens_exact"):
        tokens = message_tokens(row.message, tokenizer)
        if (row.tokens, row.encoding, row.tokens_exact) != (
            tokens,
            tokenizer.encoding_name,
            tokenizer.exact,
        ):
            stale.setdefault((tokens, tokenizer.encoding_name, tokenizer.exact), []).append(row.pk)
    with transaction.atomic():
        for (tokens, encoding, exact), pks in stale.items():
            Message.objects.filter(pk__in=pks).update(
                tokens=tokens, encoding=encoding, tokens_exact=exact
            )
    totals = token_totals(session)
    live.meter_changed(session, totals)
    return totals


@dataclass(frozen=True, slots=True)
class SessionSummary:
    session: AgentSession
    messages: int
    tokens: int
    window: int

    @property
    def percent(self) -> float:
        return 100.0 * self.tokens / self.window


def sessions_for(user: Any) -> list[SessionSummary]:
    """A user's own sessions, newest first, with their sizes against their windows."""
    rows = AgentSession.objects.filter(owner=user).annotate(
        message_count=Count("messages"), token_total=Sum("messages__tokens")
    )
    return [
        SessionSummary(row, row.message_count, row.token_total or 0, session_window(row))
        for row in rows
    ]
