from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = "Gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from gateway.wire import spans

        spans.remember_at_most(settings.CTXHUB_GATEWAY_READ_MEMORY_MB * 2**20)
