"""What the services tell the layers above them, so that the hub's data flows one way.

Services change records and send these signals; they never render a template or put work on
the queue. Above them, ``sessions.live`` renders HTML for the pages watching a session and
``sessions.tasks`` puts work on the queue; both connect their receivers when the app is ready
(``sessions.apps``).

A receiver that fails is logged, and the others still run: what the signal reports is already
stored, and the caller that stored it must not see an error for it.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.dispatch import Signal

log = logging.getLogger(__name__)

messages_appended = Signal()
"""Messages were appended: ``session``, ``messages`` (their rows), ``totals`` (the log's
``TokenTotals`` after them) and ``auto_compact`` (whether they may start an automatic
compaction)."""

meter_changed = Signal()
"""A session's stored counts changed (a recount): ``session``, ``totals``."""

records_changed = Signal()
"""A clear, pin, compaction, undo or policy change changed what the model sees: ``session``."""

job_progressed = Signal()
"""A compaction job moved on: ``job``, ``stage`` (queued, planning, summarising, writing,
retrying, done or failed) and ``data`` (what the stage reports)."""

job_ready = Signal()
"""A compaction job waits for a worker: ``job``, and ``countdown``, the seconds before it may
run."""

snapshot_stale = Signal()
"""A session's stored snapshot no longer serves a process that comes to it cold:
``session``."""


def send(signal: Signal, **data: Any) -> None:
    """Send to every receiver now; one that fails is logged."""
    for receiver, outcome in signal.send_robust(sender=None, **data):
        if isinstance(outcome, Exception):
            log.error("%s failed", getattr(receiver, "__qualname__", receiver), exc_info=outcome)


def send_on_commit(signal: Signal, **data: Any) -> None:
    """Send once the transaction under way commits (at once outside one): a receiver reads
    what the signal reports, and must find it stored."""
    transaction.on_commit(lambda: send(signal, **data))
