from __future__ import annotations

from django.apps import AppConfig


class AgentSessionsConfig(AppConfig):
    name = "sessions"
    # "sessions" is django.contrib.sessions' label.
    label = "agent_sessions"
    verbose_name = "Agent sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # System checks, and the receivers of what the services report: the pages' pushes
        # (live) and the queue (tasks), and of a session's deletion. Imported here, once the
        # models are loaded.
        from sessions import checks, deletion, live, revocation, tasks  # noqa: F401
