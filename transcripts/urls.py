from __future__ import annotations

from django.urls import path

from transcripts import views

app_name = "transcripts"

urlpatterns = [
    path("", views.imports, name="imports"),
    path("saved/", views.fleet_what_if, name="fleet-what-if"),
    path("sessions/<uuid:pk>/", views.session_what_if, name="what-if"),
]
