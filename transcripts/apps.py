from __future__ import annotations

from django.apps import AppConfig


class TranscriptsConfig(AppConfig):
    name = "transcripts"
    verbose_name = "Transcripts"
    default_auto_field = "django.db.models.BigAutoField"
