"""The API keys page's provider keys (``gateway.provider_keys``): store, replace and delete
one's own. These are pages (login, CSRF), served under ``/keys/``, not under ``/gateway/``,
whose handler runs no middleware."""

from __future__ import annotations

from django.http import Http404, HttpResponse, HttpResponseBase
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from gateway.provider_keys import PROVIDERS, delete_key, store_key
from sessions.api.pages import page
from sessions.http import AuthenticatedHttpRequest
from sessions.services import ServiceError

ANCHOR = "provider-keys"


def _provider(provider: str) -> str:
    if provider not in PROVIDERS:
        raise Http404(f"no provider {provider!r}")
    return provider


def _back() -> HttpResponse:
    # Redirected, so that reloading the page does not post the key again.
    response = redirect("sessions:keys")
    response["Location"] += f"#{ANCHOR}"
    return response


@require_POST
def store(request: AuthenticatedHttpRequest, provider: str) -> HttpResponseBase:
    """Store or replace the user's key for ``provider``; the key is never shown again."""
    provider = _provider(provider)
    try:
        store_key(request.user, provider, request.POST.get("key", ""), actor=request.user)
    except ServiceError as error:
        return page(request, provider_error={"provider": provider, "message": error.message})
    return _back()


@require_POST
def delete(request: AuthenticatedHttpRequest, provider: str) -> HttpResponseBase:
    """Forget the user's key for ``provider`` (nothing happens when there is none)."""
    delete_key(request.user, _provider(provider), actor=request.user)
    return _back()
