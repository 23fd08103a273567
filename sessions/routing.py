from __future__ import annotations

from django.urls import path

from sessions.consumers import SessionConsumer

# django-stubs types path() for HTTP views only; Channels routes ASGI apps with it by design.
websocket_urlpatterns = [
    path("ws/sessions/<uuid:pk>/", SessionConsumer.as_asgi()),  # type: ignore[arg-type]
]
