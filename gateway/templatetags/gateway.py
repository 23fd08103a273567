"""The gateway's part of a session's page: ``{% gateway_panel session %}`` draws its panel when
an agent made the session through the gateway, and nothing otherwise."""

from __future__ import annotations

from typing import Any

from django import template
from django.template.loader import render_to_string

from gateway.models import GatewaySession
from gateway.pages import panel
from sessions.models import AgentSession

register = template.Library()


@register.simple_tag(takes_context=True)
def gateway_panel(context: template.Context, session: AgentSession) -> str:
    if not GatewaySession.objects.filter(session=session).exists():
        return ""
    request: Any = context["request"]
    return render_to_string("gateway/_session.html", panel(request.user, session), request=request)
