"""The live socket of one session: forwards the session group's HTML pushes to the browser."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from sessions.access import may_see
from sessions.models import AgentSession


@database_sync_to_async
def _visible_session(user: Any, session_id: str) -> AgentSession | None:
    """The session if ``user`` may watch it (its owner, or staff: see ``sessions.access``)."""
    if not user.is_authenticated:
        return None
    session = AgentSession.objects.filter(pk=session_id).first()
    return session if session is not None and may_see(user, session) else None


class SessionConsumer(AsyncWebsocketConsumer):
    group_name: str | None = None

    async def connect(self) -> None:
        session = await _visible_session(
            self.scope["user"], self.scope["url_route"]["kwargs"]["pk"]
        )
        if session is None:
            # Closing before accepting refuses the handshake (HTTP 403): nothing leaks about
            # whether the session exists.
            await self.close()
            return
        self.group_name = session.group_name
        await self.channel_layer.group_add(self.group_name, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group_name is not None:
            await self.channel_layer.group_discard(self.group_name, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """The socket is push-only; anything a client sends is ignored."""

    async def html_push(self, event: dict[str, Any]) -> None:
        await self.send(text_data=event["html"])
