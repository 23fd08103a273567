"""The governed context of a session, and governance of a history sent whole (nothing stored)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.http import HttpRequest, HttpResponse
from ninja import Router
from ninja.params import P, QueryEx
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_core import to_json

from sessions import services
from sessions.api.access import need, owned_session, parse_governor, parse_messages, parse_policy
from sessions.api.schemas import ERRORS, ContextOut, GovernIn, GovernOut

router = Router()


def _context_answer(messages: bytes, report: bytes, **more: Any) -> HttpResponse:
    """The governed context as ``ContextOut`` JSON (with ``more`` fields) from its messages and
    report as JSON: the largest answer the API gives, and an agent asks for it before every
    model request (a request continued from the last one is spliced from that one's JSON,
    never parsed: ``sessions.services.continuing``)."""
    body = b"".join(
        (
            b'{"messages":',
            messages,
            b',"report":',
            report,
            *(b"," + to_json(key) + b":" + to_json(value) for key, value in more.items()),
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
    """Exactly what to send next, and why (the ContextReport). The request is recorded as sent:
    the session's Governor moves on from it, and the dashboard's trajectory shows it. ``model``
    counts with another model's tokenizer and ``max_tokens`` governs against a smaller window:
    a preview of what they would send, as a new start, recorded as nothing."""
    session = owned_session(request, session_id, "read")
    policy = None
    if max_tokens is not None:
        overrides = {**(session.policy or {}), "context_window": max_tokens}
        policy = parse_policy(overrides, field="max_tokens")
    if policy is None and model in (None, session.model):
        found = services.send_context(session)
    else:
        found = services.governed_context(session, policy=policy, model=model)
    return _context_answer(found.messages_json(), found.report_json())


@router.post("/govern", response={200: GovernOut, **ERRORS}, tags=["context"])
def govern_stateless(request: HttpRequest, body: GovernIn) -> HttpResponse:
    """Govern a history sent whole (nothing is stored): for agents that keep their own. Send
    back the ``state`` of the previous answer and the request keeps the prompt cache warm.
    ``tools`` are counted into the request for this call."""
    need(request, "read")
    messages = parse_messages(body.messages)
    governor = parse_governor(body.state, parse_policy(body.policy), body.model)
    governed = governor.govern(messages, tool_definitions=[tool.as_json() for tool in body.tools])
    report = governed.report
    return _context_answer(
        ModelMessagesTypeAdapter.dump_json(governed.messages),
        report.__pydantic_serializer__.to_json(report),
        state=governor.state(),
        acted=governed.acted,
    )
