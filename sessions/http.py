"""Typed requests: what the middleware stack guarantees views receive."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class AuthenticatedHttpRequest(HttpRequest):
    """Every page requires login (LoginRequiredMiddleware), so views see a real user."""

    user: User
    htmx: HtmxDetails
