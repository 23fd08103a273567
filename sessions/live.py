"""Pushing live updates to the browsers watching a session.

Each push is the rendered HTML of the same fragment templates the pages use, sent to the
session's channel-layer group; the socket consumer forwards it and htmx swaps it in by id.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.template.loader import render_to_string

from sessions.presenters import present_message

if TYPE_CHECKING:
    from sessions.models import AgentSession, CompactionJob, Message
    from sessions.services import TokenTotals

log = logging.getLogger(__name__)

# The consumer method that forwards a push to its socket.
PUSH_EVENT = "html.push"


def _push(session: AgentSession, html: str) -> None:
    """Send to everyone watching; a channel layer that is down loses the push, nothing else
    (pages catch up from the database when their socket reconnects)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(session.group_name, {"type": PUSH_EVENT, "html": html})
    except Exception as error:
        log.warning("live push to %s lost: %s", session.group_name, error)


def messages_appended(
    session: AgentSession, messages: Sequence[Message], totals: TokenTotals
) -> None:
    html = render_to_string(
        "sessions/_live_append.html",
        {
            "session": session,
            "messages": [present_message(row) for row in messages],
            "totals": totals,
        },
    )
    _push(session, html)


def meter_changed(session: AgentSession, totals: TokenTotals) -> None:
    """A recount finished: the new meter, and the job's outcome where its button is."""
    html = render_to_string(
        "sessions/_meter.html", {"session": session, "totals": totals, "oob": True}
    ) + render_to_string(
        "sessions/_job_status_oob.html",
        {"outcome": {"tokens": totals.tokens, "messages": totals.messages}},
    )
    _push(session, html)


def job_event(job: CompactionJob, stage: str, **data: Any) -> None:
    """A compaction job's progress: queued, planning, summarising (chunk i of n), writing,
    retrying, done or failed with the reason."""
    html = render_to_string(
        "sessions/_job_progress.html", {"job": job, "stage": stage, "data": data}
    )
    _push(job.session, html)


def records_changed(session: AgentSession) -> None:
    """A clear, pin, compaction or undo changed what the model sees: open pages re-render
    their x-ray, records and badges from the database."""
    revision = type(session).objects.values_list("revision", flat=True).get(pk=session.pk)
    html = render_to_string("sessions/_changed.html", {"revision": revision})
    _push(session, html)
