from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from sessions import views
from sessions.api.app import urls as api_urls

# A database that is saturated or away answers 503 with Retry-After, on every page and the API.
handler500 = "sessions.outages.server_error"

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    # Asked for by browsers on pages that name no icon (the admin's, a JSON answer).
    path(
        "favicon.ico",
        login_not_required(RedirectView.as_view(url=static("img/favicon.svg"), permanent=True)),
    ),
    path("admin/", admin.site.urls),
    path("api/v1/", api_urls()),
    path("gateway/", include("gateway.urls")),
    path("imports/", include("transcripts.urls")),
    path("", include("sessions.urls")),
]
