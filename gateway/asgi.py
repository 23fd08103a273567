"""The gateway's own ASGI handler: its views run in the server's event loop, and a client that
goes away cancels its stream.

Pages go through ``config.asgi.FinishingASGIHandler``, which runs each request in one hop on a
thread and never cancels it: right for short synchronous views, wrong for a request that relays
a model's answer for minutes. Here the async view runs in the event loop; its storage work hops
to the request's own thread (``gateway.storage``), a slot and a pooled connection at a time.
While a stream is sent, the handler listens for the client's disconnect and cancels the relay,
which closes the upstream call (``gateway.exchange``). No middleware runs: a gateway request
carries API keys, not cookies, and its answers are the provider's.
"""

from __future__ import annotations

import asyncio
import io
import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import Any, BinaryIO

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core.exceptions import RequestAborted, RequestDataTooBig
from django.core.handlers.asgi import ASGIHandler, ASGIRequest, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.http import HttpResponseBase, JsonResponse
from django.urls import Resolver404, resolve, set_script_prefix

from gateway.exchange import SENT
from sessions.telemetry import served

log = logging.getLogger(__name__)


class GatewayRequest(ASGIRequest):
    """A gateway request, whose body may be as large as the provider takes
    (``CTXHUB_GATEWAY_MAX_BODY_BYTES``), not as the hub's other endpoints
    (``CTXHUB_MAX_UPLOAD_BYTES``); ``RequestDataTooBig`` past that."""

    @property
    def body(self) -> bytes:
        if not hasattr(self, "_body"):
            self._body = self.read()
        if len(self._body) > settings.CTXHUB_GATEWAY_MAX_BODY_BYTES:
            raise RequestDataTooBig("the body is over CTXHUB_GATEWAY_MAX_BODY_BYTES")
        return self._body


class GatewayHandler(ASGIHandler):
    request_class = GatewayRequest

    def __init__(self) -> None:
        BaseHandler.__init__(self)  # no middleware to load
        self._idle_threads: list[ThreadPoolExecutor] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        thread = self._idle_threads.pop() if self._idle_threads else ThreadPoolExecutor(1)
        try:
            async with ThreadSensitiveContext(executor=thread):
                await self._handle(scope, receive, send)
        finally:
            self._idle_threads.append(thread)

    async def read_body(self, receive: Any) -> BinaryIO:
        """The body, in memory. (Django's spools a body over ``FILE_UPLOAD_MAX_MEMORY_SIZE`` to
        disk, with a hop to a thread for every chunk written after that: a long conversation's
        body spent more time there than in being read.) What is past the most a request may
        carry is read and dropped, a byte of it kept, so that reading the body refuses it
        (``GatewayRequest``)."""
        keep = settings.CTXHUB_GATEWAY_MAX_BODY_BYTES + 1
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestAborted()
            if size < keep:
                chunk = message.get("body", b"")[: keep - size]
                chunks.append(chunk)
                size += len(chunk)
            if not message.get("more_body", False):
                return io.BytesIO(b"".join(chunks))

    async def _handle(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        with closing(body_file):
            set_script_prefix(get_script_prefix(scope))
            # Django's request-started and request-finished signals are not sent: what their
            # receivers tidy up (a thread's database connection, above all) the gateway never
            # leaves behind, since its storage work hands its connection back as it ends
            # (``gateway.storage``); and each would cost a hop to a thread and back.
            request, refused = self.create_request(scope, body_file)
            if request is None:
                assert refused is not None  # Django gives a refusal when no request
                await self._send(refused, receive, send)
                return
            sent = asyncio.Event()
            SENT.set(sent)
            try:
                with served(request) as answered:  # a span to the last byte sent
                    response = await _view(request)
                    answered(response)
                    await self._send(response, receive, send)
            finally:
                sent.set()

    async def _send(self, response: HttpResponseBase, receive: Any, send: Any) -> None:
        if not response.streaming:
            await self.send_response(response, send)
            return
        sending = asyncio.ensure_future(self.send_response(response, send))
        gone = asyncio.ensure_future(_disconnected(receive))
        await asyncio.wait({sending, gone}, return_when=asyncio.FIRST_COMPLETED)
        for task in (sending, gone):
            task.cancel()
        await asyncio.gather(sending, gone, return_exceptions=True)


async def _disconnected(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _view(request: Any) -> HttpResponseBase:
    try:
        match = request.resolver_match = resolve(request.path_info)
    except Resolver404:
        return JsonResponse(
            {"error": {"message": f"no gateway endpoint {request.path}"}}, status=404
        )
    try:
        response: HttpResponseBase = await match.func(request, *match.args, **match.kwargs)
    except Exception:
        # No middleware turns it into a page here: the client gets an error its SDK reads.
        log.exception("gateway: %s failed", request.path)
        error = {"type": "api_error", "message": "the hub failed on this request"}
        return JsonResponse({"type": "error", "error": error}, status=500)
    return response
