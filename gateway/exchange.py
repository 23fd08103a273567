"""One request through the gateway, from the client's body to the upstream's last byte.

1. The caller is authenticated and the body read (a refusal in the provider's shape, nothing
   stored, when either is wrong).
2. The request is threaded into its session and its new messages stored (``threads``).
3. The upstream gets the client's body (observe) or the session Governor's request (govern).
4. The answer is relayed as it arrives, byte for byte, while a reader beside it assembles the
   response; once the client has it whole, it is stored after the request and the exchange
   recorded (``Recordings``).

The gateway's own work is kept off the model's path where it can be. A client that asks for
observe mode (``X-Ctxhub-Mode: observe``) has its request forwarded at once and its answer
relayed as it comes, while the request is threaded beside them: nothing stored is waited for,
so that answer does not name its session. Otherwise the session comes first, for its mode and,
in govern mode, for the Governor's request. Every answer is recorded after the client has it
(``Recordings``); a conversation's next request in the process waits for that before it is
threaded (not before it is forwarded, in observe mode).

Storage never stands between an agent and its model in observe mode: when the database is away,
the request is forwarded all the same and nothing is recorded; the client's next request carries
the whole conversation again, so the session catches up then (only the lost exchange's usage
figures are missing). In govern mode a request that cannot be governed is forwarded as the
client sent it, and says so in the ``X-Ctxhub-Governed`` header.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    StreamingHttpResponse,
)
from django.utils import timezone

from gateway import chain, threads
from gateway.access import Caller, calling_then, upstream_headers
from gateway.errors import Refused, refusal
from gateway.formats import Format
from gateway.governing import GovernedRequest, governed_request, recovered
from gateway.live import LiveAnswer
from gateway.models import Exchange, Mode
from gateway.storage import stored, stored_apart
from gateway.threads import Thread
from gateway.upstream import Answer, UpstreamTimeout, UpstreamUnreachable, call
from gateway.wire import BodyError, StoredResponse, WireRequest
from gateway.wire.spans import TooMuchToRead, collector_paused, reading_at_most
from gateway.wire.sse import EventReader

log = logging.getLogger(__name__)

MODE_HEADER = "x-ctxhub-mode"
SESSION_HEADER = "x-ctxhub-session"


def request_headers(request: HttpRequest) -> dict[str, str]:
    return {name.lower(): value for name, value in request.headers.items()}


def _mode(headers: dict[str, str]) -> str | None:
    asked = headers.get(MODE_HEADER, "").strip().lower()
    if asked and asked not in Mode.values:
        raise Refused(400, "must be observe or govern", field="X-Ctxhub-Mode")
    return asked or None


@dataclass
class Outcome:
    """How an exchange ended, as it is recorded."""

    wire: Any
    """The wire module the exchange speaks."""
    threading: asyncio.Future[Thread | None]
    """The request's session and new messages, stored (None: storage was away)."""
    governed: bool
    stream: bool
    status: int | None = None
    response: StoredResponse | None = None
    whole: bytes | None = None
    """A whole answer's bytes, read into ``response`` as it is recorded: after the client has
    them, off the event loop."""
    complete: bool = False
    error: str = ""


SENT: ContextVar[asyncio.Event | None] = ContextVar("gateway_sent", default=None)
"""Set by the handler (``gateway.asgi``) once a response's last byte is sent: its exchange is
recorded after that, so the storage work never competes with sending the answer."""


READ_IN_LOOP_CHARACTERS = 32 * 1024
"""The most of a body's JSON the event loop decodes itself (well under a millisecond): a body
with more new to the process is read on a thread. A conversation's next request is mostly what
the process read before, compared rather than decoded: it is read in the loop, saving the hop
to a thread and back."""
READ_IN_LOOP_BYTES = 2 * 2**20
"""A body larger than this is read on a thread, whatever is new in it: copying and comparing
it alone takes milliseconds."""


async def read_request(
    request: HttpRequest, fmt: Format, *, chained: bool = False
) -> tuple[Caller, WireRequest, list[str]]:
    """Who is calling, what they sent and (``chained``) its messages' chain hashes; Refused
    (with the field at fault) otherwise."""

    async def read() -> tuple[WireRequest, list[str]]:
        try:
            body = request.body
        except RequestDataTooBig:
            most = settings.CTXHUB_GATEWAY_MAX_BODY_BYTES
            raise Refused(413, f"the body is over {most:,} bytes, the most the hub takes") from None
        try:
            if len(body) <= READ_IN_LOOP_BYTES:
                try:
                    with reading_at_most(READ_IN_LOOP_CHARACTERS):
                        return _parsed(fmt, body, chained)
                except TooMuchToRead:
                    pass
            # The first request of a long conversation a process sees is read and hashed
            # whole (a 20,000-message body in about 0.7 s) while others relay.
            return await asyncio.to_thread(_parsed, fmt, body, chained)
        except BodyError as error:
            raise Refused(400, error.message, field=error.field or None) from None

    who, (parsed, hashes) = await calling_then(
        request_headers(request),
        read,
        needs_provider_key=not fmt.is_offline,
        provider=fmt.provider,
    )
    return who, parsed, hashes


def _parsed(fmt: Format, body: bytes, chained: bool) -> tuple[WireRequest, list[str]]:
    with collector_paused():
        parsed: WireRequest = fmt.wire.parse(body)
        return parsed, chain.hashes(parsed.wire, parsed.messages) if chained else []


async def handle(request: HttpRequest, fmt: Format) -> HttpResponseBase:
    headers = request_headers(request)
    try:
        asked_mode = _mode(headers)
        who, parsed, hashes = await read_request(request, fmt, chained=True)
    except Refused as refused:
        return refusal(fmt.provider, refused)
    earlier = RECORDINGS.continued_by(hashes)  # taken before this exchange's own can start
    threading = asyncio.ensure_future(
        _thread(who, parsed, fmt, headers, asked_mode, hashes, earlier)
    )
    RECORDINGS.threading(threading, hashes)
    governed = None
    observed = asked_mode == Mode.OBSERVE  # forwarded at once, threaded beside the model
    if not observed:
        thread = await threading
        if thread is not None and thread.governed:
            governed = await _governed(thread, parsed, fmt)
    outcome = Outcome(fmt.wire, threading, governed is not None, parsed.stream)
    try:
        upstream_body = parsed.text.encode() if governed is None else governed.body
        answer = await _call(fmt, parsed, upstream_body, headers, who)
        if governed is not None and answer.status in OVERFLOW_STATUSES:
            thread = threading.result()
            assert thread is not None
            answer = await _recover(answer, thread, parsed, fmt, governed, headers, who)
    except UpstreamTimeout as exc:
        outcome.error = f"the upstream did not answer in time ({exc})"
        RECORDINGS.start(outcome, hashes)
        return refusal(fmt.provider, Refused(504, outcome.error))
    except UpstreamUnreachable as exc:
        outcome.error = f"the upstream could not be reached ({exc})"
        RECORDINGS.start(outcome, hashes)
        return refusal(fmt.provider, Refused(502, outcome.error))
    outcome.status = answer.status
    extra = {"X-Ctxhub-Governed": "yes" if governed is not None else "no"}
    if not observed and (thread := threading.result()) is not None:
        extra["X-Ctxhub-Session"] = str(thread.session.pk)
    streamed = answer.status < 400 and "text/event-stream" in (answer.header("content-type") or "")
    if streamed:
        relayed = StreamingHttpResponse(
            _relay(answer, fmt, outcome, parsed.model, hashes), status=answer.status
        )
        copy_headers(relayed, answer, extra)
        return relayed
    try:
        body = b"".join([chunk async for chunk in answer.chunks])
    except (UpstreamTimeout, UpstreamUnreachable) as exc:
        outcome.error = f"the upstream's answer broke off ({exc})"
        RECORDINGS.start(outcome, hashes)
        return refusal(fmt.provider, Refused(502, outcome.error))
    if answer.status < 400:
        outcome.whole, outcome.complete = body, True
    else:
        outcome.error = who.scrubbed(body.decode("utf-8", "replace"))[:2000]
    RECORDINGS.start(outcome, hashes)
    response = HttpResponse(body, status=answer.status)
    copy_headers(response, answer, extra)
    return response


async def _thread(
    who: Caller,
    parsed: WireRequest,
    fmt: Format,
    headers: dict[str, str],
    asked_mode: str | None,
    hashes: list[str],
    earlier: list[asyncio.Future[Any]],
) -> Thread | None:
    """The request's session, its new messages stored, once the ``earlier`` exchanges it
    continues are recorded; None when storage is away. (Apart from the request's thread: in
    observe mode the response may be gone before it starts.)"""
    if earlier:
        await asyncio.wait(earlier)
    try:
        return await stored_apart(
            threads.thread,
            who.key.owner_id,
            parsed,
            hashes,
            provider=fmt.provider,
            named=headers.get(SESSION_HEADER, "").strip()[:200] or None,
            asked_mode=asked_mode,
        )
    except DatabaseError as exc:
        log.warning("gateway: request forwarded unrecorded, storage is away: %s", exc)
        return None


async def _governed(thread: Thread, parsed: WireRequest, fmt: Format) -> GovernedRequest | None:
    """The Governor's request; None (the upstream gets the client's own) when storage is
    away."""
    try:
        return await stored(governed_request, thread.session, parsed, fmt.wire)
    except DatabaseError as exc:
        log.warning(
            "gateway: session %s forwarded ungoverned, storage is away: %s", thread.session.pk, exc
        )
        return None


OVERFLOW_STATUSES = frozenset({400, 413})
"""The statuses a provider refuses a too-long request with."""


async def _recover(
    refused: Answer,
    thread: Thread,
    parsed: WireRequest,
    fmt: Format,
    governed: GovernedRequest,
    headers: dict[str, str],
    who: Caller,
) -> Answer:
    """The answer to the request shrunk once, when ``refused`` says it was too long; else
    ``refused`` itself, as it came."""
    body = b"".join([chunk async for chunk in refused.chunks])
    error = body.decode("utf-8", "replace")
    retry = await stored(recovered, thread.session, parsed, fmt.wire, governed, error)
    if retry is None:
        return refused.replayed(body)
    log.info("gateway: session %s refused as too long, sent again shrunk", thread.session.pk)
    return await _call(fmt, parsed, retry, headers, who)


async def _call(
    fmt: Format, parsed: WireRequest, body: bytes, headers: dict[str, str], who: Caller
) -> Answer:
    if fmt.is_offline:
        return fmt.offline(parsed)
    return await call(fmt.base_url + fmt.path, body, upstream_headers(headers, who))


def copy_headers(response: HttpResponseBase, answer: Answer, extra: dict[str, str]) -> None:
    for name, value in answer.headers:
        response[name] = value
    for name, value in extra.items():
        response[name] = value


async def _relay(
    answer: Answer, fmt: Format, outcome: Outcome, model: str, hashes: list[str]
) -> AsyncIterator[bytes]:
    """The upstream's bytes, as they come; the response assembled beside them is stored once
    the stream ends. A client that goes away closes the upstream call; what the model had
    answered by then is kept on the exchange, not in the log (the client never saw it whole,
    and its next request will not carry it)."""
    reader = EventReader()
    assembler = fmt.wire.StreamAssembler()
    live = LiveAnswer(outcome.threading, model)
    try:
        async for chunk in answer.chunks:
            try:
                yield chunk  # read after it is on its way to the client
            finally:
                for event in reader.feed(chunk):
                    assembler.feed(event)
            await live.progressed(assembler)
        outcome.complete = True
    except (UpstreamTimeout, UpstreamUnreachable) as exc:
        outcome.error = f"the upstream's stream broke off ({exc})"
    finally:
        # Cancelled when the client went away (``gateway.asgi``): the upstream call is closed
        # and what came is recorded all the same.
        if not outcome.complete and not outcome.error:
            outcome.error = "the client went away mid-stream"
        outcome.response = assembler.result()
        await asyncio.shield(answer.close())
        RECORDINGS.start(outcome, hashes, live)


class Recordings:
    """The exchanges under way in this process, by the conversation they end: the request
    being threaded into its session, then the answer being recorded after the client had it.
    The conversation's next request waits for its previous exchange's, so that it is threaded
    after the request before it (not beside it, which would fork the session) and after the
    answer is stored (not stored twice). A request that reaches another process first stores
    the answer as the client sent it back; the recording then finds the session moved on and
    leaves the log alone."""

    def __init__(self) -> None:
        self._running: dict[tuple[int, str], asyncio.Future[Any]] = {}

    def threading(self, task: asyncio.Future[Thread | None], hashes: Sequence[str]) -> None:
        """``task`` threads a request whose chain is ``hashes`` into its session: waited for
        by the requests that continue it until its recording starts (which waits for it)."""
        self._track(task, hashes)

    def start(
        self, outcome: Outcome, hashes: Sequence[str], live: LiveAnswer | None = None
    ) -> None:
        """Records ``outcome`` (of a request whose chain is ``hashes``) in the background."""
        self._track(asyncio.ensure_future(_record(outcome, SENT.get(), live)), hashes)

    def _track(self, task: asyncio.Future[Any], hashes: Sequence[str]) -> None:
        key = (len(hashes), hashes[-1] if hashes else "")
        self._running[key] = task  # a retry of the same request: the newer one is waited for
        task.add_done_callback(lambda done: self._forget(key, done))

    def _forget(self, key: tuple[int, str], done: asyncio.Future[Any]) -> None:
        if self._running.get(key) is done:
            del self._running[key]

    def continued_by(self, hashes: Sequence[str]) -> list[asyncio.Future[Any]]:
        """The exchanges under way (threaded or recorded) that ``hashes`` continues (a retry:
        of the same request too). Taken as the request arrives: its own exchange must not be
        among them (an answer at hand, as the offline model gives, is recorded before the
        request's threading has begun)."""
        return [
            task
            for (length, end), task in self._running.items()
            if 0 < length <= len(hashes) and hashes[length - 1] == end
        ]

    async def idle(self) -> None:
        """Waits until no exchange is under way in this process (``benchmarks/bench_gateway.py``
        counts a request's recording as part of its work)."""
        while self._running:
            await asyncio.wait(list(self._running.values()))


RECORDINGS = Recordings()


async def _record(
    outcome: Outcome, sent: asyncio.Event | None, live: LiveAnswer | None = None
) -> None:
    if sent is not None:
        await sent.wait()
    thread = await outcome.threading
    if thread is not None:
        try:
            await stored_apart(_write, outcome, thread)
        except DatabaseError as exc:
            log.warning("gateway: exchange of session %s not recorded: %s", thread.session.pk, exc)
    if live is not None:
        await live.ended()


def _write(outcome: Outcome, thread: Thread) -> None:
    response = outcome.response
    if outcome.whole is not None:
        response = outcome.wire.response(outcome.whole.decode("utf-8", "replace"))
    seq = None
    if response is not None and outcome.complete:
        seq = threads.store_response(thread, outcome.wire.response_items(response))
    Exchange.objects.create(
        session=thread.session,
        governed=outcome.governed,
        stream=outcome.stream,
        new_messages=thread.new,
        status=outcome.status,
        response_seq=seq,
        error=outcome.error,
        unfinished=response.raw if response is not None and not outcome.complete else "",
        usage=response.extra.get("usage", {}) if response is not None else {},
        finished_at=timezone.now(),
    )
