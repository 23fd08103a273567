"""The governed context of a session, and governance of a history sent whole (nothing stored)."""

from __future__ import annotations

from uuid import UUID

from django.http import HttpRequest, HttpResponse
from ninja import Router
from ninja.params import P, QueryEx
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from ctxhub.governance import ContextReport, govern
from sessions import services
from sessions.api.access import need, owned_session, parse_messages, parse_policy
from sessions.api.schemas import ERRORS, ContextOut, GovernIn

router = Router()


def _context_answer(messages: list[ModelMessage], report: ContextReport) -> HttpResponse:
    """The governed context as ``ContextOut`` JSON, serialised by pydantic's core in one pass:
    the largest answer the API gives, and an agent asks for it before every model request."""
    body = b"".join(
        (
            b'{"messages":',
            ModelMessagesTypeAdapter.dump_json(messages),
            b',"report":',
            report.__pydantic_serializer__.to_json(report),
            b"}",
        )
    )
    return HttpResponse(body, content_type="application/json")


@router.get(
    "/sessions/{session_id}/context", response={200: ContextOut, **ERRORS}, tags=["context"]
)
def context(
    request: HttpRequest,
    session_id: UUID,
    model: QueryEx[str | None, P(max_length=200)] = None,
    max_tokens: QueryEx[int | None, P(ge=1_000, le=10_000_000)] = None,
) -> HttpResponse:
    """Exactly what to send next, and why (the ContextReport). ``model`` counts with another
    model's tokenizer; ``max_tokens`` governs against a smaller window."""
    session = owned_session(request, session_id, "read")
    policy = None
    if max_tokens is not None:
        overrides = {**(session.policy or {}), "context_window": max_tokens}
        policy = parse_policy(overrides, field="max_tokens")
    found = services.governed_context(session, policy=policy, model=model)
    return _context_answer(found.messages, found.report)


@router.post("/govern", response={200: ContextOut, **ERRORS}, tags=["context"])
def govern_stateless(request: HttpRequest, body: GovernIn) -> HttpResponse:
    """Govern a history sent whole (nothing is stored): for agents that keep their own."""
    need(request, "read")
    messages = parse_messages(body.messages)
    governed = govern(messages, parse_policy(body.policy), model=body.model)
    return _context_answer(governed.messages, governed.report)
