"""The Celery application; configuration comes from Django settings prefixed ``CELERY_``."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("ctxhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
