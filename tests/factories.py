"""Sessions for the hub's tests (their messages are built with ``tests.messages``)."""

from __future__ import annotations

from typing import Any

from sessions.models import AgentSession


def make_session(
    owner: Any, title: str = "Fix the build", model: str = "openai:gpt-4o", **kw: Any
) -> AgentSession:
    return AgentSession.objects.create(owner=owner, title=title, model=model, **kw)
