from __future__ import annotations

from django.apps import AppConfig


class AgentSessionsConfig(AppConfig):
    name = "sessions"
    # "sessions" is django.contrib.sessions' label.
    label = "agent_sessions"
    verbose_name = "Agent sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from sessions import checks, revocation  # noqa: F401  (system checks, receivers)
