"""ASGI entry point: HTTP through Django (static files included), websockets through Channels."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import Any

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted, SuspiciousFileOperation
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.http import FileResponse, Http404
from django.urls import set_script_prefix

from config.telemetry import setup_tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Django must be set up before anything that imports models.
django.setup(set_prefix=False)
# Before the workers fork (gunicorn --preload): each restarts the batch's thread after the fork.
setup_tracing("web")


class FinishingASGIHandler(ASGIHandler):
    """Django's handler, except that a request runs its middleware and view in one go, on a
    thread kept from earlier requests, and that a client going away does not cancel it.

    Every view here is synchronous (the ORM), as is most of Django's middleware. Django's
    handler keeps the middleware chain asynchronous and hops to a thread and back for each
    middleware's request and response hook, then for the view, and for the request-started
    and request-finished signals: over a dozen hops per request, each a wake-up of the thread
    and a hand-over of the interpreter lock. Here the signals, the whole chain and the view
    run in one hop. Django also starts a new thread for every request (so everything a thread
    keeps, a client or a connection object, was made anew each time); here a request borrows
    one of the threads that earlier requests ran on.

    Django listens for the client going away and cancels the request. Cancelling stops
    waiting for the thread that runs the view, not the thread: whatever database connection
    that thread then takes is never handed back to the pool, and after a few dropped requests
    (clients that time out under load) every request of the process waits for a connection
    that will not come. Here nothing listens: the request finishes and hands its connection
    back as any other; its answer goes nowhere. No view here streams or long-polls.
    """

    # An answer is written in pieces of this size: most in one (Django's own: 64 KB).
    chunk_size = 2**20

    def __init__(self, middleware: list[str] | None = None) -> None:
        BaseHandler.__init__(self)
        if middleware is None:
            self.load_middleware(is_async=False)
        else:
            # Django builds a chain from settings.MIDDLEWARE alone: it is shown another list
            # while this one is built, once, as the server starts.
            pages = settings.MIDDLEWARE
            settings.MIDDLEWARE = middleware
            try:
                self.load_middleware(is_async=False)
            finally:
                settings.MIDDLEWARE = pages
        self._idle_threads: list[ThreadPoolExecutor] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django serves HTTP here, not {scope['type']}")
        # One thread per request at a time, as Django's own context gives, but a kept one.
        thread = self._idle_threads.pop() if self._idle_threads else ThreadPoolExecutor(1)
        try:
            async with ThreadSensitiveContext(executor=thread):
                await self.handle(scope, receive, send)
        finally:
            self._idle_threads.append(thread)

    async def handle(self, scope: Any, receive: Any, send: Any) -> None:
        """Django's ``handle`` in one hop. A response is closed (the request-finished signal,
        which hands the database connection back to the pool) in the same hop when the view
        returns it complete, before it is written to the socket; one that streams, once sent,
        as Django does."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        with closing(body_file):
            set_script_prefix(get_script_prefix(scope))
            response = await sync_to_async(self._respond, thread_sensitive=True)(scope, body_file)
            await self.send_response(response, send)
            if response.streaming:
                await sync_to_async(response.close, thread_sensitive=True)()

    def _respond(self, scope: Any, body_file: Any) -> Any:
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, refused = self.create_request(scope, body_file)
        response: Any = refused
        if request is not None:
            response = self.get_response(request)
            response._handler_class = self.__class__
            if isinstance(response, FileResponse):
                response.block_size = self.chunk_size
        if not response.streaming:
            response.close()
        return response


class RequestLimit:
    """At most ``limit`` HTTP requests of this process run at once; the others wait here, in
    the event loop, holding nothing.

    A request runs in a thread of its own and holds a database connection from its first
    query to its end. Let every request in at once and fifty threads share one interpreter
    lock: each runs at a fiftieth of the speed while holding its connection, and the pool runs
    dry. Below the pool's size, a request that runs always finds a connection (websockets and
    chat turns take the rest, briefly).
    """

    def __init__(self, app: Any, running: asyncio.Semaphore) -> None:
        self.app = app
        self.running = running

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        async with self.running:
            await self.app(scope, receive, send)


django_asgi_app = FinishingASGIHandler()
# The API's requests, keyed rather than logged in, through a shorter chain (API_MIDDLEWARE).
api_asgi_app = FinishingASGIHandler(settings.API_MIDDLEWARE)

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from config.slots import RUNNING  # noqa: E402
from ctxhub.governance.tokens import load_encoding  # noqa: E402
from gateway.asgi import GatewayHandler  # noqa: E402
from sessions.routing import websocket_urlpatterns  # noqa: E402
from sessions.services.collector import tune_for_serving  # noqa: E402

# What a process's first requests would load, loaded now: every view behind the URL conf and
# the tokenizers' rank files. Under gunicorn --preload (scripts/web.sh) this happens once, in
# the master, and each worker process forks warm. Not the channel layer: it names the process
# (its sockets' inbox in Redis) when made, and forked copies of one would share one inbox and
# take each other's pushes.
get_resolver().url_patterns  # noqa: B018
for encoding in ("o200k_base", "cl100k_base"):
    load_encoding(encoding)


class PathRouter:
    """Sends an HTTP request to the app of the first prefix its path starts with, else to
    ``default``."""

    def __init__(self, prefixes: dict[str, Any], default: Any) -> None:
        self.prefixes = prefixes
        self.default = default

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        app = next((a for p, a in self.prefixes.items() if path.startswith(p)), self.default)
        await app(scope, receive, send)


class StaticFiles(ASGIStaticFilesHandler):
    """Django's static files handler, answering 404 to a path that climbs out of the static
    directories (``/static/..%2f..%2fsettings.py``): Django refuses to open it, but its
    handler lets the refusal through as a server error."""

    def serve(self, request: Any) -> Any:
        try:
            return super().serve(request)
        except SuspiciousFileOperation:
            raise Http404("no such file") from None


application = ProtocolTypeRouter(
    {
        # One server for pages, static files and sockets: no separate static server to run.
        # The gateway's requests wait on the model for most of their time: they take a slot
        # only while they store or govern (gateway.storage), not for the whole stream.
        "http": PathRouter(
            {
                "/gateway/": GatewayHandler(),
                # Its browsable docs are a page, served with the pages' chain.
                "/api/v1/docs": RequestLimit(django_asgi_app, RUNNING),
                "/api/": RequestLimit(api_asgi_app, RUNNING),
            },
            RequestLimit(StaticFiles(django_asgi_app), RUNNING),
        ),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))  # type: ignore[arg-type]
        ),
    }
)

# Last: all loaded above is frozen out of the cycle collector, and shared by the forked workers.
tune_for_serving()
