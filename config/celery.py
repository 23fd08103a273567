"""The Celery application; configuration comes from Django settings prefixed ``CELERY_``."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, signals

from config.telemetry import flush_tracing, setup_tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("ctxhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect
def _trace_the_worker(**kwargs: Any) -> None:
    """Tracing in the worker (when configured), before its pool processes fork."""
    setup_tracing("worker")


@signals.worker_ready.connect
@signals.worker_process_init.connect
def _tune_the_collector(**kwargs: Any) -> None:
    """Once the worker (or a process of its pool) is ready: what it loaded is frozen out of
    the cycle collector (``sessions.services.collector``)."""
    from sessions.services.collector import tune_for_serving

    tune_for_serving()


@signals.worker_process_shutdown.connect
def _send_the_last_spans(**kwargs: Any) -> None:
    """A pool process ends without running ``atexit``: its last spans are sent now."""
    flush_tracing()
