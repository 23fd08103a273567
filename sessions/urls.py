from __future__ import annotations

from django.urls import path

from sessions import views

app_name = "sessions"

urlpatterns = [
    path("", views.session_list, name="list"),
    path("sessions/<uuid:pk>/", views.session_detail, name="detail"),
    path("sessions/<uuid:pk>/messages/", views.messages, name="messages"),
    path("sessions/<uuid:pk>/messages/<int:seq>/", views.message_detail, name="message"),
    path("sessions/<uuid:pk>/recount/", views.recount, name="recount"),
]
