"""What sessions cost in money, from the usage their providers reported.

Each stored response carries its usage and the model and provider that answered it. Only those
keys are read, by the database, and only from responses that reported input tokens (the
``reported_input_tokens`` column, filled on append): no payload is parsed. Each response is
priced with its own model and provider (the session's where it names none) at its own time,
with ``ctxhub.pricing``.

The log is append-only and a response's price never changes for one release of the price data,
so a session's cost is kept in the cache with the last seq it covers: the next reading adds only
the responses stored since (a 20,000-message session is read once, then a few rows at a time).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.cache import cache
from django.db.models import Q
from django.db.models.fields.json import KT, KeyTransform

from ctxhub.governance import CompactionReport
from ctxhub.pricing import (
    PRICES_VERSION,
    Price,
    TokenUsage,
    model_ref,
    price,
    price_requests,
)
from sessions.models import AgentSession, Message, MessageKind

log = logging.getLogger(__name__)

# A stored response's keys read for its cost, in the order of the row the query returns. The names
# are read as JSON values, a null as None (SQLite gives the text of a JSON null as "null"); the
# rest as text, which no null reaches, and spares decoding 10,000 rows of JSON.
_NAMES = ("payload__model_name", "payload__provider_name")
_TEXTS = (
    "payload__timestamp",
    "payload__usage__input_tokens",
    "payload__usage__cache_read_tokens",
    "payload__usage__cache_write_tokens",
    "payload__usage__cache_write_1h_tokens",
    "payload__usage__output_tokens",
)
CACHE_SECONDS = 7 * 24 * 3600

_Requests = list[tuple[TokenUsage, datetime | None]]


@dataclass(frozen=True, slots=True)
class SessionCost:
    """A session's reported tokens and what they cost."""

    price: Price | None
    """The priced responses' cost; None when no response could be priced (or none reported)."""
    responses: int
    """Responses that reported their usage."""
    priced: int
    """Of those, the ones priced (the rest: a model genai-prices has no price for, or counts
    that do not add up)."""
    input_tokens: int = 0
    """Every input token reported, cached ones included."""
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0

    @property
    def reported(self) -> bool:
        return self.responses > 0

    @property
    def unpriced(self) -> int:
        return self.responses - self.priced

    @property
    def uncached_tokens(self) -> int:
        """Input tokens neither read from nor written to the cache."""
        return self.input_tokens - self.cache_read_tokens - self.cache_write_tokens

    def __add__(self, other: SessionCost) -> SessionCost:
        prices = [p for p in (self.price, other.price) if p is not None]
        return SessionCost(
            price=prices[0] + prices[1] if len(prices) == 2 else next(iter(prices), None),
            responses=self.responses + other.responses,
            priced=self.priced + other.priced,
            input_tokens=self.input_tokens + other.input_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


NOTHING_REPORTED = SessionCost(price=None, responses=0, priced=0)


def session_cost(session: AgentSession) -> SessionCost:
    """What ``session`` cost, from its stored responses' usage."""
    return session_costs([session])[session.pk]


def session_costs(sessions: Iterable[AgentSession]) -> dict[Any, SessionCost]:
    """What each of ``sessions`` cost, by primary key: one query for what the cache lacks."""
    by_id = {session.pk: session for session in sessions}
    if not by_id:
        return {}
    known = _remembered(by_id)
    after = {pk: known[pk][0] if pk in known else -1 for pk in by_id}
    rows = (
        Message.objects.filter(
            Q.create([Q(session_id=pk, seq__gt=seq) for pk, seq in after.items()], Q.OR),
            kind=MessageKind.RESPONSE,
            reported_input_tokens__isnull=False,
        )
        .order_by()
        .values_list(
            "session_id", "seq", *(_value(key) for key in _NAMES), *(KT(key) for key in _TEXTS)
        )
    )
    # The new responses of each session, by the model that answered them.
    answered: dict[Any, dict[tuple[str | None, str], _Requests]] = {pk: {} for pk in by_id}
    unreadable = dict.fromkeys(by_id, 0)
    last = dict(after)
    for session_id, seq, name, provider, at, *counts in rows:
        last[session_id] = max(last[session_id], seq)
        usage = _usage(counts)
        if usage is None:
            unreadable[session_id] += 1
            continue
        default_provider, default_name = model_ref(by_id[session_id].model)
        model = (provider or default_provider, name or default_name)
        answered[session_id].setdefault(model, []).append((usage, _timestamp(at)))
    costs: dict[Any, SessionCost] = {}
    changed: dict[str, tuple[int, SessionCost]] = {}
    for pk in by_id:
        cost = known[pk][1] if pk in known else NOTHING_REPORTED
        if last[pk] != after[pk]:
            cost += _cost(answered[pk], unreadable[pk])
            changed[_key(pk)] = (last[pk], cost)
        costs[pk] = cost
    _remember(changed)
    return costs


def _value(lookup: str) -> KeyTransform:
    """The JSON value at ``lookup`` ("payload__model_name")."""
    field, *keys = lookup.split("__")
    value = KeyTransform(keys[0], field)
    for key in keys[1:]:
        value = KeyTransform(key, value)
    return value


def _cost(answered: dict[tuple[str | None, str], _Requests], unreadable: int) -> SessionCost:
    total: Price | None = None
    priced = 0
    for (provider, name), requests in answered.items():
        found = price_requests(name, requests, provider=provider)
        if found is not None:
            total = found if total is None else total + found
            priced += len(requests)
    usages = [usage for requests in answered.values() for usage, _ in requests]
    return SessionCost(
        price=total,
        responses=len(usages) + unreadable,
        priced=priced,
        input_tokens=sum(u.input_tokens for u in usages),
        cache_read_tokens=sum(u.cache_read_tokens for u in usages),
        cache_write_tokens=sum(u.cache_write_tokens for u in usages),
        output_tokens=sum(u.output_tokens for u in usages),
    )


def _usage(counts: list[Any]) -> TokenUsage | None:
    """One response's usage; None when its counts do not add up (cannot be priced)."""
    inputs, reads, writes, writes_1h, outputs = (int(value or 0) for value in counts)
    try:
        return TokenUsage(
            input_tokens=inputs,
            cache_read_tokens=reads,
            cache_write_tokens=writes,
            cache_write_1h_tokens=writes_1h,
            output_tokens=outputs,
        )
    except ValueError:
        return None


def _timestamp(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


# --- the cache ------------------------------------------------------------------------------
# A session's cost up to a seq, as plain values (a release of the price data has its own keys).


def _key(pk: Any) -> str:
    return f"session-cost:1:{PRICES_VERSION}:{pk}"


def _remembered(by_id: dict[Any, AgentSession]) -> dict[Any, tuple[int, SessionCost]]:
    keys = {_key(pk): pk for pk in by_id}
    try:
        found = cache.get_many(list(keys))
    except Exception:  # the cache is down: read every session whole
        log.warning("session costs: the cache cannot be read", exc_info=True)
        return {}
    return {keys[key]: _load(value) for key, value in found.items()}


def _remember(changed: dict[str, tuple[int, SessionCost]]) -> None:
    if not changed:
        return
    try:
        cache.set_many({key: _dump(*value) for key, value in changed.items()}, CACHE_SECONDS)
    except Exception:
        log.warning("session costs: the cache cannot be written", exc_info=True)


def _dump(seq: int, cost: SessionCost) -> list[Any]:
    price = cost.price
    return [
        seq,
        cost.responses,
        cost.priced,
        cost.input_tokens,
        cost.cache_read_tokens,
        cost.cache_write_tokens,
        cost.output_tokens,
        None
        if price is None
        else [
            str(price.input),
            str(price.cache_read),
            str(price.cache_write),
            str(price.output),
            str(price.total),
            price.currency,
        ],
    ]


def _load(value: list[Any]) -> tuple[int, SessionCost]:
    seq, responses, priced, inputs, reads, writes, outputs, price = value
    if price is not None:
        uncached, cache_read, cache_write, output, total = map(Decimal, price[:5])
        price = Price(uncached, cache_read, cache_write, output, total, currency=price[5])
    return seq, SessionCost(
        price=price,
        responses=responses,
        priced=priced,
        input_tokens=inputs,
        cache_read_tokens=reads,
        cache_write_tokens=writes,
        output_tokens=outputs,
    )


def compaction_costs(
    session: AgentSession, summarizer: str, report: CompactionReport, *, saved_tokens: int
) -> dict[str, str | None]:
    """A compaction in money, as JSON: what its summariser's calls cost (as the provider
    reported their usage; None: no price, or nothing reported) and what it saves on each
    following request, its input priced uncached (None: no price, or it saves nothing)."""
    used = TokenUsage(
        input_tokens=report.summarizer_input_tokens,
        cache_read_tokens=report.summarizer_cache_read_tokens,
        cache_write_tokens=report.summarizer_cache_write_tokens,
        output_tokens=report.summarizer_output_tokens,
    )
    spent = price(summarizer, used) if used.input_tokens or used.output_tokens else None
    saved = (
        price(session.model, TokenUsage(input_tokens=saved_tokens)) if saved_tokens > 0 else None
    )
    return {
        "summarizer_cost": None if spent is None else str(spent.total),
        "saved_per_request": None if saved is None else str(saved.total),
    }
