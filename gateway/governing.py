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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from pydantic_ai.messages import ModelMessage

from ctxhub.governance import OverflowRecovery, is_context_overflow
from ctxhub.governance.recovery import shrink_history, stated_sizes
from gateway.wire import WireMessage, WireRequest
from sessions.models import AgentSession
from sessions.services.governed import GovernedContext, send_context, session_policy

_RECOVERY = OverflowRecovery()
"""The engine's recovery bounds: the least and most share of the history one retry removes."""


class Source(NamedTuple):
    """The client's message a governed message stands for (None: governance added it), and the
    parts governance rewrote in it (None: reshaped; empty: none, the client's own text goes).
    (A named tuple: a request of a long session makes thousands.)"""

    stored: WireMessage | None
    changed: frozenset[int] | None


@dataclass(frozen=True, slots=True)
class GovernedRequest:
    body: bytes
    context: GovernedContext
    sources: list[Source]
    history_tokens: int
    """Tokens of the messages sent, the system prompt aside (what a shrink cuts)."""

    @property
    def messages(self) -> list[ModelMessage]:
        """The messages sent (all of them read: only a shrink needs them)."""
        return self.context.messages


def governed_request(session: AgentSession, request: WireRequest, wire: Any) -> GovernedRequest:
    """The request the upstream gets for ``request`` in govern mode: O(the messages governance
    rewrote or added), the others go as the client's own text, never read again."""
    context = send_context(session)
    sources = []
    for shape in context.sent_shapes():
        seq = context.seq_of(shape.history_index)
        stored = request.messages[seq] if seq is not None and seq < len(request.messages) else None
        sources.append(Source(stored, shape.rewritten))
    figures = context.figures
    return GovernedRequest(
        _written(request, wire, sources, context.sent_message),
        context,
        sources,
        figures.tokens_after - figures.system_tokens,
    )


def _written(
    request: WireRequest,
    wire: Any,
    sources: list[Source],
    message_at: Callable[[int], ModelMessage],
) -> bytes:
    """The body for the messages of ``sources``; ``message_at`` gives the governed message at
    a position, read only for one that is not the client's own, untouched."""
    written = [
        source.stored.raw
        if source.stored is not None and source.changed == frozenset()
        else wire.render(message_at(position), source.stored, source.changed)
        for position, source in enumerate(sources)
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
    return _written(request, wire, sources, shrunk.messages.__getitem__)
