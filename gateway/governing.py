"""A govern-mode request: the session Governor's request, written in the client's wire format.

The Governor decides what the model sees (``sessions.services.governed.send_context``, which
records the request and the state it leaves, as any agent's request through the API). Each
message it sends is written back from the client's own JSON: untouched, the very text the
client sent; with results masked, truncated or evicted, the client's message with only those
blocks rewritten; one governance added (a summary, a notice), written from its parts.

A request the provider refuses as too long ("prompt is too long: 210,000 tokens > 200,000
maximum", ``context_length_exceeded``) is shrunk once and sent again, as the engine's overflow
recovery does: the oldest messages go first, pairs stay whole, by the share the error states
(escalated: twice it, within the engine's bounds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelMessage

from ctxhub.governance import OverflowRecovery, is_context_overflow
from ctxhub.governance.recovery import shrink_history, stated_sizes
from ctxhub.governance.report import MessageReport
from gateway.wire import WireMessage, WireRequest
from sessions.models import AgentSession
from sessions.services.governed import send_context, session_policy

_RESHAPED = frozenset({"dropped", "moved", "synthesized"})
_RECOVERY = OverflowRecovery()
"""The engine's recovery bounds: the least and most share of the history one retry removes."""


def changed_parts(entry: MessageReport) -> frozenset[int] | None:
    """The parts of a message governance rewrote in place; None when it reshaped the message
    (parts dropped, moved in or added), so that its parts no longer line up with the client's
    blocks."""
    actions = [part.action for part in entry.parts]
    if _RESHAPED.intersection(actions):
        return None
    return frozenset(index for index, action in enumerate(actions) if action != "kept")


@dataclass(frozen=True, slots=True)
class Source:
    """The client's message a governed message stands for (None: governance added it), and the
    parts governance rewrote in it (None: reshaped)."""

    stored: WireMessage | None
    changed: frozenset[int] | None


@dataclass(frozen=True, slots=True)
class GovernedRequest:
    body: bytes
    messages: list[ModelMessage]
    sources: list[Source]
    history_tokens: int
    """Tokens of the messages sent, the system prompt aside (what a shrink cuts)."""


def governed_request(session: AgentSession, request: WireRequest, wire: Any) -> GovernedRequest:
    """The request the upstream gets for ``request`` in govern mode."""
    context = send_context(session)
    kept = context.sent_reports()
    sources = []
    for entry in kept:
        seq = context.seq_of(entry.index)
        stored = request.messages[seq] if seq is not None and seq < len(request.messages) else None
        sources.append(Source(stored, changed_parts(entry)))
    figures = context.figures
    return GovernedRequest(
        _written(request, wire, context.messages, sources),
        context.messages,
        sources,
        figures.tokens_after - figures.system_tokens,
    )


def _written(
    request: WireRequest, wire: Any, messages: list[ModelMessage], sources: list[Source]
) -> bytes:
    written = [
        wire.render(message, source.stored, source.changed)
        for message, source in zip(messages, sources, strict=True)
    ]
    body: bytes = wire.body(request, wire.with_breakpoint(request, written))
    return body


def recovered(
    session: AgentSession, request: WireRequest, wire: Any, sent: GovernedRequest, error: str
) -> bytes | None:
    """The body to send again after the upstream refused ``sent`` with ``error``: None when
    the error is not an overflow, or nothing more may be removed."""
    overflow = Exception(error)
    if not is_context_overflow(overflow):
        return None
    sizes = stated_sizes(overflow)
    wanted = 1 - (sizes[0] / sizes[1]) * 0.9 if sizes and sizes[1] else _RECOVERY.min_shrink
    share = min(_RECOVERY.max_shrink, max(_RECOVERY.min_shrink, 2 * wanted))
    policy = session_policy(session)
    target = int(sent.history_tokens * (1 - share))
    shrunk = shrink_history(sent.messages, target, policy=policy, model=session.model)
    if not shrunk.changed:
        return None
    # A message the shrink left alone is one of those sent: it stands for what that one did.
    by_identity = {id(m): source for m, source in zip(sent.messages, sent.sources, strict=True)}
    sources = []
    for message in shrunk.messages:
        source = by_identity.get(id(message))
        if source is None:
            source = next(
                (s for m, s in zip(sent.messages, sent.sources, strict=True) if m == message),
                Source(None, None),
            )
        sources.append(source)
    return _written(request, wire, shrunk.messages, sources)
