"""The dashboard's API keys page: make a key (shown once), see each key's use, revoke it; and
the provider keys the gateway holds (their forms post to ``gateway.pages``)."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET, require_POST

from gateway.provider_keys import hints
from sessions.api.keys import SCOPES, create_key, revoke
from sessions.http import AuthenticatedHttpRequest
from sessions.models import ApiKey
from sessions.services import ServiceError

# What an agent pushing its history and pulling its context needs; govern is asked for.
DEFAULT_SCOPES = ("read", "write")


def page(request: AuthenticatedHttpRequest, **extra: object) -> HttpResponse:
    """The page; ``error`` (a refused key) or ``provider_error`` (a refused provider key: its
    ``provider`` and ``message``) answer 422."""
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
            "provider_keys": hints(request.user),
            **extra,
        },
        status=422 if "error" in extra or "provider_error" in extra else 200,
    )


@require_GET
def keys(request: AuthenticatedHttpRequest) -> HttpResponse:
    return page(request)


@require_POST
def create(request: AuthenticatedHttpRequest) -> HttpResponse:
    raw_days = request.POST.get("expires", "").strip()
    if raw_days and not raw_days.isdigit():
        return page(request, error="expires: a number of days, or empty for never")
    try:
        key, text = create_key(
            request.user,
            name=request.POST.get("name", ""),
            scopes=request.POST.getlist("scopes"),
            expires_days=int(raw_days) if raw_days else None,
            actor=request.user,
        )
    except ServiceError as error:
        return page(request, error=error.message)
    return page(request, created=key, text=text)


@require_POST
def revoke_key(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    revoke(get_object_or_404(ApiKey, pk=pk, owner=request.user), actor=request.user)
    return page(request)
