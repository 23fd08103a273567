"""The live socket of one session: forwards the session group's HTML pushes to the browser.

Group memberships live in the channel layer (Redis), which can lose them while the socket
stays open: a flush, a failover, keys evicted. So each socket also belongs to a group of its
own and sends itself a heartbeat through it every ``CTXHUB_SOCKET_HEARTBEAT_SECONDS``; one
that does not come back by the next beat means the memberships are gone, and the socket is
closed with 1012 (service restart), which the page answers by reconnecting: the new socket
joins again, and the page catches up on what it missed from the database.

The same beat keeps the session marked as watched (``sessions.live``): pushes are rendered only
for sessions a socket watches."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from uuid import uuid4

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from sessions import live, revocation
from sessions.access import may_see
from sessions.models import AgentSession

log = logging.getLogger(__name__)


@database_sync_to_async
def _visible_session(user: Any, session_id: str) -> AgentSession | None:
    """The session if ``user`` may watch it (its owner, or staff: see ``sessions.access``)."""
    if not user.is_authenticated:
        return None
    session = AgentSession.objects.filter(pk=session_id).first()
    return session if session is not None and may_see(user, session) else None


# The consumer method a heartbeat reaches, and the close code pages reconnect after.
HEARTBEAT = "socket.heartbeat"
SERVICE_RESTART = 1012
# Tries at joining the groups before a handshake is refused (the layer is away).
JOIN_ATTEMPTS = 4


class SessionConsumer(AsyncWebsocketConsumer):
    groups_joined: tuple[str, ...] = ()
    watching: object = None
    beating: asyncio.Task[None] | None = None
    heard = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A group of this socket alone: group names allow no "!", which channel names hold.
        self.heartbeat_group = f"socket.{uuid4().hex}"

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
        groups = [session.group_name, revocation.user_group(user.pk), self.heartbeat_group]
        session_key = getattr(self.scope.get("session"), "session_key", None)
        if session_key:
            groups.append(revocation.login_group(session_key))
        self.groups_joined = tuple(groups)
        self.watching = session.pk
        # Marked before joining: an append that saw no mark committed before this socket
        # opened, and the page reads it when it catches up.
        await self._mark_watched()
        if not await self._join(groups):
            # Refused, not a server error: the page tries again a moment later.
            await self.close()
            return
        await self.accept()
        self.beating = asyncio.create_task(self._beat())

    async def _join(self, groups: list[str]) -> bool:
        """Join ``groups``, trying again a few times: after Redis restarts, the layer's pooled
        connections are dead and the first command on one fails before a new one is made."""
        for attempt in range(JOIN_ATTEMPTS):
            try:
                for group in groups:
                    await self.channel_layer.group_add(group, self.channel_name)
                return True
            except Exception as error:
                log.warning("joining %s failed (attempt %d): %s", groups[0], attempt + 1, error)
                await asyncio.sleep(0.2 * (attempt + 1))
        return False

    async def _mark_watched(self) -> None:
        try:
            await live.mark_watched(self.watching)
        except Exception as error:  # the cache is away: pushes are tried unmarked meanwhile
            log.warning("session %s not marked as watched: %s", self.watching, error)

    async def disconnect(self, code: int) -> None:
        if self.beating is not None:
            self.beating.cancel()
        for group in self.groups_joined:
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except Exception as error:  # the layer is away: its groups expire on their own
                log.warning("leaving %s failed: %s", group, error)

    async def _beat(self) -> None:
        interval = settings.CTXHUB_SOCKET_HEARTBEAT_SECONDS
        while True:
            self.heard = False
            await self._mark_watched()
            try:
                await self.channel_layer.group_send(self.heartbeat_group, {"type": HEARTBEAT})
            except Exception as error:
                log.warning("socket heartbeat not sent: %s", error)
            await asyncio.sleep(interval)
            if not self.heard:
                log.info(
                    "socket %s lost its groups: its page is asked to reconnect", self.channel_name
                )
                await self.close(code=SERVICE_RESTART)
                return

    async def socket_heartbeat(self, event: dict[str, Any]) -> None:
        self.heard = True

    async def socket_revoke(self, event: dict[str, Any]) -> None:
        await self.close(code=revocation.REVOKED)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """The socket is push-only; anything a client sends is ignored."""

    async def html_push(self, event: dict[str, Any]) -> None:
        await self.send(text_data=event["html"])
