"""The requests a session sent, read back: one opened as it was sent, and what the prompt cache
saved over them all.

A request is opened by governing the log up to its newest message again, with the records as
they were when it was sent, from the Governor state it was governed from (stored with it): the
same request, as long as the session's policy, model and window are what they were then. When
they are not (a policy change) the request is governed under them as they are now, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError
from pydantic_ai.messages import ModelMessage

from ctxhub.governance import Governor
from ctxhub.pricing import CacheWeighting, TokenUsage, cache_weighting, price
from ctxhub.pricing import Price as Money
from sessions.history import effective_history
from sessions.models import AgentSession, Message, MessageKind, SentRequest
from sessions.services.governed import session_policy
from sessions.services.sending import governor_key


@dataclass(frozen=True, slots=True)
class OpenedRequest:
    """A request sent, with its messages governed again."""

    row: SentRequest
    messages: list[ModelMessage]
    exact: bool
    """Whether governing it again gave the request sent (records and policy unchanged)."""
    input_cost: CacheWeighting | None
    """Its input priced with the prefix it kept read from the cache, against all uncached
    (None: the model has no price)."""
    reported: TokenUsage | None
    """What the provider reported for the response that answered it, if it did."""
    reported_cost: Money | None


def open_sent_request(session: AgentSession, number: int) -> OpenedRequest | None:
    """The session's request ``number`` (1 for its first), or None when it sent no such one."""
    row = SentRequest.objects.filter(session=session, number=number).first()
    if row is None:
        return None
    policy = session_policy(session)
    # The records as they were when it was sent: a compaction made since is not in it.
    history = effective_history(session, upto_seq=row.last_seq, as_of=row.created_at)
    try:
        governor = Governor(policy, model=session.model)
        governor.adopt(row.state)
    except ValidationError:  # a state another version of the engine wrote: a new start
        governor = Governor(policy, model=session.model)
    governed = governor.govern(
        history.messages,
        pinned=history.positions(history.state.pins),
        # The tool definitions as they were counted then: they decide the budget.
        tool_tokens=row.tool_tokens,
        facts=history.facts,
        context_window_tokens=session.context_window,
    )
    exact = (
        row.key == governor_key(session)
        and governed.tokens_after == row.tokens
        and (governed.acted or "") == row.acted
    )
    sent = row.tokens + row.tool_tokens
    kept = min(row.prefix_tokens or 0, sent)
    reported = _reported(session, row.last_seq)
    return OpenedRequest(
        row,
        governed.messages,
        exact,
        cache_weighting(session.model, [(sent, kept)], at=row.created_at),
        reported,
        None if reported is None else price(session.model, reported, at=row.created_at),
    )


def _reported(session: AgentSession, last_seq: int) -> TokenUsage | None:
    """The usage the provider reported with the response that answered a request (the first
    response stored after the request's newest message)."""
    response = (
        Message.objects.filter(session=session, seq__gt=last_seq, kind=MessageKind.RESPONSE)
        .order_by("seq")
        .only("payload", "reported_input_tokens")
        .first()
    )
    if response is None or response.reported_input_tokens is None:
        return None
    usage = response.payload.get("usage") or {}
    try:
        return TokenUsage(
            input_tokens=int(usage.get("input_tokens") or 0),
            cache_read_tokens=int(usage.get("cache_read_tokens") or 0),
            cache_write_tokens=int(usage.get("cache_write_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
        )
    except (TypeError, ValueError):  # counts that do not add up: shown as not reported
        return None


def session_cache_weighting(session: AgentSession) -> CacheWeighting | None:
    """The input cost of every request the session sent, its kept prefixes read from the
    cache, against the same tokens all uncached; None when nothing was sent or the model has
    no price."""
    requests = [
        (tokens + tools, min(prefix or 0, tokens + tools))
        for tokens, tools, prefix in SentRequest.objects.filter(session=session).values_list(
            "tokens", "tool_tokens", "prefix_tokens"
        )
    ]
    if not requests:
        return None
    return cache_weighting(session.model, requests)
