from __future__ import annotations

from django.urls import path

from gateway import views

app_name = "gateway"

# The SDKs' base URLs: http://hub/gateway/anthropic and http://hub/gateway/openai/v1.
urlpatterns = [
    path("anthropic/v1/messages", views.anthropic_messages, name="anthropic_messages"),
    path(
        "anthropic/v1/messages/count_tokens",
        views.anthropic_count_tokens,
        name="anthropic_count_tokens",
    ),
    path("openai/v1/chat/completions", views.openai_chat_completions, name="openai_chat"),
    path("openai/v1/responses", views.openai_responses, name="openai_responses"),
    path("anthropic/v1/models", views.anthropic_models, name="anthropic_models"),
    path("anthropic/v1/models/<str:model>", views.anthropic_models, name="anthropic_model"),
    path("openai/v1/models", views.openai_models, name="openai_models"),
    path("openai/v1/models/<str:model>", views.openai_models, name="openai_model"),
]
