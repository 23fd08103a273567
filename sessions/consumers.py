"""The live socket of one session: forwards the session group's HTML pushes to the browser."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from sessions import revocation
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
    groups_joined: tuple[str, ...] = ()

    async def connect(self) -> None:
        user: Any = self.scope["user"]
        session = await _visible_session(user, self.scope["url_route"]["kwargs"]["pk"])
        if session is None:
            # Closing before accepting refuses the handshake (HTTP 403): nothing leaks about
            # whether the session exists.
            await self.close()
            return
        # The session's pushes, and word to close when the watcher may no longer watch
        # (``sessions.revocation``): a logout of this login, or a change of the user's rights.
        groups = [session.group_name, revocation.user_group(user.pk)]
        session_key = getattr(self.scope.get("session"), "session_key", None)
        if session_key:
            groups.append(revocation.login_group(session_key))
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined = tuple(groups)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def socket_revoke(self, event: dict[str, Any]) -> None:
        await self.close(code=revocation.REVOKED)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """The socket is push-only; anything a client sends is ignored."""

    async def html_push(self, event: dict[str, Any]) -> None:
        await self.send(text_data=event["html"])
