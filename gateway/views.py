"""The providers' endpoints on the hub. Each is a thin async view: the work is in
``gateway.exchange``. They take no cookie and no CSRF token: a client authenticates with its
API keys (``gateway.access``), as it does with the provider."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from gateway import exchange, questions
from gateway.formats import ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES


@csrf_exempt
@login_not_required
@require_POST
async def anthropic_messages(request: HttpRequest) -> HttpResponseBase:
    return await exchange.handle(request, ANTHROPIC_MESSAGES)


@csrf_exempt
@login_not_required
@require_POST
async def openai_chat_completions(request: HttpRequest) -> HttpResponseBase:
    return await exchange.handle(request, OPENAI_CHAT)


@csrf_exempt
@login_not_required
@require_POST
async def openai_responses(request: HttpRequest) -> HttpResponseBase:
    return await exchange.handle(request, OPENAI_RESPONSES)


@csrf_exempt
@login_not_required
@require_POST
async def anthropic_count_tokens(request: HttpRequest) -> HttpResponseBase:
    return await questions.count_tokens(request, ANTHROPIC_MESSAGES)


@csrf_exempt
@login_not_required
@require_GET
async def anthropic_models(request: HttpRequest, model: str | None = None) -> HttpResponseBase:
    return await questions.models(request, ANTHROPIC_MESSAGES, "/v1/models", model)


@csrf_exempt
@login_not_required
@require_GET
async def openai_models(request: HttpRequest, model: str | None = None) -> HttpResponseBase:
    return await questions.models(request, OPENAI_CHAT, "/models", model)
