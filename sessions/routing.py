from __future__ import annotations

from django.urls import path

from sessions.consumers import SessionConsumer

websocket_urlpatterns = [
    path("ws/sessions/<uuid:pk>/", SessionConsumer.as_asgi()),
]
