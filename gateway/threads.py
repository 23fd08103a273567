"""Which session a request belongs to, and storing what it adds.

A client resends its whole conversation each time; the session a request continues is the one
whose newest message's chain hash is among the request's (``gateway.chain``): all it stored
is a prefix of the request. The hashes are looked up newest first, a few at a time, so a
request that adds one turn to a long session costs a query or two, not one per message. A
session the client names (``X-Ctxhub-Session``, or its own marker such as Claude Code's
``metadata.user_id``) wins among sessions that end alike. A request that continues none starts
a session, linked to the newest one of the same client session: that is how a sub-agent (its
own system prompt, the same client session) becomes a child of the conversation that started
it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from pydantic_ai.messages import ModelResponse

from gateway import chain
from gateway.models import GatewaySession, Mode, RawMessage
from gateway.wire import WireMessage, WireRequest, storable_text
from sessions.models import AgentSession, MessageSource
from sessions.services.fork import fork_session
from sessions.services.log import append_messages
from sessions.services.tools import set_tools

LOOKUP_BATCHES = (4, 64)
"""How many of a request's newest chain hashes are looked up at once before all of them: a
client's next request adds a turn or two after the stored end."""

TITLE_LENGTH = 80


@dataclass(frozen=True, slots=True)
class Thread:
    """The session a request continues (or started). Its log is the client's conversation
    message for message, so the request's message at position i is the log's #i."""

    session: AgentSession
    gateway: GatewaySession
    new: int
    """How many of the request's messages were new (stored by this request)."""
    end: str
    """The chain hash of the request's last message."""
    governed: bool
    """Whether the request is governed: the mode it asked for, else its session's."""


def thread(
    owner: int,
    request: WireRequest,
    hashes: Sequence[str],
    *,
    provider: str,
    named: str | None,
    asked_mode: str | None,
) -> Thread:
    """The session ``request`` continues, its new messages appended (with their raw text and
    chain hashes, ``gateway.chain.hashes``), or a new session holding all of them, in the mode
    the request asks for (``asked_mode``), else ``CTXHUB_GATEWAY_MODE``."""
    marker = storable_text(named or request.client_session or "")
    with transaction.atomic():
        found = _continued(owner, request.wire, hashes, marker)
        if found is None:
            found = _branched(owner, request, hashes, marker)
        if found is None:
            mode = asked_mode or settings.CTXHUB_GATEWAY_MODE
            gateway = _start(owner, request, provider=provider, marker=marker, mode=mode)
            stored = 0
        else:
            gateway, stored = found
        session = gateway.session
        governed = (asked_mode or gateway.mode) == Mode.GOVERN
        new = request.messages[stored:]
        if new:
            _store(session, new, hashes[stored:], request.tools, governed=governed)
            gateway.tip = hashes[-1]
            gateway.save(update_fields=["tip"])
    end = hashes[-1] if hashes else gateway.tip
    return Thread(session, gateway, len(new), end, governed)


def _continued(
    owner: int, wire: str, hashes: Sequence[str], marker: str
) -> tuple[GatewaySession, int] | None:
    """The session whose stored end is the request's longest prefix, and that prefix's
    length; its row locked until the append commits, so two requests of one session take
    turns."""
    looked = 0
    for batch in (*LOOKUP_BATCHES, len(hashes)):
        # The newest hashes not looked up yet, by their position in the request.
        position = {
            hashes[index]: index
            for index in range(len(hashes) - 1 - looked, max(-1, len(hashes) - 1 - batch), -1)
        }
        looked = max(looked, batch)
        candidates = list(position)
        if not candidates:
            continue
        found = list(
            GatewaySession.objects.select_for_update()
            .select_related("session")
            .filter(session__owner_id=owner, wire=wire, tip__in=candidates)
            .order_by("-session__updated_at")
        )
        if found:
            best = max(found, key=lambda g: (position[g.tip], g.client_session == marker))
            return best, position[best.tip] + 1
    return None


def _branched(
    owner: int, request: WireRequest, hashes: Sequence[str], marker: str
) -> tuple[GatewaySession, int] | None:
    """A fork of the session the request branches from, and how many of its messages the
    fork holds: a request that continues no session's end but repeats one's log up to a
    model's answer or beyond (a retry after the answer was stored, a rewound or edited
    conversation) goes on in a fork of that session at the last message they share, linked to
    it, with its compactions, clears and pins over that prefix. Only a session of the same
    client session (the same marker, or none on both) is branched from; a prefix without a
    model's answer (a system prompt and a first prompt any conversation may share) starts a
    session of its own, unless the client marks its session and sent the very same request
    before (a retry of its first request)."""
    answered = next(
        (
            i
            for i, message in enumerate(request.messages)
            if isinstance(message.view, ModelResponse)
        ),
        None,
    )
    if answered is None and not marker:
        return None
    if answered is None:
        answered = len(hashes) - 1  # the whole request, or nothing
    looked = 0
    for batch in (*LOOKUP_BATCHES, len(hashes)):
        # The newest hashes not looked up yet, down to the first answer; the first batch that
        # finds any holds the longest prefix shared.
        position = {
            hashes[index]: index
            for index in range(
                len(hashes) - 1 - looked, max(answered - 1, len(hashes) - 1 - batch), -1
            )
        }
        looked = max(looked, batch)
        if not position:
            continue
        shared = list(
            RawMessage.objects.filter(
                chain__in=list(position),
                session__owner_id=owner,
                session__gateway__wire=request.wire,
                session__gateway__client_session=marker,
            )
            .order_by("-session__updated_at")
            .values_list("session_id", "chain")
        )
        if shared:
            break
    else:
        return None
    source_id, seq = max(
        ((session, position[value]) for session, value in shared),
        key=lambda pair: pair[1],  # the most recently updated session, on a tie
    )
    source = GatewaySession.objects.select_related("session__owner").get(pk=source_id)
    fork = fork_session(source.session, seq, actor=source.session.owner)
    rows = source.session.raw_messages.filter(seq__lte=seq).order_by("seq")
    RawMessage.objects.bulk_create(
        (
            RawMessage(session=fork, seq=row.seq, raw=row.raw, chain=row.chain)
            for row in rows.iterator()
        ),
        batch_size=1_000,
    )
    gateway = GatewaySession.objects.create(
        session=fork,
        wire=request.wire,
        mode=source.mode,
        client_session=marker,
        parent=source.session,
        branched_at=seq,
        tip=hashes[seq],
    )
    return gateway, seq + 1


def _start(
    owner: int, request: WireRequest, *, provider: str, marker: str, mode: str
) -> GatewaySession:
    parent = None
    if marker:
        parent = (
            GatewaySession.objects.filter(session__owner_id=owner, client_session=marker)
            .order_by("-session__created_at")
            .values_list("session", flat=True)
            .first()
        )
    title = " ".join(request.title.split())[:TITLE_LENGTH] or f"{request.model} via the gateway"
    model = f"{provider}:{request.model}"
    session = AgentSession.objects.create(owner_id=owner, title=title, model=model)
    return GatewaySession.objects.create(
        session=session,
        wire=request.wire,
        mode=mode,
        client_session=marker,
        parent_id=parent,
        tip=chain.root(request.wire),
    )


def _store(
    session: AgentSession,
    messages: Sequence[WireMessage],
    hashes: Sequence[str],
    tools: list[dict[str, Any]],
    *,
    governed: bool,
) -> None:
    if tools:
        set_tools(session, tools)
    rows = append_messages(
        session,
        [message.view for message in messages],
        source=MessageSource.GATEWAY,
        auto_compact=governed,
    )
    RawMessage.objects.bulk_create(
        RawMessage(session=session, seq=row.seq, raw=message.raw, chain=value)
        for row, message, value in zip(rows, messages, hashes, strict=True)
    )


def store_response(thread: Thread, items: Sequence[WireMessage]) -> int | None:
    """The response appended after the request it answered, as the messages its client will
    send back (one, or a Responses answer's items): the seq of the first. The session's tip
    moves to the last, so the client's next request, which carries them, continues the session.
    None, and nothing stored, when another request of the session came first (a client that
    sent two at once: the log goes on from that one) or the response holds nothing."""
    if not items:
        return None
    with transaction.atomic():
        gateway = GatewaySession.objects.select_for_update().get(pk=thread.gateway.pk)
        if gateway.tip != thread.end:
            return None
        rows = append_messages(
            thread.session,
            [item.view for item in items],
            source=MessageSource.GATEWAY,
            auto_compact=thread.governed,
        )
        tip = gateway.tip
        raws = []
        for row, item in zip(rows, items, strict=True):
            tip = chain.link(tip, item.value, item.raw)
            raws.append(RawMessage(session=thread.session, seq=row.seq, raw=item.raw, chain=tip))
        RawMessage.objects.bulk_create(raws)
        gateway.tip = tip
        gateway.save(update_fields=["tip"])
    return rows[0].seq
