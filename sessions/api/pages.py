"""The dashboard's API keys page: make a key (shown once), see each key's use, revoke it."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET, require_POST

from sessions.api.keys import SCOPES, create_key, revoke
from sessions.http import AuthenticatedHttpRequest
from sessions.models import ApiKey
from sessions.services import ServiceError

# What an agent pushing its history and pulling its context needs; govern is asked for.
DEFAULT_SCOPES = ("read", "write")


def _page(request: AuthenticatedHttpRequest, **extra: object) -> HttpResponse:
    keys = ApiKey.objects.filter(owner=request.user)
    base_url = request.build_absolute_uri("/").rstrip("/")
    return render(
        request,
        "api/keys.html",
        {
            "keys": keys,
            "scopes": SCOPES,
            "default_scopes": DEFAULT_SCOPES,
            "base_url": base_url,
            **extra,
        },
        status=422 if "error" in extra else 200,
    )


@require_GET
def keys(request: AuthenticatedHttpRequest) -> HttpResponse:
    return _page(request)


@require_POST
def create(request: AuthenticatedHttpRequest) -> HttpResponse:
    raw_days = request.POST.get("expires", "").strip()
    if raw_days and not raw_days.isdigit():
        return _page(request, error="expires: a number of days, or empty for never")
    try:
        key, text = create_key(
            request.user,
            name=request.POST.get("name", ""),
            scopes=request.POST.getlist("scopes"),
            expires_days=int(raw_days) if raw_days else None,
            actor=request.user,
        )
    except ServiceError as error:
        return _page(request, error=error.message)
    return _page(request, created=key, text=text)


@require_POST
def revoke_key(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    revoke(get_object_or_404(ApiKey, pk=pk, owner=request.user), actor=request.user)
    return _page(request)
