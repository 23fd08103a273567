"""Calling the provider: its answer's status, headers and bytes, relayed as they arrive.

One pooled ``httpx.AsyncClient`` per event loop (a server process has one) carries every call,
so a turn does not pay a new TLS handshake. The body is asked for unencoded: the gateway reads
the stream it relays, and relays exactly what it read.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import httpx
from django.conf import settings

# Hop-by-hop headers (RFC 9110) and what the gateway sets itself never pass in either direction.
_NOT_FORWARDED = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",
        "proxy-connection",
        "accept-encoding",
        "content-encoding",
        "cookie",
    }
)


@dataclass
class Answer:
    """The upstream's answer: read ``chunks`` to the end (or ``close`` it) once."""

    status: int
    headers: list[tuple[str, str]]
    chunks: AsyncIterator[bytes]
    close: Callable[[], Awaitable[None]]

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key.lower() == name), None)

    def replayed(self, body: bytes) -> Answer:
        """This answer again, its body already read."""
        return made(self.status, self.headers, [body])


def made(status: int, headers: list[tuple[str, str]], chunks: list[bytes]) -> Answer:
    """An answer of bytes at hand (one read already, or the offline model's)."""

    async def relay() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    async def closed() -> None:
        return None

    return Answer(status, headers, relay(), closed)


class UpstreamTimeout(Exception):
    """The upstream did not answer (or stopped answering) within the timeout."""


class UpstreamUnreachable(Exception):
    """The upstream could not be reached at all."""


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)


def _client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        timeout = settings.CTXHUB_GATEWAY_TIMEOUT_SECONDS
        client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10)),
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
        )
        _clients[loop] = client
    return client


def forwarded(headers: dict[str, str], drop: frozenset[str] = frozenset()) -> dict[str, str]:
    """The client's headers the upstream gets: all but hop-by-hop ones, the gateway's own
    (``x-ctxhub-*``) and ``drop``."""
    return {
        name: value
        for name, value in headers.items()
        if name.lower() not in _NOT_FORWARDED
        and not name.lower().startswith("x-ctxhub-")
        and name.lower() not in drop
    }


def answered(headers: httpx.Headers) -> list[tuple[str, str]]:
    """The upstream's headers the client gets."""
    return [
        (name, value) for name, value in headers.multi_items() if name.lower() not in _NOT_FORWARDED
    ]


async def call(url: str, body: bytes, headers: dict[str, str], *, method: str = "POST") -> Answer:
    """POST ``body`` to ``url`` (or ``method`` it) and return as soon as the status and
    headers are in."""
    client = _client()
    request = client.build_request(
        method, url, content=body or None, headers={**headers, "accept-encoding": "identity"}
    )
    try:
        response = await client.send(request, stream=True)
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout(str(exc) or "no answer") from exc
    except httpx.TransportError as exc:
        raise UpstreamUnreachable(str(exc) or type(exc).__name__) from exc

    async def chunks() -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(str(exc) or "the stream stalled") from exc
        except httpx.TransportError as exc:
            raise UpstreamUnreachable(str(exc) or type(exc).__name__) from exc
        finally:
            await response.aclose()

    return Answer(response.status_code, answered(response.headers), chunks(), response.aclose)
