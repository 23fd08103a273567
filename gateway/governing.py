"""A govern-mode request: the session Governor's request, written in the client's wire format.

The Governor decides what the model sees (``sessions.services.governed.send_context``, which
records the request and the state it leaves, as any agent's request through the API). Each
message it sends is written back from the client's own JSON: untouched, the very text the
client sent; with results masked, truncated or evicted, the client's message with only those
blocks rewritten; one governance added (a summary, a notice), written from its parts.
"""

from __future__ import annotations

from typing import Any

from ctxhub.governance.report import MessageReport
from gateway.wire import WireRequest
from sessions.models import AgentSession
from sessions.services.governed import send_context

_RESHAPED = frozenset({"dropped", "moved", "synthesized"})


def changed_parts(entry: MessageReport) -> frozenset[int] | None:
    """The parts of a message governance rewrote in place; None when it reshaped the message
    (parts dropped, moved in or added), so that its parts no longer line up with the client's
    blocks."""
    actions = [part.action for part in entry.parts]
    if _RESHAPED.intersection(actions):
        return None
    return frozenset(index for index, action in enumerate(actions) if action != "kept")


def governed_body(session: AgentSession, request: WireRequest, wire: Any) -> bytes:
    """The body the upstream gets for ``request`` in govern mode."""
    context = send_context(session)
    kept = [entry for entry in context.report.messages if entry.kept]
    written = []
    for message, entry in zip(context.messages, kept, strict=True):
        seq = context.seq_of(entry.index)
        stored = request.messages[seq] if seq is not None and seq < len(request.messages) else None
        written.append(wire.render(message, stored, changed_parts(entry)))
    body: bytes = wire.body(request, wire.with_breakpoint(request, written))
    return body
