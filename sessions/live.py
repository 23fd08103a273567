"""Pushing live updates to the browsers watching a session.

Each push is the rendered HTML of the same fragment templates the pages use, sent to the
session's channel-layer group; the socket consumer forwards it and htmx swaps it in by id. What
is pushed follows what the services report (``sessions.events``).

Most sessions are written by agents with no page open, so a push is rendered only where a
socket watches: each socket marks its session as watched in the cache when it connects and
again at every heartbeat (``sessions.consumers``). A socket marks before it joins the group and
its page catches up from the database once it is open, so a push skipped before the mark was
already committed when the page reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.dispatch import receiver
from django.template.loader import render_to_string

from sessions import events
from sessions.models import AgentSession, CompactionJob, Message
from sessions.presenters import present_message
from sessions.services import TokenTotals

log = logging.getLogger(__name__)

# The consumer method that forwards a push to its socket.
PUSH_EVENT = "html.push"


def _watched_key(session_id: object) -> str:
    """The cache key that says a socket watched the session within the last heartbeats."""
    return f"watched:{session_id}"


async def mark_watched(session_id: object) -> None:
    """A socket watches the session: marked for three heartbeats, so one late beat does not
    lapse the mark (a socket marks as it opens and at every beat)."""
    timeout = 3 * settings.CTXHUB_SOCKET_HEARTBEAT_SECONDS
    await cache.aset(_watched_key(session_id), 1, timeout=timeout)


def is_watched(session: AgentSession) -> bool:
    """Whether a socket may be watching; a cache that cannot answer says yes (the push is
    tried, as it would be anyway)."""
    try:
        return cache.get(_watched_key(session.pk)) is not None
    except Exception:
        return True


def _push(session: AgentSession, render: Callable[[], str]) -> None:
    """Render and send to everyone watching, if anyone may be; a channel layer that is down
    loses the push, nothing else (pages catch up from the database when their socket
    reconnects)."""
    layer = get_channel_layer()
    if layer is None or not is_watched(session):
        return
    try:
        async_to_sync(layer.group_send)(session.group_name, {"type": PUSH_EVENT, "html": render()})
    except Exception as error:
        log.warning("live push to %s lost: %s", session.group_name, error)


@receiver(events.messages_appended)
def messages_appended(
    sender: object,
    session: AgentSession,
    messages: Sequence[Message],
    totals: TokenTotals,
    **kwargs: Any,
) -> None:
    _push(
        session,
        lambda: render_to_string(
            "sessions/_live_append.html",
            {
                "session": session,
                "messages": [present_message(row) for row in messages],
                "totals": totals,
            },
        ),
    )


@receiver(events.meter_changed)
def meter_changed(
    sender: object, session: AgentSession, totals: TokenTotals, **kwargs: Any
) -> None:
    """A recount finished: the new meter, and the job's outcome where its button is."""
    _push(
        session,
        lambda: (
            render_to_string(
                "sessions/_meter.html", {"session": session, "totals": totals, "oob": True}
            )
            + render_to_string(
                "sessions/_job_status_oob.html",
                {
                    "outcome": {
                        "tokens": totals.tokens,
                        "messages": totals.messages,
                        "encoding": totals.encoding,
                        "recounted": totals.recounted,
                    }
                },
            )
        ),
    )


@receiver(events.job_progressed)
def job_progressed(
    sender: object, job: CompactionJob, stage: str, data: dict[str, Any], **kwargs: Any
) -> None:
    """A compaction job's progress: queued, planning, summarising (chunk i of n), writing,
    retrying, done or failed with the reason."""
    _push(
        job.session,
        lambda: render_to_string(
            "sessions/_job_progress.html", {"job": job, "stage": stage, "data": data}
        ),
    )


@receiver(events.records_changed)
def records_changed(sender: object, session: AgentSession, **kwargs: Any) -> None:
    """Open pages re-render their x-ray, records and badges from the database."""

    def render() -> str:
        revision = AgentSession.objects.values_list("revision", flat=True).get(pk=session.pk)
        return render_to_string("sessions/_changed.html", {"revision": revision})

    _push(session, render)
