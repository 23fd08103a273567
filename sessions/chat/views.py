"""The chat's views: send a prompt or a command, stop the turn, the turn fragment, a new chat.

A prompt starts a turn and is answered 202: the turn reaches every open page, this one
included, over the session's socket. A command answers with its note, for the page that typed it. A
refusal (a turn already running, an empty prompt, a command refused) is a 4xx with the reason
under the composer.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from ctxhub.governance.llm import OFFLINE_MODELS, OFFLINE_PREFIX
from sessions.access import changeable_session, visible_session
from sessions.chat import commands, runner, turns
from sessions.chat.agent import chat_tools
from sessions.chat.stream import render_turn
from sessions.http import AuthenticatedHttpRequest
from sessions.models import AgentSession
from sessions.services import Conflict, NotFound, ServiceError

MAX_TITLE = 200


def _refused(request: HttpRequest, error: ServiceError) -> HttpResponse:
    """The reason under the composer; whatever the service's field, the person typed it into
    the prompt."""
    status = 409 if isinstance(error, Conflict) else 404 if isinstance(error, NotFound) else 422
    context = {
        "message": error.message,
        "field": "prompt",
        "while_turn_runs": isinstance(error, turns.TurnRunning),
    }
    response = render(request, "sessions/_refused.html", context, status=status)
    response["HX-Retarget"] = "#chat-answer"
    response["HX-Reswap"] = "innerHTML"
    return response


@require_POST
async def send(request: HttpRequest, pk: UUID) -> HttpResponse:
    """A prompt (a turn starts) or a slash command (its note)."""
    user = await request.auser()
    session = await sync_to_async(changeable_session)(user, pk)
    text = request.POST.get("prompt", "")
    try:
        if commands.is_command(text):
            note = await sync_to_async(commands.run)(session, user, text)
            response = render(request, "sessions/_chat_note.html", {"note": note})
            response["HX-Retarget"] = "#chat-notes"
            response["HX-Reswap"] = "beforeend"
            response["HX-Trigger"] = "ctxhub-changed"
            return response
        await runner.start_turn(session, user, text)
    except ServiceError as error:
        return _refused(request, error)
    # Accepted: the turn reaches this page, as every other, over the socket.
    return HttpResponse(status=202)


@require_POST
async def stop(request: HttpRequest, pk: UUID) -> HttpResponse:
    """Stop the running turn; it ends as stopped, over the socket."""
    user = await request.auser()
    session = await sync_to_async(changeable_session)(user, pk)
    try:
        await runner.stop_turn(session)
    except ServiceError as error:
        return _refused(request, error)
    return HttpResponse(status=204)


@require_GET
def turn(request: AuthenticatedHttpRequest, pk: UUID) -> HttpResponse:
    """The latest turn as the database has it: a page catching up after a reconnect."""
    session = visible_session(request.user, pk)
    return HttpResponse(render_turn(turns.shown_turn(session), session_pk=session.pk))


def _model_error(model: str) -> str | None:
    if not model or len(model) > 200 or any(c.isspace() for c in model):
        return "model: a pydantic-ai model name such as openai:gpt-4o, without spaces"
    if model.startswith(OFFLINE_PREFIX) and model not in OFFLINE_MODELS:
        return f"model: {model!r} is not an offline model (offline:demo is)"
    if ":" not in model and not model.startswith(OFFLINE_PREFIX):
        return "model: give the provider too, as in openai:gpt-4o"
    return None


@require_POST
def new_chat(request: AuthenticatedHttpRequest) -> HttpResponse:
    """A new session to chat in, with the chosen model (the setting's by default)."""
    model = request.POST.get("model", "").strip() or settings.CTXHUB_CHAT_MODEL
    title = request.POST.get("title", "").strip()[:MAX_TITLE] or f"Chat with {model}"
    error = _model_error(model)
    if error is not None:
        return render(
            request, "sessions/_refused.html", {"message": error, "field": "model"}, status=422
        )
    session = AgentSession.objects.create(
        owner=request.user, title=title, model=model, chat_model=model
    )
    url = session.get_absolute_url() + "#chat"
    if request.htmx:
        return HttpResponse(status=204, headers={"HX-Redirect": url})
    return redirect(url)


EXAMPLE_PROMPTS = (
    "List the files of the repository",
    "Read README.md and tell me what this project does",
    "What is in docs/?",
    "Read docs/engine.md",
)
"""What a new chat offers to ask: each uses the agent's tools (the offline demo model answers
them all, listing and reading this repository)."""


def chat_context(session: AgentSession, *, empty: bool = False) -> dict[str, Any]:
    """What the session page needs to draw the chat; for an ``empty`` session, what a new
    chat offers: the agent's tools and a few prompts to start with (not on a session an agent
    drives through the gateway, whose conversation is the agent's)."""
    # A session the gateway started has its ``gateway`` record (the reverse of a one-to-one).
    starting = empty and not hasattr(session, "gateway")
    return {
        "turn_html": render_turn(turns.shown_turn(session), session_pk=session.pk),
        "chat_model": turns.chat_model_name(session),
        "start": {"tools": chat_tools(session), "prompts": EXAMPLE_PROMPTS} if starting else None,
    }
