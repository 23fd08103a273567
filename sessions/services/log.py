"""The log: appending messages (with the facts governance plans from), pages, raw totals.

Views, consumers, tasks and commands call these functions; they never count tokens or build
messages themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Max, Sum
from django.utils import timezone
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from ctxhub.governance.facts import message_facts
from ctxhub.governance.tokens import Tokenizer, tokenizer_for
from sessions import events
from sessions.models import AgentSession, Message, MessageKind, MessageSource
from sessions.payloads import (
    FieldError,
    InvalidPayload,
    content_hash,
    message_from_payload,
    parse_payload,
    storable_payload,
)
from sessions.services.errors import Conflict
from sessions.services.governed import session_window
from sessions.services.recall import store_pieces


def session_tokenizer(session: AgentSession) -> Tokenizer:
    return tokenizer_for(session.model)


def _unlogged(
    session: AgentSession,
    message: ModelMessage,
    payload: dict[str, Any],
    source: str,
    tokenizer: Tokenizer,
) -> Message:
    """The row of a message about to be logged: everything but its seq, which the append
    gives it under the session's lock."""
    facts = message_facts(message, tokenizer)
    return Message(
        session=session,
        kind=MessageKind.REQUEST if isinstance(message, ModelRequest) else MessageKind.RESPONSE,
        payload=payload,
        tokens=facts.tokens,
        encoding=tokenizer.encoding_name,
        tokens_exact=tokenizer.exact,
        facts=facts.to_json(),
        # Read from the payload once, so charts of long sessions never parse payloads.
        reported_input_tokens=(
            message.usage.input_tokens or None if isinstance(message, ModelResponse) else None
        ),
        content_hash=content_hash(payload),
        source=source,
    )


def _storable(index: int, message: ModelMessage) -> dict[str, Any]:
    """``storable_payload``, naming the message of the batch a refusal is about."""
    try:
        return storable_payload(message)
    except InvalidPayload as exc:
        raise InvalidPayload(
            [FieldError(f"messages[{index}].{e.path}", e.message) for e in exc.errors]
        ) from None


def append_messages(
    session: AgentSession,
    items: Iterable[ModelMessage | Any],
    *,
    source: str = MessageSource.API,
    auto_compact: bool = True,
    expected_seq: int | None = None,
) -> list[Message]:
    """Append messages to the end of a session's log, all or none.

    Each item is a ``ModelMessage`` or its JSON form; JSON is validated first, so a bad item
    raises ``InvalidPayload`` (naming the field) before anything is written. Once committed, the
    append is reported (``events.messages_appended``): the messages are pushed live, and the
    session is settled (``sessions.tasks``): a session that passed its soft threshold gets a
    background compaction, unless ``auto_compact`` is off (loading a history at once, as the
    demo data does). ``expected_seq``: the seq the first message must get; a Conflict, and
    nothing written, when another append came first.
    """
    messages = [
        item if isinstance(item, ModelRequest | ModelResponse) else parse_payload(item)
        for item in items
    ]
    if not messages:
        return []
    payloads = [_storable(index, m) for index, m in enumerate(messages)]  # before any write
    # Counted as stored: read back from its payload, each message is the one every later reader
    # (the history, a recount) loads and counts (pydantic-ai loads a legacy part as its successor).
    messages = [message_from_payload(payload) for payload in payloads]
    tokenizer = session_tokenizer(session)
    # Counted before the session is locked: concurrent appends to it wait for the writes only.
    rows = [
        _unlogged(session, m, payload, source, tokenizer)
        for m, payload in zip(messages, payloads, strict=True)
    ]
    # Inside a caller's transaction, a savepoint (two round trips) only where a refusal may
    # come that the caller answers and goes on from: ``expected_seq``'s Conflict. Any other
    # error fails the caller's transaction whole, and no caller goes on from one.
    with transaction.atomic(savepoint=expected_seq is not None):
        count, tokens = _logged(session, len(rows), sum(row.tokens for row in rows))
        start = count - len(rows)
        if expected_seq is not None and expected_seq != start:
            raise Conflict(
                f"expected_seq is {expected_seq} but the next message would be #{start}: "
                "another append came first; read the log and retry",
                field="expected_seq",
                next_seq=start,
            )
        for i, row in enumerate(rows):
            row.seq = start + i
        Message.objects.bulk_create(rows)
        store_pieces(session, zip((row.seq for row in rows), messages, strict=True))
        totals = TokenTotals(
            messages=count,
            tokens=tokens,
            window=session_window(session),
            encoding=tokenizer.encoding_name,
            exact=tokenizer.exact,
        )
        events.send_on_commit(
            events.messages_appended,
            session=session,
            messages=rows,
            totals=totals,
            auto_compact=auto_compact,
        )
    return rows


def _logged(session: AgentSession, messages: int, tokens: int) -> tuple[int, int]:
    """Count ``messages`` of ``tokens`` more into the session's log, under its row lock until
    the transaction ends: how many messages and tokens the log holds with them.

    One statement takes the lock and both counts, as they are after any append that committed
    while it waited: concurrent appends to a session take turns and get consecutive, unique
    seqs."""
    meta = AgentSession._meta
    name = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {name(meta.db_table)} SET log_messages = log_messages + %s, "
            "log_tokens = log_tokens + %s, updated_at = %s WHERE id = %s "
            "RETURNING log_messages, log_tokens",
            [
                messages,
                tokens,
                meta.get_field("updated_at").get_db_prep_value(timezone.now(), connection),
                meta.pk.get_db_prep_value(session.pk, connection),
            ],
        )
        found = cursor.fetchone()
    if found is None:
        raise AgentSession.DoesNotExist(f"no session {session.pk}")
    return found[0], found[1]


def append_message(
    session: AgentSession, item: ModelMessage | Any, *, source: str = MessageSource.API
) -> Message:
    return append_messages(session, [item], source=source)[0]


# The detail page shows the newest messages; earlier ones load a page at a time.
PAGE_SIZE = 200


# Messages shown before the one a page is opened at, for context.
PAGE_LEAD = 10


def message_page(
    session: AgentSession, *, before: int | None = None, at: int | None = None
) -> list[Message]:
    """The newest PAGE_SIZE messages (before a seq, if given), oldest first; or, ``at`` a
    seq, the page holding it (a few messages before it, then those after)."""
    if at is not None:
        return list(session.messages.filter(seq__gte=max(at - PAGE_LEAD, 0))[:PAGE_SIZE])
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
    recounted: int = 0
    """Messages whose stored count a recount changed."""

    @property
    def percent(self) -> float:
        return 100.0 * self.tokens / self.window if self.window else 0.0


def token_totals(session: AgentSession) -> TokenTotals:
    """The size of the whole log against the session's window, from the cached counts (and
    the encoding they were made with, as stored: no encoding is loaded for it)."""
    messages, tokens = AgentSession.objects.values_list("log_messages", "log_tokens").get(
        pk=session.pk
    )
    counted_with = session.messages.order_by("-seq").values_list("encoding", "tokens_exact").first()
    if counted_with is None:
        tokenizer = session_tokenizer(session)
        counted_with = (tokenizer.encoding_name, tokenizer.exact)
    return TokenTotals(
        messages=messages,
        tokens=tokens,
        window=session_window(session),
        encoding=counted_with[0],
        exact=counted_with[1],
    )


def keep_log_counts(session: AgentSession) -> None:
    """The session's ``log_tokens`` and ``log_messages`` set from its messages (after a write
    that is not an append: a fork's copy, a recount)."""
    found = session.messages.aggregate(tokens=Sum("tokens"), newest=Max("seq"))
    AgentSession.objects.filter(pk=session.pk).update(
        log_tokens=found["tokens"] or 0,
        log_messages=0 if found["newest"] is None else found["newest"] + 1,
    )


def recount_tokens(session: AgentSession) -> TokenTotals:
    """Recount every message with the session's current tokenizer and refresh the cache.

    The payloads are untouched: only the derived counting columns (tokens and facts) change,
    and only where the model (hence the encoding) or the counting rules changed.
    """
    tokenizer = session_tokenizer(session)
    stale: list[tuple[int, Any]] = []
    rows = session.messages.only("pk", "payload", "tokens", "encoding", "tokens_exact", "facts")
    for row in rows:
        facts = message_facts(row.message, tokenizer)
        stored = facts.to_json()
        if (row.tokens, row.encoding, row.tokens_exact, row.facts) != (
            facts.tokens,
            tokenizer.encoding_name,
            tokenizer.exact,
            stored,
        ):
            stale.append((row.pk, facts))
    with transaction.atomic():
        for pk, facts in stale:
            Message.objects.filter(pk=pk).update(
                tokens=facts.tokens,
                encoding=tokenizer.encoding_name,
                tokens_exact=tokenizer.exact,
                facts=facts.to_json(),
            )
        keep_log_counts(session)
    totals = replace(token_totals(session), recounted=len(stale))
    events.send(events.meter_changed, session=session, totals=totals)
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
    rows = AgentSession.objects.filter(owner=user).annotate(message_count=Count("messages"))
    return [
        SessionSummary(row, row.message_count, row.log_tokens, session_window(row)) for row in rows
    ]
