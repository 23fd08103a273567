"""The gateway's pages: the API keys page's provider keys (``gateway.provider_keys``: store,
replace and delete one's own) and a gateway session's panel on its page (its mode, switched
here). These are pages (login, CSRF), served beside the others, not under ``/gateway/``,
whose handler runs no middleware."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.http import Http404, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from gateway.models import Exchange, GatewaySession, Mode
from gateway.provider_keys import PROVIDERS, delete_key, store_key
from sessions.access import changeable_session, may_change, may_see
from sessions.api.pages import page
from sessions.http import AuthenticatedHttpRequest
from sessions.models import AgentSession
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


@require_POST
def session_mode(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponseBase:
    """Switch a gateway session between observe and govern; its next request goes so. The
    panel answers with itself, redrawn."""
    session = changeable_session(request.user, pk)
    mode = request.POST.get("mode", "")
    if mode not in Mode.values:
        return HttpResponse("mode: choose observe or govern", status=422)
    updated = GatewaySession.objects.filter(session=session).update(mode=mode)
    if not updated:
        raise Http404("not a gateway session")
    return render(request, "gateway/_session.html", panel(request.user, session))


def panel(user: Any, session: AgentSession) -> dict[str, Any]:
    """What the session page shows of a gateway session: its mode, the session it went on
    from or started beside, those that went on from it (retries, rewinds) and those started
    beside it (sub-agents): the ones the user may see; its exchanges."""
    gateway = GatewaySession.objects.select_related("parent").get(session=session)
    children = [
        child
        for child in AgentSession.objects.filter(gateway__parent=session)
        .select_related("gateway")
        .order_by("created_at")
        if may_see(user, child)
    ]
    exchanges = Exchange.objects.filter(session=session)
    parent = gateway.parent
    return {
        "session": session,
        "gateway": gateway,
        "parent": parent if parent is not None and may_see(user, parent) else None,
        "branches": [child for child in children if child.gateway.branched_at is not None],
        "beside": [child for child in children if child.gateway.branched_at is None],
        "exchanges": exchanges.count(),
        "failed": exchanges.exclude(status=200).count(),
        "can_change": may_change(user, session),
        "modes": Mode.choices,
    }
