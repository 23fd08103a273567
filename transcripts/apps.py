from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings
from django.core.signals import request_started


class TranscriptsConfig(AppConfig):
    name = "transcripts"
    verbose_name = "Transcripts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        if settings.CTXHUB_FOLLOW:
            # Started by the first request a web process serves (not at import: a server that
            # loads the app before forking its workers would follow in a process that serves
            # no page), and never by a management command.
            from transcripts.following import follow_from_settings

            request_started.connect(follow_from_settings, dispatch_uid="transcripts-follow")
