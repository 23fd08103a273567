"""The Celery application; configuration comes from Django settings prefixed ``CELERY_``."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxhub.settings")

app = Celery("ctxhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _warn_about_services(**kwargs: Any) -> None:
    from sessions.checks import warn_about_services

    warn_about_services()
